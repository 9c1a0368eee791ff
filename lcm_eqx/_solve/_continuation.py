"""Expected continuation values: contraction over stochastic states, then interpolation.

Before the state-action sweep, each next regime's value array is contracted over the
stochastic discrete next states whose probabilities depend only on current discrete
states (and period and parameters): `EV(d, x') = sum_d' P(d' | d) V(d', x')`. The kernel
then only indexes discrete axes, contracts the remaining (action- or continuous-state-
dependent) stochastic axes, and interpolates the continuous ones.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
from collections.abc import Callable
from typing import cast

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._numerics import CONTRACTION_PRECISION, by_platform

NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class Layout:
    """Axis order of a prepared continuation array.

    `stochastic`: next states whose probability vectors are applied in the kernel;
    `current`: current-regime discrete states (from the pre-contraction);
    `discrete`: next discrete states given by a deterministic code;
    `continuous`: next continuous states, interpolated.
    """

    stochastic: tuple[str, ...]
    current: tuple[str, ...]
    discrete: tuple[str, ...]
    continuous: tuple[str, ...]


SHARD_LABEL = "shard:"


def contract(
    values: Array,
    labels: list[str],
    probabilities: Array,
    p_labels: list[str],
    *,
    shards: int = 1,
    place: Callable[[Array, list[str]], Array] | None = None,
):
    """Contract `values` over its axis `p_labels[-1]` with `probabilities`.

    The other axes of `probabilities` (current states) are matched with equal labels of
    `values` (a diagonal) or appended. A `-inf` value that gets positive probability
    makes the result `-inf`; one with zero probability is ignored (never NaN).

    With `shards > 1` the contracted axis is sharded over that many devices: it is split
    into `(shards, n // shards)` on both operands, each device contracts its own block
    (`place` pins the block axis to the devices), and the partial sums are added across
    devices -- an all-reduce of the reduced array, never a gather of `values`.
    """
    axis = p_labels[-1]
    if shards > 1:
        i = labels.index(axis)
        n = values.shape[i]
        values = values.reshape((*values.shape[:i], shards, n // shards, *values.shape[i + 1 :]))
        labels = [*labels[:i], SHARD_LABEL, *labels[i:]]
        probabilities = probabilities.reshape((*probabilities.shape[:-1], shards, n // shards))
        p_labels = [*p_labels[:-1], SHARD_LABEL, axis]
        if place is not None:
            values = place(values, labels)
    names = list(dict.fromkeys([*labels, *p_labels]))
    index = {name: i for i, name in enumerate(names)}
    out = [n for n in labels if n != axis]
    out += [n for n in p_labels[:-1] if n not in out]
    operands = ([index[n] for n in labels], [index[n] for n in p_labels], [index[n] for n in out])
    is_neg_inf = jnp.isneginf(values)
    finite = jnp.where(is_neg_inf, 0.0, values)
    expected = jnp.einsum(
        finite,
        operands[0],
        probabilities,
        operands[1],
        operands[2],
        precision=CONTRACTION_PRECISION,
    )
    reaches_neg_inf = jnp.einsum(
        is_neg_inf.astype(probabilities.dtype),
        operands[0],
        (probabilities > 0).astype(probabilities.dtype),
        operands[1],
        operands[2],
        precision=CONTRACTION_PRECISION,
    )
    if shards > 1:
        if place is not None:
            expected = place(expected, out)
            reaches_neg_inf = place(reaches_neg_inf, out)
        block = out.index(SHARD_LABEL)
        expected = jnp.sum(expected, axis=block)
        reaches_neg_inf = jnp.sum(reaches_neg_inf, axis=block)
        out = [n for n in out if n != SHARD_LABEL]
    return jnp.where(reaches_neg_inf > 0, NEG_INF, expected), out


@jax.custom_jvp
def weighted(mass: Array, value: Array) -> Array:
    """`mass * value`, where a zero mass ignores the value even when it is `-inf`.

    For `value` finite or `-inf` (what value arrays hold; NaN is dealt with per period,
    see `RegimeProblem`) the only invalid product is `0 * -inf`, which is NaN and is
    replaced by 0. A sum of such terms is then `-inf` exactly when a node with positive
    mass is `-inf`; a negative (extrapolation) mass on a `-inf` node gives `+inf` or NaN,
    which `settle` maps to `-inf`. The one test is on the product, which depends on the
    value: nothing here is a function of the weights alone that XLA would hoist out of
    the period loop into an extra array to stream through memory.

    Its derivative treats an infinite value as a constant: the tangent there is 0, so
    reverse mode never forms `0 * inf` (a NaN that would leak into every gradient).
    """
    product = mass * value
    return jnp.where(jnp.isnan(product), 0.0, product)


def _product_tangent(primals, tangents) -> Array:
    """The tangent of `a * value` that treats an infinite `value` as a constant."""
    a, value = primals
    d_a, d_value = tangents
    finite = jnp.isfinite(value)
    safe = jnp.where(finite, value, 0.0)
    return jnp.where(finite, a * d_value + safe * d_a, 0.0)


weighted.defjvp(lambda primals, tangents: (weighted(*primals), _product_tangent(primals, tangents)))


@jax.custom_jvp
def discounted(factor: Array, value: Array) -> Array:
    """`factor * value` (a discount factor times an expected continuation), whose
    derivative treats an infinite value as a constant, like `weighted`'s."""
    return factor * value


