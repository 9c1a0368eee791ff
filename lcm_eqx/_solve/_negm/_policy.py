"""What NEGM keeps of a period: the keeper's and the adjuster's solutions on their
grids, and how they are read at any liquid wealth and durable stock."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._numerics import CONTRACTION_PRECISION
from ._interpolate import bilinear, hermite, integrated, linear_at, locate


class NEGMPolicy(eqx.Module):
    """One period of an `NEGM` regime (leading axis: the flat product of its discrete
    states; in `Solution.policies`, a period axis before it).

    The keeper's arrays lie on the state grid (liquid wealth × durable stock); the
    adjuster's on the grid of total resources, of which its solution is a function
    alone. Values come with their partial derivatives (the envelope theorem), which
    `hermite_2d` and `hermite_1d` interpolate through.

    `keep_consumption` is the keeper's *desired* consumption: where the borrowing limit
    binds (consumption `m − a̲`, saving the limit `a̲`), the unconstrained Euler
    solution continued below the endogenous threshold, which exceeds `m − a̲`. It is
    read as `min(m − a̲, ·)` (`keep_consumption_at`), so that the constrained region
    stays exact between nodes and the kink where the limit starts to bind is kept
    rather than cut by a chord.
    """

    keep_value: Float[Array, "*z m n"]
    keep_consumption: Float[Array, "*z m n"]
    keep_marginal: Float[Array, "*z m n"]
    keep_marginal_durable: Float[Array, "*z m n"]
    adjust_value: Float[Array, "*z x"]
    adjust_consumption: Float[Array, "*z x"]
    adjust_durable: Float[Array, "*z x"]
    adjust_marginal: Float[Array, "*z x"]


def keep_value_at(
    policy: NEGMPolicy, liquid: Array, durable: Array, limit, m, n, marginal: Callable
) -> Array:
    """The keeper's value at `(m, n)` (one discrete state's `policy`, borrowing limit
    `limit`): along liquid wealth, on the two durable nodes around `n`, by integrating
    marginal utility at the interpolated consumption (`integrated`); between them by
    cubic Hermite through the marginal value of the durable."""
    i, _, _ = locate(liquid, m)
    j, ty, hy = locate(durable, n)
    low, high = liquid[i], liquid[i + 1]
    tx = (m - low) / (high - low)

    def column(k):
        c_low, c_high = policy.keep_consumption[i, k], policy.keep_consumption[i + 1, k]

        def slope(s):
            desired = c_low + (s - low) / (high - low) * (c_high - c_low)
            return marginal(jnp.minimum(desired, s - limit), durable[k])

        value = integrated(
            low, high, policy.keep_value[i, k], policy.keep_value[i + 1, k], slope, m
        )
        d_low, d_high = policy.keep_marginal_durable[i, k], policy.keep_marginal_durable[i + 1, k]
        return value, d_low + tx * (d_high - d_low)

    # Both columns in one batched evaluation (one traced copy of the integral, not two).
    (v0, v1), (s0, s1) = jax.vmap(column)(jnp.stack([j, j + 1]))
    return hermite(v0, v1, s0, s1, hy, ty)


def keep_consumption_at(policy: NEGMPolicy, liquid: Array, durable: Array, limit, m, n) -> Array:
    """The keeper's consumption at `(m, n)`: the desired consumption read bilinearly,
    at most what is above the borrowing limit `limit`."""
    return jnp.minimum(bilinear(liquid, durable, policy.keep_consumption, m, n), m - limit)


def adjust_value_at(policy: NEGMPolicy, resources: Array, x, marginal: Callable) -> Array:
    """The adjuster's value at total resources `x`: marginal utility at the
    interpolated consumption and new stock integrated from the nodes around `x`."""
    i, _, _ = locate(resources, x)
    low, high = resources[i], resources[i + 1]

    def slope(s):
        t = (s - low) / (high - low)
        c = policy.adjust_consumption[i] + t * (
            policy.adjust_consumption[i + 1] - policy.adjust_consumption[i]
        )
        d = policy.adjust_durable[i] + t * (policy.adjust_durable[i + 1] - policy.adjust_durable[i])
        return marginal(c, d)

    return integrated(low, high, policy.adjust_value[i], policy.adjust_value[i + 1], slope, x)


def adjust_choice_at(policy: NEGMPolicy, resources: Array, x) -> tuple[Array, Array]:
    """The adjuster's consumption and new durable stock at total resources `x` (linear
    between the nodes, one interval search for both)."""
    lo, t, _ = locate(resources, x)
    return linear_at(policy.adjust_consumption, lo, t), linear_at(policy.adjust_durable, lo, t)


def read(
    policy: NEGMPolicy,
    grids: tuple[Array, Array, Array],
    limit,
    m,
    n,
    resources: Callable,
    marginal: Callable,
) -> tuple[Array, Array, Array]:
    """The value at `(m, n)` and its derivatives along liquid wealth and the durable:
    the better of keeping and adjusting (the envelope taken at the point read, not on
    the grid, so that the kink where the choice switches is not smoothed over).

    `limit` is the borrowing limit; `resources(m, n)` gives total resources and their
    derivatives `(x, x_m, x_n)`;
    `marginal(c, h)` the marginal utility of consumption at durable services `h`
    (the marginal value is `u_c` at the interpolated consumption: consumption is nearly
    linear where the marginal value is not)."""
    liquid, durable, total = grids
    keep = keep_value_at(policy, liquid, durable, limit, m, n, marginal)
    keep_m = marginal(keep_consumption_at(policy, liquid, durable, limit, m, n), n)
    keep_n = bilinear(liquid, durable, policy.keep_marginal_durable, m, n)
    x, x_m, x_n = resources(m, n)
    adjust = adjust_value_at(policy, total, x, marginal)
    c, d = adjust_choice_at(policy, total, x)
    adjust_x = marginal(c, d)
    keeps = keep >= adjust
    return (
        jnp.where(keeps, keep, adjust),
        jnp.where(keeps, keep_m, adjust_x * x_m),
        jnp.where(keeps, keep_n, adjust_x * x_n),
    )


# ---------------------------------------------------------------------- prepared reads
# Chebyshev–Lobatto points of [0, 1] (six: the ends and four inside) and the inverse of
# their Vandermonde matrix: the adjuster's marginal value on an interval of resources
# as a quintic in the position `t`, whose integral is read without evaluating marginal
# utility again.
_LOBATTO = 0.5 - 0.5 * np.cos(np.pi * np.arange(6) / 5)
_INVERSE_VANDERMONDE = np.linalg.inv(np.vander(_LOBATTO, 6, increasing=True))


class PreparedRead(eqx.Module):
    """What `read_prepared` needs of one discrete state's `NEGMPolicy` besides the
    policy itself, computed once per period (`prepare`) rather than at every point
    read: the keeper's utility, marginal utility and its slope in consumption at each
    node (at the consumption the node holds, `min(desired, m − a̲)`) and at the point
    of each interval where the borrowing limit starts to bind (`kink_at`, where the
    interval has one), and the adjuster's marginal value on each interval of resources
    as a quintic in the position (`adjust_coefficients`, increasing powers)."""

    node_consumption: Float[Array, "m n"]
    node_utility: Float[Array, "m n"]
    node_marginal: Float[Array, "m n"]
    node_curvature: Float[Array, "m n"]
    has_kink: Array
    kink_at: Float[Array, "m1 n"]
    kink_consumption: Float[Array, "m1 n"]
    kink_utility: Float[Array, "m1 n"]
    kink_marginal: Float[Array, "m1 n"]
    kink_curvature: Float[Array, "m1 n"]
    adjust_coefficients: Float[Array, "x1 6"]


def prepare(
    policy: NEGMPolicy,
    grids: tuple[Array, Array, Array],
    limit,
    utility: Callable,
    marginal: Callable,
) -> PreparedRead:
    """The tables of `PreparedRead` for one discrete state's `policy`."""
    liquid, durable, total = grids
    curvature = jax.grad(marginal, 0)

    def at(c, h):
        return utility(c, h), marginal(c, h), curvature(c, h)

    table = jax.vmap(jax.vmap(at))
    h = jnp.broadcast_to(durable[None, :], policy.keep_consumption.shape)
    budget = liquid[:, None] - limit
    node_c = jnp.minimum(policy.keep_consumption, budget)
    node_u, node_m, node_m2 = table(node_c, h)
    # The gap between desired consumption and the budget above the limit is linear
    # along each interval: where it changes sign, the limit starts (or stops) binding.
    gap = policy.keep_consumption - budget
    g0, g1 = gap[:-1], gap[1:]
    low, high = liquid[:-1, None], liquid[1:, None]
    has_kink = ((g0 < 0) & (g1 > 0)) | ((g0 > 0) & (g1 < 0))
    share = jnp.where(has_kink, g0 / jnp.where(has_kink, g0 - g1, 1.0), 1.0)
    kink_at = low + (high - low) * share
    kink_c = jnp.where(has_kink, kink_at - limit, node_c[1:])
    kink_u, kink_m, kink_m2 = table(kink_c, h[1:])

    c, d = policy.adjust_consumption, policy.adjust_durable
    t = jnp.asarray(_LOBATTO, c.dtype)
    path_c = c[:-1, None] + t * (c[1:] - c[:-1])[:, None]
    path_d = d[:-1, None] + t * (d[1:] - d[:-1])[:, None]
    slopes = jax.vmap(jax.vmap(marginal))(path_c, path_d)
    # At the highest precision: a TPU's default multiplies in one bfloat16 pass (3.2e-3
    # off float64 on examples/durables.py's values, 2026-12-07).
    coefficients = jnp.matmul(
        slopes, jnp.asarray(_INVERSE_VANDERMONDE.T, c.dtype), precision=CONTRACTION_PRECISION
    )
    del total
    return PreparedRead(
        node_c,
        node_u,
        node_m,
        node_m2,
        has_kink,
        kink_at,
        kink_c,
        kink_u,
        kink_m,
        kink_m2,
        coefficients,
    )


