"""NEGM on the durable-consumption model of Druedahl (2021, *Computational Economics*,
"A Guide on Solving Non-Convex Consumption-Saving Models"), at the paper's grid sizes:
T = 5 periods; liquid wealth 100 points, durable stock 50, NEGM's savings 100 and total
resources 100 (the adjuster's problem), 64 candidates of the new stock.

Written from the paper (not the reference code): CRRA utility over
`c^α·(h + h̲)^(1−α)` (α = 0.9, ρ = 2, h̲ = 0.01), β = 0.965, R = 1.03, adjustment cost
τ = 0.10 of the stock sold, depreciation δ = 0.15, no borrowing. Income is received
with this period's state (`m' = R·a + y`; the paper draws it after the decision, which
NEGM cannot express yet: issue 61, item 2), in one of two variants:

- `markov`: a 15-node Rouwenhorst AR(1) of log income (ρ = 0.9, σ = 0.1);
- `deterministic`: 50 levels of permanent income, a discrete state that moves one
  level toward the middle each period (a deterministic law that is not the identity).

Liquid wealth on `[0.1, 10]`, the stock on `[0, 3]`, savings on `[0, 10]`, resources on
`[0.1, 10]` (within the liquid grid), each `u ** 3` of evenly spaced `u` (dense where
utility bends most, as `examples/durables.py`).

Times: the first solve (trace + compile + run, `jax.jit(model.solve)(params)`) and the
steady solve (median of interleaved rounds) of each variant. With `--base REV` the
package at git revision REV is exported into a temporary folder as `lcm_eqx_base` and
solved in the same process, interleaved round by round, and the value arrays compared.

    python benchmarks/negm_druedahl.py                     # both variants
    python benchmarks/negm_druedahl.py --base HEAD~1 --rounds 3
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from enum import IntEnum
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import interleaved  # noqa: E402
from benchmarks.versus import export_base  # noqa: E402

# The model's functions are examples/durables.py's (the same household); only the
# income variants and the grids are the paper's.
sys.path.insert(0, str(ROOT / "examples"))
from durables import (  # noqa: E402
    PARAMS,
    Adjust,
    held,
    next_durable,
    next_wealth,
    no_borrowing,
    resources,
    saved,
    utility,
)
from durables import income as markov_income  # noqa: E402

N_LEVELS = 50


def level_income(level):
    return 0.5 + level / (N_LEVELS - 1)


def next_level(level):
    middle = N_LEVELS // 2
    return level + jnp.sign(middle - level).astype(level.dtype)


def build(lcm, variant: str, n_periods: int = 5):
    """The model and its parameters, built with the package `lcm` (either version)."""
    powered = lambda low, high, n, p: list(low + (high - low) * np.linspace(0, 1, n) ** p)
    solver = lcm.NEGM(
        liquid="wealth",
        durable="durable",
        consumption="consumption",
        durable_choice="new_durable",
        adjust="adjust",
        savings=lcm.IrregSpacedGrid(points=powered(0.0, 10.0, 100, 3.0)),
        resources=lcm.IrregSpacedGrid(points=powered(0.1, 10.0, 100, 3.0)),
        adjuster_points=64,
    )
    functions = {
        "utility": utility,
        "held": held,
        "resources": resources,
        "saved": saved,
    }
    states = {
        "wealth": lcm.IrregSpacedGrid(points=powered(0.1, 10.0, 100, 3.0)),
        "durable": lcm.IrregSpacedGrid(points=powered(0.0, 3.0, 50, 3.0)),
    }
    transitions = {"wealth": next_wealth, "durable": next_durable}
    if variant == "markov":
        states["log_income"] = lcm.RouwenhorstGrid(n_points=15, rho=0.9, sigma=0.1)
        functions["income"] = markov_income
    elif variant == "deterministic":
        states["level"] = lcm.DiscreteGrid(
            IntEnum("Level", [f"p{i}" for i in range(N_LEVELS)], start=0)
        )
        functions["income"] = level_income
        transitions["level"] = next_level
    else:
        raise ValueError(variant)
    regime = lcm.Regime(
        states=states,
        actions={
            "adjust": lcm.DiscreteGrid(Adjust),
            "consumption": lcm.LinSpacedGrid(start=0.0, stop=10.0, n_points=2),
            "new_durable": lcm.LinSpacedGrid(start=0.0, stop=3.0, n_points=2),
        },
        functions=functions,
        state_transitions=transitions,
        transition=lambda: 0,
        constraints={"no_borrowing": no_borrowing},
        solver=solver,
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=n_periods), dict(PARAMS)


def first_solve(model, params):
    start = time.perf_counter()
    program = jax.jit(model.solve)
    solution = jax.block_until_ready(program(params))
    return program, solution, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="deterministic,markov")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default=None, help="git revision to compare with")
    args = parser.parse_args()
    packages = {"this tree": importlib.import_module("lcm_eqx")}
    if args.base is not None:
        folder = Path(tempfile.mkdtemp())
        export_base(args.base, folder)
        sys.path.insert(0, str(folder))
        packages = {f"base {args.base}": importlib.import_module("lcm_eqx_base"), **packages}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"Druedahl (2021) durable model, T = 5; load average at start {load}")
    for variant in args.variants.split(","):
        calls, solutions = {}, {}
        for name, lcm in packages.items():
            model, params = build(lcm, variant)
            program, solutions[name], first = first_solve(model, params)
            calls[name] = lambda program=program, params=params: program(params)
            print(f"  {variant:<13} {name:<16} first solve {first:6.1f} s", flush=True)
        times = interleaved(calls, args.rounds)
        for name in packages:
            print(
                f"  {variant:<13} {name:<16} steady {statistics.median(times[name]):6.2f} s "
                f"({', '.join(f'{t:.2f}' for t in times[name])})",
                flush=True,
            )
        if len(packages) == 2:
            base, this = (np.asarray(s.values["alive"]) for s in solutions.values())
            diff = np.abs(this - base)
            relative = diff / np.abs(base)
            print(
                f"  {variant:<13} values vs base: max |diff| {diff.max():.2e}, mean relative "
                f"{relative.mean():.2e}, period 0 max {diff[0].max():.2e}"
            )


if __name__ == "__main__":
    main()
