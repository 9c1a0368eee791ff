"""`jax.grad` through `model.simulate`, for both solvers (issue 32, item 2).

The simulation evaluates each regime's subjects in blocks (`in_blocks`); the loop over
blocks has a static trip count, so reverse mode differentiates through it. Checked
against central finite differences under common random numbers (the same key), in
float64, on smooth statistics: mean consumption with `DCEGM` (continuous, not a grid
point) and the mean simulated value with `GridSearch` (its choices are grid points, so
its consumption has no derivative, but the value of the chosen action does). Subjects
start retired, so that no discrete choice can flip between the perturbed solves.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lcm_eqx._simulate import _simulate  # noqa: E402
from tests.models import retirement  # noqa: E402

PARAMS = {"discount_factor": 0.95, "interest_rate": 0.03, "disutility_of_work": 1.0, "wage": 20.0}
STEP = 1e-5


def statistic(model, solver):
    conditions = {"regime": np.ones(40, int), "wealth": np.linspace(20.0, 300.0, 40)}
    key = jax.random.key(0)

    def mean(values):
        result = model.simulate({**PARAMS, **values}, conditions, key=key)
        if solver == "dcegm":
            return jnp.mean(result.actions["consumption"])
        return jnp.mean(result.value)

    return mean


@pytest.mark.parametrize("solver", ["dcegm", pytest.param("grid-search", marks=pytest.mark.slow)])
def test_grad_of_a_simulated_statistic_equals_central_differences(solver, monkeypatch):
    # Blocks of 16 subjects: the 40 retired ones take three blocks (the last one part
    # full), the empty working regime none, so both branches of the loop are traced.
    monkeypatch.setattr(_simulate, "SUBJECT_BLOCK", 16)
    model = retirement.build(
        n_periods=3,
        n_wealth=30,
        n_consumption=120,
        solver=retirement.dcegm(n_savings=40) if solver == "dcegm" else None,
    )
    mean = statistic(model, solver)
    at = {"interest_rate": 0.03, "discount_factor": 0.95}
    gradient = jax.grad(mean)(at)
    for name, x in at.items():
        up, down = mean({**at, name: x + STEP}), mean({**at, name: x - STEP})
        central = (float(up) - float(down)) / (2 * STEP)
        assert abs(central) > 1e-3, (name, central)  # a statistic that does move
        np.testing.assert_allclose(float(gradient[name]), central, rtol=1e-5, err_msg=name)
