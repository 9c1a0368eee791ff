"""Mahler & Yum (2024) (`examples/mahler_yum.py`) at several sizes: pairs per period,
compile and solve times, evaluations per second, XLA memory and peak RSS.

Each size runs in a fresh process (so that its compile time and peak RSS are its own).
For each: the state x action pairs per period of the alive regime, the first
`model.solve` (trace, compile and run) and the steady solve (median of `--repeats`
calls, validated and with `validate="off"`), pairs evaluated per second of the steady
solve, XLA's compiled temp memory (`model.describe(params)`), the simulation of
`--subjects` subjects, and the process's peak RSS.

    python benchmarks/mahler_yum.py [--sizes tiny,reduced,medium] [--repeats 2] [--x64]
                                    [--subjects 2000] [--json PATH]
    python benchmarks/mahler_yum.py --size full                  # describe() + estimate only
    python benchmarks/mahler_yum.py --size full --run-full --batch-size 5 [--x64]

`--size full` without `--run-full` prints `describe()` and the arithmetic memory of one
period's plain state x action product; it solves nothing (on a 2-core CPU the full model
does not fit today: issue 37). `--batch-size k` splays the wealth axis in chunks of `k`
(`model.with_batch_size("wealth", k)`). On a GPU, `benchmarks/device_check.sh` runs the
full model once this way and adds the device's memory statistics.
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


def measure(size: str, *, repeats: int, subjects: int, batch_size: int, xla_memory: bool) -> dict:
    """One size in this process: the numbers listed in the module docstring."""
    import jax

    my = _example()
    model, params, initial_conditions = my.build(size, n_subjects=subjects)
    if batch_size:
        model = model.with_batch_size("wealth", batch_size)
    counts = pair_counts(my.SIZES[size])
    evaluations = counts["pairs_per_period"] * counts["alive_periods"]
    out = {
        "size": size,
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
    if xla_memory:
        description = model.describe(params)
        out["xla_temp_bytes"] = description.temp_bytes
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


def describe_full(x64: bool) -> None:
    my = _example()
    model, _, _ = my.build("full", n_subjects=0)
    print(model.describe())
    counts = pair_counts(my.SIZES["full"])
    itemsize = 8 if x64 else 4
    print(
        f"\nfull size: {counts['states']:,} states x {counts['actions']:,} actions = "
        f"{counts['pairs_per_period']:.3e} pairs per period, "
        f"{counts['alive_periods']} alive periods "
        f"({counts['pairs_per_period'] * counts['alive_periods']:.3e} pairs in all).\n"
        f"One period's plain product as one {('float64' if x64 else 'float32')} array: "
        f"{counts['pairs_per_period'] * itemsize / 2**30:,.1f} GiB "
        f"(splayed on wealth in chunks of k: x k/50)."
    )


def _print_row(row: dict) -> None:
    def g(key, fmt="{:.2f}"):
        value = row.get(key)
        return "-" if value is None else fmt.format(value)

    temp = row.get("xla_temp_bytes")
    xla = "-" if temp is None else f"{temp / 2**20:.0f} MiB"
    print(
        f"{row['size']:>8} {row['dtype']:>7} {row['pairs_per_period']:>14,} "
        f"{g('first_solve_s'):>9} {g('steady_solve_s'):>9} {g('steady_solve_validate_off_s'):>9} "
        f"{g('pairs_per_s', '{:.2e}'):>10} {xla:>10} "
        f"{g('simulate_s'):>8} {g('peak_rss_gib'):>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="tiny,reduced,medium")
    parser.add_argument("--size", help="one size (e.g. full); overrides --sizes")
    parser.add_argument("--run-full", action="store_true", help="really solve the full size")
    parser.add_argument("--batch-size", type=int, default=0, help="splay wealth in chunks of k")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--subjects", type=int, default=2_000)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--no-xla-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
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
        )
        print("RESULT " + json.dumps(row))
        return

    sizes = [args.size] if args.size else args.sizes.split(",")
    if "full" in sizes and not args.run_full:
        describe_full(args.x64)
        sizes = [s for s in sizes if s != "full"]
        if not sizes:
            return
    print(
        f"{'size':>8} {'dtype':>7} {'pairs/period':>14} {'first s':>9} {'steady s':>9} "
        f"{'v=off s':>9} {'pairs/s':>10} {'XLA temp':>10} {'sim s':>8} {'RSS GiB':>8}"
    )
    rows = []
    for size in sizes:
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
        completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
        if completed.returncode or not lines:
            print(f"{size}: failed (rc {completed.returncode})\n{completed.stderr[-3000:]}")
            continue
        row = json.loads(lines[-1][len("RESULT ") :])
        rows.append(row)
        _print_row(row)
        if row.get("device_memory"):
            print(f"{'':>8} device memory: {row['device_memory']}")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        ratio = b["pairs_per_period"] / a["pairs_per_period"]
        time_ratio = b["steady_solve_s"] / a["steady_solve_s"]
        print(
            f"\n{b['size']} / {a['size']}: {ratio:.0f}x the pairs, "
            f"{b['steady_solve_s'] / a['steady_solve_s']:.1f}x the steady time "
            f"(log-log slope {math.log(time_ratio) / math.log(ratio):.2f})."
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
