"""Model summaries that size the knobs: grid sizes, parameters, compiled memory, chunking."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import LcmError
from ._grids import AbstractContinuousGrid, AbstractGrid
from ._grids._age import age_of
from ._model._params import resolve_params
from ._solve._axes import Axis, auto_splayed
from ._solve._backward import state_shape
from ._solve._kernel import RegimeProblem


@dataclasses.dataclass(frozen=True)
class RegimeSummary:
    name: str
    states: dict[str, str]  # name -> "LinSpacedGrid(100)"
    actions: dict[str, str]
    state_action_points: int
    active_periods: tuple[int, ...]
    terminal: bool
    parameters: dict
    # State axes that a pointwise solver splays by itself, and their chunk sizes (the
    # state-action product would take more than `EVALUATION_BYTES` at once).
    automatic_splay: dict[str, int] = dataclasses.field(default_factory=dict)
    # What the solver evaluates in one period where it is not the plain product
    # (`AbstractSolver.work`: points by piece), known with `params`; None otherwise.
    work: tuple[tuple[str, int], ...] | None = None
    # What kept axes from being eliminated early where the solver evaluates the plain
    # product (`AbstractSolver.obstacles`: the operation and the user function that join
    # a piece's axes), known with `params`; empty otherwise.
    obstacles: tuple[str, ...] = ()

    @property
    def evaluated_points(self) -> int:
        """Points evaluated per period: the plain product, or the pieces' sum."""
        if self.work is None:
            return self.state_action_points
        return sum(n for _, n in self.work)


@dataclasses.dataclass(frozen=True)
class ChunkingAdvice:
    """The fewest chunks on `axis` whose compiled temp memory fits `budget_bytes`."""

    axis: str
    n_points: int
    chunks: int
    batch_size: int
    temp_bytes: int
    budget_bytes: int
    fits: bool


@dataclasses.dataclass(frozen=True)
class ModelSummary:
    """What `Model.describe` returns; `print()` it for a readable report."""

    n_periods: int
    regimes: tuple[RegimeSummary, ...]
    state_action_points_per_period: int
    temp_bytes: int | None
    argument_bytes: int | None
    output_bytes: int | None
    chunking: ChunkingAdvice | None

    def __str__(self) -> str:
        lines = [
            f"Model with {len(self.regimes)} regime(s) over {self.n_periods} periods; "
            f"{self.state_action_points_per_period:,} state-action points per period."
        ]
        for regime in self.regimes:
            kind = "terminal" if regime.terminal else "non-terminal"
            periods = _ranges(regime.active_periods)
            lines.append(f"\nregime {regime.name!r} ({kind}, active in periods {periods}):")
            lines.append(
                "  states:  " + (", ".join(f"{n} {g}" for n, g in regime.states.items()) or "none")
            )
            lines.append(
                "  actions: " + (", ".join(f"{n} {g}" for n, g in regime.actions.items()) or "none")
            )
            lines.append(f"  state-action points per period: {regime.state_action_points:,}")
            if regime.work is not None:
                ratio = regime.state_action_points / max(regime.evaluated_points, 1)
                lines.append(
                    f"  evaluated by piece: {regime.evaluated_points:,} points per period "
                    f"({ratio:,.1f}x fewer); largest piece "
                    f"{max(n for _, n in regime.work):,} points"
                )
                lines.extend(f"    {n:>15,}  {label}" for label, n in regime.work)
            if regime.obstacles:
                lines.append(
                    "  evaluated as the plain product; what kept axes from being eliminated early:"
                )
                lines.extend(f"    - {reason}" for reason in regime.obstacles)
            if regime.automatic_splay:
                chunks = ", ".join(f"{n} batch_size={b}" for n, b in regime.automatic_splay.items())
                lines.append(f"  evaluated in chunks by itself (automatic splay): {chunks}")
            lines.append(f"  parameters: {regime.parameters}")
        if self.temp_bytes is not None:
            lines.append(
                f"\nXLA compiled memory of the solve: temp {_mib(self.temp_bytes)}, "
                f"arguments {_mib(self.argument_bytes)}, outputs "
                f"{_mib(self.output_bytes)}."
            )
        if self.chunking is not None:
            c = self.chunking
            verdict = "fits" if c.fits else "does NOT fit even at the most chunks tried"
            lines.append(
                f"Memory budget {_mib(c.budget_bytes)}: splay {c.axis!r} "
                f"({c.n_points} points) into {c.chunks} chunk(s), batch_size="
                f"{c.batch_size} -> temp {_mib(c.temp_bytes)} ({verdict})."
            )
        return "\n".join(lines)


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MiB"


