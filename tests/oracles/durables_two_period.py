"""An exact reference for the two-period durable-goods model of `examples/durables.py`,
written apart from `lcm.NEGM`, in numpy float64.

In the last period nothing follows: a keeper consumes all liquid wealth, an adjuster
splits total resources `x` between consumption and the new stock, and the Cobb–Douglas
first-order condition gives the split in closed form, `d = (1 − α)·x − α·h̲` (within the
bounds of the stock). In the first period, the value is maximised numerically over
consumption (and the new stock) against that closed form: a dense grid of each choice,
then golden-section steps around the best point (nested for the adjuster), so no
interpolation of next period's value enters.
"""

from __future__ import annotations

import numpy as np

GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


def utility(c, h, p):
    aggregate = c ** p["alpha"] * (h + p["durable_floor"]) ** (1.0 - p["alpha"])
    return aggregate ** (1.0 - p["risk_aversion"]) / (1.0 - p["risk_aversion"])


def last_adjuster(x, p, durable_max):
    """The last period's adjuster: new stock and value at total resources `x`."""
    d = np.clip((1.0 - p["alpha"]) * x - p["alpha"] * p["durable_floor"], 0.0, durable_max)
    d = np.minimum(d, x)
    return d, utility(x - d, d, p)


def last_value(m, n, p, durable_max):
    """V in the last period at liquid wealth `m` and stock `n`."""
    x = m + (1.0 - p["adjustment_cost"]) * n
    return np.maximum(utility(m, n, p), last_adjuster(x, p, durable_max)[1])


def maximise(f, low, high, n_grid=400, steps=80):
    """max of `f` (vectorised over its last axis) on `[low, high]` (arrays), by a grid of
    `n_grid` points and golden-section steps around the best."""
    fractions = np.linspace(0.0, 1.0, n_grid)
    grid = low[..., None] + (high - low)[..., None] * fractions
    values = f(grid)
    k = np.argmax(values, axis=-1)
    a = np.take_along_axis(grid, np.maximum(k - 1, 0)[..., None], -1)[..., 0]
    b = np.take_along_axis(grid, np.minimum(k + 1, n_grid - 1)[..., None], -1)[..., 0]
    for _ in range(steps):
        left, right = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
        better = f(left[..., None])[..., 0] >= f(right[..., None])[..., 0]
        a, b = np.where(better, a, left), np.where(better, right, b)
    best = np.maximum(f(((a + b) / 2)[..., None])[..., 0], np.max(values, axis=-1))
    return best


def first_value(m, n, z, p, income, matrix, durable_max):
    """V in the first of two periods at states `(m, n, z)` (1-d arrays of equal length)."""
    beta, gross = p["discount_factor"], 1.0 + p["interest_rate"]
    y = np.exp(income[z])
    weights = matrix[z]  # (k, z')

    def continuation(a, h):
        # a, h broadcast together; sum over next income states (which do not enter V_1).
        return sum(
            weights[:, j].reshape((-1,) + (1,) * (a.ndim - 1))
            * last_value(
                gross * a + y.reshape((-1,) + (1,) * (a.ndim - 1)),
                (1 - p["depreciation"]) * h,
                p,
                durable_max,
            )
            for j in range(matrix.shape[1])
        )

    tiny = 1e-10

    def keep(c):
        return utility(c, n[:, None], p) + beta * continuation(m[:, None] - c, n[:, None])

    keep_value = maximise(keep, np.full_like(m, tiny), m)
    x = m + (1.0 - p["adjustment_cost"]) * n

    def adjust_given(d):
        # d: (k, D) -> the best consumption for each (state, d).
        budget = x[:, None] - d

        def value(c):
            return utility(c, d[..., None], p) + beta * continuation(
                budget[..., None] - c, d[..., None]
            )

        return maximise(value, np.full_like(budget, tiny), budget, n_grid=200, steps=60)

    adjust_value = maximise(
        adjust_given, np.zeros_like(x), np.minimum(durable_max, x - 1e-6), n_grid=100, steps=50
    )
    return np.maximum(keep_value, adjust_value)
