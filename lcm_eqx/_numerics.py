"""Precision and tolerances: the library's choice, not the device's.

A TPU computes a float32 matrix product or contraction at its default precision in one
pass of bfloat16 (about three significant digits); a CPU computes it in float32. On the
full Mahler–Yum example that made a TPU's period-0 values 1.9 % (median) and 4.5 %
(max) off the CPU's, silently (docs/tuning.md, "Running on an accelerator"). Every
contraction the library emits (the expectations over stochastic states) therefore names
`CONTRACTION_PRECISION`, and every user function runs under `exact_contractions()`, so
that a `jnp.dot` in a utility is computed alike on every device: on that model the TPU's
values then equal the CPU's float32 values to 1.1e-6 relative, at the same speed.

A TPU's float32 `exp`, `log`, `log1p` and `expm1` err by more than round-off at its
default accuracy (`log` by 1.1e-4 absolute, 1e-7 on a CPU). On a TPU every user function
runs with them at `AccuracyMode.HIGHEST` (`with_precise_transcendentals`), which the
TPU computes to round-off at the same speed.

Numerical tolerances scale with the dtype in use (`relative`): a check that compares two
computations of one number allows a number of roundings of that dtype, never a fixed
float64 figure.

And the reductions every layer uses (grids, readers, solvers): variadic ones that keep a
reduction in one XLA kernel, and the search of a point among sorted grid points.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
from jax.extend import core as jax_core
from jaxtyping import Array

# What every contraction (einsum, dot) that the library emits computes in: float32 on a
# TPU (six bfloat16 passes), the CPU's default elsewhere.
CONTRACTION_PRECISION = jax.lax.Precision.HIGHEST


def exact_contractions():
    """A context in which contractions written without a `precision` (a `jnp.dot` in a
    user's function) compute at `CONTRACTION_PRECISION`. Entered at trace time."""
    return jax.default_matmul_precision("highest")


def relative(tolerance: float, roundings: int | float, dtype) -> float:
    """`tolerance`, or `roundings` roundings of `dtype` where that is more (a tolerance
    written for float64 that float32 cannot meet becomes float32's own)."""
    return max(tolerance, roundings * float(jnp.finfo(dtype).eps))


def default_platform() -> str:
    """The platform that a program without placed inputs runs on: `jax.default_device`'s
    where one is set, else the default backend's."""
    device = getattr(jax.config, "jax_default_device", None)
    if device is None:
        return jax.default_backend()
    return device if isinstance(device, str) else device.platform


def on_accelerator() -> bool:
    """Whether the program traced now takes the accelerator's forms (`by_platform`):
    where its default device (`default_platform`) is not a CPU."""
    return default_platform() != "cpu"


def by_platform(*operands, cpu: Callable, default: Callable):
    """`cpu(*operands)` in a program for a CPU, `default(*operands)` for an accelerator.

    Where the library writes one computation in two forms (a CPU and a TPU compile and
    run different forms fastest), both compute the same numbers. The form is chosen when
    the program is traced, by its default device (`on_accelerator`), not with
    `jax.lax.platform_dependent`, which traces and lowers every form into the program
    for the compiler to choose: the validated full Mahler-Yum solve had 66 such choices,
    which made its trace and lowering half as long again on a TPU. A program placed on
    another device than the default runs the other form: the same numbers, at the other
    device's speed.
    """
    return (default if on_accelerator() else cpu)(*operands)


# The functions that a TPU v5e computes in float32 to round-off only when asked
# (`AccuracyMode.HIGHEST`; measured 2026-12-07 over [1e-4, 1e4] and [-20, 20]): `log` 1.1e-4
# absolute at its default accuracy, 8e-7 at the highest; `exp` 5.5e-6 relative, 1.2e-7;
# `expm1` 1.2e-4, 1.6e-7; `log1p` round-off at both. The same speed. A `Tolerance` instead
# of the mode crashed its compiler ("No implementation found for requested accuracy"),
# and the other transcendental functions were not measured: they are left as they are.
PRECISE_FUNCTIONS = frozenset({"exp", "log", "log1p", "expm1"})


def precise_transcendentals_needed() -> bool:
    """Whether user functions traced now run with `with_precise_transcendentals`: where
    the program's default device is a TPU (elsewhere the default accuracy is round-off)."""
    return default_platform() == "tpu"


def with_precise_transcendentals(fn: Callable) -> Callable:
    """`fn` (called with keyword arguments) with every `PRECISE_FUNCTIONS` operation in it,
    and in the JAX functions it calls, at `jax.lax.AccuracyMode.HIGHEST`.

    Traced into a jaxpr, the operations' accuracy set, and the jaxpr evaluated in the
    caller's trace. The arguments that are not traced (constants) stay constants of the
    function. A function without such an operation is called as it is.
    """

    @functools.wraps(fn)
    def precise(**kwargs):
        leaves, tree = jax.tree.flatten(kwargs)
        traced = [i for i, x in enumerate(leaves) if isinstance(x, jax.core.Tracer)]
        if not traced:
            return fn(**kwargs)

        def of_traced(*values):
            filled = list(leaves)
            for i, value in zip(traced, values, strict=True):
                filled[i] = value
            return fn(**jax.tree.unflatten(tree, filled))

        arguments = [leaves[i] for i in traced]
        closed, shapes = jax.make_jaxpr(of_traced, return_shape=True)(*arguments)
        rewritten = _precise_closed(closed)
        if rewritten is closed:
            return fn(**kwargs)
        outputs = jax_core.jaxpr_as_fun(rewritten)(*arguments)
        return jax.tree.unflatten(jax.tree.structure(shapes), outputs)

    return precise


_REWRITTEN: dict[int, tuple] = {}


def _precise_closed(closed):
    """`closed` (a ClosedJaxpr) with `PRECISE_FUNCTIONS` at the highest accuracy; the same
    object where it has none. The jaxprs of the JAX functions a user function calls are
    shared between calls (jit's cache): rewritten once, so that the program keeps one
    copy of each."""
    memo = _REWRITTEN.get(id(closed))
    if memo is not None and memo[0] is closed:
        return memo[1]
    jaxpr = _precise_jaxpr(closed.jaxpr)
    result = closed if jaxpr is closed.jaxpr else closed.replace(jaxpr=jaxpr)
    if len(_REWRITTEN) > 4096:
        _REWRITTEN.clear()
    _REWRITTEN[id(closed)] = (closed, result)
    return result


def _precise_jaxpr(jaxpr):
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        params = eqn.params
        if eqn.primitive.name in PRECISE_FUNCTIONS and params.get("accuracy") is None:
            params = {**params, "accuracy": jax.lax.AccuracyMode.HIGHEST}
        else:
            params = {name: _precise_param(value) for name, value in params.items()}
        if any(params[name] is not eqn.params[name] for name in params):
            eqn, changed = eqn.replace(params=params), True
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _precise_param(value):
    """A primitive's parameter with the jaxprs in it rewritten (a jit's body, a cond's
    branches, a loop's body, a custom derivative's primal)."""
    if isinstance(value, jax_core.ClosedJaxpr):
        return _precise_closed(value)
    if isinstance(value, jax_core.Jaxpr):
        return _precise_jaxpr(value)
    if isinstance(value, tuple) and any(
        isinstance(v, (jax_core.ClosedJaxpr, jax_core.Jaxpr)) for v in value
    ):
        rewritten = tuple(_precise_param(v) for v in value)
        return value if all(a is b for a, b in zip(rewritten, value, strict=True)) else rewritten
    return value


def float64_on_device_without_it() -> str | None:
    """A warning when float64 is on and the default device computes it in software."""
    platform = default_platform()
    if jnp.zeros(()).dtype != jnp.float64 or platform != "tpu":
        return None
    return (
        "float64 is on (jax_enable_x64), but the default device is a TPU, which has no "
        "native float64: XLA emulates it, and the library's programs then compile for "
        "minutes (the reduced Mahler-Yum solve had not compiled after 140 s) and run far "
        "slower. Use float32 there (leave jax_enable_x64 off: on a TPU the library's "
        "float32 results equal the CPU's to float32 round-off), or run on the CPU with "
        "`with jax.default_device(jax.devices('cpu')[0]): ...`."
    )


# ----------------------------------------------------------------------------- reductions
def reduce_pair(
    op: Callable, identity, x: Array, y: Array, axis: int | tuple[int, ...]
) -> tuple[Array, Array]:
    """`x` and `y` (same shape and dtype) reduced along `axis` (one or several) by the
    associative `op` (`jax.lax.add`, `jax.lax.max`, `jax.lax.bitwise_or`) in one XLA
    kernel (a variadic reduction), without derivative (for counts, selections and check
    diagnostics).

    XLA:CPU rewrites a reduction over more than 32 entries into two kernels (a
    reduce-window, then a reduce), but leaves variadic reductions alone.
    """
    x, y = jax.lax.stop_gradient((x, y))
    init = jnp.asarray(identity, x.dtype)
    axes = (axis,) if isinstance(axis, int) else axis
    return jax.lax.reduce(
        (x, y),
        (init, init),
        lambda a, b: (op(a[0], b[0]), op(a[1], b[1])),
        tuple(sorted(a % x.ndim for a in axes)),
    )


def one_kernel_reduce(op: Callable, identity, x: Array, axis: int | tuple[int, ...]) -> Array:
    """`x` reduced along `axis` (one or several) by `op` in one XLA kernel with the
    computation of `x`, without derivative: `reduce_pair` of `x` and a constant array of
    the identity, the two results combined by `op` (XLA would drop an unused result; a
    second copy of `x` would keep `x` in a kernel of its own). The same values as the
    plain reduction for an exact `op` (integer sums, max, or)."""
    filler = jnp.full(x.shape, identity, x.dtype)
    first, second = reduce_pair(op, identity, x, filler, axis)
    return op(first, second)


def count_at_or_below(points: Array, x: Array) -> Array:
    """How many of the sorted `points` are `<= x` (`searchsorted(..., side="right")`).

    Two levels of comparisons: with every `b`-th point (`b ≈ √n`), then within that
    block. About `2√n` comparisons and one small gather: as fast as an unrolled binary
    search in the vmapped reads of the solve and the simulation (and 1.6x faster than
    comparing with every point), and a handful of XLA kernels instead of one per
    bisection step, which keeps the compile time down.

    The comparisons with the block heads are counted in int32 by a variadic reduction
    (`one_kernel_reduce`): in the read of the values after the period loop (all periods,
    choices and state nodes at once), the plain int64 sum took 16-21 µs and this one
    2.4 µs (the same counts; `model.solve` 0.96 of before).
    """
    n = points.shape[0]
    block = max(4, math.isqrt(n - 1) + 1)
    n_blocks = -(-n // block)
    padded = jnp.concatenate([points, jnp.full(n_blocks * block - n, jnp.inf, points.dtype)])
    heads = (padded[::block] <= x).astype(jnp.int32)
    first = jnp.maximum(one_kernel_reduce(jax.lax.add, 0, heads, 0) - 1, 0)
    window = jax.lax.dynamic_slice_in_dim(padded, first * block, block)
    return first * block + jnp.sum(window <= x)


# ------------------------------------------------------------------- small linear systems
# The refined grid search solves a Newton system of one to a few refined actions at every
# state. `jnp.linalg.solve` and `eigvalsh` lower on a CPU to LAPACK custom calls that split
# their batch over XLA's intra-op thread pool from inside a worker of that same pool: two
# such calls at once on a 2-core machine held both workers, each waiting for the other's
# share, and the reduced Mahler–Yum estimation hung (jaxlib 0.10.2, `lapack_dtrsm_ffi` in
# `ParallelBatchMap`, every thread asleep). Elimination unrolled in `jax.numpy` is plain
# elementwise work that XLA fuses with the kernel around it, on every device.


def solve_small(matrix: Array, rhs: Array) -> Array:
    """`x` with `matrix @ x = rhs` for a small `(n, n)` system (`n` static): Gaussian
    elimination with partial pivoting, unrolled. A singular system gives non-finite
    entries (as LAPACK's does), which callers test."""
    n = matrix.shape[-1]
    if n == 1:
        return rhs / matrix[..., 0, :]
    a = jnp.concatenate([matrix, rhs[..., None]], axis=-1)
    for k in range(n):
        pivot = k + jnp.argmax(jnp.abs(a[k:, k]))
        rows = jnp.arange(n)
        order = jnp.where(rows == k, pivot, jnp.where(rows == pivot, k, rows))
        a = a[order]
        below = a[k + 1 :, k] / a[k, k]
        a = a.at[k + 1 :].add(-below[:, None] * a[k])
    x = jnp.zeros(n, a.dtype)
    for k in reversed(range(n)):
        x = x.at[k].set((a[k, n] - jnp.sum(a[k, k + 1 : n] * x[k + 1 :])) / a[k, k])
    return x


def negative_definite(matrix: Array) -> Array:
    """Whether the symmetric `(n, n)` `matrix` is negative definite: every pivot of its
    elimination without exchanges is negative (Sylvester's criterion on `-matrix`)."""
    n = matrix.shape[-1]
    a = matrix
    negative = a[0, 0] < 0
    for _ in range(n - 1):
        a = a[1:, 1:] - jnp.outer(a[1:, 0], a[0, 1:]) / a[0, 0]
        negative = negative & (a[0, 0] < 0)
    return negative
