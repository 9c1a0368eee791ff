"""Reductions in one XLA kernel: for counts, selections and check diagnostics, where
XLA:CPU would otherwise split a reduction into two kernels (see docs/architecture.md,
"threads")."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array


def reduce_pair(op: Callable, identity, x: Array, y: Array, axis: int) -> tuple[Array, Array]:
    """`x` and `y` (same shape and dtype) reduced along `axis` by the associative `op`
    (`jax.lax.add`, `jax.lax.max`, `jax.lax.bitwise_or`) in one XLA kernel (a variadic
    reduction), without derivative (for counts, selections and check diagnostics).

    XLA:CPU rewrites a reduction over more than 32 entries into two kernels (a
    reduce-window, then a reduce), but leaves variadic reductions alone.
    """
    x, y = jax.lax.stop_gradient((x, y))
    init = jnp.asarray(identity, x.dtype)
    return jax.lax.reduce(
        (x, y), (init, init), lambda a, b: (op(a[0], b[0]), op(a[1], b[1])), (axis % x.ndim,)
    )


def one_kernel_reduce(op: Callable, identity, x: Array, axis: int) -> Array:
    """`x` reduced along `axis` by `op` in one XLA kernel with the computation of `x`,
    without derivative: `reduce_pair` of `x` and a constant array of the identity, the
    two results combined by `op` (XLA would drop an unused result; a second copy of `x`
    would keep `x` in a kernel of its own). The same values as the plain reduction for an
    exact `op` (integer sums, max, or)."""
    filler = jnp.full(x.shape, identity, x.dtype)
    first, second = reduce_pair(op, identity, x, filler, axis)
    return op(first, second)
