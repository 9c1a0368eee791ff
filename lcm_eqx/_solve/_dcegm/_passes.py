"""A regime's period under DC-EGM as passes over its choices: every discrete state
and action mapped over (`lift_all_choices`) or laid out as rows of one array
(`continuation_rows`, `inverted_rows`), the regimes of a period solved together in one
pass (`solve_batched`, `solve_together`) and their value arrays read from the refined
grids (`values_batched`, `regime_values`). Functions of the solver's settings
(`DCEGMLike`), called by its class (`_solver.py`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..._numerics import one_kernel_reduce
from .._axes import map_axis
from .._groups import member_parts
from .._kernel import RegimeProblem
from .._reading import (
    REFERENCE_ACTION,
    ContinuationReader,
    invert_marginals,
)
from .._solver import PeriodSolution
from .._static import constant_outputs
from ._egm import (
    CONSUMPTION_CAP,
    continuation_at_savings,
    euler_miss,
    inverted,
    last_period_grid,
    refine_rows,
    utility_of,
    values_rows,
    with_euler_check,
)
from ._envelope import (
    ORDINARY,
    EndogenousGrid,
)
from ._members import MEMBERS, in_order, rows_of
from ._rows import (
    Block,
    codes_of_rows,
    euler_target,
    lift_choices,
    lift_with_readers,
    materialized,
)

if TYPE_CHECKING:
    # A structural type, resolved by the type checkers only (as in _period.py).
    from ._protocol import DCEGMLike


def flat_choices(solver: DCEGMLike, problem: RegimeProblem):
    """The shape of the regime's discrete state and action axes, and the codes of
    every choice (their flat product in row-major order; host arrays, by name)."""
    discrete_states = tuple(a for a in problem.state_axes if a.name != solver.state)
    discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
    axes = (*discrete_states, *discrete_actions)
    shape = tuple(a.points.shape[0] for a in axes)
    flat = np.indices(shape).reshape(len(shape), math.prod(shape)).astype(np.int32)
    return shape, {a.name: flat[i] for i, a in enumerate(axes)}


def lift_all_choices(solver: DCEGMLike, problem: RegimeProblem, finish, targets=None):
    """`finish(continuation, discrete)` of every discrete state and action of the
    regime (`continuation`: `continuation_at_savings`'s reads of next period at the savings
    points), lifted over their axes: the results and check violations with leading
    axes the discrete states, then the discrete actions, and those axes.
    `targets`: the regimes read next period (default: all it can move to)."""
    discrete_states = tuple(a for a in problem.state_axes if a.name != solver.state)
    discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
    checks = (*problem.checks, *solver.extra_checks(problem.regime)) if problem.validate else ()

    def at_discrete_state(z: dict[str, Array], readers: dict[str, ContinuationReader]):
        def at_choice(d: dict[str, Array]):
            discrete = {**z, **d}
            continuation, violations = continuation_at_savings(
                solver, problem, readers, discrete, checks, targets
            )
            return finish(continuation, discrete), violations

        return lift_choices(at_choice, discrete_actions, {})

    result, violations = lift_with_readers(
        at_discrete_state, discrete_states, {}, problem.next_policies, problem
    )
    return result, violations, (*discrete_states, *discrete_actions)


def continuation_rows(solver: DCEGMLike, problem: RegimeProblem):
    """`continuation_at_savings` of every discrete state and action of a regime without
    splayed or sharded discrete axes, mapped over their flat product (one map, not
    one per axis), each reading only the regimes it can move to where that is known
    when tracing (`target_groups`).

    A choice that moves to another regime with certainty (retiring) then reads only
    that regime's next-period grids, not every target's: the reads are most of a
    period's work. The choices with the same targets are mapped together, one map
    per group of them.

    Returns the continuations (leading axis: the flat choices), the check
    violations (leading axes: the discrete states, then the discrete actions), those
    axes' shape, and the flat choices' codes (host arrays, by name).
    """
    shape, codes = flat_choices(solver, problem)
    size = math.prod(shape)
    groups = target_groups(solver, problem, codes) or [(np.arange(size), problem.regime.targets)]
    checks = (*problem.checks, *solver.extra_checks(problem.regime)) if problem.validate else ()
    parts = []
    for rows, targets in groups:
        members = {k: v[rows] for k, v in codes.items()}
        parts.append(group_continuation(solver, problem, members, len(rows), checks, targets))
    merged = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
    order = np.concatenate([rows for rows, _ in groups])
    if not np.array_equal(order, np.arange(size)):
        merged = jax.tree.map(lambda x: x[np.argsort(order)], merged)
    continuation, violations = merged
    violations = violations.reshape((*shape, *violations.shape[1:]))
    return continuation, violations, shape, codes


def group_continuation(
    solver: DCEGMLike,
    problem: RegimeProblem,
    members: dict[str, np.ndarray],
    size: int,
    checks,
    targets,
):
    """`continuation_at_savings` of the choices `members` (their codes, by name, host arrays;
    `size` of them) that read the same `targets`, leading axis the choices.

    A group of one choice is not mapped over the choices: under a `vmap` of length
    1 every traced operation of its read (a map over the savings points) would be
    batched a second time, and its codes would no longer be constants of the
    program, which XLA folds (6 kernels of the quick start's model, whose three
    groups have one choice each). Groups of several choices keep the map over their
    choices around the map over the points: one flat map over the (choice, point)
    pairs traced faster but ran 1.15x as long on a model with income states (each
    pair then gathered what its choice shares with the others).
    """
    readers = problem.next_policies
    if size == 1:
        one = {k: jnp.asarray(v[0]) for k, v in members.items()}
        result = continuation_at_savings(solver, problem, readers, one, checks, targets)
        return jax.tree.map(lambda x: x[None], result)
    return jax.vmap(
        lambda d: continuation_at_savings(solver, problem, readers, d, checks, targets),
        axis_size=size,
    )({k: jnp.asarray(v) for k, v in members.items()})


def euler_targets(solver: DCEGMLike, problem: RegimeProblem, continuation, codes):
    """The marginal utility of every flat choice of `continuation_rows` (vectorised
    over them) and the `u'(c)` the Euler equation asks for at each of their savings
    points: what `invert_marginals` solves, for all the regimes of a pass at once."""
    savings = solver.savings.to_jax()
    size = jax.tree.leaves(continuation)[0].shape[0]
    discrete = {k: jnp.asarray(v) for k, v in codes.items()}
    beta = problem.params[""].get("discount_factor")
    if beta is None:  # the regime's function `discount_factor`, per choice
        beta = jax.vmap(lambda d: problem.discount_factor(problem.evaluator(d)), axis_size=size)(
            discrete
        )[:, None]

    def marginal(c):
        return jax.vmap(lambda d, c: utility_of(solver, problem, d)[1](c), axis_size=size)(
            discrete, c
        )

    top = jnp.asarray(CONSUMPTION_CAP, savings.dtype)
    cap = jax.vmap(lambda d: utility_of(solver, problem, d)[1](top), axis_size=size)(discrete)
    return marginal, euler_target(beta, continuation["marginal_expected"], cap[:, None])


def inverted_rows(
    solver: DCEGMLike, problem: RegimeProblem, continuation, codes, consumption: Array | None
) -> dict[str, Array]:
    """`inverted` of every flat choice of `continuation_rows`, given the consumption
    that solves the Euler equation at each of their savings points (None: the
    user's inverse, per choice)."""
    discrete = {k: jnp.asarray(v) for k, v in codes.items()}
    if consumption is None:
        return map_axis(
            lambda xs: inverted(solver, problem, xs[0], xs[1]),
            (discrete, continuation),
            0,
        )
    return map_axis(
        lambda xs: inverted(solver, problem, xs[0], xs[1], xs[2]),
        (discrete, continuation, consumption),
        0,
    )


def target_groups(
    solver: DCEGMLike, problem: RegimeProblem, codes: dict[str, np.ndarray]
) -> list[tuple[np.ndarray, tuple[str, ...]]] | None:
    """The discrete states and actions (indices into the flat `codes`) grouped by
    the regimes they can move to, in order of their first member; `None` where the
    regime transition is not known when tracing (it depends on a parameter, the
    period or the age) or every choice can move to every target.

    The transition is evaluated at the codes on the host (`constant_outputs`). A
    target counts as reachable unless its probability is exactly 0 (a NaN counts).
    """
    regime = problem.regime
    if len(regime.targets) < 2:
        return None
    reference = jnp.asarray(REFERENCE_ACTION)

    def probabilities(point):
        evaluate = problem.evaluator({**point, solver.state: reference, solver.action: reference})
        return problem.regime_probabilities_and_id(evaluate)[0]

    if codes:
        known = constant_outputs(jax.vmap(probabilities), codes)
    else:  # no discrete axis: one choice
        known = constant_outputs(lambda: probabilities({})[None])
    if known is None:
        return None
    (p,) = known
    ids = [problem.model.regimes[t].id for t in regime.targets]
    reach = p[:, ids] != 0
    groups: dict[tuple[bool, ...], list[int]] = {}
    for row, key in enumerate(map(tuple, reach)):
        groups.setdefault(key, []).append(row)
    if len(groups) == 1 and all(next(iter(groups))):
        return None
    return [
        (np.asarray(rows), tuple(t for t, r in zip(regime.targets, key, strict=True) if r))
        for key, rows in groups.items()
    ]


def period_solution(
    solver: DCEGMLike,
    problem: RegimeProblem,
    policy: dict[str, Array],
    violations: Array,
    choice_values: Array | None = None,
    with_values: bool = True,
) -> PeriodSolution:
    """The `PeriodSolution` of one regime from its refined grids (leading axes: the
    discrete states, then the discrete actions) and the choices' check violations;
    `choice_values`: each choice's value on the state grid (`(*z, *d, n_nodes)`),
    where the caller read them. Without `with_values`, its `values` are None: the
    caller reads them later (`regime_values`)."""
    regime = problem.regime
    n_z = len(regime.states) - 1
    n_d = len(regime.discrete_actions)
    # Violations: max over the discrete actions, then broadcast over the state grid.
    violations = jnp.max(violations, axis=tuple(range(n_z, n_z + n_d))) if n_d else violations
    grid = endogenous_grid(policy)
    values = regime_values(solver, problem, grid, choice_values) if with_values else None
    position = regime.states.index(solver.state)
    # The same at every point of the continuous state: an axis of length 1 there,
    # which the backward induction reduces as it is (a broadcast would be one XLA
    # kernel more, and its reduction another).
    violations = jnp.expand_dims(violations, position)
    return PeriodSolution(values, violations, grid)


def endogenous_grid(policy: dict[str, Array]) -> EndogenousGrid:
    """A period's `EndogenousGrid` from its refined rows."""
    return EndogenousGrid(
        nodes=policy["nodes"],
        count=policy["count"],
        continuation0=policy["continuation0"],
        feasible=policy["feasible"],
        borrowing_limit=policy["limit"],
        status=jnp.asarray(ORDINARY, jnp.int32),
    )


def regime_values(
    solver: DCEGMLike,
    problem: RegimeProblem,
    grid: EndogenousGrid,
    choice_values: Array | None = None,
) -> Array:
    """The regime's value array (its state shape) from its refined grids, or from
    each choice's value at the state nodes (`choice_values`, `(*z, *d, n_nodes)`)
    where the caller read them."""
    regime = problem.regime
    position = regime.states.index(solver.state)
    if choice_values is None:
        nodes = problem.state_axes[position].points
        values = solver.values_on(problem, grid, nodes)  # (*z, n_nodes)
    else:
        values = solver.combine_choices(problem, jnp.moveaxis(choice_values, -1, 0))
        values = jnp.moveaxis(values, 0, -1)
    return jnp.moveaxis(values, -1, position)


def solve_batched(
    solver: DCEGMLike, problems: list[RegimeProblem], with_values: bool = True
) -> tuple[list[PeriodSolution], dict[str, Array]]:
    """`solve_period` of several regimes that this solver solves; and their refined
    grids as rows (the regimes' flat choices one after the other, in the order of
    `problems`), which the backward induction carries and emits as they are.

    Regimes of equal structure (`_groups.py`: the same functions, grids and targets,
    differing in parameter values) are traced once: one member's pass
    (`solve_together`) mapped over the group's stacked parameters, so that their
    rows come out one member after the other, as the concatenation would. The
    other regimes share one pass over rows.
    """
    parts = member_parts(problems)
    if len(parts) == 1 and parts[0][1] is None:
        return solve_together(solver, problems, with_values)
    solutions: list[Any] = [None] * len(problems)
    pieces: list[tuple[list[int], dict[str, Array]]] = []
    for indices, stacked in parts:
        if stacked is None:
            solved, rows = solve_together(solver, [problems[i] for i in indices], with_values)
            solutions_of = dict(zip(indices, solved, strict=True))
        else:
            params, axes = stacked
            representative = problems[indices[0]]

            def member(params, representative=representative):
                solved, rows = solve_together(
                    solver, [representative.with_params(params)], with_values, MEMBERS
                )
                return solved[0], rows

            solved, rows = jax.vmap(
                member, in_axes=(axes,), axis_size=len(indices), axis_name=MEMBERS
            )(params)
            rows = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), rows)
            solutions_of = {
                i: jax.tree.map(lambda x, j=j: x[j], solved) for j, i in enumerate(indices)
            }
        for i, solution in solutions_of.items():
            solutions[i] = solution
        pieces.append((indices, rows))
    sizes = [math.prod(flat_choices(solver, p)[0]) for p in problems]
    return solutions, in_order(pieces, sizes)


