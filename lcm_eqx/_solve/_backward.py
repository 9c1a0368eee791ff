"""Backward induction: one `lax.scan` over the periods of each segment.

Within a segment (consecutive periods with the same active regimes) every period has the
same structure, so the period step is traced and compiled once, with `period` and `age`
as traced scalars: compile time does not grow with the number of periods.

The driver knows no concrete solver: it groups the regimes by equal solver and carries
each group's state (`AbstractSolver.init`, `step`) without opening it; a solver reads
the regimes it can move to through their own solvers (`AbstractSolver.reader`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from .._errors import warn
from .._grids._age import AgeGrid, age_of
from .._model._params import resolve_params
from .._model._plan import ModelPlan, Segment
from .._numerics import by_platform
from .._persistence import plan_structure
from .._progress import solve_tick
from .._validation import NAN_CHECK
from ._age_tables import age_varying_points, shifted
from ._check_arrays import max_each, stack_checks
from ._kernel import RegimeProblem
from ._reduce import max_and_count_neginf
from ._sharding import ShardingPlan, sharding_plan
from ._solution import Solution
from ._solver import AbstractSolver, Period, SegmentOutputs, solver_groups

# The largest padded table of check violations `_merge_checks` reduces at once.
_MERGED_CHECKS = 2**16


def state_shape(plan: ModelPlan, regime: str) -> tuple[int, ...]:
    regime_plan = plan.regimes[regime]
    return tuple(regime_plan.grids[s].n_points for s in regime_plan.states)


@dataclasses.dataclass(frozen=True)
class _Induction:
    """What every period of one solve shares: the model, its solvers and their groups,
    the resolved parameters, and how value arrays are placed on the devices."""

    plan: ModelPlan
    solvers: dict[str, AbstractSolver]
    groups: list[tuple[AbstractSolver, tuple[str, ...]]]
    resolved: dict
    ages: AgeGrid | None
    validate: bool
    sharding: ShardingPlan | None
    tables: dict
    # Regimes whose value arrays no regime reads next period (`Period.values_later`).
    values_later: frozenset[str]

    def place(self, name, array, leading=0):
        """Constrain a value array (with `leading` extra axes) to its regime's sharding."""
        if self.sharding is None:
            return array
        return self.sharding.constrain(array, (None,) * leading + self.plan.regimes[name].states)

    def unsharded_axes(self, name):
        states = self.plan.regimes[name].states
        sharding = self.sharding
        return tuple(
            i for i, s in enumerate(states) if sharding is None or not sharding.is_sharded(s)
        )

    def split(self, inputs):
        """A period's scanned inputs: the period, and this and next period's points of
        the age-varying grids."""
        return inputs if self.tables else (inputs, {}, {})

    def problems(self, inputs, names, next_values=None, last=False) -> dict[str, RegimeProblem]:
        """The regime-period problems of `names` at one element of the scanned inputs;
        without `next_values`, problems that read no continuation (after the loop)."""
        period, grid_points, next_grid_points = self.split(inputs)
        return {
            name: RegimeProblem(
                self.plan,
                self.plan.regimes[name],
                self.resolved[name],
                period,
                age_of(self.ages, period),
                {} if next_values is None else next_values,
                self.validate and next_values is not None,
                sharding=self.sharding,
                prepare=next_values is not None and self.solvers[name].reads_next_values,
                grid_points=grid_points,
                next_grid_points=next_grid_points,
                last_period=last,
            )
            for name in names
        }


