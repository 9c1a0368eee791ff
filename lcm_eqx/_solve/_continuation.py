"""Expected continuation values: contraction over stochastic states, then interpolation.

Before the state-action sweep, each next regime's value array is contracted over the
stochastic discrete next states whose probabilities depend only on current discrete
states (and period and parameters): `EV(d, x') = sum_d' P(d' | d) V(d', x')`. The kernel
then only indexes discrete axes, contracts the remaining (action- or continuous-state-
dependent) stochastic axes, and interpolates the continuous ones.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array

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
    expected = jnp.einsum(finite, operands[0], probabilities, operands[1], operands[2])
    reaches_neg_inf = jnp.einsum(
        is_neg_inf.astype(probabilities.dtype),
        operands[0],
        (probabilities > 0).astype(probabilities.dtype),
        operands[1],
        operands[2],
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


def continuation_at(
    prepared: Array,
    layout: Layout,
    *,
    current: dict[str, Array],
    discrete: dict[str, Array],
    intervals: dict[str, tuple[Array, Array]],
    probabilities: dict[str, Array],
    regime_index: Array | None = None,
) -> Array:
    """Expected next-period value at one point.

    `intervals[name] = (lo, weight)` on the target grid (weight on `lo + 1`; outside
    `[0, 1]` it extrapolates linearly). Zero-weight corners and zero-probability nodes
    are ignored even when `-inf`; a `-inf` with nonzero weight gives `-inf`.
    `regime_index` selects the target along a leading axis of stacked targets (placed
    after the stochastic axes).
    """
    fixed = tuple(current[n] for n in layout.current) + tuple(discrete[n] for n in layout.discrete)
    if regime_index is not None:
        fixed = (regime_index, *fixed)
    leading = (slice(None),) * len(layout.stochastic)
    joint = None
    for name in layout.stochastic:
        p = probabilities[name]
        joint = p if joint is None else joint[..., None] * p
    total = 0.0
    blocked = False
    for corner in itertools.product((0, 1), repeat=len(layout.continuous)):
        weight = 1.0
        index = []
        for name, upper in zip(layout.continuous, corner, strict=True):
            lo, w = intervals[name]
            weight = weight * (w if upper else 1.0 - w)
            index.append(lo + upper)
        node = prepared[leading + fixed + tuple(index)]
        mass = weight if joint is None else weight * joint
        is_neg_inf = jnp.isneginf(node)
        blocked = blocked | jnp.any((mass != 0) & is_neg_inf)
        total = total + jnp.sum(jnp.where(mass != 0, mass * jnp.where(is_neg_inf, 0.0, node), 0.0))
    return jnp.where(blocked, NEG_INF, total)
