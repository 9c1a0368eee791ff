"""One regime's prepared continuations: next period's values of each regime it can
reach, laid out once per period for the kernel's reads, and their read at one point.

`prepare_target` transposes (and, where a transition allows, pre-contracts) a target's value
array into the `Layout` that `continuation_at` reads; `stack_targets` stacks targets read
alike into one array; `precontract_probabilities` evaluates a pre-contracted transition
once per period; `expected_value` is the kernel's `Σ_r' P(r' | s, a)·E[V_r'(s')]` at one
point. Each takes the `RegimeProblem` (`_kernel.py`) it works for, whose constructor and
`q_values` call them.
"""

from __future__ import annotations

from typing import Any, cast

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._grids import AbstractContinuousGrid
from .._model._aggregator import Continuation
from ._axes import lift
from ._check_arrays import probability_violation
from ._continuation import (
    NEG_INF,
    Layout,
    continuation_at,
    contract,
    mask_neg_inf,
    settle_masked,
)


def prepare_target(problem: Any, target: str, values: Array) -> tuple[Array, Layout]:
    target_plan = problem.model.regimes[target]
    # A sharded state that never transitions is read at the current state's own code:
    # label its axis as a current-state axis, so the state sweep maps it jointly.
    staying = {s for s in target_plan.states if problem.stays_sharded(s)}
    labels = [f"cur:{s}" if s in staying else f"next:{s}" for s in target_plan.states]
    if problem.sharding is not None:
        values = problem.sharding.constrain(values, target_plan.states)
    stochastic, discrete, continuous = [], [], []
    for state in target_plan.states:
        transition = problem.regime.state_transitions[state]
        if state in staying:
            continue
        if state in problem.regime.drawn:
            # A law of motion reads its next value: the kernel reads each node apart
            # (`expected_value`), at its code.
            discrete.append(state)
        elif transition.is_markov and transition.precontract is not None and not problem.per_node:
            probabilities = precontract_probabilities(problem, state)
            deps = [f"cur:{d}" for d in transition.precontract]
            shards, place = 1, None
            if problem.sharding is not None and problem.sharding.is_sharded(state):
                shards = problem.sharding.n_shards(state)
                place = lambda a, ls, s=state, sharding=problem.sharding: sharding.place_labels(
                    a, ls, s
                )
            values, labels = contract(
                values,
                labels,
                probabilities,
                [*deps, f"next:{state}"],
                shards=shards,
                place=place,
            )
        elif transition.is_markov or target in transition.per_target_markov:
            stochastic.append(state)
        elif target_plan.grids[state].is_discrete:
            discrete.append(state)
        else:
            continuous.append(state)
    current = [s for s in problem.regime.states if f"cur:{s}" in labels]
    order = (
        [f"next:{s}" for s in stochastic]
        + [f"cur:{s}" for s in current]
        + [f"next:{s}" for s in discrete]
        + [f"next:{s}" for s in continuous]
    )
    values = mask_neg_inf(jnp.transpose(values, [labels.index(n) for n in order]))
    if problem.sharding is not None:
        values = problem.sharding.constrain(
            values, tuple(n[4:] if n.startswith("cur:") else None for n in order)
        )
    return values, Layout(tuple(stochastic), tuple(current), tuple(discrete), tuple(continuous))


def stack_targets(problem: Any) -> list[tuple[tuple[str, ...], Array | None]]:
    """Group targets whose prepared continuations can be read as one stacked array.

    With a deterministic regime transition exactly one target is reached at a point;
    targets with the same layout on the same grids are stacked along a leading axis
    and read once, at the reached target's index, instead of once per target. (Not
    with sharding, where continuations are mapped jointly with the state axes.)
    """
    targets = list(problem.continuations)
    if problem.regime.next_regime_is_markov or problem.sharding is not None:
        return [((t,), None) for t in targets]
    groups: dict[tuple, list[str]] = {}
    for target in targets:
        prepared, layout = problem.continuations[target]
        grids = problem.model.regimes[target].grids
        key: tuple = (
            layout,
            prepared.shape,
            prepared.dtype,
            tuple(id(grids[s]) for s in layout.continuous),
            # Targets read at different next states (per-target laws of motion) are
            # read apart.
            tuple(
                (s, id(t.per_target[target].fn))
                for s, t in problem.regime.state_transitions.items()
                if target in t.per_target
            ),
        )
        if problem.aggregator is not None and problem.aggregator.splits_terminal:
            # The aggregator reads terminal and other regimes apart.
            key += (problem.model.regimes[target].is_terminal,)
        groups.setdefault(key, []).append(target)
    stacked: list[tuple[tuple[str, ...], Array | None]] = []
    for members in groups.values():
        if len(members) == 1:
            stacked.append(((members[0],), None))
            continue
        layout = problem.continuations[members[0]][1]
        axis = len(layout.stochastic)
        array = jnp.stack([problem.continuations[t][0] for t in members], axis=axis)
        stacked.append((tuple(members), array))
    return stacked


