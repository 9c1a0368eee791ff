"""Consumption and saving with Epstein–Zin preferences.

A consumer with wealth (cash on hand) and a two-state Markov income (low, high) chooses
consumption for 6 periods and survives each period with probability 0.97 (death is the
terminal regime "dead", utility 0). Preferences are Epstein–Zin
(`aggregator=lcm.EpsteinZin(terminal="time_aggregator")`, death entering the time
aggregator): `risk_aversion` γ and the elasticity of intertemporal
substitution `eis` ψ are separate parameters.

Solves the model once (compiled once, reused for every parameter pair) for a few (γ, ψ)
pairs, prints consumption at a few wealth levels in the first period, and saves a figure
of the consumption policies next to this script (`examples/epstein_zin.png`). The pair
γ = 2, ψ = 0.5 (γ = 1/ψ) is the additive CRRA model with relative risk aversion 2; the
other pairs move risk aversion and intertemporal substitution one at a time.

Run from the repository root: `python examples/epstein_zin.py`.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt

import lcm_eqx as lcm

# Epstein–Zin reads next period's values through V'^(1-γ): with γ = 10 and values near
# 0 that overflows float32's range (the solve says so), so this example runs in float64.
jax.config.update("jax_enable_x64", True)

PAIRS = [(2.0, 0.5), (10.0, 0.5), (2.0, 1.5), (10.0, 1.5)]  # (risk_aversion, eis)


def labor_income(income):
    return jnp.where(income == 1, 1.5, 0.3)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_income(income, income_transition):
    return income_transition[income]


def next_regime(survival):
    return jnp.stack([survival, 1 - survival])


def borrowing(consumption, wealth):
    return consumption <= wealth


alive = lcm.Regime(
    states={
        "wealth": lcm.LinSpacedGrid(start=0.5, stop=15.0, n_points=150),
        "income": lcm.DiscreteGrid(["low", "high"]),
    },
    actions={"consumption": lcm.LinSpacedGrid(start=0.05, stop=15.0, n_points=1000)},
    functions={"utility": lambda consumption: consumption, "labor_income": labor_income},
    state_transitions={"wealth": next_wealth, "income": lcm.MarkovTransition(next_income)},
    transition=lcm.MarkovTransition(next_regime),
    constraints={"borrowing": borrowing},
    # Death has utility 0: it enters the time aggregator (survival discounting). Inside
    # the certainty equivalent (the default) a value of 0 with γ > 1 would give CE = 0.
    aggregator=lcm.EpsteinZin(terminal="time_aggregator"),
)
dead = lcm.Regime(functions={"utility": lambda: 0.0})
model = lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=6)

base = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "survival": 0.97,
    "income_transition": jnp.array([[0.8, 0.2], [0.1, 0.9]]),
}


def main() -> None:
    wealth = np.linspace(0.5, 15.0, 100)
    fig, ax = plt.subplots(figsize=(7, 5), layout="constrained")
    print("Consumption in period 0 with low income, at wealth 2, 5 and 10:")
    for gamma, psi in PAIRS:
        params = {**base, "risk_aversion": gamma, "eis": psi}
        solution = model.solve(params)
        actions, _ = lcm.compute_policy(
            model,
            params,
            solution,
            "alive",
            0,
            {"wealth": wealth, "income": np.zeros(wealth.size, dtype=int)},
        )
        consumption = actions["consumption"]
        at = np.interp([2.0, 5.0, 10.0], wealth, consumption)
        print(f"  γ = {gamma:4.1f}, ψ = {psi:3.1f}: " + ", ".join(f"{c:.3f}" for c in at))
        ax.plot(wealth, consumption, label=f"γ = {gamma:g}, ψ = {psi:g}")
    ax.set_xlabel("wealth (cash on hand)")
    ax.set_ylabel("consumption in period 0 (low income)")
    ax.set_title("Epstein–Zin consumption policies")
    ax.legend()
    path = Path(__file__).with_suffix(".png")
    fig.savefig(path, dpi=100)
    print(f"Saved {path}")


if __name__ == "__main__":
    main()
