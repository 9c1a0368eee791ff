"""Cold start and per-call overhead of `model.solve`, in float32 and float64.

    python benchmarks/overhead.py                 # every model, both dtypes (minutes)
    python benchmarks/overhead.py --quick         # float64 retirement, tiny sizes (smoke)
    python benchmarks/overhead.py --dtype float64 --model retirement \\
        --size retirement=10,200,1000 --rounds 21 --cold-rounds 3

For every benchmark model of `benchmarks/_models.py` and every dtype, each in fresh
processes with the persistent compilation cache off (`jax_enable_x64` is set at start):

- **cold**: the first `model.solve(params)` (wall time, and the number of XLA programs
  compiled during it, from a `jax.monitoring` listener), and, in another fresh process
  so that neither warms the other, the same program's tracing, lowering and XLA
  compilation timed separately (`model._solve.trace(...)`, `.lower()`, `.compile()`);
- **steady**: medians over interleaved rounds of `model.solve(params)`, of
  `jax.jit(model.solve)(params)` and of the compiled program alone
  (`model._solve.lower(params, validate=True, progress=None).compile()`, called
  directly). The per-call overhead is `model.solve` minus the compiled program, in ms,
  and the ratio `model.solve / jit`;
- for the retirement model, the hand-fused reference (`reference_retirement.make_solve`)
  in the same interleaved rounds, and the ratio `model.solve / reference`.

Plus the issue's cold-start model: the quick start's retirement model (5 periods, wealth 100 x
consumption 500, no taste shocks), float64: first solve and its trace / lower / compile
split, also in fresh processes with an empty cache.

Cold numbers are the fastest of `--cold-rounds` fresh processes (a compile's noise on a
shared machine is one-sided). Prints a table and writes JSON
(`benchmarks/results/overhead.json` by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks._timing, when run as a script

MODELS = ("retirement", "precautionary", "large")
DTYPES = ("float32", "float64")

# (n_periods, n_wealth, n_consumption); retirement at the size.
SIZES = {
    "full": {
        "retirement": (10, 200, 1000),
        "precautionary": (10, 200, 400),
        "large": (3, 200, 200),
    },
    "quick": {
        "retirement": (3, 30, 60),
        "precautionary": (3, 20, 30),
        "large": (2, 10, 10),
    },
}
API_MODEL = {"n_periods": 5, "n_wealth": 100, "n_consumption": 500, "taste_shocks": False}

# One child for every measurement: it sets the dtype before anything else touches JAX.
CHILD = r"""
import json, sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
import jax
jax.config.update("jax_enable_x64", spec["dtype"] == "float64")
jax.config.update("jax_enable_compilation_cache", False)
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiles.append(seconds)
    if event == "/jax/core/compile/backend_compile_duration" else None
)
from benchmarks import _models, overhead  # lcm_eqx's import is not the build
imported = time.perf_counter()
model, params = overhead.build(spec)
built = time.perf_counter()
jax.block_until_ready(jax.numpy.zeros(1) + 1)  # JAX start-up, not the solve
compiles.clear()
result = {"import_s": imported - start, "build_s": built - imported}
if spec["kind"] == "first_call":
    t0 = time.perf_counter()
    jax.block_until_ready(model.solve(params))
    result["first_s"] = time.perf_counter() - t0
    result["n_compiled"] = len(compiles)
    result["backend_compile_s"] = sum(compiles)
    t0 = time.perf_counter()
    jax.block_until_ready(model.solve(params))
    result["second_s"] = time.perf_counter() - t0
elif spec["kind"] == "split":
    t0 = time.perf_counter()
    traced = model._solve.trace(params, validate=True, progress=None)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    result.update(trace_s=t1 - t0, lower_s=t2 - t1, compile_s=t3 - t2, total_s=t3 - t0)
else:
    result = overhead.steady(model, params, spec)
