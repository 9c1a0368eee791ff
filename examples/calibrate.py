"""Calibration sweep: solve the retirement model for a grid of parameters in one vmapped call.

`jax.vmap(model.solve)` solves all parameter vectors at once (one compiled program, the
parameter axis batched through the backward induction). From each solution we read the
period-0 value and the probability of working at a few wealth levels, and print a table:
how the labor-supply choice responds to the disutility of work and the wage.

Run: `python examples/calibrate.py`.
"""

from __future__ import annotations

import itertools
import time
from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation import choice_probabilities  # noqa: E402

DISUTILITIES = (0.5, 1.0, 1.5, 2.0)
WAGES = (5.0, 10.0, 20.0, 40.0)
WEALTH_POINTS = 60
REPORT_WEALTH = (5.0, 50.0, 100.0)


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


def build_model():
    wealth = lcm.LinSpacedGrid(start=1.0, stop=150.0, n_points=WEALTH_POINTS)
    consumption = lcm.LinSpacedGrid(start=1.0, stop=150.0, n_points=150)
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
        taste_shocks=lcm.ExtremeValueShocks(),
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
    return lcm.Model(
        regimes={"working": working, "retired": retired}, n_periods=5, regime_ids=RegimeId
    )


def main():
    model = build_model()
    grid = list(itertools.product(DISUTILITIES, WAGES))
    params = {
        "discount_factor": jnp.full(len(grid), 0.95),
        "interest_rate": jnp.full(len(grid), 0.02),
        "taste_shock_scale": jnp.full(len(grid), 0.3),
        "disutility_of_work": jnp.array([d for d, _ in grid]),
        "wage": jnp.array([w for _, w in grid]),
    }

    @jax.jit
    @jax.vmap
    def sweep(p):
        solution = model.solve(p)
        probability_work = choice_probabilities(model, p, solution, "working", 0)[:, Labor.work]
        return solution.value("working", 0), probability_work

    start = time.perf_counter()
    values, work = jax.block_until_ready(sweep(params))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(sweep(params))
    again = time.perf_counter() - start

    wealth = np.linspace(1.0, 150.0, WEALTH_POINTS)
    index = [int(np.argmin(np.abs(wealth - w))) for w in REPORT_WEALTH]
    print(
        f"Solved {len(grid)} parameter vectors in one vmapped call: "
        f"{first:.1f}s with compilation, {again * 1e3:.0f} ms after.\n"
    )
    columns = " ".join(f"{f'P(work|w={wealth[i]:.0f})':>15}" for i in index)
    value_column = f"V0(w={wealth[index[1]]:.0f})"
    print(f"{'disutility':>10} {'wage':>6} {value_column:>9} {columns}")
    for k, (d, w) in enumerate(grid):
        row = " ".join(f"{float(work[k, i]):>15.3f}" for i in index)
        print(f"{d:>10.2f} {w:>6.1f} {float(values[k, index[1]]):>9.3f} {row}")

    # Same numbers as separate solves (a spot check of the batching).
    single = {k: v[5] for k, v in params.items()}
    np.testing.assert_allclose(model.solve(single).value("working", 0), values[5], rtol=1e-12)
    return values, work


if __name__ == "__main__":
    main()
