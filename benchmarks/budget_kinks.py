"""Declared budget kinks (NB-EGM) against grid search on a consumption-floor model:
accuracy against the exact oracle, compile time and steady solve time.

    python benchmarks/budget_kinks.py              # the sizes of docs/budget_kinks.md
    python benchmarks/budget_kinks.py --quick      # small sizes, a smoke run
    python benchmarks/budget_kinks.py --periods 3  # with next period's kinks mapped

The model is tests/test_budget_kinks.py's (float64): two periods (or `--periods`), CRRA
utility, three
i.i.d. income nodes, an asset-tested benefit phased out above a threshold and a
means-tested floor on next period's resources; 151 wealth nodes. Variants:
`DCEGM(kinks=BudgetKinks(3))` and plain `DCEGM` on savings grids `12·(i/(n−1))^1.5`, and
`GridSearch` on consumption grids `LinSpacedGrid(0.01, 8, n)`; with more than two
periods also `BudgetKinks(3, next_kinks=0)` (next period's kinks not mapped to savings
points) on the largest savings grid. The error is the largest
|value − oracle| over the wealth nodes (tests/oracles/consumption_floor.py). Compile is
the first call (trace, lower, compile, run); steady times are medians of interleaved
calls (one call of each variant per round), so drifts in load hit all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import call_seconds, interleaved  # noqa: E402
from tests import test_budget_kinks as floor_model  # noqa: E402


def grid_search(n_consumption: int, n_periods: int = 2) -> lcm.Model:
    alive = lcm.Regime(
        states={
            "wealth": lcm.IrregSpacedGrid(points=floor_model.WEALTH.tolist()),
            "income": lcm.IIDGrid(
                points=jnp.asarray(floor_model.INCOME),
                probabilities=jnp.asarray(floor_model.PROBABILITIES),
            ),
        },
        actions={"consumption": lcm.LinSpacedGrid(start=0.01, stop=8.0, n_points=n_consumption)},
        functions={"utility": floor_model.utility},
        state_transitions={"wealth": floor_model.next_wealth},
        transition=lambda: 0,
        constraints={"borrowing": floor_model.borrowing},
        solver=lcm.GridSearch(),
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=n_periods)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--periods", type=int, default=2)
    args = parser.parse_args()
    periods = args.periods
    savings_sizes = (150, 300) if args.quick else (150, 300, 600)
    consumption_sizes = (200, 800) if args.quick else (200, 1000, 4000)
    rounds = args.rounds or (3 if args.quick else 7)
    params = floor_model.PARAMS
    exact = floor_model.oracle(periods).value(0, floor_model.WEALTH)

    models = {}
    for n in savings_sizes:
        models[f"nbegm_{n}"] = floor_model.build(n_periods=periods, n_savings=n)
    largest = savings_sizes[-1]
    if periods > 2:
        models[f"nbegm_{largest}_next_kinks_0"] = floor_model.build(
            n_periods=periods,
            n_savings=largest,
            kinks=lcm.BudgetKinks(n_kinks=3, next_kinks=0),
        )
    models[f"dcegm_{largest}"] = floor_model.build(n_periods=periods, n_savings=largest, kinks=None)
    for n in consumption_sizes:
        models[f"grid_search_{n}"] = grid_search(n, periods)

    solves = {name: jax.jit(model.solve) for name, model in models.items()}
    result = {"periods": periods, "load_average": os.getloadavg()[0], "variants": {}}
    for name, solve in solves.items():
        compile_s = call_seconds(lambda solve=solve: solve(params).values)
        values = np.asarray(solve(params).value("alive", 0))[:, 0]
        result["variants"][name] = {
            "compile_s": compile_s,
            "max_value_error": float(np.max(np.abs(values - exact))),
        }
    times = interleaved(
        {name: (lambda solve=solve: solve(params).values) for name, solve in solves.items()},
        rounds,
    )
    for name, seconds in times.items():
        result["variants"][name]["steady_s"] = statistics.median(seconds)
    result["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
