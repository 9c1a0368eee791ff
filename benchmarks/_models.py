"""Models shared by the benchmarks: builders taking `n_periods`, with their parameters."""

from __future__ import annotations

from enum import IntEnum

import jax.numpy as jnp

import lcm_eqx as lcm


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


def _retirement(
    n_periods: int, n_wealth: int = 1000, n_consumption: int = 5000, taste_shocks: bool = True
) -> lcm.Model:
    wealth = lcm.LinSpacedGrid(1.0, 400.0, n_wealth)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, n_consumption)
    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={
            "utility": lambda consumption, labor, disutility_of_work: (
                jnp.log(consumption) - disutility_of_work * (labor == Labor.work)
            ),
            "labor_income": lambda labor, wage: jnp.where(labor == Labor.work, wage, 0.0),
        },
        state_transitions={
            "wealth": lambda wealth, consumption, labor_income, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + labor_income
            )
        },
        transition=lambda labor: jnp.where(labor == Labor.work, RegimeId.working, RegimeId.retired),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption, interest_rate: (
                (1 + interest_rate) * (wealth - consumption)
            )
        },
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model({"working": working, "retired": retired}, n_periods, regime_ids=RegimeId)


RETIREMENT_PARAMS = {
    "discount_factor": 0.98,
    "interest_rate": 0.0,
    "disutility_of_work": 1.0,
    "wage": 20.0,
    "working": {"taste_shock_scale": 0.2},
}


def _precautionary(n_periods: int, n_wealth: int = 200, n_consumption: int = 400) -> lcm.Model:
    wealth = lcm.LinSpacedGrid(0.1, 60.0, n_wealth)
    consumption = lcm.LinSpacedGrid(0.1, 60.0, n_consumption)
    alive = lcm.Regime(
        states={"wealth": wealth, "income": lcm.RouwenhorstGrid(7, rho=0.95, sigma=0.1)},
        actions={"consumption": consumption},
        functions={
            "utility": lambda consumption, crra: consumption ** (1 - crra) / (1 - crra),
        },
        state_transitions={
            "wealth": lambda wealth, consumption, income, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + jnp.exp(income)
            )
        },
        transition=lcm.MarkovTransition(
            lambda period, survival: jnp.array([survival[period], 1 - survival[period]])
        ),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model({"alive": alive, "dead": dead}, n_periods)


PRECAUTIONARY_PARAMS = {
    "discount_factor": 0.96,
    "interest_rate": 0.02,
    "crra": 2.0,
    "survival": jnp.linspace(0.995, 0.9, 96),  # long enough for every horizon measured
}

MODELS = {
    "retirement (wealth 1000 x consumption 5000, taste shocks)": (
        _retirement,
        RETIREMENT_PARAMS,
    ),
    "precautionary savings (wealth 200 x income 7 x consumption 400, mortality)": (
        _precautionary,
        PRECAUTIONARY_PARAMS,
    ),
}


class Health(IntEnum):
    bad = 0
    good = 1


def _large(
    n_periods: int, n_wealth: int = 1000, n_consumption: int = 1000, n_types: int = 4
) -> lcm.Model:
    """Four states (wealth, income process, health, a permanent type) and two actions."""
    wealth = lcm.LinSpacedGrid(0.5, 100.0, n_wealth)
    consumption = lcm.LinSpacedGrid(0.5, 100.0, n_consumption)
    alive = lcm.Regime(
        states={
            "wealth": wealth,
            "income": lcm.RouwenhorstGrid(7, rho=0.9, sigma=0.15),
            "health": lcm.DiscreteGrid(Health),
            "skill": lcm.DiscreteGrid([f"type_{i}" for i in range(n_types)]),
        },
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={
            "utility": lambda consumption, labor, health, disutility_of_work: (
                jnp.log(consumption) - disutility_of_work * (labor == Labor.work) * (2.0 - health)
            ),
            "earnings": lambda labor, income, skill, skill_premium: jnp.where(
                labor == Labor.work, jnp.exp(income) * (1.0 + skill_premium * skill), 0.0
            ),
        },
        state_transitions={
            "wealth": lambda wealth, consumption, earnings, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + earnings
            ),
            "health": lcm.MarkovTransition(
                lambda health, health_transition: health_transition[health]
            ),
            "skill": lambda skill: skill,
        },
        transition=lcm.MarkovTransition(
            lambda health, survival: jnp.array([survival[health], 1 - survival[health]])
        ),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model({"alive": alive, "dead": dead}, n_periods)


LARGE_PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "disutility_of_work": 0.5,
    "skill_premium": 0.2,
    "health_transition": jnp.array([[0.7, 0.3], [0.1, 0.9]]),
    "survival": jnp.array([0.9, 0.98]),
}
