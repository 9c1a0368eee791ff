"""Values known when tracing: a function of concrete inputs evaluated on the host.

Inside a solve every parameter, the period and the age are traced, so even a function
of discrete codes alone (a regime transition `next_regime(labor)`) gives a tracer. To
use such a value for the program's structure (which regimes a choice can move to),
`constant_outputs` traces the function into a jaxpr and evaluates it with numpy: no
XLA compilation (evaluating it with JAX's eager operations compiled one small program
per operation, 0.19 s of a cold solve). Where the result depends on a traced value,
or an operation is not one of the elementwise, shape and reduction primitives below,
the answer is `None`: not known.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.extend.core import Literal


class _Unknown(Exception):
    """The value depends on something traced or on an operation not evaluated here."""


def constant_outputs(fn: Callable, *args) -> list[np.ndarray] | None:
    """`fn(*args)`'s output leaves (numpy), where they depend only on `args` (concrete
    arrays or pytrees of them) and constants; `None` otherwise."""
    try:
        closed = jax.make_jaxpr(fn)(*args)
    except Exception:  # a function that cannot be traced at these inputs: not known
        return None
    consts = [_host(c) for c in closed.consts]
    try:
        return _evaluate(closed.jaxpr, consts, [np.asarray(a) for a in jax.tree.leaves(args)])
    except _Unknown:
        return None


_UNKNOWN = object()


def _host(value):
    """`value` as a numpy array, or `_UNKNOWN` where it is traced."""
    try:
        return np.asarray(value)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return _UNKNOWN


def _evaluate(jaxpr, consts, args) -> list[np.ndarray]:
    env: dict = {}

    def read(v):
        return np.asarray(v.val) if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if any(x is _UNKNOWN for x in invals):
            raise _Unknown
        name = eqn.primitive.name
        if name in _CALLS:
            inner = eqn.params[_CALLS[name]]
            inner_consts = [np.asarray(c) for c in getattr(inner, "consts", ())]
            outs = _evaluate(getattr(inner, "jaxpr", inner), inner_consts, invals)
        elif name in _RULES:
            try:
                out = _RULES[name](*invals, **eqn.params)
            except Exception as error:  # parameters this version of the rule cannot read
                raise _Unknown from error
            outs = list(out) if eqn.primitive.multiple_results else [out]
        else:
            raise _Unknown
        for var, out in zip(eqn.outvars, outs, strict=True):
            out = np.asarray(out).astype(var.aval.dtype)
            if out.shape != tuple(var.aval.shape):
                raise _Unknown
            env[var] = out
    return [read(v) for v in jaxpr.outvars]


# Primitives that call a jaxpr, and the parameter that holds it.
_CALLS = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
}


def _integer_division(x, y, **_):
    """`lax.div`: rounds towards zero for integers."""
    if np.issubdtype(x.dtype, np.integer):
        return np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))
    return x / y


def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    expanded = np.ones(len(shape), int)
    for axis, dimension in enumerate(broadcast_dimensions):
        expanded[dimension] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), shape)


def _iota(dtype, shape, dimension, **_):
    line = np.arange(shape[dimension]).reshape(
        [n if i == dimension else 1 for i, n in enumerate(shape)]
    )
    return np.broadcast_to(line, shape).astype(dtype)


def _select_n(which, *cases, **_):
    if which.dtype == bool:
        return np.where(which, cases[1], cases[0])
    return np.choose(which, np.broadcast_arrays(*cases))


def _plain(function):
    """A numpy function of the operands, the primitive's parameters (dtypes of the
    result, accuracy) ignored: the result is cast to the primitive's output type."""
    return lambda *xs, **_: function(*xs)


def _reduction(function):
    return lambda x, axes, **_: function(x, axis=tuple(axes))


_RULES: dict[str, Callable] = {
    "eq": _plain(np.equal),
    "ne": _plain(np.not_equal),
    "lt": _plain(np.less),
    "le": _plain(np.less_equal),
    "gt": _plain(np.greater),
    "ge": _plain(np.greater_equal),
    "add": _plain(np.add),
    "sub": _plain(np.subtract),
    "mul": _plain(np.multiply),
    "div": _integer_division,
    "rem": _plain(np.fmod),
    "max": _plain(np.maximum),
    "min": _plain(np.minimum),
    "neg": _plain(np.negative),
    "abs": _plain(np.abs),
    "sign": _plain(np.sign),
    "and": _plain(np.bitwise_and),
    "or": _plain(np.bitwise_or),
    "xor": _plain(np.bitwise_xor),
    "not": _plain(np.invert),
    "exp": _plain(np.exp),
    "log": _plain(np.log),
    "integer_pow": lambda x, y, **_: x**y,
    "clamp": lambda low, x, high, **_: np.clip(x, low, high),
    "select_n": _select_n,
    "convert_element_type": lambda x, new_dtype, **_: x.astype(new_dtype),
    "copy": lambda x, **_: x,
    "copy_p": lambda x, **_: x,
    "iota": _iota,
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda x, new_sizes, **_: x.reshape(new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
    "reduce_sum": _reduction(np.sum),
    "reduce_max": _reduction(np.max),
    "reduce_min": _reduction(np.min),
    "reduce_or": _reduction(np.any),
    "reduce_and": _reduction(np.all),
}
