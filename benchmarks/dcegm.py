"""DC-EGM against grid search: compile, steady solve, simulation, Euler errors.

    python benchmarks/dcegm.py            # the issue's sizes (a few minutes on 2 cores)
    python benchmarks/dcegm.py --quick    # small sizes, a smoke run

Models (float64):
- The quick start's retirement model (5 periods, disutility 1): `GridSearch` on the
  retirement example's grids (wealth 100 × consumption 500) and `DCEGM` with 200 savings
  points `400·(i/199)³`.
- A stochastic model (Rouwenhorst income with 5 states, mortality, CRRA utility): Euler
  errors of `DCEGM` and of `GridSearch` at about equal solve time.

Cold times come from fresh processes with an empty persistent cache; steady times are
medians of interleaved calls; ratios are within one run.
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

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import call_seconds, interleaved  # noqa: E402
from tests.models import retirement  # noqa: E402

_COLD = """
import json, sys, time
start = time.perf_counter()
sys.path.insert(0, {root!r})
import jax
jax.config.update("jax_enable_x64", True)
import lcm_eqx as lcm
from tests.models import retirement
imported = time.perf_counter()
solver = retirement.dcegm({n_savings}) if {dcegm} else None
model = retirement.build(5, solver=solver)
built = time.perf_counter()
jax.block_until_ready(model.solve(retirement.PARAMS).values)
solved = time.perf_counter()
print(json.dumps({{"import_s": imported - start, "build_s": built - imported,
                  "first_solve_s": solved - built, "total_s": solved - start}}))
"""


def cold(dcegm: bool, n_savings: int, rounds: int) -> dict:
    """The first solve in a fresh process with an empty persistent compilation cache
    (fastest of `rounds`: a compile's noise on a shared machine is one-sided)."""
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
            code = _COLD.format(root=str(ROOT), n_savings=n_savings, dcegm=dcegm)
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return min(results, key=lambda r: r["first_solve_s"])


def retirement_rows(
    n_savings: int, n_subjects: int, repeats: int, rounds: int, solve_repeats: int
) -> dict:
    params = retirement.PARAMS
    egm = retirement.build(5, solver=retirement.dcegm(n_savings))
    grid = retirement.build(5)
    solve_egm = lambda: egm.solve(params).values
    solve_grid = lambda: grid.solve(params).values
    for _ in range(5):
        solve_egm(), solve_grid()
    # Many rounds: a solve takes a millisecond or two, and the medians of a few rounds
    # moved by a third from run to run on a shared 2-core machine.
    times = interleaved({"dcegm": solve_egm, "grid": solve_grid}, solve_repeats)
    steady = {name: statistics.median(t) for name, t in times.items()}
    solution = egm.solve(params)
    initial = {
        "regime": jnp.zeros(n_subjects, dtype=int),
        "wealth": jnp.linspace(1.0, 100.0, n_subjects),
    }
    simulate = lambda: egm.simulate(params, initial, solution=solution, key=jax.random.key(0)).value
    first_simulate = call_seconds(simulate)
    simulate_s = statistics.median(call_seconds(simulate) for _ in range(max(repeats // 3, 2)))
    compiled = jax.jit(lambda p: egm.solve(p, validate="off").values).lower(params).compile()
    memory = compiled.memory_analysis()
    return {
        "dcegm_steady_s": steady["dcegm"],
        "grid_steady_s": steady["grid"],
        "steady_ratio_dcegm_to_grid": steady["dcegm"] / steady["grid"],
        "dcegm_cold": cold(True, n_savings, rounds) if rounds else None,
        "grid_cold": cold(False, n_savings, rounds) if rounds else None,
        "simulate_subjects": n_subjects,
        "dcegm_simulate_s": simulate_s,
        "dcegm_simulate_first_call_s": first_simulate,
        "simulate_ratio_to_grid_solve": simulate_s / steady["grid"],
        "dcegm_temp_bytes": getattr(memory, "temp_size_in_bytes", None),
    }


def euler_rows(repeats: int, quick: bool) -> dict:
    from tests.test_dcegm import STOCHASTIC_PARAMS, stochastic_model

    params = STOCHASTIC_PARAMS
    n_savings = 60 if quick else 150
    savings = lcm.IrregSpacedGrid(
        points=[40.0 * (i / (n_savings - 1)) ** 2 for i in range(n_savings)]
    )
    egm = stochastic_model(lcm.DCEGM(state="wealth", action="consumption", savings=savings))
    rows = {}
    grids = (100, 400) if quick else (200, 1000, 4000)
    models = {"dcegm": egm} | {f"grid_{n}": stochastic_model(n_consumption=n) for n in grids}
    fns = {name: (lambda m=m: m.solve(params).values) for name, m in models.items()}
    for fn in fns.values():
        fn()
    times = interleaved(fns, repeats)
    for name, model in models.items():
        kwargs = {} if name == "dcegm" else {"state": "wealth", "action": "consumption"}
        errors = np.asarray(lcm.euler_errors(model, params, regime="alive", **kwargs))
        rows[name] = {
            "solve_s": statistics.median(times[name]),
            "euler_mean_log10": float(np.nanmean(errors)),
            "euler_max_log10": float(np.nanmax(errors)),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-euler", action="store_true", help="skip the Euler-error rows")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/dcegm.json")
    args = parser.parse_args()
    quick = args.quick
    result = {
        "jax": jax.__version__,
        "retirement": retirement_rows(
            200,
            1_000 if quick else 100_000,
            3 if quick else 15,
            0 if quick else 3,
            5 if quick else 300,
        ),
        "stochastic_euler_errors": {} if args.no_euler else euler_rows(3 if quick else 9, quick),
    }
    print_retirement(result["retirement"])
    if result["stochastic_euler_errors"]:
        print("== stochastic model: Euler errors (log10) at solve time")
    for name, row in result["stochastic_euler_errors"].items():
        print(
            f"  {name:10s} solve {row['solve_s'] * 1e3:8.2f} ms   "
            f"mean {row['euler_mean_log10']:6.2f}   max {row['euler_max_log10']:6.2f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))


def print_retirement(r: dict) -> None:
    print("== retirement model (the quick start's), 5 periods, float64")
    print(
        f"  steady solve   DC-EGM {r['dcegm_steady_s'] * 1e3:7.2f} ms   grid search "
        f"{r['grid_steady_s'] * 1e3:7.2f} ms   ratio {r['steady_ratio_dcegm_to_grid']:.3f}"
    )
    for name in ("dcegm", "grid"):
        c = r[f"{name}_cold"]
        if c is None:
            continue
        print(
            f"  cold ({name:5s}) first solve {c['first_solve_s']:.2f} s "
            f"(import {c['import_s']:.2f} s, total {c['total_s']:.2f} s)"
        )
    print(
        f"  simulate {r['simulate_subjects']:,} subjects (DC-EGM) {r['dcegm_simulate_s']:.3f} s = "
        f"{r['simulate_ratio_to_grid_solve']:.2f} grid-search solves"
    )
    if r["dcegm_temp_bytes"] is not None:
        print(f"  DC-EGM XLA temp memory {r['dcegm_temp_bytes'] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