discounted.defjvp(
    lambda primals, tangents: (discounted(*primals), _product_tangent(primals, tangents))
)


def settle(total: Array) -> Array:
    """A sum of `weighted` terms: `+inf` or NaN (a nonzero mass on a `-inf` node) -> `-inf`."""
    return jnp.where(total < jnp.inf, total, NEG_INF)


# The kernel reads continuation arrays whose `-inf` entries (infeasible states, inactive
# regimes) are replaced by a finite stand-in (`mask_neg_inf`, once per period on the
# small prepared arrays): interpolation is then plain products, with no per-point test
# that `0 * -inf` is NaN (`weighted`), and one test per point at the end (`settle_masked`)
# maps a sum that a stand-in reached with positive mass back to `-inf`. The stand-in is
# the dtype's largest value / 64 (room for a few corners and extrapolation weights before
# it overflows to `inf`, which the test catches as well), and the test `|sum| < REACH`
# sees masses down to ~2e-7 (float32, about its precision) and ~4e-157 (float64): a
# `-inf` node reached with a smaller probability gives a hugely negative finite value
# instead. Values themselves must stay below REACH in magnitude (1e30 in float32, 1e150
# in float64); the values an aggregator transforms are checked (`value:range`).
_REACH = {4: 1e30, 8: 1e150}


def _stand_in(dtype) -> float:
    return -float(jnp.finfo(dtype).max) / 64


def mask_neg_inf(prepared: Array) -> Array:
    """`prepared` with `-inf` replaced by the finite stand-in read by `continuation_at`."""
    return jnp.where(jnp.isneginf(prepared), _stand_in(prepared.dtype), prepared)


def reach(dtype) -> float:
    """The largest magnitude a value read through `mask_neg_inf` may have (`settle_masked`
    reads anything larger as a stand-in, i.e. `-inf`)."""
    return _REACH.get(jnp.dtype(dtype).itemsize, 1e30)


def settle_masked(total: Array) -> Array:
    """A sum over nodes of `mask_neg_inf` arrays: `-inf` where a stand-in (or NaN) got
    positive mass, else the sum."""
    return jnp.where(jnp.abs(total) < reach(total.dtype), total, NEG_INF)


