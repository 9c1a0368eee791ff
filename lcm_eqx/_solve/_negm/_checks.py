"""Whether a regime is in NEGM's class (`NEGM.check`): its liquid and durable states, its
actions, its resources function and laws of motion, each failure a
`ModelInitializationError` naming the regime and what is missing."""

from __future__ import annotations

from ..._errors import outside_class
from ..._model._dag import transitive_inputs
from ..._model._plan import ModelPlan, RegimePlan


def check_negm(solver, model: ModelPlan, regime: RegimePlan) -> None:
    """`solver.check(model, regime)`: raises where `regime` is outside NEGM's class."""
    name = regime.name
    fail = outside_class(name, f"NEGM(liquid={solver.liquid!r}, durable={solver.durable!r})")

    if regime.is_terminal:
        fail("the regime is terminal (nothing to invert); use GridSearch().")
    if regime.aggregator is not None:
        fail(
            f"aggregator {type(regime.aggregator).__name__}: NEGM inverts the additive "
            "Euler equation u_c = β·E[R·V'_m]; solve this regime with GridSearch()."
        )
    if regime.taste_shocks:
        fail(
            "it has taste shocks; NEGM takes the exact max over keep/adjust. Solve it "
            "with GridSearch()."
        )
    for state in (solver.liquid, solver.durable):
        if state not in regime.states or regime.grids[state].is_discrete:
            fail(f"{state!r} is not a continuous state of the regime.")
        if regime.grids[state].varies_with_age:
            fail(f"the grid of {state!r} varies with age; NEGM needs one grid.")
    for action in (solver.consumption, solver.durable_choice):
        if action not in regime.actions or regime.grids[action].is_discrete:
            fail(f"{action!r} is not a continuous action of the regime.")
    if solver.adjust not in regime.actions or not regime.grids[solver.adjust].is_discrete:
        fail(f"{solver.adjust!r} is not a discrete action of the regime.")
    if regime.grids[solver.adjust].n_points != 2:
        fail(
            f"the action {solver.adjust!r} has {regime.grids[solver.adjust].n_points} "
            "categories; NEGM needs two (code 0 keep, code 1 adjust)."
        )
    for action in (solver.consumption, solver.durable_choice, solver.adjust):
        if regime.grids[action].batch_size > 0:
            fail(
                f"the action {action!r} has batch_size={regime.grids[action].batch_size}; "
                "NEGM searches no action grid. Splay the states, or the solver's "
                "savings and resources grids (their batch_size)."
            )
    own = {solver.liquid, solver.durable}
    for other in regime.states:
        if other not in own and not regime.grids[other].is_discrete:
            fail(f"it has a third continuous state {other!r}; NEGM handles two.")
    for other in regime.actions:
        if other not in {solver.consumption, solver.durable_choice, solver.adjust}:
            kind = "discrete" if regime.grids[other].is_discrete else "continuous"
            fail(f"it has another {kind} action {other!r}; NEGM handles adjust/keep only.")
    if solver.resources_function not in regime.helpers:
        fail(
            f"it has no function {solver.resources_function!r} (an adjuster's total "
            f"resources, of {solver.liquid!r} and {solver.durable!r})."
        )
    actions = {solver.consumption, solver.durable_choice, solver.adjust}
    resource_inputs = transitive_inputs(regime.helpers[solver.resources_function], regime.helpers)
    if resource_inputs & actions:
        fail(
            f"its function {solver.resources_function!r} depends on an action; total "
            "resources must be a function of the states."
        )
    utility_inputs = transitive_inputs(regime.utility, regime.helpers)
    if solver.consumption not in utility_inputs:
        fail(f"its utility does not depend on {solver.consumption!r}: no Euler equation.")
    if solver.liquid in utility_inputs:
        fail(f"its utility depends on the liquid state {solver.liquid!r}.")
    if regime.targets != (name,):
        fail(
            f"it can move to {regime.targets}; NEGM reads next period's keeper and "
            "adjuster of the regime itself only (no other regime, no mortality regime "
            "yet)."
        )
    assert regime.next_regime is not None
    continuous = own | actions
    if transitive_inputs(regime.next_regime, regime.helpers) & continuous:
        fail("its regime transition depends on a continuous variable or on adjusting.")
    if regime.drawn:
        fail(f"laws of motion read next period's draws of {regime.drawn}; not supported.")
    for state in (solver.liquid, solver.durable):
        if state not in regime.state_transitions:
            fail(f"it has no transition for {state!r}.")
    for state, transition in regime.state_transitions.items():
        if transition.per_target:
            fail(f"the law of motion of {state!r} is by target regime; not supported.")
        if state in own or transition.function is None:
            continue
        if transitive_inputs(transition.function, regime.helpers) & continuous:
            fail(
                f"the transition of the discrete state {state!r} depends on a continuous "
                "variable or on adjusting."
            )
    durable_law = regime.state_transitions[solver.durable].function
    if durable_law is None:
        fail(f"the next {solver.durable!r} has no law of motion of its own.")
    assert durable_law is not None
    if transitive_inputs(durable_law, regime.helpers) & {solver.liquid, solver.consumption}:
        fail(
            f"the next {solver.durable!r} depends on {solver.liquid!r} or "
            f"{solver.consumption!r}; it must be a function of the durable held."
        )
    discount = regime.helpers.get("discount_factor")
    if discount is not None and transitive_inputs(discount, regime.helpers) & continuous:
        fail("its function 'discount_factor' depends on a continuous variable.")
    if "borrowing_limit" in regime.helpers:
        fail("a function 'borrowing_limit' is not supported; the limit is savings[0].")
