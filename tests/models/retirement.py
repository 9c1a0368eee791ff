"""The API.md retirement model (Iskhakov, Jørgensen, Rust & Schjerning 2017), for tests."""

from enum import IntEnum

import jax.numpy as jnp

import lcm_eqx as lcm


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


def utility(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)


def utility_retired(consumption):
    return jnp.log(consumption)


def labor_income(labor, wage):
    return jnp.where(labor == Labor.work, wage, 0.0)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_wealth_retired(wealth, consumption, interest_rate):
    return (1 + interest_rate) * (wealth - consumption)


def next_regime(labor):
    return jnp.where(labor == Labor.work, RegimeId.working, RegimeId.retired)


def borrowing(consumption, wealth):
    return consumption <= wealth


PARAMS = {"discount_factor": 0.98, "interest_rate": 0.0, "disutility_of_work": 1.0, "wage": 20.0}


def savings_grid(n_points=200, top=400.0, batch_size=0):
    """The issue's savings grid: `top · (i / (n − 1))³`, clustered towards 0."""
    return lcm.IrregSpacedGrid(
        points=[top * (i / (n_points - 1)) ** 3 for i in range(n_points)], batch_size=batch_size
    )


def dcegm(n_savings=200, batch_size=0):
    return lcm.DCEGM(
        state="wealth", action="consumption", savings=savings_grid(n_savings, batch_size=batch_size)
    )


def build(
    n_periods=5,
    n_wealth=100,
    n_consumption=500,
    *,
    utility_fn=utility,
    taste_shocks=False,
    wealth_batch_size=0,
    consumption_batch_size=0,
    solver=None,
    retired_solver=None,
    retired_n_wealth=None,
):
    wealth = lcm.LinSpacedGrid(1.0, 400.0, n_wealth, batch_size=wealth_batch_size)
    retired_wealth = wealth
    if retired_n_wealth is not None:
        retired_wealth = lcm.LinSpacedGrid(1.0, 400.0, retired_n_wealth)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, n_consumption, batch_size=consumption_batch_size)
    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility_fn, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth},
        transition=next_regime,
        constraints={"borrowing": borrowing},
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
    )
    retired = lcm.Regime(
        solver=retired_solver,
        states={"wealth": retired_wealth},
        actions={"consumption": consumption},
        functions={"utility": utility_retired},
        state_transitions={"wealth": next_wealth_retired},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=n_periods,
        regime_ids=RegimeId,
        solver=solver,
    )
