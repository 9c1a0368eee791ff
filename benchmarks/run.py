"""The benchmark suite: compile time, solve time, simulation time, memory, throughput.

    python benchmarks/run.py            # realistic sizes (minutes on 2 cores)
    python benchmarks/run.py --quick    # small sizes, a smoke run for CI (the fresh-process
                                        # compiles on the retirement model only)

Compile time is reported separately from run time (median of repeats after a warm-up,
with `block_until_ready`); memory is XLA's own compiled temp size; variants are compared
as ratios within one run. Results are printed as a table and written as JSON.

Cold start and per-call overhead (`overhead.py`) and compile time against the number of
regimes and user functions (`compile_regimes.py`) run as their own sections, each in
fresh processes (see their docstrings and docs/benchmarking.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _models
from benchmarks._timing import interleaved, steady_time
from benchmarks.reference_retirement import make_solve

SIZES = {
    "full": {
        "retirement": {"n_periods": 10, "n_wealth": 1000, "n_consumption": 5000},
        "precautionary": {"n_periods": 10, "n_wealth": 200, "n_consumption": 400},
        "large": {"n_periods": 3, "n_wealth": 1000, "n_consumption": 1000},
        "n_subjects": 100_000,
        "repeats": 3,
        "compile_rounds": 3,
    },
    "quick": {
        "retirement": {"n_periods": 4, "n_wealth": 100, "n_consumption": 200},
        "precautionary": {"n_periods": 4, "n_wealth": 40, "n_consumption": 60},
        "large": {"n_periods": 2, "n_wealth": 40, "n_consumption": 50},
        "n_subjects": 1_000,
        "repeats": 2,
        "compile_rounds": 1,
    },
}


def _compile(jitted, *args, **kwargs):
    start = time.perf_counter()
    compiled = jitted.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - start


def state_action_points(model) -> int:
    """State-action evaluations per period, summed over regimes."""
    total = 0
    for regime in model.plan.regimes.values():
        sizes = [regime.grids[n].n_points for n in (*regime.states, *regime.actions)]
        total += math.prod(sizes)
    return total


def _initial_conditions(name: str, n: int):
    key = jax.random.key(42)
    wealth = jax.random.uniform(key, (n,), minval=1.0, maxval=50.0)
    if name == "retirement":
        return {"regime": jnp.zeros(n, dtype=jnp.int32), "wealth": wealth}
    if name == "precautionary":
        return {
            "regime": jnp.zeros(n, dtype=jnp.int32),
            "wealth": wealth,
            "income:index": jnp.full(n, 3, dtype=jnp.int32),
        }
    return {
        "regime": jnp.zeros(n, dtype=jnp.int32),
        "wealth": wealth,
        "income:index": jnp.full(n, 3, dtype=jnp.int32),
        "health": jnp.ones(n, dtype=jnp.int32),
        "skill": jnp.arange(n, dtype=jnp.int32) % 4,
    }


def bench_model(name: str, build, params, sizes: dict, n_subjects: int, repeats: int) -> dict:
    model = build(**sizes)
    compiled, compile_s = _compile(model._solve, params, validate=True)
    solve_s = steady_time(lambda: compiled(params), repeats)
    memory = compiled.memory_analysis()
    solution = model.solve(params)
    initial = _initial_conditions(name, n_subjects)
    start = time.perf_counter()
    model.simulate(params, initial, solution=solution, key=jax.random.key(0))
    simulate_first_s = time.perf_counter() - start
    start = time.perf_counter()
    model.simulate(params, initial, solution=solution, key=jax.random.key(1))
    simulate_s = time.perf_counter() - start
    points = state_action_points(model) * sizes["n_periods"]
    cores = os.cpu_count() or 1
    return {
        "model": name,
        **sizes,
        "state_action_points_per_period": state_action_points(model),
        "compile_s": compile_s,
        "solve_s": solve_s,
        "simulate_s": simulate_s,
        "simulate_first_call_s": simulate_first_s,
        "n_subjects": n_subjects,
        "temp_bytes": memory.temp_size_in_bytes if memory else None,
        "evaluations_per_s": points / solve_s,
        "evaluations_per_s_per_core": points / solve_s / cores,
        "_compiled": compiled,  # for the interleaved reference timing; not written out
    }


def bench_reference(sizes: dict, params, repeats: int, library_row: dict) -> dict:
    """The hand-fused references (plain and tuned), timed interleaved with the library.

    Each round times the library, then each reference, so that a noisy machine slows
    all of them alike; the ratios are of the medians over the rounds.
    """
    library = library_row.pop("_compiled")
    shape = (sizes["n_periods"], sizes["n_wealth"], sizes["n_consumption"])
    compiled, compile_s = {}, {}
    for variant in ("plain", "tuned"):
        jitted = jax.jit(make_solve(*shape, tuned=variant == "tuned"))
        compiled[variant], compile_s[variant] = _compile(jitted, params)
    runs = {"library": library, **compiled}
    for fn in runs.values():
        jax.block_until_ready(fn(params))
    times = interleaved(
        {name: (lambda fn=fn: fn(params)) for name, fn in runs.items()}, max(repeats, 5)
    )
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "reference_compile_s": compile_s["plain"],
        "reference_solve_s": median["plain"],
        "tuned_reference_compile_s": compile_s["tuned"],
        "tuned_reference_solve_s": median["tuned"],
        "library_solve_s_interleaved": median["library"],
        "solve_ratio_library_to_reference": median["library"] / median["plain"],
        "solve_ratio_library_to_tuned_reference": median["library"] / median["tuned"],
        "compile_ratio_library_to_reference": library_row["compile_s"] / compile_s["plain"],
    }


_COMPILE_IN_FRESH_PROCESS = """
import json, sys, time
sys.path.insert(0, {root!r})
import jax
jax.config.update("jax_enable_compilation_cache", {cache!r})
from benchmarks import _models
from benchmarks._timing import interleaved, steady_time
build, params = {{
    "retirement": (_models._retirement, _models.RETIREMENT_PARAMS),
    "precautionary": (_models._precautionary, _models.PRECAUTIONARY_PARAMS),
    "large": (_models._large, _models.LARGE_PARAMS),
}}[{name!r}]
model = build(**{sizes!r})
start = time.perf_counter()
model._solve.lower(params, validate=True).compile()
print(json.dumps(time.perf_counter() - start))
"""


def _compile_in_fresh_process(name: str, sizes: dict, cache_dir: str | None = None) -> float:
    """Lower + compile time of one model in a fresh interpreter; with `cache_dir`, using
    (and filling) the persistent compilation cache there."""
    code = _COMPILE_IN_FRESH_PROCESS.format(
        root=str(Path(__file__).resolve().parents[1]),
        name=name,
        sizes=sizes,
        cache=cache_dir is not None,
    )
    env = dict(os.environ)
    if cache_dir is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def cache_compile(name: str, sizes: dict) -> dict:
    """Compile time in a fresh process with an empty persistent cache, then in another
    fresh process that finds the first one's entry."""
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = _compile_in_fresh_process(name, sizes, cache_dir)
        warm = _compile_in_fresh_process(name, sizes, cache_dir)
    return {"cache_cold_compile_s": cold, "cache_warm_compile_s": warm}


