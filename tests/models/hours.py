"""Labour hours, a continuous choice that is not consumption (for `GridSearch(refine=...)`).

A worker of productivity level `productivity` (three levels, a Markov chain) and
non-labour wealth `wealth` (a continuous state that drifts towards its mean, off the
grid's nodes) chooses hours `h`; consumption is `c = wage·h + 0.3·wealth`, utility
`c^(1−γ)/(1−γ) − ψ·h^(1+1/η)/(1+1/η)`. More hours raise the chance of moving up a level
(learning by doing), so the choice is dynamic, yet `q` is smooth in `h` (hours move a
discrete state only). No closed form: `tests/test_refine.py` checks it against a numpy
and scipy oracle of the same Bellman equation.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import lcm_eqx as lcm

LEVELS = np.array([0.6, 1.0, 1.6])
WEALTH = (0.5, 5.0, 6)
HOURS = (0.05, 1.2)
N_PERIODS = 4

PARAMS = {
    "discount_factor": 0.95,
    "risk_aversion": 2.0,
    "disutility": 1.2,
    "frisch": 0.6,
}


def consumption(hours, wage):
    return 0.3 + wage * hours


def wage(productivity, wealth, period):
    return jnp.asarray(LEVELS)[productivity] * (1.0 + 0.05 * period) + 0.0 * wealth


def utility(consumption, hours, risk_aversion, disutility, frisch):
    crra = consumption ** (1 - risk_aversion) / (1 - risk_aversion)
    return crra - disutility * hours ** (1 + 1 / frisch) / (1 + 1 / frisch)


def up_probability(hours):
    return 0.1 + 0.5 * hours / (1.0 + hours)


def next_productivity(productivity, hours):
    up = up_probability(hours)
    down = 0.15
    n = len(LEVELS)
    stay_top = jnp.where(productivity == n - 1, up, 0.0)
    stay_bottom = jnp.where(productivity == 0, down, 0.0)
    codes = jnp.arange(n)
    p = (
        jnp.where(codes == productivity + 1, up, 0.0)
        + jnp.where(codes == productivity - 1, down, 0.0)
        + jnp.where(codes == productivity, 1.0 - up - down + stay_top + stay_bottom, 0.0)
    )
    return p


def next_wealth(wealth):
    return 0.8 * wealth + 0.4


def build(
    n_hours=40,
    solver=None,
    n_periods=N_PERIODS,
    hours_batch_size=0,
    wealth_batch_size=0,
    n_wealth=WEALTH[2],
    productivity_distributed=False,
):
    working = lcm.Regime(
        states={
            "productivity": lcm.DiscreteGrid(
                ["low", "middle", "high"], distributed=productivity_distributed
            ),
            "wealth": lcm.LinSpacedGrid(*WEALTH[:2], n_wealth, batch_size=wealth_batch_size),
        },
        actions={"hours": lcm.LinSpacedGrid(*HOURS, n_hours, batch_size=hours_batch_size)},
        functions={"utility": utility, "consumption": consumption, "wage": wage},
        state_transitions={
            "productivity": lcm.MarkovTransition(next_productivity),
            "wealth": next_wealth,
        },
        transition=lambda: 0,
        solver=solver,
    )
    return lcm.Model(regimes={"working": working}, n_periods=n_periods)


# ----------------------------------------------------------------------------- oracle
def _transition_row(level: int, hours: float) -> np.ndarray:
    """`next_productivity` in numpy, written apart."""
    up, down = 0.1 + 0.5 * hours / (1.0 + hours), 0.15
    row = np.zeros(len(LEVELS))
    row[min(level + 1, len(LEVELS) - 1)] += up
    row[max(level - 1, 0)] += down
    row[level] += 1.0 - up - down
    return row


def oracle(params, n_periods=N_PERIODS, n_wealth=WEALTH[2]):
    """Values and hours on the state grid, `(n_periods, 3, n_wealth)`, by backward
    induction in numpy with scipy's bounded scalar optimiser (to 1e-12 in hours), the
    continuation interpolated linearly in wealth like the engine."""
    from scipy.optimize import brentq, minimize_scalar

    gamma, psi, frisch = params["risk_aversion"], params["disutility"], params["frisch"]
    beta = params["discount_factor"]
    wealth = np.linspace(*WEALTH[:2], n_wealth)
    n = len(LEVELS)
    values = np.zeros((n_periods + 1, n, wealth.size))
    hours = np.zeros((n_periods, n, wealth.size))
    for t in reversed(range(n_periods)):
        for p in range(n):
            for j, w in enumerate(wealth):
                following = np.array(
                    [np.interp(0.8 * w + 0.4, wealth, values[t + 1, k]) for k in range(n)]
                )
                pay = LEVELS[p] * (1.0 + 0.05 * t)

                def minus_q(h, p=p, pay=pay, following=following):
                    c = 0.3 + pay * h
                    u = c ** (1 - gamma) / (1 - gamma) - psi * h ** (1 + 1 / frisch) / (
                        1 + 1 / frisch
                    )
                    probabilities = _transition_row(p, h)
                    return -(u + beta * probabilities @ following)

                def slope(h, p=p, pay=pay, following=following):
                    c = 0.3 + pay * h
                    d_up = 0.5 / (1.0 + h) ** 2
                    d_row = np.zeros(n)
                    d_row[min(p + 1, n - 1)] += d_up
                    d_row[p] -= d_up
                    return pay * c**-gamma - psi * h ** (1 / frisch) + beta * d_row @ following

                # Bounded Brent stops at sqrt(eps)·|h|; the root of the analytic slope
                # around its answer is exact to round-off.
                found = minimize_scalar(minus_q, bounds=HOURS, method="bounded")
                h = found.x
                lo, hi = max(h - 1e-5, HOURS[0]), min(h + 1e-5, HOURS[1])
                if slope(lo) > 0 > slope(hi):
                    h = brentq(slope, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps)
                hours[t, p, j] = h
                values[t, p, j] = -minus_q(h)
    return values[:n_periods], hours
