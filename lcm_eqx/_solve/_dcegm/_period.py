"""DC-EGM's period state: what the backward induction carries for the regimes one `DCEGM`
solves (their refined grids), how a period steps it, and what is computed after the loop.

The state is `(by regime, by group)`: the arrays of each regime's `EndogenousGrid` that
change from period to period (`nodes`, `count`, `continuation0`, `feasible`, and the
per-choice `borrowing_limit`), with the
regimes solved together in one pass over rows (`groups`) carried as those rows, their
choices one after the other, rather than a slice of them per regime (the slices would be
kernels of every period). The status is a function of the period (`grid_status`):
constants in the loop's state would each be copied into it in every period, by XLA
kernels ready when the period starts (see docs/architecture.md, "threads"). An
always-true `feasible`, and the constant limit `savings[0]` of regimes without a
function `borrowing_limit`, are carried through unchanged and emitted as None.

Two dictionaries, not one: JAX sorts a dictionary's keys, and names do not sort with
tuples.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..._model._plan import ModelPlan, Segment
from .._groups import stacked_params, structure_groups
from .._reading import ContinuationReader, zero_reader
from .._solver import Period, PeriodSolution, SegmentOutputs
from ._envelope import INACTIVE, ORDINARY, ZERO, EndogenousGrid
from ._readers import endogenous_reader, inactive_grid, stacked_endogenous_reader, zero_grid
from ._rows import grid_arrays

if TYPE_CHECKING:
    from .._kernel import RegimeProblem
    from ._protocol import DCEGMLike

State = tuple[dict[str, tuple], dict[tuple[str, ...], tuple]]

# The refined grids' arrays the state carries, as `DCEGM`'s rows name them (in the
# order of `EndogenousGrid`'s fields).
GRID_FIELDS = ("nodes", "count", "continuation0", "feasible", "limit")

# How much of the refined grids the read of the values after the period loop batches at
# once (`postprocess`): beyond, it reads chunks of periods.
READ_VALUES_BYTES = 32 * 2**20


def choice_shapes(solver: DCEGMLike, plan: ModelPlan, names) -> dict[str, tuple[int, ...]]:
    """The shape of each regime's choices: its discrete states, then discrete actions."""
    shapes = {}
    for name in names:
        regime = plan.regimes[name]
        shapes[name] = tuple(
            regime.grids[s].n_points
            for s in (*regime.states, *regime.discrete_actions)
            if s != solver.state
        )
    return shapes


def members(state: State) -> tuple[str, ...]:
    """The regimes a state holds, by regime and in groups."""
    by_regime, by_group = state
    return (*by_regime, *(name for group in by_group for name in group))


def initial_state(solver: DCEGMLike, plan: ModelPlan, names, dtype) -> State:
    """The state after the model's last period (V_T = 0), each regime on its own."""
    grids = {name: zero_grid(plan, name, solver, dtype) for name in names}
    return {name: grid_arrays(g) for name, g in grids.items()}, {}


def batch_groups(solver: DCEGMLike, plan: ModelPlan, names) -> list[tuple[str, ...]]:
    """The regimes among `names` (in their order) solved together in one pass over rows
    (`DCEGM.solve_batched`): those whose discrete axes are neither splayed nor sharded,
    one group per number of savings points (a kinked budget adds points by draw)."""
    groups: dict[int, tuple[str, ...]] = {}
    for name in names:
        regime = plan.regimes[name]
        if solver.batchable(regime):
            size = solver.n_savings(regime)
            groups[size] = (*groups.get(size, ()), name)
    return list(groups.values())