def solve_model(
    plan: ModelPlan,
    solvers: dict[str, AbstractSolver],
    ages,
    params,
    *,
    validate: bool,
    progress: str | None = None,
) -> tuple[Solution, dict[str, jax.Array]]:
    """Solve the model by backward induction; a pure function of `params`.

    `solvers[regime]` solves each regime's period problem. `progress` (`None`, `"text"`
    or `"tqdm"`) emits a host callback per period. With `validate`, the second result
    holds by regime, per period, how many states have value -inf (no feasible action),
    counted in the same reduction as the NaN check (a few numbers leave the program;
    `warn_infeasible_states` reports them); without, it is empty.
    """
    dtype = jnp.zeros(()).dtype
    # Grids whose bounds vary with age: their points of period t (and t + 1, where next
    # period's values are read) are scanned inputs, so periods still share one step.
    # Empty for other models, which then scan over the periods alone.
    tables = age_varying_points(plan)
    induction = _Induction(
        plan=plan,
        solvers=solvers,
        groups=solver_groups(plan, solvers),
        resolved=resolve_params(plan, params),
        ages=ages,
        validate=validate,
        sharding=sharding_plan(plan),  # None unless some state has distributed=True
        tables=tables,
        values_later=_values_later(plan, solvers),
    )
    shapes = {name: state_shape(plan, name) for name in plan.regimes}
    carry = (
        {name: induction.place(name, jnp.zeros(s, dtype)) for name, s in shapes.items()},  # V_T
        tuple(solver.init(plan, names, dtype) for solver, names in induction.groups),
    )
    following: frozenset[str] | None = None  # the regimes of the segment after this one
    checks: dict[str, tuple[str, ...]] = {}
    # Each regime's solver's warnings (`AbstractSolver.notices`), asked once per trace.
    notices: dict[str, tuple[str, ...]] = {}
    parts: dict[str, dict[str, list]] = {
        kind: {} for kind in ("values", "violations", "policies", "exponential")
    }
    for segment in reversed(plan.segments):
        carry = (
            carry[0],
            tuple(
                solver.enter(plan, state, segment.regimes)
                for (solver, _), state in zip(induction.groups, carry[1], strict=True)
            ),
        )
        deferred: set[str] = set()  # regimes whose values the steps leave to postprocess
        # Each regime's columns in the period's merged check violations (`_merge_checks`).
        columns: dict[str, tuple[int, int]] = {}
        # The model's last period, solved apart from the period loop where that lets a
        # solver skip work (`_last_period_apart`); the loop's last period then reads it.
        apart = following is None and _last_period_apart(plan, solvers, segment.regimes)
        step = functools.partial(
            _period_step,
            induction,
            segment=segment,
            following=frozenset(segment.regimes) if apart else following,
            checks=checks,
            notices=notices,
            deferred=deferred,
            columns=columns,
        )
        periods = jnp.arange(segment.start, segment.stop)
        window = slice(segment.start, segment.stop)
        inputs = (
            (periods, *jax.tree.map(lambda t: t[window], (tables, shifted(tables))))
            if tables
            else periods
        )
        checkpointed = jax.checkpoint(step)

        def ticked_step(carried, inputs, checkpointed=checkpointed):
            # Outside the checkpoint, so the backward pass of jax.grad does not replay it.
            solve_tick(progress, plan.n_periods, induction.split(inputs)[0])
            return checkpointed(carried, inputs)

        if apart:
            last_inputs = jax.tree.map(lambda x: x[-1], inputs)
            solve_tick(progress, plan.n_periods, induction.split(last_inputs)[0])
            carry, last_outputs = step(carry, last_inputs, last=True)
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
        _collect(induction, segment, inputs, outputs, frozenset(deferred), columns, parts)
    for messages in notices.values():
        for message in messages:
            warn(message)
    return _solution(induction, checks, parts, tables, ages)


