"""Backward induction: one `lax.scan` over the periods of each segment.

Within a segment (consecutive periods with the same active regimes) every period has the
same structure, so the period step is traced and compiled once, with `period` and `age`
as traced scalars: compile time does not grow with the number of periods.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from .._model._params import resolve_params
from .._model._plan import ModelPlan
from .._persistence import plan_structure
from .._progress import solve_tick
from .._validation import NAN_CHECK
from ._dcegm import (
    DCEGM,
    array_reader,
    batch_groups,
    endogenous_reader,
    inactive_grid,
    regime_values,
    solve_regimes,
    zero_grid,
    zero_reader,
)
from ._envelope import INACTIVE, ORDINARY, ZERO, EndogenousGrid
from ._kernel import RegimeProblem, age_varying_points, max_each, shifted, stack_checks
from ._sharding import sharding_plan
from ._solution import Solution
from ._solver import AbstractSolver


def state_shape(plan: ModelPlan, regime: str) -> tuple[int, ...]:
    regime_plan = plan.regimes[regime]
    return tuple(regime_plan.grids[s].n_points for s in regime_plan.states)


def age_of(plan_ages, period):
    return period if plan_ages is None else plan_ages.age(period)


def solve_model(
    plan: ModelPlan,
    solvers: dict[str, AbstractSolver],
    ages,
    params,
    *,
    validate: bool,
    progress: str | None = None,
) -> Solution:
    """Solve the model by backward induction; a pure function of `params`.

    `solvers[regime]` solves each regime's period problem. `progress` (`None`, `"text"`
    or `"tqdm"`) emits a host callback per period.
    """
    resolved = resolve_params(plan, params)
    dtype = jnp.zeros(()).dtype
    shapes = {name: state_shape(plan, name) for name in plan.regimes}
    sharding = sharding_plan(plan)  # None unless some state has distributed=True
    endogenous = {name: s for name, s in solvers.items() if isinstance(s, DCEGM)}
    # Grids whose bounds vary with age: their points of period t (and t + 1, where next
    # period's values are read) are scanned inputs, so periods still share one step.
    # Empty for other models, which then scan over the periods alone.
    tables = age_varying_points(plan)
    next_tables = shifted(tables)

    def place(name, array, leading=0):
        """Constrain a value array (with `leading` extra axes) to its regime's sharding."""
        if sharding is None:
            return array
        return sharding.constrain(array, (None,) * leading + plan.regimes[name].states)

    def unsharded_axes(name):
        states = plan.regimes[name].states
        return tuple(
            i for i, s in enumerate(states) if sharding is None or not sharding.is_sharded(s)
        )

    zero_policies = {name: zero_grid(plan, name, s, dtype) for name, s in endogenous.items()}
    # DC-EGM regimes whose value arrays no regime reads next period (every regime that
    # can move to them reads their refined grids): their values on the state grid are
    # output only, read after the period loop for all periods at once (`read_values`),
    # not in every period. The period step is then shorter by the reads' kernels. Not
    # for a regime with a splayed state axis, whose period step bounds its memory.
    later = frozenset(
        name
        for name in endogenous
        if all(
            isinstance(solvers[r], DCEGM)
            for r, regime in plan.regimes.items()
            if name in regime.targets
        )
        and not any(
            0 < (g := plan.regimes[name].grids[s]).batch_size < g.n_points
            for s in plan.regimes[name].states
        )
    )
    # Regimes whose discrete choices are allowed in every period (no constraint on their
    # discrete variables alone): their grids' `feasible` is True throughout, carried
    # through the loop unchanged and put back after it.
    always_feasible = {
        name for name, s in endogenous.items() if s._choices_always_feasible(plan.regimes[name])
    }
    # The loop carries each DC-EGM regime's arrays that change from period to period;
    # the borrowing limit is a constant and the status a function of the period
    # (`_grid_status`). Constants in the loop's state would each be copied into it in
    # every period, by XLA kernels ready when the period starts (see
    # docs/architecture.md, "threads").
    carry: tuple[dict, tuple[dict, dict]] = (
        {name: place(name, jnp.zeros(shape, dtype)) for name, shape in shapes.items()},  # V_T = 0
        (
            {
                name: (grid.nodes, grid.count, grid.continuation0, grid.feasible)
                for name, grid in zero_policies.items()
            },
            {},
        ),
    )
    following: frozenset[str] | None = None  # the regimes of the segment after this one
    checks = {}
    values: dict[str, list] = {name: [] for name in plan.regimes}
    # Regimes whose aggregator carries a second value array (`PresentBias`: W), which is
    # what earlier periods read as the continuation.
    two_valued = [
        name
        for name, r in plan.regimes.items()
        if r.aggregator is not None and r.aggregator.n_values > 1
    ]
    exponential: dict[str, list] = {name: [] for name in two_valued}
    violations: dict[str, list] = {name: [] for name in plan.regimes}
    policies: dict[str, list] = {name: [] for name in endogenous}
    # The shape of each DC-EGM regime's choices (its discrete states and actions).
    choices = {name: grid.count.shape for name, grid in zero_policies.items()}

    for segment in reversed(plan.segments):
        # The regimes whose values `solve_regimes` left out (filled when `step` traces).
        deferred: set[str] = set()
        # The DC-EGM regimes of the segment solved together (`solve_regimes`): the loop
        # carries and emits each group's refined grids as the rows the pass computes,
        # rather than a slice of them per regime (kernels of every period).
        groups = batch_groups(plan, solvers, segment.regimes)
        carry = (carry[0], _grouped(_ungrouped(carry[1], choices), groups, choices))
        # The model's last period, solved apart from the period loop where that lets a
        # solver skip work (`_last_period_apart`); the loop's last period then reads it.
        apart = following is None and _last_period_apart(plan, solvers, segment.regimes)
        reads = frozenset(segment.regimes) if apart else following

        def step(carried, inputs, segment=segment, deferred=deferred, following=reads, last=False):
            next_values, carried_policies = carried
            period, grid_points, next_grid_points = inputs if tables else (inputs, {}, {})
            next_policies = {
                name: EndogenousGrid(
                    *arrays,
                    borrowing_limit=zero_policies[name].borrowing_limit,
                    status=_grid_status(name, segment, following, period),
                )
                for name, arrays in _ungrouped(carried_policies, choices).items()
            }
            age = age_of(ages, period)
            current, current_violations, current_policies = {}, {}, {}
            current_carried = {}
            problems = {}
            for name in segment.regimes:
                solver = solvers[name]
                problem = RegimeProblem(
                    plan,
                    plan.regimes[name],
                    resolved[name],
                    period,
                    age,
                    next_values,
                    validate,
                    sharding=sharding,
                    prepare=not isinstance(solver, DCEGM),
                    grid_points=grid_points,
                    next_grid_points=next_grid_points,
                )
                problem.last_period = last
                if isinstance(solver, DCEGM):
                    problem.next_policies = (
                        {
                            target: zero_reader(plan, target, solver.state, dtype)
                            for target in plan.regimes[name].targets
                        }
                        if last
                        else continuation_readers(
                            plan,
                            solvers,
                            resolved,
                            name,
                            next_values,
                            next_policies,
                            period + 1,
                            age_of(ages, period + 1),
                            next_grid_points,
                        )
                    )
                checks[name] = (
                    (*problem.checks, *solver.extra_checks(plan.regimes[name])) if validate else ()
                )
                problems[name] = problem
            # The DC-EGM regimes of the period are solved together (`solve_regimes`).
            solved, rows = solve_regimes(
                solvers,
                {n: p for n, p in problems.items() if isinstance(solvers[n], DCEGM)},
                later,
            )
            for name, problem in problems.items():
                solver = solvers[name]
                if name in solved:
                    value, check, policy, carried_value = solved[name]
                else:
                    value, check, policy, carried_value = solver.solve_period(problem)
                if value is None:  # read after the period loop
                    deferred.add(name)
                else:
                    current[name] = place(name, value.astype(dtype))
                if carried_value is not None:
                    current_carried[name] = place(name, carried_value.astype(dtype))
                if policy is not None:
                    current_policies[name] = policy
                # Reduce the checks over the unsharded state axes only: the sharded ones
                # are reduced after the scan, so the period step stays device-local.
                if isinstance(check, tuple):  # one array per check: one variadic reduction
                    current_violations[name] = stack_checks(
                        check, unsharded_axes(name), shapes[name], dtype
                    )
                else:
                    if isinstance(solver, DCEGM):
                        # DC-EGM's checks are the same at every point of its continuous
                        # state (broadcast along it): read one point rather than reduce
                        # over them (a broadcast and a reduction in two XLA kernels).
                        axis = plan.regimes[name].states.index(solver.state)
                        check = jax.lax.slice_in_dim(check, 0, 1, axis=axis)
                    current_violations[name] = jnp.max(check, axis=unsharded_axes(name))
            next_carry = {
                name: current_carried.get(name, current[name])
                if name in current
                # NaN where nothing may read it (a value read after the loop).
                else place(
                    name, jnp.full(shapes[name], jnp.nan if name in deferred else -jnp.inf, dtype)
                )
                for name in plan.regimes
            }
            next_policy_carry = {
                name: current_policies.get(name, inactive_grid(zero_policies[name]))
                for name in endogenous
            }
            # Carried and emitted per period: the arrays that change (the borrowing
            # limit, the status and an always-true `feasible` are put back after the
            # scan, without a stacked output each), by group or regime as carried.
            carried_out: tuple[dict, dict] = ({}, {})
            emitted: tuple[dict, dict] = ({}, {})
            for by_key, out, emit in zip(carried_policies, carried_out, emitted, strict=True):
                for key, arrays in by_key.items():
                    through = all(name in always_feasible for name in _members(key))
                    if isinstance(key, tuple):
                        group = rows[key]
                        changing = (group["nodes"], group["count"], group["continuation0"])
                        feasible = group["feasible"]
                    else:
                        grid = next_policy_carry[key]
                        changing = (grid.nodes, grid.count, grid.continuation0)
                        feasible = grid.feasible
                    out[key] = (*changing, arrays[3] if through else feasible)
                    emit[key] = (*changing, None if through else feasible)
            emitted_carried = {name: next_carry[name] for name in current_carried}
            return (next_carry, carried_out), (
                current,
                current_violations,
                emitted,
                emitted_carried,
            )

        periods = jnp.arange(segment.start, segment.stop)
        window = slice(segment.start, segment.stop)
        inputs = (
            (periods, *jax.tree.map(lambda t: t[window], (tables, next_tables)))
            if tables
            else periods
        )
        checkpointed = jax.checkpoint(step)

        def ticked_step(carried, inputs, checkpointed=checkpointed, tables=tables):
            # Outside the checkpoint, so the backward pass of jax.grad does not replay it.
            solve_tick(progress, plan.n_periods, inputs[0] if tables else inputs)
            return checkpointed(carried, inputs)

        if apart:
            last_inputs = jax.tree.map(lambda x: x[-1], inputs)
            solve_tick(progress, plan.n_periods, last_inputs[0] if tables else last_inputs)
            carry, last_outputs = functools.partial(step, last=True)(carry, last_inputs)
            if segment.stop - segment.start > 1:
                looped = jax.tree.map(lambda x: x[:-1], inputs)
                carry, outputs = jax.lax.scan(ticked_step, carry, looped, reverse=True)
                outputs = jax.tree.map(
                    lambda xs, x: jnp.concatenate([xs, x[None]]), outputs, last_outputs
                )
            else:
                outputs = jax.tree.map(lambda x: x[None], last_outputs)
        else:
            carry, outputs = jax.lax.scan(ticked_step, carry, inputs, reverse=True)
        following = frozenset(segment.regimes)
        segment_values, segment_violations, segment_policies, segment_carried = outputs
        length = segment.stop - segment.start
        by_regime, by_group = segment_policies
        segment_rows = (_feasible_put_back(by_regime), _feasible_put_back(by_group))
        segment_policies = _ungrouped(segment_rows, choices, leading=1)
        if deferred:
            read = read_values(
                plan,
                solvers,
                resolved,
                ages,
                sharding,
                inputs,
                tables,
                {name: segment_policies[name] for name in deferred},
                {name: zero_policies[name].borrowing_limit for name in deferred},
                segment_rows[1],
            )
            segment_values = {
                **segment_values,
                **{name: place(name, v.astype(dtype), 1) for name, v in read.items()},
            }
        for name in endogenous:
            nodes, count, continuation0, feasible = segment_policies[name]
            zero = zero_policies[name]
            status = ORDINARY if name in segment.regimes else INACTIVE
            policies[name].append(
                EndogenousGrid(
                    nodes=nodes,
                    count=count,
                    continuation0=continuation0,
                    feasible=feasible,
                    borrowing_limit=jnp.broadcast_to(zero.borrowing_limit, (length,)),
                    status=jnp.full((length,), status, jnp.int32),
                )
            )
        for name in two_valued:
            exponential[name].append(
                segment_carried[name]
                if name in segment_carried
                else place(name, jnp.full((length, *shapes[name]), -jnp.inf, dtype), 1)
            )
        for name in plan.regimes:
            if name in segment_values:
                values[name].append(segment_values[name])
                # (periods, *sharded state axes, checks): the sharded axes are reduced
                # once after the scans (`_reduce_sharded`), not in every period.
                violations[name].append(segment_violations[name])
            else:
                values[name].append(
                    place(name, jnp.full((length, *shapes[name]), -jnp.inf, dtype), 1)
                )
                violations[name].append(None)

    stacked_values = {
        name: place(name, jnp.concatenate(parts[::-1], axis=0), 1) for name, parts in values.items()
    }
    all_checks = {name: checks.get(name, ()) for name in plan.regimes}
    stacked_violations = {}
    for name in plan.regimes:
        n_checks = len(all_checks[name])
        sharded = tuple(n for i, n in enumerate(shapes[name]) if i not in unsharded_axes(name))
        parts = [
            v if v is not None else jnp.zeros((p.shape[0], *sharded, n_checks), dtype)
            for v, p in zip(violations[name], values[name], strict=True)
        ]
        stacked_violations[name] = jnp.concatenate(parts[::-1], axis=0)
    if validate:
        stacked_violations, all_checks = _with_nan_check(
            stacked_values, stacked_violations, all_checks, unsharded_axes
        )
    return Solution(
        values=stacked_values,
        violations={name: _reduce_sharded(v) for name, v in stacked_violations.items()},
        checks=all_checks,
        active={name: tuple(sorted(r.active)) for name, r in plan.regimes.items()},
        state_names={name: r.states for name, r in plan.regimes.items()},
        policies={
            name: jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts[::-1])
            for name, parts in policies.items()
        },
        exponential_values={
            name: place(name, jnp.concatenate(parts[::-1], axis=0), 1)
            for name, parts in exponential.items()
        },
        grids=state_points(plan, tables),
        # Static: set when the solve is traced, so a call does not copy the Solution.
        model_structure=plan_structure(plan, ages),
    )