def regrouped(solver: DCEGMLike, plan: ModelPlan, state: State, active) -> State:
    """`state` with the regimes of a segment (`active`) that are solved together carried
    as one set of rows, the others by regime."""
    names = members(state)
    shapes = choice_shapes(solver, plan, names)
    by_regime = ungrouped(state, shapes)
    groups = batch_groups(solver, plan, [n for n in names if n in active])
    out: dict = {}
    for group in groups:
        out[group] = tuple(
            jnp.concatenate(
                [
                    by_regime[name][i].reshape(
                        (math.prod(shapes[name]), *by_regime[name][i].shape[len(shapes[name]) :])
                    )
                    for name in group
                ]
            )
            for i in range(len(GRID_FIELDS))
        )
    grouped = {name for group in groups for name in group}
    return {name: a for name, a in by_regime.items() if name not in grouped}, out


def ungrouped(
    state: State, shapes: dict, leading: int = 0, only: str | None = None
) -> dict[str, tuple]:
    """The carried (or, with `leading` period axes, emitted) grids by regime: each
    group's rows sliced back into its regimes' choices (`shapes`); with `only`, that
    regime's alone (a reader of one target slices no other)."""
    by_regime, by_group = state
    out = dict(by_regime)
    for key, arrays in by_group.items():
        offset = 0
        for name in key:
            shape = shapes[name]
            size = math.prod(shape)
            if only is not None and name != only:
                offset += size
                continue
            out[name] = tuple(
                jax.lax.slice_in_dim(a, offset, offset + size, axis=leading).reshape(
                    (*a.shape[:leading], *shape, *a.shape[leading + 1 :])
                )
                for a in arrays
            )
            offset += size
    return out


def grid_of(arrays: tuple, status: Array) -> EndogenousGrid:
    """The `EndogenousGrid` of the state's arrays of a regime (`GRID_FIELDS`)."""
    nodes, count, continuation0, feasible, limit = arrays
    return EndogenousGrid(nodes, count, continuation0, feasible, limit, status)


def grid_status(name: str, segment: Segment, following: frozenset[str] | None, period) -> Array:
    """The status of the grid of regime `name` that `period` of `segment` reads (that of
    period + 1): `ZERO` after the last period, `ORDINARY` where the regime is active
    then, `INACTIVE` where not. Only the segment's last period reads the next segment
    (`following`: its regimes; None after the last period)."""
    inside = ORDINARY if name in segment.regimes else INACTIVE
    edge = ZERO if following is None else (ORDINARY if name in following else INACTIVE)
    if edge == inside:
        return jnp.asarray(inside, jnp.int32)
    return jnp.where(period == segment.stop - 1, edge, inside).astype(jnp.int32)


def reader(solver: DCEGMLike, target: str, state: State, period: Period):
    """How `period` reads regime `target` of `state`: its refined grids of next period."""
    plan = period.plan
    arrays = ungrouped(state, choice_shapes(solver, plan, members(state)), only=target)[target]
    grid = grid_of(arrays, grid_status(target, period.segment, period.following, period.period))
    return endogenous_reader(
        plan, target, solver, grid, period.resolved[target], period.period + 1, period.next_age
    )


