"""Age-profile moments, computed the same way from a panel and from the exact distribution.

A `Profile` is the mean of a variable (or the share of rows with a discrete variable
equal to a value) in each period, over the rows that have the variable. In a panel
DataFrame those are the rows where its column is not missing (the retired have no
`labor`); in `model.distribution` they are the mass in the regimes that have it, so
the data moment and the model moment are the same statistic.

The covariance of the data moments is computed from the panel by influence functions,
clustered by subject: a subject's rows in different periods are correlated, and the
moments of one period are ratios (the number of rows in a period is itself random once
subjects leave). Moment `k` is `m_k = Σ_i a_ik / Σ_i b_ik` with `a_ik` the sum of the
variable over subject `i`'s rows in its cell and `b_ik` their number; its influence is
`φ_ik = (a_ik − m_k b_ik) / mean_i(b_ik)`, and `Cov(m) = Σ_i φ_i φ_iᵀ / N²`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import numpy as np
import pandas as pd

from .._errors import EstimationError, InvalidDataError
from .._grids import DiscreteGrid

if TYPE_CHECKING:
    from .._facade import Model
    from ._distribution import Distribution


class Profile(eqx.Module):
    """A moment by period: the mean of `name`, or the share with `name == value`.

    Computed over the rows (data) or the mass (model) that have `name`, optionally in
    one regime only, in the given periods (default: every period the data have rows
    for). The same object gives the data moments (`lcm.data_moments`) and the model's
    moments from `model.distribution` (`profile.of(dist)`), which is what
    `lcm.estimate(..., method="msm")` matches.

    Args:
        name: a state, action or scalar function of the regimes (a data column).
        value: `None` for the mean; a code, label or `IntEnum` member of a discrete
            `name` for the share equal to it.
        regime: only this regime's rows (default: every regime that has `name`).
        periods: the periods to use (default: those with data).

    Example:
        >>> profiles = [lcm.Profile("labor", Labor.work), lcm.Profile("wealth", periods=[1, 2])]
        >>> moments, covariance = lcm.data_moments(model, df, profiles)
    """

    name: str = eqx.field(static=True)
    value: Any = eqx.field(static=True, default=None)
    regime: str | None = eqx.field(static=True, default=None)
    periods: tuple[int, ...] | None = eqx.field(
        static=True,
        default=None,
        converter=lambda p: None if p is None else tuple(int(t) for t in p),
    )

    def label(self, model: Model) -> str:
        """A readable name: `"mean wealth"`, `"share labor=work"` (with `"@regime"`)."""
        where = f"@{self.regime}" if self.regime is not None else ""
        if self.value is None:
            return f"mean {self.name}{where}"
        return f"share {self.name}={_labels(model, self)[self.code(model)]}{where}"

    def code(self, model: Model) -> int:
        """The code of `value` on `name`'s grid."""
        labels = _labels(model, self)
        if isinstance(self.value, str):
            if self.value not in labels:
                raise EstimationError(
                    f"Profile: {self.value!r} is not a label of {self.name!r}; its labels are "
                    f"{list(labels)}."
                )
            return labels.index(self.value)
        code = int(self.value)
        if not 0 <= code < len(labels):
            raise EstimationError(
                f"Profile: code {code} is outside 0..{len(labels) - 1} for {self.name!r}."
            )
        return code

    def of(self, dist: Distribution, periods: Sequence[int]):
        """The model's moment in `periods` from a `Distribution` (differentiable)."""
        if self.value is None:
            values = dist.mean(self.name, self.regime)
        else:
            values = dist.share(self.name, self.value, self.regime)
        return values[np.asarray(periods, dtype=np.int32)]


def _labels(model: Model, profile: Profile) -> tuple[str, ...]:
    for name, regime_plan in model.plan.regimes.items():
        if profile.regime not in (None, name):
            continue
        grid = regime_plan.grids.get(profile.name)
        if isinstance(grid, DiscreteGrid):
            return tuple(str(label) for label in grid.labels)
    raise EstimationError(
        f"Profile: {profile.name!r} is not a discrete state or action of "
        f"{'any regime' if profile.regime is None else repr(profile.regime)}, so a share of "
        f"it (value={profile.value!r}) has no meaning; leave value=None for its mean."
    )


class PanelMoments(eqx.Module):
    """The data side of the method of moments (internal): moments, their influence.

    `profiles` hold the periods used (those the data have rows for, in each profile's
    requested periods); `influence[i, k]` is subject `i`'s `φ_ik` (see the module).
    """

    values: np.ndarray  # (n_moments,)
    influence: np.ndarray  # (n_subjects, n_moments)
    labels: tuple[tuple[str, int], ...] = eqx.field(static=True)
    periods: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    subjects: np.ndarray  # (n_subjects,) the subject ids, in the order of `influence`

    @property
    def covariance(self) -> np.ndarray:
        n = self.influence.shape[0]
        return self.influence.T @ self.influence / n**2


