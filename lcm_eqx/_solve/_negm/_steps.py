"""NEGM's two problems of a period at one discrete state (`NEGM._solve_rest` sets them up):
the keeper's, at each durable node, and the adjuster's, at each level of total
resources, with the adjuster's consumption polished on its own Euler equation. The
docstring of `_solver.py` says what each computes."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._axes import map_axis
from .._continuation import NEG_INF
from .._reading import invert_marginal
from ._interpolate import hermite_1d, linear_1d
from ._policy import NEGMPolicy, keep_consumption_at, keep_value_at

# The golden ratio's conjugate: each golden-section step keeps this share of the bracket.
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def keeper(savings, liquid, w, w_a, w_n, beta, n, vu, vu_c, vu_h, batch_size, *, newton_steps: int):
    """The keeper at durable node `n`: the Euler equation inverted at the savings
    points, read onto the liquid grid by an upper envelope over every segment of the
    endogenous points and the credit-constrained choice (the liquid points in chunks
    of `batch_size`: the splay knob of the liquid state). Returns `(v, c, v_m, v_n)`
    on the liquid grid, `c` the desired consumption (`NEGMPolicy`): where the limit
    binds, the first segment continued below its threshold."""
    q = beta * w_a
    c_end = invert_marginal(lambda c: vu_c(c, n), q, newton_steps)
    m_end = savings + c_end
    m0, m1 = m_end[:-1], m_end[1:]
    c0, c1 = c_end[:-1], c_end[1:]
    last = jnp.arange(m0.shape[0]) == m0.shape[0] - 1
    low, high = jnp.minimum(m0, m1), jnp.maximum(m0, m1)
    width = m1 - m0
    first_slope = (c1[0] - c0[0]) / jnp.where(width[0] == 0, 1.0, width[0])

    def at_liquid(x):
        inside = ((x >= low) & (x <= high)) | (last & (x > high))
        t = (x - m0) / jnp.where(width == 0, 1.0, width)
        c = c0 + t * (c1 - c0)
        a = x - c
        valid = inside & (c > 0) & (a >= savings[0])
        safe_c = jnp.where(valid, c, 1.0)
        safe_a = jnp.where(valid, a, savings[0])
        segment_values = vu(safe_c, n) + beta * hermite_1d(savings, w, w_a, safe_a)
        segment_values = jnp.where(valid, segment_values, NEG_INF)
        bound_c = x - savings[0]
        feasible = bound_c > 0
        bound_value = jnp.where(
            feasible, vu(jnp.where(feasible, bound_c, 1.0), n) + beta * w[0], NEG_INF
        )
        candidates = jnp.concatenate([bound_value[None], segment_values])
        all_c = jnp.concatenate([bound_c[None], safe_c])
        best = jnp.argmax(jax.lax.stop_gradient(candidates))
        # Where the limit binds, never below what it allows (so the node reads exact).
        desired = jnp.maximum(c0[0] + (x - m0[0]) * first_slope, bound_c)
        return candidates[best], all_c[best], jnp.where(best == 0, desired, all_c[best])

    value, consumption, desired = map_axis(at_liquid, liquid, batch_size)
    saved = liquid - consumption
    marginal = vu_c(consumption, n)
    marginal_durable = vu_h(consumption, n) + beta * linear_1d(savings, w_n, saved)
    return value, desired, marginal, marginal_durable


def adjuster(
    liquid,
    durable,
    keep,
    x,
    utility,
    u_c,
    u_h,
    polish,
    *,
    limit_of: Callable[[], Array],
    adjuster_points: int,
    golden_steps: int,
    bisection_steps: int,
):
    """The adjuster at total resources `x`: the best new stock `d` of
    `v_keep(x − d, d)`, by candidates, golden section and bisection on the sign of
    its derivative; its consumption read off the keeper at `(x − d, d)` and, before
    the last period, polished on its own Euler equation (`polish`, `polished`).
    `limit_of()` is the borrowing limit (called here, where the solver's method was:
    the same program). The search's sizes are the solver's (`NEGM.adjuster_points`,
    `golden_steps`, `bisection_steps`). Returns `(v, c, d, v_x)`."""
    kv, kc, km, kn = keep
    policy = NEGMPolicy(kv, kc, km, kn, kv[:, 0], kv[:, 0], kv[:, 0], kv[:, 0])
    limit = limit_of()

    low = durable[0]
    high = jnp.clip(x - liquid[0], low, durable[-1])
    frozen = jax.lax.stop_gradient((low, high))

    if polish is None:
        # The model's last period: a keeper consumes all it has above the limit, so
        # keeping `x − d` with stock `d` is worth `u(x − d − a̲, d)` exactly. Evaluated
        # as such rather than read off the keeper's grid: exact (the read integrates
        # marginal utility by quadrature) and a far smaller program (this search is
        # the last period's own copy of the adjuster).
        def objective(d):
            c = x - d - limit
            positive = c > 0
            return jnp.where(positive, utility(jnp.where(positive, c, 1.0), d), NEG_INF)

        def frozen_objective(d):
            return jax.lax.stop_gradient(objective(d))

        def value_and_slope(d) -> tuple[Array, Array]:
            c = jnp.maximum(x - d - limit, jnp.finfo(x.dtype).tiny)
            return frozen_objective(d), jax.lax.stop_gradient(u_h(c, d) - u_c(c, d))

    else:

        def objective(d):
            return keep_value_at(policy, liquid, durable, limit, x - d, d, u_c)

        fixed_policy = jax.lax.stop_gradient(policy)

        def frozen_marginal(c, h):
            return jax.lax.stop_gradient(u_c(c, h))

        def frozen_objective(d):
            return keep_value_at(fixed_policy, liquid, durable, limit, x - d, d, frozen_marginal)

        def value_and_slope(d) -> tuple[Array, Array]:
            return jax.jvp(frozen_objective, (d,), (jnp.ones_like(d),))

    steps = jnp.linspace(0.0, 1.0, adjuster_points)
    candidates = frozen[0] + (frozen[1] - frozen[0]) * steps
    values = jax.vmap(frozen_objective)(jax.lax.stop_gradient(candidates))
    k = jnp.argmax(values)
    a = candidates[jnp.maximum(k - 1, 0)]
    b = candidates[jnp.minimum(k + 1, adjuster_points - 1)]

    def golden(_, bracket):
        a, b = bracket
        left = b - GOLDEN * (b - a)
        right = a + GOLDEN * (b - a)
        # Both points in one batched evaluation: one copy of the read in the loop's
        # body (XLA:CPU compiles each copy's kernels apart), the same arithmetic.
        at_left, at_right = jax.vmap(frozen_objective)(jnp.stack([left, right]))
        better_left = at_left >= at_right
        return jnp.where(better_left, a, left), jnp.where(better_left, right, b)

    a, b = jax.lax.fori_loop(0, golden_steps, golden, (a, b))

    def bisection(_, state):
        a, b, _, _ = state
        middle = 0.5 * (a + b)
        value, slope = value_and_slope(middle)
        rising = slope > 0
        return jnp.where(rising, middle, a), jnp.where(rising, b, middle), middle, value

    # One step more than the bisection's: its midpoint is the bracket's last, and its
    # value (the primal of the slope's JVP) is the one compared with the best
    # candidate's below; a separate evaluation would be one more copy of the read in
    # the program (XLA:CPU compiles each copy's kernels apart).
    _, _, middle, at_middle = jax.lax.fori_loop(
        0, bisection_steps + 1, bisection, (a, b, a, values[k])
    )
    d = jnp.where(at_middle >= values[k], middle, candidates[k])
    d = jax.lax.stop_gradient(d)
    if polish is None:  # the last period: what a keeper of `x − d` consumes, exactly
        consumption, value = x - d - limit, objective(d)
    else:
        consumption = keep_consumption_at(policy, liquid, durable, limit, x - d, d)
        consumption, value = polish(x, d, consumption, x - d - limit)
    return value, consumption, d, u_c(consumption, d)


def polished(x, d, read_c, budget, *, utility, u_c, continuation, newton_steps: int):
    """The adjuster's consumption at resources `x` and new stock `d` from its own
    Euler equation `u_c(c, d) = β·E[R·V'_m]`, next period's marginal value read at
    the point (not the keeper's consumption read between its nodes): Newton steps
    in `log c` from the keeper's read `read_c`, kept within 10 % of it and below
    `budget` (what is above the borrowing limit). The read is kept where the limit
    binds there, where Newton lands more than 5 % from it or does not reduce the
    residual. Returns the consumption and the adjuster's value
    `u(c, d) + β·E[V']` at it.

    The steps run without derivatives; one more step taken with them gives the
    consumption's derivative by the implicit function theorem (`−g_θ / g_c`)."""

    def residual(log_c):
        c = jnp.exp(log_c)
        _, q = continuation(c, d, x)
        return jnp.log(u_c(c, d)) - jnp.log(jnp.maximum(q, jnp.finfo(q.dtype).tiny))

    def frozen_newton(log_c):
        g, slope = jax.jvp(residual, (log_c,), (jnp.ones_like(log_c),))
        g, slope = jax.lax.stop_gradient((g, slope))
        # u_c falls and E[V'_m] rises with c: the slope is negative where the
        # equation is regular (elsewhere the step is 0 and the read is kept).
        safe = jnp.where(slope < 0, slope, -1.0)
        return g, jnp.where(slope < 0, g / safe, 0.0)

    # At least a tiny positive budget, so that every log below is finite (where the
    # budget is 0 the read binds and is kept, but its derivatives are still taken).
    room = jax.lax.stop_gradient(jnp.maximum(budget, 1e-12))
    start_c = jax.lax.stop_gradient(jnp.clip(read_c, 1e-12, room))
    low = jnp.log(0.9 * start_c)
    high = jnp.log(jnp.minimum(1.1 * start_c, room))
    start = jnp.log(start_c)

    def step(i, state):
        log_c, _, g_start, _ = state
        g, move = frozen_newton(log_c)
        g_start = jnp.where(i == 0, g, g_start)
        return jnp.clip(log_c - move, low, high), log_c, g_start, g

    # One step more than Newton's: the residual at the start is the first step's,
    # the one at the end (after `newton_steps` steps) the extra step's, whose own
    # move is dropped. One copy of next period's read in the program, not two.
    _, log_c, g_start, g_end = jax.lax.fori_loop(
        0, newton_steps + 1, step, (start, start, start, start)
    )
    binds = jax.lax.stop_gradient(read_c >= budget * (1.0 - 1e-9))
    ok = (
        ~binds
        & (jnp.abs(jnp.exp(log_c - start) - 1.0) <= 0.05)
        & jnp.isfinite(g_end)
        & (jnp.abs(g_end) <= jnp.abs(g_start))
    )
    # The implicit-function step, taken at a finite point in every cell (the
    # derivatives of the branch not taken must be finite too).
    at = jnp.where(ok, log_c, start)
    g, slope = jax.jvp(residual, (at,), (jnp.ones_like(at),))
    slope = jax.lax.stop_gradient(jnp.where(slope < 0, slope, -1.0))
    polished = jnp.exp(at - g / slope)
    consumption = jnp.where(ok, polished, read_c)
    future, _ = continuation(consumption, d, x)
    return consumption, utility(consumption, d) + future
