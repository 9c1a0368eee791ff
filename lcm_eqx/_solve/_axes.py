"""Axes of the state and action grids, and how the knobs lift a function over them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
from jaxtyping import Array


@dataclasses.dataclass(frozen=True)
class Axis:
    """One grid axis at run time: its name, points and splay knob.

    For a discrete axis `points` are the codes 0..n-1 (a process state's values are
    looked up from its code inside the kernel).
    """

    name: str
    points: Array
    batch_size: int
    is_discrete: bool


def map_axis(fn: Callable, points: Array, batch_size: int):
    """`vmap` over `points`, or with `batch_size > 0` a scan over chunks of that size.

    This is the only place the splay knob acts: same results, peak memory of one chunk.
    """
    if batch_size and batch_size < points.shape[0]:
        return jax.lax.map(fn, points, batch_size=batch_size)
    return jax.vmap(fn)(points)


def lift(fn: Callable, axes: tuple[Axis, ...], point: dict | None = None):
    """Evaluate `fn(point)` on the product of `axes`; outputs get one axis per grid axis."""
    point = {} if point is None else point
    if not axes:
        return fn(point)
    first, rest = axes[0], axes[1:]
    return map_axis(lambda x: lift(fn, rest, {**point, first.name: x}), first.points,
                    first.batch_size)
