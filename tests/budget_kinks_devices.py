"""DC-EGM with declared budget kinks and a sharded permanent type on 4 host devices, run
in a subprocess by tests/test_budget_kinks.py (XLA_FLAGS must be set before jax is
imported).

Prints one JSON object: the largest difference to the unsharded solve, the value array's
sharding, and the collectives of the compiled `jax.jit(model.solve)` with and without
validation (with the element count of each all-reduce).
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
from tests.test_budget_kinks import INCOME, PARAMS, PROBABILITIES, borrowing, utility  # noqa: E402


def next_wealth(
    wealth, consumption, interest_rate, next_income, floor, skill, benefit, threshold, taper
):
    savings = wealth - consumption
    transfer = jnp.maximum(0.0, benefit - taper * jnp.maximum(0.0, savings - threshold))
    # The floor differs by permanent type: so do the breakpoints.
    resources = (1 + interest_rate) * savings + next_income * (1 + 0.2 * skill) + transfer
    return jnp.maximum(resources, floor + 0.05 * skill)


def build(distributed):
    savings = lcm.IrregSpacedGrid(points=[12.0 * (i / 99) ** 1.5 for i in range(100)])
    solver = lcm.DCEGM(
        state="wealth", action="consumption", savings=savings, kinks=lcm.BudgetKinks(n_kinks=3)
    )
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(start=0.5, stop=8.0, n_points=40),
            "income": lcm.IIDGrid(
                points=jnp.asarray(INCOME), probabilities=jnp.asarray(PROBABILITIES)
            ),
            "skill": lcm.DiscreteGrid(["a", "b", "c", "d"], distributed=distributed),
        },
        actions={"consumption": lcm.LinSpacedGrid(start=0.01, stop=8.0, n_points=20)},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth, "skill": lambda skill: skill},
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        solver=solver,
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=3)


def collectives(model, params, validate):
    lowered = jax.jit(lambda p: model.solve(p, validate=validate).values).lower(params)
    return collectives_in(lowered.compile().as_text())


def main():
    plain = build(False).solve(PARAMS)
    model = build(True)
    sharded = model.solve(PARAMS)
    difference = float(
        np.max(np.abs(np.asarray(plain.values["alive"]) - np.asarray(sharded.values["alive"])))
    )
    print(
        json.dumps(
            {
                "difference": difference,
                "spec": [str(s) for s in sharded.values["alive"].sharding.spec],
                "unvalidated": collectives(model, PARAMS, "off"),
                "validated": collectives(model, PARAMS, "raise"),
            }
        )
    )


if __name__ == "__main__":
    main()
