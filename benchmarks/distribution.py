"""The exact forward distribution against a Monte Carlo simulation of 10⁶ subjects.

    python benchmarks/distribution.py            # 10⁶ subjects, 1000 wealth nodes
    python benchmarks/distribution.py --quick    # 10⁵ subjects, 300 wealth nodes

Model: tests/models/life_cycle.py (work or retire with taste shocks, Rouwenhorst income,
mortality, DC-EGM). Reports the steady time of `model.distribution` and of
`model.simulate`, the largest |z| (difference over the Monte Carlo standard error) of the
mean wealth, mean consumption, mean income, share working and share in the working
regime over all periods, and the largest mass-conservation error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import life_cycle as lc  # noqa: E402
from tests.test_distribution import initial_conditions  # noqa: E402


def z_scores(exact, samples, binary=False):
    groups = samples.groupby(level=0)
    mean, count = groups.mean().to_numpy(), groups.count().to_numpy()
    exact = np.asarray(exact)[groups.mean().index.to_numpy()]
    if binary:
        se = np.sqrt(exact * (1 - exact) / count) + 1 / count
    else:
        se = groups.std().to_numpy() / np.sqrt(count)
    return (exact - mean) / se


def timed(fn, repeats=3):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        jax.block_until_ready(jax.tree.leaves(out))
        times.append(time.perf_counter() - start)
    return out, min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, n_wealth = (100_000, 300) if args.quick else (1_000_000, 1000)
    model = lc.build(6, n_wealth=n_wealth)
    solution = model.solve(lc.PARAMS)
    initial = initial_conditions(n)
    dist, distribution_s = timed(lambda: model.distribution(lc.PARAMS, initial, solution))
    start = time.perf_counter()
    df = model.simulate(lc.PARAMS, initial, solution, key=jax.random.key(1)).to_dataframe()
    simulate_s = time.perf_counter() - start
    alive = df[df["regime"] != "dead"].set_index("period")
    working = df[df["regime"] == "working"].set_index("period")
    z = {
        "mean wealth": z_scores(dist.mean("wealth"), alive["wealth"]),
        "mean consumption": z_scores(dist.mean("consumption"), alive["consumption"]),
        "mean income": z_scores(dist.mean("income"), alive["income"]),
        "share working": z_scores(
            dist.share("labor", "work"), working["labor"].astype(str).eq("work"), binary=True
        ),
        "in working": z_scores(
            dist.regime_share("working"),
            df.set_index("period")["regime"].astype(str).eq("working"),
            binary=True,
        ),
    }
    conservation = float(np.max(np.abs(dist.total() + dist.exited + dist.stranded - 1.0)))
    report = {
        "subjects": n,
        "wealth_nodes": n_wealth,
        "distribution_s": distribution_s,
        "simulate_s": simulate_s,
        "max_abs_z": {k: float(np.max(np.abs(v))) for k, v in z.items()},
        "conservation_error": conservation,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
