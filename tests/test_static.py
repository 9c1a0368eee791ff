"""`constant_outputs`: functions of concrete inputs evaluated on the host with numpy,
against JAX's own evaluation; `None` where a traced value or an unknown operation is
involved."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lcm_eqx._solve._static import constant_outputs

CODES = np.arange(-3, 5, dtype=np.int32)


@pytest.mark.parametrize(
    "fn",
    [
        lambda c: jnp.where(c == 1, 0, 1),
        lambda c: jax.nn.one_hot(jnp.where(c > 0, 2, 0), 3),
        lambda c: jnp.stack(
            [
                c // 2,
                c % 3,
                jax.lax.div(c, jnp.asarray(2, c.dtype)),
                jax.lax.rem(c, jnp.asarray(3, c.dtype)),
            ]
        ),
        lambda c: (c >= 0) & (c != 2) | ~(c < -2),
        lambda c: jnp.stack([c & 6, c | 1, c ^ 5, ~c]),
        lambda c: jnp.clip(c, -1, 2).astype(jnp.float32) * 0.5 - jnp.abs(c) ** 2,
        lambda c: jnp.exp(-(c.astype(float) ** 2)) / jnp.sum(jnp.exp(-(c.astype(float) ** 2))),
        lambda c: jnp.concatenate([jnp.maximum(c, 0), jnp.minimum(c, 0)])[None, :].sum(axis=0),
        lambda c: jnp.array([jnp.max(c), jnp.min(c), jnp.any(c > 3), jnp.all(c > -4)]),
        lambda c: jax.vmap(lambda x: jnp.where(x == 0, jnp.array([1.0, 0.0]), 0.5))(c),
    ],
)
def test_matches_jax_on_concrete_inputs(fn):
    (known,) = constant_outputs(fn, CODES)
    expected = np.asarray(fn(jnp.asarray(CODES)))
    assert known.dtype == expected.dtype
    # numpy may round differently in single precision (it computes in double).
    np.testing.assert_allclose(known, expected, rtol=1e-6 if known.dtype.itemsize < 8 else 1e-12)


def test_pytree_inputs_and_no_inputs():
    known = constant_outputs(lambda d: d["a"] + 2 * d["b"], {"a": CODES, "b": CODES})
    np.testing.assert_array_equal(known[0], 3 * CODES)
    np.testing.assert_array_equal(constant_outputs(lambda: jnp.arange(3) * 2)[0], [0, 2, 4])


def test_unknown_where_a_traced_value_or_another_operation_enters():
    found = []

    @jax.jit
    def solve(parameter):
        found.append(constant_outputs(lambda c: jnp.where(c > 0, parameter, 0.0), CODES))
        # The same function without the traced parameter is known inside the trace.
        found.append(constant_outputs(lambda c: jnp.where(c > 0, 1.0, 0.0), CODES))
        return parameter

    solve(2.0)
    assert found[0] is None
    np.testing.assert_array_equal(found[1][0], np.where(CODES > 0, 1.0, 0.0))
    # Gathers, sorts and other operations outside the evaluated set: not known.
    assert constant_outputs(lambda c: jnp.sort(c), CODES) is None
    assert constant_outputs(lambda c: jnp.array([0.1, 0.2, 0.3])[c % 3], CODES) is None
