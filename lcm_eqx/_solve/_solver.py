"""Solvers: how the best action is found at a state. Every solver implements
`AbstractSolver`; the backward induction and simulation only talk to this interface."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._axes import lift, map_axis, reduce_axis
from ._kernel import RegimeProblem, max_each

if TYPE_CHECKING:
    from .._model._plan import ModelPlan, RegimePlan


class PeriodSolution(NamedTuple):
    """What a solver returns for one regime in one period.

    `values` has the regime's state shape (None where the backward induction reads it
    after the period loop: see `solve_regimes`); `violations` the check violations at
    every state point (see `RegimeProblem.checks` and the solver's `extra_checks`): a
    tuple of arrays of the state shape, one per check, or one array with a last axis of
    checks;
    `policy` is whatever the solver keeps for later queries (simulation, likelihoods, the
    next period), or None; `carried` the second value array of an aggregator that has
    one, or None.
    """

    values: Array | None
    violations: Array
    policy: Any
    # The value array earlier periods read as this one's continuation, where it is not
    # `values` (an aggregator that carries a second value array: `PresentBias`'s `W`).
    carried: Array | None = None


class AbstractSolver(eqx.Module):
    """How a regime's Bellman problem is solved in one period.

    The backward induction (`solve_model`) owns the period loop, checkpointing, sharding,
    checks and the `Solution`; a solver only sees one regime-period problem:

    - `solve_period(problem)`: the value array on the state grid (and what the solver
      keeps, its `policy`);
    - `choose(problem, state, key)`: the chosen actions at an off-grid state (simulation);
    - `discrete_values(problem, state)`: `v_d`, the best value over the continuous
      actions for each discrete action (choice probabilities and likelihoods).

    `problem.policy` holds the solver's own policy of that period where callers have it;
    `problem.last_period` is True where the backward induction solves the model's last
    period apart from its loop (nothing follows: see `_last_period_apart`).
    """

    def applies_to(self, regime: RegimePlan) -> bool:
        """Whether a model-wide default of this solver takes `regime` (else GridSearch)."""
        return True

    def check(self, model: ModelPlan, regime: RegimePlan) -> None:
        """Raise `ModelInitializationError` if `regime` is outside the solver's class."""

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]:
        """Names of the solver's own validation checks for `regime`, after the problem's."""
        return ()

    def compiler_options(self) -> dict[str, Any]:
        """XLA options for the solve program of a model that uses this solver.

        Applied when `Model.solve` is called eagerly (a nested `jit` cannot carry
        options: inside a caller's `jax.jit`, `grad` or `vmap` the caller's compile
        decides); the simulation keeps XLA's defaults. A model compiles with the options
        that the solvers of all its non-terminal regimes ask for alike; an XLA that does
        not know one is answered by compiling without any.
        """
        return {}

    @abc.abstractmethod
    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        """Solve one regime in one period on its whole state grid."""

    @abc.abstractmethod
    def choose(
        self, problem: RegimeProblem, state: dict[str, Array], key: PRNGKeyArray | None
    ) -> tuple[dict[str, Array], Array]:
        """The chosen action (codes / values by name) at `state`, and its value.

        `key` draws the taste shocks of regimes that have them.
        """

    @abc.abstractmethod
    def discrete_values(self, problem: RegimeProblem, state: dict[str, Array]) -> Array:
        """`v_d`: the best value over the continuous actions for each discrete action.

        Returns an array with one axis per discrete action of the regime (in declaration
        order; a 0-d array when the regime has none).
        """


class AbstractPointwiseSolver(AbstractSolver):
    """A solver that finds the best action one state point at a time (`value`).

    `solve_period` lifts `value` over the state axes with the knobs (`lift`): splayed
    axes are scanned in chunks, sharded axes read their own slice of the continuation.
    """

    @abc.abstractmethod
    def value(self, problem: RegimeProblem, state: dict[str, Array]) -> tuple[Any, Array]:
        """Value of the best action at `state`, and the maximal check violations.

        With an aggregator that carries a second value array (`problem.aggregator.n_values
        == 2`), the value is the pair `(decision value, carried value)`.
        """

    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        carried = problem.carried()
        if carried:
            value, check = lift(
                lambda state, arrays: self.value(problem.with_continuations(arrays), state),
                problem.state_axes,
                carried=carried,
            )
        else:
            value, check = lift(lambda state: self.value(problem, state), problem.state_axes)
        if isinstance(value, tuple):
            return PeriodSolution(value[0], check, None, value[1])
        return PeriodSolution(value, check, None)


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
        values = _q_on_action_grid(problem, state)  # axes: discrete..., continuous...
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


def _q_on_action_grid(problem: RegimeProblem, state) -> Float[Array, "..."]:
    def at(action: dict, depth: int):
        if depth == len(problem.action_axes):
            return problem.q(state, action)[0]
        axis = problem.action_axes[depth]
        return jax.vmap(lambda x: at({**action, axis.name: x}, depth + 1))(axis.points)

    return at({}, 0)


def taste_shock_scale(problem: RegimeProblem):
    if not problem.regime.taste_shocks:
        return None
    return problem.params[""]["taste_shock_scale"]


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
