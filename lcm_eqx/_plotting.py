"""Plots of solutions and simulated panels (needs matplotlib: `pip install "lcm_eqx[plot]"`).

- `plot_values`: a regime's value function against one state, one line per period.
- `plot_policy`: a regime's optimal action against one state, one line per period.
- `plot_profiles`: simulated life-cycle profiles (mean and quantile bands) by period or age.

matplotlib is imported only when a plot is drawn, so the library itself does not need it.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import InvalidPeriodError, LcmError
from ._grids import (
    INDEX_SUFFIX,
    AbstractContinuousGrid,
    AbstractProcessGrid,
    DiscreteGrid,
    state_spellings,
    unknown_states_message,
)
from ._grids._age import age_of
from ._model._params import resolve_params
from ._simulate._simulate import prepare_next_values
from ._solve._kernel import RegimeProblem

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes

    from ._facade import Model
    from ._simulate._result import SimulationResult
    from ._solve._solution import Solution
    from ._typing import Params

MAX_DEFAULT_LINES = 6


class PlotError(LcmError, ValueError):
    """A plotting function was asked for a regime, state, action or variable that does not exist."""


# --------------------------------------------------------------------------- helpers
def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "lcm_eqx's plotting functions need matplotlib, which is not installed. Install "
            'it with `pip install "lcm_eqx[plot]"` (or `pip install matplotlib`).'
        ) from error
    return plt


def _new_axes(ax):
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots(figsize=(6.4, 4.4), layout="constrained")
    return ax


def _regime_plan(model: Model, regime: str):
    plan = model.plan
    if regime not in plan.regimes:
        raise PlotError(f"Unknown regime {regime!r}; the model's regimes are {list(plan.regimes)}.")
    return plan.regimes[regime]


def _x_state(regime_plan, state: str | None) -> str:
    """The state on the x axis: `state`, or the regime's first continuous state."""
    if not regime_plan.states:
        raise PlotError(f"Regime {regime_plan.name!r} has no states to plot against.")
    if state is None:
        continuous = [s for s in regime_plan.states if not regime_plan.grids[s].is_discrete]
        return continuous[0] if continuous else regime_plan.states[0]
    if state not in regime_plan.states:
        raise PlotError(
            f"Regime {regime_plan.name!r} has no state {state!r}; its states are "
            f"{list(regime_plan.states)}."
        )
    return state


def _fixed_indices(regime_plan, x_state: str, fixed: Mapping[str, int] | None) -> dict[str, int]:
    """Grid index of every state other than `x_state`.

    Defaults: 0 for a `DiscreteGrid` state, the middle point for any other grid.
    """
    fixed = dict(fixed or {})
    unknown = [name for name in fixed if name not in regime_plan.states]
    if unknown:
        raise PlotError(
            f"Regime {regime_plan.name!r}: fixed names unknown states {unknown}; its states "
            f"are {list(regime_plan.states)}."
        )
    indices = {}
    for name in regime_plan.states:
        if name == x_state:
            continue
        grid = regime_plan.grids[name]
        default = 0 if isinstance(grid, DiscreteGrid) else grid.n_points // 2
        index = int(fixed.get(name, default))
        if not 0 <= index < grid.n_points:
            raise PlotError(
                f"Regime {regime_plan.name!r}: fixed[{name!r}] = {index} is outside the grid "
                f"indices 0..{grid.n_points - 1}."
            )
        indices[name] = index
    return indices


def _grid_points(grid, process_points=None, period: int = 0) -> tuple[np.ndarray, str]:
    """Values to show along an axis (in `period`, for a grid that varies with age), and a
    suffix for the axis label."""
    if isinstance(grid, AbstractContinuousGrid):
        if grid.varies_with_age:
            return np.asarray(grid.points_by_period()[period], dtype=float), ""
        return np.asarray(grid.to_jax(), dtype=float), ""
    if isinstance(grid, AbstractProcessGrid):
        if process_points is not None:
            return np.asarray(process_points, dtype=float), ""
        if not grid.free_parameters():
            points, _ = grid.discretize({})
            return np.asarray(points, dtype=float), ""
        return np.arange(grid.n_points, dtype=float), " (grid index)"
    return np.arange(grid.n_points, dtype=float), ""


def _fmt(points: np.ndarray, i: int) -> str:
    """`points[i]` to 3 significant digits, with float round-off around 0 shown as 0."""
    value = float(points[i])
    if abs(value) <= 1e-6 * float(np.max(np.abs(points))):
        value = 0.0
    return f"{value:.3g}"