def compile_scaling(name: str, sizes: dict, rounds: int = 2) -> dict:
    """Compile time at 6 / 48 / 96 periods, each in a fresh process (a process that has
    compiled a program of the same structure compiles the next one faster, which would
    flatter the longer horizons): the fastest of `rounds` interleaved rounds, since a
    compile's noise on a shared machine is one-sided."""
    times: dict[int, list[float]] = {6: [], 48: [], 96: []}
    for _ in range(rounds):
        for n_periods in times:
            times[n_periods].append(
                _compile_in_fresh_process(name, {**sizes, "n_periods": n_periods})
            )
    scaled = {n: min(t) for n, t in times.items()}
    return {
        "compile_s_by_periods": scaled,
        "compile_ratio_96_to_6": scaled[96] / scaled[6],
        "compile_ratio_48_to_6": scaled[48] / scaled[6],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/latest.json"))
    args = parser.parse_args()
    # Measure real compiles: the persistent cache would make repeated compiles free.
    jax.config.update("jax_enable_compilation_cache", False)
    config = SIZES["quick" if args.quick else "full"]
    models = {
        "retirement": (_models._retirement, _models.RETIREMENT_PARAMS),
        "precautionary": (_models._precautionary, _models.PRECAUTIONARY_PARAMS),
        "large": (_models._large, _models.LARGE_PARAMS),
    }
    rows = []
    for name, (build, params) in models.items():
        row = bench_model(
            name, build, params, config[name], config["n_subjects"], config["repeats"]
        )
        if name == "retirement":
            row.update(bench_reference(config[name], params, config["repeats"], row))
        row.pop("_compiled", None)
        # The fresh-process compiles (by horizon, with the persistent cache) are most of a
        # run's time; a quick run measures them on the first model only.
        if not args.quick or not rows:
            row.update(compile_scaling(name, config[name], config["compile_rounds"]))
            row.update(cache_compile(name, config[name]))
        rows.append(row)
        _print_row(row)
    dcegm = dcegm_rows(args.quick)
    overhead = script_rows("overhead.py", ["--quick", "--no-api"] if args.quick else [])
    regimes = script_rows("compile_regimes.py", ["--quick", "--no-kernels"] if args.quick else [])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "jax": jax.__version__,
                "devices": str(jax.devices()),
                "x64": bool(jax.config.jax_enable_x64),
                "rows": rows,
                "dcegm": dcegm,
                "overhead": overhead,
                "compile_regimes": regimes,
            },
            indent=2,
            default=str,
        )
    )
    print(f"\nwrote {args.json}")


