"""The smallest useful lcm_eqx model: consumption and saving over four periods.

One regime, one continuous state (wealth), one action (consumption), log utility and a
fixed income each period. Solves the model, simulates five subjects, prints a short
summary and saves the value function plot next to this script (`examples/tiny.png`).

Run from the repository root: `python examples/tiny.py`.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")

import lcm_eqx as lcm


def utility(consumption):
    return jnp.log(consumption)


def next_wealth(wealth, consumption, interest_rate, income):
    return (1 + interest_rate) * (wealth - consumption) + income


def borrowing(consumption, wealth):
    return consumption <= wealth


alive = lcm.Regime(
    states={"wealth": lcm.LinSpacedGrid(start=1.0, stop=50.0, n_points=50)},
    actions={"consumption": lcm.LinSpacedGrid(start=1.0, stop=50.0, n_points=200)},
    functions={"utility": utility},
    state_transitions={"wealth": next_wealth},
    transition=lambda: 0,  # the id of the only regime: stay in it
    constraints={"borrowing": borrowing},
)
model = lcm.Model(regimes={"alive": alive}, n_periods=4)
params = {"discount_factor": 0.95, "interest_rate": 0.03, "income": 2.0}


def main() -> None:
    solution = model.solve(params)
    result = model.simulate(
        params,
        initial_conditions={"regime": jnp.zeros(5, dtype=int), "wealth": jnp.linspace(1, 20, 5)},
        solution=solution,
        key=jax.random.key(0),
    )
    df = result.to_dataframe()

    v0 = solution.value("alive", 0)
    print(f"value in period 0 at wealth 1, 25, 50: {v0[0]:.3f}, {v0[24]:.3f}, {v0[-1]:.3f}")
    by_period = df.groupby("period")[["wealth", "consumption"]].mean().round(2)
    print("mean consumption by period:", by_period["consumption"].tolist())
    print("mean wealth by period:     ", by_period["wealth"].tolist())

    ax = lcm.plot_values(model, solution, "alive")
    path = Path(__file__).with_suffix(".png")
    ax.figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
