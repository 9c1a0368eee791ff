"""Resolving user functions by argument name into a DAG, and evaluating it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ModelInitializationError

SPECIAL_ARGUMENTS = ("period", "age")


@dataclasses.dataclass(frozen=True)
class ResolvedFunction:
    """A user function with each argument classified by where its value comes from.

    `key` is the name under which its parameters are looked up (`utility`, a constraint
    name, `next_<state>`, `next_regime` or a helper's name).
    """

    key: str
    fn: Callable
    inputs: tuple[str, ...]  # states, actions, `period` or `age`
    helpers: tuple[str, ...]  # outputs of other entries of `functions`
    params: tuple[str, ...]
    arguments: tuple[str, ...]  # all arguments, in signature order


def argument_names(fn: Callable, *, regime: str, key: str) -> tuple[str, ...]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as error:
        raise ModelInitializationError(
            f"Regime {regime!r}: cannot read the signature of function {key!r}."
        ) from error
    names = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ModelInitializationError(
                f"Regime {regime!r}: function {key!r} takes *{parameter.name}; arguments are "
                "resolved by name, so list each one explicitly."
            )
        if parameter.kind == parameter.POSITIONAL_ONLY:
            raise ModelInitializationError(
                f"Regime {regime!r}: function {key!r} takes {parameter.name!r} positionally "
                "only; arguments are passed by name, so wrap it, e.g. "
                f"`lambda consumption: fn(consumption)`."
            )
        names.append(parameter.name)
    return tuple(names)


def resolve(
    fn: Callable,
    *,
    key: str,
    regime: str,
    inputs: frozenset[str],
    helpers: frozenset[str],
) -> ResolvedFunction:
    arguments = argument_names(fn, regime=regime, key=key)
    return ResolvedFunction(
        key=key,
        fn=fn,
        inputs=tuple(a for a in arguments if a in inputs),
        helpers=tuple(a for a in arguments if a in helpers and a not in inputs),
        params=tuple(a for a in arguments if a not in inputs and a not in helpers),
        arguments=arguments,
    )


def check_acyclic(helpers: Mapping[str, ResolvedFunction], *, regime: str) -> None:
    """Raise if the helper functions depend on each other in a cycle."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(repr(n) for n in (*path[path.index(name) :], name))
            raise ModelInitializationError(
                f"Regime {regime!r}: the functions form a cycle: {cycle} (each uses the "
                "next one's output); the functions must form a DAG."
            )
        state[name] = 1
        for dependency in helpers[name].helpers:
            visit(dependency, (*path, name))
        state[name] = 2

    for name in helpers:
        visit(name, ())


def transitive_inputs(
    function: ResolvedFunction, helpers: Mapping[str, ResolvedFunction]
) -> frozenset[str]:
    """States, actions and special arguments a function depends on, through helpers."""
    seen = set(function.inputs)
    for name in function.helpers:
        seen |= transitive_inputs(helpers[name], helpers)
    return frozenset(seen)


def transitive_helpers(
    function: ResolvedFunction, helpers: Mapping[str, ResolvedFunction]
) -> frozenset[str]:
    seen = set(function.helpers)
    for name in function.helpers:
        seen |= transitive_helpers(helpers[name], helpers)
    return frozenset(seen)


class Evaluator:
    """Evaluates resolved functions at one point, computing each helper at most once."""

    def __init__(
        self,
        helpers: Mapping[str, ResolvedFunction],
        inputs: Mapping[str, Any],
        params: Mapping[str, Mapping[str, Any]],
    ):
        self._helpers = helpers
        self._inputs = inputs
        self._params = params
        self._cache: dict[str, Any] = {}

    def helper(self, name: str):
        if name not in self._cache:
            self._cache[name] = self(self._helpers[name])
        return self._cache[name]

    def __call__(self, function: ResolvedFunction):
        kwargs = {}
        function_params = self._params.get(function.key, {})
        for name in function.arguments:
            if name in self._inputs and name in function.inputs:
                kwargs[name] = self._inputs[name]
            elif name in function.helpers:
                kwargs[name] = self.helper(name)
            else:
                kwargs[name] = function_params[name]
        return function.fn(**kwargs)
