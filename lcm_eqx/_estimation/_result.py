"""What `estimate` returns: `EstimationResult` (estimates, standard errors, intervals and
the report), its `Identification` diagnostics, `LikelihoodRatioTest`, and the edges
of profile-likelihood intervals."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import numpy as np
import pandas as pd

from .._errors import EstimationError, warn
from ._inference import to_unconstrained, wald_interval
from ._objective import Objective
from ._optimise import NON_FINITE_ADVICE, minimise, non_finite_entries


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
        x_hat = to_unconstrained(self.problem, self.estimates)
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
        non_finite = non_finite_entries(self.jacobian, rows, self.names)
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
        x[j] = to_unconstrained(objective, _with(result.estimates, j, t))[j]
        x, value, gradient = minimise(objective, x, tolerance, max_steps, fixed)[:3]
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