def precontract_probabilities(problem: Any, state: str) -> Array:
    transition = problem.regime.state_transitions[state]
    precontract, function = transition.precontract, transition.function
    assert precontract is not None  # only pre-contracted transitions come here
    n_target = problem.model.state_grid(state).n_points
    if function is None:
        # A chain's matrix; an i.i.d. draw's single row (`precontract` empty).
        matrix = problem.process_matrices[state]
        probabilities = matrix if precontract else matrix[0]
    else:
        axes = tuple(a for a in problem.state_axes if a.name in precontract)
        probabilities = lift(lambda point: problem.evaluator(point)(function), axes)
    if problem.sharding is not None:
        # Small and needed whole by every device: compute it replicated, so XLA does
        # not split its construction (e.g. a discretisation loop) across devices.
        probabilities = problem.sharding.replicate(probabilities)
    problem.check_shape(f"next_{state}", probabilities.shape[len(precontract) :], (n_target,))
    if problem.validate:
        flat = probabilities.reshape(-1, n_target)
        violations = jax.vmap(lambda p: probability_violation(p, problem.tolerance))(flat)
        problem.period_violations[f"next_{state}"] = jnp.max(violations)
        precontract_index_errors(problem, transition)
    return probabilities


def precontract_index_errors(problem: Any, transition) -> None:
    """The index checks of a pre-contracted transition and the helpers it uses.

    Evaluated once per period, like its probabilities (XLA shares the work); all of
    it feeds a transition, which nothing reads in the last period.
    """
    if transition.function is None or not problem.index_checks:
        return
    function = transition.function
    axes = tuple(a for a in problem.state_axes if a.name in transition.precontract)

    def at(point):
        evaluate = problem.evaluator(point)
        evaluate(function)
        return evaluate.index_errors

    dtype = jnp.zeros(()).dtype
    for key, failed in lift(at, axes).items():
        check = problem.index_checks[key]
        failed = (jnp.any(failed) & problem.before_last_period()).astype(dtype)
        problem.period_violations[check] = jnp.maximum(
            problem.period_violations.get(check, 0.0), failed
        )


