"""Observed panel data, arranged for the likelihood: padded (period, row) blocks per regime.

Conversion happens once, in numpy, outside any trace. The result is an `eqx.Module`
(a pytree of arrays) that can be passed to, or closed over by, jitted functions.

The blocks' shapes depend only on which periods the data have and how many rows each
period has, never on how those rows split between regimes: every regime's block has a
group for each period of the data in which the regime is active, each as wide as the
period with the most rows, and a regime without rows in these data has a block of
masked-out padding all the same. So datasets of the same size (balanced panels of as
many subjects, say, simulated with different draws) give the same shapes, and a
function jitted on one runs on the others without being traced again. The likelihood
skips groups without rows (`lax.cond`), so the padding costs no work there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import equinox as eqx
import numpy as np

from .._errors import InvalidDataError
from .._grids import AbstractProcessGrid, DiscreteGrid

if TYPE_CHECKING:
    from .._facade import Model
    from .._typing import Data


class RegimeBlock(eqx.Module):
    """The observations of one regime, padded into `(n_groups, max_rows)` blocks by period.

    A group per period of the data in which the regime is active (possibly with no row
    of the regime), each `max_rows` wide: the most rows any period of the data has.

    `states[name]` holds codes (discrete states), values (continuous states) or, for
    process states given as values, those values (mapped to the nearest grid point at
    run time, since the points depend on parameters). Padding repeats the group's first
    row and is masked out by `mask`.
    """

    periods: np.ndarray  # (n_groups,) int
    states: dict[str, np.ndarray]  # (n_groups, max_rows)
    discrete_actions: dict[str, np.ndarray]  # (n_groups, max_rows) int codes
    continuous_actions: dict[str, np.ndarray]  # (n_groups, max_rows) float (NaN: unobserved)
    mask: np.ndarray  # (n_groups, max_rows) bool
    row: np.ndarray  # (n_groups, max_rows) int, index into the original rows (-1: padding)
    process_as_values: tuple[str, ...] = eqx.field(static=True)


class ChoiceData(eqx.Module):
    """Observed rows grouped by regime and period; build with `prepare_data`."""

    blocks: dict[str, RegimeBlock]
    n_rows: int = eqx.field(static=True)


def prepare_data(model: Model, data: Data | ChoiceData) -> ChoiceData:
    """Arrange observed data for `log_likelihood` and `choice_moments`.

    Args:
        model: the `Model`.
        data: a pandas DataFrame (e.g. `model.simulate(...).to_dataframe()`) or a dict of
            1-d arrays with columns `regime` (names or ids), `period`, every state of the
            rows' regimes (discrete: labels or codes; continuous: values; process states:
            grid codes as ints, or values as floats, matched to the nearest grid point),
            and the observed actions (discrete: labels or codes; continuous: values).
            Each regime's discrete actions must be observed (no missing values) on its
            rows; continuous actions may be NaN (unobserved).

    Returns:
        A `ChoiceData`, reusable across parameter values.
    """
    if isinstance(data, ChoiceData):
        return data
    columns = _columns(data)
    plan = model.plan
    if "regime" not in columns or "period" not in columns:
        raise InvalidDataError("data needs columns 'regime' and 'period'.")
    regime = regime_codes(plan, columns["regime"])
    period = np.asarray(columns["period"])
    n_rows = regime.shape[0]
    if period.shape != (n_rows,) or np.any(period != np.round(period)):
        raise InvalidDataError("data['period'] must hold integer periods, one per row.")
    period = period.astype(np.int64)
    if np.any((period < 0) | (period >= plan.n_periods)):
        raise InvalidDataError(f"data['period'] must lie in 0..{plan.n_periods - 1}.")
    data_periods, rows_per_period = np.unique(period, return_counts=True)
    width = int(rows_per_period.max()) if n_rows else 0
    blocks = {}
    for name, regime_plan in plan.regimes.items():
        rows = np.flatnonzero(regime == regime_plan.id)
        inactive = sorted(set(period[rows].tolist()) - set(regime_plan.active))
        if inactive:
            raise InvalidDataError(
                f"data: regime {name!r} has rows in periods {inactive}, where it is inactive."
            )
        groups = np.asarray([t for t in data_periods if t in regime_plan.active], dtype=np.int64)
        if rows.size == 0 and (
            groups.size == 0 or any(s not in columns for s in regime_plan.states)
        ):
            continue  # a regime these data could never have rows of
        blocks[name] = _block(regime_plan, columns, rows, period[rows], groups, width)
    return ChoiceData(blocks=blocks, n_rows=n_rows)


def _columns(data) -> dict:
    try:
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return {c: data[c] for c in data.columns}
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(data, Mapping):
        raise InvalidDataError(
            f"data must be a pandas DataFrame or a dict of arrays, got {type(data).__name__}."
        )
    return dict(data)


def regime_codes(plan, raw) -> np.ndarray:
    """The regime ids of a data column of regime names or ids."""
    values = _plain(raw)
    ids = {name: r.id for name, r in plan.regimes.items()}
    if values.dtype.kind in "OUS":
        bad = sorted({str(v) for v in values if str(v) not in ids})
        if bad:
            raise InvalidDataError(f"data['regime'] has unknown regimes {bad}; known: {list(ids)}.")
        return np.array([ids[str(v)] for v in values], dtype=np.int64)
    out = values.astype(np.int64)
    if np.any(out != values) or np.any((out < 0) | (out >= len(ids))):
        raise InvalidDataError(f"data['regime'] must hold ids 0..{len(ids) - 1} or names.")
    return out


def _plain(raw) -> np.ndarray:
    """A column as a numpy array; Categoricals become their labels."""
    try:
        import pandas as pd

        if isinstance(raw, pd.Series | pd.Categorical) and isinstance(
            getattr(raw, "dtype", None), pd.CategoricalDtype
        ):
            return np.asarray(raw.astype(object))
        if isinstance(raw, pd.Series):
            return raw.to_numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(raw)


def _codes(name: str, grid, raw, rows) -> np.ndarray:
    values = _plain(raw)[rows]
    if values.dtype.kind in "OUS":
        if not isinstance(grid, DiscreteGrid):
            raise InvalidDataError(f"data[{name!r}]: labels given, but {name!r} has no labels.")
        codes, bad = grid.codes_of(values)
        if bad:
            raise InvalidDataError(
                f"data[{name!r}] has unknown labels {bad}; valid: {list(grid.labels)}."
            )
        return codes.astype(np.int64)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        raise InvalidDataError(f"data[{name!r}] has missing values on rows that need it.")
    codes = values.astype(np.int64)
    if np.any(codes != values) or np.any((codes < 0) | (codes >= grid.n_points)):
        raise InvalidDataError(f"data[{name!r}] must hold codes 0..{grid.n_points - 1} or labels.")
    return codes


def _block(regime_plan, columns, rows, periods, groups, width) -> RegimeBlock:
    name = regime_plan.name
    states, discrete_actions, continuous_actions = {}, {}, {}
    process_as_values = []
    for state in regime_plan.states:
        if state not in columns:
            raise InvalidDataError(f"data lacks state {state!r}, which regime {name!r} needs.")
        grid = regime_plan.grids[state]
        raw = _plain(columns[state])[rows]
        if isinstance(grid, AbstractProcessGrid) and raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)):
                raise InvalidDataError(f"data[{state!r}] has missing values in regime {name!r}.")
            states[state] = raw.astype(float)
            process_as_values.append(state)
        elif grid.is_discrete:
            states[state] = _codes(state, grid, columns[state], rows)
        else:
            values = raw.astype(float)
            if not np.all(np.isfinite(values)):
                raise InvalidDataError(f"data[{state!r}] has missing values in regime {name!r}.")
            states[state] = values
    for action in regime_plan.discrete_actions:
        if action not in columns:
            raise InvalidDataError(
                f"data lacks discrete action {action!r} of regime {name!r}; it must be observed."
            )
        discrete_actions[action] = _codes(action, regime_plan.grids[action], columns[action], rows)
    for action in regime_plan.continuous_actions:
        if action in columns:
            continuous_actions[action] = _plain(columns[action])[rows].astype(float)
        else:
            continuous_actions[action] = np.full(rows.shape, np.nan)

    if rows.size == 0:
        # No row in these data (other datasets of the same layout may have some): one
        # stand-in row of no period, always masked out, keeps the block and its shapes.
        states = {k: np.zeros(1, v.dtype) for k, v in states.items()}
        discrete_actions = {k: np.zeros(1, v.dtype) for k, v in discrete_actions.items()}
        continuous_actions = {
            k: np.zeros(1) if k in columns else np.full(1, np.nan) for k in continuous_actions
        }
        periods, rows = np.full(1, -1), np.full(1, -1)
    index = np.empty((groups.size, width), dtype=np.int64)
    mask = np.zeros((groups.size, width), dtype=bool)
    for g, t in enumerate(groups):
        members = np.flatnonzero(periods == t)
        index[g, : members.size] = members
        # Padding repeats an observed row of the regime (of the nearest period when this
        # one has none), whose terms are finite, so that masking it out leaves finite
        # gradients.
        index[g, members.size :] = members[0] if members.size else np.argmin(np.abs(periods - t))
        mask[g, : members.size] = True

    def pad(array):
        return array[index]

    return RegimeBlock(
        periods=groups.astype(np.int32),
        states={k: pad(v) for k, v in states.items()},
        discrete_actions={k: pad(v).astype(np.int32) for k, v in discrete_actions.items()},
        continuous_actions={k: pad(v) for k, v in continuous_actions.items()},
        mask=mask,
        row=np.where(mask, rows[index], -1),
        process_as_values=tuple(process_as_values),
    )
