"""Compile time against the number of periods.

Periods with the same structure share one compiled step (a `lax.scan` over periods), so
compile time should not grow with the horizon. Prints compile and steady-state run time
for 6, 48 and 96 periods, and the ratios to 6 periods, measured in one run.

    python benchmarks/compile_time.py [--x64]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import steady_time


def measure(build, params, n_periods: int, repeats: int = 5) -> dict:
    model = build(n_periods)
    start = time.perf_counter()
    lowered = model._solve.lower(params, validate=True)
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start
    run_seconds = steady_time(lambda: compiled(params), repeats)
    return {"n_periods": n_periods, "compile_s": compile_seconds, "run_s": run_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    # The persistent cache would make the second and later compiles look free.
    jax.config.update("jax_enable_compilation_cache", False)
    from benchmarks._models import MODELS

    results = {}
    for name, (build, params) in MODELS.items():
        rows = [measure(build, params, n) for n in (6, 48, 96)]
        base = rows[0]["compile_s"]
        print(f"\n{name}")
        print(f"{'periods':>8} {'compile s':>10} {'ratio':>6} {'run ms':>8}")
        for row in rows:
            row["compile_ratio_to_6"] = row["compile_s"] / base
            print(
                f"{row['n_periods']:>8} {row['compile_s']:>10.2f} "
                f"{row['compile_ratio_to_6']:>6.2f} {1e3 * row['run_s']:>8.1f}"
            )
        results[name] = rows
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
