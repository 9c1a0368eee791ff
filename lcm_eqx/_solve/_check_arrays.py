"""Check arrays: how far a probability vector is from valid, the maxima of the checks'
violation arrays (in one XLA kernel on the CPU, over each array's own axes elsewhere),
NaN detection, and the names of an aggregator's checks. What `RegimeProblem`'s checks
and the period loop's reduction of them are made of."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._model._plan import RegimePlan
from .._numerics import by_platform, one_kernel_reduce
from ._reduce import merged_axes

# Vectors up to this length are reduced by unrolled elementwise operations, which XLA
# fuses into the kernel that produces them: a `reduce` of a few elements per point is a
# kernel of its own, and on the CPU each kernel adds compile time (see `probability_violation`).
_UNROLL = 16


def probability_violation(p: Array, tolerance: float) -> Array:
    """How far a probability vector is from valid (0 when valid, > 0 otherwise)."""
    if p.ndim == 1 and p.shape[0] <= _UNROLL:
        terms = [p[i] for i in range(p.shape[0])]
        total = functools.reduce(jnp.add, terms)
        lowest = functools.reduce(jnp.minimum, terms)
        highest = functools.reduce(jnp.maximum, terms)
    else:
        total, lowest, highest = jnp.sum(p), jnp.min(p), jnp.max(p)
    total_error = jnp.abs(total - 1.0) - tolerance
    violation = jnp.maximum(jnp.maximum(total_error, -lowest), highest - 1.0)
    # A NaN probability makes the total NaN.
    return jnp.where(jnp.isnan(total), jnp.inf, jnp.maximum(violation, 0.0))


def max_each(arrays: tuple[Array, ...], axes: tuple[int, ...]) -> tuple[Array, ...]:
    """Each of `arrays` (one shape) maximised over `axes`, in one XLA kernel together
    with their computation (a variadic reduction), without derivative.

    For check violations: XLA:CPU compiles a reduction of its own per array, and splits
    each one over more than 32 entries into two kernels (a reduce-window, then a reduce),
    but leaves a variadic reduction whole. A single array is paired with a constant
    filler, so that it stays variadic (XLA would drop an unused second result).

    Elsewhere (a TPU, a GPU) a plain maximum per array over its own axes: merging the
    axes is a reshape, which on a TPU is a relayout of the tiled array, and emitting it
    was most of the full Mahler-Yum validated solve's compile (12 of its 17.6 s for one
    check of 80,000 points; docs/tuning.md, "Running on an accelerator").
    """
    if not arrays or not axes:
        return arrays
    arrays = jax.lax.stop_gradient(tuple(arrays))
    return by_platform(
        arrays,
        cpu=functools.partial(_max_each_merged, axes=axes),
        default=lambda arrays: tuple(jnp.max(a, axis=axes) for a in arrays),
    )


def _max_each_merged(arrays: tuple[Array, ...], axes: tuple[int, ...]) -> tuple[Array, ...]:
    # Consecutive reduced axes merged into one (`merged_axes`: one contiguous axis
    # reduces an order of magnitude faster on the CPU).
    shape, axes = merged_axes(arrays[0].shape, axes)
    arrays = tuple(a.reshape(shape) for a in arrays)
    if 0 < math.prod(shape[a] for a in axes) <= _UNROLL:
        # A few entries (a discrete action's codes): a maximum of slices, which fuses
        # into the kernel that reads the result instead of being a reduction of its own.
        for axis in sorted(axes, reverse=True):
            arrays = tuple(_max_of_slices(a, axis) for a in arrays)
        return arrays
    single = len(arrays) == 1
    if single:
        arrays = (*arrays, jnp.full_like(arrays[0], -jnp.inf))
    inits = tuple(jnp.asarray(-jnp.inf, a.dtype) for a in arrays)
    reduced = jax.lax.reduce(
        arrays,
        inits,
        lambda a, b: tuple(jnp.maximum(x, y) for x, y in zip(a, b, strict=True)),
        axes,
    )
    return (jnp.maximum(*reduced),) if single else tuple(reduced)


def _max_of_slices(array: Array, axis: int) -> Array:
    slices = [
        jax.lax.index_in_dim(array, i, axis, keepdims=False) for i in range(array.shape[axis])
    ]
    return functools.reduce(jnp.maximum, slices)


def stack_checks(violations: tuple[Array, ...], axes: tuple[int, ...], shape, dtype) -> Array:
    """Check violations (one array per check, of one shape `shape`) maximised over
    `axes` and stacked along a last axis: `(*remaining axes, n_checks)`."""
    if not violations:
        kept = tuple(n for i, n in enumerate(shape) if i not in axes)
        return jnp.zeros((*kept, 0), dtype)
    return jnp.stack(max_each(violations, axes), axis=-1)


def any_nan(arrays: list[Array], stacks: tuple[Array, ...] = ()) -> Array:
    """Whether any of `arrays` or `stacks` has a NaN (`max` propagates it).

    A stack of continuations (materialised by its concatenation anyway) in one kernel
    (`one_kernel_reduce`). Each other array deliberately by `jnp.max`, two kernels: XLA
    cannot fuse a prepared continuation into that reduction, so it materialises it once,
    in the layout the Bellman kernel gathers from. Fused into a variadic reduction
    instead, the preparation (a transpose) is also fused into the Bellman kernel's
    gathers, which then read strided: the unsplayed solve of `benchmarks/splay.py`'s
    alive model took 2-3x as long (also with the prepared array behind an optimization
    barrier).
    """
    highest = [jnp.max(a) for a in arrays]
    highest += [one_kernel_reduce(jnp.maximum, -jnp.inf, a, tuple(range(a.ndim))) for a in stacks]
    if not highest:
        return jnp.asarray(False)
    return jnp.isnan(functools.reduce(jnp.maximum, highest))


def probability_tolerance() -> float:
    return 1e-6 if jnp.zeros(()).dtype == jnp.float64 else 1e-5


def aggregator_check(aggregator, parameter: str) -> str:
    return f"{parameter}:aggregator:{type(aggregator).__name__}"


def aggregator_checks(regime: RegimePlan) -> tuple[str, ...]:
    """The check names of a regime's aggregator: one per parameter (its valid range,
    tested once per period) and `utility:positive` where the aggregator needs it."""
    aggregator = regime.aggregator
    if aggregator is None or regime.is_terminal:
        return ()
    names = tuple(aggregator_check(aggregator, p) for p in aggregator.parameters)
    # An aggregator that needs positive utility transforms the values it reads (a power):
    # the transformed values must stay within `reach` (see `_continuation.py`).
    names = (*names, *aggregator.value_checks)
    return (*names, "utility:positive", "value:range") if aggregator.positive_utility else names
