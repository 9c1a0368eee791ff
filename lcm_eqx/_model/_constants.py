"""The host-constant check: user functions should not read `jax.Array`s from outside.

A `jax.Array` made at import time (`RATES = jnp.array([...])`) lives on one device. A
user function that reads it (as a module-level global, a closed-over variable or a
`functools.partial` argument) bakes it into the compiled solve as a constant on that
device: a sharded solve (`distributed=True`) has to copy it to every device, and a run
over several processes (`jax.distributed`) cannot use another process's device at all.
A NumPy array is host data that JAX places wherever the program needs it, and a
parameter is placed with the other inputs, so those are the two fixes the warning names.

Found by reading each function's code at `Model(...)`: the globals it loads
(`LOAD_GLOBAL`, also in nested lambdas and comprehensions), its closure cells, the
arguments bound by `functools.partial`, and the same for the plain functions it calls by
a global or closed-over name, outside jax, NumPy, equinox, lcm_eqx and the standard
library. A constant reached only through an attribute (`constants.RATES`) is not seen.
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator, Mapping

import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import numpy as np

from .._errors import warn
from ._markov import MarkovTransition
from ._regime import Regime

# Functions of these packages (and of the standard library) are not searched: they are
# not the user's code, and their module globals are theirs.
_LIBRARY_PACKAGES = frozenset(
    {"jax", "jaxlib", "numpy", "scipy", "equinox", "lcm_eqx", "jaxtyping", "optax", "pandas"}
)
_MAX_CALL_DEPTH = 3


def warn_device_constants(regimes: Mapping[str, Regime]) -> None:
    """Warn (`LcmWarning`) for every `jax.Array` a user function of `regimes` reads from
    outside its arguments, naming the regime, the function and the variable.

    A function shared by several regimes (the same object under the same key) warns once,
    naming them all."""
    found: dict[tuple[int, str, str], tuple[list[str], jax.Array]] = {}
    for regime_name, regime in regimes.items():
        for key, fn in _user_functions(regime):
            for description, array in _device_constants(fn):
                names, _ = found.setdefault((id(fn), key, description), ([], array))
                if regime_name not in names:
                    names.append(regime_name)
    for (_, key, description), (regime_names, array) in found.items():
        where = ", ".join(repr(r) for r in regime_names)
        devices = sorted(str(d) for d in array.devices())
        placed = f"device {devices[0]}" if len(devices) == 1 else f"devices {', '.join(devices)}"
        warn(
            f"Regime{'s' if len(regime_names) > 1 else ''} {where}: function {key!r} reads "
            f"{description}, a jax.Array (shape {array.shape}, dtype {array.dtype}) on "
            f"{placed}. It enters the compiled solve as a constant placed there: a sharded "
            "solve (distributed=True) has to copy it to every device, and a run over several "
            "processes (jax.distributed) cannot use it. Keep module-level numeric constants "
            "as NumPy host arrays: use numpy.asarray(...) or pass it as a parameter."
        )


def _user_functions(regime: Regime) -> Iterator[tuple[str, Callable]]:
    """`(key, function)` for every user function of the regime, keyed as in `params`."""
    yield from regime.functions.items()
    yield from regime.constraints.items()
    for state, fn in regime.state_transitions.items():
        if isinstance(fn, dict):  # a law of motion per target regime
            for target_fn in fn.values():
                yield f"next_{state}", target_fn
        else:
            yield f"next_{state}", _unwrap_markov(fn)
    if regime.transition is not None:
        yield "next_regime", _unwrap_markov(regime.transition)


def _unwrap_markov(fn: Callable | MarkovTransition) -> Callable:
    return fn.fn if isinstance(fn, MarkovTransition) else fn


def _device_constants(fn: Callable) -> list[tuple[str, jax.Array]]:
    """`(description, array)` for each device array `fn` reads from outside, in the order
    found (each variable once)."""
    found: list[tuple[str, jax.Array]] = []
    _search(fn, found, seen=set(), path=(), kind=_is_device_array)
    return found


def host_arrays(fn: Callable) -> list[tuple[str, np.ndarray]]:
    """`(description, array)` for each NumPy array (not a scalar) `fn` reads from outside
    its arguments, found like the device constants: the tables that a traced index (a
    state's code) cannot index."""
    found: list[tuple[str, np.ndarray]] = []
    _search(fn, found, seen=set(), path=(), kind=_is_host_array)
    return found


def _is_device_array(value) -> bool:
    return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)


def _is_host_array(value) -> bool:
    return isinstance(value, np.ndarray) and value.ndim > 0


def _search(fn, found: list, seen: set[int], path: tuple[str, ...], kind) -> None:
    """Search `fn`, which the user's function reaches through the functions named in `path`."""
    if id(fn) in seen or len(path) > _MAX_CALL_DEPTH:
        return
    seen.add(id(fn))
    via = f", read through {' -> '.join(map(repr, path))}" if path else ""
    if isinstance(fn, functools.partial):
        names = _positional_names(fn.func)
        bound = [
            (names[i] if i < len(names) else f"#{i}", value) for i, value in enumerate(fn.args)
        ]
        for name, value in (*bound, *fn.keywords.items()):
            _check_value(value, f"the functools.partial argument {name!r}{via}", found, kind)
        _search(fn.func, found, seen, path, kind)
        return
    if not isinstance(fn, types.FunctionType):
        wrapped = getattr(fn, "__wrapped__", None)  # functools.wraps, jax.jit, ...
        if wrapped is not None:
            _search(wrapped, found, seen, path, kind)
        return
    if _is_library(fn):
        return
    cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True)
    for name, cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: the variable is not assigned yet
            continue
        _check_value(value, f"the closed-over variable {name!r}{via}", found, kind)
        _search_callee(value, name, found, seen, path, kind)
    for name in dict.fromkeys(_global_names(fn.__code__)):
        if name not in fn.__globals__:
            continue  # a builtin, or not defined yet
        value = fn.__globals__[name]
        module = fn.__globals__.get("__name__", "?")
        description = f"the module-level global {name!r} of module {module}{via}"
        _check_value(value, description, found, kind)
        _search_callee(value, name, found, seen, path, kind)


def _search_callee(value, name: str, found: list, seen: set[int], path: tuple[str, ...], kind):
    """Search a function the user's function calls (or may call) by `name`."""
    if isinstance(value, (types.FunctionType, functools.partial)):
        _search(value, found, seen, (*path, name), kind)


def _check_value(value, description: str, found: list, kind) -> None:
    """Record `value` if it is an array of the `kind` searched for, or a list, tuple or
    dict holding one."""
    leaves = jax.tree.leaves(value) if isinstance(value, (list, tuple, dict)) else [value]
    for leaf in leaves:
        if kind(leaf):
            if all(description != known for known, _ in found):
                found.append((description, leaf))
            return


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The globals a code object (and the code nested in it) loads."""
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield instruction.argval
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_names(constant)


def _positional_names(fn: Callable) -> list[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]


def _is_library(fn: types.FunctionType) -> bool:
    root = (fn.__module__ or "").partition(".")[0]
    return root in _LIBRARY_PACKAGES or root in sys.stdlib_module_names
