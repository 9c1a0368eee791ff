"""The stationary equilibrium of a deterministic life-cycle OLG economy, in plain numpy
(float64), independently of `lcm_eqx`: the household problem in closed form, the
equilibrium by bisection on the interest rate.

The economy of `examples/olg.py`: periods `t = 0 … T−1` of life, survival `s_t` from
`t` to `t + 1`, perfect annuities (the return on savings `R / s_t`, `R = 1 + r`), CRRA
utility `c^(1−γ)/(1−γ)` with discount factor `β`, income `y_t` (the net wage
`(1 − τ) w` before retirement, the pension `ρ (1 − τ) w` after), cash on hand
`m_0 = y_0` at birth and `m_{t+1} = (R / s_t)(m_t − c_t) + y_{t+1}`, no borrowing
(`c_t ≤ m_t`). Cohorts grow at rate `n`; firms produce `K^α L^(1−α)` with depreciation
`δ`; the pension budget balances: `τ w L = ρ (1 − τ) w · retirees`.

Household: with annuities the Euler equation is `c_{t+1} = (β R)^(1/γ) c_t` (survival
cancels), and the budget in present value (discounted by `Π s / R`) pins `c_0`. The
borrowing constraint must not bind, which `household` checks (it raises otherwise): the
library's solution is then affine in cash on hand, and its exact distribution carries
every mean exactly.

Aggregates per head of the population (cohort `t` has weight `(1 + n)^−t Π_{i<t} s_i`,
normalised to 1): labour `L` (the working-age share), capital `K = Σ μ_t (m_t − c_t) /
(1 + n)` (this date's savings, next date's capital, over a population `1 + n` times
larger). Given `r`, the wage and the contribution rate follow from the firm and the
pension budget (`τ = ρ R_s / (L + ρ R_s)` with `R_s` the retirees' share: demographic
only); the equilibrium is the `r` at which `K / L` equals the capital–labour ratio
`((r + δ) / α)^(1/(α−1))` that the firm demands, found by bisection.
"""

from __future__ import annotations

import numpy as np


def household(*, interest_rate, income, survival, beta, gamma):
    """Cash on hand `m_t` and consumption `c_t` by period of life."""
    income = np.asarray(income, dtype=float)
    survival = np.asarray(survival, dtype=float)
    n_periods = income.shape[0]
    gross = 1.0 + interest_rate
    discount = np.concatenate([[1.0], np.cumprod(survival[:-1] / gross)])
    growth = (beta * gross) ** (1.0 / gamma)
    first = np.sum(discount * income) / np.sum(discount * growth ** np.arange(n_periods))
    consumption = first * growth ** np.arange(n_periods)
    cash = np.empty(n_periods)
    cash[0] = income[0]
    for t in range(n_periods - 1):
        cash[t + 1] = gross / survival[t] * (cash[t] - consumption[t]) + income[t + 1]
    if np.any(cash[:-1] - consumption[:-1] < 0):
        raise ValueError("the borrowing constraint binds: the closed form does not apply")
    return cash, consumption


def demographics(*, survival, population_growth, working_periods):
    """Population shares by period of life, the labour (working-age) share and the
    retirees' share."""
    survival = np.asarray(survival, dtype=float)
    n_periods = survival.shape[0]
    alive = np.concatenate([[1.0], np.cumprod(survival[:-1])])
    weights = (1.0 + population_growth) ** -np.arange(n_periods) * alive
    shares = weights / weights.sum()
    labor = shares[:working_periods].sum()
    return shares, labor, 1.0 - labor


def excess(interest_rate, *, survival, working_periods, beta, gamma, alpha, delta,
           population_growth, replacement_rate):  # fmt: skip
    """Supply minus demand of capital per worker at `interest_rate`, and the economy."""
    shares, labor, retirees = demographics(
        survival=survival, population_growth=population_growth, working_periods=working_periods
    )
    ratio = ((interest_rate + delta) / alpha) ** (1.0 / (alpha - 1.0))
    wage = (1.0 - alpha) * ratio**alpha
    tau = replacement_rate * retirees / (labor + replacement_rate * retirees)
    net = (1.0 - tau) * wage
    periods = np.arange(np.asarray(survival).shape[0])
    income = np.where(periods < working_periods, net, replacement_rate * net)
    cash, consumption = household(
        interest_rate=interest_rate, income=income, survival=survival, beta=beta, gamma=gamma
    )
    capital = np.sum(shares * (cash - consumption)) / (1.0 + population_growth)
    output = capital**alpha * labor ** (1.0 - alpha)
    economy = {
        "interest_rate": interest_rate,
        "wage": wage,
        "contribution_rate": tau,
        "capital": capital,
        "labor": labor,
        "retirees": retirees,
        "output": output,
        "capital_output": capital / output,
        "cash": cash,
        "consumption": consumption,
    }
    return capital / labor - ratio, economy


def equilibrium(*, lower, upper, tolerance=1e-14, **economy):
    """The stationary equilibrium by bisection on the interest rate in `[lower, upper]`
    (which must bracket it)."""
    low_value, _ = excess(lower, **economy)
    high_value, _ = excess(upper, **economy)
    if low_value * high_value > 0:
        raise ValueError("the interval does not bracket an equilibrium")
    while upper - lower > tolerance:
        middle = 0.5 * (lower + upper)
        value, _ = excess(middle, **economy)
        if (value > 0) == (low_value > 0):
            lower, low_value = middle, value
        else:
            upper = middle
    return excess(0.5 * (lower + upper), **economy)[1]
