"""The grid search's choices on a regime's whole state grid by its structure-aware plan:
for every node and every combination of the discrete actions, the value `v_d` and the
continuous actions, as `GridSearch.choices_at` gives them node by node.

The forward distribution needs them at every node of every period. Node by node, each
node evaluated the whole objective on the product of its action grids (and refined the
refined action at each discrete choice there): on reduced Mahler–Yum 40,000 nodes × 300
actions × 38 periods, 70–90 s per distribution on two CPU cores, where the solve of the
same model takes 0.6 s. Here the period's pieces are evaluated on their own axes as in
the solve (`_factored.solve_factored`), the continuous actions eliminated with each
step's maximiser kept, the discrete actions kept as axes, and the maximisers decoded
from the last step back, for all nodes at once.

The same numbers as node by node: `v_d` is the grid maximum (the refined value where
an action is refined) with the derivative of the maximising element; continuous actions
are grid points without derivative, a refined action its refined point with the
implicit function theorem's derivative (`_refine.refine_along_action`). Among exactly
tied grid points the elimination may pick another than the plain product's first.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

from ._factor_plan import Factoring, elimination_order, piece_outputs
from ._factored import (
    broadcast_axes,
    drop_tangent_at_neg_inf,
    eliminate_with,
    evaluate_on_axes,
    nothing_piece,
    piece_value,
    pieces_total,
    refine_in_step,
    step_chunks,
)
from ._kernel import RegimeProblem
from ._reduce import at_first_maximum, max_along
from ._refine import refine_along_action


def choices_factored(
    problem: RegimeProblem, factoring: Factoring, evaluate, refine=None
) -> tuple[Array, dict[str, Array]]:
    """`v_d` and the continuous actions at every node (axes: the states, then the
    discrete actions, in the regime's order) by the plan `factoring` (`refine`: the
    settings of its refined action, `factoring.refined`)."""
    dtype = jnp.zeros(()).dtype
    itemsize = jnp.zeros((), dtype).dtype.itemsize
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    states = factoring.states
    discrete = tuple(a.name for a in problem.action_axes[: len(problem.regime.discrete_actions)])
    continuous = tuple(n for n in factoring.names if n not in states and n not in discrete)
    kept = states + discrete  # the output's axes
    order = {n: i for i, n in enumerate(factoring.names)}
    refined = factoring.refined if refine is not None else None

    results: list[tuple[tuple[str, ...], Array, Array | None]] = []
    for piece in factoring.pieces:
        array = evaluate_on_axes(
            problem,
            states,
            piece.axes,
            lambda point, piece=piece: piece_value(
                piece, evaluate(piece_outputs(piece), point), dtype
            ),
        )
        results.append((piece.axes, array, None))
    steps, final = elimination_order(
        {i: ax for i, (ax, _, _) in enumerate(results)},
        continuous,
        factoring.points,
        order,
        frozenset(),
        leading=() if refined is None else (refined,),
    )

    # Per step: its action, the axes of its maximiser, the maximiser (grid codes), and
    # for the refined action its refined point on those axes.
    decoded: list[tuple[str, tuple[str, ...], Array, Array | None]] = []
    for step in steps:
        members = [results[i] for i in step.group]
        out = tuple(n for n in step.axes if n != step.action)
        todo = step_chunks(step, axes, states, itemsize)
        if step.action == refined:
            grid, paid, codes, point = _refined(
                problem, factoring, evaluate, step, members, todo, refine
            )
            results.append((out, grid, paid))
            decoded.append((step.action, out, codes, point))
            continue
        if any(paid is not None for _, _, paid in members):

            def best(totals, position):
                grid, paid = totals
                at, (grid, paid) = at_first_maximum(grid, position, (grid, paid))
                return grid, paid, at

            group: list = [
                (n, (jax.lax.stop_gradient(a), a if paid is None else paid))
                for n, a, paid in members
            ]
            grid, paid, codes = eliminate_with(step, group, todo, best)
            results.append((out, grid, paid))
        else:

            def best_plain(totals, position):
                (total,) = totals
                return max_along(total, position), at_first_maximum(total, position)[0]

            plain = [(n, (a,)) for n, a, _ in members] or [
                (n, (a,)) for n, a in [nothing_piece(step, factoring, dtype)]
            ]
            value, codes = eliminate_with(step, plain, todo, best_plain)
            results.append((out, value, None))
        decoded.append((step.action, out, codes, None))

    shape = tuple(factoring.sizes[n] for n in kept)
    v_d = jnp.zeros(shape, dtype)
    for index in final:
        names, array, paid = results[index]
        v_d = v_d + broadcast_axes(array if paid is None else paid, names, kept)
    v_d = drop_tangent_at_neg_inf(jnp.broadcast_to(v_d, shape))

    # The maximisers decoded from the last step back, at every node and discrete choice.
    def along(name: str) -> Array:
        position = kept.index(name)
        return jnp.arange(factoring.sizes[name]).reshape(
            [-1 if i == position else 1 for i in range(len(kept))]
        )

    codes_of: dict[str, Array] = {}
    chosen: dict[str, Array] = {}
    for action, out, codes, point in reversed(decoded):
        where = tuple(codes_of[n] if n in codes_of else along(n) for n in out)
        codes_of[action] = jnp.broadcast_to(codes[where], shape)
        if point is not None:
            chosen[action] = jnp.broadcast_to(point[where], shape)
        else:
            chosen[action] = axes[action].points[codes_of[action]]
    return v_d, {n: chosen[n] for n in continuous}


def _refined(problem, factoring, evaluate, step, members, todo, refine):
    """The refined action's step (`refine_in_step`): the grid's maximum of the pieces
    that contain it and its maximiser, and from there the refined value and point
    (`refine_along_action`)."""
    action = step.action
    dtype = jnp.zeros(()).dtype
    pieces = [factoring.pieces[i] for i in step.group]
    flat = [v for p in pieces for v in piece_outputs(p)]
    points = next(a for a in problem.action_axes if a.name == action).points

    def at(point, code):
        def objective(t):
            return pieces_total(pieces, evaluate(flat, {**point, action: t}), dtype)

        return refine_along_action(objective, points, code, refine)

    grid, codes, (paid, point) = refine_in_step(problem, factoring, step, members, todo, at)
    return grid, paid, codes, point
