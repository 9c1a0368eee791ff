"""The refined search's small Newton systems are solved in `jax.numpy` (no LAPACK custom
call: two batched ones at once hung XLA:CPU's thread pool on a 2-core machine), against
numpy's LAPACK in float64."""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lcm_eqx._numerics import negative_definite, solve_small  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_solve_small_equals_lapack_with_and_without_pivoting(n):
    rng = np.random.default_rng(n)
    for trial in range(20):
        matrix = rng.normal(size=(n, n))
        if trial % 2 and n > 1:
            matrix[0, 0] = 0.0  # the first pivot is zero: elimination must exchange rows
        rhs = rng.normal(size=n)
        x = np.asarray(solve_small(jnp.asarray(matrix), jnp.asarray(rhs)))
        np.testing.assert_allclose(x, np.linalg.solve(matrix, rhs), rtol=1e-10, atol=1e-12)


def test_solve_small_batches_differentiates_and_leaves_singular_systems_non_finite():
    rng = np.random.default_rng(0)
    matrices = rng.normal(size=(50, 3, 3))
    rhs = rng.normal(size=(50, 3))
    batched = jax.jit(jax.vmap(solve_small))(jnp.asarray(matrices), jnp.asarray(rhs))
    np.testing.assert_allclose(batched, np.linalg.solve(matrices, rhs[..., None])[..., 0])

    # d x / d rhs = matrix^-1 (the refined step's derivative runs through the right side)
    jacobian = jax.jacfwd(lambda b: solve_small(jnp.asarray(matrices[0]), b))(jnp.asarray(rhs[0]))
    np.testing.assert_allclose(jacobian, np.linalg.inv(matrices[0]), rtol=1e-10, atol=1e-12)

    assert not np.all(np.isfinite(solve_small(jnp.zeros((2, 2)), jnp.ones(2))))
    assert not np.all(np.isfinite(solve_small(jnp.zeros((1, 1)), jnp.ones(1))))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_negative_definite_equals_the_eigenvalue_test(n):
    rng = np.random.default_rng(10 + n)
    seen = set()
    for _ in range(200):
        a = rng.normal(size=(n, n))
        symmetric = -(a @ a.T) + rng.normal(scale=1.5) * np.eye(n)
        expected = bool(np.all(np.linalg.eigvalsh(symmetric) < 0))
        assert bool(negative_definite(jnp.asarray(symmetric))) == expected
        seen.add(expected)
    assert seen == {True, False}  # both answers were tested
