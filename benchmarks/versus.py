"""The working tree's `lcm_eqx` against another commit's, in one process: steady solves
interleaved call by call, so that the machine's load falls on both alike.

    python benchmarks/versus.py --base main~3          # the retirement models
    python benchmarks/versus.py --base HEAD --rounds 41

The other commit's package is exported (`git archive`) into a temporary folder as
`lcm_eqx_base` (the package imports itself only relatively). Models (float64): the quick start's
retirement model with `GridSearch` (wealth 100 x consumption 500, 5 periods), with
`DCEGM` (200 savings points), with `DCEGM` and taste shocks, and the stochastic
life-cycle model (Rouwenhorst income, mortality, taste shocks) with `DCEGM`. For each:
the median steady time of both, their ratio (this tree / base), and whether the value
arrays agree bit for bit. Also the first solve of each (compile included) in this
process, in the order base, this tree: a rough cold-start check (use
`benchmarks/overhead.py` in fresh processes for the real one).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import interleaved  # noqa: E402


def export_base(revision: str, folder: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "lcm_eqx"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "lcm_eqx").rename(folder / "lcm_eqx_base")


def models(lcm):
    """The benchmark models, built with the package `lcm` (either version)."""
    sys.modules["lcm_eqx"] = lcm  # the test models import `lcm_eqx`
    for name in ("tests.models.retirement", "tests.models.life_cycle"):
        sys.modules.pop(name, None)
    retirement = importlib.import_module("tests.models.retirement")
    life_cycle = importlib.import_module("tests.models.life_cycle")
    params = dict(retirement.PARAMS)
    shocks = {**params, "taste_shock_scale": 0.5}
    built = {
        "retirement GridSearch": (retirement.build(5), params),
        "retirement DCEGM": (retirement.build(5, solver=retirement.dcegm(200)), params),
        "retirement DCEGM taste shocks": (
            retirement.build(5, taste_shocks=True, solver=retirement.dcegm(200)),
            shocks,
        ),
        "life cycle DCEGM": (life_cycle.build(5, 60, 80), dict(life_cycle.PARAMS)),
    }
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        export_base(args.base, Path(folder))
        sys.path.insert(0, folder)
        import lcm_eqx as current

        base = importlib.import_module("lcm_eqx_base")
        ours, theirs = models(current), models(base)
        sys.modules["lcm_eqx"] = current
        print(f"this tree against {args.base}, float64, {args.rounds} interleaved rounds\n")
        header = f"{'model':32s} {'base ms':>9s} {'tree ms':>9s} {'ratio':>7s}"
        print(f"{header}  first solve base/tree  equal")
        for name in ours:
            (model, params), (model_base, params_base) = ours[name], theirs[name]
            start = time.perf_counter()
            reference = jax.block_until_ready(model_base.solve(params_base))
            first_base = time.perf_counter() - start
            start = time.perf_counter()
            solution = jax.block_until_ready(model.solve(params))
            first_tree = time.perf_counter() - start
            equal = all(
                np.array_equal(solution.values[r], reference.values[r], equal_nan=True)
                for r in reference.values
            )
            times = interleaved(
                {
                    "base": lambda m=model_base, p=params_base: m.solve(p).values,
                    "tree": lambda m=model, p=params: m.solve(p).values,
                },
                args.rounds,
            )
            base_ms = 1e3 * statistics.median(times["base"])
            tree_ms = 1e3 * statistics.median(times["tree"])
            print(
                f"{name:32s} {base_ms:9.3f} {tree_ms:9.3f} {tree_ms / base_ms:7.3f}  "
                f"{first_base:6.2f} s / {first_tree:5.2f} s     {equal}"
            )


if __name__ == "__main__":
    main()
