"""Likelihood of observed choices and choice-probability moments, differentiable in params.

What is differentiable. The solve is a pure function of `params`; value arrays are
piecewise smooth in them (the grid argmax over continuous actions switches at isolated
parameter values, where the value is continuous with a kink). With taste shocks the
discrete choice probabilities `softmax(v_d / λ)` are smooth wherever `v_d` is, so
`log_likelihood` and `choice_moments` have gradients that agree with finite differences
away from those kinks. Simulated draws (discrete choices, grid actions, Markov draws) are
piecewise constant in `params`: gradients flow through values and probabilities, never
through sampled choices — so estimate by likelihood or by probability-weighted moments,
not by moments of simulated choices.

Evaluation at data points follows simulation exactly: `v_d` is computed at each row's
exact (off-grid) state against the next period's value arrays, on the action grids.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import LcmError
from .._model._params import resolve_params
from .._solve._on_grid import refined_grid_actions
from .._solve._solution import Solution
from ._choice import (
    log_probabilities_from_values,
    probabilities_from_values,
    regime_problem,
    taste_shock_scale,
)
from ._data import ChoiceData, RegimeBlock, prepare_data

if TYPE_CHECKING:
    from .._facade import Model
    from .._typing import Data, Params


def log_likelihood(
    model: Model,
    params: Params,
    data: Data | ChoiceData,
    *,
    solution: Solution | None = None,
    measurement_sd=None,
    per_row: bool = False,
    validate: str = "raise",
) -> Float[Array, ""] | Float[Array, " n_rows"]:
    """Log-likelihood of observed discrete choices (and, optionally, continuous ones).

    Each row contributes `log P(d_obs | s, t)` with `P = softmax(v_d / λ)` evaluated at
    the row's exact state (the regime needs taste shocks if it has discrete actions).
    With `measurement_sd`, each observed continuous action `c_obs` (non-NaN) adds
    `log N(c_obs; c*, sd²)`, where `c*` is the model's best continuous action given the
    observed discrete one: the grid argmax refined by the vertex of the parabola
    through it and its two neighbours (a single continuous action; with several, the
    grid argmax). The refinement makes `c*` move smoothly with `params` between grid
    points; the grid argmax alone would be piecewise constant.

    Args:
        model: the `Model`.
        params: the parameters (may be traced: jit / grad / vmap).
        data: a DataFrame or dict of arrays (see `prepare_data`) or a `ChoiceData`.
        solution: `model.solve(params)`; `None` solves inside (differentiably).
        measurement_sd: `None` (discrete choices only), a scalar, or a dict of scalars
            by continuous action name.
        per_row: return one contribution per data row (in data order; 0 for rows that
            contribute nothing) instead of the sum — for outer-product / sandwich SEs.
        validate: passed to `model.solve` when `solution` is None.

    Returns:
        The total log-likelihood (a scalar), or per-row contributions.

    Example:
        >>> df = model.simulate(params, initial, key=jax.random.key(0)).to_dataframe()
        >>> data = prepare_data(model, df)            # once; reusable across params
        >>> loss = lambda p: -log_likelihood(model, p, data)
        >>> value, grad = jax.jit(jax.value_and_grad(loss))(params)
    """
    data = prepare_data(model, data)
    terms = likelihood_terms(model, data, measurement_sd)
    by_block = block_log_likelihoods(
        model, terms, validate, params, data.blocks, solution, measurement_sd
    )
    if per_row:
        return _in_row_order(by_block, data.blocks, data.n_rows)
    return sum((jnp.sum(out) for out in by_block.values()), start=jnp.zeros(()))


def likelihood_terms(model, data: ChoiceData, measurement_sd):
    """Static: per regime with data, the discrete actions and observed continuous actions."""
    terms = []
    for name, block in data.blocks.items():
        regime_plan = model.plan.regimes[name]
        discrete = regime_plan.discrete_actions
        if discrete and not regime_plan.taste_shocks:
            raise LcmError(
                f"log_likelihood: regime {name!r} has discrete actions but no taste shocks, so "
                "observed discrete choices have probability 0 or 1; add "
                "taste_shocks=ExtremeValueShocks() to the regime."
            )
        continuous = tuple(
            a
            for a in regime_plan.continuous_actions
            if measurement_sd is not None and np.any(np.isfinite(block.continuous_actions[a]))
        )
        if discrete or continuous:
            terms.append((name, discrete, continuous))
    return tuple(terms)


# The data enter as `ChoiceData.blocks`, not as the `ChoiceData`, whose number of rows is
# static: a panel of as many subjects but another number of rows (subjects who die or
# retire earlier) would otherwise trace and compile the whole likelihood again (issue
# 62: 113 s for a second panel of the same size against 50 s for the first). The
# blocks' shapes depend only on the periods and the most rows in a period.
@functools.partial(jax.jit, static_argnames=("model", "terms", "validate"))
def block_log_likelihoods(model, terms, validate, params, blocks, solution, measurement_sd):
    """Each row's log-likelihood contribution, `(n_groups, max_rows)` per regime of
    `terms` in the layout of its `RegimeBlock` (0 at padding)."""
    if solution is None:
        solution = model.solve(params, validate=validate)
    resolved = resolve_params(model.plan, params)
    dtype = jnp.zeros(()).dtype
    out = {}
    for name, discrete, continuous in terms:
        block = blocks[name]
        sds = _measurement_sds(measurement_sd, continuous, name)

        def row(problem, state, d_obs, c_obs, discrete=discrete, continuous=continuous, sds=sds):
            total = jnp.zeros((), dtype)
            if discrete:
                v_d = model.solvers[name].discrete_values(problem, state)
                logp = log_probabilities_from_values(v_d, taste_shock_scale(problem), len(discrete))
                total = total + logp[tuple(d_obs[a] for a in discrete)]
            if continuous:
                best = best_continuous_actions(problem, state, d_obs, model.solvers[name])
                for action in continuous:
                    x = c_obs[action]
                    seen = jnp.isfinite(x)
                    z = (jnp.where(seen, x, best[action]) - best[action]) / sds[action]
                    logpdf = -0.5 * z**2 - jnp.log(sds[action]) - 0.5 * math.log(2 * math.pi)
                    total = total + jnp.where(seen, logpdf, 0.0)
            return total

        values = _map_rows(model, resolved, solution, name, block, row)
        out[name] = jnp.where(jnp.asarray(block.mask), values, 0.0)
    return out


@functools.partial(jax.jit, static_argnames="n_rows")
def _in_row_order(by_block, blocks, n_rows):
    """The blocks' contributions as one vector in the order of the data's rows."""
    contributions = jnp.zeros(n_rows, jnp.zeros(()).dtype)
    for name, values in by_block.items():
        contributions = _scatter(contributions, blocks[name], values)
    return contributions


def choice_moments(
    model: Model,
    params: Params,
    data: Data | ChoiceData,
    *,
    solution: Solution | None = None,
    validate: str = "raise",
) -> dict[str, Float[Array, "n_periods ..."]]:
    """Average conditional choice probabilities by regime and period over observed states.

    For each regime with discrete actions: an array `(n_periods, *discrete_shape)` whose
    entry `[t, d]` is the mean of `P(d | s_i, t)` over the data rows `i` in that regime
    and period (NaN for periods without rows). Smooth in `params` with taste shocks, so
    usable in a differentiable method-of-moments objective, e.g. against observed choice
    frequencies.
    """
    data = prepare_data(model, data)
    return _choice_moments(model, validate, params, data.blocks, solution)


@functools.partial(jax.jit, static_argnames=("model", "validate"))
def _choice_moments(model, validate, params, blocks, solution):
    if solution is None:
        solution = model.solve(params, validate=validate)
    resolved = resolve_params(model.plan, params)
    out = {}
    for name, block in blocks.items():
        regime_plan = model.plan.regimes[name]
        discrete = regime_plan.discrete_actions
        if not discrete:
            continue

        n_discrete = len(discrete)

        def row(problem, state, d_obs, c_obs, n=n_discrete, solver=model.solvers[name]):
            v_d = solver.discrete_values(problem, state)
            return probabilities_from_values(v_d, taste_shock_scale(problem), n)

        p = _map_rows(model, resolved, solution, name, block, row)
        mask = jnp.asarray(block.mask).reshape(block.mask.shape + (1,) * len(discrete))
        counts = jnp.sum(mask, axis=1)
        means = jnp.where(
            counts > 0, jnp.sum(jnp.where(mask, p, 0.0), axis=1) / jnp.maximum(counts, 1), jnp.nan
        )
        dshape = p.shape[2:]
        full = jnp.full((model.plan.n_periods, *dshape), jnp.nan, p.dtype)
        out[name] = full.at[jnp.asarray(block.periods)].set(means)
    return out


def best_continuous_actions(problem, state, discrete_action, solver=None) -> dict[str, Array]:
    """The best continuous actions at `state` given the discrete actions: `solver`'s
    (`AbstractSolver.best_continuous_actions`; e.g. `DCEGM`'s continuous policy), or
    without a solver the best points of the action grids, a single continuous action
    refined to the vertex of the parabola through the grid maximum and its two
    neighbours (clipped to them), which moves continuously with the parameters between
    grid switches.
    """
    if solver is None:
        return refined_grid_actions(problem, state, discrete_action)
    return solver.best_continuous_actions(problem, state, discrete_action)


def _measurement_sds(measurement_sd, continuous, regime) -> dict[str, Array]:
    if not continuous:
        return {}
    if isinstance(measurement_sd, Mapping):
        missing = [a for a in continuous if a not in measurement_sd]
        if missing:
            raise LcmError(f"log_likelihood: regime {regime!r}: measurement_sd lacks {missing}.")
        return {a: jnp.asarray(measurement_sd[a]) for a in continuous}
    return {a: jnp.asarray(measurement_sd) for a in continuous}


# Rows are evaluated in chunks of this many (a scan over vmapped chunks): keeps the
# (rows x actions) intermediates cache-sized. 0: one vmap over all rows of a period.
ROW_BATCH = 0


def states_width(states) -> int:
    return next(iter(jax.tree.leaves(states))).shape[0] if jax.tree.leaves(states) else 0


def _map_rows(model, resolved, solution, name: str, block: RegimeBlock, fn):
    """`fn(problem, state, d_obs, c_obs)` at every row of `block`: `(n_groups, max_rows, ...)`.

    A scan over the block's periods (the problem is built once per period) with a vmap
    over rows inside, checkpointed so reverse mode stores one period's work at a time.
    A period without rows of the block (padding, see `prepare_data`) gives zeros
    without evaluating anything, so its stand-in rows cost nothing and reach no
    gradient.
    """
    regime_plan = model.plan.regimes[name]
    dtype = jnp.zeros(()).dtype

    def group(inputs):
        observed = inputs[-1]
        rows = jax.eval_shape(evaluate, inputs[:-1])
        return jax.lax.cond(
            jnp.any(observed),
            evaluate,
            lambda _: jax.tree.map(lambda r: jnp.zeros(r.shape, r.dtype), rows),
            inputs[:-1],
        )

    def evaluate(inputs):
        period, states, d_obs, c_obs = inputs
        problem = regime_problem(
            model, resolved, name, period, solution.continuation_values, solution.policies
        )

        def one(state, d, c):
            state = dict(state)
            for s in block.process_as_values:
                points = problem.process_points[s]
                state[s] = jnp.argmin(jnp.abs(points - state[s])).astype(jnp.int32)
            for s in regime_plan.states:
                if regime_plan.grids[s].is_discrete and s not in block.process_as_values:
                    state[s] = state[s].astype(jnp.int32)
            return fn(problem, state, d, c)

        if ROW_BATCH and states_width(states) > ROW_BATCH:
            return jax.lax.map(
                lambda args: one(*args), (states, d_obs, c_obs), batch_size=ROW_BATCH
            )
        return jax.vmap(one)(states, d_obs, c_obs)

    states = {
        s: jnp.asarray(v, dtype) if (v.dtype.kind == "f") else jnp.asarray(v)
        for s, v in block.states.items()
    }
    inputs = (
        jnp.asarray(block.periods),
        states,
        {a: jnp.asarray(v) for a, v in block.discrete_actions.items()},
        {a: jnp.asarray(v, dtype) for a, v in block.continuous_actions.items()},
        jnp.asarray(block.mask),
    )
    return jax.lax.map(jax.checkpoint(group), inputs)


def _scatter(contributions, block: RegimeBlock, out):
    """`out` (masked to 0 at padding) added to `contributions` at the block's rows."""
    n_rows = contributions.shape[0]
    index = jnp.where(jnp.asarray(block.mask), jnp.asarray(block.row), n_rows)
    return contributions.at[index.reshape(-1)].add(out.reshape(-1), mode="drop")


__all__ = [
    "ChoiceData",
    "best_continuous_actions",
    "block_log_likelihoods",
    "choice_moments",
    "likelihood_terms",
    "log_likelihood",
]
