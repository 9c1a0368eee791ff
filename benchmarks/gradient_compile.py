"""Compile time of reverse-mode gradients through the solve (issue 32), split by phase.

For three programs of the test suite: the gradient of a scalar of the DC-EGM solve and
of the grid-search solve of the retirement model with taste shocks, and the gradient of
a distribution moment of the life-cycle model (`tests/test_distribution.py`). Prints
trace / lower / compile seconds and the number of XLA kernels (fusions) of the compiled
program.

    python benchmarks/gradient_compile.py [--cases dcegm grid distribution] [--model-options]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

# Every compile measured: a fresh, empty persistent compilation cache for each run.
os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="gradient_compile_")

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import life_cycle as lc  # noqa: E402
from tests.models import retirement  # noqa: E402

PARAMS = {**retirement.PARAMS, "disutility_of_work": 0.5, "taste_shock_scale": 0.3}


def _solve_case(solver):
    model = retirement.build(
        3,
        taste_shocks=True,
        solver=retirement.dcegm(n_savings=120) if solver == "dcegm" else None,
    )

    def objective(p):
        solution = model.solve(p, validate="off")
        return sum(jnp.mean(solution.values[r][:2]) for r in ("working", "retired"))

    return objective, PARAMS, model


def _distribution_case():
    model = lc.build(6, n_wealth=60)
    start = {"working": np.full((60, 3), 0.0)}
    start["working"][4:12, :] = 1.0 / 24

    def moment(params):
        dist = model.distribution(params, start, validate="off")
        return jnp.sum(dist.mean("wealth")) + 10.0 * jnp.sum(dist.share("labor", "work")[:-1])

    return moment, lc.PARAMS, model


CASES = {
    "dcegm": lambda: _solve_case("dcegm"),
    "grid": lambda: _solve_case("grid"),
    "distribution": _distribution_case,
}


def measure(name, model_options):
    objective, params, model = CASES[name]()
    program = jax.jit(jax.grad(objective))
    t0 = time.perf_counter()
    traced = program.trace(params)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile(model.compiler_options() if model_options else None)
    t3 = time.perf_counter()
    text = compiled.as_text()
    kernels = len(re.findall(r"^\s*(?:ROOT )?\S+ = \S+ fusion\(", text, re.M))
    computations = len(re.findall(r"^(?:ENTRY )?%?\S+ .*\{$", text, re.M))
    jax.block_until_ready(compiled(params))
    t4 = time.perf_counter()
    jax.block_until_ready(compiled(params))
    t5 = time.perf_counter()
    print(
        f"{name:13s} trace {t1 - t0:6.2f}  lower {t2 - t1:6.2f}  compile {t3 - t2:6.2f}  "
        f"total {t3 - t0:6.2f}  fusions {kernels:5d}  computations {computations:5d}  "
        f"run {t5 - t4:.4f}  load {os.getloadavg()[0]:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument(
        "--model-options",
        action="store_true",
        help="compile with the model's own options (`Model.compiler_options`)",
    )
    args = parser.parse_args()
    for case in args.cases:
        measure(case, args.model_options)
