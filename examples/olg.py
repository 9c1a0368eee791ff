"""A life-cycle overlapping-generations economy in stationary general equilibrium.

Households live from age 20 to at most 89 (70 annual periods), face mortality (a
Gompertz hazard) and save in annuities (survivors share the savings of those who die:
the return is `(1 + r) / survival`). They work inelastically until 65 for the net wage
`(1 − τ) w`, then draw a pay-as-you-go pension `ρ (1 − τ) w` (replacement rate ρ of the
net wage). CRRA utility, solved with `lcm.DCEGM`; newborns start with their first net
wage. Every year a cohort 1% larger than the last is born. Firms produce
`Y = K^α L^(1−α)` (Cobb–Douglas) and pay marginal products.

`lcm.Equilibrium` finds the three prices — the interest rate `r`, the wage `w` and the
contribution rate `τ` — at which capital (savings per head, over the stationary
population of every cohort at one date, divided by `1 + n`) and labour clear their
markets and the pension budget balances, by Newton's method with the exact Jacobian
through the solve and the exact forward distribution. Then `calibrate` finds the
discount factor β at which the capital–output ratio is 3, by Newton's method on β with
the derivative of the equilibrium from the implicit function theorem.

Prints the equilibrium (prices, aggregates, excess demands, Newton steps) before and
after the calibration, and saves a figure next to this script (`examples/olg.png`):
cash on hand and savings by age, and the population by age.

Run from the repository root: `python examples/olg.py`.
"""

import time
from enum import IntEnum
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

FIRST_AGE, RETIREMENT_AGE, N_PERIODS = 20, 65, 70


class Life(IntEnum):
    alive = 0
    dead = 1


