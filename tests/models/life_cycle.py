"""A small life-cycle model for the forward distribution: work or retire (with taste
shocks), Rouwenhorst log income, mortality, CRRA utility, DC-EGM on both living regimes."""

from enum import IntEnum

import jax.numpy as jnp

import lcm_eqx as lcm


class RegimeId(IntEnum):
    working = 0
    retired = 1
    dead = 2


class Labor(IntEnum):
    work = 0
    retire = 1


def utility(consumption, labor, disutility_of_work, risk_aversion):
    crra = consumption ** (1 - risk_aversion) / (1 - risk_aversion)
    return crra - disutility_of_work * (labor == Labor.work)


def utility_retired(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def labor_income(labor, income, wage):
    return jnp.where(labor == Labor.work, wage * jnp.exp(income), 0.0)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_wealth_retired(wealth, consumption, interest_rate, pension):
    return (1 + interest_rate) * (wealth - consumption) + pension


def next_regime(labor, period, survival_probability):
    alive = survival_probability[period]
    works = labor == Labor.work
    return jnp.array([alive * works, alive * (1 - works), 1 - alive])


def next_regime_retired(period, survival_probability):
    alive = survival_probability[period]
    return jnp.array([0.0, alive, 1 - alive])


def borrowing(consumption, wealth):
    return consumption <= wealth


PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "risk_aversion": 2.0,
    "disutility_of_work": 0.05,
    # Not 2.0: then a worker who consumes everything at median income lands exactly on a
    # wealth node, where the distribution has a kink in the wage (see docs/estimation.md).
    "wage": 2.1,
    "pension": 0.8,
    "taste_shock_scale": 0.02,
    "survival_probability": jnp.array([0.99, 0.98, 0.96, 0.93, 0.9]),
    "working": {"next_income": {"rho": 0.9, "sigma": 0.2}},
    "retired": {"next_income": {"rho": 0.9, "sigma": 0.2}},
}


def build(n_periods=6, n_wealth=60, n_savings=80, top=30.0, solver="dcegm"):
    wealth = lcm.LinSpacedGrid(0.5, top, n_wealth)
    consumption = lcm.LinSpacedGrid(0.05, top, 200)
    income = lcm.RouwenhorstGrid(n_points=3)
    if solver == "dcegm":
        savings = lcm.IrregSpacedGrid(
            points=[top * (i / (n_savings - 1)) ** 2 for i in range(n_savings)]
        )
        chosen = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
    else:
        chosen = lcm.GridSearch()
    working = lcm.Regime(
        states={"wealth": wealth, "income": income},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth},
        transition=lcm.MarkovTransition(next_regime),
        constraints={"borrowing": borrowing},
        taste_shocks=lcm.ExtremeValueShocks(),
        solver=chosen,
    )
    retired = lcm.Regime(
        states={"wealth": wealth, "income": income},
        actions={"consumption": consumption},
        functions={"utility": utility_retired},
        state_transitions={"wealth": next_wealth_retired},
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": borrowing},
        solver=chosen,
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        regimes={"working": working, "retired": retired, "dead": dead},
        n_periods=n_periods,
        regime_ids=RegimeId,
    )
