"""The device lane: each program of the library on the default device (a TPU, a GPU, or
the CPU), timed and checked against the same program on the host's CPU, in one process.

For each program: the first call (trace, compile and run, with an empty compilation
cache) and the steady call on the device; the steady call of the same program on the
host CPU (float32, in this process); the largest relative difference of the device's
results from the CPU's float32 results and from a float64 CPU run (a child process on
the CPU alone, started first so that it runs beside the device's work); the device's
peak memory; and, for the full solve, the fraction of the device's memory bandwidth
that the value arrays' compulsory traffic takes (each period's array written once and
read once as the next period's continuation: a floor on what the solve moves).

    python benchmarks/device_check.py               # the programs of docs/tuning.md
    python benchmarks/device_check.py --quick       # small sizes (a smoke run, any device)
    python benchmarks/device_check.py --only solve,simulate --json out.json

Programs: `solve` (Mahler–Yum full, validated and `validate="off"`), `simulate` (10^4
full Mahler–Yum subjects), `gradient` (`jax.grad` of the mean period-0 value in the
effort elasticity, reduced Mahler–Yum), `quickstart` (the README's retirement model),
`dcegm` (examples/retirement_dcegm.py's model), `negm` (examples/durables.py, 5 periods),
`kinks` (the consumption-floor model of tests/test_budget_kinks.py, 3 periods).
`benchmarks/device_check.sh` runs it with a time limit and keeps its output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

# In this order: the full solve's validated compile, the one that took a TPU minutes,
# last, so that a regression there leaves the others' rows.
PROGRAMS = ("quickstart", "dcegm", "negm", "kinks", "gradient", "simulate", "solve")

# Published peak memory bandwidth by `device_kind`, bytes per second.
PEAK_BANDWIDTH = {
    "TPU v5 lite": 819e9,
    "TPU v5e": 819e9,
    "TPU v4": 1228e9,
    "TPU v5p": 2765e9,
    "TPU v6 lite": 1640e9,
    "NVIDIA H100 80GB HBM3": 3.35e12,
    "NVIDIA H200": 4.8e12,
    "NVIDIA A100-SXM4-80GB": 2.04e12,
}


def _matplotlib_optional() -> None:
    """The examples import matplotlib (for their figures, drawn in `main` only); a device
    machine may have none."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        import types

        stub = types.ModuleType("matplotlib")
        stub.use = lambda *args, **kwargs: None  # type: ignore[attr-defined]
        sys.modules["matplotlib"] = stub
        sys.modules["matplotlib.pyplot"] = types.ModuleType("matplotlib.pyplot")


def sizes(quick: bool) -> dict:
    if quick:
        return {"solve": "tiny", "simulate": ("tiny", 500), "gradient": "tiny", "negm": 3}
    return {"solve": "full", "simulate": ("full", 10_000), "gradient": "reduced", "negm": 5}


# ----------------------------------------------------------------------------- programs
# Each builder returns `run()`: a function that calls the program once and returns its
# results as a dict of numpy-convertible arrays (the values compared), built anew in the
# current dtype, so that the float64 child process builds the same programs.


def _mahler_yum(size, **kwargs):
    import mahler_yum

    return mahler_yum.build(size, **kwargs)


def build_solve(size, validate="raise"):
    model, params, _ = _mahler_yum(size, n_subjects=4)

    def run():
        return {"alive": model.solve(params, validate=validate).values["alive"]}

    return run


def build_simulate(size_and_subjects):
    import jax
    import numpy as np

    size, n = size_and_subjects
    model, params, initial = _mahler_yum(size, n_subjects=n)
    solution = model.solve(params, validate="off")
    calls = iter(range(10**6))

    def run():
        key = jax.random.key(next(calls) % 2)
        result = model.simulate(params, initial, solution=solution, key=key)
        # By period, the means over the subjects present: two devices choose apart where
        # two actions tie to float32 round-off, and the panels then part.
        present = result.present
        count = np.maximum(present.sum(axis=1), 1)
        return {
            f"mean {name}": np.where(present, array, 0.0).sum(axis=1) / count
            for name, array in (("value", result.value), ("wealth", result.states["wealth"]))
        }

    return run


