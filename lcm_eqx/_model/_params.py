"""Parameters: the template, and the "exactly one level" lookup."""

from __future__ import annotations

import difflib
import weakref
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InvalidParamsError
from ._plan import ModelPlan, RegimePlan

_MISSING = object()


def params_template(plan: ModelPlan) -> dict[str, dict]:
    """Every parameter, nested as `{regime: {function: {name: nan}}}`.

    Regime-level parameters (`discount_factor`, `taste_shock_scale`) sit at
    `{regime: {name: nan}}`. Any parameter may instead be given one level up (at
    `params[regime]` or `params`), as long as it is found at exactly one level. A
    parameter with a default value in its function's signature holds that default
    (it is optional; a non-numeric default, which `params` could not hold, is left out).
    """
    template: dict[str, dict] = {}
    for name, regime in plan.regimes.items():
        entry: dict[str, Any] = {p: float("nan") for p in regime.regime_parameters}
        for key, names in regime.parameters.items():
            defaults = function_defaults(regime, key)
            values = {p: defaults.get(p, float("nan")) for p in names}
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
        key = (
            tree,
            tuple((type(leaf), np.shape(leaf), str(getattr(leaf, "dtype", ""))) for leaf in leaves),
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
    resolved: dict[str, dict[str, dict[str, Any]]] = {}
    for name, regime in plan.regimes.items():
        kinds = {
            **{h: "function" for h in regime.helpers},
            **{a: "action" for a in regime.actions},
            **{s: "state" for s in regime.states},
        }
        per_function: dict[str, dict[str, Any]] = {}
        per_function[""] = {
            p: _lookup(params, name, None, p, convert) for p in regime.regime_parameters
        }
        for key, names in regime.parameters.items():
            defaults = function_defaults(regime, key)
            values = {
                p: _lookup(params, name, key, p, convert, kinds, defaults.get(p, _MISSING))
                for p in names
            }
            # A parameter left out falls back to its function's default value.
            per_function[key] = {p: v for p, v in values.items() if v is not _MISSING}
        resolved[name] = per_function
    return resolved


def function_defaults(regime: RegimePlan, key: str) -> dict[str, Any]:
    """`{parameter: default value}` of the function whose parameters are looked up at `key`."""
    transition = regime.state_transitions.get(key[5:]) if key.startswith("next_") else None
    if transition is not None and transition.function is None:  # a process state
        return {}
    return dict(regime.function(key).defaults)


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


def _lookup(
    params: Mapping,
    regime: str,
    key: str | None,
    name: str,
    convert: bool = True,
    kinds: Mapping[str, str] | None = None,
    default: Any = _MISSING,
):
    regime_params = params.get(regime, _MISSING)
    if not isinstance(regime_params, Mapping):
        regime_params = {}
    candidates = []
    if key is not None:
        function_params = regime_params.get(key, _MISSING)
        if isinstance(function_params, Mapping) and name in function_params:
            candidates.append((f"params[{regime!r}][{key!r}][{name!r}]", function_params[name]))
    if name in regime_params and not isinstance(regime_params[name], Mapping):
        candidates.append((f"params[{regime!r}][{name!r}]", regime_params[name]))
    if name in params and not isinstance(params[name], Mapping):
        candidates.append((f"params[{name!r}]", params[name]))
    where = f"function {key!r}" if key else "the regime"
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
    if not _is_numeric(value):
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} at {location} must be a number or "
            f"an array of numbers, got {value!r:.80}."
        )
    if key is None and np.shape(value) != ():
        raise InvalidParamsError(
            f"Regime {regime!r}: parameter {name!r} at {location} must be a scalar, got shape "
            f"{np.shape(value)}."
        )
    if not convert:
        return value
    try:
        return jnp.asarray(value)
    except TypeError as error:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} at {location} must be a number or "
            f"an array of numbers, got {_describe(value)}."
        ) from error


def _check_unknown(plan: ModelPlan, params: Mapping) -> None:
    used_anywhere = set()
    for regime in plan.regimes.values():
        used_anywhere |= _used_in(regime)
    for key, value in params.items():
        if key in plan.regimes and isinstance(value, Mapping):
            _check_regime_level(plan.regimes[key], value)
        elif key in plan.regimes:
            raise InvalidParamsError(
                f"params[{key!r}] must be a dict of regime {key!r}'s parameters, got "
                f"{_describe(value)}."
            )
        elif isinstance(value, Mapping):
            owners = [r.name for r in plan.regimes.values() if key in r.parameters]
            if owners:
                raise InvalidParamsError(
                    f"params[{key!r}] is a dict, but {key!r} is not a regime: the parameters "
                    f"of function {key!r} go at params[regime][{key!r}] (regime: "
                    f"{' or '.join(repr(o) for o in owners)}) or at params[regime] or params."
                )
            raise InvalidParamsError(
                f"params[{key!r}] is a dict, but {key!r} is not a regime (regimes: "
                f"{list(plan.regimes)}); a parameter is a number or an array."
            )
        elif key not in used_anywhere:
            raise InvalidParamsError(
                f"Unknown parameter params[{key!r}]: no function of any regime uses it "
                f"(known: {sorted(used_anywhere)})."
            )


def _used_in(regime: RegimePlan) -> set[str]:
    used = set(regime.regime_parameters)
    for names in regime.parameters.values():
        used |= set(names)
    return used


def _check_regime_level(regime: RegimePlan, values: Mapping) -> None:
    used = _used_in(regime)
    for key, value in values.items():
        if key in regime.parameters and isinstance(value, Mapping):
            for name in value:
                if name not in regime.parameters[key]:
                    raise InvalidParamsError(
                        f"Regime {regime.name!r}, function {key!r}: unknown parameter "
                        f"{name!r} (it takes {list(regime.parameters[key])})."
                    )
        elif isinstance(value, Mapping):
            raise InvalidParamsError(
                f"Regime {regime.name!r}: params[{regime.name!r}][{key!r}] is a dict, but "
                f"{key!r} is not a function with parameters (those are "
                f"{sorted(regime.parameters)})."
            )
        elif key not in used:
            raise InvalidParamsError(
                f"Regime {regime.name!r}: unknown parameter {key!r} (no function of this regime "
                f"uses it; known: {sorted(used)})."
            )
