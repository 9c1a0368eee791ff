"""DC-EGM's rows: the choices of one or several regimes as rows of one array, and the
maps over a regime's discrete states and choices.

A pass over rows (`DCEGM.solve_batched`) inverts, refines and reads every choice of the
regimes of a period together, each row with its own regime's utility (`row_utility`);
the same XLA kernels then serve every regime rather than a copy per regime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._axes import map_axis
from .._continuation import NEG_INF
from .._kernel import RegimeProblem
from ._envelope import EndogenousGrid, materialize


class Block(NamedTuple):
    """Consecutive rows of one regime in `_egm.refine_rows`: its utility and marginal
    utility of a row's discrete codes (`_egm.utility_of`), the rows' codes (host arrays),
    and how many rows."""

    functions: Callable[[dict[str, Array]], tuple[Callable, Callable]]
    codes: dict[str, np.ndarray]
    size: int


def materialized(raw: dict[str, Array]) -> dict[str, Array]:
    """`raw` with its endogenous points `(m, c, v, mu)` computed once, for all of them
    together, rather than inside each of the envelope's kernels (see `materialize`)."""
    keys = ("m", "c", "v", "mu")
    return {**raw, **dict(zip(keys, materialize(*(raw[k] for k in keys)), strict=True))}


def codes_of_rows(blocks: list[Block]) -> tuple[Array, list[dict[str, Array]]]:
    """Each row's block, and for each block the codes of its regime's discrete
    variables in every row: the row's own in the block's rows, 0 elsewhere (so that
    each regime's functions in `_selected` are evaluated at valid codes of its own grids)."""
    sizes = [block.size for block in blocks]
    codes = []
    for b, block in enumerate(blocks):
        codes.append(
            {
                name: jnp.asarray(
                    np.concatenate(
                        [
                            own if c == b else np.zeros(size, np.int32)
                            for c, size in enumerate(sizes)
                        ]
                    )
                )
                for name, own in block.codes.items()
            }
        )
    regime = np.concatenate([np.full(size, b, np.int32) for b, size in enumerate(sizes)])
    return jnp.asarray(regime), codes


def row_utility(blocks: list[Block], k: Array, codes: list[dict[str, Array]]):
    """The utility and marginal utility of a row of block `k`, each block's functions
    at its own `codes` of that row."""
    rows = [block.functions(own) for block, own in zip(blocks, codes, strict=True)]
    return rows[0] if len(rows) == 1 else _selected(k, rows)


def _selected(index: Array, rows: list[tuple[Callable, Callable]]) -> tuple[Callable, Callable]:
    """The utility and marginal utility of `rows[index]`: every row's function is
    evaluated and the one of `index` selected (in the same XLA kernels; the callers map
    over rows, where a `lax.switch` would become this selection too).

    A selection, not `lax.switch`: under `vmap` a switch is traced as sub-programs of
    each branch, batched again, plus the index's clamping (about a tenth of a DC-EGM
    period's traced operations with two regimes), for the same program."""

    def dispatch(functions):
        def selected(x):
            outs = [jnp.asarray(f(x)) for f in functions]
            dtype = jnp.result_type(*outs)
            return jax.lax.select_n(index, *(o.astype(dtype) for o in outs))

        return selected

    return dispatch([row[0] for row in rows]), dispatch([row[1] for row in rows])


def plus_discounted(utility, beta, expected):
    """`utility + beta * expected`, `-inf` where `expected` is, with a finite derivative."""
    finite = jnp.isfinite(expected)
    return jnp.where(finite, utility + beta * jnp.where(finite, expected, 0.0), NEG_INF)


def euler_target(beta, marginal_expected, cap) -> Array:
    """`u'(c)` that the Euler equation asks for, `β·E[R·V'_m]`, floored at `cap` (`u'` at
    the consumption cap, without derivative: where the continuation's marginal value is
    0, the choice consumes the cap)."""
    q = beta * marginal_expected
    return jnp.maximum(q, jax.lax.stop_gradient(cap.astype(q.dtype)))


def lift_with_readers(fn, axes, point, readers, problem: RegimeProblem):
    """`fn(point, readers)` on the product of the discrete state `axes`.

    A sharded state that never transitions is mapped jointly with the matching axis of
    every reader's arrays, so each state point reads only its own slice of next period
    and the sweep needs no communication between devices.
    """
    if not axes:
        return fn(point, readers)
    first, rest = axes[0], axes[1:]
    joint = (
        {t: r for t, r in readers.items() if first.name in r.axes}
        if problem.stays_sharded(first.name)
        else {}
    )
    leading = {t: r.leading(first.name) for t, r in joint.items()}

    def inner(args):
        code, slices = args
        inner_readers = dict(readers)
        for target, data in slices.items():
            inner_readers[target] = joint[target].sliced(first.name, code, data)
        return lift_with_readers(fn, rest, {**point, first.name: code}, inner_readers, problem)

    return map_axis(inner, (first.points, leading), first.batch_size)


def lift_choices(fn, axes, point):
    """`fn(point)` on the product of discrete `axes` (vmap, or splay by batch_size)."""
    if not axes:
        return fn(point)
    first, rest = axes[0], axes[1:]
    return map_axis(
        lambda x: lift_choices(fn, rest, {**point, first.name: x}), first.points, first.batch_size
    )


def map_choices(fn, arrays, names: list[str]):
    """`fn(codes, nodes, count, continuation0, feasible, limit)` for every discrete state
    and action on the leading axes (named `names`) of `arrays` (those five arrays of an
    `EndogenousGrid`, or the grid itself): a vmap along each axis, so each call sees its
    own slices without indexing (gathers) by code."""
    if isinstance(arrays, EndogenousGrid):
        arrays = grid_arrays(arrays)

    def over(depth, codes, *arrays):
        if depth == len(names):
            return fn(codes, *arrays)
        size = arrays[1].shape[0]
        return jax.vmap(lambda k, *arrays: over(depth + 1, {**codes, names[depth]: k}, *arrays))(
            jnp.arange(size, dtype=jnp.int32), *arrays
        )

    return over(0, {}, *arrays)


def grid_arrays(grid: EndogenousGrid) -> tuple[Array, ...]:
    """The per-choice arrays of an `EndogenousGrid` (`nodes`, `count`, `continuation0`,
    `feasible`, `borrowing_limit`), the limit broadcast to the choices' shape."""
    limit = jnp.broadcast_to(grid.borrowing_limit, grid.count.shape)
    return grid.nodes, grid.count, grid.continuation0, grid.feasible, limit
