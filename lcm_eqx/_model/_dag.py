"""Resolving user functions by argument name into a DAG, and evaluating it."""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from .._errors import ModelInitializationError
from .._numerics import (
    exact_contractions,
    precise_transcendentals_needed,
    with_precise_transcendentals,
)
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


def check_string_comparisons(
    resolved: ResolvedFunction, labels: Mapping[str, tuple[str, ...] | None]
) -> None:
    """Raise if the function compares one of its inputs with a string literal.

    Inputs are numbers: a discrete variable is its grid code, `period` and `age` are
    numbers. Under `jax.jit`, `labor == "work"` compares a traced integer with a `str`,
    which JAX does not handle (`NotImplemented` both ways), so Python falls back to
    identity and the result is a plain `False`: the term silently drops out. Nothing at
    run time can tell that `False` from an intended one, so the check reads the
    function's bytecode at build: an input loaded next to a string constant and compared
    with `==` or `!=`, or tested for membership in a constant tuple holding a string
    (`labor in ("work", "part")`), in the function's code and the lambdas and
    comprehensions inside it. It sees what is written in the function itself, not a
    comparison made through an alias or inside another Python function it calls; user
    functions of the model (helpers, constraints, transitions) are each checked.

    `labels`: by input name, the labels of its `DiscreteGrid` (None for other inputs).
    """
    code = _code_of(resolved.fn)
    names = set(resolved.inputs) & set(labels)
    if code is None or not names:
        return
    for variable, text in _string_comparisons(code, names):
        where = f"Regime {resolved.regime!r}: function {resolved.key!r} compares {variable!r}"
        grid_labels = labels[variable]
        if grid_labels is None:
            raise ModelInitializationError(
                f"{where} with the string {text!r}; {variable!r} is a number, so the "
                "comparison is always False and silently drops what depends on it. Compare "
                "it with a number."
            )
        if text in grid_labels:
            instead = (
                f"{text!r} is code {grid_labels.index(text)} of its DiscreteGrid: write "
                f"`{variable} == {grid_labels.index(text)}`, or compare with the member "
                f"{text!r} of the IntEnum the grid was made from."
            )
        else:
            instead = (
                f"{text!r} is not even one of its labels {list(grid_labels)}; compare with "
                "a code (the integer, or a member of the IntEnum the grid was made from)."
            )
        raise ModelInitializationError(
            f"{where} with the string {text!r}, but functions see the code of a discrete "
            "variable (an integer), never its label: the comparison is always False and "
            f"silently drops what depends on it. {instead}"
        )


def _code_of(fn: Callable) -> types.CodeType | None:
    """The code object of a user function (through `functools.partial`, `__wrapped__`
    and bound methods), or None (a builtin, a ufunc, a callable object)."""
    for _ in range(100):  # a chain of wrappers; a cycle is not followed for ever
        wrapped = getattr(fn, "__wrapped__", None)
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif wrapped is not None:
            fn = wrapped
        else:
            break
    code = getattr(fn, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


# Instructions that push one local or closure variable, or two (Python 3.13+).
_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF", "LOAD_CLASSDEREF")
_DOUBLE_LOADS = ("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")


def _string_comparisons(code: types.CodeType, names: set[str]) -> list[tuple[str, str]]:
    """`(variable, string)` for each comparison of a variable of `names` with a string
    constant in `code` and the code objects nested in it.

    Reads the operands of each comparison as the two values pushed just before it: a
    variable and a constant, in either order (comparisons of computed values are not
    literal comparisons of an input, and are left alone).
    """
    found: list[tuple[str, str]] = []
    pushed: list[tuple[str, object]] = []  # the latest operands: ("name" | "const", value)
    for instruction in dis.get_instructions(code):
        op = instruction.opname
        if op in _LOADS:
            pushed.append(("name", instruction.argval))
        elif op in _DOUBLE_LOADS:
            pushed.extend(("name", n) for n in instruction.argval)
        elif op in ("LOAD_CONST", "LOAD_SMALL_INT"):
            pushed.append(("const", instruction.argval))
        elif op == "COMPARE_OP" and len(pushed) >= 2:
            if any(c in str(instruction.argval) for c in ("==", "!=")):
                pair = dict(pushed[-2:])
                if pair.get("name") in names and isinstance(pair.get("const"), str):
                    found.append((str(pair["name"]), str(pair["const"])))
            pushed = []
        elif op == "CONTAINS_OP" and len(pushed) >= 2:
            (kind, variable), (const_kind, container) = pushed[-2:]
            if (
                kind == "name"
                and variable in names
                and const_kind == "const"
                and isinstance(container, (tuple, frozenset))
            ):
                strings = [c for c in container if isinstance(c, str)]
                if isinstance(container, frozenset):  # a set literal: its order varies
                    strings.sort()
                found.extend((str(variable), c) for c in strings)
            pushed = []
        elif op not in ("CACHE", "EXTENDED_ARG", "NOP"):
            pushed = []
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found.extend(_string_comparisons(constant, names))
    return found


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
        self._precise = precise_transcendentals_needed()
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
            # device (`exact_contractions`). The named scope marks its operations with
            # its key, by which the structure-aware grid search says which function
            # joins the axes it could not separate (`_solve/_factor_plan.py`).
            # And a TPU's exp and log to round-off (`with_precise_transcendentals`).
            fn = with_precise_transcendentals(function.fn) if self._precise else function.fn
            with exact_contractions(), jax.named_scope(function.key):
                if self._check_indices and has_array_parameter(function, function_params):
                    checked = checkify.checkify(fn, errors=checkify.index_checks)
                    error, out = checked(**kwargs)
                    # Several functions may share a key (a per-target law of motion).
                    self.record_index_error(function.key, index_failed(error))
                    return out
                return fn(**kwargs)
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
