"""Standard errors and tests for `estimate`: the likelihood's curvature at the estimate,
the model moments' influence through the initial mass, Wald intervals and the
overidentification test."""

from __future__ import annotations

import math
from statistics import NormalDist

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import warn
from ._objective import Objective
from ._optimise import SINGULAR, non_finite_entries, symmetric_inverse


@eqx.filter_jit
def _moments_by_initial_mass(objective: Objective, theta):
    """`∂m/∂μ`: each moment's derivative in the initial mass (by regime)."""
    params = objective.model_params(theta)
    return jax.jacrev(lambda mass: objective.moments(params, mass))(objective.mass)


def likelihood_curvature(objective: Objective, theta: np.ndarray, lower, upper, last=None):
    """Minus the Hessian of the log-likelihood, the subjects' scores, minus the gradient
    of the log-likelihood, in `θ`, and a note (None, or why the differences are wide):
    differences of the exact gradient and of the subjects' log-likelihoods (2 calls of
    the compiled evaluation per parameter and step, so nothing else is compiled).
    Central differences, one-sided within a step of a bound: the model need not be
    defined beyond it (a negative taste-shock scale). `last`: the optimiser's
    `(θ, objective.evaluate(θ))` at its final point, reused if at `theta`.

    Steps of 1e-4 of each parameter; where the Hessian so found is not positive definite
    (while the scores identify every direction), steps of a quarter of a standard error
    (from the scores' outer product): a DC-EGM likelihood's gradient jumps by about 1e-3
    where interpolated values cross data points, which over 1e-4 can put noise of the
    Hessian's own size into it, in a nearly collinear valley enough to flip the sign of
    an eigenvalue (measured on issue 62's model). The gradient is then the wide
    differences' midpoints' mean. Measured there too: where the 1e-4 Hessian is positive
    definite, switching to the wide one whenever their standard errors differ by 10% made
    things worse (its Newton step, 0.8 s.e., raised the likelihood).
    """
    n = len(theta)
    if last is not None and np.array_equal(last[0], theta):
        _, gradient, rows = last[1]
    else:
        _, gradient, rows = objective.evaluate(jnp.asarray(theta))
    n_subjects = rows.shape[0]

    def differences(steps):
        information, scores = np.zeros((n, n)), np.zeros((n_subjects, n))
        middles = []
        for j in range(n):
            h = min(steps[j], (upper[j] - lower[j]) / 4)
            up, down = theta.copy(), theta.copy()
            up[j] += 0.0 if theta[j] + h >= upper[j] else h
            down[j] -= 0.0 if theta[j] - h <= lower[j] else h
            gradient_up, rows_up = (
                (gradient, rows) if up[j] == theta[j] else objective.evaluate(jnp.asarray(up))[1:]
            )
            gradient_down, rows_down = (
                (gradient, rows)
                if down[j] == theta[j]
                else objective.evaluate(jnp.asarray(down))[1:]
            )
            width = up[j] - down[j]
            # evaluate's gradient is that of minus the mean log-likelihood
            information[:, j] = (gradient_up - gradient_down) * n_subjects / width
            scores[:, j] = (rows_up - rows_down) / width
            if up[j] != theta[j] and down[j] != theta[j]:
                middles.append(0.5 * (gradient_up + gradient_down))
        middle = np.mean(middles, axis=0) if middles else gradient
        return 0.5 * (information + information.T), scores, middle * n_subjects

    fine = differences(1e-4 * np.maximum(np.abs(theta), 1e-3))
    # The standard errors from the scores' outer product: unlike the Hessian, not made of
    # differences of the gradient, so the kinks barely move it.
    outer = fine[1].T @ fine[1]
    if not (np.all(np.isfinite(fine[0])) and np.all(np.isfinite(outer))):
        return (*fine, None)
    root = np.sqrt(np.abs(np.diag(outer)))
    root = np.where(root > 0, root, 1.0)
    if np.linalg.eigvalsh(outer / np.outer(root, root))[0] < 1e-8:
        return (*fine, None)  # a direction the scores do not move: no standard error
    variances = np.diag(symmetric_inverse(outer))
    # A quarter of a standard error, at most a tenth of the parameter.
    steps = np.minimum(0.25 * np.sqrt(variances), 0.1 * np.maximum(np.abs(theta), 1e-3))
    if not np.all(np.isfinite(steps) & (steps > 0)):
        return (*fine, None)
    coarse = differences(steps)

    def errors(information):
        variances = np.diag(symmetric_inverse(information))
        return np.sqrt(variances) if np.all(variances > 0) else None

    if errors(fine[0]) is not None or errors(coarse[0]) is None:
        return (*fine, None)
    return (
        *coarse,
        "the Hessian is from differences over a quarter of a standard error: over 1e-4 of "
        "each parameter it was not positive definite (the likelihood is not smooth on that "
        "scale)",
    )


# ------------------------------------------------------------------- profile likelihood
def to_unconstrained(objective: Objective, theta: np.ndarray) -> np.ndarray:
    """The optimiser's coordinates `x` of the parameters `θ` (the inverse of `natural`)."""
    n = len(objective.free)
    x = [f.to_unconstrained(float(t)) for f, t in zip(objective.free, theta[:n], strict=True)]
    if objective.types:
        shares = np.asarray(theta[n:])
        x += list(np.log(shares / (1.0 - shares.sum())))
    return np.asarray(x, dtype=float)