def dcegm_rows(quick: bool) -> dict:
    """DC-EGM against grid search on the quick start's retirement model (`benchmarks/dcegm.py`, in
    its own process because it runs in float64); quick runs skip the fresh-process cold
    starts and the Euler-error rows."""
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "dcegm.json"
        command = [sys.executable, str(Path(__file__).with_name("dcegm.py")), "--json", str(output)]
        if quick:
            command += ["--quick", "--no-euler"]
        completed = subprocess.run(command, capture_output=True, text=True, check=True)
        print("\n" + completed.stdout.strip())
        return json.loads(output.read_text())


def script_rows(script: str, options: list[str]) -> dict:
    """The JSON of another benchmark script run in its own process: `overhead.py` (cold
    start and per-call overhead, float32 and float64 in fresh processes) and
    `compile_regimes.py` (compile time against regimes and user functions). Quick runs
    measure float64 retirement only, without the quick start's cold-start model, and skip the
    kernel counts."""
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.json"
        command = [sys.executable, str(Path(__file__).with_name(script)), "--json", str(output)]
        completed = subprocess.run([*command, *options], capture_output=True, text=True)
        if completed.returncode != 0:
            raise RuntimeError(f"{script} failed:\n{completed.stderr[-4000:]}")
        print(f"\n== {script}\n" + completed.stdout.strip())
        return json.loads(output.read_text())


def _print_row(row: dict) -> None:
    print(
        f"\n== {row['model']}: {row['state_action_points_per_period']:,} state-action points "
        f"per period, {row['n_periods']} periods"
    )
    print(f"  compile          {row['compile_s']:8.2f} s")
    print(f"  solve            {row['solve_s']:8.3f} s (median, steady state)")
    print(
        f"  simulate         {row['simulate_s']:8.3f} s for {row['n_subjects']:,} subjects "
        f"(first call {row['simulate_first_call_s']:.2f} s incl. compile)"
    )
    if row["temp_bytes"] is not None:
        print(f"  XLA temp memory  {row['temp_bytes'] / 2**20:8.1f} MiB")
    print(
        f"  throughput       {row['evaluations_per_s']:.3e} evaluations/s "
        f"({row['evaluations_per_s_per_core']:.3e} per core)"
    )
    if "reference_solve_s" in row:
        print(
            f"  hand-fused ref   solve {row['reference_solve_s']:.3f} s, compile "
            f"{row['reference_compile_s']:.2f} s -> library/reference: solve "
            f"{row['solve_ratio_library_to_reference']:.2f}x, compile "
            f"{row['compile_ratio_library_to_reference']:.2f}x "
            f"(interleaved: library {row['library_solve_s_interleaved']:.3f} s)"
        )
        print(
            f"  tuned ref        solve {row['tuned_reference_solve_s']:.3f} s (pair gather) "
            f"-> library/tuned: {row['solve_ratio_library_to_tuned_reference']:.2f}x"
        )
    if "cache_cold_compile_s" not in row:
        return
    print(
        f"  persistent cache fresh process: cold {row['cache_cold_compile_s']:.2f} s, warm "
        f"{row['cache_warm_compile_s']:.2f} s"
    )
    scaled = row["compile_s_by_periods"]
    print(
        f"  compile by periods 6/48/96 (fresh processes): {scaled[6]:.2f} / {scaled[48]:.2f} / "
        f"{scaled[96]:.2f} s (96/6 = {row['compile_ratio_96_to_6']:.2f})"
    )


if __name__ == "__main__":
    main()
