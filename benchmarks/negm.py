"""NEGM against grid search on the durable-goods model of `examples/durables.py`.

For the same state grid (liquid wealth x durable stock x income), the model is solved by
`lcm.NEGM` and by `lcm.GridSearch` on action grids of growing size (consumption x new
stock): a convergence study of the grid search towards NEGM (the largest |difference| of
the period-0 values at the interior state nodes, `1 <= m <= 10`, `0.2 <= n <= 3`), the
steady solve time of each (compiled apart, timed in interleaved rounds, medians), the
compile time of each, and NEGM's Euler errors on the liquid margin
(`durables.euler_errors`, log10 of the relative consumption error at random states).

    python benchmarks/negm.py --quick      # 6 periods, small grids (CPU minutes)
    python benchmarks/negm.py              # 20 periods (a GPU, or patience)

Prints one line per variant and writes `benchmarks/results/negm.json`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import durables  # noqa: E402

from benchmarks._timing import interleaved, write_results  # noqa: E402

STATES = {"n_wealth": 60, "n_durable": 30, "n_income": 3}
QUICK_STATES = {"n_wealth": 40, "n_durable": 20, "n_income": 3}


def compiled(model, params):
    """The solve as one compiled program (compile timed apart), returning the period-0
    values and the solution."""

    def solve(p):
        return model.solve(p)

    start = time.perf_counter()
    program = jax.jit(solve).lower(params).compile()
    return program, time.perf_counter() - start


def interior(model):
    regime = model.regimes["alive"]
    wealth = np.asarray(regime.states["wealth"].to_jax())
    durable = np.asarray(regime.states["durable"].to_jax())
    keep_m = (wealth >= 1.0) & (wealth <= 10.0)
    keep_n = (durable >= 0.2) & (durable <= 3.0)
    return np.ix_(keep_m, keep_n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n_periods = 6 if args.quick else 20
    states = QUICK_STATES if args.quick else STATES
    grids = [(40, 20), (80, 40), (160, 80)] if args.quick else [(100, 50), (200, 100), (400, 200)]
    negm_variants = {"negm": {}, "negm-fine": {"n_savings": 240, "n_resources": 320}}

    variants = {}
    for name, extra in negm_variants.items():
        variants[name] = durables.build(n_periods, solver="negm", **states, **extra)
    for c, d in grids:
        variants[f"grid {c}x{d}"] = durables.build(
            n_periods, solver="grid", **states, n_consumption=c, n_new_durable=d
        )

    programs, compile_seconds, solutions = {}, {}, {}
    for name, (model, params) in variants.items():
        programs[name], compile_seconds[name] = compiled(model, params)
        solutions[name] = jax.block_until_ready(programs[name](params))
    times = interleaved(
        {name: (lambda p=programs[name], q=variants[name][1]: p(q)) for name in variants},
        args.rounds,
    )

    model, params = variants["negm"]
    region = interior(model)
    reference = np.asarray(solutions["negm"].values["alive"][0])[region]
    euler = {
        name: np.concatenate(
            [
                durables.euler_errors(*variants[name], solutions[name], t, n_draws=2_000)
                for t in range(n_periods - 1)
            ]
        )
        for name in negm_variants
    }
    rows = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"durables, {n_periods} periods, states {states}; load average {load}")
    for name in variants:
        values = np.asarray(solutions[name].values["alive"][0])[region]
        rows[name] = {
            "compile_s": compile_seconds[name],
            "steady_s": statistics.median(times[name]),
            "max_abs_diff_vs_negm": float(np.max(np.abs(values - reference))),
        }
        r = rows[name]
        print(
            f"  {name:<16} compile {r['compile_s']:7.1f} s  steady {r['steady_s'] * 1e3:9.1f} ms"
            f"  max |V - V_negm| {r['max_abs_diff_vs_negm']:.2e}"
        )
    for name, errors in euler.items():
        print(
            f"  {name} Euler errors (liquid margin, {errors.size} states): mean "
            f"{errors.mean():.2f}, median {np.median(errors):.2f}, 90th percentile "
            f"{np.percentile(errors, 90):.2f}"
        )
    write_results(
        ROOT / "benchmarks" / "results" / "negm.json",
        "quick" if args.quick else "full",
        args.rounds,
        {
            "periods": n_periods,
            "states": states,
            "rows": rows,
            "euler_mean": {k: float(e.mean()) for k, e in euler.items()},
        },
    )


if __name__ == "__main__":
    main()
