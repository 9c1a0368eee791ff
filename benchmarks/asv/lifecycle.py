"""Solve, simulate and gradient of each benchmark model: `time_*` (steady state, compiled
once in `setup`), `peakmem_*` (the process's peak resident memory) and `track_*` (the
cold compile in a fresh process, in seconds).

Sizes are `benchmarks/run.py`'s `SIZES[LCM_EQX_ASV_SIZE]` ("quick" by default, "full"
for the realistic sizes); results of the two are not comparable, so keep one per
machine. Nothing is built at import: asv imports this module in its runner process.
"""

from __future__ import annotations

import os
from typing import ClassVar

MODEL_NAMES = ["retirement", "precautionary", "large"]
SIZE = os.environ.get("LCM_EQX_ASV_SIZE", "quick")


def _model(name: str):
    """The model, its parameters and its `run.py` sizes."""
    from benchmarks import _models
    from benchmarks.run import SIZES

    build, params = {
        "retirement": (_models._retirement, _models.RETIREMENT_PARAMS),
        "precautionary": (_models._precautionary, _models.PRECAUTIONARY_PARAMS),
        "large": (_models._large, _models.LARGE_PARAMS),
    }[name]
    sizes = SIZES[SIZE][name]
    return build(**sizes), params, sizes


def _scalar_of_solution(model):
    """A scalar function of the parameters through the whole solve (for `jax.grad`)."""
    import jax.numpy as jnp

    first_regime = next(iter(model.regimes))

    def objective(params):
        solution = model.solve(params, validate="off")
        return jnp.sum(jnp.where(jnp.isfinite(v := solution.values[first_regime]), v, 0.0))

    return objective


class Solve:
    params = MODEL_NAMES
    param_names: ClassVar = ["model"]
    timeout = 600

    def setup(self, name):
        self.model, self.params, _ = _model(name)
        self._solve()  # compiles

    def _solve(self):
        import jax

        jax.block_until_ready(self.model.solve(self.params).values)

    def time_solve(self, name):
        self._solve()

    def peakmem_solve(self, name):
        self._solve()


class Simulate:
    params = MODEL_NAMES
    param_names: ClassVar = ["model"]
    timeout = 600

    def setup(self, name):
        from benchmarks.run import SIZES, _initial_conditions

        self.model, self.params, _ = _model(name)
        self.solution = self.model.solve(self.params)
        self.initial = _initial_conditions(name, SIZES[SIZE]["n_subjects"])
        self._simulate(0)  # compiles

    def _simulate(self, seed: int):
        import jax

        result = self.model.simulate(
            self.params, self.initial, solution=self.solution, key=jax.random.key(seed)
        )
        jax.block_until_ready(result.value)

    def time_simulate(self, name):
        self._simulate(1)

    def peakmem_simulate(self, name):
        self._simulate(1)


class Gradient:
    params = MODEL_NAMES
    param_names: ClassVar = ["model"]
    timeout = 600

    def setup(self, name):
        import jax

        self.model, self.params, _ = _model(name)
        self.gradient = jax.jit(jax.grad(_scalar_of_solution(self.model)))
        jax.block_until_ready(self.gradient(self.params))

    def time_gradient(self, name):
        import jax

        jax.block_until_ready(self.gradient(self.params))


class Compile:
    params = MODEL_NAMES
    param_names: ClassVar = ["model"]
    timeout = 600

    def track_cold_compile_seconds(self, name):
        """Lower + compile of the solve in a fresh interpreter, persistent cache off."""
        from benchmarks.run import SIZES, _compile_in_fresh_process

        return _compile_in_fresh_process(name, SIZES[SIZE][name])

    track_cold_compile_seconds.unit = "seconds"
