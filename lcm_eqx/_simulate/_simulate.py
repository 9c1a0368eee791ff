"""Forward simulation of a panel of subjects against a solution.

In each period a subject's actions solve that period's problem at its exact (off-grid)
state against next period's value arrays. Random draws use keys folded with the period
and the subject id, so they do not depend on how subjects are chunked, nor on which
device simulates them: against a sharded solution each device simulates the subjects of
its own block of the value arrays and only per-subject results cross devices
(`_on_blocks`).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core
from jax.sharding import PartitionSpec

from .._errors import LcmWarning
from .._grids._age import age_of
from .._model._plan import ModelPlan, RegimePlan
from .._progress import simulate_tick
from .._solve._age_tables import age_varying_points, shifted
from .._solve._check_arrays import aggregator_checks, any_nan, probability_violation
from .._solve._kernel import RegimeProblem
from .._solve._sharding import ShardingPlan, sharding_plan
from .._solve._solver import AbstractSolver

# Purposes of the per-subject, per-period random streams (folded into the key).
_TASTE, _REGIME, _STATE = 0, 1, 2


def variable_kinds(plan: ModelPlan) -> tuple[dict[str, bool], dict[str, bool]]:
    """States and actions of all regimes, with whether each is discrete."""
    states: dict[str, bool] = {}
    actions: dict[str, bool] = {}
    for regime in plan.regimes.values():
        for name in regime.states:
            states.setdefault(name, regime.grids[name].is_discrete)
        for name in regime.actions:
            actions.setdefault(name, regime.grids[name].is_discrete)
    return states, actions


def simulate_chunk(
    plan: ModelPlan,
    solvers: dict[str, AbstractSolver],
    ages,
    resolved_params,
    values: dict[str, jax.Array],
    regime: jax.Array,
    states: dict[str, jax.Array],
    subject_ids: jax.Array,
    key: jax.Array,
    *,
    entry: jax.Array | None = None,
    chunk: jax.Array | None = None,
    progress: str | None = None,
    validate: bool = False,
    policies: dict | None = None,
):
    """Simulate one chunk of subjects through every period.

    `values[r]` has shape `(n_periods, ...)`: the solution's value arrays (period t + 1
    is read in period t; zeros after the last period); `policies[r]` the solution's policies of
    regimes solved by endogenous-grid solvers (period t at index t), which they read
    instead of searching. Returns arrays of shape (n_periods, n).
    `progress` (`None`, `"text"`, `"tqdm"`) emits a host callback per period, labelled
    with `chunk = [index, n_chunks]`. With `validate`, `record["violations"][regime]`
    has shape `(n_periods, n_checks)`: the transition checks of `draw_checks` at the
    draws of the chunk's subjects in that regime (0 when valid).
    """
    if chunk is None:
        chunk = jnp.array([0, 1], dtype=jnp.int32)
    with warnings.catch_warnings():
        # A distributed state left replicated was reported by the solve that made the
        # solution; the simulation uses the same mesh and says nothing more.
        warnings.simplefilter("ignore", LcmWarning)
        sharding = sharding_plan(plan)
    if sharding is not None and all(axis is None for axis in sharding.mesh_axes.values()):
        sharding = None  # one device: nothing is split
    state_kinds, action_kinds = variable_kinds(plan)
    dtype = jnp.zeros(()).dtype
    n = regime.shape[0]
    if entry is None:
        entry = jnp.zeros(n, jnp.int32)
    state_names = tuple(state_kinds)
    carry = (regime, jnp.zeros(n, dtype=bool), states)
    # Points by period of the grids whose bounds vary with age (empty for most models):
    # scanned like the continuation, period t's for the actions, t + 1's for next values.
    tables = age_varying_points(plan)
    next_tables = shifted(tables)
    # One scan over every period, every regime in its body (not one scan per segment of
    # the solve, which repeated a regime's kernel in the program for each segment it is
    # active in: twice the compile). A regime is simulated only for the subjects in it
    # in a period where it is active, and skipped whole in a period with none
    # (`skipped_without`): its prepared continuations are not computed then either.
    active = jnp.asarray(
        np.array([[p in r.active for p in range(plan.n_periods)] for r in plan.regimes.values()])
    )

    def step(carry, inputs):
        regime, present, states = carry
        period, own_policies, grid_points, next_grid_points = inputs
        continuation = {name: _next_period(v, period) for name, v in values.items()}
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
        if validate:
            record["violations"] = {
                name: jnp.zeros(len(draw_checks(plan, plan.regimes[name])), dtype)
                for name in plan.regimes
            }
        next_regime = regime
        next_states = dict(states)
        finished = jnp.zeros(n, dtype=bool)
        for index, (name, regime_plan) in enumerate(plan.regimes.items()):
            in_regime = present & (regime == regime_plan.id) & active[index, period]

            def simulated(point, keys, in_regime, regime_plan=regime_plan, name=name):
                reads_policy = name in own_policies  # an endogenous-grid solver
                problem = RegimeProblem(
                    plan,
                    regime_plan,
                    resolved_params[name],
                    period,
                    age,
                    continuation,
                    False,
                    sharding,
                    prepare=not reads_policy,
                    grid_points=grid_points,
                    next_grid_points=next_grid_points,
                    policy=own_policies.get(name),
                )
                solver = solvers[name]
                if sharding is not None:
                    return _on_blocks(
                        sharding, plan, solver, problem, point, keys, in_regime, validate
                    )
                subject = functools.partial(
                    _simulate_subject,
                    plan,
                    solver.subject_chooser(problem, n),
                    problem,
                    validate=validate,
                )
                return in_blocks(subject, (point, keys), in_regime)

            point = {s: states[s] for s in regime_plan.states}
            results = skipped_without(jnp.any(in_regime), simulated, point, keys, in_regime)
            chosen, value, moved_to, moved_states, shown, checks = results
            if validate and checks.shape[-1]:
                # Subjects outside the regime hold zeros (see `in_blocks`).
                record["violations"][name] = jnp.max(checks, axis=0).astype(dtype)
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

    periods = jnp.arange(plan.n_periods)
    _, record = jax.lax.scan(
        step, carry, (periods, policies or {}, tables, next_tables), length=plan.n_periods
    )
    if sharding is not None:  # the panel is small: the same on every device
        record = jax.tree.map(sharding.replicate, record)
    return record


def _next_period(values: jax.Array, period: jax.Array) -> jax.Array:
    """The value array of `period + 1` (zeros after the last period), read in place: no
    shifted copy of the solution's arrays."""
    n_periods = values.shape[0]
    following = jax.lax.dynamic_index_in_dim(
        values, jnp.minimum(period + 1, n_periods - 1), keepdims=False
    )
    return jnp.where(period + 1 < n_periods, following, jnp.zeros((), values.dtype))


