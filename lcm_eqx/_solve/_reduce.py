"""Reductions in one XLA kernel: for counts, selections and check diagnostics, where
XLA:CPU would otherwise split a reduction into two kernels (see docs/architecture.md,
"threads"); `max_along`, the maximum over actions whose derivative survives the
checkpoint's recomputation; and the reductions over discrete actions under taste shocks
(`smooth_max`, `choice_weights`, `log_choice_weights`), exact where an action is ruled
out."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._numerics import by_platform


def merged_axes(shape: tuple[int, ...], axes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shape with each run of consecutive axes of `axes` merged into one, and the
    positions of the merged axes in it (a reshape, no data movement).

    XLA:CPU reduces one contiguous axis far faster than several: a variadic maximum over
    the nine state axes of the Mahler-Yum example's value arrays (39 x 160,000 points)
    took 34 ms, over the same points as one axis 2 ms (`benchmarks/validation.py`'s
    models; docs/architecture.md, "What validation costs"). Axes not in `axes` (sharded
    ones) are never merged, so a sharded array keeps its layout.
    """
    wanted = {a % len(shape) for a in axes} if shape else set()
    new_shape: list[int] = []
    new_axes: list[int] = []
    for i, n in enumerate(shape):
        if i in wanted and i - 1 in wanted:  # continues the run of the axis before
            new_shape[-1] *= n
        else:
            if i in wanted:
                new_axes.append(len(new_shape))
            new_shape.append(n)
    return tuple(new_shape), tuple(new_axes)


def max_and_count_neginf(
    arrays: tuple[Array, ...], axes: tuple[int, ...]
) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """Each of `arrays` (one shape) maximised over `axes`, and its `-inf` entries counted
    there (int32), without derivative.

    What validation reads of the value arrays after the period loop: the maximum is NaN
    where a NaN is (`max` propagates it), the count says how many states have no
    feasible action. On the CPU in one XLA kernel (a variadic reduction over the merged
    axes): two reductions per array were two or more kernels each (XLA:CPU splits a
    reduction over more than 32 entries into a reduce-window and a reduce), on the quick
    start's model 10 of the validated program's 50. Elsewhere (a TPU, a GPU) as plain
    reductions over the arrays' own axes: the merged axes' reshape of the full Mahler-Yum
    value arrays (39 x 1.6·10⁶ states over ten axes) is a relayout that took a TPU's
    compiler minutes (docs/tuning.md, "Running on an accelerator").
    """
    if not arrays:
        return (), ()
    if not axes:
        return arrays, tuple(jnp.isneginf(a).astype(jnp.int32) for a in arrays)
    arrays = jax.lax.stop_gradient(tuple(arrays))
    return by_platform(
        arrays,
        cpu=functools.partial(_max_and_count_variadic, axes=axes),
        default=functools.partial(_max_and_count_apart, axes=axes),
    )


def _max_and_count_variadic(arrays, axes):
    shape, merged = merged_axes(arrays[0].shape, axes)
    highest = tuple(a.reshape(shape) for a in arrays)
    counts = tuple(jnp.isneginf(a).astype(jnp.int32) for a in highest)
    n = len(arrays)
    reduced = jax.lax.reduce(
        (*highest, *counts),
        (*(jnp.asarray(-jnp.inf, a.dtype) for a in highest), *(jnp.int32(0),) * n),
        lambda a, b: (
            *(jnp.maximum(x, y) for x, y in zip(a[:n], b[:n], strict=True)),
            *(x + y for x, y in zip(a[n:], b[n:], strict=True)),
        ),
        merged,
    )
    return tuple(reduced[:n]), tuple(reduced[n:])