def solve_together(
    solver: DCEGMLike, problems: list[RegimeProblem], with_values: bool = True, members=None
) -> tuple[list[PeriodSolution], dict[str, Array]]:
    """`solve_period` of several regimes that this solver solves, in one pass; and
    their refined grids as rows (`nodes`, `count`, `continuation0`, `feasible`: the
    regimes' flat choices one after the other, in the order of `problems`), which
    the backward induction carries and emits as they are.

    Each regime reads next period and inverts the Euler equation on its own (its
    transitions, targets, checks and marginal utility), then the choices of all of
    them are rows of one array: one upper envelope and one read of the values on the
    state grid for every row, with each row's own utility (every regime's utility
    evaluated and the row's regime's selected). The same XLA kernels then serve
    every regime rather than a copy per regime, which shortens the compilation.

    (Inverting in the same pass costs more kernels than it saves: XLA:CPU splits
    each Newton step of the selected marginal utilities into three or four kernels,
    where each regime's own step is one.)
    """
    shapes, read, violations, blocks = [], [], [], []
    for problem in problems:
        continuation, violation, shape, codes = continuation_rows(solver, problem)
        shapes.append(shape)
        read.append((problem, continuation, codes))
        violations.append(violation)

        def functions(codes, problem=problem):
            return utility_of(solver, problem, codes)

        blocks.append(Block(functions, codes, math.prod(shape)))
    row_codes = codes_of_rows(blocks)
    if problems[0].last_period:  # the same for every regime of a period
        grids = [last_period_grid(solver, problem, c) for problem, c, _ in read]
        refined = {key: jnp.concatenate([g[key] for g in grids]) for key in grids[0]}
    else:
        # Newton's method on all the regimes' points at once, outside the maps over
        # their choices: one chain of steps with one early exit (`invert_marginals`).
        consumptions: list[Array | None] = (
            [None] * len(read)
            if solver.inverse_marginal_utility is not None
            else list(
                invert_marginals(
                    [euler_targets(solver, *r) for r in read], solver.newton_steps, members
                )
            )
        )
        raws = [
            inverted_rows(solver, problem, continuation, codes, consumption)
            for (problem, continuation, codes), consumption in zip(read, consumptions, strict=True)
        ]
        rows = materialized(
            {key: jnp.concatenate([raw[key] for raw in raws]) for key in raws[0] if key != "target"}
        )
        # The Euler check on the stored marginal utilities (`materialized`), not on
        # the inversion's own: a second consumer of `c = exp(x)` made XLA compile the
        # exponential as a kernel of its own (two kernels, each ~2,600 lines of
        # vectorised LLVM IR: a fifth of the validated program's code).
        offsets = np.cumsum([0, *(block.size for block in blocks)])
        violations = [
            with_euler_check(
                solver,
                problem,
                violation,
                one_kernel_reduce(
                    jax.lax.max,
                    0.0,
                    euler_miss(rows["mu"][start:stop], raw["target"], continuation["expected"]),
                    1,
                ).reshape(shape),
            )
            for problem, violation, raw, (_, continuation, _), shape, start, stop in zip(
                problems, violations, raws, read, shapes, offsets[:-1], offsets[1:], strict=True
            )
        ]
        refined = refine_rows(solver, blocks, row_codes, rows)
    choice_values = (
        choice_values_rows(solver, problems, shapes, blocks, row_codes, refined)
        if with_values
        else [None] * len(problems)
    )
    solutions, offset = [], 0
    for problem, shape, block, violation, values in zip(
        problems, shapes, blocks, violations, choice_values, strict=True
    ):
        policy = {
            key: value[offset : offset + block.size].reshape((*shape, *value.shape[1:]))
            for key, value in refined.items()
        }
        offset += block.size
        solutions.append(period_solution(solver, problem, policy, violation, values, with_values))
    return solutions, refined