def _period_step(
    induction: _Induction,
    carried,
    inputs,
    *,
    segment: Segment,
    following: frozenset[str] | None,
    checks: dict,
    notices: dict[str, tuple[str, ...]],
    deferred: set[str],
    columns: dict[str, tuple[int, int]],
    last: bool = False,
):
    """One period of a segment: each group of regimes stepped by its solver."""
    plan, dtype = induction.plan, jnp.zeros(()).dtype
    next_values, states = carried
    period, _, next_grid_points = induction.split(inputs)
    problems = induction.problems(inputs, segment.regimes, next_values, last)
    for name, problem in problems.items():
        extra = induction.solvers[name].extra_checks(plan.regimes[name])
        checks[name] = (*problem.checks, *extra) if induction.validate else ()
        if name not in notices:
            notices[name] = induction.solvers[name].notices(problem)
    group_of = {name: i for i, (_, names) in enumerate(induction.groups) for name in names}

    def read(target: str, along: str):
        solver = induction.solvers[target]
        return solver.reader(target, states[group_of[target]], period_info, along)

    period_info = Period(
        plan=plan,
        resolved=induction.resolved,
        period=period,
        age=age_of(induction.ages, period),
        next_age=age_of(induction.ages, period + 1),
        next_values=next_values,
        next_grid_points=next_grid_points,
        segment=segment,
        following=following,
        last=last,
        values_later=induction.values_later,
        read_target=read,
    )
    solutions, new_states, emitted = {}, [], []
    for (solver, names), state in zip(induction.groups, states, strict=True):
        own = {name: problems[name] for name in names if name in problems}
        solved, state, out = solver.step(own, state, period_info)
        solutions.update(solved)
        new_states.append(state)
        emitted.append(out)
    current, current_violations, current_carried, tables = {}, {}, {}, {}
    for name in segment.regimes:
        value, check, _, carried_value = solutions[name]
        if value is None:  # computed after the period loop (`postprocess`)
            deferred.add(name)
        else:
            current[name] = induction.place(name, value.astype(dtype))
        if carried_value is not None:
            current_carried[name] = induction.place(name, carried_value.astype(dtype))
        # Reduce the checks over the unsharded state axes only: the sharded ones are
        # reduced after the scan, so the period step stays device-local.
        axes = induction.unsharded_axes(name)
        shape = state_shape(plan, name)
        n_checks = len(check) if isinstance(check, tuple) else check.shape[-1]
        if induction.validate and n_checks and len(axes) == len(shape):
            # Every state axis reduced here: merged with the other regimes' checks.
            tables[name] = jax.tree.map(lambda c: c.astype(dtype), check)
        elif isinstance(check, tuple):  # one array per check: one variadic reduction
            current_violations[name] = stack_checks(check, axes, shape, dtype)
        else:
            current_violations[name] = jnp.max(check, axis=axes)
    columns.clear()
    merged = _merge_checks(tables, columns)
    next_carry = {
        name: current_carried.get(name, current[name])
        if name in current
        # NaN where nothing may read it (a value read after the loop).
        else induction.place(
            name,
            jnp.full(state_shape(plan, name), jnp.nan if name in deferred else -jnp.inf, dtype),
        )
        for name in plan.regimes
    }
    emitted_carried = {name: next_carry[name] for name in current_carried}
    return (next_carry, tuple(new_states)), (
        current,
        current_violations,
        tuple(emitted),
        emitted_carried,
        merged,
    )


def _merge_checks(
    tables: dict[str, jax.Array | tuple[jax.Array, ...]], columns: dict[str, tuple[int, int]]
):
    """The check violations of the regimes in `tables` (each one array per check over the
    states, or their stack `(*states, n_checks)`), maximised over the states into one
    vector of every regime's checks, whose columns of each regime `columns` records;
    None without tables.

    On the CPU in one reduction: a reduction per regime was two XLA kernels per regime
    and period (and a copy of each into the scanned outputs): on the quick start's
    model, 3 of the validated program's kernels. The tables are flattened to `(points,
    n_checks)` and padded with `-inf` to the longest (the maximum of a column is
    unchanged); a regime whose padded table would be large is reduced on its own first,
    so that no regime's points are padded to another's. Elsewhere each table is reduced
    over its own axes (flattening is a relayout on a TPU; see `max_each`).
    """
    if not tables:
        return None
    start = 0
    for name, t in tables.items():
        n_checks = len(t) if isinstance(t, tuple) else t.shape[-1]
        columns[name] = (start, start + n_checks)
        start += n_checks
    return by_platform(tuple(tables.values()), cpu=_merge_flattened, default=_merge_apart)


def _merge_flattened(tables: tuple) -> jax.Array:
    stacked = (jnp.stack(t, axis=-1) if isinstance(t, tuple) else t for t in tables)
    tables = tuple(t.reshape(-1, t.shape[-1]) for t in stacked)
    total = sum(t.shape[1] for t in tables)
    tables = tuple(
        max_each((t,), (0,))[0][None] if t.shape[0] * total > _MERGED_CHECKS else t for t in tables
    )
    rows = max(t.shape[0] for t in tables)
    padded = [
        jnp.pad(t, ((0, rows - t.shape[0]), (0, 0)), constant_values=-jnp.inf) for t in tables
    ]
    return max_each((jnp.concatenate(padded, axis=1),), (0,))[0]


