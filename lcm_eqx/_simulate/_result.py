"""Simulated panels, kept as arrays (periods x subjects) until a data frame is asked for."""

from __future__ import annotations

import equinox as eqx
import numpy as np
import pandas as pd


class SimulationResult(eqx.Module):
    """A simulated panel, as returned by `Model.simulate`.

    Arrays have shape `(n_periods, n_subjects)`. `present[t, i]` says whether subject i
    has a row in period t (a subject that enters a terminal regime gets one row there and
    none after). `regime` holds regime ids; `states` and `actions` hold grid codes for
    discrete variables and values for continuous ones (process states: their values).
    """

    regime: np.ndarray
    present: np.ndarray
    value: np.ndarray
    states: dict[str, np.ndarray]
    actions: dict[str, np.ndarray]
    regime_names: tuple[str, ...] = eqx.field(static=True)
    has_variable: dict[str, tuple[str, ...]] = eqx.field(static=True)  # regime -> variables
    labels: dict[str, tuple[str, ...]] = eqx.field(static=True)  # discrete variable -> labels
    ages: tuple[float, ...] | None = eqx.field(static=True)

    @property
    def n_subjects(self) -> int:
        return int(self.regime.shape[1])

    @property
    def n_periods(self) -> int:
        return int(self.regime.shape[0])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per subject and period present.

        Columns: `subject_id`, `period`, `age` (when the model has ages), `regime` (name),
        `value`, every state and every action of every regime (NaN where the subject's
        regime lacks it; discrete ones as labels in a pandas `Categorical`).
        """
        period_index, subject_index = np.nonzero(self.present)
        order = np.lexsort((period_index, subject_index))
        period_index, subject_index = period_index[order], subject_index[order]
        regime_ids = self.regime[period_index, subject_index]
        columns: dict[str, object] = {
            "subject_id": subject_index.astype(np.int64),
            "period": period_index.astype(np.int64),
        }
        if self.ages is not None:
            columns["age"] = np.asarray(self.ages)[period_index]
        columns["regime"] = pd.Categorical.from_codes(
            regime_ids.astype(np.int64), categories=list(self.regime_names)
        )
        columns["value"] = self.value[period_index, subject_index]
        for group in (self.states, self.actions):
            for name, array in group.items():
                values = array[period_index, subject_index]
                owned = np.isin(
                    regime_ids,
                    [i for i, r in enumerate(self.regime_names) if name in self.has_variable[r]],
                )
                if name in self.labels:
                    codes = np.where(owned, values, -1).astype(np.int64)
                    columns[name] = pd.Categorical.from_codes(
                        codes, categories=list(self.labels[name])
                    )
                else:
                    columns[name] = np.where(owned, values.astype(float), np.nan)
        return pd.DataFrame(columns)
