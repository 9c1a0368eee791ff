"""Peak memory of simulating many subjects in one pass vs in chunks (`subject_batch_size`).

Each variant runs in a fresh process and reports XLA's compiled temp memory of one
simulation chunk and the process's peak resident memory (`ru_maxrss`).

    python benchmarks/simulation_memory.py [--subjects 1000000] [--chunk 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
n, chunk = int(sys.argv[2]), int(sys.argv[3])
import jax, jax.numpy as jnp
from benchmarks import _models
params = _models.RETIREMENT_PARAMS
model = _models._retirement(5, n_wealth=100, n_consumption=100)
solution = model.solve(params)
k = chunk if 0 < chunk < n else n
ids = jnp.arange(k, dtype=jnp.int32)
args = (params, {r: jnp.concatenate([v[1:], jnp.zeros_like(v[:1])]) for r, v in
                 solution.values.items()},
        jnp.zeros(k, jnp.int32), {"wealth": jnp.linspace(1.0, 100.0, k)}, ids, jax.random.key(0))
temp = model._simulate.lower(*args).compile().memory_analysis().temp_size_in_bytes
initial = {"regime": jnp.zeros(n, jnp.int32), "wealth": jnp.linspace(1.0, 100.0, n)}
start = time.perf_counter()
model.simulate(params, initial, solution=solution, key=jax.random.key(0),
               subject_batch_size=chunk)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"chunk": chunk, "temp_bytes": temp, "peak_rss_bytes": peak,
                  "seconds": seconds}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subjects", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=100_000)
    args = parser.parse_args()
    rows = []
    for chunk in (0, args.chunk):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), str(args.subjects), str(chunk)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.subjects:,} subjects, retirement model (5 periods, 2 x 100 actions)")
    for row in rows:
        label = "one pass" if row["chunk"] == 0 else f"subject_batch_size={row['chunk']:,}"
        print(
            f"  {label:28s} XLA temp {row['temp_bytes'] / 2**20:9.1f} MiB, peak RSS "
            f"{row['peak_rss_bytes'] / 2**20:9.1f} MiB, {row['seconds']:.1f} s"
        )
    print(
        f"  ratio chunked/one pass: temp {rows[1]['temp_bytes'] / rows[0]['temp_bytes']:.3f}, "
        f"peak RSS {rows[1]['peak_rss_bytes'] / rows[0]['peak_rss_bytes']:.3f}"
    )


if __name__ == "__main__":
    main()
