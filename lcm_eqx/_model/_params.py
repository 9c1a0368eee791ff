"""Parameters: the template, and the "exactly one level" lookup."""

from __future__ import annotations

import difflib
import weakref
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InvalidParamsError, ModelInitializationError
from .._grids import AbstractProcessGrid, DiscreteGrid
from .._pandas import tables_from_series
from ._plan import FixedParams, ModelPlan, RegimePlan

_MISSING = object()


def params_template(plan: ModelPlan) -> dict[str, dict]:
    """Every parameter, nested as `{regime: {function: {name: nan}}}`.

    Regime-level parameters (`discount_factor`, `taste_shock_scale`) sit at
    `{regime: {name: nan}}`. Any parameter may instead be given one level up (at
    `params[regime]` or `params`), as long as it is found at exactly one level.
    Parameters bound with `Model(fixed_params=...)` are left out. A parameter with a
    default value in its function's signature holds that default
    (it is optional; a non-numeric default, which `params` could not hold, is left out).
    """
    template: dict[str, dict] = {}
    fixed = plan.fixed.values

    def free(name: str, key: str | None, p: str) -> bool:
        return not _candidates(fixed, name, key, p, "fixed_params")

    for name, regime in plan.regimes.items():
        entry: dict[str, Any] = {
            p: float("nan") for p in regime.regime_parameters if free(name, None, p)
        }
        for key, names in regime.parameters.items():
            defaults = function_defaults(regime, key)
            values = {p: defaults.get(p, float("nan")) for p in names if free(name, key, p)}
            values = {p: v for p, v in values.items() if _is_numeric(v)}
            if values:
                entry[key] = values
        if entry:
            template[name] = entry
    return template


def resolve_params(plan: ModelPlan, params: Mapping) -> dict[str, dict[str, dict[str, Any]]]:
    """Look up every parameter: `{regime: {function key: {name: value}}}`.

    Regime-level parameters are returned under the key `""`. Runs at trace time: all
    errors are about the structure of `params`, never about values.
    """
    return _resolve(plan, params, convert=True)


def check_params(plan: ModelPlan, params) -> None:
    """Raise `InvalidParamsError` for any structural problem of `params`, without tracing.

    The same checks as `resolve_params`, plus that every value used is a number or an
    array (a string or `None` would otherwise fail inside `jax.jit` with a JAX error).
    Works on concrete and traced values alike, so it can run before the jitted solve.
    The checks depend only on the structure of `params` (keys, and each value's type,
    shape and dtype), so a structure that passed once is not checked again.
    """
    key = _structure_key(params)
    passed = _PASSED.get(id(plan))
    if key is not None and passed is not None and key in passed:
        return
    _resolve(plan, params, convert=False)
    if key is None:
        return
    if passed is None:
        passed = _PASSED[id(plan)] = set()
        weakref.finalize(plan, _PASSED.pop, id(plan), None)
    passed.add(key)


# Structures of params that passed `check_params`, per plan (dropped with the plan).
_PASSED: dict[int, set] = {}


def _structure_key(params) -> tuple | None:
    """What `check_params` depends on: the tree and each leaf's type, shape and dtype
    (None when that cannot be hashed, so the params are checked every time)."""
    try:
        leaves, tree = jax.tree.flatten(params)
        # `getattr` rather than `np.shape`, which makes an array of a Python number (a
        # third of a steady call's check).
        key = (
            tree,
            tuple(
                (type(leaf), getattr(leaf, "shape", ()), str(getattr(leaf, "dtype", "")))
                for leaf in leaves
            ),
        )
        hash(key)
    except Exception:  # anything unusual is simply checked every time
        return None
    return key