def _ranges(periods: tuple[int, ...]) -> str:
    if periods and periods == tuple(range(periods[0], periods[-1] + 1)):
        return f"{periods[0]}-{periods[-1]}"
    return str(list(periods))


def _grid_label(grid: AbstractGrid) -> str:
    knobs = []
    if grid.batch_size:
        knobs.append(f"batch_size={grid.batch_size}")
    if grid.distributed:
        knobs.append("distributed")
    if grid.varies_with_age:
        # Resolved by the build: one (start, stop) per period.
        points = np.asarray(cast(AbstractContinuousGrid, grid).points_by_period())
        knobs.append(
            f"varies with age: [{points[0, 0]:.4g}, {points[0, -1]:.4g}] in period 0 to "
            f"[{points[-1, 0]:.4g}, {points[-1, -1]:.4g}] in period {points.shape[0] - 1}"
        )
    return f"{type(grid).__name__}({grid.n_points}{', ' if knobs else ''}{', '.join(knobs)})"


def with_batch_size(model, axis: str, batch_size: int):
    """A copy of `model` in which every grid named `axis` has `batch_size` (splay).

    Regimes keep everything else (their solvers included); the copy is built with the
    model's own class, so this layer needs no import of `Model`.
    """
    found = False
    regimes = {}
    for name, regime in model.regimes.items():
        states, actions = dict(regime.states), dict(regime.actions)
        for group in (states, actions):
            if axis in group:
                group[axis] = _with_knob(group[axis], batch_size)
                found = True
        regimes[name] = regime.replace(states=states, actions=actions)
    if not found:
        raise LcmError(f"with_batch_size: no regime has a state or action named {axis!r}.")
    # The regimes already hold the model's shared functions and transitions.
    return type(model)(
        regimes,
        model.n_periods,
        regime_ids=model.regime_ids,
        ages=model.ages,
        solver=model.solver,
        fixed_params=model.fixed_params,
    )


def _with_knob(grid: AbstractGrid, batch_size: int) -> AbstractGrid:
    new = copy.copy(grid)
    object.__setattr__(new, "batch_size", batch_size)  # grids are frozen; re-checked below
    new.check_knobs()
    return new


def _automatic_splay(regime) -> dict[str, int]:
    """The state axes of `regime` that a pointwise solver splays by itself."""

    def axis(name):
        grid = regime.grids[name]
        return Axis(
            name, jnp.zeros(grid.n_points), grid.batch_size, grid.is_discrete, grid.distributed
        )

    states = tuple(axis(n) for n in regime.states)
    actions = tuple(axis(n) for n in regime.actions)
    splayed = auto_splayed(states, actions, np.zeros((), jnp.zeros(()).dtype).itemsize)
    return {
        new.name: new.batch_size
        for old, new in zip(states, splayed, strict=True)
        if new.batch_size != old.batch_size
    }


def _work(model, params, name: str) -> tuple[tuple[tuple[str, int], ...] | None, tuple[str, ...]]:
    """What the solver of regime `name` evaluates in its first active period
    (`AbstractSolver.work`) and what keeps it from the regime's structure
    (`AbstractSolver.obstacles`), traced without computing anything."""
    plan = model.plan
    regime = plan.regimes[name]
    period = min(regime.active)
    found: list = []

    def trace(params):
        next_values = {r: jnp.zeros(state_shape(plan, r)) for r in plan.regimes}
        problem = RegimeProblem(
            plan,
            regime,
            resolve_params(plan, params)[name],
            jnp.asarray(period),
            jnp.asarray(age_of(model.ages, period)),
            next_values,
            True,
        )
        solver = model.solvers[name]
        found.append((solver.work(problem), solver.obstacles(problem)))
        return jnp.zeros(())

    jax.eval_shape(trace, params)
    return found[0]