def _max_and_count_apart(arrays, axes):
    highest = tuple(jnp.max(a, axis=axes) for a in arrays)
    counts = tuple(jnp.sum(jnp.isneginf(a), axis=axes, dtype=jnp.int32) for a in arrays)
    return highest, counts


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def max_along(values: Array, axis: int) -> Array:
    """`jnp.max(values, axis=axis)`, whose derivative is that of the first maximising
    element (`jnp.argmax`'s): the maximum of a differentiated value over actions.

    `jnp.max`'s own derivative marks the elements *equal* to the maximum. In the backward
    pass of a checkpointed period step both are recomputed, and XLA:CPU fuses the
    computation of the values into each consumer kernel, where it may round differently
    (contracted multiply-adds): the marks then miss the maximising element. On the
    Mahler–Yum example's tiny grids, `jax.grad` of a value by the plain product was wrong
    at 690 of 2,880 states of period 3 (by up to 33 %) while forward mode was right. The
    argmax of the recomputed values is a maximiser whatever their rounding, and its
    derivative the envelope theorem's. Without a derivative this is `jnp.max`.
    """
    return jnp.max(values, axis=axis)


@max_along.defjvp
def _max_along_jvp(axis: int, primals, tangents):
    (values,), (tangent,) = primals, tangents
    return jnp.max(values, axis=axis), by_platform(
        values,
        tangent,
        cpu=functools.partial(_tangent_at_argmax, axis=axis),
        default=functools.partial(_tangent_at_first_maximum, axis=axis),
    )


# Axes of at most this many entries are searched slice by slice on an accelerator
# (`_tangent_at_first_maximum`).
FIRST_MAXIMUM_SLICES = 16


def _tangent_at_argmax(values: Array, tangent: Array, axis: int) -> Array:
    return _at_argmax(values, (tangent,), axis)[1][0]


def _tangent_at_first_maximum(values: Array, tangent: Array, axis: int) -> Array:
    """`_tangent_at_argmax` for an accelerator: the tangent at the first maximiser (the
    first NaN if any, like `argmax`), without a gather (a TPU gathers one element at a
    time, and reverse mode makes it a scatter).

    Along a short axis, slice by slice: a running best and the tangent there, by
    elementwise selects (a later entry replaces the best only when strictly greater, or
    the first NaN). On a TPU, `argmax` is one reduction of value-position pairs along
    the axis, and in the gradient of reduced Mahler-Yum (saving, 10 entries, the most
    minor axis) the compiler emitted it seven times over: 59 of the 64 s compile.
    Longer axes: `argmax`, and the tangent selected where the position is the one found
    and summed (exact zeros elsewhere, whatever they hold).

    The maximiser is found by comparisons among the values themselves, not against a
    maximum reduced apart: XLA may compute the values in two kernels that round
    differently (see `max_along`), and an equality test with a maximum from the other
    kernel could then find no maximiser.
    """
    return _at_first_by_selects(values, (tangent,), axis % values.ndim)[1][0]


def at_first_maximum(
    values: Array, axis: int, arrays: tuple[Array, ...] = ()
) -> tuple[Array, tuple[Array, ...]]:
    """The first maximiser of `values` along `axis` (`jnp.argmax`'s: the first NaN if
    any) and each of `arrays` (shaped like `values`) there: an argmax and its gathers on
    a CPU; on an accelerator, along a short axis, slice by slice by selects (a TPU's
    `argmax` is a reduction of value-position pairs that its compiler emits very slowly,
    and it gathers one element at a time; see `_tangent_at_first_maximum`), along a
    longer one the argmax and a select-sum. The same results on every device."""
    return by_platform(
        values,
        arrays,
        cpu=functools.partial(_at_argmax, axis=axis % values.ndim),
        default=functools.partial(_at_first_by_selects, axis=axis % values.ndim),
    )


def _at_argmax(values: Array, arrays: tuple[Array, ...], axis: int):
    first = jnp.argmax(values, axis=axis)
    at = jnp.expand_dims(first, axis)
    return first, tuple(jnp.squeeze(jnp.take_along_axis(a, at, axis=axis), axis) for a in arrays)


