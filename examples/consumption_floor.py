"""A consumption floor and an asset-tested benefit: a kinked budget solved by DC-EGM.

A consumer with cash on hand `m` chooses consumption `c`; CRRA utility; income is i.i.d.
(three nodes) and drawn after the decision (`next_income`, the buffer-stock timing). Two
programmes make next period's cash on hand piecewise affine in savings `a = m − c`
(Hubbard, Skinner & Zeldes 1995):

- an asset-tested benefit `b`, withdrawn at rate `θ` per unit of savings above `ā`: a
  concave kink at `ā` (a mass of agents saves exactly `ā`, "just below the threshold")
  and a convex one where the benefit is gone;
- a means-tested transfer that guarantees next period's resources `floor`: a convex
  kink where the lowest income's resources reach it (below it savings are confiscated,
  and agents save nothing rather than a little: the spend-down).

    m' = max((1 + r)·a + y' + max(0, b − θ·max(0, a − ā)), floor)

The model is solved three ways: `lcm.DCEGM(..., kinks=lcm.BudgetKinks(3))` (the
breakpoints are savings points, so the mass at the threshold and the jumps are exact),
the same `DCEGM` without declared kinks (the mass at the threshold falls between two
savings points), and `lcm.GridSearch` on a fine consumption grid. It prints the solve
times, the period-0 values at a few levels of cash on hand and each method's largest
difference from the kinked DC-EGM, the savings policy at those levels (saving nothing,
saving exactly the threshold), and, from a simulated panel, the share of consumers who
save exactly the threshold or are at the floor. Saves a figure next to this script
(`examples/consumption_floor.png`): the period-0 savings policy of each method and
the value differences.

`tests/test_budget_kinks.py` checks this model (at two and three periods) against an
exact oracle that maximises the Bellman equation piece by piece: the kinked DC-EGM is
within 1e-8 of it; see docs/budget_kinks.md.

Run from the repository root: `python examples/consumption_floor.py`.
"""

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt

import lcm_eqx as lcm

jax.config.update("jax_enable_x64", True)  # float64: next period's jumps are mapped exactly

N_PERIODS = 4
INCOME = (0.3, 1.0, 1.7)
PROBABILITIES = (0.25, 0.5, 0.25)
PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.04,
    "rho": 2.0,
    "floor": 0.8,
    "benefit": 0.3,
    "threshold": 0.4,
    "taper": 0.5,
}
WEALTH = np.linspace(0.5, 8.0, 151)
N_SUBJECTS = 2_000


def utility(consumption, rho):
    return consumption ** (1 - rho) / (1 - rho)


def next_wealth(wealth, consumption, interest_rate, next_income, floor, benefit, threshold, taper):
    savings = wealth - consumption
    transfer = jnp.maximum(0.0, benefit - taper * jnp.maximum(0.0, savings - threshold))
    return jnp.maximum((1 + interest_rate) * savings + next_income + transfer, floor)


def borrowing(consumption, wealth):
    return consumption <= wealth


def build(solver, consumption_points=20):
    """The model solved by `solver`; the consumption grid matters to `GridSearch` only
    (DC-EGM keeps it for the API but never searches it)."""
    alive = lcm.Regime(
        states={
            "wealth": lcm.IrregSpacedGrid(points=WEALTH.tolist()),
            # Drawn after the decision: the current income enters nothing (see
            # docs/models.md, "A state the timing makes redundant").
            "income": lcm.IIDGrid(points=np.asarray(INCOME), probabilities=PROBABILITIES),
        },
        actions={"consumption": lcm.LinSpacedGrid(0.01, 8.0, consumption_points)},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth},
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        solver=solver,
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=N_PERIODS)


def dcegm(kinks):
    savings = lcm.IrregSpacedGrid(points=[12.0 * (i / 599) ** 1.5 for i in range(600)])
    return lcm.DCEGM(state="wealth", action="consumption", savings=savings, kinks=kinks)


MODELS = {
    "DC-EGM, BudgetKinks(3)": build(dcegm(lcm.BudgetKinks(n_kinks=3))),
    "DC-EGM, no kinks": build(dcegm(None)),
    "grid search, 2,000 points": build(lcm.GridSearch(), consumption_points=2_000),
}


