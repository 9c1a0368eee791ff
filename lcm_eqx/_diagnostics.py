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

from ._errors import warn
from ._grids import DiscreteGrid
from ._grids._age import age_of
from ._model._params import resolve_params
from ._solve._age_tables import age_varying_points
from ._solve._check_arrays import probability_violation
from ._solve._kernel import RegimeProblem
from ._validation import CHECKS, first_failures


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


def _problem_at(model, params, solution, name: str, period: int) -> RegimeProblem:
    """The problem of regime `name` in `period`, eagerly, against `solution`."""
    plan = model.plan
    regime = plan.regimes[name]
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
    return RegimeProblem(
        plan,
        regime,
        resolve_params(plan, params)[name],
        jnp.asarray(period),
        jnp.asarray(age_of(model.ages, period)),
        next_values,
        False,
    )


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
    problem = _problem_at(model, params, solution, name, period)
    index = np.argwhere(np.isnan(values))[0] if values.ndim else ()
    state = {axis.name: axis.points[i] for axis, i in zip(problem.state_axes, index, strict=True)}
    shown_state = {s: problem.value_of(s, x) for s, x in state.items()}
    where = f"Regime {name!r}, period {period}"
    if state:
        where += f", state ({_describe_point(shown_state)})"

    terms = [(h, regime.helpers[h]) for h in _helper_order(regime.helpers)]
    terms.append(("utility", regime.utility))
    terms += list(regime.constraints.items())
    # (A law of motion that reads a draw, `next_<state>`, has no one value at a point.)
    terms += [
        (f"next_{s}", t.function)
        for s, t in regime.state_transitions.items()
        if t.function is not None and not t.draws
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


@jax.jit
def first_infeasible(values: jax.Array) -> jax.Array:
    """Per period (the first axis of `values`), the flat index over the state axes of
    the first state with value -inf (0 where there is none).

    A reduction over the state axes only (no reshape, no argmax), so that on a sharded
    solution it is an all-reduce, never a gather of the value arrays. Its own small
    program, compiled only when `warn_infeasible_states` has something to report: in the
    solve's program it cost a `cond` and six kernels of compile time on every model
    (on the quick start's, 0.1 s of its first solve) for a warning that is rare.
    """
    infeasible = jnp.isneginf(values)
    shape = infeasible.shape[1:]
    flat = sum(
        (
            jax.lax.broadcasted_iota(jnp.int32, infeasible.shape, 1 + i)
            * int(np.prod(shape[i + 1 :]))
            for i in range(len(shape))
        ),
        jnp.zeros(infeasible.shape, jnp.int32),
    )
    over = tuple(range(1, infeasible.ndim))
    first = jnp.min(jnp.where(infeasible, flat, int(np.prod(shape))), axis=over)
    return jnp.where(jnp.any(infeasible, axis=over), first, 0)


def warn_infeasible_states(model, params, solution, counts) -> None:
    """Warn, per regime, of the active periods whose value arrays have states with no
    feasible action (value -inf): how many in each period, and the first state of each.

    Such states are harmless until a subject reaches one (then `simulate` raises
    `InfeasibleStateError`), but they usually mean action grids that start too high.
    `counts[regime]` holds how many states of each period have value -inf (the solve's
    program counts them; inactive periods, -inf everywhere, are not read here).
    """
    if first_failures(solution.violations, solution.checks):
        return  # a failed check was reported; its states may be -inf in consequence
    plan = model.plan
    for name, count in counts.items():
        # `np.asarray` per array: `jax.device_get` of the tree took 0.36 ms per
        # validated solve of a two-regime model (three times as long), next to a 5 ms
        # solve.
        count = np.asarray(count)
        regime = plan.regimes[name]
        periods = [t for t in sorted(regime.active) if count[t] > 0]
        if not periods:
            continue
        firsts = np.asarray(first_infeasible(solution.values[name]))
        problem = _problem_at(model, params, solution, name, periods[0])
        shape = tuple(axis.points.shape[0] for axis in problem.state_axes)
        n_states = int(np.prod(shape))
        described = []
        for t in periods:
            index = np.unravel_index(int(firsts[t]), shape)
            point = {}
            for axis, i in zip(problem.state_axes, index, strict=True):
                grid = regime.grids[axis.name]
                if isinstance(grid, DiscreteGrid):
                    point[axis.name] = repr(grid.labels[int(i)])
                else:
                    points = solution.grids.get(name, {}).get(axis.name)
                    x = (
                        points[t][i]
                        if points is not None
                        else problem.value_of(axis.name, axis.points[i])
                    )
                    point[axis.name] = f"{float(x):.6g}"
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            described.append(f"period {t}: {int(count[t])} (first at {where})")
            if len(described) == 3 and len(periods) > 3:
                described.append(f"and {len(periods) - 3} more periods")
                break
        # Regimes inactive in the period after one reported: an action that leads into
        # one is never chosen, so they too can leave a state without a feasible action.
        inactive = sorted(
            {
                target
                for t in periods
                for target in regime.targets
                if t + 1 < plan.n_periods and t + 1 not in plan.regimes[target].active
            }
        )
        into_inactive = (
            f", or into the regimes {inactive}, inactive in the next period"
            if inactive and regime.transition_reads_actions
            else ""
        )
        warn(
            f"Regime {name!r}: states with no feasible action (value -inf) of "
            f"{n_states} per period — " + "; ".join(described) + f". The constraints "
            f"{list(regime.constraints)} rule out every point of the action grids there, or "
            f"every feasible action leads only to such states{into_inactive}; a subject "
            "simulated into one "
            "raises InfeasibleStateError. Start the action grids low enough (e.g. the "
            "consumption grid at or below the lowest wealth) or relax the constraints."
        )


def _shown(regime, problem, name: str, x) -> str:
    """A state's or action's grid point as user functions see it (labels quoted)."""
    grid = regime.grids[name]
    if isinstance(grid, DiscreteGrid):
        return f"{name}={grid.labels[int(x)]!r}"
    return f"{name}={float(problem.value_of(name, jnp.asarray(x))):.6g}"


def transition_detail(model, params, solution, failure) -> str | None:
    """The message of a failed transition check that says which: the first state-action
    point where the transition is invalid, the bad value, and the valid range.

    Re-evaluates the transition eagerly on the regime's grids in the failed period (like
    `diagnose_nan`). Returns None (the generic message stands) for other checks, or
    where the point cannot be found.
    """
    if failure.kind and failure.kind in CHECKS:
        return None  # not a plain transition check
    plan = model.plan
    regime = plan.regimes[failure.regime]
    function = failure.function
    n_regimes = len(plan.regimes)
    ids = ", ".join(f"{n}={r.id}" for n, r in plan.regimes.items())
    if function == "next_regime":
        if regime.next_regime is None:
            return None
        markov, discrete, size = regime.next_regime_is_markov, True, n_regimes
    else:
        state = function.removeprefix("next_")
        transition = regime.state_transitions.get(state)
        if transition is None or transition.function is None:
            return None
        grid = plan.state_grid(state)
        markov, discrete, size = transition.is_markov, grid.is_discrete, grid.n_points
        if not (markov or discrete):
            return None
    try:
        problem = _problem_at(model, params, solution, failure.regime, failure.period)
        axes = (*problem.state_axes, *problem.action_axes)
        mesh = np.meshgrid(*(np.arange(a.points.shape[0]) for a in axes), indexing="ij")
        index = [m.reshape(-1) for m in mesh]

        def at(codes):
            point = {a.name: a.points[i] for a, i in zip(axes, codes, strict=True)}
            evaluate = problem.evaluator(point)
            feasible = jnp.asarray(True)
            for constraint in regime.constraints.values():
                feasible = feasible & jnp.asarray(evaluate(constraint), bool)
            if function == "next_regime":
                out = problem.regime_probabilities(evaluate)
                if not regime.next_regime_is_markov:
                    out = jnp.asarray(evaluate(regime.next_regime))  # the id itself
            else:
                out = jnp.asarray(evaluate(regime.state_transitions[state].function))
            return feasible, out

        feasible, out = jax.vmap(at)([jnp.asarray(i) for i in index])
        feasible, out = np.asarray(feasible), np.asarray(out)
    except Exception:  # an unusual transition: the generic message stands
        return None
    if markov:
        if out.ndim != 2 or out.shape[1] != size:
            return None
        bad = np.asarray(jax.vmap(lambda p: probability_violation(p, problem.tolerance))(out)) > 0
    else:
        codes = out.reshape(-1)
        bad = (codes < 0) | (codes >= size) | (codes != np.floor(codes))
    candidates = np.flatnonzero(bad & feasible)
    if not candidates.size:
        candidates = np.flatnonzero(bad)
    if not candidates.size:
        return None
    first = int(candidates[0])
    shown_states = [
        _shown(regime, problem, a.name, a.points[index[k][first]])
        for k, a in enumerate(problem.state_axes)
    ]
    n_states = len(problem.state_axes)
    shown_actions = [
        _shown(regime, problem, a.name, a.points[index[n_states + k][first]])
        for k, a in enumerate(problem.action_axes)
    ]
    where = f"state ({', '.join(shown_states)})" if shown_states else "its only state"
    if shown_actions:
        where += f" and action ({', '.join(shown_actions)})"
    head = f"Regime {failure.regime!r}, function {function!r}, period {failure.period}"
    count = int(np.sum(bad))
    if function == "next_regime":
        target = f"one per regime in the order of regime_ids ({ids})"
        valid = f"valid regime ids are 0..{n_regimes - 1} ({ids})"
    else:
        labels = getattr(plan.state_grid(state), "labels", None)
        named = (
            f" ({', '.join(f'{label}={i}' for i, label in enumerate(labels))})" if labels else ""
        )
        target = f"one per code of {state!r}{named}"
        valid = f"valid codes of {state!r} are 0..{size - 1}{named}"
    if markov:
        p = out[first]
        shown = "[" + ", ".join(f"{float(x):.6g}" for x in p) + "]"
        problems = []
        if np.isnan(p).any():
            problems.append("contain NaN")
        if (p < 0).any() or (p > 1).any():
            problems.append("lie outside [0, 1]")
        total = float(np.sum(p))
        if abs(total - 1.0) > problem.tolerance:
            problems.append(f"sum to {total:.6g}, not 1")
        what = " and ".join(problems) or "are invalid"
        message = (
            f"{head}: returns probabilities {shown} ({target}) that {what}, at {where}; "
            f"{count} of the {bad.size} state-action points are invalid. Each must lie in "
            f"[0, 1] and they must sum to 1 (tolerance {problem.tolerance:g}). Nothing is "
            "renormalised."
        )
    else:
        value = out.reshape(-1)[first]
        shown = f"{int(value)}" if value == np.floor(value) else f"{float(value):g}"
        what = "regime id" if function == "next_regime" else "code"
        message = (
            f"{head}: returns {what} {shown} at {where}, outside the valid range: {valid}; "
            f"{count} of the {bad.size} state-action points are out of range."
        )
    return message


def warn_extrapolation(plan, record: dict) -> None:
    """Warn where simulated subjects stand beyond a continuous state's grid (per regime
    and state: how many subjects and rows, how far, in which periods). The solution's
    values are extrapolated linearly there, which the grid's range was not chosen for.

    `record` is the simulation's panel on the host: `regime` and `present` of shape
    `(n_periods, n_subjects)`, `states[name]` the continuous states' values.
    """
    tables = age_varying_points(plan)
    for name, regime in plan.regimes.items():
        rows = np.asarray(record["present"]) & (np.asarray(record["regime"]) == regime.id)
        for state in regime.states:
            grid = regime.grids[state]
            if grid.is_discrete or state not in record["states"]:
                continue
            if state in tables.get(name, {}):
                points = np.asarray(tables[name][state])  # (n_periods, n_points)
                low, high = points[:, :1], points[:, -1:]
            else:
                points = np.asarray(grid.to_jax())
                low, high = points[0], points[-1]
            values = np.asarray(record["states"][state], dtype=float)
            with np.errstate(invalid="ignore"):
                below = rows & (values < low)
                above = rows & (values > high)
            beyond = below | above
            if not beyond.any():
                continue
            periods = np.flatnonzero(beyond.any(axis=1))
            parts = []
            if below.any():
                parts.append(f"down to {np.min(values[below]):.4g}")
            if above.any():
                parts.append(f"up to {np.max(values[above]):.4g}")
            span = (
                f"[{float(np.min(low)):.4g}, {float(np.max(high)):.4g}]"
                if np.ndim(low)
                else f"[{float(low):.4g}, {float(high):.4g}]"
            )
            warn(
                f"Regime {name!r}, state {state!r}: {int(beyond.any(axis=0).sum())} simulated "
                f"subject(s) ({int(beyond.sum())} subject-periods, periods "
                f"{periods[0]}-{periods[-1]}) stand beyond its grid {span}, "
                f"{' and '.join(parts)}; the solution is extrapolated linearly there. Widen "
                "the grid to cover where subjects go (or silence this with validate='off')."
            )
