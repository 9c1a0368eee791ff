"""The hand-fused references of `benchmarks/` solve the benchmark's retirement model.

The library / reference ratio is meaningful only if both compute the same thing: the
plain and the tuned reference must match the library's solution of
`benchmarks/_models.py::_retirement` (small grids, float64).
"""

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from benchmarks import _models  # noqa: E402
from benchmarks.reference_retirement import make_solve  # noqa: E402


@pytest.mark.parametrize("tuned", [False, True])
def test_reference_matches_library(tuned):
    shape = {"n_periods": 4, "n_wealth": 60, "n_consumption": 150}
    solution = _models._retirement(**shape).solve(_models.RETIREMENT_PARAMS)
    working, retired = make_solve(*shape.values(), tuned=tuned)(_models.RETIREMENT_PARAMS)
    np.testing.assert_allclose(working, solution.values["working"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(retired, solution.values["retired"], rtol=1e-10, atol=1e-10)
    # Not trivially equal: values differ across periods and states.
    assert np.ptp(np.asarray(working)) > 1.0
