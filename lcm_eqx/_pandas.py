"""Parameters as a pandas Series: one row per parameter, indexed by where it lives.

The index levels are `(regime, function, name)`, as in `params[regime][function][name]`.
A level that does not apply is `""` (or NaN): `("", "", "wage")` is `params["wage"]`,
`("working", "", "wage")` is `params["working"]["wage"]`. A flat index of names is the
top level only. Array-valued parameters sit in object cells.
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ._errors import InvalidParamsError

LEVELS = ("regime", "function", "name")


def params_from_series(series) -> dict[str, Any]:
    """The nested params dict described by a Series indexed by `(regime, function, name)`.

    Args:
        series: one parameter per row. Its index is either flat (each entry a parameter
            name, read as `params[name]`) or a `MultiIndex` with 2 levels
            `(regime, name)` or 3 levels `(regime, function, name)`; a level that does
            not apply is `""` or NaN. Cells hold numbers, or arrays in an object column.

    Returns:
        The nested dict that `Model.solve` and `Model.simulate` take (they also accept
        the Series itself and call this function).

    Example:
        >>> index = pd.MultiIndex.from_tuples(
        ...     [("", "", "discount_factor"), ("working", "", "wage")],
        ...     names=["regime", "function", "name"])
        >>> params_from_series(pd.Series([0.95, 20.0], index=index))
        {'discount_factor': 0.95, 'working': {'wage': 20.0}}
    """
    if not isinstance(series, pd.Series):
        raise InvalidParamsError(
            f"params_from_series: expected a pandas Series, got {type(series).__name__}."
        )
    index = series.index
    n_levels = index.nlevels
    if n_levels > len(LEVELS):
        raise InvalidParamsError(
            f"params_from_series: the index has {n_levels} levels; use at most 3: "
            "(regime, function, name)."
        )
    params: dict[str, Any] = {}
    for entry, value in zip(index, series.array, strict=True):
        path = _path(entry if isinstance(entry, tuple) else (entry,))
        _insert(params, path, _value(path, value))
    return params


def params_to_series(params: Mapping) -> pd.Series:
    """The params dict as a Series with a `(regime, function, name)` MultiIndex.

    Levels that do not apply are `""`; top-level parameters come first. The Series is
    float when every parameter is a number, and holds arrays in object cells otherwise.
    `params_from_series` inverts it.

    Example:
        >>> params_to_series({"discount_factor": 0.95, "working": {"wage": 20.0}})
        regime   function  name
                           discount_factor     0.95
        working            wage               20.00
        dtype: float64
    """
    if not isinstance(params, Mapping):
        raise InvalidParamsError(
            f"params_to_series: expected a dict of parameters, got {type(params).__name__}."
        )
    rows: list[tuple[tuple[str, str, str], Any]] = []
    for key, value in params.items():
        if not isinstance(value, Mapping):
            rows.append((("", "", key), value))
            continue
        for inner_key, inner in value.items():
            if not isinstance(inner, Mapping):
                rows.append(((key, "", inner_key), inner))
                continue
            for name, leaf in inner.items():
                if isinstance(leaf, Mapping):
                    raise InvalidParamsError(
                        f"params_to_series: params[{key!r}][{inner_key!r}][{name!r}] is a "
                        "dict; parameters nest at most three levels deep."
                    )
                rows.append(((key, inner_key, name), leaf))
    # Top-level parameters first: pandas prints a blank level as "same as the row above",
    # so a ("", "", name) row after a regime's rows would read as belonging to it.
    rows.sort(key=lambda row: row[0][0] != "")
    index = pd.MultiIndex.from_tuples([r[0] for r in rows], names=list(LEVELS))
    values = [_cell(v) for _, v in rows]
    if all(np.ndim(np.asarray(v)) == 0 for v in values):
        return pd.Series([float(np.asarray(v)) for v in values], index=index, dtype=float)
    cells = np.empty(len(values), dtype=object)
    cells[:] = values
    return pd.Series(cells, index=index, dtype=object)


def coerce_params(params):
    """`params_from_series(params)` for a Series; anything else is returned unchanged."""
    if isinstance(params, pd.Series):
        return params_from_series(params)
    return params


def _is_missing(level) -> bool:
    if level is None or (isinstance(level, str) and level == ""):
        return True
    return (
        isinstance(level, numbers.Real)
        and not isinstance(level, bool)
        and bool(np.isnan(float(level)))
    )


def _path(entry: tuple) -> tuple[str, ...]:
    """The keys into the nested dict for one index entry, e.g. `("working", "wage")`."""
    *outer, name = entry
    if _is_missing(name):
        raise InvalidParamsError(
            f"params_from_series: the index entry {entry!r} has no parameter name (the last level)."
        )
    regime = outer[0] if outer else ""
    function = outer[1] if len(outer) > 1 else ""
    if _is_missing(regime) and not _is_missing(function):
        raise InvalidParamsError(
            f"params_from_series: the index entry {entry!r} names function {function!r} but "
            "no regime; function-level parameters need (regime, function, name)."
        )
    path = tuple(str(level) for level in (regime, function) if not _is_missing(level))
    return (*path, str(name))


def _value(path: tuple[str, ...], value):
    where = "params" + "".join(f"[{key!r}]" for key in path)
    if isinstance(value, Mapping | str) or value is None:
        raise InvalidParamsError(
            f"params_from_series: {where} must be a number or an array of numbers, got "
            f"{value!r:.80}."
        )
    array = np.asarray(value)
    if array.dtype.kind not in "biufc":
        raise InvalidParamsError(
            f"params_from_series: {where} must be a number or an array of numbers, got "
            f"{value!r:.80}."
        )
    if array.ndim == 0:
        return array.item()  # a Python number: no float64 leaks into a float32 model
    return array


def _insert(params: dict, path: tuple[str, ...], value) -> None:
    where = "params" + "".join(f"[{key!r}]" for key in path)
    node = params
    for depth, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            clash = "params" + "".join(f"[{k!r}]" for k in path[: depth + 1])
            raise InvalidParamsError(
                f"params_from_series: {clash} is both a parameter and a level above {where}."
            )
        node = child
    if path[-1] in node:
        raise InvalidParamsError(
            f"params_from_series: {where} appears more than once in the index."
            if not isinstance(node[path[-1]], dict)
            else f"params_from_series: {where} is both a parameter and a level above others."
        )
    node[path[-1]] = value


def _cell(value):
    if isinstance(value, numbers.Number):
        return value
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array


def tables_from_series(tree, axes: Mapping[str, tuple | None], root: str = "params"):
    """`tree` (nested dicts like `params`) with every labelled Series leaf replaced by the
    array that user functions index by period and code (`series_table`)."""
    if isinstance(tree, pd.Series):
        return series_table(tree, axes, root)
    if not isinstance(tree, Mapping):
        return tree
    return {key: tables_from_series(value, axes, f"{root}[{key!r}]") for key, value in tree.items()}


def series_table(series: pd.Series, axes: Mapping[str, tuple | None], where: str) -> np.ndarray:
    """The array of a parameter given as a Series indexed by age and/or categories.

    Each index level is named `"age"`, `"period"` or like a discrete state or action of
    the model, and becomes one axis of the array, in the order of the levels: position
    `t` along an `age` or `period` axis is period `t`, position `k` along a category axis
    is the category coded `k`. So `survival.loc[(age, "high", "good")]` is what a function
    reads as `survival[period, education, health]`. Every combination must appear
    exactly once; nothing is filled in, dropped or reordered silently.

    Args:
        series: the labelled parameter.
        axes: the labels of each level name the model knows, in code order (ages for
            `"age"`; None for a name whose labels differ between regimes).
        where: where the parameter sits (`params['alive']['wage']`), for messages.
    """
    names = list(series.index.names)
    level_labels: list[tuple] = []
    for name in names:
        if name not in axes:
            known = ", ".join(repr(n) for n in axes)
            raise InvalidParamsError(
                f"{where}: a Series parameter is indexed by level {name!r}; name each index "
                f"level after what it labels: {known} (for a plain array, pass a numpy array)."
            )
        if axes[name] is None:
            raise InvalidParamsError(
                f"{where}: the Series' index level {name!r} is a variable with different "
                "categories in different regimes; pass the parameter as an array of codes."
            )
        level_labels.append(axes[name])  # type: ignore[arg-type]  # not None: checked
    if len(set(names)) != len(names):
        raise InvalidParamsError(f"{where}: the Series' index repeats a level: {names}.")
    positions = []
    for depth, (name, labels) in enumerate(zip(names, level_labels, strict=True)):
        code_of = {label: code for code, label in enumerate(labels)}
        values = series.index.get_level_values(depth)
        keys = [_label_key(value, name) for value in values]
        unknown = sorted(
            {v for v, k in zip(values, keys, strict=True) if k not in code_of}, key=str
        )
        if unknown:
            raise InvalidParamsError(
                f"{where}: the Series' level {name!r} has entries {unknown[:5]} that are not "
                f"{'ages' if name == 'age' else 'labels'} of the model ({_short(labels)})."
            )
        positions.append(np.array([code_of[k] for k in keys], dtype=np.intp))
    shape = tuple(len(labels) for labels in level_labels)
    flat = np.ravel_multi_index(tuple(positions), shape) if names else np.zeros(0, np.intp)
    counts = np.bincount(flat, minlength=int(np.prod(shape)))
    if np.any(counts > 1):
        raise InvalidParamsError(
            f"{where}: the Series' index has entries that appear more than once "
            f"(e.g. {series.index[series.index.duplicated()][0]!r})."
        )
    if np.any(counts == 0):
        missing = np.unravel_index(int(np.argmin(counts)), shape)
        example = tuple(labels[k] for labels, k in zip(level_labels, missing, strict=True))
        raise InvalidParamsError(
            f"{where}: the Series lacks {int(np.sum(counts == 0))} of the "
            f"{int(np.prod(shape))} combinations of its levels {names} (e.g. {example!r}); "
            "give every one, nothing is filled in."
        )
    values = np.asarray(series.to_numpy())
    if values.dtype.kind not in "biuf":
        raise InvalidParamsError(
            f"{where}: a Series parameter must hold numbers, got {values.dtype}."
        )
    table = np.empty(shape, dtype=values.dtype)
    table.reshape(-1)[flat] = values
    return table


def _label_key(value, level: str):
    """An index entry as the key of its level's labels: a float age or period number, a
    category's label (an enum member by its name)."""
    if level in ("age", "period"):
        try:
            return float(value)
        except (TypeError, ValueError):
            return value
    return value.name if isinstance(value, enum.Enum) else str(value)


def _short(labels) -> str:
    shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in labels]
    return ", ".join(shown) if len(shown) <= 8 else f"{', '.join(shown[:4])}, ..., {shown[-1]}"