def build_gradient(size):
    import jax
    import jax.numpy as jnp

    model, params, _ = _mahler_yum(size, n_subjects=4)

    def mean_value(elasticity):
        p = {**params, "alive": {**params["alive"]}}
        p["alive"]["effort_cost"] = {
            **params["alive"]["effort_cost"],
            "effort_elasticity": elasticity,
        }
        return jnp.mean(model.solve(p).value("alive", 0))

    program = jax.jit(jax.value_and_grad(mean_value))
    x = jnp.asarray(params["alive"]["effort_cost"]["effort_elasticity"])

    def run():
        value, gradient = program(x)
        return {"value": value, "gradient": gradient}

    return run


def _solve_values(model, params):
    def run():
        return dict(model.solve(params).values)

    return run


def build_quickstart(_=None):
    import importlib

    retirement = importlib.import_module("retirement")
    return _solve_values(retirement.model, retirement.params)


def build_dcegm(_=None):
    import importlib

    example = importlib.reload(importlib.import_module("retirement_dcegm"))
    return _solve_values(example.MODELS["DC-EGM"], example.params)


def build_negm(n_periods):
    import durables

    model, params = durables.build(n_periods=n_periods)[:2]
    return _solve_values(model, params)


def build_kinks(_=None):
    import jax

    x64 = jax.config.jax_enable_x64
    from tests import test_budget_kinks as floor_model

    jax.config.update("jax_enable_x64", x64)  # the test module turns float64 on
    return _solve_values(floor_model.build(n_periods=3), floor_model.PARAMS)


BUILDERS = {
    "solve": build_solve,
    "simulate": build_simulate,
    "gradient": build_gradient,
    "quickstart": build_quickstart,
    "dcegm": build_dcegm,
    "negm": build_negm,
    "kinks": build_kinks,
}


# ----------------------------------------------------------------------------- helpers


def _numpy(results) -> dict:
    import jax
    import numpy as np

    return {k: np.asarray(v) for k, v in jax.device_get(results).items()}


def largest_relative_difference(results: dict, reference: dict) -> float | None:
    """Over the entries finite in both, relative to the value's scale (a value near 0
    is compared with the array's typical size). None where nothing is comparable."""
    import numpy as np

    largest = None
    for key, ref in reference.items():
        a = np.asarray(results[key], np.float64).ravel()
        b = np.asarray(ref, np.float64).ravel()
        finite = np.isfinite(a) & np.isfinite(b)
        if not finite.any():
            continue
        scale = np.maximum(np.abs(b[finite]), 1e-3 * np.mean(np.abs(b[finite])) + 1e-30)
        difference = float(np.max(np.abs(a[finite] - b[finite]) / scale))
        largest = difference if largest is None else max(largest, difference)
    return largest


def _timed(run) -> tuple[dict, float]:
    import jax

    start = time.perf_counter()
    out = jax.block_until_ready(run())
    return out, time.perf_counter() - start