def continuation_at(
    prepared: Array,
    layout: Layout,
    *,
    current: dict[str, Array],
    discrete: dict[str, Array],
    intervals: dict[str, tuple[Array, Array]],
    probabilities: dict[str, Array],
    regime_index: Array | None = None,
    settled: bool = True,
    transform: Callable[[Array], Array] | None = None,
) -> Array:
    """Expected next-period value at one point.

    `prepared` is a `mask_neg_inf` array. `intervals[name] = (lo, weight)` on the target
    grid (weight on `lo + 1`; outside `[0, 1]` it extrapolates linearly). Zero-weight
    corners and zero-probability nodes are ignored even when `-inf`; a `-inf` with
    nonzero weight gives `-inf`. A NaN node gives `-inf` here, whatever its weight:
    `RegimeProblem.q` makes the whole period NaN when a continuation holds one.
    `regime_index` selects the target along a leading axis of stacked targets (placed
    after the stochastic axes). With `settled=False` the sum is returned before
    `settle_masked` (for a caller that adds several and settles once). With `transform`,
    each stochastic node's interpolated value `v` enters the expectation as
    `transform(v)` (`-inf` stays `-inf`): `E[f(interpolated V)]`, not `E[interpolated f(V)]`.

    The indexed discrete axes and the first continuous axis are merged into one axis,
    so on the common layouts a point's nodes are two gathers with one index each (the
    offset and the offset + 1 of the merged axis; not one index per axis, nor one per
    interpolation corner), which is what bounds the state-action sweep on a CPU. On an
    accelerator, with one continuous axis, the nodes are read by a weighted sum over
    their row instead (`_read_dense`, `READ`): the same values.
    """
    fixed = tuple(current[n] for n in layout.current) + tuple(discrete[n] for n in layout.discrete)
    if regime_index is not None:
        fixed = (regime_index, *fixed)
    joint = None
    for name in layout.stochastic:
        p = probabilities[name]
        joint = p if joint is None else joint[..., None] * p
    finish = settle_masked if settled else (lambda total: total)
    intervals_in_order = tuple(
        (jnp.asarray(intervals[n][0], jnp.int32), intervals[n][1]) for n in layout.continuous
    )
    operands = (prepared, fixed, intervals_in_order, joint)
    n_stochastic = len(layout.stochastic)
    gathered = functools.partial(
        _read_gathered, n_stochastic=n_stochastic, transform=transform, finish=finish
    )
    # The dense read sums the stochastic nodes times the continuous ones per point.
    nodes_per_point = prepared.size // max(math.prod(prepared.shape[n_stochastic:-1]), 1)
    if (
        len(layout.continuous) != 1
        or prepared.shape[-1] < 2
        or READ == "gather"
        or nodes_per_point > DENSE_READ_NODES
    ):
        return gathered(*operands)
    dense = functools.partial(
        _read_dense, n_stochastic=n_stochastic, transform=transform, finish=finish
    )
    if READ == "dense":
        return dense(*operands)
    return by_platform(*operands, cpu=gathered, default=dense)


# How `continuation_at` reads a continuation with one continuous axis: "platform" (a
# gather of the two nodes on a CPU, `_read_dense` on an accelerator), or "gather" or
# "dense" everywhere (the tests and benchmarks compare them); the environment variable
# `LCM_CONTINUATION_READ` sets it at import.
READ = os.environ.get("LCM_CONTINUATION_READ", "platform")
# The most nodes (stochastic times continuous) that the dense read sums per point: XLA
# may store that many products per point before their sum (the CPU did: 56 GB for a
# plain-product model of 1.2e7 points and 591 nodes), so beyond it the gathers (2 per
# stochastic node) are kept. `LCM_DENSE_READ_NODES` sets it.
DENSE_READ_NODES = int(os.environ.get("LCM_DENSE_READ_NODES", 128))


def _read_dense(prepared, fixed, intervals, joint, *, n_stochastic, transform, finish):
    """`continuation_at` with one continuous axis without a gather per point.

    The row of the fixed codes is sliced (under the grid's `vmap`s a gather of whole
    rows, one per distinct code: the codes do not vary along the continuous actions), and
    its two nodes are read by a weighted sum over the row, weight `1 - w` on node `lo`,
    `w` on `lo + 1` and exactly 0 elsewhere. An accelerator sums a short row far faster
    than it gathers one element per point, and the derivative is a product, not a
    scatter per point. The stand-ins of `mask_neg_inf` times an exact zero add nothing; a
    NaN anywhere in the row makes the point `-inf` (where the gather makes only the points
    next to it `-inf`; a NaN continuation makes the whole period NaN in any case).
    """
    ((lo, weight),) = intervals
    stochastic_shape = prepared.shape[:n_stochastic]
    n = prepared.shape[-1]
    fixed_shape = prepared.shape[n_stochastic:-1]
    rows = prepared.reshape((*stochastic_shape, math.prod(fixed_shape), n))
    offset = jnp.zeros((), jnp.int32)
    for code, size in zip(fixed, fixed_shape, strict=True):
        offset = offset * size + jnp.clip(jnp.asarray(code, jnp.int32), 0, size - 1)
    zero = jnp.zeros((), jnp.int32)
    row = jax.lax.dynamic_slice(
        rows, (zero,) * n_stochastic + (offset, zero), (*stochastic_shape, 1, n)
    )[..., 0, :]
    nodes = jnp.arange(n, dtype=jnp.int32)
    weights = jnp.where(nodes == lo, 1.0 - weight, jnp.where(nodes == lo + 1, weight, 0.0))
    # Each stochastic node interpolated first, then their expectation: the row varies
    # with the fixed codes and the weights with the continuous next state, so this sum
    # is over their joint points only, not also over the points that the probabilities
    # vary with (summing the probabilities into the row first: a full Mahler-Yum solve
    # on a TPU took 0.219 s, against 0.083 s in this order). A multiply and a sum, not a
    # `dot`, whose operands XLA would store: here it may fuse the weights in (it need
    # not: hence `DENSE_READ_NODES`).
    values = jnp.sum(row * weights.astype(prepared.dtype), axis=-1)
    if transform is not None:
        values = mask_neg_inf(transform(settle_masked(values)))
    return finish(values if joint is None else jnp.sum(joint * values))