def choice_values_rows(
    solver: DCEGMLike,
    problems: list[RegimeProblem],
    shapes: list[tuple[int, ...]],
    blocks: list[Block],
    row_codes: tuple[Array, list[dict[str, Array]]],
    refined: dict[str, Array],
) -> list[Array | None]:
    """Each regime's choice values on its state grid (`(*z, *d, n_nodes)`), read
    for all rows together where the regimes' grids have one size (else None)."""
    grids = [p.state_axes[p.regime.states.index(solver.state)].points for p in problems]
    if len({g.shape for g in grids}) != 1:
        return [None] * len(problems)
    sizes = [block.size for block in blocks]
    nodes = jnp.concatenate(
        [jnp.broadcast_to(g, (n, g.shape[0])) for g, n in zip(grids, sizes, strict=True)]
    )
    values = values_rows(blocks, row_codes, refined, nodes)
    offsets = np.cumsum([0, *sizes])
    return [
        values[start:stop].reshape((*shape, -1))
        for start, stop, shape in zip(offsets[:-1], offsets[1:], shapes, strict=True)
    ]


def values_batched(
    solver: DCEGMLike,
    problems: list[RegimeProblem],
    grids: list[EndogenousGrid],
    refined: dict[str, Array] | None = None,
) -> list[Array]:
    """The value arrays of regimes solved by `solve_batched(..., with_values=False)`,
    from their period's refined grids (`refined`: the grids as `solve_batched`'s
    rows, where the caller has them); regimes of equal structure read by one
    member's read mapped over the group, as `solve_batched` solves them."""
    parts = member_parts(problems)
    if len(parts) == 1 and parts[0][1] is None:
        return values_together(solver, problems, grids, refined)
    sizes = [math.prod(flat_choices(solver, p)[0]) for p in problems]
    offsets = np.cumsum([0, *sizes])
    values: list[Any] = [None] * len(problems)
    for indices, stacked in parts:
        rows = None if refined is None else rows_of(refined, offsets, indices)
        if stacked is None:
            read = values_together(
                solver, [problems[i] for i in indices], [grids[i] for i in indices], rows
            )
        else:
            params, axes = stacked
            representative = problems[indices[0]]
            grid = jax.tree.map(lambda *xs: jnp.stack(xs), *(grids[i] for i in indices))
            if rows is not None:  # one member's rows after the other: (members, rows)
                k = len(indices)
                rows = jax.tree.map(lambda x: x.reshape((k, -1, *x.shape[1:])), rows)

            def member(params, grid, rows, representative=representative):
                return values_together(solver, [representative.with_params(params)], [grid], rows)[
                    0
                ]

            stacked_values = jax.vmap(member, in_axes=(axes, 0, None if rows is None else 0))(
                params, grid, rows
            )
            read = [stacked_values[j] for j in range(len(indices))]
        for i, v in zip(indices, read, strict=True):
            values[i] = v
    return values