def _on_blocks(
    sharding: ShardingPlan,
    plan: ModelPlan,
    solver: AbstractSolver,
    problem: RegimeProblem,
    point: dict[str, jax.Array],
    keys: jax.Array,
    in_regime: jax.Array,
    validate: bool,
):
    """`in_blocks` of `_simulate_subject` against a sharded solution, without gathering it.

    The arrays the regime reads by a sharded current state's code (the prepared
    continuations mapped jointly in the solve, see `RegimeProblem.carried`, and an
    endogenous-grid solver's own policy) enter a `shard_map` over the mesh as each
    device's block. Every device sees all subjects of the chunk, simulates those whose
    codes fall in its block (`in_blocks` compacts them, so the work is split too), with
    codes shifted to the block (`RegimeProblem.code_offsets`), and leaves zeros for the
    others; one `psum` of these per-subject results (a few numbers per subject) gives
    every device the whole chunk. A mesh axis whose state this regime lacks leaves its
    subjects to the devices at index 0 of that axis.

    Random draws are keyed by subject id and period, so they do not depend on which
    device simulates a subject. Arrays indexed by a sharded state at codes other than the
    subject's own (a sharded state with a transition other than the identity that is not
    pre-contracted) are read whole: XLA gathers them, as the solve does.
    """
    mesh = sharding.mesh
    axis_names = tuple(mesh.axis_names)
    by_axis = {axis: state for state, axis in sharding.mesh_axes.items() if axis is not None}
    states = problem.regime.states
    carried = problem.carried()
    blocks = {target: c.array for target, c in carried.items()}
    block_specs = {
        target: PartitionSpec(*(sharding.mesh_axes[n] if n else None for n in c.labels))
        for target, c in carried.items()
    }
    policy = problem.policy
    policy_spec = None
    if policy is not None:
        # Leading axes: the regime's discrete states (in order), then discrete actions.
        leading = tuple(
            sharding.mesh_axes.get(s) for s in states if problem.regime.grids[s].is_discrete
        )
        policy_spec = jax.tree.map(
            lambda x: PartitionSpec(*leading) if x.ndim >= len(leading) > 0 else PartitionSpec(),
            policy,
        )

    def block_size(axis: str) -> int:
        return plan.state_grid(by_axis[axis]).n_points // mesh.shape[axis]

    def on_device(blocks, policy, point, keys, in_regime):
        continuations = dict(problem.continuations)
        for target, array in blocks.items():
            continuations[target] = (array, problem.continuations[target][1])
        changes: dict = {"continuations": continuations, "policy": policy}
        if blocks:
            # As unsharded: a NaN anywhere in next period's values makes the period NaN.
            nan = any_nan(list(blocks.values())).astype(jnp.int32)
            changes["continuation_has_nan"] = problem.continuation_has_nan | (
                jax.lax.psum(nan, axis_names) > 0
            )
        owned = in_regime
        offsets = {}
        for axis, state in by_axis.items():
            index = jax.lax.axis_index(axis)
            if state in states:
                size = block_size(axis)
                n_blocks = mesh.shape[axis]
                offsets[state] = (index * size).astype(jnp.int32)
                owned = owned & (jnp.clip(point[state] // size, 0, n_blocks - 1) == index)
            else:
                owned = owned & (index == 0)
        local = problem.replace(**changes, code_offsets=offsets)

        subject = functools.partial(
            _simulate_subject,
            plan,
            functools.partial(solver.choose, local),
            local,
            validate=validate,
        )
        results = in_blocks(subject, (point, keys), owned)
        return jax.tree.map(lambda x: _psum(x, axis_names), results)

    replicated = PartitionSpec()
    return jax.shard_map(
        on_device,
        mesh=mesh,
        in_specs=(
            block_specs,
            policy_spec if policy is not None else replicated,
            jax.tree.map(lambda _: replicated, point),
            replicated,
            replicated,
        ),
        out_specs=replicated,
        # The psum makes every result the same on all devices; the per-device loop of
        # `in_blocks` mixes device-varying and replicated values, which the check rejects.
        check_vma=False,
    )(blocks, policy, point, keys, in_regime)


def _psum(x: jax.Array, axis_names: tuple[str, ...]) -> jax.Array:
    """Sum over the devices of results that are zero on all but one (exact: x + 0 = x)."""
    if x.dtype == jnp.bool_:
        return jax.lax.psum(x.astype(jnp.int32), axis_names) > 0
    return jax.lax.psum(x, axis_names)


# Subjects of one regime are simulated in blocks of at most this many (a static shape).
SUBJECT_BLOCK = 2048


def in_blocks(fn, args, mask: jax.Array, block: int | None = None):
    """`jax.vmap(fn)(*args)` where `mask` holds, computed only for those subjects.

    The subjects where `mask` holds are moved to the front (in order) and `fn` runs
    on blocks of `block` of them, in a loop with as many iterations as needed
    (`ceil(sum(mask) / block)`; a static trip count, the blocks past it skipped): a
    regime's kernel then costs in proportion to the subjects in that regime, not to the
    whole panel (`block` defaults to `SUBJECT_BLOCK`, read when traced); reverse mode
    differentiates through it. Entries where `mask` does not hold
    are left at zero (callers select with `mask`). Results do not depend on the blocking:
    each subject's computation (including its random draws, keyed by subject id) is
    the same.
    """
    n = mask.shape[0]
    block = max(min(SUBJECT_BLOCK if block is None else block, n), 1)
    n_slots = -(-n // block) * block
    # The subjects where `mask` holds, in order, at the front: each one's rank among them
    # (a cumulative sum) is its slot (no sort: a TPU's compiler took 2.4 s over the
    # stable `argsort` of 10^4 subjects); the slots past `count` are never read.
    rank = jnp.cumsum(mask.astype(jnp.int32)) - 1
    slot = jnp.where(mask, rank, n_slots)  # out of bounds: dropped
    order = (
        jnp.full(n_slots, n, jnp.int32).at[slot].set(jnp.arange(n, dtype=jnp.int32), mode="drop")
    )
    count = jnp.sum(mask.astype(jnp.int32))
    n_blocks = (count + block - 1) // block
    # `fn` is traced once, for the loop's body and the results' shapes alike.
    on_block = TracedOnce(jax.vmap(fn), *jax.tree.map(lambda x: x[:block], args))
    init = jax.tree.map(lambda s: jnp.zeros((n, *s.shape[1:]), s.dtype), on_block.shapes)

    def body(i, out):
        slots = jax.lax.dynamic_slice(order, (i * block,), (block,))
        valid = i * block + jnp.arange(block) < count
        read = jnp.where(valid, slots, 0)
        write = jnp.where(valid, slots, n)  # out of bounds: dropped
        result = on_block(*jax.tree.map(lambda x: x[read], args))
        return jax.tree.map(lambda o, r: o.at[write].set(r, mode="drop"), out, result)

    def maybe_body(i, out):
        return jax.lax.cond(i < n_blocks, body, lambda i, out: out, i, out)

    # A static trip count (blocks past `n_blocks` are skipped by the `cond`): a fori_loop
    # with dynamic bounds is a while_loop, which reverse mode cannot differentiate.
    return jax.lax.fori_loop(0, n_slots // block, maybe_body, init)


class TracedOnce:
    """`fn` traced once at `args` (a jaxpr, with the tracers it closes over as its
    constants): calling it evaluates the jaxpr (at arguments of the same shapes) without
    tracing `fn` again; `shapes` are its results'. Where a function runs in several
    places of a program (a loop's body and the shapes of its carry, a `cond`'s branch
    and the shapes of the other), tracing it once halves the trace."""

    def __init__(self, fn, *args):
        self.closed, self.shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        self.structure = jax.tree.structure(self.shapes)

    def __call__(self, *args):
        outputs = jax_core.jaxpr_as_fun(self.closed)(*jax.tree.leaves(args))
        return jax.tree.unflatten(self.structure, outputs)


def skipped_without(predicate: jax.Array, fn, *args):
    """`fn(*args)` where `predicate` holds, zeros of its results' shapes where it does not
    (a `cond`: nothing of `fn` runs then); `fn` is traced once."""
    once = TracedOnce(fn, *args)

    def zeros(*_):
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), once.shapes)

    return jax.lax.cond(predicate, once, zeros, *args)


def draw_checks(plan: ModelPlan, regime: RegimePlan) -> tuple[str, ...]:
    """The checks on a regime's draws in simulation: the transition checks of the
    solve's kernel (`RegimeProblem.checks`), named alike."""
    if regime.is_terminal:
        return ()
    checks = []
    for name, transition in regime.state_transitions.items():
        if transition.is_markov or plan.state_grid(name).is_discrete:
            checks.append(f"next_{name}")
        elif not transition.is_process:
            checks.append(f"next_{name}:finite")
    # The aggregator's checks are the solve's; the draws leave them at 0.
    return (
        *checks,
        "next_regime",
        "next_regime:unreachable",
        "next_regime:inactive",
        *aggregator_checks(regime),
    )


def _draw_violations(
    problem, evaluate, regime_probabilities, value, markov, after_draw
) -> jax.Array:
    """The violations of `draw_checks` at one subject's chosen action (0 when valid).
    `after_draw`: the next states of the laws of motion that read drawn states."""
    checks = draw_checks(problem.model, problem.regime)
    assert checks == tuple(problem.checks), (checks, problem.checks)
    deterministic, stochastic = problem.next_states(evaluate)
    violations: dict[str, jax.Array] = {}
    problem.record_violations(
        regime_probabilities,
        {**deterministic, **after_draw},
        stochastic,
        violations,
        by_target=problem.target_next_states(evaluate),
        target_probabilities=problem.target_next_probabilities(evaluate),
    )
    for name, p in markov.items():
        violations[f"next_{name}"] = probability_violation(p, problem.tolerance)
    # A subject with no feasible action (value -inf) has no next state to check.
    feasible = value > -jnp.inf
    return jnp.stack(
        [
            jnp.where(feasible, violations[c], 0.0)
            if c.endswith(":finite")
            else jnp.asarray(violations.get(c, 0.0))
            for c in checks
        ]
    ).astype(value.dtype)


def _simulate_subject(
    plan: ModelPlan, choose, problem: RegimeProblem, state, key, validate: bool = False
):
    """One subject's period: its choice (`choose(state, key)`, the solver's
    `subject_chooser`), value, draws of the next regime and states, and checks."""
    regime = problem.regime
    chosen, value = choose(state, jax.random.fold_in(key, _TASTE))
    # With no feasible action (value -inf) the argmax picked an infeasible one: its
    # continuous actions are NaN instead, so that nothing downstream passes for valid
    # (`Model.simulate` reports these subjects).
    feasible = value > -jnp.inf
    chosen = {
        name: x if regime.grids[name].is_discrete else jnp.where(feasible, x, jnp.nan)
        for name, x in chosen.items()
    }
    shown = {s: problem.value_of(s, x) for s, x in state.items()}
    no_checks = jnp.zeros((0,), value.dtype)
    if regime.is_terminal:
        return chosen, value, jnp.asarray(regime.id), {}, shown, no_checks
    evaluate = problem.evaluator({**state, **chosen})
    probabilities = problem.regime_probabilities(evaluate)
    moved_to = jax.random.categorical(
        jax.random.fold_in(key, _REGIME), jnp.log(probabilities)
    ).astype(jnp.int32)
    deterministic, stochastic = problem.next_states(evaluate)
    moved_states = dict(deterministic)
    # A per-target law of motion: the next value for the regime moved to.
    for target, next_values in problem.target_next_states(evaluate).items():
        reached = moved_to == plan.regimes[target].id
        for name, next_value in next_values.items():
            moved_states[name] = jnp.where(reached, next_value, moved_states.get(name, next_value))
    markov = {}
    for i, (name, transition) in enumerate(regime.state_transitions.items()):
        if not transition.is_markov:
            continue
        if name in stochastic:
            p = stochastic[name]
        elif transition.function is None:
            p = problem.process_matrices[name][state[name]]
        else:
            p = jnp.asarray(evaluate(transition.function))
        markov[name] = p
        state_key = jax.random.fold_in(jax.random.fold_in(key, _STATE), i)
        moved_states[name] = jax.random.categorical(state_key, jnp.log(p)).astype(jnp.int32)
    # A per-target MarkovTransition: a draw from the law of the regime moved to.
    names = list(regime.state_transitions)
    for target, vectors in problem.target_next_probabilities(evaluate).items():
        reached = moved_to == plan.regimes[target].id
        for name, p in vectors.items():
            state_key = jax.random.fold_in(jax.random.fold_in(key, _STATE), names.index(name))
            draw = jax.random.categorical(state_key, jnp.log(p)).astype(jnp.int32)
            moved_states[name] = jnp.where(reached, draw, moved_states.get(name, draw))
    # The laws of motion that read the next value of drawn states (`next_<state>`): at
    # the draw just made, after the decision.
    after_draw = {}
    if regime.drawn:
        codes = {s: moved_states[s][None] for s in regime.drawn}
        after_draw = {n: v[0] for n, v in problem.drawn_next_states(evaluate, codes).items()}
        moved_states.update(after_draw)
    checks = (
        _draw_violations(problem, evaluate, probabilities, value, markov, after_draw)
        if validate
        else no_checks
    )
    return chosen, value, moved_to, moved_states, shown, checks


def prepare_next_values(plan: ModelPlan, values: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Shift value arrays by one period: index t holds period t + 1 (zeros after the last)."""
    return {
        name: jnp.concatenate([v[1:], jnp.zeros((1, *v.shape[1:]), v.dtype)], axis=0)
        for name, v in values.items()
    }


def to_numpy(tree):
    return jax.tree.map(np.asarray, tree)
