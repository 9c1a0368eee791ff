"""The quick start's retirement model solved with DC-EGM and with grid search, side by side.

The model of `examples/retirement.py` (Iskhakov, Jørgensen, Rust & Schjerning 2017): a
worker chooses each period whether to keep working or to retire for good, and how much
to consume. It is solved twice:

- with `lcm.DCEGM` (the discrete-continuous endogenous grid method) on 200 savings
  points `400·(i/199)³`: consumption comes from inverting the Euler equation, so it is
  continuous, not a point of the consumption grid;
- with `lcm.GridSearch` (the default) on the retirement example's grids: 100 wealth × 500
  consumption points.

Prints the steady solve time of each (after a warm-up), the mean Euler error of each in
the retired regime (`lcm.euler_errors`, log10 of the relative consumption error) and the
wealth above which a worker retires in each period. Saves a figure next to this script
(`examples/retirement_dcegm.png`): the consumption policies of both solvers for the
working and the retired regime in period 0 on a fine wealth axis, and the Euler errors by
wealth.

Run from the repository root: `python examples/retirement_dcegm.py`.
"""

import statistics
import time
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

# DC-EGM searches no consumption grid: it inverts the Euler equation at each point of an
# exogenous grid of savings (wealth − consumption), clustered near the borrowing limit 0.
savings = lcm.IrregSpacedGrid(points=[400.0 * (i / 199) ** 3 for i in range(200)])
dcegm = lcm.DCEGM(state="wealth", action="consumption", savings=savings)

MODELS = {
    "DC-EGM": lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=5,
        regime_ids=RegimeId,
        solver=dcegm,  # the default of every regime (a terminal one would get GridSearch)
    ),
    "grid search": lcm.Model(
        regimes={"working": working, "retired": retired}, n_periods=5, regime_ids=RegimeId
    ),
}

params = {"discount_factor": 0.98, "interest_rate": 0.0, "disutility_of_work": 1.0, "wage": 20.0}

FINE_WEALTH = np.linspace(1.0, 120.0, 1_191)  # a 0.1 step, far finer than either grid
PLOT_PERIOD = 0


def steady_solve_seconds(model, repeats=5) -> float:
    """The median time of a solve after a warm-up call (which compiles)."""
    jax.block_until_ready(model.solve(params).values)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(model.solve(params).values)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def retirement_thresholds(model, solution) -> list[float | None]:
    """Per period: the lowest wealth (on the fine axis) at which a worker retires."""
    thresholds = []
    for period in range(model.n_periods):
        actions, _ = lcm.compute_policy(
            model, params, solution, "working", period, {"wealth": FINE_WEALTH}
        )
        retire = np.flatnonzero(actions["labor"] == Labor.retire)
        thresholds.append(float(FINE_WEALTH[retire[0]]) if retire.size else None)
    return thresholds


def main() -> None:
    solutions, euler, thresholds = {}, {}, {}
    print("Steady solve time (median of 5 after a warm-up) and Euler errors, retired regime:")
    for name, model in MODELS.items():
        seconds = steady_solve_seconds(model)
        solution = model.solve(params)
        # log10 |relative consumption error| implied by the Euler equation, NaN where it
        # does not apply (the last period, and where the agent saves nothing).
        errors = np.asarray(
            lcm.euler_errors(
                model,
                params,
                solution,
                regime="retired",
                state="wealth",
                action="consumption",
                points=FINE_WEALTH,
            )
        )
        solutions[name], euler[name] = solution, errors
        thresholds[name] = retirement_thresholds(model, solution)
        print(
            f"  {name:<12} solve {seconds * 1e3:8.1f} ms   mean Euler error "
            f"{np.nanmean(errors):6.2f}   worst {np.nanmax(errors):6.2f}"
        )

    print("Retirement threshold (lowest wealth at which a worker retires):")
    print(f"  {'period':<8}" + "".join(f"{name:>14}" for name in MODELS))
    for period in range(MODELS["DC-EGM"].n_periods):
        cells = []
        for name in MODELS:
            threshold = thresholds[name][period]
            cells.append("never" if threshold is None else f"{threshold:.1f}")
        print(f"  {period:<8}" + "".join(f"{cell:>14}" for cell in cells))

    fig, axes = plt.subplots(1, 3, figsize=(16, 5), layout="constrained")
    styles = {"DC-EGM": {"color": "C0", "lw": 1.6}, "grid search": {"color": "C3", "lw": 1.0}}
    for ax, regime in zip(axes[:2], ("working", "retired"), strict=True):
        for name, model in MODELS.items():
            actions, _ = lcm.compute_policy(
                model, params, solutions[name], regime, PLOT_PERIOD, {"wealth": FINE_WEALTH}
            )
            ax.plot(FINE_WEALTH, actions["consumption"], label=name, **styles[name])
        if regime == "working":
            for name in MODELS:
                threshold = thresholds[name][PLOT_PERIOD]
                if threshold is not None:
                    ax.axvline(threshold, ls=":", **styles[name])
            ax.set_title(
                f"Working regime, period {PLOT_PERIOD}: consumption\n"
                "(dotted: wealth above which the worker retires)"
            )
        else:
            ax.set_title(f"Retired regime, period {PLOT_PERIOD}: consumption")
        ax.set_xlabel("wealth")
        ax.set_ylabel("consumption")
        ax.legend()
    for name in MODELS:
        axes[2].plot(FINE_WEALTH, euler[name][PLOT_PERIOD], label=name, **styles[name])
    axes[2].set_title(f"Retired regime, period {PLOT_PERIOD}: Euler errors")
    axes[2].set_xlabel("wealth")
    axes[2].set_ylabel("log10 |relative consumption error|")
    axes[2].legend()
    fig.suptitle("Retirement model (IJRS 2017): DC-EGM vs grid search")
    path = Path(__file__).with_suffix(".png")
    fig.savefig(path, dpi=100)
    print(f"Saved {path}")


if __name__ == "__main__":
    main()
