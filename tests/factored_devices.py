"""The 2-device check of tests/test_factored.py, run in a subprocess (XLA_FLAGS must
give 2 host devices before jax is imported). Prints one JSON object."""

import json
import os
import re
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lcm_eqx as lcm  # noqa: E402
from tests.test_factored import build, params  # noqa: E402

COLLECTIVES = r"\b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\("


def main():
    p = params(taste_shocks=True)
    factored = build(lcm.GridSearch(), taste_shocks=True, distributed=True)
    plain = build(lcm.GridSearch(factored=False), taste_shocks=True)
    a = factored.solve(p, validate="off")
    b = plain.solve(p, validate="off")
    x, y = np.asarray(a.values["alive"]), np.asarray(b.values["alive"])
    finite = np.isfinite(y)
    assert (np.isfinite(x) == finite).all()
    text = factored._solve.lower(factored.checked_params(p), validate=False).compile().as_text()
    spec = a.values["alive"].sharding.spec
    report = {
        "devices": jax.device_count(),
        "max_difference": float(np.max(np.abs(x[finite] - y[finite]))),
        "factored_collectives": sorted(set(re.findall(COLLECTIVES, text))),
        "sharded": [str(s) for s in spec if s is not None],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
