"""One process of the 2-process sharded solve in tests/test_knobs.py.

Usage: python knobs_multiprocess.py PORT PROCESS_ID OUT.npz
Each process has 2 host CPU devices; the 4 global devices shard the 4-type skill axis.
Then both processes simulate against the sharded solution (each device simulates the
subjects of its types), in one pass and in chunks of 4 subjects.
Process 0 writes the gathered value arrays to OUT.npz and the panels to OUT.npz.sim<b>.pkl.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

port, process_id, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import knobs_model  # noqa: E402

assert jax.device_count() == 4 and jax.local_device_count() == 2
model = knobs_model.build(skill_distributed=True, income_distributed=False)
solution = model.solve(knobs_model.params())
gathered = {}
for regime, values in solution.values.items():
    assert len(values.sharding.device_set) == 4, values.sharding
    gathered[regime] = np.asarray(multihost_utils.process_allgather(values, tiled=True))
frames = {}
for batch in (0, 4):
    result = model.simulate(
        knobs_model.params(),
        knobs_model.initial_conditions(),
        solution,
        key=jax.random.key(3),
        subject_batch_size=batch,
    )
    frames[batch] = result.to_dataframe()
if process_id == 0:
    np.savez(out, **gathered)
    for batch, frame in frames.items():
        frame.to_pickle(f"{out}.sim{batch}.pkl")
jax.distributed.shutdown()
