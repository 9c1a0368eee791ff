"""Simulation with grid search against DC-EGM on issue 62's 31-period model (issue 60).

The model of `benchmarks/second_hour.py` (working, retired and dead regimes, taste
shocks, `next_income`, a consumption floor) as written there (`DCEGM` with budget kinks)
and with `lcm.GridSearch()` in both living regimes (its consumption grid, 100 points).
Each is solved once; then `model.simulate(params, initial, solution)` of `--subjects`
subjects is timed: the first call (compilation included) and `--rounds` steady calls,
the two solvers interleaved round by round in one process (the machine is noisy), with
the median of the per-round ratios grid search / DC-EGM. Run from the repository root:

    python benchmarks/simulate_solvers.py [--subjects 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from benchmarks import second_hour  # noqa: E402


def models() -> dict[str, lcm.Model]:
    dcegm = second_hour.build()
    grid = lcm.Model(
        regimes={
            name: regime if regime.solver is None else regime.replace(solver=lcm.GridSearch())
            for name, regime in dcegm.regimes.items()
        },
        ages=dcegm.ages,
        regime_ids=second_hour.RegimeId,
    )
    return {"dcegm": dcegm, "grid": grid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subjects", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    params = second_hour.true_params()
    rng = np.random.default_rng(0)
    initial = {
        "regime": np.zeros(args.subjects, dtype=int),
        "wealth": rng.uniform(0.5, 5.0, args.subjects),
        "income:index": np.zeros(args.subjects, dtype=int),
    }
    built = models()
    solutions = {name: jax.block_until_ready(m.solve(params)) for name, m in built.items()}
    out: dict[str, dict] = {name: {"steady_s": []} for name in built}

    def simulate(name: str, seed: int) -> float:
        start = time.perf_counter()
        result = built[name].simulate(
            params, initial, solutions[name], key=jax.random.key(seed), validate="off"
        )
        jax.block_until_ready((result.value, result.states, result.actions))
        return time.perf_counter() - start

    for name in built:
        out[name]["first_s"] = simulate(name, 0)
    ratios = []
    for round_ in range(args.rounds):
        order = list(built) if round_ % 2 == 0 else list(reversed(built))
        times = {name: simulate(name, round_ + 1) for name in order}
        for name, seconds in times.items():
            out[name]["steady_s"].append(seconds)
        ratios.append(times["grid"] / times["dcegm"])
    summary = {
        "subjects": args.subjects,
        **{f"{name}_first_s": round(out[name]["first_s"], 3) for name in built},
        **{
            f"{name}_steady_s": round(statistics.median(out[name]["steady_s"]), 3) for name in built
        },
        "grid_over_dcegm": round(statistics.median(ratios), 3),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
