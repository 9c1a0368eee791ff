"""The abstract grid interface that every state and action grid implements."""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import numpy as np
from jaxtyping import Array

from .._errors import GridInitializationError
from .._numerics import count_at_or_below


class AbstractGrid(eqx.Module):
    """A one-dimensional grid of points for a state or an action.

    Every grid carries the two tuning knobs:

    - `batch_size`: scan the per-period work over chunks of this many points along the
      axis (0 means one vectorised pass). Same results, lower peak memory.
    - `distributed`: place this (discrete) axis across devices.
    """

    batch_size: eqx.AbstractVar[int]
    distributed: eqx.AbstractVar[bool]
    is_discrete: ClassVar[bool]

    @property
    @abc.abstractmethod
    def n_points(self) -> int:
        """Number of points on the grid (static)."""

    @property
    def varies_with_age(self) -> bool:
        """Whether the points differ between periods (bounds that vary with age)."""
        return False

    def by_period(self, periods: np.ndarray, ages: np.ndarray | None, where: str = ""):
        """This grid with bounds that vary with age resolved to one value per period.

        Args:
            periods: the model's periods, `0 .. n_periods - 1`.
            ages: the age of each period, or None for a model without ages.
            where: where the grid is used (regime and variable), for error messages.

        A grid whose points do not vary is returned unchanged.
        """
        del periods, ages, where
        return self

    def check_knobs(self) -> None:
        name = type(self).__name__
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool):
            raise GridInitializationError(
                f"{name}: batch_size must be an int >= 0 (0 = no splay), got {self.batch_size!r}."
            )
        if self.batch_size < 0:
            raise GridInitializationError(
                f"{name}: batch_size must be >= 0 (0 = no splay), got {self.batch_size}."
            )
        if not isinstance(self.distributed, bool):
            raise GridInitializationError(
                f"{name}: distributed must be True or False, got {self.distributed!r}."
            )
        if self.distributed and not self.is_discrete:
            raise GridInitializationError(
                f"{name}: distributed=True is only valid on discrete grids; a continuous axis "
                "cannot be sharded because next-period values are interpolated along it. "
                "Use batch_size=k to reduce its memory instead."
            )
        if self.distributed and self.batch_size > 0:
            raise GridInitializationError(
                f"{name}: an axis cannot be both splayed and sharded; got batch_size="
                f"{self.batch_size} with distributed=True. Set batch_size=0 or distributed=False."
            )


class AbstractContinuousGrid(AbstractGrid):
    """A grid on a continuous axis: next-period values are interpolated along it."""

    is_discrete: ClassVar[bool] = False

    @abc.abstractmethod
    def to_jax(self) -> Array:
        """The grid points as a 1-d array, increasing."""

    def points_by_period(self) -> Array:
        """The points of every period, `(n_periods, n_points)`, of a grid resolved by
        `by_period` whose points vary with age."""
        raise NotImplementedError(f"{type(self).__name__} has the same points in every period.")

    def interval(self, x: Array, points: Array) -> tuple[Array, Array]:
        """Index `lo` of the interval containing `x` and the weight on `points[lo + 1]`.

        `lo` is clipped to `[0, n - 2]`, so outside the grid the weight leaves `[0, 1]`
        and the interpolation extrapolates linearly from the end interval. At a grid
        point the weight is exactly 0 (or 1 at the last point), so a `-inf` neighbour
        never leaks into the value there.
        """
        import jax.numpy as jnp

        n = points.shape[0]
        # By counting in two levels (`count_at_or_below`), elementwise in `x`: on the
        # 600,000 state-action-node points of a simulated period of
        # `benchmarks/simulate_solvers.py`'s model (80 irregular wealth points) 7x faster
        # than `jnp.searchsorted`'s binary search (a loop of total-order comparisons).
        count = jnp.vectorize(lambda v: count_at_or_below(points, v))(x)
        lo = jnp.clip(count - 1, 0, n - 2)
        return lo, interval_weight(x, points, lo)


def interval_weight(x: Array, points: Array, lo: Array) -> Array:
    lower = points[lo]
    upper = points[lo + 1]
    return (x - lower) / (upper - lower)