def _resolve(plan: ModelPlan, params, *, convert: bool) -> dict[str, dict[str, dict[str, Any]]]:
    if not isinstance(params, Mapping):
        raise InvalidParamsError(
            f"params must be a dict (see model.params_template()), got {_describe(params)}."
        )
    _check_unknown(plan, params)
    fixed = plan.fixed.values
    resolved: dict[str, dict[str, dict[str, Any]]] = {}
    for name, regime in plan.regimes.items():
        kinds = {
            **{h: "function" for h in regime.helpers},
            **{a: "action" for a in regime.actions},
            **{s: "state" for s in regime.states},
        }
        per_function: dict[str, dict[str, Any]] = {}
        per_function[""] = {
            p: _lookup(params, name, None, p, convert, fixed=fixed)
            for p in regime.regime_parameters
        }
        for key, names in regime.parameters.items():
            defaults = function_defaults(regime, key)
            values = {
                p: _lookup(params, name, key, p, convert, kinds, defaults.get(p, _MISSING), fixed)
                for p in names
            }
            # A parameter left out falls back to its function's default value.
            per_function[key] = {p: v for p, v in values.items() if v is not _MISSING}
            _check_process_shapes(regime, key, per_function[key])
        resolved[name] = per_function
    return resolved


def _check_process_shapes(regime: RegimePlan, key: str, values: Mapping[str, Any]) -> None:
    """The parameters of a process or i.i.d. state's chain (at `next_<state>`) have the
    shapes its grid needs (e.g. an `IIDGrid`'s nodes: one value per node)."""
    grid = regime.grids.get(key[5:]) if key.startswith("next_") else None
    if not isinstance(grid, AbstractProcessGrid):
        return
    for name in grid.free_parameters():
        expected = grid.parameter_shape(name)
        if name in values and tuple(np.shape(values[name])) != expected:
            raise InvalidParamsError(
                f"Regime {regime.name!r}, function {key!r}: parameter {name!r} of the "
                f"{type(grid).__name__} of state {key[5:]!r} must have shape {expected}, got "
                f"{tuple(np.shape(values[name]))}."
            )


def function_defaults(regime: RegimePlan, key: str) -> dict[str, Any]:
    """`{parameter: default value}` of the function whose parameters are looked up at `key`.

    For a per-target law of motion (several functions at `next_<state>`), a parameter is
    optional only if every one of them that takes it has a default (the first applies).
    """
    transition = regime.state_transitions.get(key[5:]) if key.startswith("next_") else None
    if transition is None:
        return dict(regime.function(key).defaults)
    functions = transition.functions
    defaults: dict[str, Any] = {}
    for function in functions:
        for name, value in function.defaults:
            defaults.setdefault(name, value)
    return {
        name: value
        for name, value in defaults.items()
        if all(name in dict(f.defaults) for f in functions if name in f.params)
    }