def _merge_apart(tables: tuple) -> jax.Array:
    def reduced(t):
        if isinstance(t, tuple):  # one array per check: their maxima, then stacked
            return jnp.stack(max_each(t, tuple(range(t[0].ndim))))
        return max_each((t,), tuple(range(t.ndim - 1)))[0]

    return jnp.concatenate([reduced(t) for t in tables])


def _collect(induction: _Induction, segment, inputs, outputs, deferred, columns, parts) -> None:
    """A segment's scanned outputs added to `parts` (by kind and regime, one entry per
    segment), with what each solver computes after the loop (`postprocess`)."""
    plan = induction.plan
    dtype = jnp.zeros(()).dtype
    segment_values, segment_violations, segment_emitted, segment_carried, merged = outputs
    segment_violations = dict(segment_violations)
    for name, (start, stop) in columns.items():
        segment_violations[name] = merged[:, start:stop]
    length = segment.stop - segment.start
    finished = SegmentOutputs(
        plan=plan,
        segment=segment,
        inputs=inputs,
        deferred=deferred,
        problems=lambda inputs, names: induction.problems(inputs, names),
    )
    segment_values = dict(segment_values)
    for (solver, _), emitted in zip(induction.groups, segment_emitted, strict=True):
        later, policies = solver.postprocess(emitted, finished)
        for name, values in later.items():
            segment_values[name] = induction.place(name, values.astype(dtype), 1)
        for name, policy in policies.items():
            parts["policies"].setdefault(name, []).append(policy)

    def absent(name):
        return induction.place(
            name, jnp.full((length, *state_shape(plan, name)), -jnp.inf, dtype), 1
        )

    for name, regime in plan.regimes.items():
        if regime.aggregator is not None and regime.aggregator.n_values > 1:
            # `PresentBias`'s W: what earlier periods read as the continuation.
            exponential = segment_carried.get(name)
            parts["exponential"].setdefault(name, []).append(
                absent(name) if exponential is None else exponential
            )
        # (periods, *sharded state axes, checks): the sharded axes are reduced once
        # after the scans (`_reduce_sharded`), not in every period.
        parts["values"].setdefault(name, []).append(segment_values.get(name, absent(name)))
        parts["violations"].setdefault(name, []).append(segment_violations.get(name))


def _solution(
    induction: _Induction, checks, parts, tables, ages
) -> tuple[Solution, dict[str, jax.Array]]:
    """The `Solution` from the segments' parts (in reverse order of the periods), and
    with validation, by regime and period, how many states have no feasible action."""
    plan, dtype = induction.plan, jnp.zeros(()).dtype
    place = induction.place
    values = {
        name: place(name, jnp.concatenate(p[::-1], axis=0), 1)
        for name, p in parts["values"].items()
    }
    all_checks = {name: checks.get(name, ()) for name in plan.regimes}
    violations = {}
    for name in plan.regimes:
        n_checks = len(all_checks[name])
        shape = state_shape(plan, name)
        unsharded = induction.unsharded_axes(name)
        sharded = tuple(n for i, n in enumerate(shape) if i not in unsharded)
        stacked = [
            v if v is not None else jnp.zeros((p.shape[0], *sharded, n_checks), dtype)
            for v, p in zip(parts["violations"][name], parts["values"][name], strict=True)
        ]
        violations[name] = jnp.concatenate(stacked[::-1], axis=0)
    infeasible: dict[str, jax.Array] = {}
    if induction.validate:
        violations, all_checks, infeasible = _value_checks(
            values, violations, all_checks, induction.unsharded_axes
        )
    solution = Solution(
        values=values,
        violations={name: _reduce_sharded(v) for name, v in violations.items()},
        checks=all_checks,
        active={name: tuple(sorted(r.active)) for name, r in plan.regimes.items()},
        state_names={name: r.states for name, r in plan.regimes.items()},
        policies={
            name: jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *p[::-1])
            for name, p in parts["policies"].items()
        },
        exponential_values={
            name: place(name, jnp.concatenate(p[::-1], axis=0), 1)
            for name, p in parts["exponential"].items()
        },
        grids=state_points(plan, tables),
        # Static: set when the solve is traced, so a call does not copy the Solution.
        model_structure=plan_structure(plan, ages),
    )
    return solution, infeasible


