"""A hand-fused JAX backward induction of the retirement model, with no library machinery.

This is the floor the library is measured against: one `lax.scan` over periods, a
vectorised max over consumption with closed-form linear interpolation on the wealth
grid, and `scale * logsumexp` over the labour choice (taste shocks). It solves exactly
the model of `benchmarks/_models.py::_retirement` with `RETIREMENT_PARAMS`.

`tuned=True` reads both interpolation nodes with one gather of a pair (a vmapped
`dynamic_slice`), the trick the library's kernel uses: a stronger floor, reported next
to the plain one so the library is compared with hand-written code at its best too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def make_solve(
    n_periods: int, n_wealth: int = 1000, n_consumption: int = 5000, *, tuned: bool = False
):
    wealth = jnp.linspace(1.0, 400.0, n_wealth)
    consumption = jnp.linspace(1.0, 400.0, n_consumption)
    step = (wealth[-1] - wealth[0]) / (n_wealth - 1)

    def interpolate(values, x):
        coordinate = (x - wealth[0]) / step
        lo = jnp.clip(jnp.floor(coordinate).astype(jnp.int32), 0, n_wealth - 2)
        weight = (x - wealth[lo]) / step
        if tuned:
            pair = jnp.vectorize(
                lambda i: jax.lax.dynamic_slice(values, (i,), (2,)), signature="()->(k)"
            )(lo)
            return (1 - weight) * pair[..., 0] + weight * pair[..., 1]
        return (1 - weight) * values[lo] + weight * values[lo + 1]

    def solve(params):
        beta = params["discount_factor"]
        rate = params["interest_rate"]
        delta = params["disutility_of_work"]
        wage = params["wage"]
        scale = params["working"]["taste_shock_scale"]
        feasible = consumption[None, :] <= wealth[:, None]
        savings = (1 + rate) * (wealth[:, None] - consumption[None, :])
        log_c = jnp.log(consumption)[None, :]

        def best(reward_plus_continuation):
            return jnp.max(jnp.where(feasible, reward_plus_continuation, -jnp.inf), axis=1)

        def step_fn(next_values, _):
            v_work_next, v_retired_next = next_values
            retired = best(log_c + beta * interpolate(v_retired_next, savings))
            work = best(log_c - delta + beta * interpolate(v_work_next, savings + wage))
            retire = best(log_c + beta * interpolate(v_retired_next, savings))
            working = scale * jnp.logaddexp(work / scale, retire / scale)
            return (working, retired), (working, retired)

        zeros = jnp.zeros(n_wealth)
        _, (working, retired) = jax.lax.scan(step_fn, (zeros, zeros), None, length=n_periods)
        return working[::-1], retired[::-1]

    return solve
