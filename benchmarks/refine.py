"""`GridSearch(refine=...)` against plain grid search: accuracy, compile and run time.

    python benchmarks/refine.py            # 3 productivity levels x 100 wealth points, 6 periods
    python benchmarks/refine.py --quick    # small sizes, a smoke run

The hours model of `tests/models/hours.py` (a continuous labour-hours choice, CRRA
consumption, convex disutility, hours raising the chance of a better productivity
level). Variants in one run: grid search on 40 and on 4,000 hours points, and the
40-point grid refined (`GridSearch(refine=True)`, 5 Newton steps; and with 2 and 3).
Accuracy: the largest relative error of the hours policy and of the value at every
state and period against a numpy/scipy oracle of the same Bellman equation (scipy's
bounded Brent, polished by a root of the analytic slope). Compile: lowering plus XLA
compile of `jax.jit(model.solve)`, apart from the runs; run: the fastest and the median
of interleaved calls of the compiled solves (on a shared machine the fastest is the
robust one); ratios against the 40-point grid search.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import interleaved  # noqa: E402
from tests.models import hours  # noqa: E402


def variants() -> dict[str, tuple[int, lcm.GridSearch]]:
    return {
        "grid-40": (40, lcm.GridSearch()),
        "grid-4000": (4000, lcm.GridSearch()),
        "refined-40": (40, lcm.GridSearch(refine=True)),
        "refined-40 (2 steps)": (40, lcm.GridSearch(refine=lcm.Refine(newton_steps=2))),
        "refined-40 (3 steps)": (40, lcm.GridSearch(refine=lcm.Refine(newton_steps=3))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_wealth, n_periods, repeats = (12, 3, 5) if args.quick else (100, 6, 40)
    params = hours.PARAMS
    start = time.perf_counter()
    values, policy = hours.oracle(params, n_periods=n_periods, n_wealth=n_wealth)
    print(f"oracle: {time.perf_counter() - start:.1f} s")
    mass = {"working": jnp.full((3, n_wealth), 1.0 / (3 * n_wealth))}
    compiled, rows = {}, {}
    for name, (n_hours, solver) in variants().items():
        model = hours.build(n_hours, solver=solver, n_periods=n_periods, n_wealth=n_wealth)
        solve = jax.jit(lambda p, model=model: model.solve(p, validate="off").values)
        start = time.perf_counter()
        lowered = solve.lower(params)
        executable = lowered.compile()
        compile_s = time.perf_counter() - start
        solved = executable(params)
        chosen = model.distribution(params, mass).actions["working"]["hours"]
        rows[name] = {
            "compile_s": compile_s,
            "policy_error": float(np.max(np.abs(np.asarray(chosen) - policy) / policy)),
            "value_error": float(
                np.max(np.abs(np.asarray(solved["working"]) - values) / np.abs(values))
            ),
        }
        compiled[name] = lambda executable=executable: executable(params)
        jax.block_until_ready(compiled[name]())
    times = interleaved(compiled, repeats)
    fastest = min(times["grid-40"])
    middle = statistics.median(times["grid-40"])
    print(
        f"hours model: 3 x {n_wealth} states, {n_periods} periods, float64, "
        f"{jax.devices()[0].platform}; {repeats} interleaved solves of each"
    )
    header = f"{'variant':22} {'policy err':>10} {'value err':>10} {'compile s':>9} "
    print(header + f"{'fastest ms':>10} {'ratio':>6} {'median ms':>10} {'ratio':>6}")
    for name, row in rows.items():
        low, mid = min(times[name]), statistics.median(times[name])
        print(
            f"{name:22} {row['policy_error']:10.1e} {row['value_error']:10.1e} "
            f"{row['compile_s']:9.2f} {1e3 * low:10.2f} {low / fastest:6.2f} "
            f"{1e3 * mid:10.2f} {mid / middle:6.2f}"
        )


if __name__ == "__main__":
    main()