def _label_discrete_axis(ax, grid, axis: str) -> None:
    if isinstance(grid, DiscreteGrid):
        ticks = np.arange(grid.n_points)
        if axis == "x":
            ax.set_xticks(ticks, grid.labels)
        else:
            ax.set_yticks(ticks, grid.labels)


def _period_label(model: Model, period: int) -> str:
    if model.ages is not None:
        age = float(model.ages.age(period))
        return f"age {age:g}"
    return f"period {period}"


def _default_periods(active: Sequence[int]) -> list[int]:
    active = sorted(active)
    if len(active) <= MAX_DEFAULT_LINES:
        return active
    picks = np.linspace(0, len(active) - 1, MAX_DEFAULT_LINES).round().astype(int)
    return [active[i] for i in sorted(set(picks.tolist()))]


def _check_periods(solution: Solution, regime: str, periods) -> list[int]:
    if isinstance(periods, int | np.integer):
        periods = [int(periods)]
    periods = [int(p) for p in periods]
    for period in periods:
        if period not in solution.active[regime]:
            raise InvalidPeriodError(
                f"Regime {regime!r} is not active in period {period} (active periods: "
                f"{list(solution.active[regime])})."
            )
    return periods


def _colors(n: int):
    cmap = _pyplot().get_cmap("viridis")
    return [cmap(x) for x in np.linspace(0.0, 0.85, max(n, 1))]


def _fixed_note(regime_plan, indices: Mapping[str, int], process_points=None) -> str:
    parts = []
    for name, index in indices.items():
        grid = regime_plan.grids[name]
        if isinstance(grid, DiscreteGrid):
            parts.append(f"{name}={grid.labels[index]}")
        elif grid.varies_with_age:  # its value at `index` differs between periods
            parts.append(f"{name}=#{index}")
        else:
            points, suffix = _grid_points(grid, (process_points or {}).get(name))
            parts.append(f"{name}={_fmt(points, index)}" if not suffix else f"{name}=#{index}")
    return ", ".join(parts)


def _line_specs(model, solution, regime_plan, x_state, indices, periods, by, process=None):
    """What each line shows: `(period, {state: index}, label)`.

    `by="period"`: one line per period at the fixed indices. `by=<state>`: one line per
    grid point of that state, in a single period.
    """
    regime = regime_plan.name
    if by == "period":
        if periods is None:
            periods = _default_periods(solution.active[regime])
        periods = _check_periods(solution, regime, periods)
        return [(p, dict(indices), _period_label(model, p)) for p in periods]
    if by not in regime_plan.states or by == x_state:
        others = [s for s in regime_plan.states if s != x_state]
        raise PlotError(
            f"Regime {regime!r}: by must be 'period' or one of the states {others} (not the "
            f"x-axis state {x_state!r}), got {by!r}."
        )
    if periods is None:
        periods = min(solution.active[regime])
    periods = _check_periods(solution, regime, periods)
    if len(periods) != 1:
        raise PlotError(f"With by={by!r}, give a single period, got {periods}.")
    grid = regime_plan.grids[by]
    points, suffix = _grid_points(grid, (process or {}).get(by), periods[0])
    specs = []
    for i in range(grid.n_points):
        if isinstance(grid, DiscreteGrid):
            label = f"{by} = {grid.labels[i]}"
        elif suffix:
            label = f"{by} #{i}"
        else:
            label = f"{by} = {_fmt(points, i)}"
        specs.append((periods[0], {**indices, by: i}, label))
    return specs


def _finish(ax, title, regime_plan, indices, by, specs, model, process=None, ylabel=None):
    shown = {k: v for k, v in indices.items() if k != by}
    note = _fixed_note(regime_plan, shown, process)
    if by != "period":
        note = ", ".join(x for x in (_period_label(model, specs[0][0]), note) if x)
    ax.set_title(title + (f"\n({note})" if note else ""))
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


