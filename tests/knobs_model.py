"""A stochastic model with every kind of discrete state axis, for the knob tests.

`working` has wealth (continuous), an income chain (4 states, Markov, probabilities
depending only on income: pre-contracted), a permanent skill type (4 types, identity
transition) and chooses labor and consumption; `retired` keeps wealth and skill; `dead`
is terminal. Each grid's knobs are arguments, so the same model can be solved plain,
splayed and sharded.
"""

from enum import IntEnum

import jax.numpy as jnp
import numpy as np

import lcm_eqx as lcm


class RegimeId(IntEnum):
    working = 0
    retired = 1
    dead = 2


N_PERIODS = 4

PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "wage": 5.0,
    "income_levels": np.array([0.5, 0.9, 1.2, 1.6]),
    "skill_premium": np.array([0.8, 1.0, 1.1, 1.3]),
    "income_transition": np.array(
        [
            [0.7, 0.2, 0.05, 0.05],
            [0.2, 0.6, 0.15, 0.05],
            [0.05, 0.15, 0.6, 0.2],
            [0.05, 0.05, 0.3, 0.6],
        ]
    ),
    "survival_probability": np.array([0.97, 0.94, 0.9, 0.85]),
    "disutility_of_work": 0.4,
    "pension": 2.0,
}


def params(n_income=4, n_skill=4):
    """The parameters, for `n_income` income states and `n_skill` types."""
    values = dict(PARAMS)
    if n_income != 4:
        values["income_levels"] = np.linspace(0.5, 1.6, n_income)
        transition = 0.6 * np.eye(n_income) + 0.4 / n_income
        values["income_transition"] = transition / transition.sum(axis=1, keepdims=True)
    if n_skill != 4:
        values["skill_premium"] = np.linspace(0.8, 1.3, n_skill)
    return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}


def utility_working(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == 0)


def labor_income(labor, income, skill, wage, income_levels, skill_premium):
    return jnp.where(labor == 0, wage * income_levels[income] * skill_premium[skill], 0.0)


def next_wealth_working(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_regime_working(labor, period, survival_probability):
    alive = survival_probability[period]
    works = labor == 0
    p = (jnp.where(works, alive, 0.0), jnp.where(works, 0.0, alive), 1.0 - alive)
    return jnp.stack(jnp.broadcast_arrays(*p), axis=-1)


def next_wealth_retired(wealth, consumption, skill, interest_rate, pension, skill_premium):
    return (1 + interest_rate) * (wealth - consumption) + pension * skill_premium[skill]


def next_regime_retired(period, survival_probability):
    alive = survival_probability[period]
    return jnp.stack([jnp.zeros_like(alive), alive, 1.0 - alive], axis=-1)


def borrowing(consumption, wealth):
    return consumption <= wealth


def build(
    *,
    n_wealth=24,
    n_consumption=30,
    n_skill=4,
    n_income=4,
    wealth_batch=0,
    consumption_batch=0,
    skill_batch=0,
    income_batch=0,
    labor_batch=0,
    skill_distributed=False,
    income_distributed=False,
    retired_skill=True,
):
    wealth = lcm.LinSpacedGrid(start=0.5, stop=40.0, n_points=n_wealth, batch_size=wealth_batch)
    consumption = lcm.LinSpacedGrid(
        start=0.5, stop=40.0, n_points=n_consumption, batch_size=consumption_batch
    )
    skill = lcm.DiscreteGrid(
        [f"s{i}" for i in range(n_skill)], batch_size=skill_batch, distributed=skill_distributed
    )
    income = lcm.DiscreteGrid(
        [f"y{i}" for i in range(n_income)],
        batch_size=income_batch,
        distributed=income_distributed,
    )
    working = lcm.Regime(
        states={"wealth": wealth, "income": income, "skill": skill},
        actions={
            "labor": lcm.DiscreteGrid(["work", "retire"], batch_size=labor_batch),
            "consumption": consumption,
        },
        functions={"utility": utility_working, "labor_income": labor_income},
        state_transitions={
            "wealth": next_wealth_working,
            "income": lcm.MarkovTransition(
                lambda income, income_transition: income_transition[income]
            ),
            "skill": lambda skill: skill,
        },
        transition=lcm.MarkovTransition(next_regime_working),
        constraints={"borrowing": borrowing},
    )
    retired_states = {"wealth": wealth, "skill": skill} if retired_skill else {"wealth": wealth}
    retired_transitions = {"wealth": next_wealth_retired, "skill": lambda skill: skill}
    if not retired_skill:
        retired_transitions = {
            "wealth": lambda wealth, consumption, interest_rate, pension: (
                (1 + interest_rate) * (wealth - consumption) + pension
            )
        }
    retired = lcm.Regime(
        states=retired_states,
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions=retired_transitions,
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": borrowing},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        regimes={"working": working, "retired": retired, "dead": dead},
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
    )


def initial_conditions(n_skill=4):
    """Ten subjects: eight working, two retired, every income state and type."""
    n = 10
    return {
        "regime": jnp.array([0] * 8 + [1] * 2),
        "wealth": jnp.linspace(2.0, 30.0, n),
        "income": jnp.arange(n) % 4,
        "skill": (jnp.arange(n) * 3) % n_skill,
    }


SMALL_PARAMS = {"discount_factor": 0.95, "interest_rate": 0.02}


def build_small(kind: str, distributed: bool) -> lcm.Model:
    """One regime with wealth and a 4-point discrete state `z` of the given kind.

    `kind="process"`: `z` is a Rouwenhorst AR(1) process (its own Markov chain);
    `kind="deterministic"`: `z` moves up by one when consumption is high (a transition
    that depends on an action, so the kernel reads next values at arbitrary codes).
    """
    wealth = lcm.LinSpacedGrid(start=1.0, stop=20.0, n_points=12)
    consumption = lcm.LinSpacedGrid(start=0.5, stop=20.0, n_points=15)
    if kind == "process":
        z = lcm.RouwenhorstGrid(n_points=4, rho=0.9, sigma=0.2, distributed=distributed)
        transitions = {
            "wealth": lambda wealth, consumption, z, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + jnp.exp(z)
            )
        }
    else:
        z = lcm.DiscreteGrid(["a", "b", "c", "d"], distributed=distributed)
        transitions = {
            "wealth": lambda wealth, consumption, z, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + 1.0 + 0.3 * z
            ),
            "z": lambda z, consumption: jnp.where(consumption > 5, jnp.minimum(z + 1, 3), z),
        }
    regime = lcm.Regime(
        states={"wealth": wealth, "z": z},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions=transitions,
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
    )
    return lcm.Model(regimes={"only": regime}, n_periods=3)
