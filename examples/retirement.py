"""The retirement model of Iskhakov, Jørgensen, Rust & Schjerning (2017), as in the quick
start (docs/quickstart.md).

A worker chooses each period whether to keep working (and earn a wage at a utility cost)
or to retire for good, and how much to consume; wealth earns interest. Five periods.

Solves the model, prints the value function at a few wealth levels and the wealth above
which a worker retires in each period, simulates 1,000 workers, prints the share working
and mean consumption by period, and saves a figure next to this script
(`examples/retirement.png`).

Run from the repository root: `python examples/retirement.py`.
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


wealth = lcm.LinSpacedGrid(start=1.0, stop=400.0, n_points=100)
consumption = lcm.LinSpacedGrid(start=1.0, stop=400.0, n_points=500)

working = lcm.Regime(
    states={"wealth": wealth},
    actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
    functions={"utility": utility, "labor_income": labor_income},
    state_transitions={"wealth": next_wealth},
    transition=next_regime,
    constraints={"borrowing": borrowing},
)
retired = lcm.Regime(
    states={"wealth": wealth},
    actions={"consumption": consumption},
    functions={"utility": utility_retired},
    state_transitions={"wealth": next_wealth_retired},
    transition=lambda: RegimeId.retired,
    constraints={"borrowing": borrowing},
)
model = lcm.Model(
    regimes={"working": working, "retired": retired}, n_periods=5, regime_ids=RegimeId
)

params = {"discount_factor": 0.98, "interest_rate": 0.0, "disutility_of_work": 1.0, "wage": 20.0}

N_SUBJECTS = 1_000
REPORT_WEALTH = (1.0, 50.0, 100.0, 200.0, 400.0)


def retirement_thresholds(solution) -> list[float | None]:
    """Per period: the lowest wealth (on a fine grid) at which a worker chooses to retire."""
    fine = np.linspace(1.0, 400.0, 799)
    thresholds = []
    for period in range(model.n_periods):
        actions, _ = lcm.compute_policy(
            model, params, solution, "working", period, {"wealth": fine}
        )
        retire = np.flatnonzero(actions["labor"] == Labor.retire)
        thresholds.append(float(fine[retire[0]]) if retire.size else None)
    return thresholds


def main() -> None:
    solution = model.solve(params)

    points = np.asarray(wealth.to_jax())
    columns = [int(np.argmin(np.abs(points - w))) for w in REPORT_WEALTH]
    print("Value function at wealth:")
    print(" " * 22 + "".join(f"{points[i]:>9.0f}" for i in columns))
    for regime in ("working", "retired"):
        for period in range(model.n_periods):
            v = np.asarray(solution.value(regime, period))
            label = f"{regime}, period {period}"
            print(f"  {label:<20}" + "".join(f"{v[i]:9.3f}" for i in columns))

    print("Retirement threshold (lowest wealth at which a worker retires):")
    for period, threshold in enumerate(retirement_thresholds(solution)):
        if threshold is None:
            text = "never retires"
        elif threshold <= 1.0:
            text = "retires at any wealth"
        else:
            text = f"{threshold:.1f}"
        print(f"  period {period}: {text}")

    initial_wealth = jax.random.uniform(jax.random.key(1), (N_SUBJECTS,), minval=1.0, maxval=100.0)
    result = model.simulate(
        params,
        initial_conditions={"regime": jnp.zeros(N_SUBJECTS, dtype=int), "wealth": initial_wealth},
        solution=solution,
        key=jax.random.key(0),
    )
    df = result.to_dataframe()
    df["works"] = (df["labor"] == "work").astype(float)  # retirees have no labor: not working
    summary = df.groupby("period").agg(
        share_working=("works", "mean"),
        mean_consumption=("consumption", "mean"),
        mean_wealth=("wealth", "mean"),
    )
    print(f"Simulated {N_SUBJECTS} workers with initial wealth uniform on [1, 100]:")
    print(summary.round(3).to_string())

    fig, axes = plt.subplots(2, 2, figsize=(12, 9), layout="constrained")
    lcm.plot_values(model, solution, "working", ax=axes[0, 0])
    lcm.plot_policy(
        model,
        params,
        solution,
        "working",
        "consumption",
        period=range(model.n_periods),
        ax=axes[0, 1],
    )
    lcm.plot_policy(
        model, params, solution, "working", "labor", period=range(model.n_periods), ax=axes[1, 0]
    )
    lcm.plot_profiles(df, ["wealth", "consumption"], ax=axes[1, 1])
    fig.suptitle("Retirement model (Iskhakov, Jørgensen, Rust & Schjerning 2017)")
    path = Path(__file__).with_suffix(".png")
    fig.savefig(path, dpi=100)
    print(f"Saved {path}")


if __name__ == "__main__":
    main()