def _integral_from(c_at, u_at, m_at, m2_at, c, u, length):
    """`∫ u_c` from a point of the tables (consumption `c_at`, utility `u_at`, marginal
    utility `m_at`, its slope `m2_at`) to a point `length` away along which consumption
    is linear, reaching `c` with utility `u`: `length · Δu / Δc` (exact: `u_c` is the
    derivative of `u`), or where `Δc` is too small for that difference (`|Δc| ≤
    eps^(1/3)·c`), the Taylor expansion `length · (u_c + u_cc·Δc/2)`."""
    dc = c - c_at
    tolerance = jnp.finfo(jnp.result_type(dc)).eps ** (1.0 / 3.0)
    small = jnp.abs(dc) <= tolerance * jnp.abs(c_at)
    quotient = (u - u_at) / jnp.where(small, 1.0, dc)
    return length * jnp.where(small, m_at + 0.5 * m2_at * dc, quotient)


def keep_value_prepared(
    policy: NEGMPolicy,
    prepared: PreparedRead,
    liquid: Array,
    durable: Array,
    limit,
    m,
    n,
    utility: Callable,
) -> Array:
    """`keep_value_at` without quadrature: along liquid wealth consumption is linear
    between nodes (piecewise, with the kink where the limit starts to bind), so the
    integral of marginal utility is a difference of utilities divided by the change in
    consumption, exact, and costs one utility evaluation per durable column (the
    utilities at the nodes and kinks are tabulated, `prepare`). Between the durable
    columns, cubic Hermite as in `keep_value_at`."""
    i, _, _ = locate(liquid, m)
    j, ty, hy = locate(durable, n)
    low, high = liquid[i], liquid[i + 1]
    tx = (m - low) / (high - low)

    def column(k):
        d_low, d_high = policy.keep_consumption[i, k], policy.keep_consumption[i + 1, k]
        c = jnp.minimum(d_low + tx * (d_high - d_low), m - limit)
        u = utility(c, durable[k])
        node = (
            prepared.node_consumption,
            prepared.node_utility,
            prepared.node_marginal,
            prepared.node_curvature,
        )
        at_low = (node[0][i, k], node[1][i, k], node[2][i, k], node[3][i, k])
        at_high = (node[0][i + 1, k], node[1][i + 1, k], node[2][i + 1, k], node[3][i + 1, k])
        kink = (
            prepared.kink_consumption[i, k],
            prepared.kink_utility[i, k],
            prepared.kink_marginal[i, k],
            prepared.kink_curvature[i, k],
        )
        s, has = prepared.kink_at[i, k], prepared.has_kink[i, k]
        # ∫ from `low` to `m`, and from `m` to `high`, each split at the kink when it
        # lies between.
        passed = has & (m > s)
        forward = jnp.where(
            passed,
            _integral_from(*at_low, kink[0], kink[1], s - low) + _integral_from(*kink, c, u, m - s),
            _integral_from(*at_low, c, u, m - low),
        )
        before = has & (m < s)
        backward = jnp.where(
            before,
            -_integral_from(*kink, c, u, m - s)
            - _integral_from(*at_high, kink[0], kink[1], s - high),
            -_integral_from(*at_high, c, u, m - high),
        )
        v_low, v_high = policy.keep_value[i, k], policy.keep_value[i + 1, k]
        weight = jnp.clip(tx, 0.0, 1.0)
        value = (1.0 - weight) * (v_low + forward) + weight * (v_high - backward)
        s_low, s_high = policy.keep_marginal_durable[i, k], policy.keep_marginal_durable[i + 1, k]
        return value, s_low + tx * (s_high - s_low)

    (v0, v1), (s0, s1) = jax.vmap(column)(jnp.stack([j, j + 1]))
    return hermite(v0, v1, s0, s1, hy, ty)