print(json.dumps(result))
"""


def build(spec: dict):
    """The model and params a child measures (`spec["model"]` is a benchmark model name
    or `"api"`, the quick start's retirement model)."""
    from benchmarks import _models

    if spec["model"] == "api":
        params = {k: v for k, v in _models.RETIREMENT_PARAMS.items() if k != "working"}
        return _models._retirement(**API_MODEL), params
    n_periods, n_wealth, n_consumption = spec["size"]
    build_fn, params = {
        "retirement": (_models._retirement, _models.RETIREMENT_PARAMS),
        "precautionary": (_models._precautionary, _models.PRECAUTIONARY_PARAMS),
        "large": (_models._large, _models.LARGE_PARAMS),
    }[spec["model"]]
    return build_fn(n_periods, n_wealth=n_wealth, n_consumption=n_consumption), params


def steady(model, params, spec: dict) -> dict:
    """Interleaved steady-state times (seconds, medians over `spec["rounds"]`)."""
    import jax

    from benchmarks._timing import interleaved
    from benchmarks.reference_retirement import make_solve

    compiled = model._solve.lower(params, validate=True, progress=None).compile()
    jitted = jax.jit(model.solve)
    calls = {
        "solve": lambda: model.solve(params),
        "jit": lambda: jitted(params),
        "compiled": lambda: compiled(params),
    }
    if spec["model"] == "retirement":
        reference = jax.jit(make_solve(*spec["size"]))
        calls["reference"] = lambda: reference(params)
    for call in calls.values():  # compile and warm up outside the timings
        jax.block_until_ready(call())
        jax.block_until_ready(call())
    times = interleaved(calls, spec["rounds"])
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {f"{name}_s": t for name, t in median.items()}
    result["overhead_ms"] = 1e3 * (median["solve"] - median["compiled"])
    result["jit_overhead_ms"] = 1e3 * (median["jit"] - median["compiled"])
    result["ratio_solve_to_jit"] = median["solve"] / median["jit"]
    result["ratio_solve_to_compiled"] = median["solve"] / median["compiled"]
    if "reference" in median:
        # The ratio means something only if both solve the same model.
        import numpy as np

        solution = model.solve(params)
        working, retired = calls["reference"]()
        result["reference_max_abs_diff"] = max(
            float(np.max(np.abs(np.asarray(working) - solution.values["working"]))),
            float(np.max(np.abs(np.asarray(retired) - solution.values["retired"]))),
        )
        result["ratio_solve_to_reference"] = median["solve"] / median["reference"]
        result["ratio_compiled_to_reference"] = median["compiled"] / median["reference"]
    return result


def run_child(spec: dict) -> dict:
    """One measurement in a fresh interpreter with an empty persistent cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        completed = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
        )
    if completed.returncode != 0:
        raise RuntimeError(f"child {spec} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def cold(spec: dict, rounds: int) -> dict:
    """First call and trace / lower / compile split, each in its own fresh process,
    interleaved over `rounds`; the fastest round of each."""
    first, split = [], []
    for _ in range(rounds):
        first.append(run_child({**spec, "kind": "first_call"}))
        split.append(run_child({**spec, "kind": "split"}))
    first_best = min(first, key=lambda r: r["first_s"])
    split_best = min(split, key=lambda r: r["total_s"])
    return {
        "first_s": first_best["first_s"],
        "second_s": first_best["second_s"],
        "n_compiled": first_best["n_compiled"],
        "backend_compile_s": first_best["backend_compile_s"],
        "import_s": first_best["import_s"],
        "build_s": first_best["build_s"],
        "trace_s": split_best["trace_s"],
        "lower_s": split_best["lower_s"],
        "compile_s": split_best["compile_s"],
        "split_total_s": split_best["total_s"],
        "cold_rounds": rounds,
    }


def measure(dtypes, models, sizes, rounds: int, cold_rounds: int, api: bool) -> dict:
    rows = []
    for dtype in dtypes:
        for name in models:
            spec = {"model": name, "dtype": dtype, "size": list(sizes[name])}
            row = {"model": name, "dtype": dtype, **dict(zip(_SIZE_KEYS, sizes[name], strict=True))}
            row["cold"] = cold(spec, cold_rounds)
            row["steady"] = run_child({**spec, "kind": "steady", "rounds": rounds})
            rows.append(row)
            print_row(row)
    result = {"rows": rows}
    if api:
        spec = {"model": "api", "dtype": "float64"}
        result["api_cold_start"] = {**API_MODEL, "dtype": "float64", **cold(spec, cold_rounds)}
        print_api(result["api_cold_start"])
    return result


_SIZE_KEYS = ("n_periods", "n_wealth", "n_consumption")


def print_header() -> None:
    print(
        f"{'model':<14}{'dtype':<8}{'first':>8}{'progs':>6}{'trace':>8}{'lower':>8}"
        f"{'compile':>8}  {'solve':>9}{'jit':>9}{'compiled':>9}{'ovh':>8}{'s/jit':>7}"
        f"{'s/ref':>7}"
    )
    print(
        f"{'':<14}{'':<8}{'s':>8}{'':>6}{'s':>8}{'s':>8}{'s':>8}  {'ms':>9}{'ms':>9}"
        f"{'ms':>9}{'ms':>8}{'':>7}{'':>7}"
    )


def print_row(row: dict) -> None:
    c, s = row["cold"], row["steady"]
    ref = f"{s['ratio_solve_to_reference']:>7.2f}" if "ratio_solve_to_reference" in s else ""
    print(
        f"{row['model']:<14}{row['dtype']:<8}{c['first_s']:>8.2f}{c['n_compiled']:>6}"
        f"{c['trace_s']:>8.2f}{c['lower_s']:>8.2f}{c['compile_s']:>8.2f}  "
        f"{1e3 * s['solve_s']:>9.2f}{1e3 * s['jit_s']:>9.2f}{1e3 * s['compiled_s']:>9.2f}"
        f"{s['overhead_ms']:>8.2f}{s['ratio_solve_to_jit']:>7.2f}{ref}",
        flush=True,
    )
    if "reference_max_abs_diff" in s:
        print(f"{'':<22}(reference vs library: max |difference| {s['reference_max_abs_diff']:.1e})")


def print_api(row: dict) -> None:
    print(
        f"\nThe quick start's retirement model (5 periods, wealth 100 x consumption 500, float64), "
        f"fresh process, empty cache:\n  first solve {row['first_s']:.2f} s "
        f"({row['n_compiled']} program(s) compiled, {row['backend_compile_s']:.2f} s in XLA); "
        f"split: trace {row['trace_s']:.2f} s, lower {row['lower_s']:.2f} s, compile "
        f"{row['compile_s']:.2f} s; second solve {1e3 * row['second_s']:.1f} ms; "
        f"import {row['import_s']:.2f} s, build {row['build_s']:.3f} s"
    )


def _size(text: str) -> tuple[str, tuple[int, int, int]]:
    name, _, dims = text.partition("=")
    values = tuple(int(v) for v in dims.split(","))
    if name not in MODELS or len(values) != 3:
        raise argparse.ArgumentTypeError("expected MODEL=PERIODS,WEALTH,CONSUMPTION")
    return name, values


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="float64 retirement, tiny sizes")
    parser.add_argument("--dtype", choices=DTYPES, action="append", help="repeatable")
    parser.add_argument("--model", choices=MODELS, action="append", help="repeatable")
    parser.add_argument(
        "--size",
        type=_size,
        action="append",
        default=[],
        help="MODEL=PERIODS,WEALTH,CONSUMPTION (repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved steady rounds")
    parser.add_argument("--cold-rounds", type=int, default=None, help="fresh processes per cold")
    parser.add_argument(
        "--no-api", action="store_true", help="skip the quick start's cold-start model"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/overhead.json")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    sizes = {**SIZES[mode], **dict(args.size)}
    dtypes = args.dtype or (["float64"] if args.quick else list(DTYPES))
    models = args.model or (["retirement"] if args.quick else list(MODELS))
    rounds = args.rounds or (5 if args.quick else 21)
    cold_rounds = args.cold_rounds or (1 if args.quick else 3)
    print_header()
    result = measure(dtypes, models, sizes, rounds, cold_rounds, not args.no_api)
    from benchmarks._timing import write_results

    write_results(args.json, mode, rounds, result)


if __name__ == "__main__":
    main()