def savings_policy(model, solution, wealth):
    """Period-0 savings `m − c` at `wealth`, at the middle income node (any node gives
    the same: the current income enters nothing)."""
    states = {"wealth": wealth, "income": np.full(wealth.shape, INCOME[1])}  # node values
    actions, _ = lcm.compute_policy(model, PARAMS, solution, "alive", 0, states)
    return wealth - np.asarray(actions["consumption"])


def main() -> None:
    solutions = {}
    for name, model in MODELS.items():
        start = time.perf_counter()
        solutions[name] = jax.block_until_ready(model.solve(PARAMS))
        print(f"{name:<27} first solve (with compile) {time.perf_counter() - start:6.2f} s")

    reference_name = next(iter(MODELS))
    reference = np.asarray(solutions[reference_name].value("alive", 0))[:, 1]
    shown = [0.6, 1.2, 2.0, 2.5, 4.0, 8.0]
    rows = np.searchsorted(WEALTH, shown)
    print("\nPeriod-0 value at cash on hand", ", ".join(f"{w:g}" for w in shown))
    for name, solution in solutions.items():
        values = np.asarray(solution.value("alive", 0))[:, 1]
        gap = np.max(np.abs(values - reference))
        note = "(the reference)" if name == reference_name else f"max difference {gap:.1e}"
        print(f"  {name:<27}", " ".join(f"{v:8.4f}" for v in values[rows]), f" {note}")
    every_income = np.asarray(solutions[reference_name].value("alive", 0))
    print(
        "  (the same at every current income node: largest difference "
        f"{np.max(np.abs(every_income - every_income[:, :1])):.0e})"
    )

    fine = np.linspace(0.5, 6.0, 1_101)
    policies = {
        name: savings_policy(model, solutions[name], fine) for name, model in MODELS.items()
    }
    kinked = policies[reference_name]
    at_shown = savings_policy(MODELS[reference_name], solutions[reference_name], np.array(shown))
    print("\nPeriod-0 savings (DC-EGM with kinks) at the same cash on hand")
    print("  ", " ".join(f"{s:8.4f}" for s in at_shown))
    saving_nothing = fine[kinked < 1e-9]
    at_threshold = fine[np.abs(kinked - PARAMS["threshold"]) < 1e-9]
    print(f"  saves nothing (spend-down) up to cash on hand {saving_nothing.max():.3f}")
    print(
        f"  saves exactly the threshold {PARAMS['threshold']} for cash on hand "
        f"{at_threshold.min():.3f} to {at_threshold.max():.3f}"
    )

    model, solution = MODELS[reference_name], solutions[reference_name]
    rng = np.random.default_rng(0)
    initial = {
        "regime": np.zeros(N_SUBJECTS, dtype=int),
        "wealth": rng.uniform(0.5, 4.0, N_SUBJECTS),
        "income": rng.choice(INCOME, N_SUBJECTS, p=PROBABILITIES),  # node values
    }
    frame = model.simulate(PARAMS, initial, solution, key=jax.random.key(0)).to_dataframe()
    saved = frame["wealth"] - frame["consumption"]
    frame["at_threshold"] = np.abs(saved - PARAMS["threshold"]) < 1e-9
    frame["at_floor"] = np.abs(frame["wealth"] - PARAMS["floor"]) < 1e-9
    print(f"\nSimulated panel of {N_SUBJECTS:,} consumers, by period:")
    print(frame.groupby("period")[["at_threshold", "at_floor"]].mean().round(3).to_string())

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    for (name, policy), style in zip(policies.items(), ("-", "--", ":"), strict=True):
        left.plot(fine, policy, style, label=name)
    left.axhline(PARAMS["threshold"], color="grey", lw=0.5)
    left.set(xlabel="cash on hand m", ylabel="savings m − c", title="Period-0 savings policy")
    left.legend(fontsize="small")
    for name, solution in list(solutions.items())[1:]:
        gap = np.abs(np.asarray(solution.value("alive", 0))[:, 1] - reference)
        right.semilogy(WEALTH, np.maximum(gap, 1e-16), label=name)
    right.set(
        xlabel="cash on hand m",
        ylabel="|V − V(DC-EGM with kinks)|",
        title="Period-0 value differences",
    )
    right.legend(fontsize="small")
    out = Path(__file__).with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"\nSaved {out}")


if __name__ == "__main__":
    main()
