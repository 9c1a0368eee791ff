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
   point rescaled, then tries the steepest descent, and says what it did (`minimise`);
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

This module sets a run up from the user's arguments and carries it out; the pieces live
by role: the free parameters and the objective in `_objective.py`, the optimisers and
their stopping rule in `_optimise.py`, standard errors and tests in `_inference.py`,
and what is returned (`EstimationResult`) in `_result.py`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._errors import EstimationError, InvalidDataError, InvalidInitialConditionsError, warn
from .._grids import INDEX_SUFFIX, AbstractProcessGrid, DiscreteGrid
from .._pandas import coerce_params
from ._choice import unconverged_refinements
from ._data import RegimeBlock, prepare_data, regime_codes
from ._inference import (
    check_overidentification,
    likelihood_curvature,
    model_influence,
    to_unconstrained,
    why_no_standard_errors,
)
from ._likelihood import likelihood_terms
from ._moments import Profile, panel_moments, profiles_tuple
from ._objective import Free, Objective, Types, leaf_at, moments_and_jacobian, with_leaf
from ._optimise import (
    NON_FINITE_ADVICE,
    Fit,
    Run,
    estimates_at_bound,
    gauss_newton,
    minimise,
    non_finite_entries,
    run_status,
    symmetric_inverse,
)
from ._result import EstimationResult

if TYPE_CHECKING:
    from .._facade import Model

