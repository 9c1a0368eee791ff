"""Mahler & Yum (2024) written two ways, solved in one process with the calls
interleaved: the example's discount types (a regime function `discount_factor` of the
type, `examples/mahler_yum.py`) against the reference library's spelling
(`build(..., scaled_utility=True)`: one discount factor, the utility's terms scaled by
`utility_scale(discount_type, period)`), which the structure-aware grid search factors
since issue 60 (it evaluated the whole plain product before).

    python benchmarks/spellings.py                          # reduced, 7 rounds
    python benchmarks/spellings.py --size full --rounds 3   # minutes on 2 cores
    python benchmarks/spellings.py --plain                  # + the scaled spelling's
                                                            #   plain product (not at full)

Reported per variant: the points evaluated per period (`model.describe(params)`), the
first solve in this process (trace, compile and run; the example first, so it also pays
JAX's own first use), and the steady validated solve over `--rounds` interleaved rounds
(the order alternating from round to round); then the median over rounds of the ratio
scaled / example, and the largest relative difference between the scaled spelling's
values and the example's times `(β_type / β)^period` (the same model: 0 up to rounding).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="reduced")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args()
    my = load_example("mahler_yum")

    variants = {
        "example": my.build(args.size),
        "scaled": my.build(args.size, scaled_utility=True),
    }
    if args.plain:
        variants["scaled-plain"] = my.build(
            args.size, scaled_utility=True, solver=lcm.GridSearch(factored=False)
        )
    pairs = None
    solutions = {}
    solves = {}
    print(f"Mahler-Yum {args.size}, float64, {jax.devices()[0].platform}")
    print(f"{'variant':>13} {'evaluated/period':>17} {'first solve s':>14}")
    for name, (model, params, _) in variants.items():
        alive = next(r for r in model.describe(params).regimes if r.name == "alive")
        pairs = alive.state_action_points

        def solve(model=model, params=params):
            return model.solve(params)

        start = time.perf_counter()
        solutions[name] = jax.block_until_ready(solve())
        first = time.perf_counter() - start
        solves[name] = solve
        print(f"{name:>13} {alive.evaluated_points:>17,} {first:>14.2f}")
    print(f"{'':>13} (plain product: {pairs:,} pairs per period)")

    times: dict[str, list[float]] = {name: [] for name in solves}
    names = list(solves)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            times[name].append(call_seconds(solves[name]))
    for name, measured in times.items():
        print(
            f"{name:>13} steady {statistics.median(measured):.3f} s "
            f"(fastest {min(measured):.3f} s, {args.rounds} rounds)"
        )
    for name in names[1:]:
        ratios = [s / e for s, e in zip(times[name], times["example"], strict=True)]
        print(f"{name} / example: {statistics.median(ratios):.3f} (median of per-round ratios)")

    _, params, _ = variants["scaled"]
    relative = np.asarray(params["alive"]["utility_scale"]["relative_discount_factor"])
    worst = 0.0
    for t in range(my.SIZES[args.size]["periods"] - 1):
        expected = np.asarray(solutions["example"].value("alive", t)) * relative**t
        got = np.asarray(solutions["scaled"].value("alive", t))
        finite = np.isfinite(expected)
        assert (np.isfinite(got) == finite).all()
        scale = np.maximum(np.abs(expected[finite]), 1.0)
        worst = max(worst, float(np.max(np.abs(got[finite] - expected[finite]) / scale)))
    print(f"scaled values vs the example's times (beta_type/beta)^period: {worst:.1e} relative")


if __name__ == "__main__":
    main()
