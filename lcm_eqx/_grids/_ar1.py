"""Finite-state Markov-chain approximations of a Gaussian AR(1) process.

Both functions discretise

    y' = mean * (1 - rho) + rho * y + eps,    eps ~ N(0, sigma**2),

whose unconditional (stationary) mean is ``mean`` and stationary variance is
``sigma**2 / (1 - rho**2)`` (requires ``|rho| < 1``).

They are pure JAX functions: ``n_points`` is a static Python int (it fixes
array shapes), whereas ``rho``, ``sigma`` and ``mean`` may be traced scalars,
so the functions can be ``jax.jit``-ed once and reused for many parameter
values, and differentiated with ``jax.grad`` (e.g. to estimate the income
process jointly with the rest of a life-cycle model).
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm
from jaxtyping import Array, ArrayLike, Float, Real

__all__ = ["rouwenhorst", "tauchen"]


def _check_n_points(n_points: int) -> int:
    """Validate that ``n_points`` is a static integer ``>= 2`` and return it."""
    if isinstance(n_points, bool):
        msg = "n_points must be a static Python int, got bool."
        raise TypeError(msg)
    try:
        n = operator.index(n_points)
    except TypeError as e:
        msg = (
            "n_points must be a static Python int (it fixes array shapes), "
            f"got {type(n_points).__name__}."
        )
        raise TypeError(msg) from e
    if n < 2:
        msg = f"n_points must be >= 2, got {n}."
        raise ValueError(msg)
    return n


def rouwenhorst(
    n_points: int,
    rho: Real[ArrayLike, ""],
    sigma: Real[ArrayLike, ""],
    mean: Real[ArrayLike, ""] = 0.0,
) -> tuple[Float[Array, " n"], Float[Array, "n n"]]:
    """Discretise a Gaussian AR(1) process with Rouwenhorst's method.

    Rouwenhorst's method is the recommended choice for highly persistent
    processes (``rho`` close to 1), typical of labour-income shocks: the
    resulting chain matches the process's stationary mean, stationary variance
    and first-order autocorrelation exactly, for any ``n_points``.

    The grid is ``n_points`` evenly spaced points on
    ``mean ± sqrt(n_points - 1) * sigma / sqrt(1 - rho**2)``, and the transition
    matrix is built by the usual recursion from the 2-state matrix
    ``[[p, 1 - p], [1 - q, q]]`` with ``p = q = (1 + rho) / 2``.

    Args:
        n_points: Number of grid points; a static Python int ``>= 2``.
        rho: Autocorrelation coefficient, ``|rho| < 1``. May be a traced scalar.
        sigma: Standard deviation of the innovation ``eps``, ``> 0``. May be a
            traced scalar.
        mean: Unconditional mean of the process. May be a traced scalar.

    Returns:
        A tuple ``(points, P)``: ``points`` of shape ``(n_points,)`` in
        increasing order, and the row-stochastic transition matrix ``P`` of
        shape ``(n_points, n_points)`` with
        ``P[i, j] = Pr(y' = points[j] | y = points[i])``.

    Example:
        >>> import jax
        >>> points, P = rouwenhorst(5, rho=0.9, sigma=0.1)
        >>> points.shape, P.shape
        ((5,), (5, 5))
        >>> # jit once, reuse for any rho / sigma (n_points must be static):
        >>> f = jax.jit(rouwenhorst, static_argnums=0)
        >>> points, P = f(5, 0.95, 0.1)
    """
    n = _check_n_points(n_points)
    rho = jnp.asarray(rho)
    sigma = jnp.asarray(sigma)
    mean = jnp.asarray(mean)
    dtype = jnp.result_type(rho, sigma, mean, float)
    rho = rho.astype(dtype)
    sigma = sigma.astype(dtype)
    mean = mean.astype(dtype)

    # Grid: evenly spaced, half-width psi = sqrt(n - 1) * stationary std.
    half_width = jnp.sqrt(n - 1.0) * sigma / jnp.sqrt(1.0 - rho**2)
    points = mean + half_width * jnp.linspace(-1.0, 1.0, n, dtype=dtype)

    # Transition matrix by the standard recursion on the number of states m,
    # starting from the 2-state matrix [[p, 1 - p], [1 - q, q]] with
    # p = q = (1 + rho) / 2. Step m -> m + 1 embeds the m x m matrix in the four
    # corners of an (m + 1) x (m + 1) matrix, weights the corners by p
    # (top-left), 1 - p (top-right), 1 - q (bottom-left) and q (bottom-right),
    # adds them up and halves the interior rows (which got two contributions).
    #
    # To keep compile times flat in n, the recursion runs as a fori_loop on a
    # fixed (n, n) buffer whose top-left m x m block holds the current matrix
    # (zeros elsewhere), so the corner embeddings are shifts by one row/column.
    # (An unrolled Python loop over growing shapes compiles in O(n) XLA ops,
    # i.e. seconds for n ~ 25.) The loop bounds are static, so reverse-mode
    # differentiation works.
    p = (1.0 + rho) / 2.0
    P2 = jnp.stack([jnp.stack([p, 1.0 - p]), jnp.stack([1.0 - p, p])])
    P = jnp.pad(P2, ((0, n - 2), (0, n - 2)))
    row = jnp.arange(n)

    def shift_down(A: Array) -> Array:
        return jnp.pad(A, ((1, 0), (0, 0)))[:n, :]

    def shift_right(A: Array) -> Array:
        return jnp.pad(A, ((0, 0), (1, 0)))[:, :n]

    def step(m: Array, P: Array) -> Array:
        # Current block is (m - 1) x (m - 1); build the m x m one.
        top_right = shift_right(P)
        bottom_left = shift_down(P)
        bottom_right = shift_right(bottom_left)
        P_new = p * (P + bottom_right) + (1.0 - p) * (top_right + bottom_left)
        interior = (row >= 1) & (row <= m - 2)
        return P_new * jnp.where(interior, 0.5, 1.0).astype(dtype)[:, None]

    P = jax.lax.fori_loop(3, n + 1, step, P)

    return points, P


def tauchen(
    n_points: int,
    rho: Real[ArrayLike, ""],
    sigma: Real[ArrayLike, ""],
    mean: Real[ArrayLike, ""] = 0.0,
    n_std: float = 3.0,
) -> tuple[Float[Array, " n"], Float[Array, "n n"]]:
    """Discretise a Gaussian AR(1) process with Tauchen's (1986) method.

    Tauchen's method places ``n_points`` evenly spaced points on
    ``mean ± n_std * sigma / sqrt(1 - rho**2)`` (``n_std`` stationary standard
    deviations) and assigns to each point ``points[j]`` the conditional
    probability that ``y'`` falls within half a grid step of it:

        P[i, j] = Phi((points[j] + h/2 - m_i) / sigma)
                  - Phi((points[j] - h/2 - m_i) / sigma),

    with ``m_i = mean * (1 - rho) + rho * points[i]``, grid step ``h`` and
    ``Phi`` the standard normal CDF. The first and last columns absorb the
    lower and upper tails. It works well for moderate persistence; for ``rho``
    close to 1 prefer :func:`rouwenhorst`.

    Args:
        n_points: Number of grid points; a static Python int ``>= 2``.
        rho: Autocorrelation coefficient, ``|rho| < 1``. May be a traced scalar.
        sigma: Standard deviation of the innovation ``eps``, ``> 0``. May be a
            traced scalar.
        mean: Unconditional mean of the process. May be a traced scalar.
        n_std: Half-width of the grid, in stationary standard deviations.

    Returns:
        A tuple ``(points, P)``: ``points`` of shape ``(n_points,)`` in
        increasing order, and the row-stochastic transition matrix ``P`` of
        shape ``(n_points, n_points)`` with
        ``P[i, j] = Pr(y' = points[j] | y = points[i])``.

    Example:
        >>> import jax
        >>> points, P = tauchen(7, rho=0.5, sigma=0.2, mean=1.0)
        >>> points.shape, P.shape
        ((7,), (7, 7))
        >>> # jit once, reuse for any rho / sigma (n_points must be static):
        >>> f = jax.jit(tauchen, static_argnums=0)
        >>> points, P = f(7, 0.6, 0.2)
    """
    n = _check_n_points(n_points)
    rho = jnp.asarray(rho)
    sigma = jnp.asarray(sigma)
    mean = jnp.asarray(mean)
    dtype = jnp.result_type(rho, sigma, mean, float)
    rho = rho.astype(dtype)
    sigma = sigma.astype(dtype)
    mean = mean.astype(dtype)

    # Work in deviations from the mean: z = y - mean, z' = rho z + eps.
    std_y = sigma / jnp.sqrt(1.0 - rho**2)
    half_width = n_std * std_y
    z = half_width * jnp.linspace(-1.0, 1.0, n, dtype=dtype)
    step = 2.0 * half_width / (n - 1)

    # Cell boundaries between consecutive points: z[k] + step/2, k = 0..n-2.
    bounds = z[:-1] + step / 2.0
    # cdf[i, k] = Pr(z' <= bounds[k] | z = z[i]).
    cdf = norm.cdf((bounds[None, :] - rho * z[:, None]) / sigma)
    zeros = jnp.zeros((n, 1), dtype=dtype)
    ones = jnp.ones((n, 1), dtype=dtype)
    cdf = jnp.concatenate([zeros, cdf, ones], axis=1)
    P = jnp.diff(cdf, axis=1)

    return mean + z, P