def step(
    solver: DCEGMLike, problems: dict[str, RegimeProblem], state: State, period: Period
) -> tuple[dict[str, PeriodSolution], State, Any]:
    """One period of the regimes `problems` (those of `state` active in it): their
    period solutions, the new state, and what the period emits (the changing arrays)."""
    plan = period.plan
    dtype = jnp.zeros(()).dtype
    with_readers = {}
    together: dict[tuple[str, ...], ContinuationReader] | None = None
    built: dict[str, ContinuationReader] = {}
    for name, problem in problems.items():
        regime = plan.regimes[name]
        targets = regime.targets
        if period.last:
            readers: dict[Any, ContinuationReader] = {
                t: zero_reader(plan, t, solver.state, dtype) for t in targets
            }
        else:
            # A target is read the same by every regime of the period: built once.
            for t in targets:
                if t not in built:
                    built[t] = period.read(t, solver.state)
            readers = {t: built[t] for t in targets}
            # The targets of equal structure read at once, where this regime's choices
            # are rows of a pass (`solve_batched`) that reads next period without nodes
            # of drawn states.
            if solver.batchable(regime) and not regime.drawn:
                if together is None:
                    together = stacked_readers(solver, state, period)
                readers.update({k: r for k, r in together.items() if set(k) <= set(targets)})
        with_readers[name] = problem.replace(next_policies=readers)
    solutions, rows = solve_regimes(solver, with_readers, period.values_later)
    names = members(state)
    always = {n for n in names if solver.choices_always_feasible(plan.regimes[n])}
    constant_limit = {n for n in names if "borrowing_limit" not in plan.regimes[n].helpers}
    carried_out: tuple[dict, dict] = ({}, {})
    emitted: tuple[dict, dict] = ({}, {})
    for by_key, out, emit in zip((state[0], state[1]), carried_out, emitted, strict=True):
        for key, arrays in cast(dict, by_key).items():
            regimes = key if isinstance(key, tuple) else (key,)
            through = (set(regimes) <= always, set(regimes) <= constant_limit)
            if isinstance(key, tuple):
                new = tuple(rows[key][field] for field in GRID_FIELDS)
            else:
                grid = (
                    solutions[key].policy
                    if key in solutions
                    else inactive_grid(zero_grid(plan, key, solver, dtype))
                )
                new = grid_arrays(grid)
            # The last two (feasible, limit): carried through where they never change.
            ends = tuple(zip(new[3:], arrays[3:], through, strict=True))
            out[key] = (*new[:3], *(old if same else a for a, old, same in ends))
            emit[key] = (*new[:3], *(None if same else a for a, _, same in ends))
    return solutions, carried_out, emitted


def stacked_readers(
    solver: DCEGMLike, state: State, period: Period
) -> dict[tuple[str, ...], ContinuationReader]:
    """Readers of the groups of regimes of `state` that have equal structure and
    parameters that stack (`_groups.py`), each reading its members at once
    (`stacked_endogenous_reader`), by the members' names."""
    plan = period.plan
    names = members(state)
    shapes = choice_shapes(solver, plan, names)
    out = {}
    for indices in structure_groups([plan.regimes[n] for n in names]):
        if len(indices) < 2:
            continue
        group = tuple(names[i] for i in indices)
        stacked = stacked_params([period.resolved[n] for n in group])
        if stacked is None:
            continue
        status = grid_status(group[0], period.segment, period.following, period.period)
        out[group] = stacked_endogenous_reader(
            plan,
            group,
            solver,
            stacked_arrays(state, shapes, group),
            status,
            *stacked,
            period.period + 1,
            period.next_age,
        )
    return out


def stacked_arrays(state: State, shapes: dict, group: tuple[str, ...]) -> tuple:
    """The carried grids of the regimes `group` (of one choice shape) stacked along a
    leading axis: a slice of the rows where they are consecutive in one set of rows."""
    k, shape = len(group), shapes[group[0]]
    size = math.prod(shape)
    for key, arrays in state[1].items():
        if not set(group) <= set(key):
            continue
        start = key.index(group[0])
        if key[start : start + k] == group:
            offset = sum(math.prod(shapes[n]) for n in key[:start])
            return tuple(
                jax.lax.slice_in_dim(a, offset, offset + k * size).reshape(
                    (k, *shape, *a.shape[1:])
                )
                for a in arrays
            )
    by_regime = ungrouped(state, shapes)
    return tuple(jnp.stack([by_regime[n][i] for n in group]) for i in range(len(GRID_FIELDS)))


def solve_regimes(
    solver: DCEGMLike, problems: dict[str, RegimeProblem], later: frozenset[str] = frozenset()
) -> tuple[dict[str, PeriodSolution], dict[tuple[str, ...], dict[str, Array]]]:
    """The period solutions of `problems` (by name), and the refined grids of the group
    solved together, as rows (by the group's names: see `batch_groups`).

    Where every regime of the group is in `later`, their value arrays are left out
    (`values` None): the backward induction reads them after the period loop, for all
    periods at once (`postprocess`).
    """
    solutions: dict[str, PeriodSolution] = {}
    rows: dict[tuple[str, ...], dict[str, Array]] = {}
    plan = next(iter(problems.values())).model if problems else None
    groups = batch_groups(solver, plan, problems) if plan is not None else []
    grouped = {name for group in groups for name in group}
    for name, problem in problems.items():
        if name not in grouped:
            solutions[name] = solver.solve_period(problem)
    for group in groups:
        solved, rows[group] = solver.solve_batched(
            [problems[name] for name in group], with_values=not set(group) <= later
        )
        solutions.update(zip(group, solved, strict=True))
    return solutions, rows


