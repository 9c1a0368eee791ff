"""Whether a regime is in DC-EGM's class (`DCEGM.check`): its savings state and action, its
utility and laws of motion, each failure a `ModelInitializationError` naming the regime
and what is missing."""

from __future__ import annotations

import numpy as np

from ..._errors import outside_class
from ..._model._dag import transitive_inputs
from ..._model._plan import ModelPlan, RegimePlan


def check_dcegm(solver, model: ModelPlan, regime: RegimePlan) -> None:
    """`solver.check(model, regime)`: raises where `regime` is outside DC-EGM's class."""
    name = regime.name
    fail = outside_class(name, f"DCEGM(state={solver.state!r}, action={solver.action!r})")

    if regime.is_terminal:
        fail("the regime is terminal (no continuation to invert); use GridSearch().")
    if regime.aggregator is not None:
        # Under an aggregator the first-order condition is not the additive
        # `u'(c) = β·E[R·V'_m]` that DC-EGM inverts: Epstein-Zin's involves the
        # certainty equivalent of next period's values, present bias the next solver's
        # policy (a generalised Euler equation). Neither is built.
        fail(
            f"aggregator {type(regime.aggregator).__name__} not supported by DCEGM yet: "
            "DC-EGM inverts the additive Euler equation u'(c) = β·E[R·V'_m], and under "
            "this aggregator the first-order condition is another one (with the "
            "certainty equivalent of next period's values, or the next solver's policy), "
            "which DCEGM does not build. Solve this regime with GridSearch() "
            "(Regime(..., solver=GridSearch()), or GridSearch(refine=...) for a "
            "continuous consumption off the grid)."
        )
    if solver.state not in regime.states or regime.grids[solver.state].is_discrete:
        fail(f"{solver.state!r} is not a continuous state of the regime.")
    if solver.action not in regime.actions or regime.grids[solver.action].is_discrete:
        fail(f"{solver.action!r} is not a continuous action of the regime.")
    for other in regime.states:
        if other != solver.state and not regime.grids[other].is_discrete:
            fail(f"it has a second continuous state {other!r}; DC-EGM handles one.")
    for other in regime.actions:
        if other != solver.action and not regime.grids[other].is_discrete:
            fail(f"it has a second continuous action {other!r}; DC-EGM handles one.")
    continuous = {solver.state, solver.action}
    utility_inputs = transitive_inputs(regime.utility, regime.helpers)
    if solver.action not in utility_inputs:
        fail(f"its utility does not depend on {solver.action!r}, so there is no Euler equation.")
    if solver.state in utility_inputs:
        fail(
            f"its utility depends on the state {solver.state!r}; DC-EGM needs utility of "
            f"the action {solver.action!r} and discrete variables only."
        )
    assert regime.next_regime is not None
    if transitive_inputs(regime.next_regime, regime.helpers) & continuous:
        fail(
            f"its regime transition depends on {solver.state!r} or {solver.action!r}; "
            "DC-EGM needs it to depend on discrete variables only."
        )
    for state, transition in regime.state_transitions.items():
        if transition.per_target:
            fail(
                f"the law of motion of {state!r} depends on the regime moved to "
                f"(state_transitions[{state!r}] is a dict by target); DC-EGM needs one "
                "law of motion per state. Solve this regime with GridSearch()."
            )
        if state == solver.state:
            continue
        if not model.state_grid(state).is_discrete:
            fail(f"it produces a second continuous next state {state!r}; DC-EGM handles one.")
        if transition.function is not None and (
            transitive_inputs(transition.function, regime.helpers) & continuous
        ):
            fail(
                f"the transition of the discrete state {state!r} (function "
                f"'next_{state}') depends on {solver.state!r} or {solver.action!r}."
            )
    if solver.state not in regime.state_transitions:
        fail(f"it has no transition for {solver.state!r}.")
    limit = regime.helpers.get("borrowing_limit")
    if limit is not None:
        if transitive_inputs(limit, regime.helpers) & continuous:
            fail(
                f"its function 'borrowing_limit' depends on {solver.state!r} or "
                f"{solver.action!r}; DC-EGM needs a limit of discrete variables, period, "
                "age and parameters only (it shifts the savings grid by it)."
            )
        first = float(np.asarray(solver.savings.to_jax())[0])
        if first != 0.0:
            fail(
                "it has a function 'borrowing_limit', so the savings grid is the offset "
                f"above that limit and must start at 0, but it starts at {first!r}."
            )
    discount = regime.helpers.get("discount_factor")
    if discount is not None and transitive_inputs(discount, regime.helpers) & continuous:
        fail(
            f"its function 'discount_factor' depends on {solver.state!r} or "
            f"{solver.action!r}; DC-EGM needs it to depend on discrete variables, period, "
            "age and parameters only."
        )
    for target in regime.targets:
        target_plan = model.regimes[target]
        for state in target_plan.states:
            if state != solver.state and not target_plan.grids[state].is_discrete:
                fail(f"the regime it can move to, {target!r}, has another continuous state.")
