"""The Euler equation of one regime in one period, read off a solver's own policy: the
default of `AbstractSolver.euler_errors` (one continuous state and action, next period
read through `ContinuationReader`s of the marginal value)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._kernel import RegimeProblem
from ._reading import ContinuationReader, expected_at_savings, invert_marginal, marginal_of


@runtime_checkable
class PolicySolver(Protocol):
    """What the Euler equation reads of a solver (`AbstractSolver` has all three): its
    continuous policy, its action's resolution and the borrowing limit. A structural
    type, so that this module, which `_solver.py` imports, need not import it back."""

    def continuous_policy(self, problem: RegimeProblem, state: dict[str, Array]) -> dict: ...

    def action_step(self, problem: RegimeProblem, action: str) -> Array: ...

    def borrowing_limit(self, problem: RegimeProblem, discrete: dict[str, Array]) -> Array: ...


def feasible_at(problem: RegimeProblem, point: dict[str, Array]) -> Array:
    """Whether every constraint of the regime holds at `point` (states and actions)."""
    evaluate = problem.evaluator(point)
    feasible = jnp.asarray(True)
    for constraint in problem.regime.constraints.values():
        feasible = feasible & jnp.asarray(evaluate(constraint)).astype(bool)
    return feasible


def euler_errors_on_axes(
    solver: PolicySolver,
    problem: RegimeProblem,
    readers: dict[str, ContinuationReader],
    state: str,
    action: str,
    points: Float[Array, " n_points"],
) -> Float[Array, "..."]:
    """`log10 |1 − (u')⁻¹(β·E[R·u'(c')]) / c|` with `c` the solver's `continuous_policy`
    at each of `points` of `state` (axes: the regime's other states, its discrete
    actions, then `points`; NaN where infeasible or within `action_step` of the
    borrowing limit)."""
    regime_plan = problem.regime
    discrete_states = [a for a in problem.state_axes if a.name != state]
    discrete_actions = [a for a in problem.action_axes if a.is_discrete]

    def at(z, d_codes, x):
        point = {**z, state: x}
        consumption = solver.continuous_policy(problem, point)[action][d_codes]
        d = dict(zip([a.name for a in discrete_actions], d_codes, strict=True))
        beta = problem.discount_factor(problem.evaluator({**z, **d}))
        feasible = feasible_at(problem, {**z, **d, state: x, action: consumption})
        savings = x - consumption
        _, marginal, _ = expected_at_savings(problem, readers, state, action, {**z, **d}, savings)

        def utility(c):
            evaluate = problem.evaluator({**z, **d, action: c, state: c})
            return jnp.asarray(evaluate(regime_plan.utility))

        q = beta * marginal
        implied = invert_marginal(marginal_of(utility), jnp.maximum(q, jnp.finfo(q.dtype).tiny), 8)
        error = jnp.log10(jnp.abs(1.0 - implied / consumption))
        step = solver.action_step(problem, action)
        unconstrained = savings > solver.borrowing_limit(problem, {**z, **d}) + step
        ok = feasible & unconstrained & (q > 0) & jnp.isfinite(error)
        return jnp.where(ok, error, jnp.nan)

    def over_z(z_axes, z):
        if z_axes:
            first, rest = z_axes[0], z_axes[1:]
            return jax.vmap(lambda code: over_z(rest, {**z, first.name: code}))(first.points)
        return over_d(discrete_actions, z, ())

    def over_d(d_axes, z, codes):
        if d_axes:
            first, rest = d_axes[0], d_axes[1:]
            return jax.vmap(lambda code: over_d(rest, z, (*codes, code)))(first.points)
        return jax.vmap(lambda x: at(z, codes, x))(points)

    return over_z(discrete_states, {})