# --------------------------------------------------------------------------- values
def plot_values(
    model: Model,
    solution: Solution,
    regime: str,
    *,
    periods: int | Sequence[int] | None = None,
    state: str | None = None,
    fixed: Mapping[str, int] | None = None,
    by: str = "period",
    ax: Axes | None = None,
) -> Axes:
    """Plot the value function of `regime` against one state, one line per period.

    Args:
        model: the model that was solved.
        solution: `model.solve(params)`.
        regime: the regime's name.
        periods: a period or periods to draw; default: every active period, or six evenly
            spread ones when there are more (with `by=<state>`: one period, default the
            first active one).
        state: the state on the x axis; default: the regime's first continuous state.
        fixed: grid index of each other state (`{name: index}`); default: 0 for a
            `DiscreteGrid` state, the middle grid point otherwise.
        by: `"period"` (one line per period) or the name of another state (one line per
            grid point of that state, in a single period).
        ax: the matplotlib Axes to draw on; default: a new figure.

    Returns:
        The matplotlib Axes. Values of `-inf` (no feasible action) are left out.

    Example:
        >>> solution = model.solve(params)
        >>> ax = lcm.plot_values(model, solution, "working", periods=[0, 2, 4])
        >>> ax.figure.savefig("values.png")
        >>> lcm.plot_values(model, solution, "working", by="income", periods=0)
    """
    regime_plan = _regime_plan(model, regime)
    x_state = _x_state(regime_plan, state)
    indices = _fixed_indices(regime_plan, x_state, fixed)
    specs = _line_specs(model, solution, regime_plan, x_state, indices, periods, by)
    x_grid = regime_plan.grids[x_state]
    ax = _new_axes(ax)
    for (period, at, label), color in zip(specs, _colors(len(specs)), strict=True):
        x, suffix = _grid_points(x_grid, period=period)  # per period: bounds may vary with age
        selector = tuple(slice(None) if s == x_state else at[s] for s in regime_plan.states)
        values = np.asarray(solution.values[regime][period][selector], dtype=float)
        values = np.where(np.isfinite(values), values, np.nan)
        ax.plot(x, values, color=color, marker="o" if x_grid.is_discrete else None, label=label)
    _label_discrete_axis(ax, x_grid, "x")
    ax.set_xlabel(x_state + suffix)
    _finish(
        ax,
        f"Value function, regime {regime!r}",
        regime_plan,
        indices,
        by,
        specs,
        model,
        ylabel="value",
    )
    return ax


