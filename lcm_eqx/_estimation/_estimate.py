"""Estimation in one call: `estimate(model, params, data=..., method=..., free=[...])`.

What it does, in order:

1. **Free parameters.** Each entry of `free` names a scalar leaf of `params` (`"wage"`
   or a path `("working", "wage")`); the rest stay fixed. Each free parameter lives in
   an interval (`bounds`, with defaults `(0, 1)` for `discount_factor` and `(0, ∞)` for
   `taste_shock_scale`) and is optimised on an unconstrained coordinate `x`:
   `θ = x` on `(−∞, ∞)`, `θ = lo + exp(x)` on `(lo, ∞)` (log), `θ = hi − exp(x)` on
   `(−∞, hi)`, `θ = lo + (hi − lo)·sigmoid(x)` on `(lo, hi)` (logit).
2. **The objective**, a pure JAX function of `x` through `model.solve`:
   - `"mle"`: minus the mean over subjects of each subject's log-likelihood
     (`log_likelihood(..., per_row=True)` summed by subject); with unobserved types,
     each subject's likelihood is the share-weighted mixture over the types of the
     product of its rows' likelihoods, from one solve (the type is a permanent
     discrete state of the model).
   - `"msm"`: `½ (m(θ) − m̂)ᵀ W (m(θ) − m̂)`, with `m(θ)` the `Profile` moments of the
     exact distribution (`model.distribution`, no simulation noise) started from the
     data's period-0 rows (read as `simulate` reads initial conditions), `m̂` the
     data's moments (`data_moments`) and `W` the weighting matrix.
3. **The optimiser**, from each start (the best run is kept): for `"mle"`, L-BFGS
   (optax's direction, a backtracking line search) on the parameters rescaled by a
   finite-difference Hessian, which on a failed line search restarts from the best
   point rescaled, then tries the steepest descent, and says what it did (`_minimise`);
   for `"msm"`, damped Gauss–Newton
   (the objective is a quadratic form in moments with an exact Jacobian). Converged
   means: the objective is finite, the gradient's largest entry (in `x`) is at most
   `tolerance`, the curvature matrix (the Hessian, or `GᵀWG`) is positive definite,
   the Newton step from the estimate is at most `step_tolerance` standard errors in
   every parameter, and no parameter is at a bound (the Newton step would leave its
   interval). The gradient in `x` alone can mislead: it vanishes where the transform
   saturates, however far the optimum lies beyond the bound. Anything else is
   reported as not converged, with a message and an `LcmWarning`. Derivatives are
   taken in the free parameters alone; one that is not finite at the start is an
   `EstimationError` naming the parameter (and the moment), and trial steps where
   one is not finite are refused, so no linear solve ever sees one.
4. **Standard errors** in the natural parameters `θ`: for `"mle"`, from the Hessian
   `H` of minus the log-likelihood, the outer product of the subjects' scores `S`,
   and the robust sandwich `H⁻¹ SᵀS H⁻¹`; for `"msm"`, the sandwich
   `(GᵀWG)⁻¹ GᵀWΩWG (GᵀWG)⁻¹` with the exact Jacobian `G = ∂m/∂θ` and `Ω` the
   covariance of `m̂ − m(θ̂)`: both move with the sample's initial conditions, which
   the model's moments share with the data, so `Ω` uses the difference of the data
   moments' influence and the model moments' influence through the initial mass.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd

from .._errors import EstimationError, InvalidDataError, InvalidInitialConditionsError, warn
from .._grids import INDEX_SUFFIX, AbstractProcessGrid, DiscreteGrid
from .._pandas import coerce_params
from ._data import RegimeBlock, prepare_data, regime_codes
from ._likelihood import block_log_likelihoods, likelihood_terms
from ._moments import Profile, panel_moments, profiles_tuple

if TYPE_CHECKING:
    from .._facade import Model

# The most Newton steps after the optimiser stopped at a kink short of the optimum.
POLISH_STEPS = 2
DEFAULT_BOUNDS = {"discount_factor": (0.0, 1.0), "taste_shock_scale": (0.0, math.inf)}
# Relative eigenvalue below which a curvature matrix counts as singular.
SINGULAR = 1e-10


class Free(eqx.Module):
    """One free parameter: where it is in `params`, its label and its interval."""

    path: tuple[str, ...] = eqx.field(static=True)
    lower: float = eqx.field(static=True)
    upper: float = eqx.field(static=True)

    @property
    def label(self) -> str:
        return "/".join(self.path)

    def to_natural(self, x: float) -> tuple[float, float]:
        """`θ` and `dθ/dx` at the unconstrained `x` (a line search's wild trial step
        gives an infinite or boundary `θ`, whose objective it then rejects)."""
        lo, hi = self.lower, self.upper
        if math.isinf(lo) and math.isinf(hi):
            return x, 1.0
        with np.errstate(over="ignore"):
            growth = float(np.exp(x))
        if math.isinf(hi):
            return lo + growth, growth
        if math.isinf(lo):
            return hi - growth, -growth
        u = 0.5 * (1.0 + math.tanh(0.5 * x))  # the logistic function, without overflow
        return lo + (hi - lo) * u, (hi - lo) * u * (1.0 - u)

    def to_unconstrained(self, theta: float) -> float:
        lo, hi = self.lower, self.upper
        if math.isinf(lo) and math.isinf(hi):
            return theta
        if math.isinf(hi):
            return math.log(theta - lo)
        if math.isinf(lo):
            return math.log(hi - theta)
        u = (theta - lo) / (hi - lo)
        return math.log(u / (1 - u))


class Types(eqx.Module):
    """Unobserved types: a permanent discrete state left out of the data, with shares."""

    state: str = eqx.field(static=True)
    n_types: int = eqx.field(static=True)


class Objective(eqx.Module):
    """Everything the optimiser's objective needs; arrays are leaves, structure static."""

    model: Any = eqx.field(static=True)
    method: str = eqx.field(static=True)
    params: dict
    free: tuple[Free, ...] = eqx.field(static=True)
    types: Types | None = eqx.field(static=True)
    # "mle": the data's blocks (one set per unobserved type), each row's subject (a
    # cluster) in the blocks' layout (`n_clusters` at padding), and what the likelihood
    # reads. Not `ChoiceData`, whose number of rows is static: a panel of as many
    # subjects with another number of rows would trace and compile the objective again.
    data: tuple[dict[str, RegimeBlock], ...] | None
    clusters: dict[str, Any] | None
    n_clusters: int = eqx.field(static=True)
    terms: tuple = eqx.field(static=True)
    measurement_sd: Any
    # "msm"
    mass: dict | None
    profiles: tuple[tuple[Profile, tuple[int, ...]], ...] = eqx.field(static=True)
    data_moments: Any
    weight: Any

    @property
    def n_free(self) -> int:
        return len(self.free) + (self.types.n_types - 1 if self.types else 0)

    def natural(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`θ` (the free parameters, then the type shares 1…K−1) and `dθ/dx` at `x`."""
        n = len(self.free)
        theta, jacobian = np.zeros(self.n_free), np.zeros((self.n_free, self.n_free))
        for i, f in enumerate(self.free):
            theta[i], jacobian[i, i] = f.to_natural(float(x[i]))
        if self.types:
            logits = np.concatenate([[0.0], x[n:]])
            shares = np.exp(logits - logits.max())
            shares = shares[1:] / shares.sum()
            theta[n:] = shares
            jacobian[n:, n:] = np.diag(shares) - np.outer(shares, shares)
        return theta, jacobian

    def model_params(self, theta):
        params = self.params
        for i, f in enumerate(self.free):
            params = _replace(params, f.path, theta[i])
        return params

    def shares(self, theta):
        rest = theta[len(self.free) :]
        return jnp.concatenate([1.0 - jnp.sum(rest, keepdims=True), rest])

    def contributions(self, params, theta):
        """`"mle"`: each subject's log-likelihood (the type shares read from `theta`)."""
        solution = self.model.solve(params, validate="off")
        clusters = cast(dict, self.clusters)

        def by_subject(blocks):
            by_block = block_log_likelihoods(
                self.model, self.terms, "off", params, blocks, solution, self.measurement_sd
            )
            total = jnp.zeros(self.n_clusters, jnp.result_type(float))
            for name, values in by_block.items():
                total = total + jax.ops.segment_sum(
                    values.reshape(-1), clusters[name].reshape(-1), self.n_clusters
                )
            return total

        if self.types is None:
            return by_subject(cast(Any, self.data)[0])
        per_type = jnp.stack([by_subject(d) for d in cast(Any, self.data)])
        log_shares = jnp.log(self.shares(theta))
        return jax.nn.logsumexp(per_type + log_shares[:, None], axis=0)

    def moments(self, params, mass=None):
        """`"msm"`: the model's moments (from the data's initial mass unless given)."""
        dist = self.model.distribution(params, self.mass if mass is None else mass, validate="off")
        return jnp.concatenate([profile.of(dist, periods) for profile, periods in self.profiles])

    def evaluate(self, theta) -> tuple[float, np.ndarray, np.ndarray]:
        """The objective, its gradient in `θ`, and the subjects' log-likelihoods
        (`"mle"`) or the model's moments (`"msm"`), from one compiled call."""
        if self.method == "mle":
            contributions, gradient = (np.asarray(a) for a in _likelihood_and_gradient(self, theta))
            n = contributions.shape[0]
            return -float(np.sum(contributions)) / n, -gradient / n, contributions
        moments, jacobian = (np.asarray(a) for a in _moments_and_jacobian(self, theta))
        residual = moments - np.asarray(self.data_moments)
        weighted = np.asarray(self.weight) @ residual
        return 0.5 * float(residual @ weighted), jacobian.T @ weighted, moments


def _replace(tree, path, value):
    if len(path) == 1:
        return {**tree, path[0]: value}
    return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _with_model_options(function):
    """`function(objective, θ)` under `eqx.filter_jit`, compiled with the XLA options that
    `model.solve` compiles with (`model.compiler_options()`: on a DC-EGM model, its ~120
    small kernels compile faster without XLA:CPU's fusion emitters), one wrapper per set
    of options; without them where this XLA refuses one."""
    programs: dict = {}

    def call(objective, theta):
        options = objective.model.compiler_options()
        key = tuple(sorted(options.items()))
        if key not in programs:
            programs[key] = eqx.filter_jit(
                function, **({"compiler_options": options} if options else {})
            )
        try:
            return programs[key](objective, theta)
        except jax.errors.JaxRuntimeError as error:
            if not options or "No such compile option" not in str(error):
                raise
            programs[key] = eqx.filter_jit(function)
            return programs[key](objective, theta)

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


# Derivatives are taken in `θ` alone, read into the parameters inside the function
# differentiated: the fixed parameters are constants there, so their tangents are
# symbolic zeros that JAX never multiplies. Zero tangents of every parameter (as when the
# whole dict was differentiated) turn a function with an infinite slope where a fixed
# parameter puts it (Mahler–Yum's `taxed_income`, `income ** (1 − rate)` at income 0)
# into 0·∞ = NaN in the Jacobian.
@_with_model_options
def _likelihood_and_gradient(objective: Objective, theta):
    """The subjects' log-likelihoods and the gradient of their sum (reverse mode)."""

    def contributions(theta):
        return objective.contributions(objective.model_params(theta), theta)

    values, pullback = jax.vjp(contributions, theta)
    (gradient,) = pullback(jnp.ones_like(values))
    return values, gradient


@_with_model_options
def _moments_and_jacobian(objective: Objective, theta):
    """The model's moments and their exact Jacobian `∂m/∂θ` (forward mode)."""

    def moments(theta):
        return objective.moments(objective.model_params(theta))

    def along(direction):
        return jax.jvp(moments, (theta,), (direction,))

    values, jacobian = jax.vmap(along)(jnp.eye(theta.shape[0], dtype=theta.dtype))
    return values[0], jacobian.T


def _non_finite(matrix: np.ndarray, rows, columns) -> str | None:
    """The non-finite entries of a Jacobian `∂row/∂column`, named (None: all finite)."""
    bad = np.argwhere(~np.isfinite(matrix))
    if bad.size == 0:
        return None
    named = ", ".join(f"∂({rows[i]})/∂({columns[j]}) = {matrix[i, j]}" for i, j in bad[:4])
    return named + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")


NON_FINITE_ADVICE = (
    "a function of the model has an infinite or undefined slope there in these parameters "
    "(such as x ** a or log(x) at x = 0, or a NaN in a branch that jnp.where discards): "
    "make it differentiable there (keep the argument away from the singular point in both "
    "branches of the jnp.where) or free other parameters"
)


# Armijo's sufficient-decrease constant, and the most trial steps of one line search.
ARMIJO = 1e-4
MAX_TRIALS = 20
# The L-BFGS direction (no line search of its own), compiled once for every estimation.
LBFGS = optax.lbfgs(linesearch=None)
_lbfgs_direction = jax.jit(LBFGS.update)
# The relative change of the objective that counts as its rounding (a solve's own
# tolerances leave the likelihood of a DC-EGM model noisy at about 1e-13 of its value).
ROUNDING = 1e-12


class Run(NamedTuple):
    """Where `_minimise` stopped: `x`, the objective and the largest gradient entry
    (in `x`) there, the steps taken, the trace, why it stopped early (None when the
    gradient criterion was met), what it did on the way when a line search failed (in
    words), and the last evaluation `(θ, objective.evaluate(θ))` at `x`."""

    x: np.ndarray
    value: float
    gradient: float
    n_steps: int
    trace: np.ndarray
    reason: str | None
    notes: tuple[str, ...]
    last: tuple | None
    settled: bool = False  # stopped at a kink where what is left to gain is negligible


def _preconditioner(value_and_gradient, x, gradient, mask) -> np.ndarray:
    """`P` such that in the coordinates `z` of `x = x₀ + P z` the objective's Hessian is
    about the identity: the Hessian in `x` by forward differences of the gradient (one
    evaluation per moving coordinate), symmetrised, with its eigenvalues replaced by their
    absolute values floored at 1e-8 of the largest (so `P` exists, and gives a descent
    direction, where the Hessian is indefinite or singular far from the optimum).

    The likelihood's curvature differs by orders of magnitude between parameters (a
    discount factor near 1 on the logit scale against a disutility): unscaled, L-BFGS's
    first steps overshoot by factors of 100 and its line search spends most evaluations
    (measured on the second-hour model of issue 62: 110 evaluations from the far start,
    43 with this scaling). The identity where a difference is not finite."""
    n = len(x)
    moving = np.flatnonzero(mask)
    hessian = np.zeros((moving.size, moving.size))
    for k, j in enumerate(moving):
        # Wide enough to average over the tiny kinks of a DC-EGM likelihood (see
        # `_likelihood_curvature`): a scaling need not be exact.
        h = 1e-2 * max(1.0, abs(x[j]))
        shifted = x.copy()
        shifted[j] += h
        hessian[:, k] = (value_and_gradient(shifted)[1] - gradient)[moving] / h
    if moving.size == 0 or not np.all(np.isfinite(hessian)):
        return np.eye(n)
    eigenvalues, vectors = np.linalg.eigh(0.5 * (hessian + hessian.T))
    top = float(np.max(np.abs(eigenvalues)))
    if not top > 0:
        return np.eye(n)
    scales = np.maximum(np.abs(eigenvalues), 1e-8 * top)
    out = np.eye(n)
    out[np.ix_(moving, moving)] = vectors / np.sqrt(scales)
    return out


def _line_search(value_and_gradient, x, value, gradient, direction):
    """Backtracking from the full step until Armijo's condition holds, each next trial
    at the minimum of the quadratic through the value, the slope and the last trial
    (kept within 0.1 to 0.5 of it; a quarter after a non-finite trial). Returns the
    accepted `(size, value, gradient)` and the trials `(size, value)` refused before."""
    slope = float(gradient @ direction)
    size, refused = 1.0, []
    reach = float(np.max(np.abs(direction)))
    for _ in range(MAX_TRIALS):
        trial_value, trial_gradient = value_and_gradient(x + size * direction)
        finite = np.isfinite(trial_value) and np.all(np.isfinite(trial_gradient))
        # A strict decrease too: at the objective's rounding Armijo's bound rounds to
        # `value`, and steps that change nothing would pass it until max_steps.
        if finite and trial_value <= value + ARMIJO * size * slope and trial_value < value:
            return (size, trial_value, trial_gradient), refused
        refused.append((size, trial_value))
        if finite:
            excess = trial_value - value - slope * size
            guess = -slope * size**2 / (2 * excess) if excess > 0 else 0.5 * size
            size = min(max(guess, 0.1 * size), 0.5 * size)
        else:
            size *= 0.25
        if size * reach <= 1e-13 * (1.0 + float(np.max(np.abs(x)))):
            break  # the trial point no longer differs from x beyond rounding
    return None, refused


def _why_no_decrease(value, slope, refused) -> str:
    """Why the last line search (its `slope` and `refused` trials) found no decrease."""
    size, trial = refused[-1]
    if not np.isfinite(trial):
        return f"the objective was {trial} down to a step of {size:.2g}"
    floor = ROUNDING * max(1.0, abs(value))
    if -slope <= floor:
        return (
            f"the decrease the gradient promises ({-slope:.2g}) is within the objective's "
            f"rounding ({floor:.1g}): the estimate is as precise as the objective allows, and "
            "the tolerance is tighter than that"
        )
    return (
        f"at a step of {size:.2g} the slope {slope:.3g} promises a change of "
        f"{slope * size:.3g} but the objective changed by {trial - value:+.3g}, so it is not "
        "smooth there (a kink, e.g. where a policy crosses a grid node) or its gradient is "
        "inaccurate; try other `starts`, finer grids or a looser `tolerance`"
    )


def _minimise(
    objective: Objective,
    x: np.ndarray,
    tolerance: float,
    max_steps: int,
    fixed=None,
    start=None,
    negligible: float = 0.0,
) -> Run:
    """L-BFGS (optax's direction) with a backtracking line search, from `x`, on the
    parameters rescaled by a finite-difference Hessian (`_preconditioner`).

    Every evaluation is the one compiled `objective.evaluate`, so the optimiser adds no
    compilation of its own; the loop runs in Python on `n_free` numbers. Coordinates
    where the mask `fixed` is True stay put (their gradient is taken as 0, and L-BFGS
    never moves along a coordinate whose gradient stays 0): the profile likelihood.
    `start` is the objective and gradient in `x` at `x`, when already known.

    A line search that finds no decrease is what a careful user would then try: restart
    from the best point (the current one) with the quasi-Newton memory reset and the
    parameters rescaled by a new finite-difference Hessian; if the new direction fails
    too, the steepest descent. Only when that fails as well does it stop, saying why
    (the objective's rounding, or a kink: the gradient promises a decrease the objective
    does not show). Each recovery is recorded in `notes`. Except where the direction
    promised a decrease of at most `negligible` (the slope along it) and its step had to
    be cut, or was refused: then it stops `settled`, for the caller to judge by the
    statistics (the likelihood of a DC-EGM
    model has many tiny kinks, where linearly interpolated values cross a data point,
    and its gradient jumps by about 1e-3 across them: no gradient tolerance below that
    is met there, however close the estimate).
    """
    moving = np.ones(len(x)) if fixed is None else 1.0 - np.asarray(fixed, dtype=float)
    last: list = [None]

    def value_and_gradient(x):
        theta, dtheta_dx = objective.natural(x)
        out = objective.evaluate(jnp.asarray(theta))
        last[0] = (x, theta, out)
        return out[0], moving * (dtheta_dx.T @ out[1])

    value, gradient = value_and_gradient(x) if start is None else start
    trace = [(value, float(np.max(np.abs(gradient))))]
    reason, notes, step, settled = None, [], 0, False
    scale, origin, fresh = None, x, True
    while step < max_steps and np.max(np.abs(gradient)) > tolerance:
        if scale is None:  # (re)scale: new coordinates z = P⁻¹ (x − origin), memory reset
            scale = _preconditioner(value_and_gradient, x, gradient, moving > 0)
            origin, state, fresh = x, LBFGS.init(jnp.zeros(len(x))), True
        z = np.linalg.solve(scale, x - origin)
        updates, state = _lbfgs_direction(jnp.asarray(scale.T @ gradient), state, jnp.asarray(z))
        direction = scale @ np.asarray(updates)
        if not float(gradient @ direction) < 0:  # not a descent direction: memory reset
            state = LBFGS.init(jnp.asarray(z))
            updates, state = _lbfgs_direction(
                jnp.asarray(scale.T @ gradient), state, jnp.asarray(z)
            )
            direction, fresh = scale @ np.asarray(updates), True
        accepted, refused = _line_search(value_and_gradient, x, value, gradient, direction)
        promised = -float(gradient @ direction)
        if accepted is None and promised <= negligible:
            reason = (
                f"no step along the quasi-Newton direction, promising a decrease of at most "
                f"{promised:.2g}, decreased the objective in {len(refused)} trials: a kink, or "
                "its rounding"
            )
            settled = True
            break
        if accepted is None and not fresh:
            notes.append(
                f"at step {step} the line search along the L-BFGS direction found no decrease in "
                f"{len(refused)} trials: restarted from the best point with the quasi-Newton "
                "memory reset and the parameters rescaled by a finite-difference Hessian"
            )
            scale = None
            continue
        if accepted is None:  # a fresh, rescaled direction failed: the steepest descent
            failed = (
                "the line search found no decrease along the rescaled quasi-Newton direction "
                f"({len(refused)} trials)"
            )
            direction = -gradient / max(1.0, float(np.linalg.norm(gradient)))
            accepted, refused = _line_search(value_and_gradient, x, value, gradient, direction)
            if accepted is None:
                why = _why_no_decrease(value, float(gradient @ direction), refused)
                reason = f"{failed} nor along the steepest descent ({len(refused)} trials): {why}"
                break
            notes.append(f"at step {step} {failed}; the steepest descent found one")
            scale = None  # rescale from the new point
        size, value, gradient = accepted
        x, step, fresh = x + size * direction, step + 1, False
        trace.append((value, float(np.max(np.abs(gradient)))))
        if refused and promised <= negligible and np.max(np.abs(gradient)) > tolerance:
            # Cut short where there is nothing left to gain: near a smooth optimum the
            # quasi-Newton step is taken whole; at a kink it is cut again and again,
            # zigzagging (measured on issue 62's model: 30 of 60 evaluations).
            reason = (
                f"the quasi-Newton step, promising a decrease of at most {promised:.2g}, had to "
                "be cut: a kink"
            )
            settled = True
            break
    evaluation = last[0]
    if evaluation is None or not np.array_equal(evaluation[0], x):
        evaluation = None
    else:
        evaluation = evaluation[1:]
    return Run(
        x, value, float(np.max(np.abs(gradient))), step, np.asarray(trace).T, reason,
        tuple(notes), evaluation, settled,
    )  # fmt: skip


# Levenberg–Marquardt: the Gauss–Newton matrix plus `damping` times its diagonal, the
# damping divided by the factor after a step that lowers the objective and multiplied
# by it after one that does not (from the floor, when it has fallen to 0 in effect).
DAMPING_START, DAMPING_FACTOR, DAMPING_FLOOR, MAX_DAMPINGS = 1.0, 4.0, 1e-6, 40


def _gauss_newton(
    objective: Objective,
    x: np.ndarray,
    tolerance: float,
    max_steps: int,
    step_tolerance: float,
    covariance: np.ndarray,
    n_subjects: int,
    labels: Sequence[str],
):
    """Damped Gauss–Newton on `½ rᵀWr / n`, `r = m(θ) − m̂`, from `x`, with `n` the
    number of subjects: with the optimal weighting `½ rᵀWr` is on the scale of a
    log-likelihood ratio, so over `n` it is on the scale of the `"mle"` objective (a
    mean over subjects) and `tolerance` means the same for both. Unscaled, its
    gradient at the optimum stalls at rounding (about 5e-5 with 2,000 subjects, the
    terms of `J_xᵀWr` being 1e4 times larger), above the default tolerance.

    The method of moments' objective is a quadratic form in moments whose Jacobian
    `G = ∂m/∂θ` is exact (forward mode), so `GᵀWG` is the curvature near the optimum and
    the step `−(J_xᵀWJ_x)⁻¹ J_xᵀWr` (`J_x = G ∂θ/∂x`) converges in a few iterations
    where L-BFGS crawls. Far away it is damped (Levenberg–Marquardt: `J_xᵀWJ_x` plus a
    multiple of its diagonal, the multiple shrinking after each step that lowers the
    objective and growing until one does): measured on the retirement model started
    30% from the truth, plain Gauss–Newton halving its step (Armijo) jumped into a
    spurious minimum at a taste-shock scale of 0.11 (J statistic 41–52 against 1–2 at
    the minimum near the truth) in 2 of the first 30 panels; damped, it reached the right one
    from there and from a second start. Stops when the gradient in `x` is at most
    `tolerance` and the step in `θ` at most `step_tolerance` standard errors (the
    sandwich with the data moments' `covariance` for `Ω`, the cheap form of the
    reported one). Same returns as
    `_minimise`.

    A non-finite Jacobian never reaches a linear solve: at the start it is an
    `EstimationError` naming its entries (`labels`: the moments'); a trial step where it
    is not finite is refused like one where the objective is not.
    """
    weight, target = np.asarray(objective.weight), np.asarray(objective.data_moments)

    def linearise(x):
        theta, dtheta_dx = objective.natural(x)
        moments, jacobian = (np.asarray(a) for a in _moments_and_jacobian(objective, theta))
        residual = moments - target
        value = 0.5 * float(residual @ weight @ residual) / n_subjects
        j_x = jacobian @ dtheta_dx
        return value, j_x.T @ weight @ residual / n_subjects, j_x, jacobian, dtheta_dx

    names = [f.label for f in objective.free]
    value, gradient, j_x, jacobian, dtheta_dx = linearise(x)
    non_finite = _non_finite(jacobian, labels, names)
    if non_finite is not None:
        at = ", ".join(f"{n}={t:.6g}" for n, t in zip(names, objective.natural(x)[0], strict=True))
        raise EstimationError(
            f"estimate('msm'): the Jacobian of the moments is not finite at the start ({at}): "
            f"{non_finite}; {NON_FINITE_ADVICE}."
        )
    trace = [(value, float(np.max(np.abs(gradient))))]
    reason, step, damping = None, 0, DAMPING_START
    while True:
        curvature = j_x.T @ weight @ j_x / n_subjects
        direction = -np.linalg.lstsq(curvature, gradient, rcond=None)[0]
        bread = _inverse(jacobian.T @ weight @ jacobian)
        meat = jacobian.T @ weight @ covariance @ weight @ jacobian
        se = np.sqrt(np.abs(np.diag(bread @ meat @ bread)))
        small = np.all(np.abs(dtheta_dx @ direction) <= step_tolerance * se)
        if (np.max(np.abs(gradient)) <= tolerance and small) or step >= max_steps:
            break
        diagonal = np.diag(np.maximum(np.diag(curvature), np.finfo(float).tiny))
        for _ in range(MAX_DAMPINGS):
            move = -np.linalg.lstsq(curvature + damping * diagonal, gradient, rcond=None)[0]
            slope = float(gradient @ move)
            if not slope < 0:  # numerically flat: the steepest descent direction instead
                move, slope = -gradient, -float(gradient @ gradient)
            trial = linearise(x + move)
            trial_non_finite = _non_finite(trial[3], labels, names)
            non_finite = trial_non_finite or non_finite
            if (
                trial_non_finite is None
                and np.isfinite(trial[0])
                and trial[0] <= value + ARMIJO * slope
            ):
                damping /= DAMPING_FACTOR
                break
            damping = max(damping * DAMPING_FACTOR, DAMPING_FLOOR)
        else:
            reason = f"the damped step found no decrease after {MAX_DAMPINGS} tries" + (
                f" (the Jacobian was not finite at some trial points: {non_finite})"
                if non_finite is not None
                else ""
            )
            break
        x = x + move
        value, gradient, j_x, jacobian, dtheta_dx = trial
        step += 1
        trace.append((value, float(np.max(np.abs(gradient)))))
    return x, value, float(np.max(np.abs(gradient))), step, np.asarray(trace).T, reason


@eqx.filter_jit
def _moments_by_initial_mass(objective: Objective, theta):
    """`∂m/∂μ`: each moment's derivative in the initial mass (by regime)."""
    params = objective.model_params(theta)
    return jax.jacrev(lambda mass: objective.moments(params, mass))(objective.mass)


def _likelihood_curvature(objective: Objective, theta: np.ndarray, lower, upper, last=None):
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
    variances = np.diag(_inverse(outer))
    # A quarter of a standard error, at most a tenth of the parameter.
    steps = np.minimum(0.25 * np.sqrt(variances), 0.1 * np.maximum(np.abs(theta), 1e-3))
    if not np.all(np.isfinite(steps) & (steps > 0)):
        return (*fine, None)
    coarse = differences(steps)

    def errors(information):
        variances = np.diag(_inverse(information))
        return np.sqrt(variances) if np.all(variances > 0) else None

    if errors(fine[0]) is not None or errors(coarse[0]) is None:
        return (*fine, None)
    return (
        *coarse,
        "the Hessian is from differences over a quarter of a standard error: over 1e-4 of "
        "each parameter it was not positive definite (the likelihood is not smooth on that "
        "scale)",
    )


class Identification(eqx.Module):
    """How well the data pin down each free parameter, at the estimates.

    The matrix examined is the one the estimator sees, each column scaled by its
    parameter's size (`|θ_j|`, or 1 at 0) so that the numbers do not depend on units:
    `W^½ G diag(θ)` for the method of moments (`G = ∂m/∂θ`), the subjects' scores
    times `diag(θ)` over `√N` for maximum likelihood (its Gram matrix is the scaled
    information matrix). A parameter is *weakly identified* when it loads (|entry| ≥
    0.3) on a right singular vector whose singular value is below `threshold` times the
    largest: moving the parameters along that direction barely changes the fit. Two
    parameters that enter only as a product have a singular value of 0 and are both
    flagged.

    Attributes:
        names: the free parameters.
        singular_values: in decreasing order.
        directions: `(n_free, n_free)`; column `i` is the right singular vector of
            `singular_values[i]`.
        condition_number: the largest singular value over the smallest.
        weak: the weakly identified parameters.
        elasticity: `(n_moments, n_free)` `∂log m_k / ∂log θ_j` (method of moments;
            `None` for maximum likelihood).
        moment_labels: the moments' `(moment, period)` labels (method of moments).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    singular_values: np.ndarray
    directions: np.ndarray
    condition_number: float
    weak: tuple[str, ...] = eqx.field(static=True)
    elasticity: np.ndarray | None
    moment_labels: tuple[tuple[str, int], ...] | None = eqx.field(static=True)

    def summary(self) -> pd.DataFrame:
        """One row per parameter: its loading on the weakest direction and the flag."""
        return pd.DataFrame(
            {
                "weakest_direction": self.directions[:, -1],
                "weak": [name in self.weak for name in self.names],
            },
            index=pd.Index(self.names, name="parameter"),
        )

    def elasticities(self) -> pd.DataFrame:
        """`∂log m / ∂log θ` as a table: one row per moment, one column per parameter."""
        if self.elasticity is None:
            raise EstimationError(
                "Identification.elasticities: only the method of moments has moments; "
                "for maximum likelihood read singular_values and weak."
            )
        index = pd.MultiIndex.from_tuples(cast(Any, self.moment_labels), names=["moment", "period"])
        return pd.DataFrame(self.elasticity, index=index, columns=list(self.names))

    def plot(self):
        """A figure: the singular values (log scale) and the elasticities (or, for
        maximum likelihood, the singular vectors) as a heat map."""
        import matplotlib.pyplot as plt

        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        left.bar(range(len(self.singular_values)), self.singular_values)
        left.set(yscale="log", xlabel="direction", ylabel="singular value", title="Singular values")
        if self.elasticity is not None:
            labels = cast(Any, self.moment_labels)
            matrix, rows = self.elasticity, [f"{m} [{t}]" for m, t in labels]
            title = "Elasticity of each moment"
        else:
            matrix, rows = self.directions, [f"direction {i}" for i in range(len(self.names))]
            matrix, title = matrix.T, "Right singular vectors"
        bound = float(np.nanmax(np.abs(matrix))) or 1.0
        image = right.imshow(matrix, cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto")
        right.set_xticks(range(len(self.names)), self.names, rotation=30, ha="right")
        right.set_yticks(range(len(rows)), rows, fontsize=7)
        right.set_title(title)
        figure.colorbar(image, ax=right)
        figure.tight_layout()
        return figure


class LikelihoodRatioTest(NamedTuple):
    """`EstimationResult.likelihood_ratio`: the statistic `2 (ℓ − ℓ_restricted)`, its
    degrees of freedom and the `χ²` p-value."""

    statistic: float
    df: int
    p_value: float


class EstimationResult(eqx.Module):
    """The result of `lcm.estimate`: estimates, standard errors and how the fit went.

    Attributes:
        params: the estimates, shaped like the `params` passed in (fixed ones as given).
        standard_errors: shaped like `params`; NaN for the fixed parameters.
        covariance: `(n_free, n_free)` covariance of the free parameters (in the order
            of `names`), of the kind `covariance_kind`.
        covariances: every covariance computed: `"hessian"`, `"opg"` and `"sandwich"`
            for maximum likelihood, `"sandwich"` for the method of moments.
        covariance_kind: which of them `covariance` is.
        names: the free parameters' labels (`"wage"`, `"working/wage"`,
            `"type_share[1]"`).
        estimates: `(n_free,)` the free parameters' estimates.
        start: `(n_free,)` the best start's values.
        type_shares: `(n_types,)` the estimated shares of the unobserved types, or None.
        method: `"mle"` or `"msm"`.
        objective: the log-likelihood (`"mle"`) or `(m − m̂)ᵀ W (m − m̂)` (`"msm"`; the
            J statistic with optimal weighting) at the estimates.
        trace: `(2, n_steps + 1)`: the optimiser's objective and largest gradient
            entry at each step (`"msm"`: `½ (m − m̂)ᵀ W (m − m̂)` over the number of
            subjects).
        n_steps: the optimiser's steps.
        converged: the objective is finite, its gradient (in the unconstrained
            coordinates) is below `tolerance`, the curvature is positive definite, the
            Newton step from the estimate is at most `step_tolerance` standard errors
            in every parameter and none is at a bound; `message` says which failed.
        newton_step: `(n_free,)` the Newton step in `θ` from the estimates (the
            Hessian's for `"mle"`, Gauss–Newton's for `"msm"`).
        at_bound: `(n_free,)` which estimates are at a bound of their interval (the
            Newton step leaves it).
        message: how the optimisation ended.
        n_subjects: the number of subjects (the clusters of the standard errors).
        jacobian: `∂m/∂θ` (`"msm"`) or the subjects' scores (`"mle"`), in `θ`.
        moments, data_moments, weight: the method of moments' model and data moments
            and weighting matrix (None for `"mle"`).
        moment_labels: their `(moment, period)` labels.
        problem: the objective (model, data, fixed parameters) the estimates optimise;
            `profile_intervals` optimises it again.
    """

    params: dict
    standard_errors: dict
    covariance: np.ndarray
    covariances: dict
    covariance_kind: str = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    estimates: np.ndarray
    start: np.ndarray
    lower: tuple[float, ...] = eqx.field(static=True)
    upper: tuple[float, ...] = eqx.field(static=True)
    type_shares: np.ndarray | None
    method: str = eqx.field(static=True)
    objective: float
    trace: np.ndarray
    n_steps: int
    converged: bool
    message: str = eqx.field(static=True)
    newton_step: np.ndarray
    at_bound: np.ndarray
    problem: Objective
    settings: tuple[float, int] = eqx.field(static=True)  # (tolerance, max_steps)
    n_subjects: int
    jacobian: np.ndarray
    moments: np.ndarray | None
    data_moments: np.ndarray | None
    weight: np.ndarray | None
    moment_labels: tuple[tuple[str, int], ...] | None = eqx.field(static=True)

    def summary(self) -> pd.DataFrame:
        """One row per free parameter: estimate, standard error, 95% interval, start,
        bounds, and whether the estimate is at a bound (then `converged` is False).

        The interval is the Wald interval on the scale the optimiser works on (see
        `wald_interval`): `θ̂ ± 1.96 se` for an unbounded parameter, on the log scale
        for one bounded on one side, on the logit scale for one bounded on both; it
        stays inside the bounds, and its coverage is closer to 95% where the estimate
        is skewed."""
        se = np.sqrt(np.diag(self.covariance))
        lower, upper = wald_interval(self.estimates, se, self.lower, self.upper)
        return pd.DataFrame(
            {
                "estimate": self.estimates,
                "std_error": se,
                "ci_lower": lower,
                "ci_upper": upper,
                "start": self.start,
                "lower_bound": self.lower,
                "upper_bound": self.upper,
                "at_bound": self.at_bound,
            },
            index=pd.Index(self.names, name="parameter"),
        )

    def profile_intervals(self, level: float = 0.95) -> pd.DataFrame:
        """Profile-likelihood intervals (`"mle"`): for each free parameter, the values
        `t` where `2 (ℓ̂ − max ℓ(θ_j = t))` reaches the `level` quantile of `χ²₁`, the
        other parameters maximised again at each `t` (warm-started L-BFGS, the same
        compiled likelihood). Unlike the Wald interval `θ̂ ± z·se` they follow the
        likelihood where it is not quadratic, respect the bounds (an interval that
        reaches a bound ends there) and do not change with a reparametrisation.

        Returns:
            One row per free parameter: `estimate`, `profile_lower`, `profile_upper`
            and the Wald `wald_lower`, `wald_upper` at the same level.
        """
        if self.method != "mle":
            raise EstimationError(
                "profile_intervals: profile likelihoods need method='mle'; for the method of "
                "moments use the sandwich intervals of summary()."
            )
        if not 0 < level < 1:
            raise EstimationError(f"profile_intervals: level must lie in (0, 1), got {level}.")
        if not self.converged:
            warn(f"profile_intervals: the estimation did not converge ({self.message}).")
        z = NormalDist().inv_cdf(0.5 + level / 2)
        se = np.sqrt(np.diag(self.covariance))
        x_hat = _unconstrained(self.problem, self.estimates)
        edges = {
            side: [_profile_edge(self, x_hat, j, side, z**2, se[j]) for j in range(len(self.names))]
            for side in (-1, 1)
        }
        return pd.DataFrame(
            {
                "estimate": self.estimates,
                "profile_lower": edges[-1],
                "profile_upper": edges[1],
                "wald_lower": self.estimates - z * se,
                "wald_upper": self.estimates + z * se,
            },
            index=pd.Index(self.names, name="parameter"),
        )

    def likelihood_ratio(self, restricted: EstimationResult) -> LikelihoodRatioTest:
        """The likelihood-ratio test of `restricted`, the same model estimated on the same
        data with some of these free parameters fixed (at the values of the null):
        `2 (ℓ − ℓ_restricted)`, asymptotically `χ²` with as many degrees of freedom as
        parameters fixed."""
        if self.method != "mle" or restricted.method != "mle":
            raise EstimationError("likelihood_ratio: both estimations need method='mle'.")
        extra = set(restricted.names) - set(self.names)
        df = len(self.names) - len(restricted.names)
        if extra or df < 1 or restricted.n_subjects != self.n_subjects:
            raise EstimationError(
                "likelihood_ratio: the restricted estimation must free a strict subset of "
                f"these parameters {list(self.names)} on the same data; it frees "
                f"{list(restricted.names)} on {restricted.n_subjects} subjects "
                f"(here {self.n_subjects})."
            )
        for which, result in (("unrestricted", self), ("restricted", restricted)):
            if not result.converged:
                warn(f"likelihood_ratio: the {which} estimation did not converge.")
        statistic = 2.0 * (self.objective - restricted.objective)
        if statistic < -1e-6 * max(1.0, abs(self.objective)):
            warn(
                f"likelihood_ratio: the restricted log-likelihood exceeds the unrestricted one "
                f"by {-statistic / 2:.3g}: the unrestricted estimation missed the maximum."
            )
        p_value = float(jax.scipy.special.gammaincc(df / 2, max(statistic, 0.0) / 2))
        return LikelihoodRatioTest(statistic=statistic, df=df, p_value=p_value)

    def identification(self, threshold: float = 1e-3) -> Identification:
        """The identification report at the estimates (see `Identification`).

        Args:
            threshold: singular values below `threshold` times the largest count as
                (nearly) unidentified directions.
        """
        rows = (
            [f"{moment} [period {t}]" for moment, t in self.moment_labels]
            if self.moment_labels is not None
            else [f"the log-likelihood of subject {i}" for i in range(self.jacobian.shape[0])]
        )
        non_finite = _non_finite(self.jacobian, rows, self.names)
        if non_finite is not None:
            raise EstimationError(
                f"identification: the Jacobian at the estimates is not finite: {non_finite}; "
                f"{NON_FINITE_ADVICE}."
            )
        scale = np.where(self.estimates != 0, np.abs(self.estimates), 1.0)
        if self.method == "msm":
            # Every MSM result has its weighting matrix and model moments.
            assert self.weight is not None and self.moments is not None
            root = np.linalg.cholesky(self.weight).T
            matrix = root @ self.jacobian * scale
            with np.errstate(divide="ignore", invalid="ignore"):
                elasticity = self.jacobian * self.estimates / self.moments[:, None]
        else:
            matrix = self.jacobian * scale / np.sqrt(self.jacobian.shape[0])
            elasticity = None
        _, singular_values, vt = np.linalg.svd(matrix, full_matrices=False)
        directions = vt.T
        smallest = singular_values[-1]
        condition = float(singular_values[0] / smallest) if smallest > 0 else math.inf
        weak_directions = singular_values < threshold * singular_values[0]
        loads = np.abs(directions[:, weak_directions]) >= 0.3
        weak = tuple(
            n
            for n, flag in zip(self.names, np.asarray(loads.any(axis=1)).tolist(), strict=True)
            if flag
        )
        return Identification(
            names=self.names,
            singular_values=singular_values,
            directions=directions,
            condition_number=condition,
            weak=weak,
            elasticity=elasticity,
            moment_labels=self.moment_labels,
        )

    def __repr__(self) -> str:
        status = "converged" if self.converged else "NOT converged"
        head = (
            f"EstimationResult(method={self.method!r}, {status}: {self.message}; "
            f"{self.n_steps} steps, objective {self.objective:.6g}, {self.n_subjects} subjects, "
            f"{self.covariance_kind} standard errors)"
        )
        return head + "\n" + self.summary().to_string(float_format=lambda v: f"{v:.5g}")

    __str__ = __repr__


def estimate(
    model: Model,
    params,
    *,
    data,
    method: str = "mle",
    free: Sequence[str | tuple[str, ...]],
    bounds: Mapping[str | tuple[str, ...], tuple[float, float]] | None = None,
    moments: Sequence[Profile] | None = None,
    weighting: str | Any = "optimal",
    initial=None,
    targets=None,
    measurement_sd=None,
    unobserved_type: str | None = None,
    type_shares=None,
    starts: Sequence[Mapping[str, float]] | None = None,
    covariance: str | None = None,
    tolerance: float = 1e-6,
    step_tolerance: float = 0.05,
    max_steps: int = 200,
    subject: str = "subject_id",
) -> EstimationResult:
    """Estimate the free parameters of `model` from data, with standard errors.

    Args:
        model: the `Model`.
        params: all parameters; the free ones at their starting values.
        data: a panel DataFrame (`model.simulate(...).to_dataframe()` layout: a row per
            subject and period with `subject`, `period`, `regime`, the states and the
            observed actions); `"mle"` also takes a dict of arrays or a `ChoiceData`
            (then each row counts as its own subject).
        method: `"mle"` (likelihood of the observed choices) or `"msm"` (method of
            moments on `moments` of the exact distribution).
        free: the parameters to estimate: names of top-level entries of `params` or
            paths such as `("working", "wage")`; each must be a scalar.
        bounds: `{name: (lower, upper)}` (use `math.inf` for none); the start must lie
            strictly inside. Defaults: `(0, 1)` for `discount_factor`, `(0, inf)` for
            `taste_shock_scale`, unbounded otherwise.
        moments: `"msm"`: the `lcm.Profile`s to match.
        weighting: `"msm"`: `"optimal"` (the inverse of the data moments' covariance),
            `"diagonal"` (the inverse of its diagonal), `"identity"`, or a matrix.
        initial: `"msm"`: the initial conditions of the distribution (default: the
            data's period-0 rows, whose sampling variation then enters the standard
            errors).
        targets: `"msm"`: the moments to match instead of the data's, in the order of
            `lcm.data_moments(model, data, moments)` (e.g. the exact moments of
            `model.distribution` at known parameters, to test that an estimation recovers
            them); the data still give the moments' covariance (the weighting and the
            standard errors, for a sample of the data's size).
        measurement_sd: `"mle"`: the measurement error of observed continuous choices
            (see `log_likelihood`); `None` uses the discrete choices only.
        unobserved_type: `"mle"`: a permanent discrete state of the model that the
            data lack; the likelihood mixes over its values with estimated shares.
        type_shares: the shares' starting values (default: equal).
        starts: further starting values, `{name: value}` each (missing names: the
            value in `params`); all starts run at once (vmapped) and the best is kept.
        covariance: `"hessian"`, `"opg"` or `"sandwich"` for `"mle"` (default
            `"hessian"`); `"msm"` has `"sandwich"` only.
        tolerance: converged when the objective's gradient in the unconstrained
            coordinates has no entry above this (the `"mle"` objective is the mean
            negative log-likelihood per subject, the `"msm"` one `½ (m − m̂)ᵀ W (m − m̂)`
            over the number of subjects).
        step_tolerance: converged also needs the Newton step from the estimates to be at
            most this many standard errors in every parameter (the gradient in the
            unconstrained coordinates vanishes where a transform saturates, at a bound,
            however far the optimum lies).
        max_steps: the most optimiser steps (L-BFGS for `"mle"`, Gauss–Newton for
            `"msm"`).
        subject: the column identifying subjects.

    Returns:
        An `EstimationResult`.

    Example:
        >>> result = lcm.estimate(model, start, data=df, free=["disutility_of_work", "wage"])
        >>> result.summary()          # estimate, std_error, ci_lower, ci_upper, ...
        >>> result.params             # shaped like `start`
    """
    given = coerce_params(params)
    if not isinstance(given, Mapping):
        raise EstimationError(f"estimate: params must be a dict, got {type(given).__name__}.")
    # The model's normal form (labelled Series as the tables user functions index) is
    # what the objective differentiates; the result keeps the user's own spelling.
    params = _as_arrays(model.checked_params(given))
    if method not in ("mle", "msm"):
        raise EstimationError(f"estimate: method must be 'mle' or 'msm', got {method!r}.")
    free_specs = _free(model, params, free, bounds or {})
    kind = covariance or ("hessian" if method == "mle" else "sandwich")
    kinds = ("hessian", "opg", "sandwich") if method == "mle" else ("sandwich",)
    if kind not in kinds:
        raise EstimationError(
            f"estimate: method {method!r} has covariance in {kinds}, got {kind!r}."
        )
    types = None
    shares0 = None
    if unobserved_type is not None:
        if method != "mle":
            raise EstimationError("estimate: unobserved_type works with method='mle'.")
        types, shares0 = _types(model, unobserved_type, type_shares)
    empty: dict[str, Any] = dict(data=None, clusters=None, n_clusters=0, terms=())
    empty.update(measurement_sd=None)
    empty.update(mass=None, profiles=(), data_moments=None, weight=None)
    if targets is not None and method != "msm":
        raise EstimationError("estimate: targets works with method='msm' (moments to match).")
    if method == "mle":
        fields = _mle_fields(model, data, types, subject, measurement_sd)
        if types is not None and measurement_sd is None:
            _warn_unused_continuous(types, fields["data"][0])
        n_subjects = fields["n_clusters"]
        panel = None
    else:
        fields, panel, conditions = _msm_fields(
            model, params, data, moments, weighting, initial, subject, targets
        )
        n_subjects = panel.influence.shape[0]
    with warnings.catch_warnings():
        # The model is static, as everywhere in the library (`static_argnames="model"`);
        # its grids hold arrays, which Equinox warns about.
        warnings.filterwarnings("ignore", "A JAX array is being set as static")
        objective = Objective(
            model=model,
            method=method,
            params=params,
            free=free_specs,
            types=types,
            **{**empty, **fields},
        )
    names = _names(free_specs, types)
    # What a kink may leave: a quarter of a step of `step_tolerance` standard errors'
    # gain, in the mean log-likelihood.
    negligible = step_tolerance**2 / (4 * n_subjects)
    runs = []
    for x0 in _starts(free_specs, params, shares0, starts):
        theta0, dtheta_dx = objective.natural(x0)
        value, gradient, _ = objective.evaluate(jnp.asarray(theta0))
        at = ", ".join(f"{n}={v:.6g}" for n, v in zip(names, theta0, strict=True))
        if not math.isfinite(value):
            raise EstimationError(
                f"estimate({method!r}): the objective is {value} at the start ({at}); "
                "check the start values (and that every observed choice is feasible)."
            )
        non_finite = _non_finite(gradient[None, :], ["the log-likelihood"], names)
        if method == "mle" and non_finite is not None:
            raise EstimationError(
                f"estimate('mle'): the gradient is not finite at the start ({at}): "
                f"{non_finite}; {NON_FINITE_ADVICE}."
            )
        if method == "mle":
            run = _minimise(
                objective,
                x0,
                tolerance,
                max_steps,
                start=(value, dtheta_dx.T @ gradient),
                negligible=negligible,
            )
        else:
            assert panel is not None  # MSM always has its data moments
            labels = [f"{moment} [period {t}]" for moment, t in panel.labels]
            x_end, value_end, gradient_end, steps_end, trace_end, reason_end = _gauss_newton(
                objective, x0, tolerance, max_steps, step_tolerance, panel.covariance,
                n_subjects, labels,
            )  # fmt: skip
            run = Run(x_end, value_end, gradient_end, steps_end, trace_end, reason_end, (), None)
        runs.append((theta0, run))
    finite = [r for r in runs if math.isfinite(r[1].value)]
    start_theta, run = min(
        finite or runs, key=lambda r: r[1].value if math.isfinite(r[1].value) else math.inf
    )
    x, value, largest, n_steps, trace, reason = run[:6]
    theta, _ = objective.natural(x)
    bounds_lo = tuple(f.lower for f in free_specs) + (0.0,) * (len(names) - len(free_specs))
    bounds_hi = tuple(f.upper for f in free_specs) + (1.0,) * (len(names) - len(free_specs))

    wide = None  # why the likelihood's curvature is from wide differences
    polished: list[float] = []  # the Newton steps taken after the optimiser, in s.e.
    if method == "mle":
        last = run.last
        while True:
            information, scores, descent, wide = _likelihood_curvature(
                objective, theta, bounds_lo, bounds_hi, last
            )
            jacobian = scores
            outer = jacobian.T @ jacobian
            curvature: tuple = (information, outer)
            covariances = {"hessian": _inverse(information), "opg": _inverse(outer)}
            covariances["sandwich"] = covariances["hessian"] @ outer @ covariances["hessian"]
            newton = -covariances["hessian"] @ descent
            # Stopped at a kink short of the optimum: what a careful user does next is
            # the Newton step of the curvature just computed (over a standard error's
            # quarter where the likelihood is kinked), kept if the objective is no worse
            # than a kink hides; the curvature is then computed there again.
            with np.errstate(invalid="ignore", divide="ignore"):
                in_se = np.abs(newton) / np.sqrt(np.diag(covariances["hessian"]))
            target = theta + newton
            if (
                not run.settled
                or len(polished) == POLISH_STEPS
                or not np.all(np.isfinite(in_se))
                or not step_tolerance < float(np.max(in_se)) <= 1.0
                or not np.all((target > np.asarray(bounds_lo)) & (target < np.asarray(bounds_hi)))
            ):
                break
            trial = objective.evaluate(jnp.asarray(target))
            if not trial[0] <= value + negligible:
                break
            polished.append(float(np.max(in_se)))
            theta, value, last = target, float(trial[0]), (target, trial)
            _, dtheta_dx = objective.natural(_unconstrained(objective, theta))
            largest = float(np.max(np.abs(dtheta_dx.T @ trial[1])))
            n_steps += 1
            trace = np.column_stack([trace, [value, largest]])
        reported = -value * n_subjects
        model_moments = None
    else:
        model_moments, jacobian = (
            np.asarray(a) for a in _moments_and_jacobian(objective, jnp.asarray(theta))
        )
        weight = np.asarray(objective.weight)
        assert panel is not None  # MSM always has its data moments
        influence = panel.influence
        if conditions is not None:
            influence = influence - _model_influence(
                model, objective, jnp.asarray(theta), conditions
            )
        omega = influence.T @ influence / influence.shape[0] ** 2
        bread = _inverse(jacobian.T @ weight @ jacobian)
        curvature = (jacobian.T @ weight @ jacobian,)
        covariances = {"sandwich": bread @ jacobian.T @ weight @ omega @ weight @ jacobian @ bread}
        newton = -bread @ jacobian.T @ weight @ (model_moments - np.asarray(objective.data_moments))
        reported = 2 * value * n_subjects

    cov = covariances[kind]
    se = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), np.nan))
    at_bound = _at_bound(theta, newton, np.asarray(bounds_lo), np.asarray(bounds_hi))
    converged, message = _status(
        Fit(theta, value, largest, n_steps, reason, curvature, newton / se, at_bound, run.settled),
        names=names,
        bounds=(bounds_lo, bounds_hi),
        tolerance=tolerance,
        step_tolerance=step_tolerance,
        max_steps=max_steps,
    )
    if run.notes:
        message += " (on the way, " + "; ".join(run.notes) + ")"
    if polished:
        steps_in_se = ", ".join(f"{v:.2g}" for v in polished)
        message += (
            f"; after the optimiser, {len(polished)} Newton step(s) of the curvature at the "
            f"estimate ({steps_in_se} s.e. at most)"
        )
    if wide is not None:
        message += f"; {wide}"
    inverted = curvature[-1] if kind == "opg" else curvature[0]
    what = {
        "opg": "the outer product of the subjects' scores",
        "mle": "the Hessian of minus the log-likelihood",
        "msm": "GᵀWG (G the Jacobian of the moments)",
    }
    missing = _why_no_standard_errors(se, inverted, what.get(kind, what[method]), names)
    if missing is not None:
        message += "; " + missing
    if not converged:
        warn(f"estimate({method!r}) did not converge: {message}")
    elif method == "msm" and isinstance(weighting, str) and weighting == "optimal":
        _check_overidentification(reported, np.size(objective.data_moments) - len(names))
    estimates = theta
    estimated: dict[str, Any] = dict(given)
    standard_errors: dict[str, Any] = _fixed_errors(given)
    for i, f in enumerate(free_specs):
        estimated = _replace(estimated, f.path, jnp.asarray(theta[i]))
        standard_errors = _replace(standard_errors, f.path, jnp.asarray(se[i]))
    return EstimationResult(
        params=estimated,
        standard_errors=standard_errors,
        covariance=cov,
        covariances=covariances,
        covariance_kind=kind,
        names=names,
        estimates=estimates,
        start=start_theta,
        lower=bounds_lo,
        upper=bounds_hi,
        type_shares=None if types is None else np.asarray(objective.shares(jnp.asarray(theta))),
        method=method,
        objective=reported,
        trace=trace,
        n_steps=n_steps,
        converged=converged,
        message=message,
        newton_step=newton,
        at_bound=at_bound,
        problem=objective,
        settings=(tolerance, max_steps),
        n_subjects=int(n_subjects),
        jacobian=cast(np.ndarray, jacobian),
        moments=model_moments,
        data_moments=None if panel is None else np.asarray(objective.data_moments),
        weight=None if method == "mle" else np.asarray(objective.weight),
        moment_labels=None if panel is None else panel.labels,
    )


# ------------------------------------------------------------------- profile likelihood
def _unconstrained(objective: Objective, theta: np.ndarray) -> np.ndarray:
    """The optimiser's coordinates `x` of the parameters `θ` (the inverse of `natural`)."""
    n = len(objective.free)
    x = [f.to_unconstrained(float(t)) for f, t in zip(objective.free, theta[:n], strict=True)]
    if objective.types:
        shares = np.asarray(theta[n:])
        x += list(np.log(shares / (1.0 - shares.sum())))
    return np.asarray(x, dtype=float)


def _profile_edge(result: EstimationResult, x_hat, j: int, side: int, critical, se) -> float:
    """Where the profile statistic `2 (ℓ̂ − ℓ_p(t))` of parameter `j` reaches `critical`
    on `side` (−1: below the estimate): the Wald edge first, widened (doubling the
    distance) until the statistic passes `critical`, then regula falsi (Illinois) on
    the bracket. An interval that never passes `critical` before the bound ends at it."""
    objective, names = result.problem, result.names
    tolerance, max_steps = result.settings
    if objective.types and j >= len(objective.free) and objective.types.n_types > 2:
        raise EstimationError(
            f"profile_intervals: {names[j]!r} is one of {objective.types.n_types} type shares, "
            "whose profile the softmax coordinates do not give; only two types are supported."
        )
    theta_hat = result.estimates[j]
    bound = result.lower[j] if side < 0 else result.upper[j]
    fixed = np.zeros(len(x_hat), dtype=bool)
    fixed[j] = True
    warm = x_hat.copy()
    n = result.n_subjects

    def statistic(t):
        nonlocal warm
        x = warm.copy()
        x[j] = _unconstrained(objective, _with(result.estimates, j, t))[j]
        x, value, gradient = _minimise(objective, x, tolerance, max_steps, fixed)[:3]
        if not gradient <= tolerance:
            warn(
                f"profile_intervals: maximising over the others at {names[j]}={t:.6g} stopped "
                f"with gradient {gradient:.2e} > tolerance {tolerance:g}."
            )
        warm = x
        return 2.0 * (result.objective + value * n) - critical

    scale = se if np.isfinite(se) and se > 0 else 0.1 * max(abs(theta_hat), 1.0)
    inside, f_inside = theta_hat, -critical
    distance = math.sqrt(critical) * scale
    for _ in range(12):
        # Stay strictly inside the interval: at most 99.9% of the way to the bound.
        t = theta_hat + side * min(distance, 0.999 * abs(bound - theta_hat))
        f_t = statistic(t)
        if f_t > 0:
            break
        inside, f_inside = t, f_t
        distance *= 2
    else:
        return float(bound)
    outside, f_outside = t, f_t
    last = 0
    for _ in range(50):
        t = outside - f_outside * (outside - inside) / (f_outside - f_inside)
        f_t = statistic(t)
        if abs(f_t) < 1e-6 * critical or abs(outside - inside) < 1e-9 * scale:
            break
        # Illinois: when the same end moves twice running, halve the other end's value
        # so that regula falsi does not stall on a convex stretch.
        if f_t > 0:
            outside, f_outside = t, f_t
            f_inside = f_inside / 2 if last > 0 else f_inside
            last = 1
        else:
            inside, f_inside = t, f_t
            f_outside = f_outside / 2 if last < 0 else f_outside
            last = -1
    return float(t)


def _with(theta: np.ndarray, j: int, value: float) -> np.ndarray:
    out = np.array(theta, dtype=float)
    out[j] = value
    return out


# ----------------------------------------------------------------------------- inputs
def _as_arrays(params):
    """Every leaf a float64 (or integer) JAX array, so new values reuse the compiled fit."""

    def leaf(value):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return jnp.asarray(float(value))
        return jnp.asarray(value)

    return {k: _as_arrays(v) if isinstance(v, Mapping) else leaf(v) for k, v in params.items()}


def _fixed_errors(params) -> Any:
    """NaN standard errors shaped like `params` (a labelled Series: NaN on its index)."""
    if isinstance(params, Mapping):
        return {key: _fixed_errors(value) for key, value in params.items()}
    if isinstance(params, pd.Series):
        return pd.Series(np.nan, index=params.index, name=params.name)
    return jnp.full(jnp.shape(params), jnp.nan)


def _free(model, params, free, bounds) -> tuple[Free, ...]:
    if isinstance(free, str) or not free:
        raise EstimationError(
            "estimate: free must be a non-empty list of parameter names or paths, e.g. "
            "free=['disutility_of_work', ('working', 'wage')]."
        )
    paths = [(f,) if isinstance(f, str) else tuple(f) for f in free]
    unknown_bounds = [b for b in bounds if ((b,) if isinstance(b, str) else tuple(b)) not in paths]
    if unknown_bounds:
        raise EstimationError(f"estimate: bounds for {unknown_bounds}, which are not free.")
    if len(set(paths)) != len(paths):
        raise EstimationError(f"estimate: free names a parameter twice: {free}.")
    specs = []
    for path in paths:
        label = "/".join(path)
        try:
            value = _get(params, path)
        except (KeyError, TypeError):
            raise EstimationError(
                f"estimate: free parameter {label!r} is not in params (its keys: {list(params)})."
            ) from None
        if isinstance(value, Mapping) or jnp.shape(value) != ():
            raise EstimationError(
                f"estimate: free parameter {label!r} must be a scalar, got shape "
                f"{getattr(value, 'shape', type(value).__name__)}; free each element as its "
                "own scalar parameter."
            )
        if not jnp.issubdtype(jnp.asarray(value).dtype, jnp.floating):
            raise EstimationError(f"estimate: free parameter {label!r} must be a float.")
        bound = bounds.get(path[0] if len(path) == 1 else path, bounds.get(label))
        if bound is None:
            bound = DEFAULT_BOUNDS.get(path[-1], (-math.inf, math.inf))
        lower, upper = (float(b) for b in bound)
        start = float(value)
        if not lower < start < upper:
            raise EstimationError(
                f"estimate: the start of {label!r} is {start}, outside its bounds "
                f"({lower}, {upper}); start strictly inside."
            )
        specs.append(Free(path=path, lower=lower, upper=upper))
    return tuple(specs)


def _names(free_specs, types) -> tuple[str, ...]:
    names = tuple(f.label for f in free_specs)
    if types is not None:
        names += tuple(f"type_share[{k}]" for k in range(1, types.n_types))
    return names


def _types(model, state, shares):
    grids = [r.grids.get(state) for r in model.plan.regimes.values()]
    grids = [g for g in grids if g is not None]
    if not grids or not all(isinstance(g, DiscreteGrid) for g in grids):
        raise EstimationError(
            f"estimate: unobserved_type={state!r} must be a discrete state of the model."
        )
    n_types = grids[0].n_points
    if shares is None:
        shares = np.full(n_types, 1.0 / n_types)
    shares = np.asarray(shares, dtype=float)
    if shares.shape != (n_types,) or np.any(shares <= 0) or abs(shares.sum() - 1) > 1e-9:
        raise EstimationError(
            f"estimate: type_shares must be {n_types} positive shares summing to 1, got {shares}."
        )
    return Types(state=state, n_types=n_types), shares


def _starts(free_specs, params, shares0, starts) -> list[np.ndarray]:
    def one(values):
        x = []
        for f in free_specs:
            value = float(values.get(f.label, _get(params, f.path)))
            if not f.lower < value < f.upper:
                raise EstimationError(
                    f"estimate: a start of {f.label!r} is {value}, outside its bounds "
                    f"({f.lower}, {f.upper})."
                )
            x.append(f.to_unconstrained(value))
        if shares0 is not None:
            x += list(np.log(shares0[1:] / shares0[0]))
        return np.asarray(x, dtype=float)

    labels = {f.label for f in free_specs}
    for values in starts or ():
        unknown = sorted(set(values) - labels)
        if unknown:
            raise EstimationError(f"estimate: starts name {unknown}, which are not free.")
    return [one({}), *(one(values) for values in starts or ())]


def _mle_fields(model, data, types, subject, measurement_sd) -> dict:
    if types is not None:
        if not isinstance(data, pd.DataFrame):
            raise EstimationError("estimate: unobserved_type needs data as a DataFrame.")
        if types.state in data.columns:
            raise InvalidDataError(
                f"estimate: data have a column {types.state!r}, which unobserved_type says is "
                "not observed; drop it (or estimate without unobserved_type)."
            )
        prepared = tuple(
            prepare_data(model, data.assign(**{types.state: k})) for k in range(types.n_types)
        )
    else:
        prepared = (prepare_data(model, data),)
    n_rows = prepared[0].n_rows
    if isinstance(data, pd.DataFrame) and subject in data.columns:
        codes, uniques = pd.factorize(data[subject])
        n_clusters = uniques.size
    else:
        if types is not None:
            raise InvalidDataError(f"estimate: unobserved_type needs the column {subject!r}.")
        codes, n_clusters = np.arange(n_rows), n_rows
    # Each block entry's subject; padding is `n_clusters`, which `segment_sum` drops.
    clusters = {
        name: jnp.asarray(
            np.where(block.mask, codes[np.maximum(block.row, 0)], n_clusters), jnp.int32
        )
        for name, block in prepared[0].blocks.items()
    }
    return dict(
        data=tuple(p.blocks for p in prepared),
        clusters=clusters,
        n_clusters=int(n_clusters),
        terms=likelihood_terms(model, prepared[0], measurement_sd),
        measurement_sd=measurement_sd,
    )


def _warn_unused_continuous(types: Types, blocks: dict[str, RegimeBlock]) -> None:
    """Without a measurement error the likelihood reads only the discrete choices, so
    observed continuous choices, which depend on the type through its future choices,
    are thrown away: the types are then told apart by the discrete choices alone."""
    observed = sorted(
        {
            action
            for block in blocks.values()
            for action, values in block.continuous_actions.items()
            if np.any(np.isfinite(values) & block.mask)
        }
    )
    if observed:
        warn(
            f"estimate: unobserved_type={types.state!r} and the data observe the continuous "
            f"actions {observed}, but without measurement_sd the likelihood uses only the "
            "discrete choices, so the continuous choices carry no information about the "
            "types; pass measurement_sd=... to use them."
        )


def _msm_fields(model, params, data, moments, weighting, initial, subject, targets=None):
    profiles = profiles_tuple(moments)
    panel = panel_moments(model, data, profiles, subject)
    values = np.asarray(panel.values, dtype=float)
    if targets is not None:
        given = np.asarray(targets, dtype=float)
        if given.shape != values.shape or not np.all(np.isfinite(given)):
            raise EstimationError(
                f"estimate: targets must be {values.shape[0]} finite numbers (one per data "
                f"moment, in the order of lcm.data_moments), got shape {given.shape}."
            )
        values = given
    covariance = panel.covariance
    weight = _weight(weighting, covariance, panel.labels)
    if initial is None:
        conditions = _first_rows(model, data, subject, panel)
        mass = _data_mass(model, conditions, params)
    else:
        conditions = None
        mass = model.initial_mass(initial, params)
    fields = dict(
        mass=mass,
        profiles=tuple(zip(profiles, panel.periods, strict=True)),
        data_moments=jnp.asarray(values),
        weight=jnp.asarray(weight),
    )
    return fields, panel, conditions


def _weight(weighting, covariance, labels) -> np.ndarray:
    n = covariance.shape[0]
    variances = np.diag(covariance)
    if isinstance(weighting, str):
        if weighting == "identity":
            return np.eye(n)
        if weighting not in ("optimal", "diagonal"):
            raise EstimationError(
                f"estimate: weighting must be 'optimal', 'diagonal', 'identity' or a matrix, "
                f"got {weighting!r}."
            )
        flat = [f"{m} [period {t}]" for (m, t), v in zip(labels, variances, strict=True) if v <= 0]
        if flat:
            raise EstimationError(
                f"estimate: the data moments {flat} have variance 0 (every subject the same), "
                f"so {weighting!r} weighting cannot use them; drop them from the moments' periods."
            )
        if weighting == "diagonal":
            return np.diag(1.0 / variances)
        scale = np.sqrt(variances)
        correlation = covariance / np.outer(scale, scale)
        smallest = float(np.linalg.eigvalsh(correlation)[0])
        if smallest < 1e-10:
            raise EstimationError(
                f"estimate: the data moments' covariance is singular (smallest eigenvalue of "
                f"their correlation {smallest:.2e}): some moments are linear combinations of "
                "others; drop them or use weighting='diagonal'."
            )
        return np.linalg.inv(correlation) / np.outer(scale, scale)
    matrix = np.asarray(weighting, dtype=float)
    if matrix.shape != (n, n) or not np.allclose(matrix, matrix.T):
        raise EstimationError(
            f"estimate: a weighting matrix must be symmetric of shape ({n}, {n}) (one row per "
            f"moment), got shape {matrix.shape}."
        )
    if float(np.linalg.eigvalsh(matrix)[0]) <= 0:
        raise EstimationError("estimate: the weighting matrix must be positive definite.")
    return matrix


def _first_rows(model, data, subject, panel) -> dict[str, np.ndarray]:
    """The subjects' period-0 rows as initial conditions, in the panel's subject order:
    `regime` and each state as the data give it (labels or codes, values; a process
    state as its node values, as `to_dataframe` writes them, or as grid indices in a
    column `"<state>:index"`), for `model.initial_mass` to read as `simulate` does."""
    first = data[data["period"] == 0].set_index(subject)
    missing = [s for s in panel.subjects if s not in first.index]
    if missing:
        raise InvalidDataError(
            f"estimate: subjects {missing[:5]} have no period-0 row, which the distribution "
            "starts from; give initial=... or the subjects' first rows."
        )
    first = first.loc[panel.subjects]
    regime = regime_codes(model.plan, first["regime"])
    conditions = {"regime": regime}
    for regime_plan in model.plan.regimes.values():
        for name in regime_plan.states:
            index_column = name + INDEX_SUFFIX
            column = index_column if index_column in first.columns else name
            if column in conditions:
                continue
            having = np.isin(
                regime, [r.id for r in model.plan.regimes.values() if name in r.states]
            )
            if not np.any(having):
                continue
            if column not in first.columns:
                raise InvalidDataError(f"estimate: data lack the state {name!r}.")
            values = first[column]
            present = values.notna().to_numpy()
            if np.any(having & ~present):
                lacking = list(first.index[having & ~present][:5])
                raise InvalidDataError(
                    f"estimate: data[{column!r}] is missing in period 0 for subjects {lacking}, "
                    f"whose regime has the state {name!r}."
                )
            # Subjects in regimes without the state put no mass on it: any valid entry.
            values = values.where(present, values[having].iloc[0]).to_numpy()
            grid = regime_plan.grids[name]
            codes = column == index_column or (
                grid.is_discrete and not isinstance(grid, AbstractProcessGrid)
            )
            if codes and values.dtype.kind == "f" and np.all(values == np.round(values)):
                values = values.astype(np.int64)  # codes that pandas stored as floats
            conditions[column] = values
    return conditions


def _data_mass(model, conditions, params):
    """The initial mass of the data's period-0 rows (`_first_rows`), or each subject's
    own mass times `subject_mass`."""
    try:
        return model.initial_mass(conditions, params)
    except InvalidInitialConditionsError as error:
        raise InvalidDataError(
            f"estimate: the data's period-0 rows, which the distribution starts from, are "
            f"not valid initial conditions: {error}"
        ) from None


def _model_influence(model, objective, theta, conditions) -> np.ndarray:
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


def _check_overidentification(statistic: float, dof: int) -> None:
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


def _inverse(matrix: np.ndarray) -> np.ndarray:
    """The inverse of a symmetric matrix, or NaN where it is singular."""
    if not np.all(np.isfinite(matrix)):
        return np.full(matrix.shape, np.nan)
    scale = np.sqrt(np.abs(np.diag(matrix)))
    scale = np.where(scale > 0, scale, 1.0)
    scaled = matrix / np.outer(scale, scale)
    eigenvalues = np.linalg.eigvalsh(scaled)
    if not np.all(np.isfinite(eigenvalues)) or eigenvalues[0] < SINGULAR * max(eigenvalues[-1], 1):
        return np.full(matrix.shape, np.nan)
    return np.linalg.inv(scaled) / np.outer(scale, scale)


def _why_no_standard_errors(se, matrix, what: str, names) -> str | None:
    """Why standard errors are NaN, in words naming the parameters (None: all finite).
    `matrix` is the one inverted, `what` its name."""
    nan = [n for n, v in zip(names, se, strict=True) if not np.isfinite(v)]
    if not nan:
        return None
    head = f"the standard errors of {nan} are NaN: {what} at the estimates"
    bad = _non_finite(matrix, names, names)
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


class Fit(NamedTuple):
    """Where the optimiser stopped: what `_status` judges."""

    theta: np.ndarray
    value: float
    gradient: float  # the largest entry of the gradient in the unconstrained `x`
    n_steps: int
    reason: str | None  # why the optimiser stopped early, or None
    curvature: tuple  # the matrices that must be positive definite
    newton_in_se: np.ndarray  # the Newton step in `θ` over the standard errors
    at_bound: np.ndarray
    settled: bool = False  # stopped where no step decreases it, little to gain


def _at_bound(theta, newton, lower, upper) -> np.ndarray:
    """Parameters at an edge of their interval: the Newton step from the estimate leaves
    it (the objective keeps improving beyond the bound, where the transform has pushed
    the estimate), or the estimate sits on it to rounding."""
    target = theta + np.where(np.isfinite(newton), newton, 0.0)
    on_edge = np.minimum(theta - lower, upper - theta) <= 1e-9 * (1.0 + np.abs(theta))
    return on_edge | (target <= lower) | (target >= upper)


def _status(fit: Fit, *, names, bounds, tolerance, step_tolerance, max_steps) -> tuple[bool, str]:
    """Converged or not, and why. The gradient in `x` alone can mislead: where a
    transform saturates (an estimate pushed against its bound) it vanishes however far
    the optimum lies, so the Newton step in `θ`, measured in standard errors, must be
    small too, and no parameter may sit at a bound."""
    gradient, n_steps = fit.gradient, fit.n_steps
    if not math.isfinite(fit.value):
        return False, f"the objective became {fit.value} after {n_steps} steps"
    if np.any(fit.at_bound):
        edges = [
            f"{n} at {lo if t - lo <= hi - t else hi:g}"
            for n, t, lo, hi, flag in zip(names, fit.theta, *bounds, fit.at_bound, strict=True)
            if flag
        ]
        return False, (
            f"{', '.join(edges)}: the estimate is at its bound (the objective still improves "
            "beyond it), so the standard errors and intervals do not apply; widen the bounds "
            "or fix the parameter"
        )
    if not gradient <= tolerance and not fit.settled:
        if fit.reason is not None:
            return False, f"{fit.reason}, with gradient {gradient:.2e} > tolerance {tolerance:g}"
        if n_steps >= max_steps:
            return (
                False,
                f"max_steps={max_steps} reached with gradient {gradient:.2e} > {tolerance:g}",
            )
        return False, f"stopped with gradient {gradient:.2e} > tolerance {tolerance:g}"
    lead = (
        f"gradient {gradient:.2e} is below the tolerance"
        if gradient <= tolerance
        else f"stopped at a kink ({fit.reason}; gradient {gradient:.2e})"
    )
    for matrix in fit.curvature:
        if not np.all(np.isfinite(matrix)):
            return False, f"the curvature at the estimate is not finite ({names})"
        scale = np.sqrt(np.abs(np.diag(matrix)))
        scale = np.where(scale > 0, scale, 1.0)
        eigenvalues, vectors = np.linalg.eigh(matrix / np.outer(scale, scale))
        if np.all(np.isfinite(eigenvalues)) and eigenvalues[0] > SINGULAR * max(eigenvalues[-1], 1):
            continue
        flat = [n for n, v in zip(names, vectors[:, 0], strict=True) if abs(v) >= 0.3]
        return False, (
            f"{lead}, but the curvature is not positive "
            f"definite (a flat or downward direction in {flat}): a saddle point or parameters "
            "the data do not identify (see result.identification())"
        )
    step = np.abs(fit.newton_in_se)
    if not np.all(step <= step_tolerance):
        far = [
            f"{n} ({s:.2g} s.e.)"
            for n, s in zip(names, step, strict=True)
            if not s <= step_tolerance
        ]
        return False, (
            f"{lead}, but a Newton step of more than "
            f"step_tolerance={step_tolerance:g} standard errors remains in {', '.join(far)}: "
            "the optimiser stopped short of the optimum"
        )
    if not gradient <= tolerance:  # settled
        return True, (
            f"Newton step {float(np.max(step)):.2g} <= {step_tolerance:g} s.e. after {n_steps} "
            f"steps, with gradient {gradient:.2e} above the tolerance {tolerance:g} "
            f"({fit.reason}): converged to within a small fraction of a standard error"
        )
    return True, (
        f"gradient {gradient:.2e} <= tolerance {tolerance:g} and Newton step "
        f"{float(np.max(step)):.2g} <= {step_tolerance:g} s.e. after {n_steps} steps"
    )


__all__ = ["EstimationResult", "Identification", "LikelihoodRatioTest", "estimate"]
