"""The optimisers of `estimate`: L-BFGS on a rescaled problem with a backtracking line
search (`minimise`, for `"mle"`), damped Gauss–Newton (`gauss_newton`, for `"msm"`),
and whether a run converged (`run_status`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._errors import EstimationError
from ._objective import Objective, moments_and_jacobian

# Relative eigenvalue below which a curvature matrix counts as singular.
SINGULAR = 1e-10


def non_finite_entries(matrix: np.ndarray, rows, columns) -> str | None:
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
    """Where `minimise` stopped: `x`, the objective and the largest gradient entry
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
        # `likelihood_curvature`): a scaling need not be exact.
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


def minimise(
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


def gauss_newton(
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
    `minimise`.

    A non-finite Jacobian never reaches a linear solve: at the start it is an
    `EstimationError` naming its entries (`labels`: the moments'); a trial step where it
    is not finite is refused like one where the objective is not.
    """
    weight, target = np.asarray(objective.weight), np.asarray(objective.data_moments)

    def linearise(x):
        theta, dtheta_dx = objective.natural(x)
        moments, jacobian = (np.asarray(a) for a in moments_and_jacobian(objective, theta))
        residual = moments - target
        value = 0.5 * float(residual @ weight @ residual) / n_subjects
        j_x = jacobian @ dtheta_dx
        return value, j_x.T @ weight @ residual / n_subjects, j_x, jacobian, dtheta_dx

    names = [f.label for f in objective.free]
    value, gradient, j_x, jacobian, dtheta_dx = linearise(x)
    non_finite = non_finite_entries(jacobian, labels, names)
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
        bread = symmetric_inverse(jacobian.T @ weight @ jacobian)
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
            trial_non_finite = non_finite_entries(trial[3], labels, names)
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


def symmetric_inverse(matrix: np.ndarray) -> np.ndarray:
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


class Fit(NamedTuple):
    """Where the optimiser stopped: what `run_status` judges."""

    theta: np.ndarray
    value: float
    gradient: float  # the largest entry of the gradient in the unconstrained `x`
    n_steps: int
    reason: str | None  # why the optimiser stopped early, or None
    curvature: tuple  # the matrices that must be positive definite
    newton_in_se: np.ndarray  # the Newton step in `θ` over the standard errors
    at_bound: np.ndarray
    settled: bool = False  # stopped where no step decreases it, little to gain


def estimates_at_bound(theta, newton, lower, upper) -> np.ndarray:
    """Parameters at an edge of their interval: the Newton step from the estimate leaves
    it (the objective keeps improving beyond the bound, where the transform has pushed
    the estimate), or the estimate sits on it to rounding."""
    target = theta + np.where(np.isfinite(newton), newton, 0.0)
    on_edge = np.minimum(theta - lower, upper - theta) <= 1e-9 * (1.0 + np.abs(theta))
    return on_edge | (target <= lower) | (target >= upper)


def run_status(
    fit: Fit, *, names, bounds, tolerance, step_tolerance, max_steps
) -> tuple[bool, str]:
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
