"""Mahler & Yum (2024) (`examples/mahler_yum.py`) at several sizes, the structure-aware
grid search (`GridSearch()`, factored) against the plain state x action product
(`GridSearch(factored=False)`): pairs per period, points evaluated per period, compile
and solve times, evaluations per second, XLA memory and peak RSS.

Each size and variant runs in a fresh process (so that its compile time and peak RSS are
its own). For each: the state x action pairs per period of the alive regime and the
points the solver evaluates (`model.describe(params)`), the first `model.solve` (trace,
compile and run) and the steady solve (median of `--repeats` calls, validated and with
`validate="off"`), pairs per second of the steady solve (the plain product's pairs,
whatever was evaluated), XLA's compiled temp memory, the simulation of `--subjects`
subjects, the process's peak RSS, and the *floor*: the time the period's elimination
steps would take at the rate of a hand-written `max(a + b)` reduction of the largest
step's size (how far the factored solve runs from the arithmetic it must do).

    python benchmarks/mahler_yum.py [--sizes tiny,reduced,medium] [--repeats 2] [--x64]
                                    [--subjects 2000] [--json PATH]
    python benchmarks/mahler_yum.py --size full --x64 --subjects 10000   # factored only
    python benchmarks/mahler_yum.py --size full --plain-full --batch-size 5  # ~20 min

The plain product runs at every size but `full` (about 1,000 s there with `--batch-size
5`, out of memory without); `--plain-full` adds it. `--batch-size k` splays the wealth
axis in chunks of `k` (`model.with_batch_size("wealth", k)`). On a GPU,
`benchmarks/device_check.sh` runs the full model and adds the device's memory statistics.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _example():
    spec = importlib.util.spec_from_file_location(
        "mahler_yum_example", ROOT / "examples" / "mahler_yum.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pair_counts(sizes: dict) -> dict:
    """States, actions and their product per period of the alive regime."""
    states = sizes["wealth"] * 2 * sizes["shock"] * sizes["effort"] * sizes["adjustment"] * 2**4
    actions = 3 * sizes["saving"] * sizes["effort"]
    return {
        "states": states,
        "actions": actions,
        "pairs_per_period": states * actions,
        "alive_periods": sizes["periods"] - 1,
    }


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _device_memory() -> dict | None:
    import jax

    stats = jax.devices()[0].memory_stats()
    if not stats:
        return None
    keep = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "largest_alloc_size")
    return {k: stats[k] for k in keep if k in stats}


def floor_rate(n_points: int) -> float:
    """Points per second of `max(a + b)` over the last axis of an `n_points` product (two
    broadcast operands, as the largest elimination steps), compiled apart, best of 3."""
    import jax
    import jax.numpy as jnp

    inner = 50
    outer = max(n_points // inner, 1)
    a = jnp.linspace(0.0, 1.0, outer * inner).reshape(outer, inner)
    b = jnp.linspace(1.0, 2.0, inner)
    kernel = jax.jit(lambda a, b: jnp.max(a + b, axis=-1)).lower(a, b).compile()
    jax.block_until_ready(kernel(a, b))
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(kernel(a, b))
        best = min(best, time.perf_counter() - start)
    return outer * inner / best


def measure(
    size: str, *, repeats: int, subjects: int, batch_size: int, xla_memory: bool, plain: bool
) -> dict:
    """One size in this process: the numbers listed in the module docstring."""
    import jax

    import lcm_eqx as lcm

    my = _example()
    solver = lcm.GridSearch(factored=not plain)
    model, params, initial_conditions = my.build(size, n_subjects=subjects, solver=solver)
    if batch_size:
        model = model.with_batch_size("wealth", batch_size)
    counts = pair_counts(my.SIZES[size])
    evaluations = counts["pairs_per_period"] * counts["alive_periods"]
    out = {
        "size": size,
        "variant": "plain" if plain else "factored",
        "dtype": "float64" if jax.config.jax_enable_x64 else "float32",
        "batch_size_wealth": batch_size,
        "devices": str(jax.devices()),
        **counts,
    }

    def solve(validate="raise"):
        solution = model.solve(params, validate=validate)
        return solution.value("alive", 0)

    start = time.perf_counter()
    jax.block_until_ready(solve())
    out["first_solve_s"] = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(solve())
        times.append(time.perf_counter() - start)
    out["steady_solve_s"] = statistics.median(times) if times else None
    if repeats:
        jax.block_until_ready(solve("off"))  # its own compile
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(solve("off"))
            times.append(time.perf_counter() - start)
        out["steady_solve_validate_off_s"] = statistics.median(times)
    steady = out["steady_solve_s"] or out["first_solve_s"]
    out["compile_estimate_s"] = out["first_solve_s"] - steady
    out["pairs_per_s"] = evaluations / steady
    out["device_memory"] = _device_memory()
    description = model.describe(params) if xla_memory else None
    if description is not None:
        out["xla_temp_bytes"] = description.temp_bytes
        alive = next(r for r in description.regimes if r.name == "alive")
        out["evaluated_per_period"] = alive.evaluated_points
        if alive.work is not None:
            largest = max(n for _, n in alive.work)
            rate = floor_rate(largest)
            out["floor_s"] = alive.evaluated_points * counts["alive_periods"] / rate
    if subjects:
        solution = model.solve(params)
        start = time.perf_counter()
        result = model.simulate(
            params, initial_conditions, solution=solution, key=jax.random.key(0)
        )
        frame = result.to_dataframe()
        out["simulate_s"] = time.perf_counter() - start
        out["simulated_rows"] = len(frame)
        out["subjects"] = subjects
    out["peak_rss_gib"] = _peak_rss_gib()
    return out


def _print_row(row: dict) -> None:
    def g(key, fmt="{:.2f}"):
        value = row.get(key)
        return "-" if value is None else fmt.format(value)

    temp = row.get("xla_temp_bytes")
    xla = "-" if temp is None else f"{temp / 2**20:.0f} MiB"
    evaluated = row.get("evaluated_per_period")
    print(
        f"{row['size']:>8} {row['variant']:>8} {row['dtype']:>7} {row['pairs_per_period']:>14,} "
        f"{'-' if evaluated is None else f'{evaluated:,}':>13} "
        f"{g('first_solve_s'):>9} {g('steady_solve_s'):>9} {g('steady_solve_validate_off_s'):>9} "
        f"{g('floor_s'):>7} {g('pairs_per_s', '{:.2e}'):>10} {xla:>10} "
        f"{g('simulate_s'):>8} {g('peak_rss_gib'):>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="tiny,reduced,medium")
    parser.add_argument("--size", help="one size (e.g. full); overrides --sizes")
    parser.add_argument(
        "--plain-full", action="store_true", help="also the plain product at full size"
    )
    parser.add_argument("--batch-size", type=int, default=0, help="splay wealth in chunks of k")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--subjects", type=int, default=2_000)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--no-xla-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        import jax

        jax.config.update("jax_enable_x64", args.x64)
        row = measure(
            args.child,
            repeats=args.repeats,
            subjects=args.subjects,
            batch_size=args.batch_size,
            xla_memory=not args.no_xla_memory,
            plain=args.plain,
        )
        print("RESULT " + json.dumps(row))
        return

    sizes = [args.size] if args.size else args.sizes.split(",")
    print(
        f"{'size':>8} {'variant':>8} {'dtype':>7} {'pairs/period':>14} {'evaluated':>13} "
        f"{'first s':>9} {'steady s':>9} {'v=off s':>9} {'floor s':>7} {'pairs/s':>10} "
        f"{'XLA temp':>10} {'sim s':>8} {'RSS GiB':>8}"
    )
    rows = []
    for size in sizes:
        by_variant = {}
        for plain in (False, True):
            if plain and size == "full" and not args.plain_full:
                continue
            command = [
                sys.executable,
                __file__,
                "--child",
                size,
                "--repeats",
                str(args.repeats),
                "--subjects",
                str(args.subjects),
                "--batch-size",
                str(args.batch_size),
            ]
            command += ["--x64"] * args.x64 + ["--no-xla-memory"] * args.no_xla_memory
            command += ["--plain"] * plain
            completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
            if completed.returncode or not lines:
                print(f"{size}: failed (rc {completed.returncode})\n{completed.stderr[-3000:]}")
                continue
            row = json.loads(lines[-1][len("RESULT ") :])
            rows.append(row)
            by_variant[row["variant"]] = row
            _print_row(row)
            if row.get("device_memory"):
                print(f"{'':>8} device memory: {row['device_memory']}")
        if len(by_variant) == 2:
            f, p = by_variant["factored"], by_variant["plain"]

            def ratio(key):
                return p[key] / f[key] if p.get(key) and f.get(key) else float("nan")

            print(
                f"{'':>8} plain / factored: steady {ratio('steady_solve_s'):.1f}x, "
                f"validate=off {ratio('steady_solve_validate_off_s'):.1f}x, "
                f"first solve {ratio('first_solve_s'):.2f}x"
            )
    factored = [r for r in rows if r["variant"] == "factored"]
    for row in factored:
        if row.get("steady_solve_validate_off_s"):
            print(
                f"{row['size']}: validated / validate=off "
                f"{row['steady_solve_s'] / row['steady_solve_validate_off_s']:.2f}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
