"""DC-EGM with a sharded permanent type on 4 host devices, run in a subprocess by
tests/test_dcegm.py (XLA_FLAGS must be set before jax is imported).

Prints one JSON object: the largest difference to the unsharded solve, the value array's
sharding, and the collectives of the compiled `jax.jit(model.solve)` with and without
validation (with the element count of each all-reduce). Then the simulation against the
sharded solution (each device reads its own types' policies): whether its panel equals
the unsharded simulation's against the same (gathered) solution, in one pass and in
chunks, and the collectives of the compiled simulation.
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
import numpy as np  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.hlo_collectives import collectives_in  # noqa: E402
from tests.models import retirement as R  # noqa: E402


def utility(consumption, labor, skill, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (1 + 0.1 * skill) * (labor == R.Labor.work)


def utility_retired(consumption, skill):
    return jnp.log(consumption) + 0.01 * skill


def build(distributed):
    wealth = lcm.LinSpacedGrid(1.0, 400.0, 40)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, 50)
    skill = lcm.DiscreteGrid(["a", "b", "c", "d"], distributed=distributed)
    common = {"constraints": {"borrowing": R.borrowing}}
    working = lcm.Regime(
        states={"wealth": wealth, "skill": skill},
        actions={"labor": lcm.DiscreteGrid(R.Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": R.labor_income},
        state_transitions={"wealth": R.next_wealth, "skill": lambda skill: skill},
        transition=R.next_regime,
        **common,
    )
    retired = lcm.Regime(
        states={"wealth": wealth, "skill": skill},
        actions={"consumption": consumption},
        functions={"utility": utility_retired},
        state_transitions={"wealth": R.next_wealth_retired, "skill": lambda skill: skill},
        transition=lambda: R.RegimeId.retired,
        **common,
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=3,
        regime_ids=R.RegimeId,
        solver=R.dcegm(60),
    )


def collectives(model, params, validate):
    lowered = jax.jit(lambda p: model.solve(p, validate=validate).values).lower(params)
    return collectives_in(lowered.compile().as_text())


def main():
    params = R.PARAMS
    plain = build(False).solve(params)
    model = build(True)
    sharded = model.solve(params)
    difference = max(
        float(jnp.max(jnp.abs(plain.values[r] - sharded.values[r]))) for r in plain.values
    )
    n = 12
    initial = {
        "regime": jnp.zeros(n, jnp.int32),
        "wealth": jnp.linspace(5.0, 300.0, n),
        "skill": jnp.arange(n) % 4,
    }
    key = jax.random.key(1)
    gathered = jax.tree.map(np.asarray, sharded)  # the same solution, on one device
    expected = build(False).simulate(params, initial, gathered, key=key).to_dataframe()
    same = [
        model.simulate(params, initial, sharded, key=key, subject_batch_size=b)
        .to_dataframe()
        .equals(expected)
        for b in (0, 5)
    ]
    program = jax.jit(
        lambda p, s: model.simulate(p, initial, s, key=key, validate="off").value
    ).lower(params, sharded)
    print(
        json.dumps(
            {
                "simulate_equal": same,
                "simulate_collectives": collectives_in(program.compile().as_text()),
                "difference": difference,
                "spec": [str(s) for s in sharded.values["working"].sharding.spec],
                "unvalidated": collectives(model, params, "off"),
                "validated": collectives(model, params, "raise"),
            }
        )
    )


if __name__ == "__main__":
    main()
