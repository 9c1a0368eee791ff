"""Where a NaN first appears in a solution: regime, period, term, state and action.

NaNs propagate backwards through the periods (the max over actions keeps them), so the
culprit is in the latest period with a NaN. There every term of the Bellman equation is
re-evaluated eagerly at the offending state, on the whole action grid, in the order the
values flow: helper functions (dependencies first), utility, constraints, transitions,
and finally the continuation (the interpolation of next period's value arrays).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from ._grids._age import age_of
from ._model._params import resolve_params
from ._solve._kernel import RegimeProblem


def _helper_order(helpers) -> list[str]:
    order: list[str] = []

    def visit(name):
        if name in order:
            return
        for dependency in helpers[name].helpers:
            visit(dependency)
        order.append(name)

    for name in helpers:
        visit(name)
    return order


def _describe_point(point: dict) -> str:
    return ", ".join(f"{k}={float(v):.6g}" for k, v in point.items())


def diagnose_nan(model, params, solution) -> str | None:
    """A message locating the first NaN of `solution`, or None when it has none."""
    plan = model.plan
    found = None
    for period in reversed(range(plan.n_periods)):
        for name, regime in plan.regimes.items():
            if period not in regime.active:
                continue
            values = np.asarray(solution.values[name][period])
            if np.isnan(values).any():
                found = (name, period, values)
                break
        if found:
            break
    if found is None:
        return None
    name, period, values = found
    regime = plan.regimes[name]
    resolved = resolve_params(plan, params)[name]
    next_values = None
    if not regime.is_terminal:
        carried = solution.continuation_values
        next_values = {
            r: (
                carried[r][period + 1]
                if period + 1 < plan.n_periods
                else jnp.zeros(carried[r].shape[1:], carried[r].dtype)
            )
            for r in plan.regimes
        }
    problem = RegimeProblem(
        plan,
        regime,
        resolved,
        jnp.asarray(period),
        jnp.asarray(age_of(model.ages, period)),
        next_values,
        False,
    )
    index = np.argwhere(np.isnan(values))[0] if values.ndim else ()
    state = {axis.name: axis.points[i] for axis, i in zip(problem.state_axes, index, strict=True)}
    shown_state = {s: problem.value_of(s, x) for s, x in state.items()}
    where = f"Regime {name!r}, period {period}"
    if state:
        where += f", state ({_describe_point(shown_state)})"

    terms = [(h, regime.helpers[h]) for h in _helper_order(regime.helpers)]
    terms.append(("utility", regime.utility))
    terms += list(regime.constraints.items())
    terms += [
        (f"next_{s}", t.function)
        for s, t in regime.state_transitions.items()
        if t.function is not None
    ]
    terms += [
        (f"next_{s} (to {target!r})", function)
        for s, t in regime.state_transitions.items()
        for target, function in t.per_target.items()
    ]
    if regime.next_regime is not None:
        terms.append(("next_regime", regime.next_regime))

    def evaluate(action):
        evaluator = problem.evaluator({**state, **action})
        outputs = {key: jnp.asarray(evaluator(function)) for key, function in terms}
        outputs["continuation"] = problem.q(state, action)[0]
        return outputs

    axes = problem.action_axes
    actions = [
        dict(zip([a.name for a in axes], combo, strict=True))
        for combo in itertools.product(*[list(a.points) for a in axes])
    ] or [{}]
    stacked = {a.name: jnp.stack([act[a.name] for act in actions]) for a in axes}
    outputs = jax.vmap(evaluate)(stacked) if axes else jax.tree.map(lambda x: x[None], evaluate({}))
    outputs = {k: np.asarray(v) for k, v in outputs.items()}
    feasible = np.ones(len(actions), dtype=bool)
    for key in regime.constraints:
        feasible &= np.nan_to_num(outputs[key], nan=1).astype(bool)

    for key in [*(k for k, _ in terms), "continuation"]:  # pytrees sort dict keys
        nan = np.isnan(outputs[key]).reshape(len(actions), -1).any(axis=1)
        if key not in regime.constraints:
            nan &= feasible
        if nan.any():
            i = int(np.argmax(nan))
            action = {a.name: stacked[a.name][i] for a in axes}
            kind = (
                "the continuation (interpolated next-period values)"
                if key == "continuation"
                else f"function {key!r}"
            )
            point = f" at action ({_describe_point(action)})" if action else ""
            return f"{where}: NaN first appears in {kind}{point}."
    return f"{where}: the value is NaN, but no single term is NaN at a feasible action."
