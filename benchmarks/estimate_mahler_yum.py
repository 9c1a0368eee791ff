"""What one Gauss–Newton step of the Mahler–Yum estimation costs, and the distribution's
choices by the plan against node by node, in one run (ratios; the machine is noisy).

    python benchmarks/estimate_mahler_yum.py                 # reduced grids, 39 periods
    python benchmarks/estimate_mahler_yum.py --size tiny     # 6 periods

The model is `examples/mahler_yum_estimate.py`'s (continuous effort refined, taste
shocks). Reported, each as first call (trace and compile included) and steady time:

- `distribution`: `model.distribution` at the truth, the grid-search regime's choices
  read by its structure-aware plan (`GridSearch.choices_on_grid`);
- `distribution_node_by_node`: the same with the choices read node by node (a
  `GridSearch` whose `choices_on_grid` declines), the reading before 2026-12-07;
- `step`: the moments and their exact Jacobian in the five free parameters (forward
  mode), what each Gauss–Newton step evaluates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import mahler_yum_estimate as mye  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation._objective import moments_and_jacobian  # noqa: E402


class NodeByNode(lcm.GridSearch):
    """Grid search whose distribution reads its choices node by node."""

    def choices_on_grid(self, problem):
        return None


def timed(fn, *args) -> dict[str, float]:
    clock = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - clock
    clock = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return {"first_s": round(first, 2), "steady_s": round(time.perf_counter() - clock, 3)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["tiny", "reduced"], default="reduced")
    parser.add_argument("--skip-node-by-node", action="store_true")
    args = parser.parse_args(argv)

    model, truth, initial = mye.build(args.size, n_subjects=2_000)
    mass = model.initial_mass(initial, params=truth)
    params = jax.tree.map(jnp.asarray, model.checked_params(truth))
    solution = eqx.filter_jit(lambda p: model.solve(p, validate="off"))(params)
    out: dict = {"size": args.size}

    distribution = eqx.filter_jit(lambda p, s: model.distribution(p, mass, s, validate="off").mass)
    out["distribution"] = timed(distribution, params, solution)
    if not args.skip_node_by_node:
        slow, _, _ = mye.build(args.size, n_subjects=2_000, solver=NodeByNode(refine=["effort"]))
        node = eqx.filter_jit(lambda p, s: slow.distribution(p, mass, s, validate="off").mass)
        out["distribution_node_by_node"] = timed(node, params, solution)
        out["node_by_node_over_plan"] = round(
            out["distribution_node_by_node"]["steady_s"] / out["distribution"]["steady_s"], 1
        )

    panel = mye.simulate_panel(model, truth, initial, seed=1)
    probe = mye.estimate(model, truth, panel, mye.profiles(model.n_periods), initial, max_steps=0)
    theta = jnp.asarray(probe.estimates)
    out["step"] = timed(moments_and_jacobian, probe.problem, theta)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