# How much of the refined grids the read of the values after the period loop batches at
# once (`read_values`): beyond, it reads chunks of periods.
READ_VALUES_BYTES = 32 * 2**20


def _feasible_put_back(emitted: dict) -> dict:
    """The scan's emitted grids with an always-true `feasible` (emitted as None) put
    back."""
    return {
        key: (*arrays, jnp.ones(arrays[1].shape, bool) if feasible is None else feasible)
        for key, (*arrays, feasible) in emitted.items()
    }


def _members(key) -> tuple[str, ...]:
    """The regimes of a key of the carried grids: a group's names, or one regime."""
    return key if isinstance(key, tuple) else (key,)


def _ungrouped(carried: tuple[dict, dict], choices: dict, leading: int = 0) -> dict[str, tuple]:
    """The carried (or, with `leading` period axes, emitted) grids by regime, from
    `(by regime, by group)`: each group's rows sliced back into its regimes' choices
    (`choices`: each regime's shape of discrete states and actions)."""
    by_regime, by_group = carried
    out = dict(by_regime)
    for key, arrays in by_group.items():
        offset = 0
        for name in key:
            shape = choices[name]
            size = math.prod(shape)
            out[name] = tuple(
                jax.lax.slice_in_dim(a, offset, offset + size, axis=leading).reshape(
                    (*a.shape[:leading], *shape, *a.shape[leading + 1 :])
                )
                for a in arrays
            )
            offset += size
    return out


