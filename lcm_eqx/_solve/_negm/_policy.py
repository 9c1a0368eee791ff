"""What NEGM keeps of a period: the keeper's and the adjuster's solutions on their
grids, and how they are read at any liquid wealth and durable stock."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

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
