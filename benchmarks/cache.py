"""Persistent compilation cache: compile time in a cold and in a warm fresh process.

Runs the same solve in two fresh processes that share an empty, temporary cache folder
(`JAX_COMPILATION_CACHE_DIR`): the first compiles and writes the cache, the second
should read it. Prints the first-call time (compile + run) of each and their ratio.

    python benchmarks/cache.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jax
from benchmarks import _models
model = _models._retirement(10, n_wealth=200, n_consumption=1000)
start = time.perf_counter()
compiled = model._solve.lower(_models.RETIREMENT_PARAMS, validate=True).compile()
compile_s = time.perf_counter() - start
jax.block_until_ready(compiled(_models.RETIREMENT_PARAMS))
print(json.dumps({"compile_s": compile_s}))
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        runs = []
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(ROOT)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs.append(json.loads(out.strip().splitlines()[-1])["compile_s"])
        n_files = sum(1 for _ in Path(cache).rglob("*") if _.is_file())
    print(
        f"compile (lower + compile) in a fresh process: cold {runs[0]:.2f} s, warm "
        f"{runs[1]:.2f} s (warm/cold = {runs[1] / runs[0]:.2f}); {n_files} cache files"
    )


if __name__ == "__main__":
    main()
