"""NEGM with a sharded permanent type on 4 host devices, run in a subprocess by
tests/test_negm.py (XLA_FLAGS must be set before jax is imported).

The durable-goods model of `examples/durables.py` with a permanent `skill` (4 types,
`distributed=True`, the identity transition) that scales income. Prints one JSON
object: the largest difference of the values and of the policies to the unsharded
solve, the value array's sharding, the collectives of the compiled
`jax.jit(model.solve)` with and without validation, and how far the panel simulated
against the sharded solution is from the unsharded simulation's against the same
(gathered) solution: whether its discrete columns are equal, the largest difference of
its numbers, and the collectives of the compiled simulation.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, root)
sys.path.insert(0, os.path.join(root, "examples"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import durables  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.hlo_collectives import collectives_in  # noqa: E402

GRIDS = {"n_wealth": 16, "n_durable": 8, "n_income": 2, "n_savings": 16, "n_resources": 16}


def income(log_income, skill):
    return jnp.exp(log_income) * (1.0 + 0.2 * skill)


def build(distributed):
    model, params = durables.build(n_periods=3, adjuster_points=8, **GRIDS)
    regime = model.regimes["alive"]
    regime = regime.replace(
        states={**regime.states, "skill": lcm.DiscreteGrid(list("abcd"), distributed=distributed)},
        functions={**regime.functions, "income": income},
        state_transitions={**regime.state_transitions, "skill": lambda skill: skill},
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=3), params


def collectives(model, params, validate):
    lowered = jax.jit(lambda p: model.solve(p, validate=validate).values).lower(params)
    return collectives_in(lowered.compile().as_text())


def largest_difference(a, b):
    return max(
        float(jnp.max(jnp.abs(x - y)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def main():
    plain_model, params = build(False)
    model, _ = build(True)
    plain = plain_model.solve(params)
    sharded = model.solve(params)
    n = 12
    initial = {
        "regime": jnp.zeros(n, jnp.int32),
        "wealth": jnp.linspace(0.5, 10.0, n),
        "durable": jnp.linspace(0.0, 3.0, n),
        "log_income:index": jnp.arange(n) % 2,
        "skill": jnp.arange(n) % 4,
    }
    key = jax.random.key(1)
    gathered = jax.tree.map(np.asarray, sharded)
    expected = plain_model.simulate(params, initial, gathered, key=key).to_dataframe()
    simulated = model.simulate(params, initial, sharded, key=key).to_dataframe()
    program = jax.jit(
        lambda p, s: model.simulate(p, initial, s, key=key, validate="off").value
    ).lower(params, sharded)
    numbers = ["value", "wealth", "durable", "log_income", "consumption", "new_durable"]
    print(
        json.dumps(
            {
                "values": largest_difference(plain.values, sharded.values),
                "policies": largest_difference(plain.policies, sharded.policies),
                "spec": [str(s) for s in sharded.values["alive"].sharding.spec],
                "policy_spec": [str(s) for s in sharded.policies["alive"].keep_value.sharding.spec],
                "simulate_labels_equal": bool(
                    all(simulated[c].equals(expected[c]) for c in ("regime", "skill", "adjust"))
                ),
                "simulate_difference": float(
                    np.max(np.abs(simulated[numbers].to_numpy() - expected[numbers].to_numpy()))
                ),
                "simulate_collectives": collectives_in(program.compile().as_text()),
                "unvalidated": collectives(model, params, "off"),
                "validated": collectives(model, params, "raise"),
            }
        )
    )


if __name__ == "__main__":
    main()