def postprocess(
    solver: DCEGMLike, emitted, segment: SegmentOutputs
) -> tuple[dict[str, Array], dict[str, EndogenousGrid]]:
    """After the loop over a segment's periods: the value arrays its steps left out
    (`segment.deferred`, leading axis the periods) and each regime's refined grids of
    every period (`Solution.policies`)."""
    plan = segment.plan
    by_regime, by_group = emitted
    rows = (_feasible_put_back(solver, by_regime), _feasible_put_back(solver, by_group))
    names = members(rows)
    shapes = choice_shapes(solver, plan, names)
    arrays = ungrouped(rows, shapes, leading=1)
    length = segment.segment.stop - segment.segment.start
    policies = {}
    for name in names:
        status = ORDINARY if name in segment.segment.regimes else INACTIVE
        policies[name] = grid_of(arrays[name], jnp.full((length,), status, jnp.int32))
    deferred = [name for name in names if name in segment.deferred]
    if not deferred:
        return {}, policies
    values = _read_values(
        solver,
        segment,
        {name: arrays[name] for name in deferred},
        {key: r for key, r in rows[1].items() if set(key) <= set(deferred)},
    )
    return values, policies


def _feasible_put_back(solver: DCEGMLike, emitted: dict) -> dict:
    """The scan's emitted grids with an always-true `feasible` and a constant limit
    (emitted as None) put back."""
    dtype = jnp.zeros(()).dtype
    limit = jnp.asarray(solver.savings.to_jax()[0], dtype)
    return {
        key: (
            *arrays,
            jnp.ones(arrays[1].shape, bool) if feasible is None else feasible,
            jnp.broadcast_to(limit, arrays[1].shape) if borrowing is None else borrowing,
        )
        for key, (*arrays, feasible, borrowing) in emitted.items()
    }


def _read_values(solver: DCEGMLike, segment: SegmentOutputs, policies, rows) -> dict[str, Array]:
    """The value arrays of the regimes of `policies` in every period of a segment
    (leading axis), read from their refined grids: the reads the period step left out.
    All periods at once where their grids take at most `READ_VALUES_BYTES` (the batched
    read holds a copy of them), else in chunks of periods that do."""

    def at(inputs, policies, rows):
        problems = segment.problems(inputs, tuple(policies))
        grids = {
            name: grid_of(arrays, jnp.asarray(ORDINARY, jnp.int32))
            for name, arrays in policies.items()
        }
        refined: dict[tuple[str, ...], dict[str, Array]] = {
            key: dict(zip(GRID_FIELDS, arrays, strict=True)) for key, arrays in rows.items()
        }
        values: dict[str, Array] = {}
        grouped = {name for group in refined for name in group}
        for group in [*refined, *((n,) for n in problems if n not in grouped)]:
            read = solver.values_batched(
                [problems[name] for name in group],
                [grids[name] for name in group],
                refined.get(group),
            )
            values.update(zip(group, read, strict=True))
        return values

    per_period = sum(math.prod(a.shape[1:]) * a.dtype.itemsize for a in jax.tree.leaves(policies))
    length = jax.tree.leaves(policies)[0].shape[0]
    chunk = max(1, READ_VALUES_BYTES // max(per_period, 1))
    if chunk >= length:
        return jax.vmap(at)(segment.inputs, policies, rows)
    return jax.lax.map(lambda xs: at(*xs), (segment.inputs, policies, rows), batch_size=chunk)