def model_influence(model, objective, theta, conditions) -> np.ndarray:
    """Each subject's influence on the model's moments through its initial state.

    The moments are ratios of quantities linear in the initial mass `μ`, so moving the
    sample's mass `μ̂` towards subject `i`'s own mass `μ_i` (its nodes, summing to 1)
    changes them by `∂m/∂μ · (μ_i − μ̂)`: the `ψ_i` subtracted from the data's `φ_i`.
    `∂m/∂μ · μ_i` is the derivative of `∂m/∂μ · μ` in subject `i`'s mass, for all
    subjects at once (one reverse pass per moment, no array of subjects × nodes).
    """
    derivative = _moments_by_initial_mass(objective, theta)
    n_subjects = len(conditions["regime"])
    n_moments = np.size(objective.data_moments)

    def moments_of(subject_mass):
        mass = model.initial_mass(conditions, objective.params, subject_mass=subject_mass)
        terms = (jnp.tensordot(derivative[r], mass[r], axes=mass[r].ndim) for r in mass)
        return sum(terms, start=jnp.zeros(n_moments))

    own = jax.jacrev(moments_of)(jnp.ones(n_subjects))
    sample = moments_of(jnp.full(n_subjects, 1.0 / n_subjects))
    return np.asarray(own - sample[:, None]).T


def wald_interval(theta, se, lower, upper, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wald intervals built where the parameter is unbounded and mapped back: with
    `u = (θ − lo) / (hi − lo)`, `θ̂ ± z se` on `(−∞, ∞)`, `lo + (θ̂ − lo) exp(± z se /
    (θ̂ − lo))` on `(lo, ∞)` (the delta method for `log(θ − lo)`), the mirror image on
    `(−∞, hi)`, and `lo + (hi − lo) sigmoid(logit(u) ± z se / ((hi − lo) u (1 − u)))`
    on `(lo, hi)`.

    Measured (docs/estimation.md, benchmarks/coverage.py): in the retirement model with
    taste shocks the disutility of work, the taste-shock scale and the wage are nearly
    collinear, and with 2,000 subjects the plain intervals of those covered the truth
    in 0.90-0.91 of 400 panels, these in 0.93-0.94 (with unequal tails; with 8,000
    subjects both cover 0.94-0.97). An estimate on its bound (then not converged) gets
    the plain interval, clipped to the bounds.
    """
    theta, se = np.asarray(theta, dtype=float), np.asarray(se, dtype=float)
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    plain = (theta - z * se, theta + z * se)
    out_lo, out_hi = np.clip(plain[0], lo, hi), np.clip(plain[1], lo, hi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(theta.size):
            above, below = theta[i] - lo[i], hi[i] - theta[i]
            if not (above > 0 and below > 0 and np.isfinite(se[i])):
                continue
            if np.isinf(lo[i]) and np.isinf(hi[i]):
                edges = plain[0][i], plain[1][i]
            elif np.isinf(hi[i]):
                spread = np.exp(z * se[i] / above)
                edges = lo[i] + above / spread, lo[i] + above * spread
            elif np.isinf(lo[i]):
                spread = np.exp(z * se[i] / below)
                edges = hi[i] - below * spread, hi[i] - below / spread
            else:
                width = hi[i] - lo[i]
                u = above / width
                x, se_x = math.log(u / (1 - u)), se[i] / (width * u * (1 - u))
                edges = tuple(
                    lo[i] + width * 0.5 * (1 + math.tanh(0.5 * (x + sign * z * se_x)))
                    for sign in (-1, 1)
                )
            out_lo[i], out_hi[i] = edges
    return out_lo, out_hi


# The J test's p-value below which a converged method of moments warns.
J_TEST_LEVEL = 1e-3


def check_overidentification(statistic: float, dof: int) -> None:
    """Warn where the J statistic (optimal weighting, more moments than parameters) is
    far in the tail of its `χ²` distribution: a local minimum or a misspecified model.
    Measured on the retirement model (3 parameters, 7 moments): from a start 30% away,
    1 panel of 300 ended, converged, at a taste-shock scale of 0.12 with J = 33.5
    (p ≈ 1e-6), where a start at the truth found J = 11.2 near it."""
    if dof < 1:
        return
    p_value = float(jax.scipy.special.gammaincc(dof / 2, max(statistic, 0.0) / 2))
    if p_value < J_TEST_LEVEL:
        warn(
            f"estimate('msm'): the J statistic {statistic:.4g} with {dof} degrees of freedom "
            f"has p-value {p_value:.2g}: the minimum found may be a local one (try other "
            "`starts`), or the model does not fit these moments."
        )


def why_no_standard_errors(se, matrix, what: str, names) -> str | None:
    """Why standard errors are NaN, in words naming the parameters (None: all finite).
    `matrix` is the one inverted, `what` its name."""
    nan = [n for n, v in zip(names, se, strict=True) if not np.isfinite(v)]
    if not nan:
        return None
    head = f"the standard errors of {nan} are NaN: {what} at the estimates"
    bad = non_finite_entries(matrix, names, names)
    if bad is not None:
        return f"{head} is not finite ({bad})"
    scale = np.sqrt(np.abs(np.diag(matrix)))
    scale = np.where(scale > 0, scale, 1.0)
    eigenvalues, vectors = np.linalg.eigh(matrix / np.outer(scale, scale))
    along = [n for n, v in zip(names, vectors[:, 0], strict=True) if abs(v) >= 0.3]
    if eigenvalues[0] < -SINGULAR * max(eigenvalues[-1], 1):
        return (
            f"{head} is not positive definite (negative curvature along a direction in "
            f"{along}): the estimates are not at a maximum"
        )
    if eigenvalues[0] < SINGULAR * max(eigenvalues[-1], 1):
        return (
            f"{head} is singular (no curvature along a direction in {along}): the data do "
            "not identify that combination (see result.identification())"
        )
    return f"{head} gives a negative variance"