# --------------------------------------------------------------------------- policy
def compute_policy(
    model: Model,
    params: Params,
    solution: Solution,
    regime: str,
    period: int,
    states: Mapping[str, Any],
    *,
    key=None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The optimal actions of `regime` in `period` at given states (not plotted).

    This is the same problem the simulation solves in each period: the action grids are
    searched at the exact states against the next period's value arrays (`GridSearch`),
    or the regime's `DCEGM` policy is read there (continuous actions off the grid).

    Args:
        states: `{state: 1-d array}` for every state of the regime, all of one length,
            spelled as in `Model.simulate`'s initial conditions: values for continuous
            states; codes or labels for discrete (`DiscreteGrid`) states; for process
            states (`RouwenhorstGrid`, `IIDGrid`, ...) their node values, as user
            functions and `to_dataframe` show them, or grid indices under the key
            `"<state>:index"`. (Integers under a process state's own name are read as
            grid indices, as before, with a `FutureWarning`: use `"<state>:index"`.)
        key: a `jax.random.key` for the taste-shock draws of regimes that have them
            (default `jax.random.key(0)`); without taste shocks it is unused.

    Returns:
        `({action: array}, values)`: discrete actions as codes, continuous ones as values,
        and the value of the best action at each point (with taste shocks: of the drawn
        choice, shock included).

    With taste shocks (`ExtremeValueShocks`) the discrete choice returned is a random
    draw, as in the simulation: the choice whose value plus its drawn shock is the
    largest, so a policy computed along a state is jagged. The choice probabilities are
    `lcm.choice_probabilities(model, params, solution, regime, period)` (on the state
    grid); the most likely choice is their argmax over the action axes, the choice
    without shocks (`lcm.discrete_values(...)` gives the values it compares).

    Example:
        >>> actions, values = lcm.compute_policy(model, params, solution, "working", 0,
        ...                          {"wealth": jnp.linspace(1.0, 100.0, 50)})
        >>> lcm.compute_policy(model, params, solution, "alive", 0,
        ...                    {"wealth": wealth, "income": np.full(50, 1.0)})  # a node
        >>> lcm.compute_policy(model, params, solution, "alive", 0,
        ...                    {"wealth": wealth, "income:index": np.zeros(50, int)})
    """
    import jax
    import jax.numpy as jnp

    regime_plan = _regime_plan(model, regime)
    (period,) = _check_periods(solution, regime, period)
    points = _policy_points(model, params, regime_plan, states)
    n = next(iter(points.values())).shape[0] if points else 1
    key = jax.random.key(0) if key is None else key
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(n))
    solve_at = _policy_program(model, regime)
    chosen, value = solve_at(
        params, solution.continuation_values, solution.policies, points, jnp.asarray(period), keys
    )
    return {name: np.asarray(x) for name, x in chosen.items()}, np.asarray(value)


def _policy_points(model: Model, params, regime_plan, states: Mapping[str, Any]) -> dict:
    """`compute_policy`'s states as the solver reads them: values of continuous states,
    codes of discrete and process states (process states given as node values are
    matched to their nodes; nothing is rounded to the nearest node)."""
    regime = regime_plan.name
    grids = regime_plan.grids
    process = [s for s in regime_plan.states if isinstance(grids[s], AbstractProcessGrid)]
    known = {*regime_plan.states, *(s + INDEX_SUFFIX for s in process)}
    unknown = [k for k in states if k not in known]
    if unknown:
        raise PlotError(
            unknown_states_message(
                f"Regime {regime!r}: states", unknown, list(regime_plan.states), process
            )
            + "."
        )
    missing = [s for s in regime_plan.states if s not in states and s + INDEX_SUFFIX not in states]
    if missing:
        raise PlotError(f"Regime {regime!r}: states lacks {missing}.")
    nodes: dict[str, np.ndarray] | None = None
    points = {}
    for name in regime_plan.states:
        grid = regime_plan.grids[name]
        index_key = name + INDEX_SUFFIX
        given, both = state_spellings(f"Regime {regime!r}: states", name, states)
        if both:
            raise PlotError(both)
        raw = np.asarray(states[given[0]])
        if name in process and given[0] == name and raw.dtype.kind not in "iub":
            if nodes is None:
                nodes = _process_points(model, params, regime_plan)
            points[name] = jnp.asarray(_node_codes(regime, name, raw, nodes[name]))
        elif grid.is_discrete:
            if name in process and given[0] == name:
                warnings.warn(
                    f"compute_policy: states[{name!r}] holds integers, read as grid indices "
                    f"of the process state {name!r} as before. Process states are given as "
                    f"their node values (as in simulate and to_dataframe); pass grid "
                    f"indices under {index_key!r}.",
                    FutureWarning,
                    stacklevel=3,
                )
            points[name] = jnp.asarray(_grid_codes(regime, given[0], grid, raw), jnp.int32)
        else:
            points[name] = jnp.asarray(raw)
    return points


def _node_codes(regime: str, state: str, values: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Grid indices of process-state values, each a node of `points` (within 1e-6
    relative), or a `PlotError` naming the nearest nodes."""
    if values.dtype.kind not in "f":
        raise PlotError(
            f"Regime {regime!r}: states[{state!r}] must hold the node values of {state!r} "
            f"(numbers), or give grid indices under {state + INDEX_SUFFIX!r}."
        )
    points = np.asarray(points, dtype=float)
    tolerance = 1e-6 * max(1.0, float(np.max(np.abs(points))))
    distance = np.abs(values.astype(float)[:, None] - points[None, :])
    nearest = np.argmin(distance, axis=1)
    off = ~(distance[np.arange(values.shape[0]), nearest] <= tolerance)
    if np.any(off):
        value = float(values[np.argmax(off)])
        raise PlotError(
            f"Regime {regime!r}: states[{state!r}] has {value:.6g}, which is not a node of "
            f"{state!r} (nodes: {[float(f'{x:.6g}') for x in points]}). Process states are "
            f"given as node values; give grid indices under {state + INDEX_SUFFIX!r}."
        )
    return nearest.astype(np.int32)


def _grid_codes(regime: str, key: str, grid, raw: np.ndarray) -> np.ndarray:
    """Codes of a discrete or process state given as codes (or, for a `DiscreteGrid`,
    labels), checked against the grid."""
    n_points = grid.n_points
    if raw.dtype.kind in "OUS" and isinstance(grid, DiscreteGrid):
        codes, bad = grid.codes_of(raw)
        if bad:
            raise PlotError(
                f"Regime {regime!r}: states[{key!r}] has unknown labels {bad}; valid: "
                f"{list(grid.labels)}."
            )
        return codes
    labels = f" or labels {list(grid.labels)}" if isinstance(grid, DiscreteGrid) else ""
    message = (
        f"Regime {regime!r}: states[{key!r}] must hold grid indices 0..{n_points - 1}{labels}."
    )
    if raw.dtype.kind not in "iub" or not np.all((raw >= 0) & (raw < n_points)):
        raise PlotError(message)
    return raw.astype(np.int32)


@functools.lru_cache(maxsize=8)
def _policy_program(model: Model, regime: str):
    """A jitted `(params, values, points, period, keys) -> (actions, values)` (cached, so
    that several periods and calls reuse one compiled program)."""
    plan, solver, ages = model.plan, model.solvers[regime], model.ages
    regime_plan = plan.regimes[regime]

    def solve_at(params, values, policies, points, period, keys):
        resolved = resolve_params(plan, params)
        continuation = {name: v[period] for name, v in prepare_next_values(plan, values).items()}
        policy = jax.tree.map(lambda x: x[period], policies[regime]) if regime in policies else None
        problem = RegimeProblem(
            plan,
            regime_plan,
            resolved[regime],
            period,
            age_of(ages, period),
            continuation,
            False,
            policy=policy,
        )
        return jax.vmap(lambda point, k: solver.choose(problem, point, k))(points, keys)

    return jax.jit(solve_at)


def _process_points(model: Model, params, regime_plan) -> dict[str, np.ndarray]:
    resolved = resolve_params(model.plan, params)[regime_plan.name]
    out = {}
    for name in regime_plan.states:
        grid = regime_plan.grids[name]
        if isinstance(grid, AbstractProcessGrid):
            points, _ = grid.discretize(resolved.get(f"next_{name}", {}))
            out[name] = np.asarray(points, dtype=float)
    return out


def plot_policy(
    model: Model,
    params: Params,
    solution: Solution,
    regime: str,
    action: str,
    *,
    period: int | Sequence[int] = 0,
    state: str | None = None,
    fixed: Mapping[str, int] | None = None,
    by: str = "period",
    ax: Axes | None = None,
) -> Axes:
    """Plot the optimal `action` of `regime` against one state, one line per period.

    The policy is found as in the simulation (`compute_policy`): at each grid point of
    `state` (other states at the grid indices in `fixed`), the actions are searched on
    their grids against the next period's value arrays, or read from the regime's
    `DCEGM` policy. A discrete action is drawn as its category (labels on the
    y axis). With taste shocks the drawn choice is one draw of the shocks (so the line
    is jagged); plot `lcm.choice_probabilities(...)` for the probabilities, or their
    argmax for the most likely choice. Points with no feasible action are left out.

    Args:
        model: the model.
        params: its parameters.
        solution: `model.solve(params)`.
        regime: the regime's name.
        action: the action to plot.
        period: a period or a sequence of periods (one line each); default 0.
        state: the state on the x axis; default: the regime's first continuous state.
        fixed: grid index of each other state (`{name: index}`); default: 0 for a
            `DiscreteGrid` state, the middle grid point otherwise.
        by: `"period"` (one line per period) or the name of another state (one line per
            grid point of that state, in a single period).
        ax: the matplotlib Axes to draw on; default: a new figure.

    Returns:
        The matplotlib Axes.

    Example:
        >>> ax = lcm.plot_policy(model, params, solution, "working", "consumption",
        ...                      period=[0, 3])
        >>> ax.figure.savefig("consumption.png")
    """
    regime_plan = _regime_plan(model, regime)
    if action not in regime_plan.actions:
        raise PlotError(
            f"Regime {regime!r} has no action {action!r}; its actions are "
            f"{list(regime_plan.actions)}."
        )
    x_state = _x_state(regime_plan, state)
    indices = _fixed_indices(regime_plan, x_state, fixed)
    process = _process_points(model, params, regime_plan)
    specs = _line_specs(model, solution, regime_plan, x_state, indices, period, by, process)
    x_grid = regime_plan.grids[x_state]
    action_grid = regime_plan.grids[action]
    ax = _new_axes(ax)
    for (p, at, label), color in zip(specs, _colors(len(specs)), strict=True):
        x, suffix = _grid_points(x_grid, process.get(x_state), p)
        n = len(x)
        points = {}
        for name in regime_plan.states:
            grid = regime_plan.grids[name]
            # Process states by their grid indices (`compute_policy` reads their own
            # names as node values).
            key = name + INDEX_SUFFIX if isinstance(grid, AbstractProcessGrid) else name
            if name == x_state:
                points[key] = np.arange(n) if grid.is_discrete else x
            elif grid.is_discrete:
                points[key] = np.full(n, at[name])
            else:
                points[name] = np.full(n, _grid_points(grid, period=p)[0][at[name]])
        chosen, value = compute_policy(model, params, solution, regime, p, points)
        y = np.asarray(chosen[action], dtype=float)
        y = np.where(np.isfinite(value), y, np.nan)
        ax.plot(
            x,
            y,
            color=color,
            drawstyle="steps-mid" if action_grid.is_discrete else "default",
            marker="o" if x_grid.is_discrete else None,
            label=label,
        )
    _label_discrete_axis(ax, x_grid, "x")
    _label_discrete_axis(ax, action_grid, "y")
    ax.set_xlabel(x_state + suffix)
    _finish(
        ax,
        f"Policy: {action}, regime {regime!r}",
        regime_plan,
        indices,
        by,
        specs,
        model,
        process,
        ylabel=action,
    )
    return ax


# --------------------------------------------------------------------------- profiles
def plot_profiles(
    result: SimulationResult | pd.DataFrame,
    variables: str | Sequence[str],
    *,
    by: str = "period",
    quantiles: Sequence[float] | None = (0.25, 0.5, 0.75),
    ax: Axes | None = None,
) -> Axes:
    """Plot simulated life-cycle profiles: the mean of each variable by period or age.

    For a numeric variable the mean is a solid line; the outermost `quantiles` bound a
    shaded band and inner ones (e.g. the median) are dashed. A discrete variable (a
    categorical column such as an action or `regime`) is drawn as the share of each
    category among the rows that have the variable. Rows where a subject's regime lacks the
    variable (NaN) are left out; so are subjects after they entered a terminal regime.

    Args:
        result: `model.simulate(...)`, or its `to_dataframe()`.
        variables: a column name or several (all drawn on the same Axes).
        by: `"period"` or `"age"` (the model needs ages).
        quantiles: quantiles to draw for numeric variables; `None` or `()` for none.
        ax: the matplotlib Axes to draw on; default: a new figure.

    Returns:
        The matplotlib Axes.

    Example:
        >>> result = model.simulate(params, initial_conditions, key=jax.random.key(0))
        >>> ax = lcm.plot_profiles(result, "wealth", by="age")
        >>> ax.figure.savefig("wealth.png")
    """
    import pandas as pd

    df = result if isinstance(result, pd.DataFrame) else result.to_dataframe()
    if by not in df.columns:
        hint = " (the model has no ages; pass ages=lcm.AgeGrid(...))" if by == "age" else ""
        raise PlotError(f"plot_profiles: by={by!r} is not a column of the data{hint}.")
    names = [variables] if isinstance(variables, str) else list(variables)
    missing = [v for v in names if v not in df.columns]
    if missing:
        raise PlotError(
            f"plot_profiles: unknown variables {missing}; the columns are {list(df.columns)}."
        )
    quantiles = sorted(quantiles or ())
    ax = _new_axes(ax)
    color_cycle = iter(_pyplot().rcParams["axes.prop_cycle"].by_key()["color"] * 10)
    for name in names:
        column = df[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            shares = (
                pd.crosstab(df[by], column, normalize="index", dropna=True)
                if bool(column.notna().any())
                else pd.DataFrame()
            )
            for category in shares.columns:
                ax.plot(
                    shares.index,
                    shares[category],
                    color=next(color_cycle),
                    marker=".",
                    label=f"share {name} = {category}",
                )
            continue
        grouped = df[[by, name]].dropna().groupby(by)[name]
        color = next(color_cycle)
        mean = cast(pd.Series, grouped.mean())
        ax.plot(mean.index, mean.to_numpy(), color=color, label=f"mean {name}")
        if quantiles:
            q = grouped.quantile(cast(Any, quantiles)).unstack()
            low, high = quantiles[0], quantiles[-1]
            if len(quantiles) > 1:
                ax.fill_between(
                    q.index,
                    q[low],
                    q[high],
                    color=color,
                    alpha=0.2,
                    label=f"{name} {low:g}–{high:g} quantiles",
                )
            for inner in quantiles[1:-1] if len(quantiles) > 1 else quantiles:
                ax.plot(
                    q.index,
                    q[inner],
                    color=color,
                    linestyle="--",
                    linewidth=1,
                    label=f"{name} {inner:g} quantile",
                )
    ax.set_xlabel(by)
    if by == "period":
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(", ".join(names))
    ax.set_title("Simulated profiles: " + ", ".join(names))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return ax
