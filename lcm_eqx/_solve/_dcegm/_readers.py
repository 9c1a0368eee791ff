"""How an earlier period reads a DC-EGM regime: its choice-specific `EndogenousGrid`s
(the loop's carry), read at a next-period cash on hand through a `ContinuationReader`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp

from ..._grids import AbstractProcessGrid
from ..._model._dag import Evaluator
from ..._model._plan import ModelPlan
from .._continuation import NEG_INF
from .._reading import ContinuationReader, combine_values_and_slopes, marginal_of
from ._envelope import INACTIVE, ORDINARY, ZERO, EndogenousGrid, read
from ._kinks import consumption_kinks
from ._rows import grid_arrays, map_choices

if TYPE_CHECKING:
    from ._protocol import DCEGMLike


def endogenous_reader(
    model: ModelPlan,
    target: str,
    solver: DCEGMLike,
    grid: EndogenousGrid,
    params,
    period,
    age,
) -> ContinuationReader:
    """A reader of a DC-EGM regime's next-period `EndogenousGrid`."""
    target_plan = model.regimes[target]
    process_points = {}
    for name in target_plan.states:
        g = target_plan.grids[name]
        if isinstance(g, AbstractProcessGrid):
            process_points[name] = g.discretize(params.get(f"next_{name}", {}))[0]
    discrete_actions = list(target_plan.discrete_actions)
    scale = params[""]["taste_shock_scale"] if target_plan.taste_shocks else None
    status = grid.status

    def read_fn(data, fixed, x):
        axes = [s for s in target_plan.states if s != solver.state and s not in fixed]

        def at(codes: dict, nodes, count, continuation0, feasible, limit):
            def utility(c):
                inputs = {
                    n: (process_points[n][k] if n in process_points else k)
                    for n, k in {**fixed, **codes}.items()
                }
                inputs[solver.action] = c
                inputs[solver.state] = c
                inputs["period"] = period
                inputs["age"] = age
                return jnp.asarray(
                    Evaluator(target_plan.helpers, inputs, params)(target_plan.utility)
                )

            _, v, mu = read(
                nodes,
                count,
                continuation0,
                limit,
                x,
                jnp.vectorize(utility),
                marginal_of(utility),
            )
            return jnp.where(feasible, v, NEG_INF), jnp.where(feasible, mu, 0.0)

        v, mu = map_choices(at, data, [*axes, *discrete_actions])
        shape = data[1].shape
        n_d = len(discrete_actions)
        if n_d:
            lead = shape[: len(shape) - n_d]
            value, slope = combine_values_and_slopes(
                v.reshape((*lead, -1)), mu.reshape((*lead, -1)), scale
            )
        else:
            value, slope = v, mu
        value = jnp.where(status == ZERO, 0.0, value)
        value = jnp.where(status == INACTIVE, NEG_INF, value)
        slope = jnp.where(status == ORDINARY, slope, 0.0)
        return value, slope

    def kinks_fn(data, fixed):
        nodes, n_valid, continuation0, feasible, limit = data
        k = nodes.shape[-2]
        lead = n_valid.shape
        flat = (
            nodes.reshape((-1, k, nodes.shape[-1])),
            n_valid.reshape(-1),
            jnp.broadcast_to(limit, lead).reshape(-1),
            jnp.broadcast_to(continuation0, lead).reshape(-1),
        )
        jumps = nodes.dtype == jnp.float64
        points, change = jax.vmap(lambda *a: consumption_kinks(*a, jumps=jumps))(*flat)
        usable = (jnp.broadcast_to(feasible, lead).reshape(-1) & (status == ORDINARY))[:, None]
        return points.reshape((*lead, k)), jnp.where(usable, change, -1.0).reshape((*lead, k))

    return ContinuationReader(
        continuous=solver.state,
        axes=tuple(s for s in target_plan.states if s != solver.state),
        data=grid_arrays(grid),
        fixed={},
        read_fn=read_fn,
        kinks_fn=kinks_fn,
    )


def zero_grid(model: ModelPlan, regime: str, solver: DCEGMLike, dtype) -> EndogenousGrid:
    """The `EndogenousGrid` of the period after the last (value 0 everywhere)."""
    plan = model.regimes[regime]
    shape = tuple(
        plan.grids[s].n_points for s in (*plan.states, *plan.discrete_actions) if s != solver.state
    )
    k = solver.upper_envelope.n_rows(solver.n_savings(plan))
    line = jnp.linspace(1.0, 2.0, k, dtype=dtype)
    rows = jnp.stack([line, line, jnp.zeros_like(line), jnp.zeros_like(line)], axis=1)
    return EndogenousGrid(
        nodes=jnp.broadcast_to(rows, (*shape, k, 4)),
        count=jnp.full(shape, k, jnp.int32),
        continuation0=jnp.zeros(shape, dtype),
        feasible=jnp.ones(shape, bool),
        borrowing_limit=jnp.asarray(solver.savings.to_jax()[0], dtype),
        status=jnp.asarray(ZERO, jnp.int32),
    )


def inactive_grid(grid: EndogenousGrid) -> EndogenousGrid:
    return eqx.tree_at(lambda g: g.status, grid, jnp.asarray(INACTIVE, jnp.int32))


def stacked_endogenous_reader(
    model: ModelPlan,
    targets: tuple[str, ...],
    solver: DCEGMLike,
    arrays: tuple,
    status,
    params,
    axes,
    period,
    age,
) -> ContinuationReader:
    """A reader of several DC-EGM regimes of equal structure (`targets`) at once: the
    first one's read mapped over their stacked grids (`arrays`: `grid_arrays` with a
    leading axis over `targets`) and parameters (`params`, with their `vmap` axes
    `axes`), so that it is traced once for all of them (see `ContinuationReader.members`).
    """
    first = targets[0]

    def read_fn(data, fixed, x):
        def one(data, params):
            nodes, count, continuation0, feasible, limit = data
            grid = EndogenousGrid(nodes, count, continuation0, feasible, limit, status)
            reader = endogenous_reader(model, first, solver, grid, params, period, age)
            return reader.read_fn(reader.data, fixed, x)

        return jax.vmap(one, in_axes=(0, axes))(data, params)

    target_plan = model.regimes[first]
    return ContinuationReader(
        continuous=solver.state,
        axes=tuple(s for s in target_plan.states if s != solver.state),
        data=tuple(arrays),
        fixed={},
        read_fn=read_fn,
        members=targets,
    )
