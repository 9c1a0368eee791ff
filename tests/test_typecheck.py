"""The main flows (solve, simulate, choice probabilities, likelihood and its gradient) run
with every lcm_eqx annotation checked at run time by jaxtyping + beartype."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOWS = [
    "tests/test_core.py",
    "tests/test_stochastic_oracle.py",
    "tests/test_taste_shocks.py",
    "tests/test_estimation.py",
    # DC-EGM: solve, simulate, Euler errors and the likelihood gradient.
    "tests/test_dcegm.py::test_simulated_agents_make_the_analytical_decisions",
    "tests/test_dcegm.py::test_euler_errors_are_far_below_grid_search",
    "tests/test_dcegm.py::test_log_likelihood_gradient_with_dcegm_regimes",
]


@pytest.mark.slow
def test_main_flows_pass_runtime_type_checks():
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *FLOWS],
        cwd=ROOT,
        env={**os.environ, "LCM_EQX_TYPECHECK": "1", "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert "passed" in completed.stdout
