"""Precautionary saving with persistent income risk and mortality.

A consumer lives from age 25 in two-year periods. While working (until 65) income is
`wage * exp(income)`, where `income` follows an AR(1) process discretised with
Rouwenhorst's method; afterwards the consumer gets a pension. Utility is CRRA. Every
period the consumer survives with an age-dependent probability; otherwise they move to
the terminal regime "dead" (utility 0). Wealth is cash on hand: consumption cannot exceed
it, and what is left earns interest.

Solves the model, simulates 2,000 consumers, prints mean wealth by age decade and the
share still alive, and saves a figure next to this script
(`examples/precautionary_savings.png`).

Run from the repository root: `python examples/precautionary_savings.py`.
"""

from enum import IntEnum
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt

import lcm_eqx as lcm

N_PERIODS = 25  # ages 25, 27, ..., 73
AGES = lcm.AgeGrid(start=25, step=2)
N_INCOME = 7
N_SUBJECTS = 2_000


class RegimeId(IntEnum):
    alive = 0
    dead = 1


def utility(consumption, crra):
    return consumption ** (1 - crra) / (1 - crra)


def labor_income(income, age, wage, pension, retirement_age):
    return jnp.where(age < retirement_age, wage * jnp.exp(income), pension)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_regime(period, survival_probability):
    alive = survival_probability[period]
    return jnp.stack([alive, 1 - alive])


def borrowing(consumption, wealth):
    return consumption <= wealth


alive = lcm.Regime(
    states={
        "wealth": lcm.LogSpacedGrid(start=0.3, stop=20.0, n_points=80),
        "income": lcm.RouwenhorstGrid(n_points=N_INCOME, rho=0.95, sigma=0.1),
    },
    actions={"consumption": lcm.LogSpacedGrid(start=0.05, stop=20.0, n_points=300)},
    functions={"utility": utility, "labor_income": labor_income},
    state_transitions={"wealth": next_wealth},  # income: implied by its RouwenhorstGrid
    transition=lcm.MarkovTransition(next_regime),
    constraints={"borrowing": borrowing},
)
dead = lcm.Regime(functions={"utility": lambda: 0.0})
model = lcm.Model(
    regimes={"alive": alive, "dead": dead}, n_periods=N_PERIODS, regime_ids=RegimeId, ages=AGES
)


def survival_probabilities() -> np.ndarray:
    """Two-year survival probability by period: near 1 when young, falling after 50."""
    ages = 25 + 2 * np.arange(N_PERIODS)
    annual_mortality = 0.0005 * np.exp(0.085 * (ages - 25))  # Gompertz
    return np.clip((1 - annual_mortality) ** 2, 0.0, 1.0)


params = {
    "discount_factor": 0.96**2,
    "interest_rate": 1.03**2 - 1,
    "crra": 2.0,
    "wage": 1.0,
    "pension": 0.4,
    "retirement_age": 65,
    "survival_probability": jnp.asarray(survival_probabilities()),
}


def main() -> None:
    solution = model.solve(params)

    # Start with little wealth; income drawn from the chain's stationary distribution,
    # which for Rouwenhorst is Binomial(n - 1, 1/2) over the grid indices.
    rng = np.random.default_rng(0)
    initial_conditions = {
        "regime": np.zeros(N_SUBJECTS, dtype=int),
        "wealth": np.full(N_SUBJECTS, 1.0),
        "income:index": rng.binomial(N_INCOME - 1, 0.5, N_SUBJECTS),
    }
    result = model.simulate(params, initial_conditions, solution=solution, key=jax.random.key(0))
    df = result.to_dataframe()

    living = df[df["regime"] == "alive"].copy()
    living["age_decade"] = (living["age"] // 10 * 10).astype(int)
    by_decade = living.groupby("age_decade").agg(
        mean_wealth=("wealth", "mean"), mean_consumption=("consumption", "mean")
    )
    print(f"Simulated {N_SUBJECTS} consumers from age 25 (two-year periods).")
    print("Mean wealth and consumption of the living, by age decade:")
    print(by_decade.round(3).to_string())
    n_alive = living.groupby("age").size().reindex(df["age"].unique(), fill_value=0)
    share = n_alive / N_SUBJECTS
    ages_to_show = [25, 45, 65, 73]
    print("Share alive at age " + ", ".join(f"{a}: {share.loc[a]:.3f}" for a in ages_to_show))

    fig, axes = plt.subplots(1, 3, figsize=(17, 5), layout="constrained")
    lcm.plot_values(model, solution, "alive", by="income", periods=0, ax=axes[0])
    lcm.plot_policy(
        model, params, solution, "alive", "consumption", by="income", period=10, ax=axes[1]
    )
    lcm.plot_profiles(df, ["wealth", "consumption"], by="age", ax=axes[2])
    fig.suptitle("Precautionary saving with Rouwenhorst income risk and mortality")
    path = Path(__file__).with_suffix(".png")
    fig.savefig(path, dpi=100)
    print(f"Saved {path}")


if __name__ == "__main__":
    main()
