"""Euler-equation errors: the field's accuracy metric for consumption–saving policies.

At a state where the agent saves more than the borrowing limit, the optimal consumption
`c` satisfies `u'(c) = β·E[R·u'(c')]`, where `c'` is next period's consumption (weighted
by next period's choice probabilities with taste shocks). The Euler error is the
relative consumption error that the policy implies,
`log10 |1 − (u')⁻¹(β·E[R·u'(c')]) / c|`, with both `c` and `c'` taken from the solver's
own policies: `DCEGM`'s continuous policy, or the action-grid point `GridSearch` chooses.
Each solver computes them (`AbstractSolver.euler_errors`): `NEGM` on its liquid margin,
for keeping and for adjusting at every durable node.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import InvalidPeriodError, LcmError
from .._grids._age import age_of
from .._model._dag import Evaluator
from .._model._params import resolve_params
from .._solve._reading import ContinuationReader, combine_values_and_slopes
from .._solve._solution import Solution
from .._solve._solver import FollowingPeriod, taste_shock_scale
from ._choice import next_values_at, regime_problem


def euler_errors(
    model,
    params,
    solution: Solution | None = None,
    *,
    regime: str,
    state: str | None = None,
    action: str | None = None,
    points=None,
) -> Float[Array, "n_periods ..."]:
    """`log10` relative Euler-equation errors of a consumption–saving regime's policy.

    Args:
        model: the `Model`.
        params: the parameters the solution was computed with.
        solution: `model.solve(params)`; `None` solves first.
        regime: the regime's name.
        state: its continuous state (cash on hand); default: the one the regime's solver
            knows (`DCEGM`'s `state`, `NEGM`'s `liquid`).
        action: its continuous action (consumption); default: the one the regime's
            solver knows (`DCEGM`'s `action`, `NEGM`'s `consumption`).
        points: values of `state` at which to evaluate (default: its grid).

    Returns:
        An array `(n_periods, *other states, *discrete actions, n_points)`: the error at
        each point for each discrete choice, NaN where it is not defined (the last
        period, inactive periods, infeasible choices, and points where the agent is at the
        borrowing limit, i.e. saves at most one action-grid step, or nothing with
        `DCEGM`). With `NEGM` the other states include the durable (its grid nodes)
        and the discrete action is keep/adjust. Summarise with e.g. `numpy.nanmean` /
        `numpy.nanmax`.

    Example:
        >>> errors = lcm.euler_errors(model, params, solution, regime="retired")
        >>> float(np.nanmean(errors))   # e.g. -6.5 for DC-EGM, -2.5 for grid search
    """
    plan = model.plan
    plan.reject_age_varying_grids("euler_errors")
    if regime not in plan.regimes:
        raise InvalidPeriodError(
            f"Unknown regime {regime!r}; the model's regimes are {list(plan.regimes)}."
        )
    known = model.solvers[regime].euler_variables()
    if known is not None:
        state = known[0] if state is None else state
        action = known[1] if action is None else action
    regime_plan = plan.regimes[regime]
    if state is None or action is None:
        raise LcmError(
            f"euler_errors: regime {regime!r}'s solver does not know its Euler equation's "
            "variables; name its continuous state and action (state=..., action=...)."
        )
    if regime_plan.is_terminal:
        raise LcmError(f"euler_errors: regime {regime!r} is terminal: it has no Euler equation.")
    if state not in regime_plan.states or regime_plan.grids[state].is_discrete:
        raise LcmError(f"euler_errors: {state!r} is not a continuous state of regime {regime!r}.")
    if action not in regime_plan.actions or regime_plan.grids[action].is_discrete:
        raise LcmError(f"euler_errors: {action!r} is not a continuous action of regime {regime!r}.")
    if any(t.per_target for t in regime_plan.state_transitions.values()):
        raise LcmError(
            f"euler_errors: regime {regime!r} has a law of motion that depends on the regime "
            "moved to (a per-target state transition); its Euler equation is not supported."
        )
    if solution is None:
        solution = model.solve(params)
    if not isinstance(solution, Solution):
        raise LcmError(
            f"euler_errors: solution must be a Solution from model.solve, got "
            f"{type(solution).__name__}."
        )
    if points is None:
        points = regime_plan.grids[state].to_jax()
    points = jnp.asarray(points, jnp.zeros(()).dtype)
    errors = _euler_errors(
        model,
        regime,
        state,
        action,
        params,
        solution.continuation_values,
        solution.policies,
        points,
    )
    active = np.zeros(plan.n_periods, bool)
    active[[t for t in regime_plan.active if t + 1 < plan.n_periods]] = True
    shape = (-1,) + (1,) * (errors.ndim - 1)
    return jnp.where(jnp.asarray(active).reshape(shape), errors, jnp.nan)


@functools.partial(jax.jit, static_argnames=("model", "regime", "state", "action"))
def _euler_errors(model, regime, state, action, params, values, policies, points):
    plan = model.plan
    resolved = resolve_params(plan, params)
    solver = model.solvers[regime]
    n_periods = plan.n_periods

    def at_period(period):
        problem = regime_problem(model, resolved, regime, period, values, policies)
        following = FollowingPeriod(
            problem=lambda target: regime_problem(
                model, resolved, target, period + 1, values, policies
            ),
            readers=lambda: _readers(model, resolved, regime, action, period + 1, values, policies),
        )
        return solver.euler_errors(problem, following, state, action, points)

    periods = jnp.arange(n_periods - 1)
    inner = jax.lax.map(at_period, periods)
    last = jnp.full(inner.shape[1:], jnp.nan, inner.dtype)
    return jnp.concatenate([inner, last[None]], axis=0)


def _readers(model, resolved, regime, action, next_period, values, policies):
    """Next period's regimes read for their marginal value `E[u'(c')]`."""
    plan = model.plan
    next_period = jnp.asarray(next_period, jnp.int32)
    next_age = age_of(model.ages, next_period)
    readers = {}
    for target in plan.regimes[regime].targets:
        reader = None
        if target in policies:
            policy = jax.tree.map(
                lambda x: x[jnp.minimum(next_period, x.shape[0] - 1)], policies[target]
            )
            reader = model.solvers[target].policy_reader(
                plan, target, policy, resolved[target], next_period, next_age
            )
        if reader is None:
            reader = _policy_reader(model, resolved, target, action, next_period, values, policies)
        readers[target] = reader
    return readers


def _policy_reader(model, resolved, target, action, period, values, policies):
    """A regime read at `m'` through its own choices there (its solver's queries)."""
    plan = model.plan
    target_plan = plan.regimes[target]
    continuous = [s for s in target_plan.states if not target_plan.grids[s].is_discrete]
    if target_plan.is_terminal or not continuous or action not in target_plan.actions:
        next_values = next_values_at(values, period - 1)

        def constant(data, fixed, x):
            value = next_values[target]
            if continuous:
                value = jnp.max(value, axis=target_plan.states.index(continuous[0]))
            return value, jnp.zeros_like(value)

        return ContinuationReader(
            continuous=continuous[0] if continuous else None,
            axes=tuple(s for s in target_plan.states if s not in continuous),
            data=(),
            fixed={},
            read_fn=constant,
        )
    name = continuous[0]
    problem = regime_problem(model, resolved, target, period, values, policies)
    discrete_states = [a for a in problem.state_axes if a.name != name]
    n_d = len(target_plan.discrete_actions)
    scale = taste_shock_scale(problem)
    solver = model.solvers[target]

    def at_z(z, x):
        # The target's own choices at `m'` (its solver's queries), without derivative.
        point = {**z, name: x}
        c = jax.lax.stop_gradient(solver.continuous_policy(problem, point)[action])
        v = jax.lax.stop_gradient(solver.discrete_values(problem, point))

        def marginal_at(codes, c_d):
            d = dict(zip(target_plan.discrete_actions, codes, strict=True))

            def utility(cc):
                evaluate = Evaluator(
                    target_plan.helpers,
                    {**problem.inputs({**z, **d}), action: cc, name: x},
                    problem.params,
                )
                return jnp.asarray(evaluate(target_plan.utility))

            return jax.grad(utility)(c_d)

        if n_d:
            flat_c = c.reshape(-1)
            codes = jnp.stack(jnp.unravel_index(jnp.arange(flat_c.shape[0]), c.shape), axis=-1)
            mu = jax.vmap(lambda k, cc: marginal_at(tuple(k), cc))(codes, flat_c)
            return combine_values_and_slopes(v.reshape(-1), mu, scale)
        return v, marginal_at((), c)

    def read_fn(data, fixed, x):
        def over(axes, z):
            if axes:
                first, rest = axes[0], axes[1:]
                return jax.vmap(lambda code: over(rest, {**z, first.name: code}))(first.points)
            return at_z(z, x)

        return over(discrete_states, {})

    return ContinuationReader(
        continuous=name,
        axes=tuple(a.name for a in discrete_states),
        data=(),
        fixed={},
        read_fn=read_fn,
    )
