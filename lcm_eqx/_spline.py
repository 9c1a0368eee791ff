"""A profile over age (or any ordered variable) written as a few free numbers: the values
at fixed knots, joined by a natural cubic spline or by straight lines.

Structural models are calibrated with age profiles (a work disutility, an effort cost or
a wage by age); estimating every age's entry is hopeless, estimating a handful of knot
values is standard. `Spline` is the map from the knot values to the profile in JAX, so
it sits inside a model's functions and `lcm.estimate` differentiates through it: the
knot values are an array parameter that `free=[...]` frees entry by entry.

The spline is linear in the values: `S(x) = Σ_k w_k(x) y_k`. The natural cubic spline's
second derivatives at the knots are `K y` with `K` computed once in float64 from the
(static) knots, so a model's program holds only elementwise work (no linear solve, no
matrix product whose precision a device would lower).
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from ._errors import ModelInitializationError


def _natural_curvature(knots: np.ndarray) -> np.ndarray:
    """`K` with the natural cubic spline's second derivatives at the knots `= K @ y`."""
    n = knots.size
    h = np.diff(knots)
    system = np.zeros((n, n))
    rhs = np.zeros((n, n))
    system[0, 0] = system[-1, -1] = 1.0  # natural ends: no curvature
    for i in range(1, n - 1):
        system[i, i - 1 : i + 2] = h[i - 1], 2.0 * (h[i - 1] + h[i]), h[i]
        rhs[i, i - 1 : i + 2] = 6.0 / h[i - 1], -6.0 / h[i - 1] - 6.0 / h[i], 6.0 / h[i]
    return np.linalg.solve(system, rhs)


class Spline(eqx.Module):
    """The profile through given values at `knots`, evaluated anywhere.

    `Spline(knots=[25, 40, 55, 70])(values, age)`: the natural cubic spline (`kind=
    "cubic"`, the default) or the broken line (`kind="linear"`) through `(knots[k],
    values[k])`, at `age` (any shape); beyond the first and last knots it continues as
    the straight line it ends on. Differentiable in `values` and in `age`.

    Example, a work disutility whose age profile has four free knot values:

        >>> PROFILE = lcm.Spline(knots=[25, 40, 55, 70])
        >>> def work_disutility(labor_supply, period, disutility_knots):
        ...     return labor_supply * PROFILE(disutility_knots, 25 + 2 * period)

    with `params[...]["work_disutility"]["disutility_knots"] = jnp.array([...])` (four
    entries), and `lcm.estimate(..., free=[(..., "work_disutility",
    "disutility_knots")])` estimates all four.
    """

    knots: tuple[float, ...] = eqx.field(static=True)
    kind: Literal["cubic", "linear"] = eqx.field(static=True)
    # The natural spline's curvature map, a nested tuple (static, hashable).
    curvature: tuple[tuple[float, ...], ...] = eqx.field(static=True)

    def __init__(self, knots, kind: Literal["cubic", "linear"] = "cubic"):
        points = np.asarray(knots, dtype=np.float64)
        if points.ndim != 1 or points.size < 2:
            raise ModelInitializationError(
                f"Spline: knots must be at least two numbers in a row, got {knots!r}."
            )
        if not np.all(np.isfinite(points)) or np.any(np.diff(points) <= 0):
            raise ModelInitializationError(
                f"Spline: knots must be finite and strictly increasing, got {knots!r}."
            )
        if kind not in ("cubic", "linear"):
            raise ModelInitializationError(
                f"Spline: kind must be 'cubic' or 'linear', got {kind!r}."
            )
        self.knots = tuple(float(k) for k in points)
        self.kind = kind
        matrix = _natural_curvature(points) if kind == "cubic" else np.zeros((points.size,) * 2)
        self.curvature = tuple(tuple(float(v) for v in row) for row in matrix)

    def __call__(self, values: ArrayLike, x: ArrayLike) -> Array:
        y = jnp.asarray(values)
        n = len(self.knots)
        if y.shape != (n,):
            raise ModelInitializationError(
                f"Spline: {n} knots take {n} values, got an array of shape {y.shape}."
            )
        x = jnp.asarray(x, dtype=y.dtype)
        knots = jnp.asarray(self.knots, dtype=y.dtype)
        # Second derivatives at the knots (a sum, not a matrix product: exact on a TPU).
        m = jnp.sum(jnp.asarray(self.curvature, dtype=y.dtype) * y[None, :], axis=1)
        i = jnp.clip(jnp.searchsorted(knots, x, side="right") - 1, 0, n - 2)
        lo, hi = knots[i], knots[i + 1]
        h = hi - lo
        left, right = hi - x, x - lo
        inside = (
            m[i] * left**3 / (6 * h)
            + m[i + 1] * right**3 / (6 * h)
            + (y[i] / h - m[i] * h / 6) * left
            + (y[i + 1] / h - m[i + 1] * h / 6) * right
        )
        h0, h1 = knots[1] - knots[0], knots[-1] - knots[-2]
        first_slope = (y[1] - y[0]) / h0 - h0 * (2 * m[0] + m[1]) / 6
        last_slope = (y[-1] - y[-2]) / h1 + h1 * (m[-2] + 2 * m[-1]) / 6
        before = y[0] + first_slope * (x - knots[0])
        after = y[-1] + last_slope * (x - knots[-1])
        return jnp.where(x < knots[0], before, jnp.where(x > knots[-1], after, inside))
