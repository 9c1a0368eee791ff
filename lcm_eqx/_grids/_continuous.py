"""Continuous grids: linearly, logarithmically, irregularly and piecewise spaced."""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from .._errors import GridInitializationError, ModelInitializationError
from ._base import AbstractContinuousGrid, interval_weight


def _check_n_points(grid: str, n_points, argument: str = "n_points") -> None:
    if not isinstance(n_points, int | np.integer) or isinstance(n_points, bool) or n_points < 2:
        raise GridInitializationError(f"{grid}: {argument} must be an int >= 2, got {n_points!r}.")


def _closed_form_interval(x: Array, points: Array, coordinate: Array) -> tuple[Array, Array]:
    """Interval from a closed-form fractional coordinate, made exact at grid points.

    Rounding can put `x == points[i]` just below `i`; one comparison with the
    neighbour moves it up so that the weight at a grid point is exactly 0.
    """
    n = points.shape[0]
    coordinate = jnp.where(jnp.isnan(coordinate), 0.0, coordinate)
    lo = jnp.clip(jnp.floor(coordinate).astype(jnp.int32), 0, n - 2)
    lo = jnp.where((lo < n - 2) & (x >= points[jnp.minimum(lo + 1, n - 1)]), lo + 1, lo)
    lo = jnp.where((lo > 0) & (x < points[lo]), lo - 1, lo)
    return lo, interval_weight(x, points, lo)


def _geomspace(start, stop, n: int) -> Array:
    """Geometric spacing with exact end points (so end points match given bounds)."""
    points = jnp.geomspace(start, stop, n)
    return points.at[0].set(start).at[-1].set(stop)


def _on_host(*bounds) -> bool:
    """Whether grid bounds are concrete numbers (not traced), so that the points can be
    computed with NumPy when the grid is built into a program."""
    return not any(isinstance(b, jax.core.Tracer) for b in bounds)


def _host_points(points: np.ndarray) -> Array:
    """Points computed on the host (NumPy, float64) as an array of JAX's default float.

    Inside a traced solve they are constants of the program: XLA folds the arithmetic
    that depends on them alone (the grid step, `log` of a consumption grid) at compile
    time instead of compiling a kernel for each (two to four kernels fewer per model, a
    shorter cold start), and the points are correctly rounded from float64 in float32.
    """
    return jnp.asarray(points, dtype=float)


def _host_linspace(start, stop, n: int) -> np.ndarray:
    return np.linspace(np.float64(start), np.float64(stop), n)


def _host_geomspace(start, stop, n: int) -> np.ndarray:
    # `start * ratio ** (i / (n - 1))`: exact where the points are representable (e.g.
    # powers of 2), which `np.geomspace` (through `log10`) is not.
    start, stop = np.float64(start), np.float64(stop)
    points = start * (stop / start) ** (np.arange(n) / (n - 1))
    points[0], points[-1] = start, stop
    return points


# The arguments a grid bound that varies with age may take (resolved like `active`).
PERIOD_LABELS = ("age", "period")


def _is_function(value) -> bool:
    return callable(value) and not isinstance(value, jax.Array | np.ndarray)


def _varies(value) -> bool:
    """Whether a bound varies by period: a function, or an array with one value per period."""
    return _is_function(value) or np.ndim(value) == 1