def _steady(run, repeats: int) -> float:
    times = [_timed(run)[1] for _ in range(repeats)]
    return sorted(times)[len(times) // 2]


def _peak_memory() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def stream_bandwidth() -> float:
    """Bytes per second of `y = 2x + 1` over 256 MiB of float32 on the default device
    (read once, written once), best of 5."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((64 * 2**20,), jnp.float32)
    f = jax.jit(lambda x: 2.0 * x + 1.0)
    jax.block_until_ready(f(x))
    best = min(_timed(lambda: f(x))[1] for _ in range(5))
    return 2 * x.nbytes / best


# ----------------------------------------------------------------------------- float64


def float64_references(names, quick: bool, path: Path) -> None:
    """The float64 results of `names` on the CPU, written to `path` (an .npz)."""
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    chosen = sizes(quick)
    out = {}
    for name in names:
        if name == "simulate":  # draws differ by dtype: compared with float32 alone
            continue
        results = _numpy(BUILDERS[name](chosen.get(name))())
        out.update({f"{name}/{k}": v for k, v in results.items()})
    np.savez(path, **out)


def _start_float64_child(names, quick: bool, path: Path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, __file__, "--float64-to", str(path), "--only", ",".join(names)]
    command += ["--quick"] * quick
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


# ----------------------------------------------------------------------------- the lane


def check(names, quick: bool, repeats: int) -> list[dict]:
    import jax
    import numpy as np

    import lcm_eqx  # noqa: F401  (its JAX defaults)

    chosen = sizes(quick)
    cpu = jax.devices("cpu")[0]
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}")
    reference_path = Path(tempfile.mkdtemp()) / "float64.npz"
    child = _start_float64_child(names, quick, reference_path)
    rows = []
    for name in names:
        argument = chosen.get(name)
        row: dict = {"program": name}
        variants = {"": {}}
        if name == "solve":
            variants["off"] = {"validate": "off"}
        for label, options in variants.items():
            run = BUILDERS[name](argument, **options)
            results, first = _timed(run)
            row[f"first{label}_s"] = first
            row[f"steady{label}_s"] = _steady(run, repeats)
        device_results = _numpy(results)
        with jax.default_device(cpu):
            run = BUILDERS[name](argument)
            cpu_results = _numpy(_timed(run)[0])
            row["cpu_steady_s"] = _steady(run, max(repeats // 2, 1))
        row["vs_cpu_float32"] = largest_relative_difference(device_results, cpu_results)
        if name == "solve":
            # Period by period (the issue's bar: 1e-5 at every period).
            a, b = device_results["alive"], cpu_results["alive"]
            row["vs_cpu_float32_by_period"] = [
                largest_relative_difference({"v": a[t]}, {"v": b[t]}) for t in range(len(a))
            ]
            bytes_moved = 2 * a.nbytes
            row["compulsory_bytes"] = bytes_moved
            row["bandwidth_fraction"] = None
            peak = PEAK_BANDWIDTH.get(device.device_kind)
            if peak:
                row["bandwidth_fraction"] = bytes_moved / row["steady_s"] / peak
        row["_results"] = device_results
        row["peak_memory_bytes"] = _peak_memory()
        rows.append(row)
        print("RESULT " + json.dumps({k: v for k, v in row.items() if k != "_results"}))
    output, _ = child.communicate(timeout=900)
    if child.returncode == 0 and reference_path.exists():
        references = np.load(reference_path)
        for row in rows:
            prefix = row["program"] + "/"
            reference = {
                k[len(prefix) :]: references[k] for k in references if k.startswith(prefix)
            }
            if reference:
                row["vs_cpu_float64"] = largest_relative_difference(row["_results"], reference)
    else:
        print(f"float64 references failed (rc {child.returncode}):\n{output.decode()[-3000:]}")
    for row in rows:
        del row["_results"]
    return rows


def _format(value, spec="{:.3g}") -> str:
    return "-" if value is None else spec.format(value)


def print_table(rows: list[dict], bandwidth: float) -> None:
    print(
        f"{'program':>11} {'first s':>8} {'steady s':>9} {'off first':>9} {'off steady':>10} "
        f"{'CPU steady':>10} {'vs CPU f32':>10} {'vs CPU f64':>10} {'peak MiB':>8} {'BW frac':>7}"
    )
    for row in rows:
        memory = row.get("peak_memory_bytes")
        print(
            f"{row['program']:>11} {_format(row['first_s'], '{:.2f}'):>8} "
            f"{_format(row['steady_s'], '{:.4f}'):>9} "
            f"{_format(row.get('firstoff_s'), '{:.2f}'):>9} "
            f"{_format(row.get('steadyoff_s'), '{:.4f}'):>10} "
            f"{_format(row['cpu_steady_s'], '{:.4f}'):>10} "
            f"{_format(row['vs_cpu_float32']):>10} {_format(row.get('vs_cpu_float64')):>10} "
            f"{_format(memory and memory / 2**20, '{:.0f}'):>8} "
            f"{_format(row.get('bandwidth_fraction'), '{:.2f}'):>7}"
        )
    print(f"stream bandwidth of the device: {bandwidth / 1e9:.0f} GB/s (y = 2x + 1, 256 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(PROGRAMS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep-cache", action="store_true", help="use the usual cache")
    parser.add_argument("--float64-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(PROGRAMS)
    if unknown:
        parser.error(f"unknown programs {sorted(unknown)}; known: {', '.join(PROGRAMS)}")
    if not args.keep_cache:  # first calls compile: an empty cache of its own
        os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="lcm-device-check-")
    _matplotlib_optional()
    if args.float64_to:
        float64_references(names, args.quick, args.float64_to)
        return
    rows = check(names, args.quick, args.repeats)
    print_table(rows, stream_bandwidth())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