def values_together(
    solver: DCEGMLike,
    problems: list[RegimeProblem],
    grids: list[EndogenousGrid],
    refined: dict[str, Array] | None = None,
) -> list[Array]:
    """The value arrays of regimes solved by `solve_batched(..., with_values=False)`,
    from their period's refined grids: one read of all their choices at the state
    nodes, as `solve_batched` does in the period (`refined`: the grids as
    `solve_batched`'s rows, where the caller has them)."""
    shapes, blocks, rows = [], [], []
    for problem, grid in zip(problems, grids, strict=True):
        shape, codes = flat_choices(solver, problem)
        size = math.prod(shape)

        def functions(codes, problem=problem):
            return utility_of(solver, problem, codes)

        shapes.append(shape)
        blocks.append(Block(functions, codes, size))
        if refined is None:
            policy = {
                "nodes": grid.nodes,
                "count": grid.count,
                "continuation0": grid.continuation0,
                "feasible": grid.feasible,
                "limit": jnp.broadcast_to(grid.borrowing_limit, grid.count.shape),
            }
            rows.append({k: v.reshape((size, *v.shape[len(shape) :])) for k, v in policy.items()})
    row_codes = codes_of_rows(blocks)
    if refined is None:
        refined = {key: jnp.concatenate([r[key] for r in rows]) for key in rows[0]}
    choice_values = choice_values_rows(solver, problems, shapes, blocks, row_codes, refined)
    return [
        regime_values(solver, problem, grid, values)
        for problem, grid, values in zip(problems, grids, choice_values, strict=True)
    ]
