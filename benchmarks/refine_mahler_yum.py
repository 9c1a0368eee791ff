"""Mahler & Yum (`examples/mahler_yum.py`) with effort refined off its grid: how the
simulated mean effort and wealth move, and what the refinement costs.

    python benchmarks/refine_mahler_yum.py                 # the reduced size (5 effort points)
    python benchmarks/refine_mahler_yum.py --size tiny --repeats 2
    python benchmarks/refine_mahler_yum.py --variants grid,refined --subjects 0 --rounds 9

Variants, each solved and simulated (`--subjects` subjects, the same initial conditions
and key):

- `discrete`: the example as written (effort a `DiscreteGrid`), `GridSearch()`;
- `grid`: `build(continuous_effort=True)` (effort a continuous action, lagged effort a
  continuous state, keeping it a discrete action), `GridSearch()`; on the grid it is the
  discrete model (the largest value difference is printed);
- `grid-plain`: the same with `GridSearch(factored=False)`, the plain state x action
  product;
- `refined`: the same with `GridSearch(refine=["effort"])`: effort refined inside the
  structure-aware elimination (issue 60), in the step that eliminates it;
- `refined-plain`: `GridSearch(refine=["effort"], factored=False)`, the plain product's
  refinement (state by state, every discrete choice), which `refined` equals.

Reported: the first solve (trace, compile and run), the steady solve (fastest and median
of `--repeats`), the mean effort (its value on [0, 1]) and wealth of alive subjects at
ages 39/41 and 59/61 (two-year periods from 25: no age 40 or 60), and for `refined` the
share of each `lcm.RefineCode` over the cells of period 0 and 20. With `--rounds N`, the
steady solves of the variants are then timed again interleaved (N rounds, the order
alternating) and each variant's median per-round ratio to `grid` printed (the ratio the
issue asks for: `refined / grid`); with `--subjects 0` nothing is simulated.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lcm_eqx as lcm  # noqa: E402
from benchmarks._examples import load_example  # noqa: E402
from benchmarks._timing import call_seconds  # noqa: E402

AGES = (39, 41, 59, 61)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="reduced")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--subjects", type=int, default=2_000)
    parser.add_argument("--variants", default="discrete,grid,grid-plain,refined")
    parser.add_argument("--rounds", type=int, default=0)
    args = parser.parse_args()
    my = load_example("mahler_yum")
    solvers = {
        "discrete": (False, lcm.GridSearch()),
        "grid": (True, lcm.GridSearch()),
        "grid-plain": (True, lcm.GridSearch(factored=False)),
        "refined": (True, lcm.GridSearch(refine=["effort"])),
        "refined-plain": (True, lcm.GridSearch(refine=["effort"], factored=False)),
    }
    print(f"Mahler-Yum {args.size}, float64, {jax.devices()[0].platform}, {args.subjects} subjects")
    values = {}
    solves = {}
    for name in args.variants.split(","):
        continuous, solver = solvers[name]
        model, params, initial = my.build(
            args.size, n_subjects=args.subjects, solver=solver, continuous_effort=continuous
        )
        start = time.perf_counter()
        solution = model.solve(params)
        jax.block_until_ready(solution.value("alive", 0))
        first = time.perf_counter() - start
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            jax.block_until_ready(model.solve(params).value("alive", 0))
            times.append(time.perf_counter() - start)
        values[name] = np.asarray(solution.value("alive", 0))
        solves[name] = lambda model=model, params=params: model.solve(params).value("alive", 0)
        values[name + ":all"] = np.asarray(solution.values["alive"])
        if not args.subjects:
            print(
                f"{name:13} first {first:7.1f} s  steady {min(times):7.3f} s (median "
                f"{statistics.median(times):.3f})"
            )
            continue
        result = model.simulate(params, initial, solution=solution, key=jax.random.key(0))
        # `effort_value` is the effort in force (with continuous effort, the lagged one
        # where the subject keeps it).
        frame = result.to_dataframe(extra=["effort_value"], model=model, params=params)
        alive = frame[frame["regime"] == "alive"]
        means = alive.groupby("age")[["effort_value", "wealth"]].mean()
        row = "  ".join(
            f"{age}: e {means.loc[age, 'effort_value']:.4f} w {means.loc[age, 'wealth']:.4f}"
            for age in AGES
        )
        print(
            f"{name:10} first {first:7.1f} s  steady {min(times):7.3f} s (median "
            f"{statistics.median(times):.3f})  {row}"
        )
        if name == "refined":
            for period in (0, 20):
                codes = np.asarray(
                    lcm.refine_codes(model, params, solution, "alive", period)["effort"]
                )
                shares = {
                    lcm.RefineCode(k).name: f"{(codes == k).mean():.3f}" for k in np.unique(codes)
                }
                print(f"  refine codes, period {period}: {shares}")
    if args.rounds and "grid" in solves:
        steady: dict[str, list[float]] = {name: [] for name in solves}
        names = list(solves)
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                steady[name].append(call_seconds(solves[name]))
        for name in names:
            ratios = [t / g for t, g in zip(steady[name], steady["grid"], strict=True)]
            print(
                f"{name:13} steady median {statistics.median(steady[name]):.3f} s, "
                f"/ grid {statistics.median(ratios):.2f} (median of {args.rounds} "
                "interleaved rounds)"
            )
    if "refined:all" in values and "refined-plain:all" in values:
        a, b = values["refined:all"], values["refined-plain:all"]
        finite = np.isfinite(b)
        assert (np.isfinite(a) == finite).all()
        print(f"refined - refined-plain, every period: {np.max(np.abs(a - b)[finite]):.1e}")
    if "grid" in values:
        for name in ("discrete", "refined"):
            if name in values:
                finite = np.isfinite(values["grid"])
                difference = (values[name] - values["grid"])[finite]
                print(
                    f"value at period 0, {name} - grid: min {difference.min():.2e}, "
                    f"max {difference.max():.2e}"
                )


if __name__ == "__main__":
    main()