def _describe(value) -> str:
    """A short description of a value for messages (traced values have no useful type)."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"an array of shape {tuple(shape)}" if tuple(shape) else "a number"
    return type(value).__name__


def _is_numeric(value) -> bool:
    leaves = jax.tree.leaves(value)
    if not leaves:
        return False
    for leaf in leaves:
        if isinstance(leaf, jax.Array):  # concrete or traced
            if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                return False
            kind = np.dtype(leaf.dtype).kind
        else:
            try:
                kind = np.asarray(leaf).dtype.kind
            except Exception:  # anything numpy cannot read is not numeric
                return False
        if kind not in "biuf":  # complex values are not supported
            return False
    return True


def _candidates(tree: Mapping, regime: str, key: str | None, name: str, root: str):
    """Where `tree` (nested like `params`, named `root` in messages) holds parameter `name`
    of function `key` in `regime`: `[(location, value)]` over the three levels."""
    regime_params = tree.get(regime, _MISSING)
    if not isinstance(regime_params, Mapping):
        regime_params = {}
    found = []
    if key is not None:
        function_params = regime_params.get(key, _MISSING)
        if isinstance(function_params, Mapping) and name in function_params:
            found.append((f"{root}[{regime!r}][{key!r}][{name!r}]", function_params[name]))
    if name in regime_params and not isinstance(regime_params[name], Mapping):
        found.append((f"{root}[{regime!r}][{name!r}]", regime_params[name]))
    if name in tree and not isinstance(tree[name], Mapping):
        found.append((f"{root}[{name!r}]", tree[name]))
    return found


def _lookup(
    params: Mapping,
    regime: str,
    key: str | None,
    name: str,
    convert: bool = True,
    kinds: Mapping[str, str] | None = None,
    default: Any = _MISSING,
    fixed: Mapping | None = None,
):
    candidates = _candidates(params, regime, key, name, "params")
    where = f"function {key!r}" if key else "the regime"
    bound = _candidates(fixed, regime, key, name, "fixed_params") if fixed else []
    if bound and candidates:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} is fixed at construction "
            f"({bound[0][0]} of Model) and given again at "
            f"{' and '.join(c for c, _ in candidates)}; remove it from params."
        )
    if bound:
        value = bound[0][1]  # checked once at construction
        return jnp.asarray(value) if convert else value
    if not candidates and default is not _MISSING:
        return _MISSING  # the function's default applies
    if not candidates:
        levels = (
            f"params[{regime!r}][{key!r}][{name!r}], params[{regime!r}][{name!r}] or "
            f"params[{name!r}]"
            if key
            else f"params[{regime!r}][{name!r}] or params[{name!r}]"
        )
        close = difflib.get_close_matches(name, list(kinds or {}), n=1)
        hint = (
            f" Or did you mean the {kinds[close[0]]} {close[0]!r}? An argument that names no "
            "state, action or function of the regime is a parameter."
            if close and kinds
            else ""
        )
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: missing parameter {name!r}; give it at {levels}.{hint}"
        )
    if len(candidates) > 1:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} is ambiguous, found at "
            f"{' and '.join(c for c, _ in candidates)}; keep exactly one."
        )
    location, value = candidates[0]
    _check_value(regime, where, name, location, value, scalar=key is None)
    if not convert:
        return value
    try:
        return jnp.asarray(value)
    except TypeError as error:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} at {location} must be a number or "
            f"an array of numbers, got {_describe(value)}."
        ) from error


def _check_value(regime: str, where: str, name: str, location: str, value, *, scalar: bool):
    if not _is_numeric(value):
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} at {location} must be a number or "
            f"an array of numbers, got {value!r:.80}."
        )
    if scalar and np.shape(value) != ():
        raise InvalidParamsError(
            f"Regime {regime!r}: parameter {name!r} at {location} must be a scalar, got shape "
            f"{np.shape(value)}."
        )


def _check_unknown(plan: ModelPlan, params: Mapping, root: str = "params") -> None:
    used_anywhere = set()
    for regime in plan.regimes.values():
        used_anywhere |= _used_in(regime)
    for key, value in params.items():
        if key in plan.regimes and isinstance(value, Mapping):
            _check_regime_level(plan.regimes[key], value, root)
        elif key in plan.regimes:
            raise InvalidParamsError(
                f"{root}[{key!r}] must be a dict of regime {key!r}'s parameters, got "
                f"{_describe(value)}."
            )
        elif isinstance(value, Mapping):
            owners = [r.name for r in plan.regimes.values() if key in r.parameters]
            if owners:
                raise InvalidParamsError(
                    f"{root}[{key!r}] is a dict, but {key!r} is not a regime: the parameters "
                    f"of function {key!r} go at params[regime][{key!r}] (regime: "
                    f"{' or '.join(repr(o) for o in owners)}) or at params[regime] or params."
                )
            raise InvalidParamsError(
                f"{root}[{key!r}] is a dict, but {key!r} is not a regime (regimes: "
                f"{list(plan.regimes)}); a parameter is a number or an array."
            )
        elif key not in used_anywhere:
            raise InvalidParamsError(
                f"Unknown parameter {root}[{key!r}]: no function of any regime uses it"
                f"{_did_you_mean(key, used_anywhere)} (known: {sorted(used_anywhere)})."
            )


def _did_you_mean(name: str, known) -> str:
    """`"; did you mean 'x'?"` for the closest of `known` to a misspelt `name`, or ""."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _used_in(regime: RegimePlan) -> set[str]:
    used = set(regime.regime_parameters)
    for names in regime.parameters.values():
        used |= set(names)
    return used


