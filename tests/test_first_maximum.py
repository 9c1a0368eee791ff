"""`_reduce.at_first_maximum`: the first maximiser along an axis (numpy's `argmax`: the
first NaN if any, the first of tied maxima) and arrays read there, in the CPU's form (an
argmax and gathers) and in the accelerator's (selects slice by slice along a short axis,
an argmax and a select-sum along a long one), against numpy and with derivatives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lcm_eqx import _numerics
from lcm_eqx._solve._reduce import FIRST_MAXIMUM_SLICES, at_first_maximum

jax.config.update("jax_enable_x64", True)


def _values(n: int, axis: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    shape = [7, 3, 4]
    shape[axis] = n
    values = np.round(rng.normal(size=shape), 1)  # rounded: ties
    rows = np.moveaxis(values, axis, -1)  # a view: writes reach `values`
    rows[0, 0] = -np.inf  # every entry ruled out: the first
    rows[1, 0, n // 2] = np.nan  # a NaN wins
    rows[1, 1, [1, n - 1]] = np.nan  # the first of two
    rows[2, 0] = 1.5  # all tied: the first
    rows[2, 1, [0, n - 1]] = 9.0  # tied at the ends
    return values


@pytest.fixture(params=["cpu", "accelerator"])
def form(request, monkeypatch):
    # Each test traces its own function, so no cached program holds the other form: the
    # choice is patched without clearing JAX's caches (which would make every later test
    # in this process compile again).
    if request.param == "accelerator":
        monkeypatch.setattr(_numerics, "on_accelerator", lambda: True)
    return request.param


@pytest.mark.parametrize("n", [2, 5, FIRST_MAXIMUM_SLICES, FIRST_MAXIMUM_SLICES + 4])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_the_first_maximiser_and_the_values_there_equal_numpys(form, n, axis):
    values = _values(n, axis)
    other = np.arange(values.size, dtype=float).reshape(values.shape)
    first, (top, read) = jax.jit(lambda v, o: at_first_maximum(v, axis, (v, o)))(values, other)
    expected = np.argmax(values, axis=axis)
    np.testing.assert_array_equal(first, expected)
    taken = np.expand_dims(expected, axis)
    np.testing.assert_array_equal(top, np.take_along_axis(values, taken, axis).squeeze(axis))
    np.testing.assert_array_equal(read, np.take_along_axis(other, taken, axis).squeeze(axis))
    assert first.dtype == jnp.argmax(jnp.zeros(2)).dtype
    program = str(jax.make_jaxpr(lambda v: at_first_maximum(v, axis, (v,)))(values))
    assert ("argmax" in program) == (form == "cpu" or n > FIRST_MAXIMUM_SLICES)


@pytest.mark.parametrize("n", [5, FIRST_MAXIMUM_SLICES + 4])
def test_the_derivative_is_the_first_maximisers(form, n):
    values = _values(n, 1)
    values = np.where(np.isfinite(values), values, 0.0)  # derivatives of finite entries
    direction = np.random.default_rng(0).normal(size=values.shape)

    def read(v):
        return at_first_maximum(v, 1, (v, 2.0 * v))[1]

    _, (d_top, d_twice) = jax.jvp(read, (values,), (direction,))
    taken = np.expand_dims(np.argmax(values, axis=1), 1)
    expected = np.take_along_axis(direction, taken, 1).squeeze(1)
    np.testing.assert_allclose(d_top, expected, rtol=1e-15)
    np.testing.assert_allclose(d_twice, 2 * expected, rtol=1e-15)
    cotangent = jax.grad(lambda v: jnp.sum(read(v)[0] * jnp.arange(7.0)[:, None]))(values)
    np.testing.assert_array_equal(np.sum(cotangent != 0), np.sum(np.arange(7) != 0) * 4)