def _at_first_by_selects(values: Array, arrays: tuple[Array, ...], axis: int):
    n = values.shape[axis]
    if n > FIRST_MAXIMUM_SLICES:
        first = jnp.argmax(values, axis=axis)
        positions = jax.lax.broadcasted_iota(first.dtype, values.shape, axis)
        hit = positions == jnp.expand_dims(first, axis)
        return first, tuple(
            jnp.sum(jnp.where(hit, a, jnp.zeros((), a.dtype)), axis=axis) for a in arrays
        )
    best = jax.lax.index_in_dim(values, 0, axis, keepdims=False)
    first = jnp.zeros(best.shape, jnp.zeros((), int).dtype)  # argmax's dtype
    chosen = [jax.lax.index_in_dim(a, 0, axis, keepdims=False) for a in arrays]
    for i in range(1, n):
        v = jax.lax.index_in_dim(values, i, axis, keepdims=False)
        better = (v > best) | (jnp.isnan(v) & ~jnp.isnan(best))
        best = jnp.where(better, v, best)
        first = jnp.where(better, jnp.asarray(i, first.dtype), first)
        chosen = [
            jnp.where(better, jax.lax.index_in_dim(a, i, axis, keepdims=False), c)
            for a, c in zip(arrays, chosen, strict=True)
        ]
    return first, tuple(chosen)


def _tempered(values: Array, scale, axis: int | tuple[int, ...]) -> tuple[Array, Array, Array]:
    """`values / scale` with the ruled-out (`-inf`) entries held at `-inf` as constants,
    which entries are ruled out, and which rows (along `axis`) have an action left.

    `-inf / scale` is `-inf`, but its derivative in `scale`, `inf`, meets the zero
    weight of the ruled-out action in `logsumexp`'s and `softmax`'s derivatives, and
    `0 · inf` is NaN: the gradient in the taste-shock scale of every solve and
    likelihood with a constraint on a discrete action was NaN. So the division is of a
    0 put in their place, and the select that restores `-inf` has no derivative there.
    A row with every action ruled out is divided as zeros (finite derivatives, the
    results set afterwards). NaN is not ruled out: it propagates, as `max` does.
    """
    ruled_out = jnp.isneginf(values)
    any_left = ~jnp.all(ruled_out, axis=axis, keepdims=True)
    tempered = jnp.where(ruled_out, jnp.zeros((), values.dtype), values) / scale
    return jnp.where(ruled_out & any_left, -jnp.inf, tempered), ruled_out, any_left


def smooth_max(values: Array, scale, axis: int = -1) -> Array:
    """`scale · logsumexp(values / scale)` along `axis` (the value of a choice under
    extreme-value taste shocks of scale `scale`), with ruled-out (`-inf`) entries left
    out exactly: no contribution, a zero derivative (see `_tempered`); `-inf` where
    every entry is ruled out."""
    tempered, _, any_left = _tempered(values, scale, axis)
    value = scale * jax.nn.logsumexp(tempered, axis=axis)
    return jnp.where(jnp.squeeze(any_left, axis), value, -jnp.inf)


def choice_weights(values: Array, scale, axis: int | tuple[int, ...] = -1) -> Array:
    """`softmax(values / scale)` along `axis` or several axes at once (the choice
    probabilities under taste shocks): 0 with a zero derivative for a ruled-out (`-inf`)
    entry, and 0 everywhere in a row with every entry ruled out."""
    tempered, ruled_out, _ = _tempered(values, scale, axis)
    return jnp.where(ruled_out, 0.0, jax.nn.softmax(tempered, axis=axis))


def log_choice_weights(values: Array, scale, axis: int = -1) -> Array:
    """`log_softmax(values / scale)` along `axis` (log choice probabilities), `-inf`
    with a zero derivative for a ruled-out (`-inf`) entry."""
    tempered, ruled_out, _ = _tempered(values, scale, axis)
    return jnp.where(ruled_out, -jnp.inf, jax.nn.log_softmax(tempered, axis=axis))
