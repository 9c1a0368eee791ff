"""Solvers: how the best action is found at a state. Every solver implements
`AbstractSolver`; the backward induction and simulation only talk to this interface."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._axes import map_axis
from ._kernel import RegimeProblem, stack_checks


class AbstractSolver(eqx.Module):
    """Finds, at one state point, the value of the best action and (for simulation) the action.

    Subclasses implement `value` (used by the backward induction, lifted over the state
    grid by the knobs) and `choose` (used by simulation at off-grid states).
    """

    @abc.abstractmethod
    def value(self, problem: RegimeProblem, state: dict[str, Array]) -> tuple[Array, Array]:
        """Value of the best action at `state`, and the maximal check violations."""

    @abc.abstractmethod
    def choose(
        self, problem: RegimeProblem, state: dict[str, Array], key: PRNGKeyArray | None
    ) -> tuple[dict[str, Array], Array]:
        """The chosen action (codes / values by name) at `state`, and its value.

        `key` draws the taste shocks of regimes that have them.
        """

    def discrete_values(self, problem: RegimeProblem, state: dict[str, Array]) -> Array:
        """`v_d`: the best value over the continuous actions for each discrete action.

        Returns an array with one axis per discrete action of the regime (in declaration
        order; a 0-d array when the regime has none). Used for conditional choice
        probabilities and likelihoods; solvers that cannot provide it raise.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement discrete_values, which choice "
            "probabilities and likelihoods need."
        )


class GridSearch(AbstractSolver):
    """Evaluates every action on the action grids and takes the best.

    With taste shocks, the continuous actions are maximised for each combination of
    discrete actions (`v_d`), and the discrete ones are combined as
    `scale * logsumexp(v_d / scale)`. Action axes with `batch_size > 0` are scanned in
    chunks of that size.
    """

    def value(self, problem, state):
        axes = problem.action_axes
        n_discrete = len(problem.regime.discrete_actions)
        scale = _taste_shock_scale(problem)

        def reduce(action: dict, depth: int):
            if depth == len(axes):
                return problem.q(state, action)
            axis = axes[depth]
            values, violations = map_axis(
                lambda x: reduce({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
            )
            violations = tuple(jnp.max(v, axis=0) for v in violations)
            if scale is not None and depth < n_discrete:
                return scale * jax.nn.logsumexp(values / scale), violations
            return jnp.max(values), violations

        value, violations = reduce({}, 0)
        return value, stack_checks(violations, value.dtype)

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
        values = _q_on_action_grid(problem, state)  # axes: discrete..., continuous...
        n_discrete = len(problem.regime.discrete_actions)
        shape = values.shape
        discrete_shape, continuous_shape = shape[:n_discrete], shape[n_discrete:]
        per_discrete = values.reshape((*discrete_shape, -1))
        best_continuous = jnp.argmax(per_discrete, axis=-1)
        v_d = jnp.max(per_discrete, axis=-1)
        scale = _taste_shock_scale(problem)
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


def _q_on_action_grid(problem: RegimeProblem, state) -> Float[Array, "..."]:
    def at(action: dict, depth: int):
        if depth == len(problem.action_axes):
            return problem.q(state, action)[0]
        axis = problem.action_axes[depth]
        return jax.vmap(lambda x: at({**action, axis.name: x}, depth + 1))(axis.points)

    return at({}, 0)


def _taste_shock_scale(problem: RegimeProblem):
    if not problem.regime.taste_shocks:
        return None
    return problem.params[""]["taste_shock_scale"]
