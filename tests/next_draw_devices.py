"""The buffer-stock timing with the drawn income state sharded (`distributed=True`) on
2 host devices, run in a subprocess by tests/test_next_draw.py (XLA_FLAGS must be set
before jax is imported).

Prints one JSON object: by solver, the largest difference of the values and of the
simulated panel to the unsharded model's.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests import test_next_draw as buffer_stock  # noqa: E402

INCOME = buffer_stock.INCOME
result = {}
for solver in ("grid_search", "dcegm"):
    runs = []
    for distributed in (False, True):
        income = lcm.IIDGrid(
            points=INCOME.points, probabilities=INCOME.probabilities, distributed=distributed
        )
        chosen = lcm.GridSearch() if solver == "grid_search" else buffer_stock.dcegm()
        model = buffer_stock.buffer_stock(chosen, 30, 80, income=income)
        solution = model.solve(buffer_stock.PARAMS)
        n = 16
        initial = {
            "regime": np.zeros(n, int),
            "wealth": np.linspace(0.5, 5.0, n),
            "income": np.full(n, INCOME.points[2]),
        }
        df = model.simulate(
            buffer_stock.PARAMS, initial, solution=solution, key=jax.random.key(0)
        ).to_dataframe()
        panel = df[["wealth", "consumption", "income"]].to_numpy(float)
        runs.append((np.asarray(solution.values["alive"]), panel))
    (values, panel), (sharded_values, sharded_panel) = runs
    result[solver] = [
        float(np.max(np.abs(values - sharded_values))),
        float(np.max(np.abs(panel - sharded_panel))),
    ]
print(json.dumps(result))
