"""Tests for the AR(1) discretisation functions (Rouwenhorst and Tauchen)."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy.stats import norm as sp_norm  # noqa: E402

from lcm_eqx._grids._ar1 import rouwenhorst, tauchen  # noqa: E402

# Un-jitted functions, as the user calls them.
EAGER = {"rouwenhorst": rouwenhorst, "tauchen": tauchen}
# Most tests go through jitted versions (n_points static): running the Python
# recursion op-by-op compiles every small op separately and is slow.
METHODS = {name: jax.jit(fn, static_argnums=0) for name, fn in EAGER.items()}
N_VALUES = [2, 3, 5, 10, 25]
RHO_VALUES = [0.0, 0.3, -0.5, 0.9, 0.99]


# ---------------------------------------------------------------------------
# Helpers (numpy, independent of the implementation under test)
# ---------------------------------------------------------------------------


def stationary_distribution_np(P):
    """Stationary distribution of a row-stochastic matrix, via a linear solve."""
    P = np.asarray(P, dtype=np.float64)
    n = P.shape[0]
    A = np.vstack([P.T - np.eye(n), np.ones((1, n))])
    b = np.concatenate([np.zeros(n), [1.0]])
    pi, *_ = np.linalg.lstsq(A, b, rcond=None)
    return pi


def chain_moments_np(points, P):
    """Stationary mean, variance and first-order autocorrelation of a chain."""
    x = np.asarray(points, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    pi = stationary_distribution_np(P)
    mu = pi @ x
    d = x - mu
    var = pi @ d**2
    autocov = pi @ (d * (P @ d))
    return mu, var, autocov / var


def tauchen_np(n, rho, sigma, mean=0.0, n_std=3.0):
    """Straightforward loop-based reference implementation of Tauchen (1986)."""
    std_y = sigma / np.sqrt(1.0 - rho**2)
    y = np.linspace(mean - n_std * std_y, mean + n_std * std_y, n)
    h = y[1] - y[0]
    P = np.empty((n, n))
    for i in range(n):
        cond_mean = mean * (1.0 - rho) + rho * y[i]
        for j in range(n):
            upper = (y[j] + h / 2.0 - cond_mean) / sigma
            lower = (y[j] - h / 2.0 - cond_mean) / sigma
            if j == 0:
                P[i, j] = sp_norm.cdf(upper)
            elif j == n - 1:
                P[i, j] = 1.0 - sp_norm.cdf(lower)
            else:
                P[i, j] = sp_norm.cdf(upper) - sp_norm.cdf(lower)
    return y, P


def rouwenhorst_np(n, rho, sigma, mean=0.0):
    """Reference Rouwenhorst: explicit growing-matrix recursion in numpy."""
    p = q = (1.0 + rho) / 2.0
    P = np.array([[p, 1 - p], [1 - q, q]])
    for m in range(3, n + 1):
        Z = np.zeros((m, m))
        A, B, C, D = Z.copy(), Z.copy(), Z.copy(), Z.copy()
        A[:-1, :-1] = P
        B[:-1, 1:] = P
        C[1:, :-1] = P
        D[1:, 1:] = P
        P = p * A + (1 - p) * B + (1 - q) * C + q * D
        P[1:-1] /= 2.0
    psi = np.sqrt(n - 1) * sigma / np.sqrt(1 - rho**2)
    return np.linspace(mean - psi, mean + psi, n), P


def stationary_variance_jnp(points, P):
    """Differentiable stationary variance of the chain (jnp)."""
    n = P.shape[0]
    A = P.T - jnp.eye(n)
    # Replace the last (redundant) balance equation by sum(pi) = 1.
    A = A.at[-1, :].set(1.0)
    b = jnp.zeros(n).at[-1].set(1.0)
    pi = jnp.linalg.solve(A, b)
    mu = pi @ points
    return pi @ (points - mu) ** 2


# ---------------------------------------------------------------------------
# Basic properties (both methods)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("rho", RHO_VALUES)
def test_shapes_stochastic_and_increasing(method, n, rho):
    points, P = METHODS[method](n, rho, 0.2, mean=0.7)
    assert points.shape == (n,)
    assert P.shape == (n, n)
    assert points.dtype == jnp.float64
    assert P.dtype == jnp.float64
    P = np.asarray(P)
    points = np.asarray(points)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(P >= 0.0)
    assert np.all(P <= 1.0)
    assert np.all(np.diff(points) > 0.0)
    assert np.all(np.isfinite(P))


@pytest.mark.parametrize("method", list(METHODS))
def test_points_symmetric_around_mean(method):
    points, _ = METHODS[method](7, 0.8, 0.3, mean=-1.5)
    np.testing.assert_allclose(np.asarray(points)[3], -1.5, atol=1e-14)
    np.testing.assert_allclose(
        np.asarray(points) + 1.5, -(np.asarray(points)[::-1] + 1.5), atol=1e-14
    )


@pytest.mark.parametrize("method", list(METHODS))
def test_mean_only_shifts_points(method):
    p0, P0 = METHODS[method](6, 0.7, 0.4, mean=0.0)
    p1, P1 = METHODS[method](6, 0.7, 0.4, mean=2.5)
    np.testing.assert_allclose(np.asarray(p1), np.asarray(p0) + 2.5, atol=1e-14)
    np.testing.assert_allclose(np.asarray(P1), np.asarray(P0), atol=1e-14)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("bad", [1, 0, -3])
def test_invalid_n_points_raises(method, bad):
    with pytest.raises(ValueError, match="n_points"):
        METHODS[method](bad, 0.5, 0.1)


@pytest.mark.parametrize("method", list(METHODS))
def test_non_int_n_points_raises(method):
    with pytest.raises(TypeError, match="n_points"):
        METHODS[method](5.0, 0.5, 0.1)


# ---------------------------------------------------------------------------
# Rouwenhorst: exact moments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("rho", RHO_VALUES)
@pytest.mark.parametrize(("sigma", "mean"), [(0.1, 0.0), (0.5, 2.0), (1.3, -0.7)])
def test_rouwenhorst_matches_moments_exactly(n, rho, sigma, mean):
    points, P = rouwenhorst(n, rho, sigma, mean=mean)
    mu, var, autocorr = chain_moments_np(points, P)
    target_var = sigma**2 / (1.0 - rho**2)
    np.testing.assert_allclose(mu, mean, rtol=0, atol=1e-10 * max(1.0, target_var))
    np.testing.assert_allclose(var, target_var, rtol=1e-10)
    np.testing.assert_allclose(autocorr, rho, rtol=0, atol=1e-10)


@pytest.mark.parametrize("n", [*N_VALUES, 60])
@pytest.mark.parametrize("rho", RHO_VALUES)
def test_rouwenhorst_matches_reference_recursion(n, rho):
    points, P = METHODS["rouwenhorst"](n, rho, 0.3, mean=0.5)
    ref_points, ref_P = rouwenhorst_np(n, rho, 0.3, mean=0.5)
    np.testing.assert_allclose(np.asarray(points), ref_points, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(P), ref_P, rtol=0, atol=1e-13)


def test_rouwenhorst_two_state_matrix_and_grid():
    rho, sigma = 0.6, 0.2
    points, P = rouwenhorst(2, rho, sigma)
    p = (1 + rho) / 2
    np.testing.assert_allclose(np.asarray(P), [[p, 1 - p], [1 - p, p]], atol=1e-15)
    psi = sigma / np.sqrt(1 - rho**2)
    np.testing.assert_allclose(np.asarray(points), [-psi, psi], atol=1e-15)


def test_rouwenhorst_stationary_distribution_is_binomial():
    from scipy.stats import binom

    n = 9
    _, P = rouwenhorst(n, 0.95, 0.1)
    pi = stationary_distribution_np(P)
    np.testing.assert_allclose(pi, binom.pmf(np.arange(n), n - 1, 0.5), atol=1e-12)


# ---------------------------------------------------------------------------
# Tauchen: against independent scipy implementation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("rho", RHO_VALUES)
@pytest.mark.parametrize(
    ("sigma", "mean", "n_std"), [(0.1, 0.0, 3.0), (0.5, 2.0, 2.5), (1.3, -0.7, 4.0)]
)
def test_tauchen_matches_reference(n, rho, sigma, mean, n_std):
    points, P = tauchen(n, rho, sigma, mean=mean, n_std=n_std)
    ref_points, ref_P = tauchen_np(n, rho, sigma, mean=mean, n_std=n_std)
    np.testing.assert_allclose(np.asarray(points), ref_points, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(P), ref_P, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------
# Gradients w.r.t. rho and sigma
# ---------------------------------------------------------------------------


def _objectives(method):
    fn = METHODS[method]

    def expected_sq(rho, sigma):
        points, P = fn(7, rho, sigma, mean=0.3)
        return jnp.sum(P @ points**2)

    def stat_var(rho, sigma):
        points, P = fn(7, rho, sigma, mean=0.3)
        return stationary_variance_jnp(points, P)

    def weighted(rho, sigma):
        # Touches every matrix entry with distinct weights.
        points, P = fn(7, rho, sigma, mean=0.3)
        w = jnp.arange(49.0).reshape(7, 7) / 49.0
        return jnp.sum(w * P) + jnp.sum(jnp.sin(points))

    return {"expected_sq": expected_sq, "stat_var": stat_var, "weighted": weighted}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("objective", ["expected_sq", "stat_var", "weighted"])
@pytest.mark.parametrize(("rho", "sigma"), [(0.0, 0.2), (0.5, 0.3), (0.95, 0.1)])
def test_grad_matches_finite_differences(method, objective, rho, sigma):
    f = jax.jit(_objectives(method)[objective])
    g_rho, g_sigma = jax.jit(jax.grad(f, argnums=(0, 1)))(rho, sigma)
    assert np.isfinite(g_rho)
    assert np.isfinite(g_sigma)

    h = 1e-6
    fd_rho = (f(rho + h, sigma) - f(rho - h, sigma)) / (2 * h)
    fd_sigma = (f(rho, sigma + h) - f(rho, sigma - h)) / (2 * h)
    # Absolute floor for derivatives that are (analytically) zero.
    np.testing.assert_allclose(float(g_rho), float(fd_rho), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(float(g_sigma), float(fd_sigma), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(("rho", "sigma"), [(0.0, 0.2), (0.5, 0.3), (0.95, 0.1)])
def test_rouwenhorst_grad_of_stationary_variance_analytic(rho, sigma):
    # Rouwenhorst matches the stationary variance exactly, so its derivatives
    # equal those of sigma^2 / (1 - rho^2).
    def f(rho, sigma):
        points, P = rouwenhorst(6, rho, sigma)
        return stationary_variance_jnp(points, P)

    g_rho, g_sigma = jax.grad(f, argnums=(0, 1))(rho, sigma)
    np.testing.assert_allclose(
        float(g_rho), 2 * rho * sigma**2 / (1 - rho**2) ** 2, rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(float(g_sigma), 2 * sigma / (1 - rho**2), rtol=1e-9)


@pytest.mark.parametrize("method", list(METHODS))
def test_grad_wrt_mean(method):
    def f(mean):
        points, P = METHODS[method](5, 0.5, 0.2, mean=mean)
        return jnp.sum(P @ points)

    # d/dmean sum_i sum_j P_ij (p_j + mean) = sum_ij P_ij = n.
    np.testing.assert_allclose(float(jax.grad(f)(0.4)), 5.0, rtol=1e-12)


# ---------------------------------------------------------------------------
# jit / tracing
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
def test_jit_traces_once_for_many_parameters(method):
    fn = EAGER[method]
    n_traces = 0

    def g(rho, sigma, mean):
        nonlocal n_traces
        n_traces += 1
        return fn(6, rho, sigma, mean=mean)

    g_jit = jax.jit(g)
    for rho in [0.0, 0.2, 0.5, 0.9, 0.99]:
        for sigma in [0.1, 0.7]:
            points, P = g_jit(jnp.float64(rho), jnp.float64(sigma), jnp.float64(1.0))
            ref_points, ref_P = fn(6, rho, sigma, mean=1.0)
            np.testing.assert_allclose(np.asarray(points), np.asarray(ref_points), atol=1e-12)
            np.testing.assert_allclose(np.asarray(P), np.asarray(ref_P), atol=1e-12)
    assert n_traces == 1


@pytest.mark.parametrize("method", list(METHODS))
def test_jit_with_static_n_points(method):
    # Jitted (n_points static) and eager results agree, for several n.
    fn = jax.jit(EAGER[method], static_argnums=0)
    for n in [2, 4, 9]:
        points, P = fn(n, 0.5, 0.1, 0.2)
        ref_points, ref_P = EAGER[method](n, 0.5, 0.1, 0.2)
        np.testing.assert_allclose(np.asarray(points), np.asarray(ref_points), atol=1e-14)
        np.testing.assert_allclose(np.asarray(P), np.asarray(ref_P), atol=1e-14)


@pytest.mark.parametrize("method", list(METHODS))
def test_eager_grad_is_finite(method):
    # The un-jitted function is differentiable too.
    def f(rho, sigma):
        points, P = EAGER[method](4, rho, sigma)
        return jnp.sum(P @ points**2)

    g = jax.grad(f, argnums=(0, 1))(0.5, 0.2)
    assert all(np.isfinite(float(x)) for x in g)


@pytest.mark.parametrize("method", list(METHODS))
def test_vmap_over_rho(method):
    rhos = jnp.array([0.0, 0.5, 0.9])
    points, P = jax.vmap(lambda r: METHODS[method](5, r, 0.2))(rhos)
    assert points.shape == (3, 5)
    assert P.shape == (3, 5, 5)
    for k, r in enumerate([0.0, 0.5, 0.9]):
        ref_points, ref_P = METHODS[method](5, r, 0.2)
        np.testing.assert_allclose(np.asarray(points[k]), np.asarray(ref_points), atol=1e-14)
        np.testing.assert_allclose(np.asarray(P[k]), np.asarray(ref_P), atol=1e-14)
