"""Simulated panels, kept as arrays (periods x subjects) until a data frame is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .._errors import LcmError
from .._grids._age import age_of
from .._model._dag import Evaluator
from .._model._params import resolve_params
from .._persistence import model_structure, save
from .._typing import FilePath, Params

if TYPE_CHECKING:  # pragma: no cover
    from .._protocols import ModelLike


class SimulationResult(eqx.Module):
    """A simulated panel, as returned by `Model.simulate`.

    Arrays have shape `(n_periods, n_subjects)`. `present[t, i]` says whether subject i
    has a row in period t (a subject that enters a terminal regime gets one row there and
    none after). `regime` holds regime ids; `states` and `actions` hold grid codes for
    discrete variables and values for continuous ones (process states: their values).
    `result.save(path)` writes it to a file; `lcm.load_simulation_result(path, model)` reads
    it back.
    """

    # NumPy arrays; JAX arrays when `simulate` ran under `jax.jit`.
    regime: np.ndarray | jax.Array
    present: np.ndarray | jax.Array
    value: np.ndarray | jax.Array
    states: dict[str, np.ndarray | jax.Array]
    actions: dict[str, np.ndarray | jax.Array]
    regime_names: tuple[str, ...] = eqx.field(static=True)
    has_variable: dict[str, tuple[str, ...]] = eqx.field(static=True)  # regime -> variables
    labels: dict[str, tuple[str, ...]] = eqx.field(static=True)  # discrete variable -> labels
    ages: tuple[float, ...] | None = eqx.field(static=True)
    # Canonical JSON of the structure of the model that produced it (set by Model.simulate),
    # written into saved files so that loading can check the model it is loaded into.
    model_structure: str | None = eqx.field(static=True, default=None, repr=False)

    @property
    def n_subjects(self) -> int:
        return int(self.regime.shape[1])

    @property
    def n_periods(self) -> int:
        return int(self.regime.shape[0])

    def save(self, path: FilePath) -> None:
        """Write the panel to the file `path` (atomically: a crash leaves the old file).

        Arrays round-trip bit-exactly. Load it with `lcm.load_simulation_result(path, model)`.

        Example:
            >>> result.save("panel.lcm")
            >>> result = lcm.load_simulation_result("panel.lcm", model)
        """
        save(self, path)

    def to_dataframe(
        self,
        extra: Sequence[str] = (),
        *,
        use_labels: bool = True,
        model: ModelLike | None = None,
        params: Params | None = None,
    ) -> pd.DataFrame:
        """One row per subject and period present.

        Columns: `subject_id`, `period`, `age` (when the model has ages), `regime` (name),
        `value`, every state and every action of every regime (NaN where the subject's
        regime lacks it; discrete ones as labels in a pandas `Categorical`). Process
        states hold their node values.

        Args:
            extra: names of functions of the regimes to add as columns, evaluated at each
                row's states, actions, period and age: an entry of a regime's
                `functions` (e.g. `"labor_income"`), `"utility"`, a constraint (a
                boolean column), `"next_<state>"` for a deterministic state transition
                or `"next_regime"` for a deterministic regime transition (labels). A
                row whose regime lacks the function gets NaN (`<NA>` for booleans and
                labels).
            model: the model that was simulated; needed with `extra`.
            params: the parameters it was simulated with (a dict or a Series); needed
                with `extra`.
            use_labels: `False` gives codes instead of labels: every labelled column
                but `regime` (discrete states and actions, labelled `extra` columns)
                holds integer codes, as a nullable `Int64` column (`<NA>` where the
                subject's regime lacks the variable).

        Example:
            >>> df = result.to_dataframe(extra=["labor_income", "utility"], model=model,
            ...                          params=params)
        """
        period_index, subject_index = np.nonzero(np.asarray(self.present))
        order = np.lexsort((period_index, subject_index))
        period_index, subject_index = period_index[order], subject_index[order]
        regime_ids = np.asarray(self.regime)[period_index, subject_index]
        columns: dict[str, object] = {
            "subject_id": subject_index.astype(np.int64),
            "period": period_index.astype(np.int64),
        }
        if self.ages is not None:
            columns["age"] = np.asarray(self.ages)[period_index]
        columns["regime"] = pd.Categorical.from_codes(
            regime_ids.astype(np.int64), categories=list(self.regime_names)
        )
        columns["value"] = np.asarray(self.value)[period_index, subject_index]
        for group in (self.states, self.actions):
            # In the model's order: a panel returned from `jax.jit` has its dicts sorted.
            ordered = [v for names in self.has_variable.values() for v in names if v in group]
            for name in dict.fromkeys(ordered):
                values = np.asarray(group[name])[period_index, subject_index]
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
        if isinstance(extra, str):
            extra = (extra,)
        if extra:
            columns.update(
                _extra_columns(
                    self,
                    tuple(extra),
                    model,
                    params,
                    period_index,
                    subject_index,
                    regime_ids,
                    taken=set(columns),
                )
            )
        if not use_labels:  # the regime keeps its name: it is not a variable
            columns = {
                name: column if name == "regime" else _as_codes(column)
                for name, column in columns.items()
            }
        return pd.DataFrame(columns)


def _as_codes(column):
    """A `Categorical` column as its integer codes (`<NA>` where missing); others as is."""
    if not isinstance(column, pd.Categorical):
        return column
    codes = np.asarray(column.codes, dtype=np.int64)
    return pd.arrays.IntegerArray(codes, codes < 0)


def _extra_columns(
    result: SimulationResult,
    names: tuple[str, ...],
    model: ModelLike | None,
    params,
    period_index: np.ndarray,
    subject_index: np.ndarray,
    regime_ids: np.ndarray,
    taken: set[str],
) -> dict[str, object]:
    """Columns of user functions evaluated at each row's states, actions, period and age."""
    if model is None or params is None:
        raise LcmError(
            f"to_dataframe(extra={list(names)}): pass the model and the params that were "
            "simulated, e.g. result.to_dataframe(extra=[...], model=model, params=params)."
        )
    plan = model.plan
    if tuple(plan.names) != tuple(result.regime_names) or (
        result.model_structure is not None and model_structure(model) != result.model_structure
    ):
        raise LcmError(
            "to_dataframe: the model has another structure than the one that was "
            "simulated; pass the model that was simulated."
        )
    functions = {name: _functions_named(plan, name) for name in names}
    for name, found in functions.items():
        if name in taken:
            raise LcmError(f"to_dataframe: extra column {name!r} is already a column.")
        if not found:
            known = sorted({k for r in plan.regimes.values() for k in _function_keys(r)})
            raise LcmError(
                f"to_dataframe: no regime has a function {name!r} to add as a column "
                f"(functions: {known})."
            )
    # Normalised and checked by the model's own façade (`ModelLike.checked_params`).
    resolved = resolve_params(plan, model.checked_params(params))
    n_rows = period_index.shape[0]
    outputs: dict[str, np.ndarray] = {}
    filled: dict[str, np.ndarray] = {name: np.zeros(n_rows, dtype=bool) for name in names}
    for regime_name, regime in plan.regimes.items():
        rows = np.nonzero(regime_ids == regime.id)[0]
        wanted = {n: functions[n][regime_name] for n in names if regime_name in functions[n]}
        if rows.size == 0 or not wanted:
            continue
        periods, subjects = period_index[rows], subject_index[rows]
        inputs = {
            name: np.asarray(group[name][periods, subjects])
            for group in (result.states, result.actions)
            for name in (*regime.states, *regime.actions)
            if name in group
        }
        inputs["period"] = periods.astype(np.int32)
        inputs["age"] = np.asarray(age_of(model.ages, periods))

        def evaluate(point, regime=regime, wanted=wanted, regime_params=resolved[regime_name]):
            evaluator = Evaluator(regime.helpers, point, regime_params)
            return {name: jnp.asarray(evaluator(function)) for name, function in wanted.items()}

        values = jax.vmap(evaluate)(inputs)
        for name, column in values.items():
            column = np.asarray(column)
            if column.shape != (rows.size,):
                raise LcmError(
                    f"to_dataframe: function {name!r} of regime {regime_name!r} returns shape "
                    f"{column.shape[1:]} per row; only scalar functions can be columns."
                )
            if name not in outputs:
                dtype = (
                    bool
                    if column.dtype == bool
                    else (
                        np.int64
                        if column.dtype.kind in "iu" and _is_labelled(plan, name)
                        else float
                    )
                )
                outputs[name] = np.zeros(n_rows, dtype=dtype)
            outputs[name][rows] = column
            filled[name][rows] = True
    columns: dict[str, object] = {}
    for name in names:
        column = outputs[name] if name in outputs else np.full(n_rows, np.nan)
        labels = _labels_of(plan, name)
        if labels is not None and name in outputs:
            codes = np.where(filled[name], column, -1).astype(np.int64)
            columns[name] = pd.Categorical.from_codes(codes, categories=list(labels))
        elif column.dtype == bool:
            columns[name] = pd.arrays.BooleanArray(column, ~filled[name])
        else:
            columns[name] = np.where(filled[name], column.astype(float), np.nan)
    return columns


def _function_keys(regime) -> list[str]:
    keys = ["utility", *regime.helpers, *regime.constraints]
    # A per-target law of motion, or one that reads a draw made after the decision
    # (`next_<state>`), has no one value per row: it is left out.
    keys += [
        f"next_{s}"
        for s, t in regime.state_transitions.items()
        if not t.is_markov and not t.per_target and not t.draws
    ]
    if regime.next_regime is not None and not regime.next_regime_is_markov:
        keys.append("next_regime")
    return keys


def _functions_named(plan, name: str) -> dict:
    """The resolved function called `name` in each regime that has it."""
    found = {}
    for regime_name, regime in plan.regimes.items():
        if name in _function_keys(regime):
            found[regime_name] = regime.function(name)
    return found


def _labels_of(plan, name: str) -> tuple[str, ...] | None:
    """Labels for the values of `next_regime` and of transitions of discrete states."""
    if name == "next_regime":
        return plan.names
    if name.startswith("next_"):
        try:
            grid = plan.state_grid(name[5:])
        except KeyError:
            return None
        return getattr(grid, "labels", None)
    return None


def _is_labelled(plan, name: str) -> bool:
    return _labels_of(plan, name) is not None