# The most Newton steps after the optimiser stopped at a kink short of the optimum.
POLISH_STEPS = 2
# A period's share of refined cells (states x discrete choices) left `unconverged` above
# which `estimate` warns; below, `result.message` says so. Measured on Mahler-Yum: 12 %
# of tiny's effort cells in a period (3 steps) put moments' derivatives 39 % off central
# differences, 14-49 % of its refined saving's (5 steps) 3 %; reduced's refined effort
# leaves 1.7 % (5 steps, the default), and its effort parameters' derivatives equal
# central differences to 1e-5 on 29-33 of 35 moments.
UNCONVERGED_SHARE = 0.05
DEFAULT_BOUNDS = {"discount_factor": (0.0, 1.0), "taste_shock_scale": (0.0, math.inf)}


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
    tangent_batch_size: int = 0,
    check_refinement: bool = True,
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
            paths such as `("working", "wage")`. A scalar, or an array (or labelled
            Series) whose every entry is then free, labelled `path[i]` (e.g. the knots
            of an age profile, `lcm.Spline`); the result keeps its shape.
        bounds: `{name: (lower, upper)}` (use `math.inf` for none), for every entry of an
            array parameter alike; the start must lie strictly inside. Defaults: `(0, 1)`
            for `discount_factor`, `(0, inf)` for `taste_shock_scale`, unbounded
            otherwise.
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
        tangent_batch_size: `"msm"`: how many columns of the moments' Jacobian (one
            forward-mode tangent per free parameter) are computed at once; `0` (default)
            all of them, in one program. Like `batch_size` on a grid, a memory knob with
            the same results: each tangent carries a copy of the distribution's arrays,
            so `1` needs about `1 / n_free` of the memory, for a longer step (on a TPU,
            reduced Mahler–Yum's five tangents at once need 25.9 GB, the chip 15.75).
        check_refinement: where a regime's solver refines continuous actions
            (`GridSearch(refine=...)`), check at the estimate how many of its cells ran
            out of Newton steps (`RefineCode.unconverged`: a zero derivative short of the
            optimum, so the Jacobian and standard errors are off there): said in
            `result.message`, and warned of where over 5 % of a period's cells are. It
            costs one solve and `refine_codes` per period (reduced Mahler–Yum: 14 s
            compiled, 36 s with the compiles); `False` skips it, e.g. in a bootstrap's
            loop.

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
    if (
        isinstance(tangent_batch_size, bool)
        or not isinstance(tangent_batch_size, int)
        or tangent_batch_size < 0
    ):
        raise EstimationError(
            "estimate: tangent_batch_size must be an int >= 0 (0: all at once), got "
            f"{tangent_batch_size!r}."
        )
    if not isinstance(check_refinement, bool):
        raise EstimationError(
            f"estimate: check_refinement must be True or False, got {check_refinement!r}."
        )
    free_specs = _free(model, params, free, bounds or {}, given)
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
    if tangent_batch_size and method != "msm":
        raise EstimationError(
            "estimate: tangent_batch_size works with method='msm' (the moments' Jacobian)."
        )
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
            tangent_batch_size=tangent_batch_size,
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
        non_finite = non_finite_entries(gradient[None, :], ["the log-likelihood"], names)
        if method == "mle" and non_finite is not None:
            raise EstimationError(
                f"estimate('mle'): the gradient is not finite at the start ({at}): "
                f"{non_finite}; {NON_FINITE_ADVICE}."
            )
        if method == "mle":
            run = minimise(
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
            x_end, value_end, gradient_end, steps_end, trace_end, reason_end = gauss_newton(
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
            information, scores, descent, wide = likelihood_curvature(
                objective, theta, bounds_lo, bounds_hi, last
            )
            jacobian = scores
            outer = jacobian.T @ jacobian
            curvature: tuple = (information, outer)
            covariances = {
                "hessian": symmetric_inverse(information),
                "opg": symmetric_inverse(outer),
            }
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
            _, dtheta_dx = objective.natural(to_unconstrained(objective, theta))
            largest = float(np.max(np.abs(dtheta_dx.T @ trial[1])))
            n_steps += 1
            trace = np.column_stack([trace, [value, largest]])
        reported = -value * n_subjects
        model_moments = None
    else:
        model_moments, jacobian = (
            np.asarray(a) for a in moments_and_jacobian(objective, jnp.asarray(theta))
        )
        weight = np.asarray(objective.weight)
        assert panel is not None  # MSM always has its data moments
        influence = panel.influence
        if conditions is not None:
            influence = influence - model_influence(
                model, objective, jnp.asarray(theta), conditions
            )
        omega = influence.T @ influence / influence.shape[0] ** 2
        bread = symmetric_inverse(jacobian.T @ weight @ jacobian)
        curvature = (jacobian.T @ weight @ jacobian,)
        covariances = {"sandwich": bread @ jacobian.T @ weight @ omega @ weight @ jacobian @ bread}
        newton = -bread @ jacobian.T @ weight @ (model_moments - np.asarray(objective.data_moments))
        reported = 2 * value * n_subjects

    cov = covariances[kind]
    se = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), np.nan))
    at_bound = estimates_at_bound(theta, newton, np.asarray(bounds_lo), np.asarray(bounds_hi))
    converged, message = run_status(
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
    missing = why_no_standard_errors(se, inverted, what.get(kind, what[method]), names)
    if missing is not None:
        message += "; " + missing
    if not converged:
        warn(f"estimate({method!r}) did not converge: {message}")
    elif method == "msm" and isinstance(weighting, str) and weighting == "optimal":
        check_overidentification(reported, np.size(objective.data_moments) - len(names))
    # After the warnings above, which would repeat it.
    stuck = None
    if check_refinement:
        stuck = unconverged_refinements(model, objective.model_params(jnp.asarray(theta)))
    if stuck is not None:
        if stuck[1] > UNCONVERGED_SHARE:
            warn(f"estimate({method!r}): at the estimate, {stuck[0]}.")
        message += f"; at the estimate, {stuck[0]}"
    estimates = theta
    estimated: dict[str, Any] = dict(given)
    standard_errors: dict[str, Any] = _fixed_errors(given)
    for i, f in enumerate(free_specs):
        estimated = f.set_in(estimated, jnp.asarray(theta[i]))
        standard_errors = f.set_in(standard_errors, jnp.asarray(se[i]))
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


def _free(model, params, free, bounds, given) -> tuple[Free, ...]:
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
            value = leaf_at(params, path)
        except (KeyError, TypeError):
            raise EstimationError(
                f"estimate: free parameter {label!r} is not in params (its keys: {list(params)})."
            ) from None
        if isinstance(value, Mapping):
            raise EstimationError(
                f"estimate: free parameter {label!r} is a group of parameters "
                f"({sorted(value)}); free its entries by path, e.g. {(*path, next(iter(value)))}."
            )
        if not jnp.issubdtype(jnp.asarray(value).dtype, jnp.floating):
            raise EstimationError(f"estimate: free parameter {label!r} must be a float.")
        bound = bounds.get(path[0] if len(path) == 1 else path, bounds.get(label))
        if bound is None:
            bound = DEFAULT_BOUNDS.get(path[-1], (-math.inf, math.inf))
        lower, upper = (float(b) for b in bound)
        shape = jnp.shape(value)
        rows = _series_rows(model, given, path)
        # An array leaf (an age profile's knots, a table) frees each of its entries.
        for index in np.ndindex(shape) if shape else [None]:
            spec = Free(path=path, lower=lower, upper=upper, index=index)
            if index is not None and rows is not None:
                row = int(rows[0][index])
                spec = Free(path, lower, upper, index, row, _row_label(rows[1][row]))
            start = float(spec.value_in(params))
            if not lower < start < upper:
                raise EstimationError(
                    f"estimate: the start of {spec.label!r} is {start}, outside its bounds "
                    f"({lower}, {upper}); start strictly inside."
                )
            specs.append(spec)
    return tuple(specs)


def _series_rows(model, given, path) -> tuple[np.ndarray, pd.Index] | None:
    """For a parameter the user gave as a labelled Series: which of its rows each entry
    of the model's array is (the model's own reading of a Series of row numbers), and
    the rows' labels; None for any other parameter."""
    try:
        series = leaf_at(given, path)
    except (KeyError, TypeError):
        return None
    if not isinstance(series, pd.Series):
        return None
    numbered = pd.Series(np.arange(len(series)), index=series.index, name=series.name)
    positions = leaf_at(model.checked_params(with_leaf(given, path, numbered)), path)
    return np.asarray(positions), series.index


def _row_label(label) -> str:
    return ", ".join(str(v) for v in label) if isinstance(label, tuple) else str(label)


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
            value = float(values.get(f.label, f.value_in(params)))
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


__all__ = ["estimate"]
