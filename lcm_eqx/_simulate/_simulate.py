"""Forward simulation of a panel of subjects against a solution.

In each period a subject's actions solve that period's problem at its exact (off-grid)
state against next period's value arrays. Random draws use keys folded with the period
and the subject id, so they do not depend on how subjects are chunked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._model._plan import ModelPlan
from .._progress import simulate_tick
from .._solve._backward import age_of
from .._solve._kernel import RegimeProblem
from .._solve._solver import AbstractSolver

# Purposes of the per-subject, per-period random streams (folded into the key).
_TASTE, _REGIME, _STATE = 0, 1, 2


def variable_kinds(plan: ModelPlan) -> tuple[dict[str, bool], dict[str, bool]]:
    """States and actions of all regimes, with whether each is discrete."""
    states, actions = {}, {}
    for regime in plan.regimes.values():
        for name in regime.states:
            states.setdefault(name, regime.grids[name].is_discrete)
        for name in regime.actions:
            actions.setdefault(name, regime.grids[name].is_discrete)
    return states, actions


def simulate_chunk(
    plan: ModelPlan,
    solver: AbstractSolver,
    ages,
    resolved_params,
    next_values: dict[str, jax.Array],
    regime: jax.Array,
    states: dict[str, jax.Array],
    subject_ids: jax.Array,
    key: jax.Array,
    *,
    entry: jax.Array | None = None,
    chunk: jax.Array | None = None,
    progress: str | None = None,
):
    """Simulate one chunk of subjects through every period.

    `next_values[r]` has shape `(n_periods, ...)`: the value array of period t + 1 at
    index t (zeros after the last period). Returns arrays of shape (n_periods, n).
    `progress` (`None`, `"text"`, `"tqdm"`) emits a host callback per period, labelled
    with `chunk = [index, n_chunks]`. `entry` holds each subject's first period (default
    0): before it a subject has no rows, and its initial regime and states wait for it.
    """
    if chunk is None:
        chunk = jnp.array([0, 1], dtype=jnp.int32)
    state_kinds, action_kinds = variable_kinds(plan)
    dtype = jnp.zeros(()).dtype
    n = regime.shape[0]
    if entry is None:
        entry = jnp.zeros(n, jnp.int32)
    state_names = tuple(state_kinds)
    carry = (regime, jnp.zeros(n, dtype=bool), states)
    outputs = []
    for segment in plan.segments:

        def step(carry, inputs, segment=segment):
            regime, present, states = carry
            period, continuation = inputs
            simulate_tick(progress, plan.n_periods, period, chunk)
            age = age_of(ages, period)
            keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.fold_in(key, period), s))(
                subject_ids
            )
            present = present | (entry == period)  # subjects entering now
            record = {
                "regime": regime,
                "present": present,
                "value": jnp.full(n, jnp.nan, dtype),
                "states": {name: states[name] for name in state_names},
                "state_values": {name: jnp.full(n, jnp.nan, dtype) for name in state_names},
                "actions": {
                    name: jnp.zeros(n, jnp.int32) if discrete else jnp.full(n, jnp.nan, dtype)
                    for name, discrete in action_kinds.items()
                },
            }
            next_regime = regime
            next_states = dict(states)
            finished = jnp.zeros(n, dtype=bool)
            for name in segment.regimes:
                regime_plan = plan.regimes[name]
                problem = RegimeProblem(
                    plan, regime_plan, resolved_params[name], period, age, continuation, False
                )
                in_regime = present & (regime == regime_plan.id)

                def subject(state_point, subject_key, problem=problem):
                    return _simulate_subject(plan, solver, problem, state_point, subject_key)

                point = {s: states[s] for s in regime_plan.states}
                chosen, value, moved_to, moved_states, shown = in_blocks(
                    subject, (point, keys), in_regime
                )
                record["value"] = jnp.where(in_regime, value.astype(dtype), record["value"])
                for action, x in chosen.items():
                    record["actions"][action] = jnp.where(
                        in_regime,
                        x.astype(record["actions"][action].dtype),
                        record["actions"][action],
                    )
                for s, x in shown.items():
                    record["state_values"][s] = jnp.where(
                        in_regime, x.astype(dtype), record["state_values"][s]
                    )
                if regime_plan.is_terminal:
                    finished = finished | in_regime
                    continue
                next_regime = jnp.where(in_regime, moved_to, next_regime)
                for s, x in moved_states.items():
                    next_states[s] = jnp.where(in_regime, x.astype(states[s].dtype), next_states[s])
            return (next_regime, present & ~finished, next_states), record

        periods = jnp.arange(segment.start, segment.stop)
        window = {
            name: values[segment.start : segment.stop] for name, values in next_values.items()
        }
        carry, record = jax.lax.scan(step, carry, (periods, window))
        outputs.append(record)
    return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=0), *outputs)


# Subjects of one regime are simulated in blocks of at most this many (a static shape).
SUBJECT_BLOCK = 2048


def in_blocks(fn, args, mask: jax.Array, block: int | None = None):
    """`jax.vmap(fn)(*args)` where `mask` holds, computed only for those subjects.

    The subjects where `mask` holds are moved to the front (a stable sort) and `fn` runs
    on blocks of `block` of them, in a loop with as many iterations as needed
    (`ceil(sum(mask) / block)`): a regime's kernel then costs in proportion to the
    subjects in that regime, not to the whole panel (`block` defaults to
    `SUBJECT_BLOCK`, read when traced). Entries where `mask` does not hold
    are left at zero (callers select with `mask`). Results do not depend on the blocking:
    each subject's computation (including its random draws, keyed by subject id) is
    the same.
    """
    n = mask.shape[0]
    block = max(min(SUBJECT_BLOCK if block is None else block, n), 1)
    n_slots = -(-n // block) * block
    order = jnp.argsort(~mask, stable=True).astype(jnp.int32)
    order = jnp.concatenate([order, jnp.full(n_slots - n, n, jnp.int32)])
    count = jnp.sum(mask.astype(jnp.int32))
    n_blocks = (count + block - 1) // block
    first = jax.tree.map(lambda x: x[:block], args)
    shapes = jax.eval_shape(lambda a: jax.vmap(fn)(*a), first)
    init = jax.tree.map(lambda s: jnp.zeros((n, *s.shape[1:]), s.dtype), shapes)

    def body(i, out):
        slots = jax.lax.dynamic_slice(order, (i * block,), (block,))
        valid = i * block + jnp.arange(block) < count
        read = jnp.where(valid, slots, 0)
        write = jnp.where(valid, slots, n)  # out of bounds: dropped
        result = jax.vmap(fn)(*jax.tree.map(lambda x: x[read], args))
        return jax.tree.map(lambda o, r: o.at[write].set(r, mode="drop"), out, result)

    return jax.lax.fori_loop(0, n_blocks, body, init)


def _simulate_subject(plan: ModelPlan, solver, problem: RegimeProblem, state, key):
    regime = problem.regime
    chosen, value = solver.choose(problem, state, jax.random.fold_in(key, _TASTE))
    shown = {s: problem.value_of(s, x) for s, x in state.items()}
    if regime.is_terminal:
        return chosen, value, jnp.asarray(regime.id), {}, shown
    evaluate = problem.evaluator({**state, **chosen})
    probabilities = problem.regime_probabilities(evaluate)
    moved_to = jax.random.categorical(
        jax.random.fold_in(key, _REGIME), jnp.log(probabilities)
    ).astype(jnp.int32)
    deterministic, stochastic = problem.next_states(evaluate)
    moved_states = dict(deterministic)
    for i, (name, transition) in enumerate(regime.state_transitions.items()):
        if not transition.is_markov:
            continue
        if name in stochastic:
            p = stochastic[name]
        elif transition.function is None:
            p = problem.process_matrices[name][state[name]]
        else:
            p = jnp.asarray(evaluate(transition.function))
        state_key = jax.random.fold_in(jax.random.fold_in(key, _STATE), i)
        moved_states[name] = jax.random.categorical(state_key, jnp.log(p)).astype(jnp.int32)
    return chosen, value, moved_to, moved_states, shown


def prepare_next_values(plan: ModelPlan, values: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Shift value arrays by one period: index t holds period t + 1 (zeros after the last)."""
    return {
        name: jnp.concatenate([v[1:], jnp.zeros((1, *v.shape[1:]), v.dtype)], axis=0)
        for name, v in values.items()
    }


def to_numpy(tree):
    return jax.tree.map(np.asarray, tree)