def adjust_value_prepared(
    policy: NEGMPolicy, prepared: PreparedRead, resources: Array, x, marginal_x
) -> Array:
    """`adjust_value_at` without quadrature: the marginal value on the interval as the
    quintic of `prepare` (through six points of the linear path of consumption and new
    stock), integrated in closed form from each end and blended by the position.
    Beyond the grid, from the nearer end by the trapezoid rule between its marginal
    value and `marginal_x`, that at `x`."""
    i, t, h = locate(resources, x)
    a = prepared.adjust_coefficients[i]
    inside = jnp.clip(t, 0.0, 1.0)
    powers = jnp.stack([inside ** (p + 1) / (p + 1) for p in range(6)])
    whole = jnp.sum(a / jnp.arange(1, 7, dtype=a.dtype))
    part = jnp.sum(a * powers)
    v_low, v_high = policy.adjust_value[i], policy.adjust_value[i + 1]
    forward = v_low + h * part
    backward = v_high - h * (whole - part)
    value = (1.0 - inside) * forward + inside * backward
    m_low, m_high = a[0], jnp.sum(a)
    below = v_low + h * t * 0.5 * (m_low + marginal_x)
    above = v_high + h * (t - 1.0) * 0.5 * (m_high + marginal_x)
    return jnp.where(t < 0.0, below, jnp.where(t > 1.0, above, value))


def read_prepared(
    policy: NEGMPolicy,
    prepared: PreparedRead,
    grids: tuple[Array, Array, Array],
    limit,
    m,
    n,
    resources: Callable,
    utility: Callable,
    marginal: Callable,
) -> tuple[Array, Array, Array]:
    """`read` from the tables of `prepare`: the same envelope at the point, the values
    integrated in closed form (`keep_value_prepared`, `adjust_value_prepared`)."""
    liquid, durable, total = grids
    keep = keep_value_prepared(policy, prepared, liquid, durable, limit, m, n, utility)
    keep_m = marginal(keep_consumption_at(policy, liquid, durable, limit, m, n), n)
    keep_n = bilinear(liquid, durable, policy.keep_marginal_durable, m, n)
    x, x_m, x_n = resources(m, n)
    c, d = adjust_choice_at(policy, total, x)
    adjust_x = marginal(c, d)
    adjust = adjust_value_prepared(policy, prepared, total, x, adjust_x)
    keeps = keep >= adjust
    return (
        jnp.where(keeps, keep, adjust),
        jnp.where(keeps, keep_m, adjust_x * x_m),
        jnp.where(keeps, keep_n, adjust_x * x_n),
    )
