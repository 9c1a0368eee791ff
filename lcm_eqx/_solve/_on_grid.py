"""Queries answered on the action grids: the defaults of `AbstractSolver`'s queries for
solvers whose policy is the best point of the action grids (`GridSearch`).

Each locates the best point without derivatives (`stop_gradient`) and evaluates `q`
once more there: the same value as the max over the grid, and the same derivative (that
of the maximising element), but reverse mode differentiates one point per discrete
action instead of the whole grid.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._axes import lift
from ._kernel import RegimeProblem


def q_on_action_grid(problem: RegimeProblem, state) -> Float[Array, "..."]:
    """`q` at `state` on the product of the action grids (axes: the discrete actions,
    then the continuous ones, in the regime's order)."""

    def at(action: dict, depth: int):
        if depth == len(problem.action_axes):
            return problem.q(state, action)[0]
        axis = problem.action_axes[depth]
        return jax.vmap(lambda x: at({**action, axis.name: x}, depth + 1))(axis.points)

    return at({}, 0)


def best_grid_points(problem: RegimeProblem, state) -> dict[str, Array]:
    """The best point of each continuous action's grid at `state`, for each discrete
    action (arrays with one axis per discrete action)."""
    values = jax.lax.stop_gradient(q_on_action_grid(problem, state))
    n_d = len(problem.regime.discrete_actions)
    d_shape, c_shape = values.shape[:n_d], values.shape[n_d:]
    best = jnp.argmax(values.reshape((*d_shape, -1)), axis=-1)
    index = jnp.unravel_index(best, c_shape) if len(c_shape) > 1 else (best,)
    axes = problem.action_axes[n_d:]
    return {a.name: a.points[i] for a, i in zip(axes, index, strict=True)}


def choices_at(problem: RegimeProblem, state) -> tuple[Array, dict[str, Array]]:
    """`v_d` and the continuous actions of each discrete action at a grid node."""
    regime = problem.regime
    # Grid search: locate the best continuous action per discrete action without
    # derivatives, then evaluate `q` there again (the value's derivative is that of the
    # maximising element).
    n_d = len(regime.discrete_actions)
    axes = problem.action_axes
    values = jax.lax.stop_gradient(q_on_action_grid(problem, state))
    d_shape, c_shape = values.shape[:n_d], values.shape[n_d:]
    best = jnp.argmax(values.reshape((*d_shape, -1)), axis=-1)
    c_index = jnp.unravel_index(best, c_shape) if c_shape else ()
    chosen = {a.name: a.points[i] for a, i in zip(axes[n_d:], c_index, strict=True)}

    def at(i):
        codes = jnp.unravel_index(i, d_shape) if d_shape else ()
        action = {a.name: c for a, c in zip(axes[:n_d], codes, strict=True)}
        continuous = {k: v.reshape(-1)[i] for k, v in chosen.items()}
        return problem.q(state, {**action, **continuous})[0]

    v_d = jax.vmap(at)(jnp.arange(math.prod(d_shape))).reshape(d_shape)
    return v_d, chosen


def refined_grid_actions(problem: RegimeProblem, state, discrete_action) -> dict[str, Array]:
    """The best continuous actions at `state` given the discrete actions.

    On the grids: a single continuous action is refined to the vertex of the
    parabola through the grid maximum and its two neighbours (clipped to them), which
    moves continuously with the parameters between grid switches; with several, the grid
    argmax is returned.
    The grid search itself runs without derivatives; only the (up to) three points of
    the parabola are differentiated.
    """
    names = problem.regime.continuous_actions
    axes = tuple(a for a in problem.action_axes if a.name in names)
    fixed = {a: discrete_action[a] for a in problem.regime.discrete_actions}

    def q(action):
        return problem.q(state, {**fixed, **action})[0]

    values = jax.lax.stop_gradient(lift(q, axes))
    if len(axes) != 1:
        index = jnp.unravel_index(jnp.argmax(values.reshape(-1)), values.shape)
        return {axis.name: axis.points[i] for axis, i in zip(axes, index, strict=True)}
    axis = axes[0]
    x = axis.points
    n = x.shape[0]
    best = jnp.argmax(values)
    k = jnp.clip(best, 1, n - 2)
    neighbours = x[jnp.stack([k - 1, k, k + 1])]
    f = jax.vmap(lambda point: q({axis.name: point}))(neighbours)
    return {axis.name: _parabola_vertex(neighbours, f, interior=best == k, fallback=x[best])}


def _parabola_vertex(x: Array, f: Array, interior, fallback) -> Array:
    """Vertex of the parabola through (x[i], f[i]), i = 0, 1, 2, clipped to [x0, x2]."""
    x0, x1, x2 = x[0], x[1], x[2]
    interior = interior & jnp.all(jnp.isfinite(f))
    f0, f1, f2 = (jnp.where(interior, f[i], 0.0) for i in range(3))
    a = (x1 - x0) * (f1 - f2)
    b = (x1 - x2) * (f1 - f0)
    denominator = a - b
    ok = interior & (denominator != 0)
    numerator = (x1 - x0) * a - (x1 - x2) * b
    vertex = x1 - 0.5 * numerator / jnp.where(ok, denominator, 1.0)
    return jnp.where(ok, jnp.clip(vertex, x0, x2), fallback)
