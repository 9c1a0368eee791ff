"""Axes of the state and action grids, and how the knobs lift a function over them."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jax.extend.core import Literal, primitives
from jaxtyping import Array


@dataclasses.dataclass(frozen=True)
class Axis:
    """One grid axis at run time: its name, points and knobs.

    For a discrete axis `points` are the codes 0..n-1 (a process state's values are
    looked up from its code inside the kernel).
    """

    name: str
    points: Array
    batch_size: int
    is_discrete: bool
    distributed: bool = False


# The most bytes of one (state x action) product that a pointwise solver evaluates at once
# (its value array: one float per pair); beyond, state axes are splayed by themselves
# (`auto_splayed`). The environment variable `LCM_EVALUATION_BYTES` sets it.
EVALUATION_BYTES = int(os.environ.get("LCM_EVALUATION_BYTES", 2**30))


def _chunk(axis: Axis) -> int:
    n = int(axis.points.shape[0])
    return axis.batch_size if 0 < axis.batch_size < n else n


def auto_splayed(
    state_axes: tuple[Axis, ...],
    action_axes: tuple[Axis, ...],
    itemsize: int,
    budget: int | None = None,
) -> tuple[Axis, ...]:
    """`state_axes` with `batch_size`s set where the product of state and action points
    evaluated at once would take more than `budget` bytes (default `EVALUATION_BYTES`):
    the largest unsplayed, unsharded state axes first, each to the largest chunk that
    fits. The user's own knobs are kept; splaying gives the same results (the knob's
    contract), so a model that fits is untouched, and one that does not is evaluated in
    chunks rather than failing for memory.
    """
    budget = EVALUATION_BYTES if budget is None else budget
    sizes = [_chunk(a) for a in state_axes]
    total = math.prod(sizes) * math.prod(_chunk(a) for a in action_axes) * itemsize
    if total <= budget:
        return state_axes
    axes = list(state_axes)
    candidates = [
        i
        for i, a in enumerate(state_axes)
        if not a.distributed and sizes[i] > 1 and not (0 < a.batch_size < a.points.shape[0])
    ]
    for i in sorted(candidates, key=lambda i: -sizes[i]):
        rest = total // sizes[i]
        batch_size = max(1, budget // max(rest, 1))
        if batch_size < sizes[i]:
            axes[i] = dataclasses.replace(axes[i], batch_size=int(batch_size))
            total = rest * batch_size
            sizes[i] = int(batch_size)
        if total <= budget:
            break
    return tuple(axes)


def map_axis(fn: Callable, xs, batch_size: int):
    """`vmap` over the leading axis of `xs` (an array or a pytree of arrays), or with
    `batch_size > 0` a scan over chunks of that size (`lax.map(..., batch_size=k)`;
    with `batch_size >= size` a plain `vmap`).

    This is the only place the splay knob acts: same results, peak memory of one chunk.
    """
    size = jax.tree.leaves(xs)[0].shape[0]
    fn = flattened(fn, xs)
    if batch_size and batch_size < size:
        return _chunked_map(fn, xs, batch_size, size)
    return jax.vmap(fn)(xs)


def reduce_axis(fn: Callable, xs, batch_size: int, reduce: Callable):
    """`reduce(vmap(fn)(xs))`, where `reduce` collapses the leading axis of `fn`'s
    outputs (a pytree of float arrays) with an associative operation whose identity is
    `-inf` (max, logsumexp, an argmax-led pair, the check maxima).

    With `batch_size > 0` a scan over chunks of `batch_size` points carries the running
    result: each chunk is reduced and combined with it, so that only one chunk's outputs
    are ever live (`map_axis` would stack every point's outputs first). This is how the
    splay knob acts on an action axis, whose points are maximised over.
    """
    size = jax.tree.leaves(xs)[0].shape[0]
    fn = flattened(fn, xs)
    if not (batch_size and batch_size < size):
        return reduce(jax.vmap(fn)(xs))
    n_chunks, remainder = divmod(size, batch_size)
    cut = n_chunks * batch_size
    chunks = jax.tree.map(lambda x: x[:cut].reshape((n_chunks, batch_size, *x.shape[1:])), xs)

    def chunk(x):
        return reduce(jax.vmap(fn)(x))

    def combine(a, b):
        return reduce(jax.tree.map(lambda u, v: jnp.stack([u, v]), a, b))

    shapes = jax.eval_shape(chunk, jax.tree.map(lambda x: x[0], chunks))
    identity = jax.tree.map(lambda s: jnp.full(s.shape, -jnp.inf, s.dtype), shapes)
    result, _ = jax.lax.scan(lambda carry, x: (combine(carry, chunk(x)), None), identity, chunks)
    if remainder:
        result = combine(result, chunk(jax.tree.map(lambda x: x[cut:], xs)))
    return result


def flattened(fn: Callable, xs) -> Callable:
    """`fn` of one slice of `xs`, traced once into a flat program of primitives.

    The same function as `fn`, cheaper to `vmap`: jax.numpy wraps most functions in a
    nested `jit`, and `vmap` re-traces each nested `jit` to batch it (most of the
    tracing time of a solve). Tracing `fn` once without `vmap` and replaying its
    primitives with the nested `jit`s inlined batches each primitive directly.
    """
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), xs)
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(example)
    out_tree = jax.tree.structure(out_shape)

    def replay(x):
        return jax.tree.unflatten(
            out_tree, _inline_eval(closed.jaxpr, closed.consts, jax.tree.leaves(x))
        )

    return replay


# `pjit_p` before JAX renamed it.
_JIT = getattr(primitives, "jit_p", None) or getattr(primitives, "pjit_p", None)


def _is_plain_jit(eqn) -> bool:
    params = eqn.params
    unspecified = all(
        type(s).__name__ == "UnspecifiedValue"
        for s in (*params.get("in_shardings", ()), *params.get("out_shardings", ()))
    )
    return eqn.primitive is _JIT and unspecified


def _inline_eval(jaxpr, consts, args) -> list:
    """Evaluate `jaxpr` like `jax.core.eval_jaxpr`, inlining nested plain `jit`s."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if _is_plain_jit(eqn):
            inner = eqn.params["jaxpr"]
            outs = _inline_eval(inner.jaxpr, inner.consts, invals)
        else:
            outs = bind_equation(eqn, invals)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def bind_equation(eqn, invals: list) -> list:
    """The outputs of one jaxpr equation applied to `invals` (a list, one per output)."""
    bound = eqn.primitive.get_bind_params(eqn.params)
    # JAX < 0.7 returns `(subfuns, params)`.
    subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
    with eqn.ctx.manager:
        outs = eqn.primitive.bind(*subfuns, *invals, **params)
    return outs if eqn.primitive.multiple_results else [outs]


def flat_jaxpr(fn: Callable, example):
    """`fn` of `example` (a pytree of `ShapeDtypeStruct`s) traced into a closed jaxpr
    with its nested plain `jit`s inlined (one flat list of primitives), and the tree
    structure of its outputs."""
    tree = jax.tree.structure(example)
    # One trace: with jit disabled, each nested `jit` is traced inline.
    with jax.disable_jit():
        flat, out_shape = jax.make_jaxpr(
            lambda *args: fn(jax.tree.unflatten(tree, args)), return_shape=True
        )(*jax.tree.leaves(example))
    return flat, jax.tree.structure(out_shape)


def _chunked_map(fn: Callable, xs, batch_size: int, size: int):
    """`lax.map(fn, xs, batch_size=batch_size)`: a scan over full chunks with a `vmap`
    inside, and a separate `vmap` over the remainder.

    Written out because `lax.map` flattens the chunked outputs with a `-1` reshape, which
    fails for outputs with a zero-size axis (the empty diagnostics of an unvalidated
    solve); here every shape is explicit.
    """
    n_chunks, remainder = divmod(size, batch_size)
    cut = n_chunks * batch_size
    chunks = jax.tree.map(lambda x: x[:cut].reshape((n_chunks, batch_size, *x.shape[1:])), xs)
    _, ys = jax.lax.scan(lambda carry, x: (carry, jax.vmap(fn)(x)), (), chunks)
    ys = jax.tree.map(lambda y: y.reshape((cut, *y.shape[2:])), ys)
    if remainder:
        tail = jax.vmap(fn)(jax.tree.map(lambda x: x[cut:], xs))
        ys = jax.tree.map(lambda y, t: jax.lax.concatenate([y, t], 0), ys, tail)
    return ys


@dataclasses.dataclass(frozen=True)
class Carried:
    """An array mapped jointly with the state axes: `labels[i]` names its axis `i`.

    When `lift` maps a state axis whose name is one of `labels`, it maps that axis of the
    array at the same time (each state point sees only its own slice), instead of closing
    over the whole array and indexing it by the state's code.
    """

    array: Array
    labels: tuple[str | None, ...]


def lift(
    fn: Callable,
    axes: tuple[Axis, ...],
    point: dict | None = None,
    carried: Mapping[str, Carried] | None = None,
):
    """Evaluate `fn(point)` on the product of `axes`; outputs get one axis per grid axis.

    With `carried`, `fn(point, arrays)` also receives the carried arrays, with every axis
    labelled like an already-mapped state axis removed (mapped jointly with it).
    """
    point = {} if point is None else point
    if carried is None:
        if not axes:
            return fn(point)
        first, rest = axes[0], axes[1:]
        return map_axis(
            lambda x: lift(fn, rest, {**point, first.name: x}), first.points, first.batch_size
        )
    if not axes:
        return fn(point, {key: c.array for key, c in carried.items()})
    first, rest = axes[0], axes[1:]
    joint = {key: c for key, c in carried.items() if first.name in c.labels}
    fixed = {key: c for key, c in carried.items() if first.name not in c.labels}
    moved = {key: jnp.moveaxis(c.array, c.labels.index(first.name), 0) for key, c in joint.items()}
    rest_labels = {
        key: tuple(label for label in c.labels if label != first.name) for key, c in joint.items()
    }

    def inner(xs):
        x, slices = xs
        inner_carried = dict(fixed)
        for key, array in slices.items():
            inner_carried[key] = Carried(array, rest_labels[key])
        return lift(fn, rest, {**point, first.name: x}, inner_carried)

    return map_axis(inner, (first.points, moved), first.batch_size)