def _grouped(by_regime: dict[str, tuple], groups, choices: dict) -> tuple[dict, dict]:
    """`by_regime` as `(by regime, by group)`: the regimes of each group (a tuple of
    names) as one set of rows, their choices one after the other (`_ungrouped` undoes
    it); the other regimes by name. (Two dictionaries: JAX sorts a dictionary's keys,
    and names do not sort with tuples.)"""
    out: dict = {}
    for group in groups:
        out[group] = tuple(
            jnp.concatenate(
                [
                    by_regime[name][i].reshape(
                        (math.prod(choices[name]), *by_regime[name][i].shape[len(choices[name]) :])
                    )
                    for name in group
                ]
            )
            for i in range(4)
        )
    grouped = {name for group in groups for name in group}
    return {name: a for name, a in by_regime.items() if name not in grouped}, out


def _last_period_apart(plan: ModelPlan, solvers: dict[str, AbstractSolver], names) -> bool:
    """Whether the backward induction solves the model's last period (its regimes
    `names`) apart from the period loop, with `RegimeProblem.last_period` set.

    Where nothing follows, `DCEGM` needs neither the Euler equation nor the upper
    envelope (the choice consumes down to the borrowing limit), which in the loop would
    cost a full period's work. Its step is a second trace of the period step: only where
    some regime is solved by `DCEGM` and every other one is a single point (no state, no
    action: a terminal regime such as death), whose second copy costs next to nothing.
    """
    regimes = {name: plan.regimes[name] for name in names}
    return any(isinstance(solvers[name], DCEGM) for name in regimes) and all(
        isinstance(solvers[name], DCEGM) or not (regime.states or regime.actions)
        for name, regime in regimes.items()
    )