def _values_later(plan: ModelPlan, solvers: dict[str, AbstractSolver]) -> frozenset[str]:
    """The regimes whose value arrays no regime reads next period: every regime that can
    move to them reads them through their solver (`reads_next_values` False), and their
    solver can compute them after the loop (`defers_values`)."""
    return frozenset(
        name
        for name, regime in plan.regimes.items()
        if solvers[name].defers_values(regime)
        and all(
            not solvers[r].reads_next_values
            for r, other in plan.regimes.items()
            if name in other.targets
        )
    )


def _last_period_apart(plan: ModelPlan, solvers: dict[str, AbstractSolver], names) -> bool:
    """Whether the backward induction solves the model's last period (its regimes
    `names`) apart from the period loop, with `RegimeProblem.last_period` set.

    Where nothing follows, a solver that `solves_last_period_apart` skips work that in
    the loop would cost a full period (`DCEGM`: neither the Euler equation nor the upper
    envelope). Its step is a second trace of the period step: only where some regime's
    solver asks for it and every other one is a single point (no state, no action: a
    terminal regime such as death), whose second copy costs next to nothing.
    """
    regimes = {name: plan.regimes[name] for name in names}
    return any(solvers[name].solves_last_period_apart for name in regimes) and all(
        solvers[name].solves_last_period_apart or not (regime.states or regime.actions)
        for name, regime in regimes.items()
    )


def state_points(plan: ModelPlan, tables) -> dict[str, dict[str, jax.Array]]:
    """The points by period of the age-varying state grids (`Solution.grids`)."""
    grids = {}
    for name, varying in tables.items():
        states = {s: varying[s] for s in plan.regimes[name].states if s in varying}
        if states:
            grids[name] = states
    return grids


def _value_checks(values, violations, checks, unsharded_axes):
    """What validation reads of the value arrays, in one variadic reduction per group of
    value arrays of one shape and reduction axes (`max_and_count_neginf`): each
    regime's violations with one more check, whether its value array has a NaN in that
    period (reduced over the unsharded state axes, like the other checks), and by
    regime, per period, how many states have value -inf (no feasible action; summed
    over the sharded axes too), which `warn_infeasible_states` reports."""
    dtype = jnp.zeros(()).dtype
    groups: dict[tuple, list[str]] = {}
    for name, value in values.items():
        axes = tuple(1 + i for i in unsharded_axes(name))
        groups.setdefault((value.shape, axes), []).append(name)
    extended, infeasible = {}, {}
    for (_, axes), names in groups.items():
        highest, counts = max_and_count_neginf(tuple(values[name] for name in names), axes)
        for name, high, count in zip(names, highest, counts, strict=True):
            has_nan = jnp.isnan(high).astype(dtype)
            extended[name] = jnp.concatenate([violations[name], has_nan[..., None]], axis=-1)
            # The sharded state axes: one all-reduce of `n_periods` counts per array.
            infeasible[name] = (
                jnp.sum(count, axis=tuple(range(1, count.ndim))) if count.ndim > 1 else count
            )
    return extended, {name: (*c, NAN_CHECK) for name, c in checks.items()}, infeasible


def _reduce_sharded(violations):
    """`(periods, *sharded state axes, checks)` reduced to `(periods, checks)`.

    The period step reduces the checks over the unsharded state axes only, so that it
    stays device-local; this reduction, once after the scans, is the only cross-device
    step of validation: an all-reduce of `n_periods x n_checks` numbers.
    """
    if violations.ndim == 2:
        return violations
    return jnp.max(violations, axis=tuple(range(1, violations.ndim - 1)))
