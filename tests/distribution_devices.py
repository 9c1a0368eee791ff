"""The forward distribution with a sharded permanent type on 4 host devices, run in a
subprocess by tests/test_distribution.py (XLA_FLAGS must be set before jax is imported).

Prints one JSON object: the largest difference to the unsharded distribution, the mass
array's sharding, and the collectives of the compiled forward pass (with the element
count of each).
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from tests.dcegm_devices import build  # noqa: E402
from tests.hlo_collectives import collectives_in  # noqa: E402
from tests.models import retirement as R  # noqa: E402

INITIAL = {
    "regime": jnp.zeros(8, dtype=int),
    "wealth": jnp.linspace(5.0, 100.0, 8),
    "skill": jnp.arange(8) % 4,
}


def collectives(model, params, solution):
    lowered = jax.jit(lambda s: model.distribution(params, INITIAL, s, validate="off").mass).lower(
        solution
    )
    return collectives_in(lowered.compile().as_text())


def main():
    params = R.PARAMS
    plain_model = build(False)
    plain = plain_model.distribution(params, INITIAL)
    model = build(True)
    solution = model.solve(params)
    sharded = model.distribution(params, INITIAL, solution)
    difference = max(float(jnp.max(jnp.abs(plain.mass[r] - sharded.mass[r]))) for r in plain.mass)
    print(
        json.dumps(
            {
                "difference": difference,
                "spec": [str(s) for s in sharded.mass["working"].sharding.spec],
                "collectives": collectives(model, params, solution),
            }
        )
    )


if __name__ == "__main__":
    main()
