"""The 3-device check of tests/test_refine.py, run in a subprocess (XLA_FLAGS must give
3 host devices before jax is imported). Prints one JSON object."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lcm_eqx as lcm  # noqa: E402
from tests.models import hours  # noqa: E402


def main():
    solver = lcm.GridSearch(refine=True)
    sharded = hours.build(40, solver=solver, productivity_distributed=True).solve(hours.PARAMS)
    single = hours.build(40, solver=solver).solve(hours.PARAMS)
    x, y = np.asarray(sharded.values["working"]), np.asarray(single.values["working"])
    spec = sharded.values["working"].sharding.spec
    report = {
        "devices": jax.device_count(),
        "max_difference": float(np.max(np.abs(x - y))),
        "sharded": [str(s) for s in spec if s is not None],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
