"""Backward induction: one `lax.scan` over the periods of each segment.

Within a segment (consecutive periods with the same active regimes) every period has the
same structure, so the period step is traced and compiled once, with `period` and `age`
as traced scalars: compile time does not grow with the number of periods.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._model._params import resolve_params
from .._model._plan import ModelPlan
from ._axes import lift
from ._kernel import RegimeProblem
from ._solution import Solution
from ._solver import AbstractSolver


def state_shape(plan: ModelPlan, regime: str) -> tuple[int, ...]:
    regime_plan = plan.regimes[regime]
    return tuple(regime_plan.grids[s].n_points for s in regime_plan.states)


def age_of(plan_ages, period):
    return period if plan_ages is None else plan_ages.age(period)


def solve_model(
    plan: ModelPlan, solver: AbstractSolver, ages, params, *, validate: bool
) -> Solution:
    """Solve the model by backward induction; a pure function of `params`."""
    resolved = resolve_params(plan, params)
    dtype = jnp.zeros(()).dtype
    shapes = {name: state_shape(plan, name) for name in plan.regimes}
    carry = {name: jnp.zeros(shape, dtype) for name, shape in shapes.items()}  # V_T = 0
    checks = {}
    values: dict[str, list] = {name: [] for name in plan.regimes}
    violations: dict[str, list] = {name: [] for name in plan.regimes}

    for segment in reversed(plan.segments):

        def step(next_values, period, segment=segment):
            age = age_of(ages, period)
            current, current_violations = {}, {}
            for name in segment.regimes:
                problem = RegimeProblem(
                    plan, plan.regimes[name], resolved[name], period, age, next_values, validate
                )
                checks[name] = tuple(problem.checks) if validate else ()
                value, check = lift(lambda state, p=problem: solver.value(p, state),
                                    problem.state_axes)
                current[name] = value.astype(dtype)
                n_state_axes = len(problem.state_axes)
                current_violations[name] = jnp.max(
                    check.reshape((-1, check.shape[-1])), axis=0
                ) if n_state_axes else check
            next_carry = {
                name: current.get(name, jnp.full(shapes[name], -jnp.inf, dtype))
                for name in plan.regimes
            }
            return next_carry, (current, current_violations)

        periods = jnp.arange(segment.start, segment.stop)
        carry, (segment_values, segment_violations) = jax.lax.scan(
            jax.checkpoint(step), carry, periods, reverse=True
        )
        length = segment.stop - segment.start
        for name in plan.regimes:
            if name in segment_values:
                values[name].append(segment_values[name])
                violations[name].append(segment_violations[name])
            else:
                values[name].append(jnp.full((length, *shapes[name]), -jnp.inf, dtype))
                violations[name].append(None)

    stacked_violations = {}
    for name in plan.regimes:
        n_checks = len(checks.get(name, ()))
        parts = [
            v if v is not None else jnp.zeros((length_of(p), n_checks), dtype)
            for v, p in zip(violations[name], values[name], strict=True)
        ]
        stacked_violations[name] = jnp.concatenate(parts[::-1], axis=0)
    return Solution(
        values={name: jnp.concatenate(parts[::-1], axis=0) for name, parts in values.items()},
        violations=stacked_violations,
        checks={name: checks.get(name, ()) for name in plan.regimes},
        active={name: tuple(sorted(r.active)) for name, r in plan.regimes.items()},
        state_names={name: r.states for name, r in plan.regimes.items()},
    )


def length_of(array) -> int:
    return array.shape[0]