def _bound_arguments(grid: str, name: str, function) -> tuple[str, ...]:
    """The arguments of a bound given as a function; each must be `age` or `period`."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError) as error:
        raise GridInitializationError(
            f"{grid}: {name} is a function whose signature cannot be read; use a function "
            "of 'age' (e.g. `lambda age: 10 + 5 * age`)."
        ) from error
    arguments = tuple(
        p.name
        for p in parameters
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty
    )
    other = [a for a in arguments if a not in PERIOD_LABELS]
    if other or not arguments:
        got = f"a function of {other}" if other else "a function of no argument"
        raise GridInitializationError(
            f"{grid}: {name} must be a number, an array with one value per period, or a "
            f"function of 'age' (or 'period'), e.g. `lambda age: 10 + 5 * age`; got {got}."
        )
    return arguments


def _bound_values(grid: str, name: str, value) -> np.ndarray:
    """A concrete bound as a float array (0-d or one value per period), checked finite."""
    if isinstance(value, str | bytes | np.str_ | np.bytes_):
        raise GridInitializationError(f"{grid}: {name} must be a number, got {value!r}.")
    try:
        values = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as error:
        raise GridInitializationError(
            f"{grid}: {name} must be a number or an array with one value per period, got {value!r}."
        ) from error
    if values.ndim > 1 or (values.ndim == 1 and values.shape[0] == 0):
        raise GridInitializationError(
            f"{grid}: {name} must be a number or a one-dimensional array with one value per "
            f"period, got shape {values.shape}."
        )
    if not np.all(np.isfinite(values)):
        shown = float(values) if values.ndim == 0 else values.tolist()
        raise GridInitializationError(f"{grid}: {name} must be finite, got {shown}.")
    return values


_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)


def _check_bounds(grid: str, start, stop, *, log: bool, where: str = "") -> None:
    """The invariants of `start` and `stop` that can be checked now: finite numbers (or
    arrays by period), `start < stop` in every period and, for a log grid, `start > 0`.

    Traced bounds and bounds given as functions are left to `by_period` (at build)."""
    if any(_is_function(v) for v in (start, stop)):
        for name, value in (("start", start), ("stop", stop)):
            if _is_function(value):
                _bound_arguments(grid, name, value)
            elif not isinstance(value, jax.core.Tracer):
                _bound_values(grid, name, value)
        return
    if any(isinstance(v, jax.core.Tracer) for v in (start, stop)):
        return
    low, high = _bound_values(grid, "start", start), _bound_values(grid, "stop", stop)
    if low.ndim == 1 and high.ndim == 1 and low.shape != high.shape:
        raise GridInitializationError(
            f"{grid}: start and stop must have one value per period each, got "
            f"{low.shape[0]} and {high.shape[0]} values."
        )
    varying = low.ndim == 1 or high.ndim == 1
    low, high = np.broadcast_arrays(low, high)
    if log:
        # A subnormal start (e.g. 5e-324) is > 0, but its ratio to `stop` overflows.
        bad = np.flatnonzero(np.atleast_1d(~(low >= _SMALLEST_NORMAL)))
        if bad.size:
            shown = (
                f"{np.atleast_1d(low)[bad[0]]:g} in period {bad[0]}{where}" if varying else start
            )
            raise GridInitializationError(
                f"{grid}: start must be > 0 (a normal float64, >= {_SMALLEST_NORMAL:.3g}) "
                f"for geometric spacing, got {shown}."
            )
    bad = np.flatnonzero(np.atleast_1d(~(low < high)))
    if bad.size:
        if not varying:
            raise GridInitializationError(
                f"{grid}: start must be < stop, got start={start}, stop={stop}."
            )
        i = bad[0]
        raise GridInitializationError(
            f"{grid}: start must be < stop in every period, got start={low[i]:g}, "
            f"stop={high[i]:g} in period {i}{where}."
        )


class AbstractBoundedGrid(AbstractContinuousGrid):
    """A grid of `n_points` points from `start` to `stop` (both included), spaced by the
    subclass. The bounds may vary with age: each is a number, an array with one value
    per period, or a function of `age` (or `period`); `n_points` is fixed."""

    start: eqx.AbstractVar[float | Array | Callable[..., Any]]
    stop: eqx.AbstractVar[float | Array | Callable[..., Any]]
    n_points_: eqx.AbstractVar[int]
    geometric: ClassVar[bool]

    @abc.abstractmethod
    def spaced(self, start, stop) -> Array:
        """The `n_points` points from `start` to `stop`."""

    @abc.abstractmethod
    def host_spaced(self, start, stop) -> np.ndarray:
        """`spaced` with NumPy in float64, for concrete bounds."""

    def _check_grid(self) -> None:
        name = type(self).__name__
        _check_n_points(name, self.n_points_)
        _check_bounds(name, self.start, self.stop, log=self.geometric)
        self.check_knobs()

    @property
    def n_points(self) -> int:
        return self.n_points_

    @property
    def varies_with_age(self) -> bool:
        return _varies(self.start) or _varies(self.stop)

    def to_jax(self) -> Float[Array, " n"]:
        if self.varies_with_age:
            raise GridInitializationError(
                f"{type(self).__name__}: its bounds vary with age, so it has one set of points "
                "per period: read them with `points_by_period()` of the model's grid "
                "(`model.grid_points(regime, variable, period)`)."
            )
        if _on_host(self.start, self.stop):
            return _host_points(self.host_spaced(self.start, self.stop))
        return self.spaced(self.start, self.stop)

    def by_period(self, periods: np.ndarray, ages: np.ndarray | None, where: str = ""):
        if not self.varies_with_age:
            return self
        name = type(self).__name__
        n_periods = periods.shape[0]

        def resolve(bound_name, value):
            if _is_function(value):
                arguments = _bound_arguments(name, bound_name, value)
                if "age" in arguments and ages is None:
                    raise ModelInitializationError(
                        f"{name}{where}: {bound_name} is a function of 'age', but the model "
                        "has no ages; pass ages=AgeGrid(...) to Model (or use a function of "
                        "'period')."
                    )
                labels = {"age": ages, "period": periods}
                values = [
                    value(**{a: labels[a][t].item() for a in arguments}) for t in range(n_periods)
                ]
                try:
                    return np.asarray(values, dtype=float).reshape(n_periods)
                except (TypeError, ValueError) as error:
                    raise GridInitializationError(
                        f"{name}{where}: {bound_name} must return one number per age, got "
                        f"{values!r}."
                    ) from error
            if isinstance(value, jax.core.Tracer):
                return jnp.broadcast_to(value, (n_periods,))
            values = _bound_values(name, bound_name, value)
            if values.ndim == 1 and values.shape[0] != n_periods:
                raise ModelInitializationError(
                    f"{name}{where}: {bound_name} has {values.shape[0]} values, but it needs "
                    f"one per period ({n_periods})."
                )
            return np.broadcast_to(values, (n_periods,)).copy()

        start, stop = resolve("start", self.start), resolve("stop", self.stop)
        _check_bounds(name, start, stop, log=self.geometric, where=where)
        return eqx.tree_at(lambda g: (g.start, g.stop), self, (start, stop))

    def points_by_period(self) -> Float[Array, "n_periods n"]:
        start = jnp.asarray(self.start)
        stop = jnp.asarray(self.stop)
        return jax.vmap(self.spaced)(*jnp.broadcast_arrays(start, stop))


class LinSpacedGrid(AbstractBoundedGrid):
    """`n_points` evenly spaced points from `start` to `stop` (both included).

    `start` and `stop` may vary with age, with `n_points` fixed (e.g. a wealth grid that
    widens as agents grow older): each is a number, an array with one value per period,
    or a function of `age` (or `period`), evaluated once per period when the model is
    built. In period t the solve uses period t's points for this period's states and
    reads next period's values on period t + 1's points.

    Args:
        start: the first point: a number, an array with one value per period, or a
            function of `age` (or `period`).
        stop: the last point, like `start`; `start < stop` in every period.
        n_points: the number of points (at least 2, the same in every period).
        batch_size: splay this axis in chunks of this many points (0: no splay).
        distributed: shard this axis (not allowed on continuous grids).

    Example:
        >>> wealth = LinSpacedGrid(start=0.0, stop=100.0, n_points=50)
        >>> widening = LinSpacedGrid(start=0.0, stop=lambda age: 10 + 5 * age, n_points=50)
    """

    start: float | Array | Callable[..., Any]
    stop: float | Array | Callable[..., Any]
    n_points_: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)
    geometric: ClassVar[bool] = False

    def __init__(
        self,
        start: float | Array | Callable[..., Any],
        stop: float | Array | Callable[..., Any],
        n_points: int,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.start = start
        self.stop = stop
        self.n_points_ = n_points
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self._check_grid()

    def spaced(self, start, stop) -> Array:
        return jnp.linspace(start, stop, self.n_points_)

    def host_spaced(self, start, stop) -> np.ndarray:
        return _host_linspace(start, stop, self.n_points_)

    def interval(self, x, points):
        # Fully closed form (no gathers: this runs at every state-action point). A
        # coordinate within rounding of an integer is snapped to it, so that the weight
        # at a grid point is exactly 0 and a `-inf` neighbour never leaks in.
        n = self.n_points_
        step = (points[-1] - points[0]) / (n - 1)
        coordinate = (x - points[0]) / step
        to_nearest = jnp.round(coordinate) - coordinate
        tolerance = 16 * jnp.finfo(jnp.result_type(coordinate)).eps * jnp.maximum(n, 1)
        # Snap the value, not the derivative: at a grid point the weight's derivative
        # stays that of `x` (the slope of the interval above), not 0.
        snapped = coordinate + jax.lax.stop_gradient(to_nearest)
        coordinate = jnp.where(jnp.abs(to_nearest) <= tolerance, snapped, coordinate)
        coordinate = jnp.where(jnp.isnan(coordinate), 0.0, coordinate)
        lo = jnp.clip(jnp.floor(coordinate), 0, n - 2)
        return lo.astype(jnp.int32), coordinate - lo


class LogSpacedGrid(AbstractBoundedGrid):
    """`n_points` geometrically spaced points from `start > 0` to `stop` (both included).

    Values between points are interpolated linearly in levels. Like `LinSpacedGrid`,
    `start` and `stop` may vary with age (numbers, arrays with one value per period, or
    functions of `age`), with `n_points` fixed.

    Args:
        start: the first point (> 0): a number, an array with one value per period, or a
            function of `age` (or `period`).
        stop: the last point, like `start`; `start < stop` in every period.
        n_points: the number of points (at least 2, the same in every period).
        batch_size: splay this axis in chunks of this many points (0: no splay).
        distributed: shard this axis (not allowed on continuous grids).

    Example:
        >>> wealth = LogSpacedGrid(start=0.1, stop=1000.0, n_points=60)
    """

    start: float | Array | Callable[..., Any]
    stop: float | Array | Callable[..., Any]
    n_points_: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)
    geometric: ClassVar[bool] = True

    def __init__(
        self,
        start: float | Array | Callable[..., Any],
        stop: float | Array | Callable[..., Any],
        n_points: int,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.start = start
        self.stop = stop
        self.n_points_ = n_points
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self._check_grid()

    def spaced(self, start, stop) -> Array:
        return _geomspace(start, stop, self.n_points_)

    def host_spaced(self, start, stop) -> np.ndarray:
        return _host_geomspace(start, stop, self.n_points_)

    def interval(self, x, points):
        log_step = jnp.log(points[-1] / points[0]) / (self.n_points_ - 1)
        safe_x = jnp.where(x > 0, x, points[0])
        coordinate = jnp.where(x > 0, jnp.log(safe_x / points[0]) / log_step, 0.0)
        return _closed_form_interval(x, points, coordinate)


class IrregSpacedGrid(AbstractContinuousGrid):
    """A continuous grid on given, strictly increasing points.

    Example:
        >>> hours = IrregSpacedGrid(points=[0.0, 10.0, 20.0, 40.0])
    """

    points: Array | np.ndarray
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        points: Sequence[float] | ArrayLike,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        try:
            values = np.asarray(points, dtype=float)
        except (TypeError, ValueError) as error:
            raise GridInitializationError(
                f"IrregSpacedGrid: points must be a sequence of numbers, got {points!r}."
            ) from error
        if values.ndim != 1:
            raise GridInitializationError(
                f"IrregSpacedGrid: points must be one-dimensional, got shape {values.shape}."
            )
        if not np.all(np.isfinite(values)):
            raise GridInitializationError(
                f"IrregSpacedGrid: points must be finite, got {values.tolist()}."
            )
        self.points = values
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        if self.points.shape[0] < 2:
            raise GridInitializationError(
                f"IrregSpacedGrid: points needs at least 2 values, got {self.points.shape[0]}."
            )
        if not np.all(np.diff(self.points) > 0):
            raise GridInitializationError(
                f"IrregSpacedGrid: points must be strictly increasing, got {self.points.tolist()}."
            )
        self.check_knobs()

    @property
    def n_points(self) -> int:
        return int(self.points.shape[0])

    def to_jax(self) -> Float[Array, " n"]:
        return jnp.asarray(self.points, dtype=float)


def _check_piecewise(grid: str, breakpoints, n_points, *, log: bool) -> np.ndarray:
    try:
        values = np.asarray(breakpoints, dtype=float)
    except (TypeError, ValueError) as error:
        raise GridInitializationError(
            f"{grid}: breakpoints must be a sequence of numbers, got {breakpoints!r}."
        ) from error
    if values.ndim != 1 or values.shape[0] < 2:
        raise GridInitializationError(
            f"{grid}: breakpoints needs at least 2 values (one segment), got {breakpoints!r}."
        )
    if not np.all(np.isfinite(values)):
        raise GridInitializationError(f"{grid}: breakpoints must be finite, got {values.tolist()}.")
    if not np.all(np.diff(values) > 0):
        raise GridInitializationError(
            f"{grid}: breakpoints must be strictly increasing, got {values.tolist()}."
        )
    if log and not values[0] >= _SMALLEST_NORMAL:
        raise GridInitializationError(
            f"{grid}: breakpoints must be > 0 (normal float64s) for geometric spacing, got "
            f"{values.tolist()}."
        )
    if isinstance(n_points, np.ndarray) and n_points.ndim == 1:
        n_points = n_points.tolist()
    if not isinstance(n_points, Sequence) or len(n_points) != values.shape[0] - 1:
        raise GridInitializationError(
            f"{grid}: n_points must be a sequence with one entry per segment "
            f"({values.shape[0] - 1} for breakpoints {values.tolist()}), got {n_points!r}."
        )
    for i, n in enumerate(n_points):
        _check_n_points(grid, n, argument=f"n_points[{i}]")
    return values


class AbstractPiecewiseGrid(AbstractContinuousGrid):
    """Segments between `breakpoints`; segment i has `n_points[i]` points including both
    ends, and a shared breakpoint appears once (`sum(n_points) - (len(n_points) - 1)`
    points in all). Subclasses say whether the segments are spaced geometrically."""

    breakpoints: Array | np.ndarray
    n_points_per_segment: tuple[int, ...] = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)
    geometric: ClassVar[bool]

    def __init__(
        self,
        breakpoints: Sequence[float] | ArrayLike,
        n_points: Sequence[int],
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.breakpoints = _check_piecewise(
            type(self).__name__, breakpoints, n_points, log=self.geometric
        )
        self.n_points_per_segment = tuple(int(n) for n in n_points)
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self.check_knobs()

    @property
    def n_points(self) -> int:
        return sum(self.n_points_per_segment) - (len(self.n_points_per_segment) - 1)

    def to_jax(self) -> Float[Array, " n"]:
        if not _on_host(self.breakpoints):
            traced = _geomspace if self.geometric else jnp.linspace
            return jnp.concatenate(
                [
                    traced(self.breakpoints[i], self.breakpoints[i + 1], n)[(1 if i else 0) :]
                    for i, n in enumerate(self.n_points_per_segment)
                ]
            )
        spacing = _host_geomspace if self.geometric else _host_linspace
        segments = [
            spacing(self.breakpoints[i], self.breakpoints[i + 1], n)[(1 if i else 0) :]
            for i, n in enumerate(self.n_points_per_segment)
        ]
        return _host_points(np.concatenate(segments))


class PiecewiseLinSpacedGrid(AbstractPiecewiseGrid):
    """Linearly spaced segments: segment i spans `[breakpoints[i], breakpoints[i+1]]`.

    Segment i has `n_points[i]` points including both ends; a shared breakpoint appears
    once, so the grid has `sum(n_points) - (len(n_points) - 1)` points.

    Example:
        >>> wealth = PiecewiseLinSpacedGrid(breakpoints=[0.0, 10.0, 100.0], n_points=[21, 30])
    """

    geometric: ClassVar[bool] = False


class PiecewiseLogSpacedGrid(AbstractPiecewiseGrid):
    """Geometrically spaced segments between `breakpoints` (all > 0).

    Segment i has `n_points[i]` points including both ends; a shared breakpoint appears
    once.

    Example:
        >>> wealth = PiecewiseLogSpacedGrid(breakpoints=[0.1, 10.0, 1000.0], n_points=[20, 20])
    """

    geometric: ClassVar[bool] = True
