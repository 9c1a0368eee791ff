"""Parameters: the template, and the "exactly one level" lookup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from .._errors import InvalidParamsError
from ._plan import ModelPlan, RegimePlan

_MISSING = object()


def params_template(plan: ModelPlan) -> dict[str, dict]:
    """Every parameter, nested as `{regime: {function: {name: nan}}}`.

    Regime-level parameters (`discount_factor`, `taste_shock_scale`) sit at
    `{regime: {name: nan}}`. Any parameter may instead be given one level up (at
    `params[regime]` or `params`), as long as it is found at exactly one level.
    """
    template: dict[str, dict] = {}
    for name, regime in plan.regimes.items():
        entry: dict[str, Any] = {p: float("nan") for p in regime.regime_parameters}
        for key, names in regime.parameters.items():
            entry[key] = {p: float("nan") for p in names}
        if entry:
            template[name] = entry
    return template


def resolve_params(plan: ModelPlan, params: Mapping) -> dict[str, dict[str, dict[str, Any]]]:
    """Look up every parameter: `{regime: {function key: {name: value}}}`.

    Regime-level parameters are returned under the key `""`. Runs at trace time: all
    errors are about the structure of `params`, never about values.
    """
    if not isinstance(params, Mapping):
        raise InvalidParamsError(f"params must be a dict, got {type(params).__name__}.")
    _check_unknown(plan, params)
    resolved: dict[str, dict[str, dict[str, Any]]] = {}
    for name, regime in plan.regimes.items():
        per_function: dict[str, dict[str, Any]] = {}
        regime_level = {p: _lookup(params, name, None, p) for p in regime.regime_parameters}
        per_function[""] = regime_level
        for key, names in regime.parameters.items():
            per_function[key] = {p: _lookup(params, name, key, p) for p in names}
        resolved[name] = per_function
    return resolved


def _lookup(params: Mapping, regime: str, key: str | None, name: str):
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
    if not candidates:
        levels = (
            f"params[{regime!r}][{key!r}][{name!r}], params[{regime!r}][{name!r}] or "
            f"params[{name!r}]"
            if key
            else f"params[{regime!r}][{name!r}] or params[{name!r}]"
        )
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: missing parameter {name!r}; give it at {levels}."
        )
    if len(candidates) > 1:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} is ambiguous, found at "
            f"{' and '.join(c for c, _ in candidates)}; keep exactly one."
        )
    value = candidates[0][1]
    try:
        return jnp.asarray(value)
    except TypeError as error:
        raise InvalidParamsError(
            f"Regime {regime!r}, {where}: parameter {name!r} must be a number or an array, got "
            f"{type(value).__name__}."
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
                f"{type(value).__name__}."
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
