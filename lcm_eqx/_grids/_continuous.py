"""Continuous grids: linearly, logarithmically, irregularly and piecewise spaced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from .._errors import GridInitializationError
from ._base import AbstractContinuousGrid, _weight


def _is_concrete(grid: str, **values) -> bool:
    """Whether `values` can be checked now; raises if one is not a finite number.

    Traced values (a grid built inside `jax.jit` or `jax.vmap`) cannot be checked at
    construction: then False.
    """
    if any(isinstance(v, jax.core.Tracer) for v in values.values()):
        return False
    for name, value in values.items():
        if isinstance(value, str | bytes | np.str_ | np.bytes_):
            raise GridInitializationError(f"{grid}: {name} must be a number, got {value!r}.")
        try:
            number = float(value)
        except (TypeError, ValueError) as error:
            raise GridInitializationError(
                f"{grid}: {name} must be a number, got {value!r}."
            ) from error
        if not np.isfinite(number):
            raise GridInitializationError(f"{grid}: {name} must be finite, got {number}.")
    return True


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
    return lo, _weight(x, points, lo)


def _geomspace(start, stop, n: int) -> Array:
    """Geometric spacing with exact end points (so end points match given bounds)."""
    points = jnp.geomspace(start, stop, n)
    return points.at[0].set(start).at[-1].set(stop)


class LinSpacedGrid(AbstractContinuousGrid):
    """`n_points` evenly spaced points from `start` to `stop` (both included).

    Example:
        >>> wealth = LinSpacedGrid(start=0.0, stop=100.0, n_points=50)
    """

    start: float | Array
    stop: float | Array
    n_points_: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        start: float | Array,
        stop: float | Array,
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
        _check_n_points("LinSpacedGrid", self.n_points_)
        if _is_concrete("LinSpacedGrid", start=self.start, stop=self.stop) and not float(
            self.start
        ) < float(self.stop):
            raise GridInitializationError(
                f"LinSpacedGrid: start must be < stop, got start={self.start}, stop={self.stop}."
            )
        self._check_knobs()

    @property
    def n_points(self) -> int:
        return self.n_points_

    def to_jax(self) -> Float[Array, " n"]:
        return jnp.linspace(self.start, self.stop, self.n_points_)

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


class LogSpacedGrid(AbstractContinuousGrid):
    """`n_points` geometrically spaced points from `start > 0` to `stop` (both included).

    Values between points are interpolated linearly in levels.

    Example:
        >>> wealth = LogSpacedGrid(start=0.1, stop=1000.0, n_points=60)
    """

    start: float | Array
    stop: float | Array
    n_points_: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        start: float | Array,
        stop: float | Array,
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
        _check_n_points("LogSpacedGrid", self.n_points_)
        if _is_concrete("LogSpacedGrid", start=self.start, stop=self.stop):
            if not float(self.start) > 0:
                raise GridInitializationError(
                    f"LogSpacedGrid: start must be > 0 for geometric spacing, got {self.start}."
                )
            if not float(self.start) < float(self.stop):
                raise GridInitializationError(
                    f"LogSpacedGrid: start must be < stop, got start={self.start}, "
                    f"stop={self.stop}."
                )
        self._check_knobs()

    @property
    def n_points(self) -> int:
        return self.n_points_

    def to_jax(self) -> Float[Array, " n"]:
        return _geomspace(self.start, self.stop, self.n_points_)

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
        self._check_knobs()

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
    if log and not values[0] > 0:
        raise GridInitializationError(
            f"{grid}: breakpoints must be > 0 for geometric spacing, got {values.tolist()}."
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
        self._check_knobs()

    @property
    def n_points(self) -> int:
        return sum(self.n_points_per_segment) - (len(self.n_points_per_segment) - 1)

    def to_jax(self) -> Float[Array, " n"]:
        spacing = _geomspace if self.geometric else jnp.linspace
        segments = [
            spacing(self.breakpoints[i], self.breakpoints[i + 1], n)[(1 if i else 0) :]
            for i, n in enumerate(self.n_points_per_segment)
        ]
        return jnp.concatenate(segments)


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
