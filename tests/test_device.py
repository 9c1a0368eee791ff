"""On an accelerator: the library's results there equal the CPU's (issue 59).

Selected by `-m device` and run in one process (a TPU admits one at a time):

    python -m pytest -m device -o addopts=-ra      # on the machine with the accelerator

Each test runs its program in float32 on the default device and on the host's CPU in
the same process, and compares: values, a gradient, a simulated panel and an exact
distribution to float32 round-off (1e-5 relative; a TPU's float32 `log` and `exp`
round more than the CPU's), each solver against float64 within its documented
tolerance. Skipped where the default device is the CPU (CI): there both sides would be
the same program. `benchmarks/device_check.sh` times the same programs at full size.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_float32 import CASES, _largest_relative_difference
from tests.test_precision import PARAMS as SMALL_PARAMS
from tests.test_precision import build as build_small

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(
        jax.default_backend() == "cpu", reason="needs an accelerator (the default device is a CPU)"
    ),
]

# A TPU's float32 transcendental functions round more than the CPU's: its results equal
# the CPU's float32 results to this, relative (measured on the full Mahler–Yum solve:
# 1.1e-6 at every period).
DEVICE_TOLERANCE = 1e-5


@pytest.fixture
def float32():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", before)


def _on_cpu(fn):
    with jax.default_device(jax.devices("cpu")[0]):
        return jax.device_get(fn())


def test_values_and_gradient_equal_the_cpus(float32):
    model = build_small()

    def gradient():
        return jax.grad(lambda b: jnp.sum(model.solve({"discount_factor": b}).value("alive", 0)))(
            jnp.float32(0.95)
        )

    device = jax.device_get(model.solve(SMALL_PARAMS).values["alive"])
    cpu = _on_cpu(lambda: model.solve(SMALL_PARAMS).values["alive"])
    assert _largest_relative_difference(device, cpu) <= DEVICE_TOLERANCE
    assert _largest_relative_difference(jax.device_get(gradient()), _on_cpu(gradient)) <= (
        DEVICE_TOLERANCE
    )


@pytest.mark.parametrize("case", list(CASES))
def test_every_solver_on_the_device_is_close_to_float64(case):
    build, tolerance = CASES[case]
    jax.config.update("jax_enable_x64", True)
    try:
        model, params = build()
        reference = _on_cpu(lambda: model.solve(params).values)
    finally:
        jax.config.update("jax_enable_x64", False)
    try:
        model, params = build()
        device = jax.device_get(model.solve(params).values)  # validated: no false error
        cpu = _on_cpu(lambda: model.solve(params).values)
    finally:
        jax.config.update("jax_enable_x64", True)
    for name, value in device.items():
        assert _largest_relative_difference(value, reference[name]) <= tolerance, name
        assert _largest_relative_difference(value, cpu[name]) <= max(tolerance, DEVICE_TOLERANCE)


def test_simulation_and_distribution_equal_the_cpus(float32):
    model = build_small()
    initial = {
        "regime": jnp.zeros(200, dtype=int),
        "wealth": jnp.linspace(1.5, 9.5, 200),
        "income": jnp.arange(200) % 2,
    }

    def simulated():
        result = model.simulate(SMALL_PARAMS, initial, key=jax.random.key(0))
        return {"value": result.value, "consumption": result.actions["consumption"]}

    def distribution():
        return model.distribution(SMALL_PARAMS, initial).mass["alive"]

    device, cpu = jax.device_get(simulated()), _on_cpu(simulated)
    # Values at the same draws; a choice may differ only where two actions tie to
    # float32 round-off, which this model's grids do not have.
    np.testing.assert_array_equal(device["consumption"], cpu["consumption"])
    assert _largest_relative_difference(device["value"], cpu["value"]) <= DEVICE_TOLERANCE
    mass_device, mass_cpu = jax.device_get(distribution()), _on_cpu(distribution)
    np.testing.assert_allclose(mass_device, mass_cpu, rtol=DEVICE_TOLERANCE, atol=1e-7)