def _check_regime_level(regime: RegimePlan, values: Mapping, root: str = "params") -> None:
    used = _used_in(regime)
    for key, value in values.items():
        if key in regime.parameters and isinstance(value, Mapping):
            for name in value:
                if name not in regime.parameters[key]:
                    raise InvalidParamsError(
                        f"Regime {regime.name!r}, function {key!r}: unknown parameter "
                        f"{name!r}{_did_you_mean(name, regime.parameters[key])} (it takes "
                        f"{list(regime.parameters[key])})."
                    )
        elif isinstance(value, Mapping):
            raise InvalidParamsError(
                f"Regime {regime.name!r}: {root}[{regime.name!r}][{key!r}] is a dict, but "
                f"{key!r} is not a function with parameters (those are "
                f"{sorted(regime.parameters)})."
            )
        elif key not in used:
            raise InvalidParamsError(
                f"Regime {regime.name!r}: unknown parameter {key!r} (no function of this regime "
                f"uses it{_did_you_mean(key, used)}; known: {sorted(used)})."
            )


def bind_fixed(plan: ModelPlan, fixed_params: Mapping | None) -> FixedParams:
    """Check `Model(fixed_params=...)` against the plan and freeze it (NumPy values).

    Every entry must be a parameter of some function, found at one level only for each
    regime and function that uses it, and a number or an array of numbers. Raises
    `ModelInitializationError` at construction otherwise.
    """
    if fixed_params is None:
        return FixedParams()
    if not isinstance(fixed_params, Mapping):
        raise ModelInitializationError(
            f"Model: fixed_params must be a dict nested like params, got "
            f"{type(fixed_params).__name__}."
        )
    try:
        _check_unknown(plan, fixed_params, root="fixed_params")
        for name, regime in plan.regimes.items():
            keyed: list[tuple[str | None, str]] = [(None, p) for p in regime.regime_parameters]
            keyed += [(key, p) for key, names in regime.parameters.items() for p in names]
            for key, p in keyed:
                found = _candidates(fixed_params, name, key, p, "fixed_params")
                where = f"function {key!r}" if key else "the regime"
                if len(found) > 1:
                    raise InvalidParamsError(
                        f"Regime {name!r}, {where}: parameter {p!r} is fixed at two levels, "
                        f"{' and '.join(c for c, _ in found)}; keep exactly one."
                    )
                for location, value in found:
                    _check_value(name, where, p, location, value, scalar=key is None)
    except InvalidParamsError as error:
        raise ModelInitializationError(f"Model: fixed_params: {error}") from error
    return FixedParams(_as_numpy(fixed_params, "fixed_params"))


def _as_numpy(tree: Mapping, root: str) -> dict:
    """The nested dict with NumPy leaves: constants of the compiled programs."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        location = f"{root}[{key!r}]"
        if isinstance(value, Mapping):
            out[key] = _as_numpy(value, location)
            continue
        try:
            out[key] = np.asarray(value)
        except jax.errors.TracerArrayConversionError as error:
            raise ModelInitializationError(
                f"Model: {location} is traced (the Model is built inside jax.jit, vmap or "
                "grad); fixed parameters are constants of the compiled program, so pass a "
                "traced value in params instead."
            ) from error
    return out


def arrays_from_series(plan: ModelPlan, params, root: str = "params") -> Any:
    """`params` with each parameter given as a labelled pandas Series (indexed by
    `age`, `period` and/or discrete states and actions by their labels) turned into the
    array that user functions index by period and code (see `series_table`)."""
    return tables_from_series(params, label_axes(plan), root)


def label_axes(plan: ModelPlan) -> dict[str, tuple | None]:
    """The labels of each index level a Series parameter may have, in code order:
    `period`, `age` (with ages) and every discrete state and action (None where regimes
    give one name different categories)."""
    axes: dict[str, tuple | None] = {"period": tuple(float(t) for t in range(plan.n_periods))}
    if plan.ages is not None:
        axes["age"] = plan.ages
    for regime in plan.regimes.values():
        for name, grid in regime.grids.items():
            if isinstance(grid, DiscreteGrid):
                known = axes.setdefault(name, grid.labels)
                if known != grid.labels:
                    axes[name] = None
    return axes
