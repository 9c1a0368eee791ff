"""Euler errors of the liquid margin of an `NEGM` solution of `examples/durables.py`,
written apart from the library in numpy float64.

At liquid wealth `m`, stock `n` and income node `z`, the keeper consumes `c` out of `m`
and holds `n`; the adjuster consumes `c` and buys `d` out of `x = m + (1 − τ)·n`. With
`h` the stock held and `a` what is saved, the Euler equation is
`u_c(c, h) = β·R·Σ_z' P(z, z')·u_c(c', h')` at `m' = R·a + exp(y_z)`, `n' = (1 − δ)·h`,
where `(c', h')` is next period's better choice at `(m', n')`. Policies are read from the
solution's arrays as NEGM defines them between nodes: consumption bilinearly (keeper, its
desired consumption capped at what is above the borrowing limit 0, so that the
constrained region `c = m` is exact) or linearly in `x` (adjuster); values by
integrating `u_c` at the interpolated consumption over three Gauss–Legendre points from
each end of the liquid (resources) interval, blended by position, and for the keeper by
a cubic through the durable's marginal value between durable nodes. Marginal utility
and its inverse are in closed form.
"""

from __future__ import annotations

import numpy as np

_GAUSS_NODES = np.array([0.5 - 0.5 * np.sqrt(0.6), 0.5, 0.5 + 0.5 * np.sqrt(0.6)])
_GAUSS_WEIGHTS = np.array([5.0, 8.0, 5.0]) / 18.0

# The model's `no_borrowing` constraint: saving at least 0.
BORROWING_LIMIT = 0.0


def marginal_utility(c, h, p):
    a, rho = p["alpha"], p["risk_aversion"]
    return a * c ** (a * (1 - rho) - 1) * (h + p["durable_floor"]) ** ((1 - a) * (1 - rho))


def inverse_marginal_utility(q, h, p):
    a, rho = p["alpha"], p["risk_aversion"]
    scale = a * (h + p["durable_floor"]) ** ((1 - a) * (1 - rho))
    return (q / scale) ** (1.0 / (a * (1 - rho) - 1))


def _interval(points, x):
    i = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    return i, points[i], points[i + 1]


def _through_slopes(low, high, v_low, v_high, slope, x):
    """`v(x)` from `v(low)`, `v(high)` and `v' = slope`, integrated from both ends."""

    def integral(a, b):
        return (b - a) * sum(
            w * slope(a + t * (b - a)) for t, w in zip(_GAUSS_NODES, _GAUSS_WEIGHTS, strict=True)
        )

    share = np.clip((x - low) / (high - low), 0.0, 1.0)
    return (1 - share) * (v_low + integral(low, x)) + share * (v_high - integral(x, high))


def _cubic(v0, v1, s0, s1, width, t):
    tc = np.clip(t, 0.0, 1.0)
    inside = (
        v0 * (1 - 3 * tc**2 + 2 * tc**3)
        + width * s0 * (tc - 2 * tc**2 + tc**3)
        + v1 * (3 * tc**2 - 2 * tc**3)
        + width * s1 * (tc**3 - tc**2)
    )
    return np.where(t < 0, v0 + s0 * width * t, np.where(t > 1, v1 + s1 * width * (t - 1), inside))


def keeper(policy, z, m, n, grids, p):
    """The keeper's value and consumption at the points `(z, m, n)` (arrays)."""
    liquid, durable, _ = grids
    i, m_low, m_high = _interval(liquid, m)
    j, n_low, n_high = _interval(durable, n)
    s = (m - m_low) / (m_high - m_low)
    t = (n - n_low) / (n_high - n_low)
    kc = policy["keep_consumption"]
    kv = policy["keep_value"]
    kn = policy["keep_marginal_durable"]
    desired = (1 - t) * ((1 - s) * kc[z, i, j] + s * kc[z, i + 1, j]) + t * (
        (1 - s) * kc[z, i, j + 1] + s * kc[z, i + 1, j + 1]
    )
    consumption = np.minimum(desired, m - BORROWING_LIMIT)

    def on_node(k):
        def slope(w):
            c = kc[z, i, k] + (w - m_low) / (m_high - m_low) * (kc[z, i + 1, k] - kc[z, i, k])
            return marginal_utility(np.minimum(c, w - BORROWING_LIMIT), durable[k], p)

        value = _through_slopes(m_low, m_high, kv[z, i, k], kv[z, i + 1, k], slope, m)
        return value, (1 - s) * kn[z, i, k] + s * kn[z, i + 1, k]

    (v0, s0), (v1, s1) = on_node(j), on_node(j + 1)
    return _cubic(v0, v1, s0, s1, n_high - n_low, t), consumption


def adjuster(policy, z, x, grids, p):
    """The adjuster's value, consumption and new stock at total resources `x`."""
    total = grids[2]
    k, x_low, x_high = _interval(total, x)
    ac, ad, av = (policy[f"adjust_{name}"] for name in ("consumption", "durable", "value"))

    def at(w):
        t = (w - x_low) / (x_high - x_low)
        return ac[z, k] + t * (ac[z, k + 1] - ac[z, k]), ad[z, k] + t * (ad[z, k + 1] - ad[z, k])

    value = _through_slopes(
        x_low, x_high, av[z, k], av[z, k + 1], lambda w: marginal_utility(*at(w), p), x
    )
    return (value, *at(x))


def euler_errors(now, later, z, m, n, code, grids, p, nodes, matrix):
    """log10 relative Euler errors (at least machine epsilon) of keeping (`code` 0) or
    adjusting (1) at the points `(z, m, n)`, NaN where the choice saves nothing. `now`,
    `later`: the period's and next period's policy arrays by field name (leading axis:
    the income node)."""
    x = m + (1 - p["adjustment_cost"]) * n
    _, keep_c = keeper(now, z, m, n, grids, p)
    _, adjust_c, adjust_d = adjuster(now, z, x, grids, p)
    adjusts = code == 1
    c = np.where(adjusts, adjust_c, keep_c)
    h = np.where(adjusts, adjust_d, n)
    saved = np.where(adjusts, x - adjust_d, m) - c
    gross = 1 + p["interest_rate"]
    n_next = (1 - p["depreciation"]) * h
    m_next = gross * saved + np.exp(nodes[z])
    expected = np.zeros_like(m)
    for z_next in range(len(nodes)):
        at = np.full_like(z, z_next)
        keep_v, keep_c_next = keeper(later, at, m_next, n_next, grids, p)
        x_next = m_next + (1 - p["adjustment_cost"]) * n_next
        adjust_v, adjust_c_next, adjust_d_next = adjuster(later, at, x_next, grids, p)
        keeps = keep_v >= adjust_v
        mu = np.where(
            keeps,
            marginal_utility(keep_c_next, n_next, p),
            marginal_utility(adjust_c_next, adjust_d_next, p),
        )
        expected += matrix[z, z_next] * mu
    implied = inverse_marginal_utility(p["discount_factor"] * gross * expected, h, p)
    errors = np.log10(np.maximum(np.abs(1.0 - implied / c), np.finfo(float).eps))
    return np.where(saved > 1e-9, errors, np.nan)
