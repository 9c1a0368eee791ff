"""Conditional choice probabilities of the discrete actions, from a solution.

With taste shocks (`Regime(..., taste_shocks=ExtremeValueShocks())`) the probability of
discrete action `d` at state `s` in period `t` is the softmax of `v_d(s) / λ`, where
`v_d` is the best value over the continuous actions given `d` (the same `v_d` the solve
combines with `λ·logsumexp(v_d / λ)`). It is smooth in the parameters wherever `v_d` is,
so `jax.grad` flows through it. Without taste shocks the choice is the argmax of `v_d`
(a one-hot array, piecewise constant in the parameters).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import InvalidPeriodError, InvalidRegimeError, LcmError
from .._grids._age import age_of
from .._model._params import resolve_params
from .._solve._axes import lift
from .._solve._kernel import RegimeProblem
from .._solve._reduce import choice_weights, log_choice_weights
from .._solve._refine_spec import RefineCode
from .._solve._solution import Solution

if TYPE_CHECKING:
    from .._protocols import ModelLike
    from .._typing import Params


def next_values_at(solution_values: dict[str, Array], period) -> dict[str, Array]:
    """The value arrays of period `period + 1` (zeros after the last period).

    `period` may be traced.
    """
    out = {}
    for name, values in solution_values.items():
        shifted = jnp.concatenate([values[1:], jnp.zeros((1, *values.shape[1:]), values.dtype)])
        out[name] = shifted[period]
    return out


def regime_problem(
    model, resolved, regime: str, period, solution_values, policies=None
) -> RegimeProblem:
    """The Bellman problem of `regime` in `period` against the solution's next values.

    With `policies` (the solution's), the problem carries the regime's own policy of
    that period, which endogenous-grid solvers read instead of searching.
    """
    plan = model.plan
    period = jnp.asarray(period, dtype=jnp.int32)
    age = age_of(model.ages, period)
    regime_plan = plan.regimes[regime]
    next_values = None if regime_plan.is_terminal else next_values_at(solution_values, period)
    policy = None
    if policies and regime in policies:
        policy = jax.tree.map(lambda x: x[period], policies[regime])
    return RegimeProblem(
        plan, regime_plan, resolved[regime], period, age, next_values, False, policy=policy
    )


def probabilities_from_values(v_d: Array, scale, n_discrete: int) -> Array:
    """Softmax (or argmax one-hot when `scale` is None) over the last `n_discrete` axes;
    a ruled-out (`-inf`) combination has probability 0 and derivative 0."""
    if n_discrete == 0:
        return jnp.ones(v_d.shape, v_d.dtype)
    lead = v_d.shape[: v_d.ndim - n_discrete]
    flat = v_d.reshape((*lead, -1))
    if scale is None:
        p = jax.nn.one_hot(jnp.argmax(flat, axis=-1), flat.shape[-1], dtype=v_d.dtype)
    else:
        p = choice_weights(flat, scale)
    return p.reshape(v_d.shape)


def log_probabilities_from_values(v_d: Array, scale, n_discrete: int) -> Array:
    """`log` of `probabilities_from_values`, computed stably (log-softmax): `-inf` with
    derivative 0 for a ruled-out combination, finite derivatives in `scale` elsewhere."""
    if n_discrete == 0:
        return jnp.zeros(v_d.shape, v_d.dtype)
    lead = v_d.shape[: v_d.ndim - n_discrete]
    flat = v_d.reshape((*lead, -1))
    if scale is None:
        logp = jnp.log(probabilities_from_values(flat, None, 1))
    else:
        logp = log_choice_weights(flat, scale)
    return logp.reshape(v_d.shape)


def taste_shock_scale(problem: RegimeProblem):
    if not problem.regime.taste_shocks:
        return None
    return problem.params[""]["taste_shock_scale"]


def discrete_values(
    model: ModelLike, params: Params, solution: Solution, regime: str, period: int | np.integer
) -> Float[Array, "..."]:
    """`v_d` on the state grid: the best value over the continuous actions, per discrete action.

    Returns an array with the regime's state axes (declaration order) followed by one axis
    per discrete action (declaration order).
    """
    params = model.checked_params(params)  # labelled Series leaves become arrays
    _check(model, solution, regime, period)
    return _discrete_values_on_grid(
        model, regime, params, solution.continuation_values, solution.policies, int(period)
    )


@functools.partial(jax.jit, static_argnames=("model", "regime"))
def _discrete_values_on_grid(model, regime, params, solution_values, policies, period):
    resolved = resolve_params(model.plan, params)
    problem = regime_problem(model, resolved, regime, period, solution_values, policies)
    solver = model.solvers[regime]
    return lift(lambda state: solver.discrete_values(problem, state), problem.state_axes)


def refine_codes(
    model: ModelLike,
    params: Params,
    solution: Solution | None,
    regime: str,
    period: int | np.integer,
) -> dict[str, Array]:
    """How the refinement of each continuous action ended at each cell of the state grid
    (`GridSearch(refine=...)`): `{action: codes}`, each of the regime's state axes
    (declaration order) followed by one axis per discrete action, holding
    `lcm.RefineCode` values (`interior`, `lower_bound`, `kink`, `tie`, ...). Empty for a
    regime whose solver refines nothing. `solution`: `model.solve(params)`; `None`
    solves first.

    Example:
        >>> codes = lcm.refine_codes(model, params, solution, "working", 0)
        >>> (codes["hours"] == lcm.RefineCode.interior).mean()
    """
    params = model.checked_params(params)  # labelled Series leaves become arrays
    if solution is None:
        solution = model.solve(params)
    _check(model, solution, regime, period)
    return _refine_codes_on_grid(
        model, regime, params, solution.continuation_values, solution.policies, int(period)
    )


@functools.partial(jax.jit, static_argnames=("model", "regime"))
def _refine_codes_on_grid(model, regime, params, solution_values, policies, period):
    resolved = resolve_params(model.plan, params)
    problem = regime_problem(model, resolved, regime, period, solution_values, policies)
    solver = model.solvers[regime]
    probe = jax.eval_shape(
        lambda: solver.refine_codes(problem, {a.name: a.points[0] for a in problem.state_axes})
    )
    if probe is None:
        return {}
    return lift(lambda state: solver.refine_codes(problem, state), problem.state_axes)


def choice_probabilities(
    model: ModelLike,
    params: Params,
    solution: Solution | None,
    regime: str,
    period: int | np.integer,
) -> Float[Array, "..."]:
    """Conditional choice probabilities `P(d | s, period)` on the regime's state grid.

    Args:
        model: the `Model`.
        params: the parameters the solution was computed with.
        solution: `model.solve(params)`; `None` solves first.
        regime: the regime's name.
        period: the period (a Python int).

    Returns:
        An array with the regime's state axes (declaration order) followed by one axis
        per discrete action (declaration order), summing to 1 over the action axes. With
        taste shocks it is `softmax(v_d / taste_shock_scale)` (smooth in `params`, so
        `jax.grad` works); without, the one-hot argmax of `v_d`.

    Example:
        >>> p = lcm.choice_probabilities(model, params, solution, "working", 0)
        >>> p.shape   # (n_wealth, n_labor)
    """
    params = model.checked_params(params)  # labelled Series leaves become arrays
    if solution is None:
        solution = model.solve(params)
    _check(model, solution, regime, period)
    return _probabilities_on_grid(
        model, regime, params, solution.continuation_values, solution.policies, int(period)
    )


@functools.partial(jax.jit, static_argnames=("model", "regime"))
def _probabilities_on_grid(model, regime, params, solution_values, policies, period):
    resolved = resolve_params(model.plan, params)
    problem = regime_problem(model, resolved, regime, period, solution_values, policies)
    solver = model.solvers[regime]
    v_d = lift(lambda state: solver.discrete_values(problem, state), problem.state_axes)
    n_discrete = len(problem.regime.discrete_actions)
    return probabilities_from_values(v_d, taste_shock_scale(problem), n_discrete)


def _check(model, solution: Solution, regime: str, period) -> None:
    plan = model.plan
    if regime not in plan.regimes:
        raise InvalidRegimeError(
            f"Unknown regime {regime!r}; the model's regimes are {list(plan.regimes)}."
        )
    if (
        isinstance(period, bool)
        or not isinstance(period, int | np.integer)
        or not (0 <= period < plan.n_periods)
    ):
        raise InvalidPeriodError(
            f"Regime {regime!r}: period must be an int in 0..{plan.n_periods - 1}, got {period!r}."
        )
    if period not in plan.regimes[regime].active:
        raise InvalidPeriodError(f"Regime {regime!r} is not active in period {period}.")
    if not isinstance(solution, Solution):
        raise LcmError(
            f"solution must be a Solution from model.solve, got {type(solution).__name__}."
        )


def unconverged_refinements(model: ModelLike, params: Params) -> tuple[str, float] | None:
    """Where `GridSearch(refine=...)` ran out of Newton steps at `params`: a sentence per
    regime and refined action with `unconverged` cells (`RefineCode`), and the largest
    share of a period's cells that is; None where there are none (or no solver refines).
    Such a cell keeps the best point found, with a zero derivative of the action:
    moments and likelihoods that weigh it have derivatives that are off by as much.
    `estimate` reports it.

    Only where a regime's solver refines: then one solve and `refine_codes` in each
    active period (reduced Mahler–Yum: 0.34 s a period once compiled, 11 s to compile).
    """
    plan = model.plan
    refining = {}  # regime -> its Newton steps
    for name, regime in plan.regimes.items():
        refine = getattr(model.solvers[name], "refine", None)  # `GridSearch(refine=...)`
        if refine is not None and refine.names(regime.continuous_actions):
            refining[name] = refine.newton_steps
    if not refining:
        return None
    params = model.checked_params(params)
    solution = model.solve(params, validate="off")
    sentences, largest = [], 0.0
    for name, steps in refining.items():
        counts: dict[str, list[tuple[int, int, int]]] = {}
        for period in sorted(plan.regimes[name].active):
            codes = _refine_codes_on_grid(
                model,
                name,
                params,
                solution.continuation_values,
                solution.policies,
                int(period),
            )
            for action, array in codes.items():
                array = np.asarray(array)
                feasible = int(np.sum(array != RefineCode.infeasible))
                stuck = int(np.sum(array == RefineCode.unconverged))
                counts.setdefault(action, []).append((period, stuck, feasible))
        for action, rows in counts.items():
            stuck = sum(r[1] for r in rows)
            if not stuck:
                continue
            total = sum(r[2] for r in rows)
            share, period = max((r[1] / max(r[2], 1), -r[0]) for r in rows)
            period = -period  # the first period with the largest share
            largest = max(largest, share)
            sentences.append(
                f"the refinement of {action!r} in regime {name!r} ran out of Newton steps "
                f"at {stuck:,} of {total:,} cells (states x discrete choices; "
                f"{share:.2%} in period {period}, the most), where "
                f"its derivative is taken as zero; more than {steps} Newton steps "
                "(lcm.Refine(newton_steps=...)) converge more of them"
            )
    return ("; ".join(sentences), largest) if sentences else None
