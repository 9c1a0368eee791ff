"""Resolving user functions by argument name into a DAG, and evaluating it."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from .._errors import ModelInitializationError
from .._numerics import exact_contractions
from ._constants import host_arrays

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
    # Parameters with a default value, `(name, default)`: optional in `params`.
    defaults: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False)
    regime: str = dataclasses.field(default="", compare=False)  # for messages


def argument_names(fn: Callable, *, regime: str, key: str) -> tuple[str, ...]:
    """The arguments the function is called with, by name, in signature order.

    Keywords bound with `functools.partial` are not arguments: the partial supplies them.
    """
    return tuple(argument_defaults(fn, regime=regime, key=key))


def argument_defaults(fn: Callable, *, regime: str, key: str) -> dict[str, Any]:
    """`{argument: default}` for the arguments of `argument_names` (`inspect.Parameter.empty`
    where there is none)."""
    bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as error:
        raise ModelInitializationError(
            f"Regime {regime!r}: cannot read the signature of function {key!r}."
        ) from error
    names = {}
    for parameter in signature.parameters.values():
        if parameter.name in bound:
            continue
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
        names[parameter.name] = parameter.default
    return names


def resolve(
    fn: Callable,
    *,
    key: str,
    regime: str,
    inputs: frozenset[str],
    helpers: frozenset[str],
) -> ResolvedFunction:
    defaults = argument_defaults(fn, regime=regime, key=key)
    arguments = tuple(defaults)
    params = tuple(a for a in arguments if a not in inputs and a not in helpers)
    return ResolvedFunction(
        key=key,
        fn=fn,
        inputs=tuple(a for a in arguments if a in inputs),
        helpers=tuple(a for a in arguments if a in helpers and a not in inputs),
        params=params,
        arguments=arguments,
        defaults=tuple(
            (a, defaults[a]) for a in params if defaults[a] is not inspect.Parameter.empty
        ),
        regime=regime,
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
    """Evaluates resolved functions at one point, computing each helper at most once.

    A parameter missing from `params` is left to the function's default value (the
    parameter checks have made sure it has one). With `check_indices`, each function
    that has an array-valued parameter runs under `checkify`'s index checks, and
    `index_errors[key]` says whether it indexed any array out of bounds at this point.
    """

    def __init__(
        self,
        helpers: Mapping[str, ResolvedFunction],
        inputs: Mapping[str, Any],
        params: Mapping[str, Mapping[str, Any]],
        *,
        check_indices: bool = False,
    ):
        self._helpers = helpers
        self._inputs = inputs
        self._params = params
        self._check_indices = check_indices
        self._cache: dict[str, Any] = {}
        self.index_errors: dict[str, Any] = {}

    def with_inputs(self, extra: Mapping[str, Any]) -> Evaluator:
        """An evaluator at the same point with more inputs (the next values of drawn
        states, `next_<state>`), starting from the helpers computed so far (no helper
        reads those inputs). Its index errors are its own: the caller merges them."""
        child = Evaluator(
            self._helpers,
            {**self._inputs, **extra},
            self._params,
            check_indices=self._check_indices,
        )
        child._cache = dict(self._cache)
        return child

    def record_index_error(self, key: str, failed) -> None:
        """Merge an index error found by another evaluator (see `with_inputs`)."""
        previous = self.index_errors.get(key)
        self.index_errors[key] = failed if previous is None else previous | failed

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
            elif name in function_params:
                kwargs[name] = function_params[name]
        try:
            # A contraction in the user's function (a `jnp.dot`) computes alike on every
            # device (`exact_contractions`).
            with exact_contractions():
                if self._check_indices and has_array_parameter(function, function_params):
                    checked = checkify.checkify(function.fn, errors=checkify.index_checks)
                    error, out = checked(**kwargs)
                    # Several functions may share a key (a per-target law of motion).
                    self.record_index_error(function.key, index_failed(error))
                    return out
                return function.fn(**kwargs)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError) as error:
            raise ModelInitializationError(_host_conversion_message(function, error)) from error


def _host_conversion_message(function: ResolvedFunction, error: Exception) -> str:
    """Why a user function failed on a traced value that NumPy (or Python) cannot take,
    naming the NumPy arrays it reads from outside its arguments."""
    where = f"Regime {function.regime!r}: function {function.key!r}"
    tables = host_arrays(function.fn)
    if not tables:
        return (
            f"{where} converts a traced value (a state, action, period or parameter) to "
            "NumPy or a Python number; inside user functions use jax.numpy, not numpy, "
            "and no int()/float()/bool() or Python `if` on an argument (JAX: "
            f"{str(error).splitlines()[0]})"
        )
    described = "; ".join(
        f"{description} (a NumPy array of shape {array.shape})" for description, array in tables
    )
    return (
        f"{where} indexes or computes with a NumPy array and a traced value (e.g. "
        f"`table[health]` with a state's code): it reads {described}. NumPy cannot take a "
        "JAX tracer: pass the table as a parameter (in params, or Model(fixed_params=...)) "
        "and index that, or write jnp.asarray(table)[code] inside the function."
    )


def has_array_parameter(function: ResolvedFunction, values: Mapping[str, Any]) -> bool:
    return any(jnp.ndim(values[p]) > 0 for p in function.params if p in values)


def index_failed(error: checkify.Error):
    """Whether a `checkify` error of index checks has fired (a traced bool)."""
    # checkify keeps one flag per kind of error; with `index_checks` every kind is an
    # out-of-bounds index.
    flags = [jnp.any(flag) for flag in error._pred.values()]
    return jnp.any(jnp.stack(flags)) if flags else jnp.asarray(False)