def _read_gathered(prepared, fixed, intervals, joint, *, n_stochastic, transform, finish):
    """`continuation_at` by gathers: the two nodes of the merged axis (the fixed codes
    and the first continuous axis), then a pair along each further continuous axis."""
    n_continuous = len(intervals)
    shape = prepared.shape
    stochastic_shape = shape[:n_stochastic]
    fixed_shape = shape[n_stochastic : n_stochastic + len(fixed)]
    continuous_shape = shape[n_stochastic + len(fixed) :]
    # Merge the fixed axes (and the first continuous one) into one, indexed by its
    # row-major offset. Codes are clipped to their axis first, as per-axis indexing would.
    merged_shape = (*fixed_shape, *continuous_shape[:1])
    codes = [
        jnp.clip(jnp.asarray(c, jnp.int32), 0, n - 1)
        for c, n in zip(fixed, fixed_shape, strict=True)
    ]
    codes += [lo for lo, _ in intervals[:1]]
    block = prepared
    if merged_shape:
        offset = jnp.zeros((), jnp.int32)
        for code, n in zip(codes, merged_shape, strict=True):
            offset = offset * n + code
        flat = prepared.reshape((*stochastic_shape, math.prod(merged_shape), *continuous_shape[1:]))
        zero = jnp.zeros((), jnp.int32)
        starts = (zero,) * n_stochastic + (offset,) + tuple(lo for lo, _ in intervals[1:])
        sizes = stochastic_shape + ((2,) if n_continuous else (1,)) + (2,) * (n_continuous - 1)
        if n_continuous:
            # The two nodes of the merged axis as two gathers of one element each, not
            # one of a pair: inside a splayed (scanned) sweep, where XLA cannot hoist
            # the index, a pair gather costs several times as much per point.
            # The upper node is read at the same index from the array shifted by one along
            # the merged axis (once per period, on the small array), so that XLA keeps one
            # index per point, not two. (Every start is in bounds by construction: no
            # negative-index handling; offset + 1 never leaves the row of `offset`.)
            half = (*sizes[:n_stochastic], 1, *sizes[n_stochastic + 1 :])
            axis = n_stochastic
            shifted = jax.lax.concatenate(
                [
                    jax.lax.slice_in_dim(flat, 1, flat.shape[axis], axis=axis),
                    jax.lax.slice_in_dim(flat, flat.shape[axis] - 1, flat.shape[axis], axis=axis),
                ],
                axis,
            )
            block = jax.lax.concatenate(
                [
                    jax.lax.dynamic_slice(flat, starts, half, allow_negative_indices=False),
                    jax.lax.dynamic_slice(shifted, starts, half, allow_negative_indices=False),
                ],
                axis,
            )
        else:
            block = jax.lax.dynamic_slice(flat, starts, sizes, allow_negative_indices=False)
            block = block[..., 0]
    if transform is not None:
        # Interpolate each stochastic node, transform it, then take the expectation.
        nodes = block
        if n_continuous:
            nodes = cast(Array, 0.0)
            for corner in itertools.product((0, 1), repeat=n_continuous):
                nodes = nodes + _corner_weight(intervals, corner) * block[(Ellipsis, *corner)]
        nodes = mask_neg_inf(transform(settle_masked(nodes)))
        return finish(nodes if joint is None else jnp.sum(joint * nodes))
    if not n_continuous:
        return finish(block if joint is None else jnp.sum(joint * block))
    total = cast(Array, 0.0)  # a weakly typed zero; an Array from the first corner on
    for corner in itertools.product((0, 1), repeat=n_continuous):
        weight = _corner_weight(intervals, corner)
        node = block[(Ellipsis, *corner)]
        total = total + (weight * node if joint is None else jnp.sum(weight * joint * node))
    return finish(total)


def _corner_weight(intervals, corner) -> Array:
    """The multilinear weight of one corner (0: lower, 1: upper node per continuous
    axis) of the interpolation cell; `intervals` holds `(lo, w)` per continuous axis."""
    weight: Array | float = 1.0
    for (_, w), upper in zip(intervals, corner, strict=True):
        weight = weight * (w if upper else 1.0 - w)
    return cast(Array, weight)
