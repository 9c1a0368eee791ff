"""Structure-aware grid search: each piece of a regime's Bellman objective evaluated on
the axes it depends on, and actions eliminated inside the pieces that contain them.

The objective of one (state, action) point, `q = where(feasible, u + β·E[V'], -inf)`,
is traced once into a flat jaxpr of scalars (one input per state and action axis). Its
value is split into additive *terms* (through `+`, `-`, negation and the selects that
give `-inf` where a constraint fails, whose predicates split through `&` into *masks*),
and the axes every term, mask and check depends on are read off the jaxpr. A *piece*
collects the terms and masks of equal axes and is evaluated on the product of its own
axes; `E[V']`, for instance, once per distinct next state rather than once per pair.

The maximum over actions is then taken by variable elimination in the (max, +)
semiring, with `λ·logsumexp(·/λ)` for discrete actions under taste shocks (after every
continuous action, as `GridSearch` reduces them): each action is maximised over the
pieces that contain it, forming a new piece on their other axes, in a greedy order that
keeps the largest product small. The checks are reduced over the actions on their own
axes. Values, checks and derivatives equal the plain product's up to the order of
floating-point sums; where the structure buys less than `_MIN_GAIN` (a model whose
every piece depends on every axis), `GridSearch` evaluates the plain product instead.

The plan (terms, pieces and the order of elimination) is made by `_factor_plan.py`;
this module evaluates the pieces and eliminates the actions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ._axes import (
    EVALUATION_BYTES,
    Axis,
    Carried,
    auto_splayed,
    lift,
    map_axis,
    reduce_axis,
)
from ._check_arrays import max_each
from ._factor_plan import Factoring, Piece, Step, Term, elimination_order, piece_outputs
from ._kernel import RegimeProblem
from ._reduce import at_first_maximum, max_along, smooth_max
from ._refine import refine_along

# The checks of a period are reduced over the states in one reduction where they fit on
# the union of their axes in this many points (all checks together), else one per shape.
_ONE_REDUCTION = 2**16


def solve_factored(
    problem: RegimeProblem, factoring: Factoring, evaluate: Callable, scale, refine=None
) -> tuple[Array, Array]:
    """The period's value array (the state shape) and its checks (one array: an axis
    per state, of size 1 where not sharded, and one entry per check of `problem.checks`
    last), by elimination.

    With `factoring.refined` (a plan for `GridSearch(refine=...)`, `refine` its
    settings), the results the plain refinement gives: for each discrete choice, the
    best point of the continuous grids, the refined action polished there with the
    others at their best, and the discrete choices compared by those refined values.
    The refined action is eliminated first: at each point of that step's other axes
    the grid's best point along it, and the pieces that contain it polished off the grid
    from there (`_refine.refine_along`). From then on each result carries two arrays,
    the grid's maximum (which the later continuous steps maximise: the grid search
    picks the other continuous actions by it) and the refined value at the grid's
    choice (what the plain refinement's value is); the discrete actions, eliminated
    last, compare the refined values."""
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    dtype = jnp.zeros(()).dtype
    itemsize = np.zeros((), dtype).itemsize
    states = factoring.states

    def on_axes(names: tuple[str, ...], fn: Callable):
        return evaluate_on_axes(problem, states, names, fn)

    # The check components, by their axes: those on a piece's axes are evaluated with
    # that piece, in one function, so that what they share (a feasibility mask, the
    # quantities it reads) is computed once per point; the others on their own.
    by_axes: dict[tuple[str, ...], list[int]] = {}
    for index, (names, _) in enumerate(factoring.check_components):
        by_axes.setdefault(names, []).append(index)
    reduced: list = [None] * len(factoring.check_components)

    def evaluated(outputs: list, indices, point) -> tuple[list, tuple[Array, ...]]:
        """`outputs` and the products of the check components `indices` at `point`, in
        one evaluation (each equation bound once)."""
        factors = [list(factoring.check_components[i][1]) for i in indices]
        values = evaluate(outputs + [f for fs in factors for f in fs], point)
        rest, start = values[len(outputs) :], 0
        out = []
        for fs in factors:
            out.append(_product(rest[start : start + len(fs)], dtype))
            start += len(fs)
        return values[: len(outputs)], tuple(out)

    def products(indices, point):
        return evaluated([], indices, point)[1]

    def keep_reduced(names: tuple[str, ...], indices: list[int], arrays) -> None:
        """The products of the components `indices` (on the axes `names`) maximised
        over their actions, broadcast to the state axes."""
        over = tuple(i for i, n in enumerate(names) if n not in states)
        kept = tuple(n for n in names if n in states)
        for index, array in zip(indices, max_each(tuple(arrays), over), strict=True):
            reduced[index] = broadcast_axes(array, kept, states)

    # Each result: its axes, its array, and where the refined action was eliminated into
    # it, the refined value (its array then the grid's maximum, without derivative).
    results: list[tuple[tuple[str, ...], Array, Array | None]] = []
    refined_checks: list[tuple[tuple[str, ...], list[int], tuple]] = []
    for piece in factoring.pieces:
        with_checks = by_axes.pop(piece.axes, [])

        def piece_and_checks(point, piece=piece, indices=with_checks):
            values, checks = evaluated(piece_outputs(piece), indices, point)
            return piece_value(piece, values, dtype), checks

        array, arrays = on_axes(piece.axes, piece_and_checks)
        results.append((piece.axes, array, None))
        if with_checks:
            keep_reduced(piece.axes, with_checks, arrays)

    discrete = frozenset(problem.regime.discrete_actions)
    for step in factoring.steps:
        members = [results[i] for i in step.group]
        out = tuple(n for n in step.axes if n != step.action)
        todo = step_chunks(step, axes, states, itemsize)
        if step.action == factoring.refined:
            # Original pieces only (`plan_factoring` eliminates it first).
            indices = [
                i for i, (names, _) in enumerate(factoring.check_components) if step.action in names
            ]
            grid, paid, checks = _refined_step(
                problem, factoring, evaluate, evaluated, step, members, todo, indices, refine
            )
            results.append((out, grid, paid))
            if indices:
                refined_checks.append((out, indices, checks))
        elif any(paid is not None for _, _, paid in members) and step.action not in discrete:
            # The grid's best point along the action (by the grid's maxima), and the
            # refined value there.
            def best(totals, position):
                grid, paid = totals
                return at_first_maximum(grid, position, (grid, paid))[1]

            group: list = [
                (n, (jax.lax.stop_gradient(a), a if paid is None else paid))
                for n, a, paid in members
            ]
            grid, paid = eliminate_with(step, group, todo, best)
            results.append((out, grid, paid))
        else:
            group = [(n, a if paid is None else paid) for n, a, paid in members] or [
                nothing_piece(step, factoring, dtype)
            ]
            results.append((out, _eliminate(step, group, todo, scale), None))

    value = jnp.zeros(tuple(factoring.sizes[n] for n in states), dtype)
    for index in factoring.final:
        names, array, refined_value = results[index]
        value = value + broadcast_axes(
            array if refined_value is None else refined_value, names, states
        )
    value = drop_tangent_at_neg_inf(value)

    # The other components of equal axes evaluated together and reduced over their
    # actions in one variadic reduction (`max_each`: one XLA kernel for all of them).
    for names, indices in by_axes.items():
        arrays = (
            on_axes(names, functools.partial(products, indices)) if names else products(indices, {})
        )
        keep_reduced(names, indices, arrays)
    # The components that read the refined action, at the refined points too.
    grid_reduced = list(reduced)
    for names, indices, arrays in refined_checks:
        keep_reduced(names, indices, arrays)
        for index in indices:
            reduced[index] = jnp.maximum(reduced[index], grid_reduced[index])

    return value, combined_checks(problem, factoring, reduced, value.shape)


def _refined_step(
    problem: RegimeProblem,
    factoring: Factoring,
    evaluate: Callable,
    evaluated: Callable,
    step: Step,
    members: list,
    todo: tuple[tuple[str, int], ...],
    check_indices: list[int],
    refine,
) -> tuple[Array, Array, tuple]:
    """The first step of a refined plan (`solve_factored`): on the step's axes but the
    refined action, the grid's maximum of its pieces along it (no derivative), the
    refined value of those pieces (`_refine.refine_along` from the grid's best point:
    derivatives by the envelope theorem, or along a kink), and the products of the
    check components `check_indices` at the refined point."""
    action = step.action
    dtype = jnp.zeros(()).dtype
    pieces = [factoring.pieces[i] for i in step.group]
    flat = [v for p in pieces for v in piece_outputs(p)]
    points = next(a for a in problem.action_axes if a.name == action).points

    def at(point, code):
        def along(t):
            values, checks = evaluated(flat, check_indices, {**point, action: t})
            return pieces_total(pieces, values, dtype), checks

        return refine_along(along, points, code, refine)

    grid, _, (paid, checks) = refine_in_step(problem, factoring, step, members, todo, at)
    return grid, paid, checks


def step_chunks(
    step: Step, axes: dict[str, Axis], states: tuple[str, ...], itemsize: int
) -> tuple[tuple[str, int], ...]:
    """The state axes of `step`'s result chunked, with their chunk sizes, where the step's
    product would not fit at once (or where the user splays them): the knobs and the
    budget of the plain evaluation."""
    out = tuple(n for n in step.axes if n != step.action)
    chunked = auto_splayed(
        tuple(axes[n] for n in out if n in states),
        tuple(axes[n] for n in step.axes if n not in states),
        itemsize,
    )
    return tuple((a.name, a.batch_size) for a in chunked if 0 < a.batch_size < a.points.shape[0])


def refine_in_step(
    problem: RegimeProblem,
    factoring: Factoring,
    step: Step,
    members: list,
    todo: tuple[tuple[str, int], ...],
    refine_at: Callable,
) -> tuple[Array, Array, Any]:
    """The step that eliminates the refined action (the first of a refined plan), on its
    axes but the action: the grid's maximum of the pieces that contain it (no
    derivative), its maximiser (grid codes), and `refine_at(point, code)` at each point
    of those axes (the refinement from the grid's best point), splayed as the knobs and
    the evaluation budget say."""
    out = tuple(n for n in step.axes if n != step.action)

    def best(totals, position):
        (total,) = totals
        return jnp.max(total, axis=position), at_first_maximum(total, position)[0]

    group = [(n, (jax.lax.stop_gradient(a),)) for n, a, _ in members]
    grid, codes = eliminate_with(step, group, todo, best)
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    itemsize = np.zeros((), jnp.zeros(()).dtype).itemsize
    chosen = tuple(axes[n] for n in out)
    splayed = {
        a.name: a
        for a in auto_splayed(
            tuple(a for a in chosen if a.name in factoring.states),
            tuple(a for a in chosen if a.name not in factoring.states),
            itemsize,
        )
    }
    refined = lift(
        lambda point, arrays: refine_at(point, arrays["code"]),
        tuple(splayed.get(a.name, a) for a in chosen),
        carried={"code": Carried(codes, out)},
    )
    return grid, codes, refined


def pieces_total(pieces, values: list, dtype) -> Array:
    """The sum of `pieces`' values from `values` (their `piece_outputs` in order)."""
    total, start = None, 0
    for piece in pieces:
        n = len(piece_outputs(piece))
        v = piece_value(piece, values[start : start + n], dtype)
        total = v if total is None else total + v
        start += n
    assert total is not None  # a step's group holds at least one piece
    return total


def combined_checks(
    problem: RegimeProblem, factoring: Factoring, reduced: list, state_shape: tuple[int, ...]
) -> Array:
    """The checks of `problem.checks` from their components maximised over their actions
    (`reduced`, one array per `factoring.check_components`, broadcast to the state axes):
    each alternative the product of its components, each check the maximum of its
    alternatives, reduced over the state axes that are not sharded (the backward
    induction reduces the checks over those anyway, and the sharded ones after the
    loop). One array: an axis per state, of size 1 where reduced, the checks last.
    Where no state is sharded and the checks fit one reduction, they are returned
    unreduced, on the union of their axes (size 1 elsewhere): the backward induction
    reduces them with the other regimes' checks (`_backward._merge_checks`)."""
    dtype = jnp.zeros(()).dtype
    sharding = problem.sharding
    sharded = [sharding is not None and sharding.is_sharded(n) for n in factoring.states]
    over = tuple(i for i, keep in enumerate(sharded) if not keep)
    shape = tuple(n if keep else 1 for n, keep in zip(state_shape, sharded, strict=True))
    if not factoring.checks:
        return jnp.zeros((*shape, 0), dtype)
    # Each check on the union of its components' axes (size 1 elsewhere), not yet
    # reduced over the states.
    unreduced = []
    for alternatives in factoring.checks:
        check = jnp.zeros((), dtype)
        for alternative in alternatives:
            term = jnp.ones((), dtype)
            for index in alternative:
                term = term * reduced[index]
            check = jnp.maximum(check, term)
        unreduced.append(jnp.broadcast_to(check, jnp.broadcast_shapes(check.shape, shape)))
    # Stacked and reduced over the states in one reduction (one XLA kernel that also
    # computes the products) where all of them fit on the union of their axes, else one
    # variadic reduction per shape: a reduction per check was a kernel per check in
    # every period (the Mahler-Yum example's 24 checks: 14 kernels of a few hundred
    # points each). The checks are >= 0 (or NaN) before the reduction.
    union = jnp.broadcast_shapes(*(c.shape for c in unreduced))
    if math.prod(union) * len(unreduced) <= _ONE_REDUCTION:
        stacked = jnp.stack([jnp.broadcast_to(c, union) for c in unreduced], axis=-1)
        if not any(sharded):
            # Reduced by the backward induction, together with the other regimes'
            # checks (`_backward._merge_checks`): one kernel for all of them.
            return jax.lax.stop_gradient(stacked)
        (highest,) = max_each((stacked,), over)
        highest = jnp.expand_dims(highest, over)
        return jax.lax.stop_gradient(jnp.broadcast_to(highest, (*shape, len(unreduced))))
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(unreduced):
        by_shape.setdefault(tuple(c.shape), []).append(i)
    checks: list = [None] * len(unreduced)
    for indices in by_shape.values():
        group = max_each(tuple(unreduced[i] for i in indices), over)
        for i, high in zip(indices, group, strict=True):
            checks[i] = jnp.broadcast_to(jnp.expand_dims(high, over), shape)
    # Flags, without derivative (as the plain product's `max_each`): concrete under an
    # eager `jax.grad`, so `solve` reports them on the host.
    return jax.lax.stop_gradient(jnp.stack(checks, axis=-1))


def checks_apart(problem: RegimeProblem, factoring: Factoring, evaluate: Callable) -> Array:
    """The checks of a period whose value the plain product computes (`GridSearch` where
    factoring buys too little), each component of a check evaluated on its own axes and
    maximised over its actions, as `combined_checks` returns them.

    The plain product's `q` would compute every check at every state-action pair, in a
    pass over the whole product of its own (XLA does not fuse a reduction of several
    outputs into the kernel that materialises the values for their maximum): a check
    that depends on the period and the parameters alone, such as a survival probability
    indexed by the period, was reduced over every pair. On its own axes it costs next to
    nothing, and a component that depends neither on the period nor on next period's
    values (a next continuous state that is NaN or infinite) is hoisted by XLA out of
    the period loop. A component that spans the whole product is still reduced chunk by
    chunk over its actions (the knobs of the action axes, and the state axes splayed as
    the plain product's are), never stored whole.
    """
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    dtype = jnp.zeros(()).dtype
    itemsize = np.zeros((), dtype).itemsize
    states = factoring.states
    by_axes: dict[tuple[str, ...], list[int]] = {}
    for index, (names, _) in enumerate(factoring.check_components):
        by_axes.setdefault(names, []).append(index)
    reduced: list = [None] * len(factoring.check_components)
    for names, indices in by_axes.items():
        factors = [list(factoring.check_components[i][1]) for i in indices]
        flat = [f for fs in factors for f in fs]

        def products(point, factors=factors, flat=flat) -> tuple[Array, ...]:
            values, out, start = evaluate(flat, point), [], 0
            for fs in factors:
                out.append(_product(values[start : start + len(fs)], dtype))
                start += len(fs)
            return tuple(out)

        action_axes = tuple(axes[n] for n in names if n not in states)

        def over_actions(point, depth=0, products=products, action_axes=action_axes):
            if depth == len(action_axes):
                return products(point)
            axis = action_axes[depth]
            return reduce_axis(
                lambda x: over_actions({**point, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
                lambda outputs: max_each(outputs, (0,)),
            )

        kept = tuple(n for n in names if n in states)
        state_axes = auto_splayed(tuple(axes[n] for n in kept), action_axes, itemsize)
        for index, array in zip(indices, lift(over_actions, state_axes), strict=True):
            reduced[index] = broadcast_axes(array, kept, states)
    shape = tuple(factoring.sizes[n] for n in states)
    return combined_checks(problem, factoring, reduced, shape)


def evaluate_on_axes(
    problem: RegimeProblem, states: tuple[str, ...], names: tuple[str, ...], fn: Callable
):
    """`fn(point)` on the product of `names` (axes in that order), splayed as the knobs
    and the evaluation budget say (`states`: which of them are state axes)."""
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    itemsize = np.zeros((), jnp.zeros(()).dtype).itemsize
    chosen = tuple(axes[n] for n in names)
    splayed = {
        a.name: a
        for a in auto_splayed(
            tuple(a for a in chosen if a.name in states),
            tuple(a for a in chosen if a.name not in states),
            itemsize,
        )
    }
    return lift(fn, tuple(splayed.get(a.name, a) for a in chosen))


def broadcast_axes(array: Array, names: tuple[str, ...], target: tuple[str, ...]) -> Array:
    """`array` (axes `names`, in the order of `target`) with size-1 axes for the rest."""
    shape = [1] * len(target)
    for name, n in zip(names, array.shape, strict=True):
        shape[target.index(name)] = n
    return array.reshape(shape)


def _eliminate(step: Step, group, todo: tuple[tuple[str, int], ...], scale) -> Array:
    """The result of `step` (on its axes but the eliminated action, in order): the group
    broadcast, summed and reduced along the action, mapped in chunks along `todo`."""

    def reduce(totals, position):
        (total,) = totals
        if step.smooth:
            return (smooth_max(total, scale, position),)
        return (max_along(total, position),)

    (result,) = eliminate_with(step, [(n, (a,)) for n, a in group], todo, reduce)
    return result


def eliminate_with(step: Step, group, todo: tuple[tuple[str, int], ...], reduce) -> tuple:
    """`_eliminate` of several arrays per member of the group (`(axes, arrays)` pairs,
    summed channel by channel), reduced along the action by `reduce(totals, position)`,
    which returns a tuple of arrays on the other axes."""
    out = tuple(n for n in step.axes if n != step.action)
    channels = len(group[0][1])

    def run(group, names, todo):
        """The results on `names` but the action, with the axes of `todo` leading."""
        if not todo:
            totals = tuple(
                _combined([(n, arrays[c]) for n, arrays in group], names) for c in range(channels)
            )
            return reduce(totals, names.index(step.action))
        (axis, batch_size), rest = todo[0], todo[1:]
        mapped = [(n, a) for n, a in group if axis in n]
        fixed = [(n, a) for n, a in group if axis not in n]
        slices = tuple(
            tuple(jnp.moveaxis(x, n.index(axis), 0) for x in arrays) for n, arrays in mapped
        )
        inner_names = tuple(x for x in names if x != axis)

        def body(parts):
            inner = [
                (tuple(x for x in n if x != axis), p)
                for (n, _), p in zip(mapped, parts, strict=True)
            ]
            return run(inner + fixed, inner_names, rest)

        return map_axis(body, slices, batch_size)

    results = run(list(group), step.axes, todo)
    # Leading: the chunked axes (in `todo` order), then the others in order.
    leading = [n for n, _ in todo]
    order = leading + [n for n in out if n not in leading]
    if not leading:
        return tuple(results)
    return tuple(jnp.transpose(r, [order.index(n) for n in out]) for r in results)


def choose_factored(
    factoring: Factoring, evaluate: Callable, points: dict[str, Array], noise=None
) -> tuple[dict[str, Array], Array]:
    """The best action at one state (every state fixed: `plan_factoring(..., fixed=)`),
    as grid indices by action, and its value: the elimination with each step's argmax
    kept, decoded from the last step back.

    `noise` is `(discrete action names, array)`: taste shocks drawn on those axes, added
    to the objective (then every action is maximised, none smoothed).
    """
    dtype = jnp.zeros(()).dtype
    axes = {n: Axis(n, points[n], 0, False) for n in factoring.names}
    results = [
        (
            piece.axes,
            lift(
                lambda point, piece=piece: piece_value(
                    piece, evaluate(piece_outputs(piece), point), dtype
                ),
                tuple(axes[n] for n in piece.axes),
            ),
        )
        for piece in factoring.pieces
    ]
    return _best_by_elimination(factoring, factoring.names, results, noise)


def tabulate_shared_pieces(
    problem: RegimeProblem, factoring: Factoring, evaluate: Callable, n_subjects: int
) -> dict[int, Array]:
    """The pieces of a period's plan (no state fixed) that every subject of a simulated
    chunk shares, on their grids: those no continuous state enters (their states are read
    by code), where a table is smaller than what `n_subjects` subjects would evaluate
    apart, all of them within `EVALUATION_BYTES`. By piece index; empty where none is.

    On the full Mahler-Yum example the expected continuation is such a piece: each
    subject evaluated it at its own state, 2,000 reads of next period's values that a
    TPU gathers point by point (the simulation ran no faster there than on two CPU
    cores); its table is the solve's own piece, read by a subject as one contiguous slab.
    """
    continuous = {a.name for a in problem.state_axes if not a.is_discrete}
    itemsize = np.zeros((), jnp.zeros(()).dtype).itemsize
    tables = {}
    room = EVALUATION_BYTES  # all the tables of a period together
    for index, piece in enumerate(factoring.pieces):
        actions = tuple(n for n in piece.axes if n not in factoring.states)
        size = factoring.points(piece.axes)
        if (
            continuous.intersection(piece.axes)
            or size > n_subjects * factoring.points(actions)
            or size * itemsize > room
        ):
            continue
        room -= size * itemsize
        tables[index] = evaluate_on_axes(
            problem,
            factoring.states,
            piece.axes,
            lambda point, piece=piece: piece_value(
                piece, evaluate(piece_outputs(piece), point), jnp.zeros(()).dtype
            ),
        )
    return tables


def choose_tabulated(
    problem: RegimeProblem,
    factoring: Factoring,
    evaluate: Callable,
    tables: dict[int, Array],
    state: dict[str, Array],
    noise=None,
) -> tuple[dict[str, Array], Array]:
    """`choose_factored` of one subject at `state` by the period's plan (no state
    fixed): the pieces of `tables` read at the subject's codes, the others evaluated at
    its state; the same elimination."""
    dtype = jnp.zeros(()).dtype
    action_axes = {a.name: a for a in problem.action_axes}
    results = []
    for index, piece in enumerate(factoring.pieces):
        actions = tuple(n for n in piece.axes if n not in factoring.states)
        own = {n: state[n] for n in piece.axes if n in factoring.states}
        if index in tables:
            array = tables[index][tuple(own.values())]
        else:
            array = lift(
                lambda point, piece=piece, own=own: piece_value(
                    piece, evaluate(piece_outputs(piece), {**own, **point}), dtype
                ),
                tuple(Axis(n, action_axes[n].points, 0, False) for n in actions),
            )
        results.append((actions, array))
    names = tuple(a.name for a in problem.action_axes)
    return _best_by_elimination(factoring, names, results, noise)


def _best_by_elimination(
    factoring: Factoring, actions: tuple[str, ...], results: list, noise
) -> tuple[dict[str, Array], Array]:
    """The best of `actions` over the pieces `results` ((action axes, array) pairs at one
    state) and the taste shocks `noise`, as codes by action, and its value."""
    dtype = jnp.zeros(()).dtype
    order = {n: i for i, n in enumerate(factoring.names)}
    if noise is not None:
        names, draws = noise
        results = [*results, (tuple(sorted(names, key=order.__getitem__)), draws)]
    steps, final = elimination_order(
        {i: ax for i, (ax, _) in enumerate(results)},
        actions,
        factoring.points,
        order,
        frozenset(),
    )
    best = []
    for step in steps:
        group = [results[i] for i in step.group] or [nothing_piece(step, factoring, dtype)]
        total = _combined(group, step.axes)
        position = step.axes.index(step.action)
        out = tuple(n for n in step.axes if n != step.action)
        results.append((out, max_along(total, position)))
        best.append((out, at_first_maximum(total, position)[0]))
    value = jnp.zeros((), dtype)
    for index in final:
        value = value + results[index][1]
    codes: dict[str, Array] = {}
    for step, (out, argmax) in zip(reversed(steps), reversed(best), strict=True):
        codes[step.action] = argmax[tuple(codes[n] for n in out)]
    return codes, value


def _product(values: list, dtype) -> Array:
    """The product of a check component's factors: the non-boolean ones multiplied,
    0 where a boolean one is False (a literal factor comes as a Python scalar)."""
    values = [jnp.asarray(v) for v in values]
    total = jnp.ones((), dtype)
    for v in values:
        if v.dtype != jnp.bool_:
            total = total * jnp.asarray(v, dtype)
    flags = [v for v in values if v.dtype == jnp.bool_]
    if not flags:
        return total
    ok = flags[0]
    for flag in flags[1:]:
        ok = ok & flag
    return jnp.where(ok, total, 0.0)


def nothing_piece(step: Step, factoring: Factoring, dtype) -> tuple[tuple[str, ...], Array]:
    """The piece of an action that no piece contains: 0 at each of its points (its max
    is 0; under taste shocks its log-sum-exp adds `λ·log n`, as in the plain product)."""
    return (step.action,), jnp.zeros((factoring.sizes[step.action],), dtype)


def _term_value(term: Term, values: list, dtype) -> Array:
    """The value of `term` from `values` (`Term.outputs` evaluated at a point): its
    factors applied innermost first, as the objective applies them."""
    total = jnp.asarray(values[0], dtype)
    for (kind, _), x in zip(reversed(term.factors), reversed(values[1:]), strict=True):
        if kind == "mul":
            total = total * jnp.asarray(x, dtype)
        elif kind == "div":
            total = total / jnp.asarray(x, dtype)
        elif kind == "if":
            total = jnp.where(x, total, jnp.zeros((), dtype))
        else:
            total = jnp.where(x, jnp.zeros((), dtype), total)
    return total


def piece_value(piece: Piece, values: list, dtype):
    """The sum of a piece's signed terms, `-inf` where a mask fails, from `values`
    (`piece_outputs` evaluated at a point)."""
    total = jnp.zeros((), dtype)
    start = 0
    for term in piece.terms:
        stop = start + 1 + len(term.factors)
        value = _term_value(term, values[start:stop], dtype)
        total = total + value if term.sign > 0 else total - value
        start = stop
    if not piece.masks:
        return total
    feasible = values[start]
    for mask in values[start + 1 :]:
        feasible = feasible & mask
    return jnp.where(feasible, total, -jnp.inf)


def _combined(group, names: tuple[str, ...]) -> Array:
    """The arrays of `group` (each with its axes) broadcast to `names` and summed."""
    total = None
    for array_names, array in group:
        b = broadcast_axes(array, array_names, names)
        total = b if total is None else total + b
    assert total is not None
    shape = tuple(
        max(broadcast_axes(a, n, names).shape[i] for n, a in group) for i in range(len(names))
    )
    return drop_tangent_at_neg_inf(jnp.broadcast_to(total, shape))


def drop_tangent_at_neg_inf(total: Array) -> Array:
    """`total`, with no derivative where it is `-inf`.

    A piece that no constraint masks (the continuation) may carry a NaN derivative where
    its value is `-inf` (a `-inf` node read), which `jnp.max`'s derivative (a sum over
    every element weighted by whether it is the maximum) would spread; the plain
    product's `where(feasible, ·, -inf)` drops those points' derivatives the same way.
    """
    return jnp.where(total == -jnp.inf, -jnp.inf, total)
