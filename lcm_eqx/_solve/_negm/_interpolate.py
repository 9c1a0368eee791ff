"""Interpolation on NEGM's grids: cubic Hermite through values and their slopes (the
marginal values the envelope theorem gives at every node), and linear interpolation of
policies.

A value function read from its nodes by linear interpolation is off by `h²·v''/8`
between them; through the same nodes with their slopes, by cubic Hermite, by
`h⁴·v''''/384`. The slopes cost nothing: at an optimum, the marginal value of liquid
wealth is the marginal utility of consumption, and that of the durable is known the same
way. Outside the grid the interpolants continue linearly with the end node's slope.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..._numerics import count_at_or_below


def locate(points: Array, x: Array) -> tuple[Array, Array, Array]:
    """The interval `lo` of sorted `points` that holds `x` (clipped to the end
    intervals), the position `t = (x − points[lo]) / h` in it (outside `[0, 1]` beyond
    the grid) and its width `h`.

    The interval is found by counting (`count_at_or_below`, as DC-EGM's reads do), not
    by `jnp.searchsorted`, whose binary search is a while loop of its own in the XLA
    program: the durable model's NEGM solve had 1410 kernels with it and 1202 without
    (same values, bitwise), and XLA:CPU compiles each kernel apart."""
    n = points.shape[0]
    count = jnp.vectorize(lambda q: count_at_or_below(points, q))(x)
    lo = jnp.clip(count - 1, 0, n - 2)
    h = points[lo + 1] - points[lo]
    return lo, (x - points[lo]) / h, h


def hermite(v0, v1, s0, s1, h, t):
    """The cubic through `(0, v0)` and `(1, v1)` with slopes `s0`, `s1` (per unit of
    the original axis, whose interval is `h` wide), at `t`; linear beyond `[0, 1]`."""
    inside = jnp.clip(t, 0.0, 1.0)
    t2 = inside * inside
    t3 = t2 * inside
    cubic = (
        (2 * t3 - 3 * t2 + 1) * v0
        + (t3 - 2 * t2 + inside) * h * s0
        + (-2 * t3 + 3 * t2) * v1
        + (t3 - t2) * h * s1
    )
    below = v0 + s0 * h * t
    above = v1 + s1 * h * (t - 1.0)
    return jnp.where(t < 0.0, below, jnp.where(t > 1.0, above, cubic))


def hermite_1d(points: Array, values: Array, slopes: Array, x: Array) -> Array:
    """`values` (with `slopes`) on `points`, read at `x` by cubic Hermite."""
    lo, t, h = locate(points, x)
    return hermite(values[lo], values[lo + 1], slopes[lo], slopes[lo + 1], h, t)


def linear_1d(points: Array, values: Array, x: Array) -> Array:
    """`values` on `points` at `x`, linearly (extrapolated from the end intervals)."""
    lo, t, _ = locate(points, x)
    return linear_at(values, lo, t)


def linear_at(values: Array, lo: Array, t: Array) -> Array:
    """`values` read linearly at position `t` of interval `lo` (`locate`'s), so that
    several arrays on one grid share one interval search."""
    return values[lo] + t * (values[lo + 1] - values[lo])


# Gauss–Legendre nodes and weights on [0, 1] (three points: exact for degree five).
_NODES = (0.5 - 0.5 * (3 / 5) ** 0.5, 0.5, 0.5 + 0.5 * (3 / 5) ** 0.5)
_WEIGHTS = (5 / 18, 8 / 18, 5 / 18)


def integrated(low, high, v_low, v_high, slope: Callable, x) -> Array:
    """The value at `x` from its values `v_low`, `v_high` at the ends of the interval
    `[low, high]` by integrating the marginal value `slope(s)` from each end (three
    Gauss–Legendre points), blended by the position in the interval (beyond it, from
    the nearer end only).

    The slope is marginal utility at linearly interpolated consumption: consumption is
    nearly linear in wealth where the value is not (CRRA utility near the borrowing
    limit is `-1/m`-like, which no cubic through a few nodes follows), and the integral
    is exact where consumption is linear (the last period, the adjuster's Cobb–Douglas
    split)."""

    low, high, x = jnp.broadcast_arrays(low, high, x)
    ahead, behind = x - low, high - x
    # The six quadrature points (three on each side of `x`) in one batched evaluation of
    # the slope: one traced copy of marginal utility instead of six (its trace, and the
    # code XLA emits for each copy, were most of NEGM's compilation).
    points = jnp.stack([low + s * ahead for s in _NODES] + [x + s * behind for s in _NODES])
    slopes = jax.vmap(slope)(points)
    w0, w1, w2 = _WEIGHTS
    forward = v_low + ahead * (w0 * slopes[0] + w1 * slopes[1] + w2 * slopes[2])
    backward = v_high - behind * (w0 * slopes[3] + w1 * slopes[4] + w2 * slopes[5])
    weight = jnp.clip((x - low) / (high - low), 0.0, 1.0)
    return (1.0 - weight) * forward + weight * backward


def hermite_2d(
    first: Array, second: Array, values: Array, d_first: Array, d_second: Array, x, y
) -> Array:
    """`values` on the product grid `first × second`, with their partial derivatives
    `d_first` and `d_second`, read at `(x, y)`: cubic Hermite along `first` on the two
    nodes of `second` around `y`, then cubic Hermite along `second` between them, with
    the slopes along `second` read linearly along `first`."""
    i, tx, hx = locate(first, x)
    j, ty, hy = locate(second, y)

    def along_first(column):
        return hermite(
            values[i, column],
            values[i + 1, column],
            d_first[i, column],
            d_first[i + 1, column],
            hx,
            tx,
        )

    def slope_second(column):
        return d_second[i, column] + tx * (d_second[i + 1, column] - d_second[i, column])

    return hermite(along_first(j), along_first(j + 1), slope_second(j), slope_second(j + 1), hy, ty)


def bilinear(first: Array, second: Array, values: Array, x, y) -> Array:
    """`values` on the product grid `first × second` at `(x, y)`, bilinearly."""
    i, tx, _ = locate(first, x)
    j, ty, _ = locate(second, y)
    low = values[i, j] + tx * (values[i + 1, j] - values[i, j])
    high = values[i, j + 1] + tx * (values[i + 1, j + 1] - values[i, j + 1])
    return low + ty * (high - low)
