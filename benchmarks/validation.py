"""What validation costs under `jax.jit(model.solve)`: compile and run time of the ways to report.

- `off`: `validate="off"`, no check traced;
- `flags`: the checks computed and reduced to flags, nothing reported (the difference to
  the next two is the cost of reporting);
- `callback` (what lcm_eqx does): the checks reduced to flags in the program, then one
  host callback that formats the `LcmError` message and raises or warns;
- `error_if`: the same flags, then `equinox.branched_error_if` with one message per
  (regime, period, check), chosen with the index of the first failure (an alternative
  that was measured: it cannot warn per call, raises equinox's error type, and cannot
  put the size of the violation in the message).

Compile (lower + compile in a fresh process, best of 2) and run (median of 15 calls,
interleaved over the variants) are measured separately.

`--models` measures instead what a user pays for validation on every benchmark model
(`benchmarks/_models.py`'s retirement, precautionary-savings and large models, and
Mahler–Yum at its reduced and medium sizes, `--full` adds the full size): per model, in
one process, `model.solve(params)` against `model.solve(params, validate="off")` and
the two compiled programs alone (the checks reduced to flags, and none), interleaved
call by call; the fastest and the median call of each, and their ratios to the
unvalidated one.

    python benchmarks/validation.py
    python benchmarks/validation.py --models [--rounds 21] [--full] [--only NAME]

(`--only` measures the models whose name contains NAME, e.g. `precautionary`.)
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import interleaved


def error_if_solve(model, params):
    solution = model._solve(params, validate=True)
    messages, conditions = [], []
    for regime, checks in solution.checks.items():
        for period in range(model.n_periods):
            for check in checks:
                messages.append(f"Regime {regime!r}, check {check!r}, period {period} failed.")
        conditions.append(~(solution.violations[regime] <= 0).reshape(-1))
    failed = jnp.concatenate(conditions)
    values = {
        r: eqx.branched_error_if(v, jnp.any(failed), jnp.argmax(failed), messages)
        for r, v in solution.values.items()
    }
    return eqx.tree_at(lambda s: s.values, solution, values)


def variants(model) -> dict:
    return {
        "off": functools.partial(model.solve, validate="off"),
        "flags": functools.partial(model._solve, validate=True),
        "callback": model.solve,
        "error_if": functools.partial(error_if_solve, model),
    }


def build():
    from benchmarks._models import RETIREMENT_PARAMS, _retirement

    return _retirement(10, n_wealth=200, n_consumption=1000), RETIREMENT_PARAMS


def compile_in_fresh_process(name: str) -> float:
    """Lower + compile of one variant in a fresh process (JAX caches compiled programs
    in memory by their text, so a second compile in one process would be free)."""
    out = subprocess.run(
        [sys.executable, __file__, "--compile", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


def compile_child(name: str) -> None:
    jax.config.update("jax_enable_compilation_cache", False)
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))  # JAX start-up
    model, params = build()
    fn = variants(model)[name]
    start = time.perf_counter()
    jax.jit(fn).lower(params).compile()
    print(time.perf_counter() - start)


def benchmark_models(full: bool) -> dict:
    """name -> (model, params) of the models `--models` measures."""
    from benchmarks._examples import load_example
    from benchmarks._models import (
        LARGE_PARAMS,
        PRECAUTIONARY_PARAMS,
        RETIREMENT_PARAMS,
        _large,
        _precautionary,
        _retirement,
    )

    mahler_yum = load_example("mahler_yum")
    models = {
        "retirement 10 x 200 x 1000": (
            _retirement(10, n_wealth=200, n_consumption=1000),
            RETIREMENT_PARAMS,
        ),
        "precautionary 10 x 200 x 400": (_precautionary(10, 200, 400), PRECAUTIONARY_PARAMS),
        "large 3 x 200 x 200": (_large(3, 200, 200), LARGE_PARAMS),
    }
    for size in ("reduced", "medium", *(("full",) if full else ())):
        model, params, _ = mahler_yum.build(size, n_subjects=0)
        models[f"Mahler-Yum {size}"] = (model, params)
    return models


def measure_models(rounds: int, full: bool, only: str | None = None) -> None:
    print(
        f"{'model':>30} {'variant':>14} {'fastest ms':>11} {'ratio':>6} "
        f"{'median ms':>10} {'ratio':>6}"
    )
    for name, (model, params) in benchmark_models(full).items():
        if only is not None and only.lower() not in name.lower():
            continue
        checked = model.checked_params(params)
        program = {
            v: jax.jit(functools.partial(model._solve, validate=v, progress=None))
            .lower(checked)
            .compile()
            for v in (True, False)
        }
        calls = {
            "solve": lambda model=model, params=params: model.solve(params).values,
            "solve off": lambda model=model, params=params: (
                model.solve(params, validate="off").values
            ),
            "program": functools.partial(program[True], checked),
            "program off": functools.partial(program[False], checked),
        }
        for call in calls.values():
            jax.block_until_ready(call())
        times = interleaved(calls, rounds)
        for variant, base in (("solve", "solve off"), ("program", "program off")):
            for key in (variant, base):
                fastest, median = min(times[key]), statistics.median(times[key])
                ratio_fast = fastest / min(times[base])
                ratio_median = median / statistics.median(times[base])
                print(
                    f"{name:>30} {key:>14} {1e3 * fastest:>11.2f} {ratio_fast:>6.3f} "
                    f"{1e3 * median:>10.2f} {ratio_median:>6.3f}"
                )


def main() -> None:
    if "--models" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 21
        only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
        measure_models(rounds, "--full" in sys.argv, only)
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--compile":
        compile_child(sys.argv[2])
        return
    model, params = build()
    names = list(variants(model))
    compiles = {name: [] for name in names}
    for _ in range(2):  # interleaved, best of 2: the machine's load drifts
        for name in names:
            compiles[name].append(compile_in_fresh_process(name))
    calls = {name: functools.partial(jax.jit(fn), params) for name, fn in variants(model).items()}
    for call in calls.values():
        jax.block_until_ready(call())
    runs = interleaved(calls, 15)
    rows = {
        name: {"compile_s": min(compiles[name]), "run_s": statistics.median(runs[name])}
        for name in names
    }
    base = rows["off"]
    print(f"{'variant':>10} {'compile s':>10} {'ratio':>6} {'run ms':>8} {'ratio':>6}")
    for name, row in rows.items():
        print(
            f"{name:>10} {row['compile_s']:>10.3f} {row['compile_s'] / base['compile_s']:>6.2f} "
            f"{1e3 * row['run_s']:>8.2f} {row['run_s'] / base['run_s']:>6.2f}"
        )


if __name__ == "__main__":
    main()