def _grid_status(name: str, segment, following: frozenset[str] | None, period) -> jax.Array:
    """The status of the grid of regime `name` that `period` of `segment` reads (that of
    period + 1): `ZERO` after the last period, `ORDINARY` where the regime is active
    then, `INACTIVE` where not. Only the segment's last period reads the next segment
    (`following`: its regimes; None after the last period)."""
    inside = ORDINARY if name in segment.regimes else INACTIVE
    edge = ZERO if following is None else (ORDINARY if name in following else INACTIVE)
    if edge == inside:
        return jnp.asarray(inside, jnp.int32)
    return jnp.where(period == segment.stop - 1, edge, inside).astype(jnp.int32)


def read_values(
    plan: ModelPlan,
    solvers: dict[str, AbstractSolver],
    resolved,
    ages,
    sharding,
    inputs,
    tables,
    policies,
    borrowing_limits,
    rows=None,
) -> dict[str, jax.Array]:
    """The value arrays of the DC-EGM regimes of `policies` in every period of a segment
    (leading axis), read from their refined grids (`policies`: the scan's emitted
    `(nodes, count, continuation0, feasible)`): the reads the period step left out
    (`solve_regimes`' `later`). All periods at once where their grids take at most
    `READ_VALUES_BYTES` (the batched read holds a copy of them), else in chunks of
    periods that do."""

    def at(inputs, policies, rows):
        period, grid_points, next_grid_points = inputs if tables else (inputs, {}, {})
        problems = {
            name: RegimeProblem(
                plan,
                plan.regimes[name],
                resolved[name],
                period,
                age_of(ages, period),
                {},
                False,
                sharding=sharding,
                prepare=False,
                grid_points=grid_points,
                next_grid_points=next_grid_points,
            )
            for name in plan.regimes
            if name in policies
        }
        grids = {
            name: EndogenousGrid(
                nodes,
                count,
                continuation0,
                feasible,
                borrowing_limits[name],
                jnp.asarray(ORDINARY, jnp.int32),
            )
            for name, (nodes, count, continuation0, feasible) in policies.items()
        }
        refined: dict[tuple[str, ...], dict[str, jax.Array]] = {
            key: dict(zip(("nodes", "count", "continuation0", "feasible"), arrays, strict=True))
            for key, arrays in rows.items()
        }
        return regime_values(solvers, problems, grids, refined)

    rows = {key: r for key, r in (rows or {}).items() if set(key) <= set(policies)}
    per_period = sum(math.prod(a.shape[1:]) * a.dtype.itemsize for a in jax.tree.leaves(policies))
    length = jax.tree.leaves(policies)[0].shape[0]
    chunk = max(1, READ_VALUES_BYTES // max(per_period, 1))
    if chunk >= length:
        return jax.vmap(at)(inputs, policies, rows)
    return jax.lax.map(lambda xs: at(*xs), (inputs, policies, rows), batch_size=chunk)


def state_points(plan: ModelPlan, tables) -> dict[str, dict[str, jax.Array]]:
    """The points by period of the age-varying state grids (`Solution.grids`)."""
    grids = {}
    for name, varying in tables.items():
        states = {s: varying[s] for s in plan.regimes[name].states if s in varying}
        if states:
            grids[name] = states
    return grids


def continuation_readers(
    plan: ModelPlan,
    solvers: dict[str, AbstractSolver],
    resolved,
    regime: str,
    next_values: dict,
    next_policies: dict,
    next_period,
    next_age,
    next_grid_points=None,
) -> dict:
    """How a DC-EGM regime reads each regime it can move to in the next period
    (`next_grid_points`: next period's points of the age-varying grids)."""
    solver = solvers[regime]
    assert isinstance(solver, DCEGM)
    readers = {}
    for target in plan.regimes[regime].targets:
        target_solver = solvers[target]
        if isinstance(target_solver, DCEGM) and target in next_policies:
            readers[target] = endogenous_reader(
                plan,
                target,
                target_solver,
                next_policies[target],
                resolved[target],
                next_period,
                next_age,
            )
        else:
            points = (next_grid_points or {}).get(target, {}).get(solver.state)
            readers[target] = array_reader(plan, target, next_values[target], solver.state, points)
    return readers


def _with_nan_check(values, violations, checks, unsharded_axes):
    """Each regime's violations with one more check: whether its value array has a NaN
    in that period (reduced over the unsharded state axes, like the other checks)."""
    dtype = jnp.zeros(()).dtype
    # `max` propagates NaN: the value arrays of one shape and reduction axes are
    # maximised together in one variadic reduction, without a separate test kernel.
    groups: dict[tuple, list[str]] = {}
    for name, value in values.items():
        axes = tuple(1 + i for i in unsharded_axes(name))
        groups.setdefault((value.shape, axes), []).append(name)
    extended = {}
    for (_, axes), names in groups.items():
        highest = max_each(tuple(values[name] for name in names), axes)
        for name, high in zip(names, highest, strict=True):
            has_nan = jnp.isnan(high).astype(dtype)
            extended[name] = jnp.concatenate([violations[name], has_nan[..., None]], axis=-1)
    return extended, {name: (*c, NAN_CHECK) for name, c in checks.items()}


def _reduce_sharded(violations):
    """`(periods, *sharded state axes, checks)` reduced to `(periods, checks)`.

    The period step reduces the checks over the unsharded state axes only, so that it
    stays device-local; this reduction, once after the scans, is the only cross-device
    step of validation: an all-reduce of `n_periods x n_checks` numbers.
    """
    if violations.ndim == 2:
        return violations
    return jnp.max(violations, axis=tuple(range(1, violations.ndim - 1)))