def utility(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def income(age, wage, contribution_rate, replacement_rate):
    net_wage = (1 - contribution_rate) * wage
    return jnp.where(age < RETIREMENT_AGE, net_wage, replacement_rate * net_wage)


def next_wealth(
    wealth, consumption, age, period, interest_rate, survival, wage, contribution_rate,
    replacement_rate,
):  # fmt: skip
    annuity_return = (1 + interest_rate) / survival[period]
    next_income = income(age + 1, wage, contribution_rate, replacement_rate)
    return annuity_return * (wealth - consumption) + next_income


def savings(wealth, consumption):
    return wealth - consumption


def labor_supply(age):
    return jnp.where(age < RETIREMENT_AGE, 1.0, 0.0)


def borrowing(consumption, wealth):
    return consumption <= wealth


def next_life(period, survival):
    return jnp.stack([survival[period], 1 - survival[period]])


WEALTH_MAX = 40.0
wealth = lcm.LinSpacedGrid(start=0.05, stop=WEALTH_MAX, n_points=200)
consumption = lcm.LinSpacedGrid(start=0.01, stop=WEALTH_MAX, n_points=10)  # not searched
savings_grid = lcm.IrregSpacedGrid(points=[WEALTH_MAX * (i / 199) ** 1.5 for i in range(200)])
alive = lcm.Regime(
    states={"wealth": wealth},
    actions={"consumption": consumption},
    functions={"utility": utility, "savings": savings, "labor_supply": labor_supply},
    state_transitions={"wealth": next_wealth},
    transition=lcm.MarkovTransition(next_life),
    constraints={"borrowing": borrowing},
)
dead = lcm.Regime(functions={"utility": lambda: 0.0})
model = lcm.Model(
    regimes={"alive": alive, "dead": dead},
    ages=lcm.AgeGrid(start=FIRST_AGE, stop=FIRST_AGE + N_PERIODS - 1, step=1),
    regime_ids=Life,
    solver=lcm.DCEGM(state="wealth", action="consumption", savings=savings_grid),
)

# Survival from age a to a + 1 under the Gompertz hazard 0.0005·exp(0.085 (a − 20)); the
# last entry is never used (no one lives beyond the last period).
hazard = 0.0005 * np.exp(0.085 * np.arange(N_PERIODS))
survival = np.exp(-hazard)
survival[-1] = 1.0

params = {
    "discount_factor": 0.98,
    "risk_aversion": 2.0,
    "survival": survival,
    "replacement_rate": 0.4,
    "capital_share": 0.36,
    "depreciation": 0.08,
    "population_growth": 0.01,
    # The prices, at Newton's starting point:
    "interest_rate": 0.04,
    "wage": 1.2,
    "contribution_rate": 0.1,
}


def capital_market(interest_rate, capital, labor, capital_share, depreciation):
    marginal_product = capital_share * (capital / labor) ** (capital_share - 1)
    return interest_rate - (marginal_product - depreciation)


def labor_market(wage, capital, labor, capital_share):
    return wage - (1 - capital_share) * (capital / labor) ** capital_share


def pension_budget(contribution_rate, wage, labor, retirees, replacement_rate):
    contributions = contribution_rate * wage * labor
    return contributions - replacement_rate * (1 - contribution_rate) * wage * retirees


def newborns(wage, contribution_rate):
    """Everyone starts alive with the first net wage as cash on hand."""
    return {
        "regime": jnp.zeros(1, dtype=int),
        "wealth": jnp.reshape((1 - contribution_rate) * wage, (1,)),
    }


equilibrium = lcm.Equilibrium(
    model,
    prices=["interest_rate", "wage", "contribution_rate"],
    aggregates={
        # Savings of this date's population are next date's capital, per head of a
        # population 1 + n times larger.
        "capital": lambda population, population_growth: (
            population.per_capita("savings") / (1 + population_growth)
        ),
        "labor": lambda population: population.per_capita("labor_supply"),
        "retirees": lambda population: population.per_capita(lambda labor_supply: 1 - labor_supply),
        "output": lambda capital, labor, capital_share: (
            capital**capital_share * labor ** (1 - capital_share)
        ),
        "capital_output": lambda capital, output: capital / output,
    },
    clearing={"capital": capital_market, "labor": labor_market, "pension": pension_budget},
    initial=newborns,
    population_growth="population_growth",
)


def report(title: str, result: lcm.EquilibriumResult) -> None:
    print(f"{title}:")
    print(result.summary().to_string())
    largest = max(abs(float(v)) for v in result.excess.values())
    print(f"Newton steps: {int(result.steps)}, largest excess demand: {largest:.2e}\n")


def main() -> None:
    start = time.perf_counter()
    result = equilibrium.solve(params)
    report(
        f"Equilibrium at β = {params['discount_factor']} ({time.perf_counter() - start:.1f} s)",
        result,
    )

    start = time.perf_counter()
    calibration = equilibrium.calibrate(
        params, free=["discount_factor"], targets={"capital_output": 3.0}
    )
    beta = float(calibration.params["discount_factor"])
    print(
        f"Calibrated β = {beta:.10f}: K/Y = {float(calibration.values['capital_output']):.12f} "
        f"in {int(calibration.steps)} Newton steps ({time.perf_counter() - start:.1f} s)"
    )
    calibrated = calibration.equilibrium
    report("Equilibrium at the calibrated β", calibrated)

    distribution = calibrated.population.distribution
    ages = FIRST_AGE + np.arange(N_PERIODS)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(ages, np.asarray(distribution.mean("wealth")), label="cash on hand")
    left.plot(ages, np.asarray(distribution.mean("savings")), label="savings")
    left.axvline(RETIREMENT_AGE, color="grey", linestyle=":", label="retirement")
    left.set_xlabel("age")
    left.set_ylabel("per survivor")
    left.set_title(
        f"Wealth profile (β = {beta:.4f}, r = {float(calibrated.prices['interest_rate']):.4f})"
    )
    left.legend()
    right.bar(ages, 100 * np.asarray(calibrated.population.cohort_sizes), color="tab:green")
    right.set_xlabel("age")
    right.set_ylabel("% of the population")
    right.set_title("Stationary population (mortality, 1% growth)")
    figure.tight_layout()
    figure.savefig(Path(__file__).with_suffix(".png"), dpi=100)


if __name__ == "__main__":
    main()