def panel_moments(
    model: Model, data, profiles: Sequence[Profile], subject: str = "subject_id"
) -> PanelMoments:
    """Moments of `profiles` in a panel DataFrame and their influence by subject."""
    if not isinstance(data, pd.DataFrame):
        raise InvalidDataError(
            f"data_moments: data must be a pandas DataFrame (a panel with one row per "
            f"subject and period), got {type(data).__name__}."
        )
    for column in ("period", "regime", subject):
        if column not in data.columns:
            raise InvalidDataError(f"data_moments: data lacks the column {column!r}.")
    if not profiles:
        raise EstimationError("data_moments: give at least one Profile.")
    subject_codes, subjects = pd.factorize(data[subject], sort=True)
    n_subjects = subjects.size
    period = data["period"].to_numpy()
    regime = data["regime"].astype(str).to_numpy()
    values, columns, labels, periods_used = [], [], [], []
    for profile in profiles:
        if not isinstance(profile, Profile):
            raise EstimationError(
                f"data_moments: expected lcm.Profile entries, got {type(profile).__name__}."
            )
        if profile.name not in data.columns:
            raise InvalidDataError(
                f"data_moments: data lack the column {profile.name!r} of "
                f"{profile.label(model) if profile.value is None else profile}."
            )
        if profile.regime is not None and profile.regime not in model.plan.regimes:
            raise EstimationError(
                f"Profile({profile.name!r}): unknown regime {profile.regime!r}; the regimes "
                f"are {list(model.plan.regimes)}."
            )
        column = data[profile.name]
        # Not updated in place: pandas 3 hands out read-only views of its data.
        observed = column.notna().to_numpy()
        if profile.regime is not None:
            observed = observed & (regime == profile.regime)
        if profile.value is None:
            y = np.asarray(pd.to_numeric(column, errors="coerce"), dtype=float)
            if np.any(observed & ~np.isfinite(y)):
                raise InvalidDataError(
                    f"data_moments: data[{profile.name!r}] is not numeric; a mean needs numbers."
                )
        else:
            code = profile.code(model)
            label = _labels(model, profile)[code]
            raw = column.astype(object) if isinstance(column.dtype, pd.CategoricalDtype) else column
            if raw.dtype.kind in "OUS":
                y = (raw.astype(str) == label).to_numpy(dtype=float)
            else:
                y = (raw.to_numpy() == code).astype(float)
        wanted = sorted(set(period[observed].tolist()))
        if profile.periods is not None:
            missing = [t for t in profile.periods if t not in set(wanted)]
            if missing:
                raise InvalidDataError(
                    f"data_moments: no data rows for {profile.label(model)} in periods {missing}."
                )
            wanted = list(profile.periods)
        if not wanted:
            raise InvalidDataError(
                f"data_moments: no data rows for {profile.label(model)} in the periods asked for."
            )
        for t in wanted:
            cell = observed & (period == t)
            mean = float(np.mean(y[cell]))
            a = np.bincount(subject_codes[cell], weights=y[cell], minlength=n_subjects)
            b = np.bincount(subject_codes[cell], minlength=n_subjects).astype(float)
            values.append(mean)
            columns.append((a - mean * b) / np.mean(b))
            labels.append((profile.label(model), int(t)))
        periods_used.append(tuple(int(t) for t in wanted))
    return PanelMoments(
        values=np.asarray(values),
        influence=np.stack(columns, axis=1),
        labels=tuple(labels),
        periods=tuple(periods_used),
        subjects=np.asarray(subjects),
    )


def data_moments(
    model: Model, data, profiles: Sequence[Profile], *, subject: str = "subject_id"
) -> tuple[pd.Series, pd.DataFrame]:
    """Moments of a panel DataFrame and their covariance, clustered by subject.

    Args:
        model: the `Model` (for the labels of discrete variables).
        data: a panel DataFrame, e.g. `model.simulate(...).to_dataframe()`: columns
            `subject`, `period`, `regime` and each profile's variable.
        profiles: the `Profile`s; each contributes one moment per period with data.
        subject: the column that identifies subjects (the clusters).

    Returns:
        The moments as a Series indexed by `(moment, period)`, and their covariance
        (the variance of the sample moments, `Σ_i φ_i φ_iᵀ / N²`; see the module
        docstring) as a DataFrame with the same index and columns.

    Example:
        >>> moments, covariance = lcm.data_moments(model, df, [lcm.Profile("wealth")])
        >>> np.sqrt(np.diag(covariance))           # standard errors of mean wealth by period
    """
    moments = panel_moments(model, data, profiles, subject)
    index = pd.MultiIndex.from_tuples(moments.labels, names=["moment", "period"])
    return (
        pd.Series(moments.values, index=index, name="value"),
        pd.DataFrame(moments.covariance, index=index, columns=index),
    )


def profiles_tuple(profiles: Sequence[Profile] | Mapping | None) -> tuple[Profile, ...]:
    """`profiles` as a tuple, refusing anything but a sequence of `Profile`s."""
    if profiles is None or isinstance(profiles, Mapping | str | Profile):
        raise EstimationError(
            "estimate(method='msm') needs moments=[lcm.Profile(...), ...] (a list of Profiles)."
        )
    return tuple(profiles)


__all__ = ["PanelMoments", "Profile", "data_moments", "panel_moments"]