def expected_value(problem: Any, evaluate, state, violations, split: bool = False):
    """`Σ_r' P(r' | s, a)·E[prepared V_r'(s')]` at one point; with `split`, the sums
    over non-terminal and terminal regimes apart (a `Continuation`)."""
    regime_probabilities, next_regime_id = problem.regime_probabilities_and_id(evaluate)
    next_values, next_probabilities = problem.next_states(evaluate)
    by_target = problem.target_next_states(evaluate)
    target_probabilities = problem.target_next_probabilities(evaluate)
    if problem.per_node:
        # Nothing is contracted once per period: a process state's row, in the kernel.
        for name in problem.process_matrices:
            code = problem.local_code(name, state[name])
            next_probabilities[name] = problem.process_matrices[name][code]
    # Drawn states (read by a law of motion as `next_<state>`): the expectation over
    # their next values is a sum over their nodes, each read at the continuous next
    # states evaluated at that node.
    drawn = bool(problem.regime.drawn)
    node_codes: dict[str, Array] = {}
    node_values: dict[str, Array] = {}
    node_weights = cast(Array, None)
    checked_values, checked_probabilities = next_values, next_probabilities
    if drawn:
        drawn_probabilities = problem.drawn_probabilities(evaluate, state)
        node_codes, node_weights = problem.drawn_nodes(drawn_probabilities)
        node_values = problem.drawn_next_states(evaluate, node_codes)
        checked_probabilities = {**next_probabilities, **drawn_probabilities}
        # The finiteness check sees NaN where any node's next state is not finite.
        checked_values = {
            **next_values,
            **{
                n: jnp.where(jnp.all(jnp.isfinite(v)), v[0], jnp.nan)
                for n, v in node_values.items()
            },
        }
    if problem.validate:
        problem.record_violations(
            regime_probabilities,
            checked_values,
            checked_probabilities,
            violations,
            next_regime_id,
            by_target=by_target,
            target_probabilities=target_probabilities,
        )
    deterministic = not problem.regime.next_regime_is_markov
    # Mass on a regime this one cannot reach (its states are not all produced) has no
    # continuation to read: the value is -inf, never silently dropped mass. With a
    # deterministic transition that is the default below: a regime id in no group.
    unreachable = [r.id for n, r in problem.model.regimes.items() if n not in problem.continuations]
    blocked = (
        jnp.any(regime_probabilities[jnp.asarray(unreachable)] > 0)
        if unreachable and not deterministic
        else jnp.asarray(False)
    )
    # Weakly typed start values; an Array from the first group on.
    total = cast(Array, NEG_INF if deterministic else 0.0)
    # With `split`: the sums over non-terminal regimes (with their probability) and
    # over terminal ones; with a deterministic transition nothing reached is -inf.
    alive_sum = alive_mass = cast(Array, 0.0)
    terminal_sum = cast(Array, NEG_INF if deterministic else 0.0)
    for members, stacked in problem.groups:
        target = members[0]
        prepared, layout = problem.continuations[target]
        regime_index = None
        ids = [problem.model.regimes[t].id for t in members]
        if stacked is None:
            p = regime_probabilities[ids[0]]
            reached = next_regime_id == ids[0] if deterministic else None
        else:
            # The reached member's position in the stack (-1: none), by one compare
            # per member: elementwise, so it fuses into the kernel that reads it.
            chosen = jnp.asarray(-1, jnp.int32)
            for position, regime_id in enumerate(ids):
                chosen = jnp.where(next_regime_id == regime_id, position, chosen)
            prepared, regime_index = stacked, jnp.maximum(chosen, 0)
            # A stack of every regime is always reached by a valid id, and validation
            # rejects an invalid one: no select per point.
            covers_all = problem.validate and len(ids) == len(problem.model.regimes)
            reached = None if covers_all else chosen >= 0
        target_grids = problem.model.regimes[target].grids
        next_values_here = {**next_values, **by_target.get(target, {})}

        def read(
            next_here,
            settled,
            target=target,
            prepared=prepared,
            layout=layout,
            regime_index=regime_index,
            target_grids=target_grids,
        ):
            intervals = {
                s: cast(AbstractContinuousGrid, target_grids[s]).interval(
                    next_here[s], problem.target_points[target][s]
                )
                for s in layout.continuous
            }
            return continuation_at(
                prepared,
                layout,
                current={s: problem.local_code(s, state[s]) for s in layout.current},
                discrete={s: next_here[s] for s in layout.discrete},
                intervals=intervals,
                probabilities={**next_probabilities, **target_probabilities.get(target, {})},
                regime_index=regime_index,
                settled=settled,
                transform=problem.node_transforms.get(target),
            )

        # With a stochastic transition, the regimes' sums are weighted and settled
        # once, below.
        if not drawn:
            expected = read(next_values_here, deterministic)
        else:
            by_node = jax.vmap(
                lambda nodes, here=next_values_here, read=read: read({**here, **nodes}, False)
            )({**node_codes, **node_values})
            # (Unsettled sums are finite: `mask_neg_inf`'s stand-ins.)
            expected = jnp.sum(node_weights * by_node)
            if deterministic:
                expected = settle_masked(expected)
        if split:
            terminal = problem.model.regimes[target].is_terminal
            if deterministic:
                # (None: a stack of every regime, always reached.)
                reached = jnp.asarray(True) if reached is None else reached
                zero = jnp.zeros_like(expected)
                alive_sum = jnp.where(reached, zero if terminal else expected, alive_sum)
                alive_mass = jnp.where(reached, 0.0 if terminal else 1.0, alive_mass)
                terminal_sum = jnp.where(reached, expected if terminal else zero, terminal_sum)
            elif terminal:
                terminal_sum = terminal_sum + p * expected  # pyright: ignore
            else:
                alive_sum = alive_sum + p * expected  # pyright: ignore
                alive_mass = alive_mass + p  # pyright: ignore
        elif deterministic:
            # Exactly one regime is reached: select its continuation (one select per
            # point, on a predicate that depends on the actions only through the id).
            total = expected if reached is None else jnp.where(reached, expected, total)
        else:
            # groups are stacked only with a deterministic transition, so `p` is set
            total = total + p * expected  # pyright: ignore[reportPossiblyUnbound]
    if split:
        if not deterministic:
            # (A kind of regime never reached leaves its sum a Python 0.0.)
            alive_sum = settle_masked(jnp.asarray(alive_sum))
            terminal_sum = jnp.where(blocked, NEG_INF, settle_masked(jnp.asarray(terminal_sum)))
        return Continuation(
            jnp.asarray(alive_sum), jnp.asarray(alive_mass), jnp.asarray(terminal_sum)
        )
    if deterministic:
        return total
    return jnp.where(blocked, NEG_INF, settle_masked(total))