def _memory(model, params) -> tuple[int, int, int] | None:
    compiled = model._solve.lower(params, validate=True).compile()
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return (
        analysis.temp_size_in_bytes,
        analysis.argument_size_in_bytes,
        analysis.output_size_in_bytes,
    )


def largest_splayable_axis(model) -> tuple[str, int] | None:
    """The largest state axis that may be splayed (not sharded)."""
    best = None
    for regime in model.plan.regimes.values():
        for name in regime.states:
            grid = regime.grids[name]
            if grid.distributed:
                continue
            if best is None or grid.n_points > best[1]:
                best = (name, grid.n_points)
    return best


def describe(
    model, params=None, *, memory_budget: int | None = None, axis: str | None = None
) -> ModelSummary:
    plan = model.plan
    regimes = []
    for name, regime in plan.regimes.items():
        sizes = [regime.grids[n].n_points for n in (*regime.states, *regime.actions)]
        template = model.params_template().get(name, {})
        regimes.append(
            RegimeSummary(
                name=name,
                states={n: _grid_label(regime.grids[n]) for n in regime.states},
                actions={n: _grid_label(regime.grids[n]) for n in regime.actions},
                state_action_points=math.prod(sizes),
                active_periods=tuple(sorted(regime.active)),
                terminal=regime.is_terminal,
                parameters=template,
                automatic_splay=_automatic_splay(regime),
            )
        )
    if params is not None:
        # normalised as solve normalises them (a params Series, labelled Series leaves)
        params = model.checked_params(params)
        found = {r.name: _work(model, params, r.name) for r in regimes if not r.terminal}
        regimes = [
            dataclasses.replace(r, work=found[r.name][0], obstacles=found[r.name][1])
            if not r.terminal
            else r
            for r in regimes
        ]
    memory = None if params is None else _memory(model, params)
    advice = None
    if memory_budget is not None:
        if params is None:
            raise LcmError("describe: memory_budget needs params to compile the solve.")
        advice = suggest_chunking(model, params, memory_budget, axis=axis)
    return ModelSummary(
        n_periods=plan.n_periods,
        regimes=tuple(regimes),
        state_action_points_per_period=sum(r.state_action_points for r in regimes),
        temp_bytes=None if memory is None else memory[0],
        argument_bytes=None if memory is None else memory[1],
        output_bytes=None if memory is None else memory[2],
        chunking=advice,
    )


def suggest_chunking(
    model, params, memory_budget: int, *, axis: str | None = None
) -> ChunkingAdvice:
    """The fewest chunks on `axis` (default: the largest splayable state axis) that fit.

    Tries 1, 2, 4, ... chunks (up to one point per chunk), compiling each variant and
    reading XLA's temp memory, and returns the first that fits the budget.
    """
    if axis is None:
        found = largest_splayable_axis(model)
        if found is None:
            raise LcmError("describe: the model has no state axis that can be splayed.")
        axis, n_points = found
    else:
        n_points = next(
            r.grids[axis].n_points for r in model.plan.regimes.values() if axis in r.grids
        )
    chunks = 1
    while True:
        batch_size = 0 if chunks == 1 else math.ceil(n_points / chunks)
        variant = model if chunks == 1 else with_batch_size(model, axis, batch_size)
        memory = _memory(variant, params)
        temp = memory[0] if memory else 0
        if temp <= memory_budget or batch_size == 1:
            return ChunkingAdvice(
                axis, n_points, chunks, batch_size, temp, memory_budget, temp <= memory_budget
            )
        chunks = min(chunks * 2, n_points)
