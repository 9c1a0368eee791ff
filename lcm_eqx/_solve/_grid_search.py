"""`GridSearch`: every action of the action grids evaluated, the best one taken."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from ._axes import map_axis, reduce_axis
from ._kernel import max_each
from ._on_grid import q_on_action_grid
from ._solver import AbstractPointwiseSolver, AbstractSolver, taste_shock_scale

if TYPE_CHECKING:
    from .._model._plan import ModelPlan


class GridSearch(AbstractPointwiseSolver):
    """Evaluates every action on the action grids and takes the best.

    With taste shocks, the continuous actions are maximised for each combination of
    discrete actions (`v_d`), and the discrete ones are combined as
    `scale * logsumexp(v_d / scale)`. Action axes with `batch_size > 0` are scanned in
    chunks of that size.
    """

    def value(self, problem, state):
        axes = problem.action_axes
        n_discrete = len(problem.regime.discrete_actions)
        scale = taste_shock_scale(problem)
        aggregator = problem.aggregator
        if aggregator is not None and aggregator.n_values > 1:
            # Two values per point (no taste shocks): reduced together by the aggregator.
            def best_pair(outputs):
                values, violations = outputs
                return aggregator.best(values), max_each(violations, (0,))

            def reduce_pair(action: dict, depth: int):
                if depth == len(axes):
                    return problem.q_values(state, action)
                axis = axes[depth]
                return reduce_axis(
                    lambda x: reduce_pair({**action, axis.name: x}, depth + 1),
                    axis.points,
                    axis.batch_size,
                    best_pair,
                )

            return reduce_pair({}, 0)

        def best(outputs, smooth: bool):
            values, violations = outputs
            violations = max_each(violations, (0,))
            if smooth and scale is not None:  # a logsumexp of chunks' logsumexps
                return scale * jax.nn.logsumexp(values / scale, axis=0), violations
            return jnp.max(values, axis=0), violations

        def reduce(action: dict, depth: int):
            if depth == len(axes):
                return problem.q(state, action)
            axis = axes[depth]
            smooth = scale is not None and depth < n_discrete
            return reduce_axis(
                lambda x: reduce({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
                lambda outputs: best(outputs, smooth),
            )

        return reduce({}, 0)

    def discrete_values(self, problem, state):
        # The best continuous action is located on the grid without derivatives
        # (`stop_gradient`), then `q` is evaluated once more there: the same value as the
        # max over the grid, and the same derivative (that of the maximising element),
        # but reverse mode differentiates one point per discrete action instead of the
        # whole continuous grid.
        axes = problem.action_axes
        n_discrete = len(problem.regime.discrete_actions)
        continuous = axes[n_discrete:]

        def grid(action: dict, depth: int):
            if depth == len(axes):
                return problem.q(state, action)[0]
            axis = axes[depth]
            return map_axis(
                lambda x: grid({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
            )

        def at_discrete(action: dict, depth: int):
            if depth == n_discrete:
                if not continuous:
                    return problem.q(state, action)[0]
                values = jax.lax.stop_gradient(grid(action, depth))
                index = jnp.unravel_index(jnp.argmax(values.reshape(-1)), values.shape)
                best = {a.name: a.points[i] for a, i in zip(continuous, index, strict=True)}
                return problem.q(state, {**action, **best})[0]
            axis = axes[depth]
            return map_axis(
                lambda x: at_discrete({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
            )

        return at_discrete({}, 0)

    def choose(self, problem, state, key):
        axes = problem.action_axes
        values = q_on_action_grid(problem, state)  # axes: discrete..., continuous...
        n_discrete = len(problem.regime.discrete_actions)
        shape = values.shape
        discrete_shape, continuous_shape = shape[:n_discrete], shape[n_discrete:]
        per_discrete = values.reshape((*discrete_shape, -1))
        best_continuous = jnp.argmax(per_discrete, axis=-1)
        v_d = jnp.max(per_discrete, axis=-1)
        scale = taste_shock_scale(problem)
        if scale is not None:
            assert key is not None
            v_d = v_d + scale * jax.random.gumbel(key, v_d.shape, v_d.dtype)
        flat_d = jnp.argmax(v_d.reshape(-1)) if n_discrete else jnp.asarray(0)
        value = v_d.reshape(-1)[flat_d]
        d_index = jnp.unravel_index(flat_d, discrete_shape) if n_discrete else ()
        c_flat = best_continuous[d_index] if n_discrete else best_continuous
        c_index = jnp.unravel_index(c_flat, continuous_shape) if continuous_shape else ()
        chosen = {}
        for axis, i in zip(axes, (*d_index, *c_index), strict=True):
            chosen[axis.name] = axis.points[i]
        return chosen, value


def assign_solvers(plan: ModelPlan, regimes, default: AbstractSolver) -> dict[str, AbstractSolver]:
    """The solver of each regime: its own `solver`, else the model's default.

    A default that does not apply to a regime (`applies_to`, e.g. `DCEGM` on a terminal
    regime) leaves it to `GridSearch`; a regime's own solver must fit it (`check` raises
    `ModelInitializationError` otherwise).
    """
    solvers: dict[str, AbstractSolver] = {}
    for name, regime_plan in plan.regimes.items():
        own = regimes[name].solver
        if own is not None:
            solver = own
        elif default.applies_to(regime_plan):
            solver = default
        else:
            solver = GridSearch()
        solver.check(plan, regime_plan)
        solvers[name] = solver
    return solvers
