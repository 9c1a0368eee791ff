"""One discrete choice's step of DC-EGM: next period read at the savings points
(`continuation_at_savings`), the Euler equation inverted there (`inverted`, `invert`),
and the upper envelope that refines the endogenous points into the choice's grid
(`refine`, `refine_rows`), with the checks that the regime is in the method's class at
the borrowing limit (`limit_constraints`, `inada_violation`, `euler_miss`). Functions of
the solver's settings (`DCEGMLike`), called by its class (`_solver.py`) and its passes
over rows (`_passes.py`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..._errors import InvalidParamsError
from ..._model._dag import transitive_inputs
from ..._model._plan import RegimePlan
from ..._numerics import one_kernel_reduce, relative
from .._axes import map_axis
from .._continuation import NEG_INF
from .._kernel import RegimeProblem
from .._reading import (
    REFERENCE_ACTION,
    ContinuationReader,
    expected_at_savings,
    invert_marginal,
    marginal_of,
)
from ._envelope import (
    materialize,
    read,
)
from ._kinks import kinked_savings, next_levels
from ._rows import (
    Block,
    euler_target,
    plus_discounted,
    row_utility,
)

if TYPE_CHECKING:
    # A structural type, resolved by the type checkers only (as in _period.py).
    from ._protocol import DCEGMLike


def limit_margin(savings: Array) -> Array:
    """How far above and below the borrowing limit `savings[0]` the check
    `<constraint>:limit` tests the constraint: a millionth of the first savings step,
    and at least 64 roundings of the numbers involved (the constraint's
    arithmetic at the limit is exact only up to those)."""
    rounding = 64 * jnp.finfo(savings.dtype).eps * (1.0 + jnp.abs(savings[0]) + REFERENCE_ACTION)
    return jnp.maximum(1e-6 * (savings[1] - savings[0]), rounding)


# The relative miss `|u'(c) / q − 1|` of the inverted Euler equation above which the
# check `utility:euler` fails (Newton's method converges to rounding; the user's
# inverse should too), or `EULER_ROUNDINGS` roundings of the dtype where that is more:
# float32's, 1.2e-3, since a TPU's float32 `log`, `exp` and `pow` round far more than
# the CPU's (its misses reach 1.0e-4 on the retirement example, whose float32 values
# still equal float64's to 1.5e-4). Where no consumption solves the equation, the miss
# is of order 1 (Newton's method drifts towards 0).
EULER_TOLERANCE = 1e-6
EULER_ROUNDINGS = 10_000


def euler_miss(mu: Array, target: Array, expected: Array) -> Array:
    """At each savings point, how far the consumption found misses the Euler equation
    `u'(c) = q` (`mu = u'(c)`, `target = q`), relative; 0 where it is solved or where the
    point is not used (next period's value `-inf`). A NaN consumption misses by 1.

    No `c > 0` solves it where `q` exceeds every value of `u'` (bounded as `c ↓ 0`: the
    optimal consumption there is `≤ 0`), and Newton's method then drifts towards 0."""
    miss = jnp.abs(mu / target - 1.0)
    used = jnp.isfinite(expected) & jnp.isfinite(target)
    missed = used & ~(miss <= relative(EULER_TOLERANCE, EULER_ROUNDINGS, miss.dtype))
    return jnp.where(missed, jnp.where(jnp.isnan(miss), 1.0, miss), 0.0)


# Consumption where the continuation's marginal value vanishes (after the last period):
# the Euler equation has no finite solution, every point is credit constrained.
CONSUMPTION_CAP = 1e8


def limit_constraints(solver: DCEGMLike, regime: RegimePlan) -> tuple[str, ...]:
    """The constraints that involve `state` or `action` (the borrowing limit)."""
    continuous = {solver.state, solver.action}
    return tuple(
        key
        for key, constraint in regime.constraints.items()
        if transitive_inputs(constraint, regime.helpers) & continuous
    )


def with_euler_check(
    solver: DCEGMLike, problem: RegimeProblem, violations: Array, miss: Array
) -> Array:
    """The choices' check violations (`(*choices, n_checks)`) with the column of the
    check `utility:euler` raised to `miss` (`(*choices,)`: how far the inverted Euler
    equation misses, its worst savings point; see `euler_miss`)."""
    if not problem.validate:
        return violations
    checks = (*problem.checks, *solver.extra_checks(problem.regime))
    column = np.zeros(len(checks))
    column[checks.index(f"utility:euler:{solver.action}")] = 1.0
    return jnp.maximum(violations, miss[..., None].astype(violations.dtype) * column)


def last_period_grid(solver: DCEGMLike, problem: RegimeProblem, continuation) -> dict[str, Array]:
    """The refined grids of choices (leading axes: any) in the model's last period,
    where nothing follows (`E[V'] = 0`, `problem.last_period`): with `u' > 0` the
    Euler equation has no solution, and the choice consumes down to the borrowing
    limit at every cash on hand. That is the credit-constrained segment that `read`
    takes below a grid's first point: no point at all (`count` 0, rows of padding),
    so no Euler equation is inverted and no upper envelope computed."""
    expected = continuation["expected"]
    lead = expected.shape[:-1]
    rows = solver.upper_envelope.n_rows(solver.n_savings(problem.regime))
    padding = jnp.asarray([jnp.inf, 0.0, 0.0, 0.0], expected.dtype)
    # E[V'] = 0 here: a discount factor that differs by choice multiplies zeros.
    beta = problem.params[""].get("discount_factor", 1.0)
    return {
        "nodes": jnp.broadcast_to(padding, (*lead, rows, 4)),
        "count": jnp.zeros(lead, jnp.int32),
        "continuation0": plus_discounted(0.0, beta, expected[..., 0]),
        "feasible": jnp.broadcast_to(continuation["feasible"], lead),
        "limit": jnp.broadcast_to(continuation["limit"], lead),
    }


def continuation_at_savings(
    solver: DCEGMLike,
    problem: RegimeProblem,
    readers: dict[str, ContinuationReader],
    discrete: dict[str, Array],
    checks,
    targets=None,
):
    """`E[V']` and `E[R·V'_m]` at the savings points of one discrete state and
    action, whether the choice is allowed, and the check violations (reduced over
    the savings points). `targets`: the regimes it reads next period (see
    `expected_at_savings`)."""
    feasible = jnp.asarray(True)
    limit = solver.choice_limit(problem, discrete)
    unbounded = ~jnp.isfinite(limit)
    if checks and "borrowing_limit" in problem.regime.helpers:
        # Solved at a finite stand-in where the limit is not finite, so that the check
        # `borrowing_limit:unbounded` names the cause rather than the NaN it would
        # give every next state (without checks the NaN shows in the values).
        limit = jnp.where(unbounded, 0.0, limit)
    savings = solver.savings_points(problem, limit)
    reference = jnp.asarray(REFERENCE_ACTION, savings.dtype)
    at_limit = {**discrete, solver.state: limit + reference, solver.action: reference}
    limits = limit_constraints(solver, problem.regime)
    evaluate = problem.evaluator(at_limit)
    for key, constraint in problem.regime.constraints.items():
        if key not in limits:  # constraints on discrete variables: is the choice allowed
            feasible = feasible & jnp.asarray(evaluate(constraint)).astype(bool)
    # The borrowing limit is savings[0] (or the regime's function `borrowing_limit`):
    # each constraint on the state or the action must allow saving that much and
    # forbid saving less (else the model solved would not be the one written). Tested
    # a little above and below it (by `limit_margin`), so that the rounding of the
    # constraint's own arithmetic (`c <= b + θ` with savings from `-θ`) does not count.
    limit_violations = {}
    if checks:
        margin = limit_margin(savings)
        evaluate_above, evaluate_below = (
            problem.evaluator({**at_limit, solver.state: at_limit[solver.state] + shift})
            for shift in (margin, -margin)
        )
        for key in limits:
            constraint = problem.regime.constraints[key]
            allowed = jnp.asarray(evaluate_above(constraint)).astype(bool)
            allowed_below = jnp.asarray(evaluate_below(constraint)).astype(bool)
            limit_violations[f"{key}:limit"] = jnp.where(
                feasible & ~(allowed & ~allowed_below), 1.0, 0.0
            )
        limit_violations[f"utility:inada:{solver.action}"] = inada_violation(
            solver, problem, discrete, savings
        )
        if "borrowing_limit" in problem.regime.helpers:
            limit_violations["borrowing_limit:unbounded"] = jnp.where(unbounded, 1.0, 0.0)

    slope_at = None
    if solver.kinks is not None:
        levels = None
        if solver.kinks.n_next:
            reading = tuple(problem.regime.targets if targets is None else targets)
            levels = next_levels(
                problem,
                readers,
                reading,
                discrete,
                solver.state,
                solver.action,
                solver.kinks.n_next,
                savings.dtype,
            )
        breakpoints, excess, mapped = solver.kinks.breakpoints(
            problem, solver.state, solver.action, discrete, savings, levels
        )
        savings, slope_at = kinked_savings(savings, breakpoints, mapped)
        if checks:
            limit_violations[f"next_{solver.state}:kinks"] = excess

    def at_savings(a):
        return expected_at_savings(
            problem, readers, solver.state, solver.action, discrete, a, checks, targets
        )

    expected, marginal_expected, violations = map_axis(
        at_savings, savings if slope_at is None else slope_at, solver.savings.batch_size
    )
    if slope_at is not None:
        # Read a `SIDE` off each point, on the side of its breakpoint (the slope of
        # the budget and of next period's value are those of that side): the value
        # at the point itself is one step of the slope back, exact to `SIDE²`.
        shift = jnp.where(jnp.isfinite(expected), (slope_at - savings) * marginal_expected, 0.0)
        expected = expected - shift
    # Read once, used by the inversion, the values and continuation0 (see `materialize`).
    expected, marginal_expected = materialize(expected, marginal_expected)
    # Over the savings points: one kernel (see `one_kernel_reduce`), not two. The
    # reduction waits for the read of next period (a comparison that never holds:
    # nothing exceeds +inf), rather than being ready when the period starts, where
    # it would widen the first wave of kernels (see docs/architecture.md, "threads").
    late = (expected > jnp.inf)[:, None]
    violations = one_kernel_reduce(jax.lax.max, -jnp.inf, jnp.where(late, jnp.inf, violations), 0)
    if limit_violations:
        # One elementwise max with a vector of the flags (a scatter per flag would be
        # an XLA kernel each).
        zero = jnp.zeros((), violations.dtype)
        flags = jnp.stack(
            [
                limit_violations[c].astype(violations.dtype) if c in limit_violations else zero
                for c in checks
            ]
        )
        violations = jnp.maximum(violations, flags)
    continuation = {
        "expected": expected,
        "marginal_expected": marginal_expected,
        "feasible": feasible,
        "limit": limit,
    }
    if slope_at is not None:
        continuation["savings"] = savings
    return continuation, violations


def inada_violation(
    solver: DCEGMLike, problem: RegimeProblem, discrete: dict[str, Array], savings: Array
) -> Array:
    """Where the choice's utility is outside DC-EGM's class at zero consumption (the
    check `utility:inada`): 2 for a finite `u'(0)`, 1 for a finite `u(0)` where the
    state grid reaches the limit, else 0.

    The method needs `u'(c) → ∞` as `c ↓ 0`: then the Euler equation has a solution
    `c > 0` for every finite right-hand side, and where saving exactly the borrowing
    limit leads nowhere feasible (no income at the limit) consumption falls to 0 at
    the limit. Tested at `c = 0` itself (`u'(0) = +inf` by automatic
    differentiation, as for log and CRRA utility, or `u(0) = -inf`). It also needs
    `u(0) = -inf` where the state grid reaches the limit: the value it gives at the
    limit is `-inf` (CRRA utility with risk aversion below 1 is finite there)."""
    utility, marginal = utility_of(solver, problem, discrete)
    zero = jnp.zeros((), savings.dtype)
    slope, level = jax.lax.stop_gradient((marginal(zero), utility(zero)))
    position = problem.regime.states.index(solver.state)
    lowest = jnp.min(problem.state_axes[position].points)
    # u(0) = -inf also makes u' unbounded near 0 (u is concave): a utility guarded by
    # `where(c > 0, log(c), -inf)` has derivative 0 at 0 itself.
    bounded = jnp.isfinite(slope) & (level > NEG_INF)
    finite_at_limit = jnp.isfinite(level) & (lowest <= savings[0])
    # 2: u'(0) finite; 1: u(0) finite at a state on the limit (the message says which).
    return jnp.where(bounded, 2.0, jnp.where(finite_at_limit, 1.0, 0.0))


def inverted(
    solver: DCEGMLike,
    problem: RegimeProblem,
    discrete: dict[str, Array],
    continuation: dict[str, Array],
    consumption: Array | None = None,
) -> dict[str, Array]:
    """The raw endogenous points `(m, c, v, mu)`, `continuation0`, feasibility and
    the Euler equation's target `u'(c)` of one discrete state and action: the Euler
    equation inverted at the savings points, given `continuation_at_savings`'s result (and
    the consumption that solves it, where the caller found it)."""
    expected = continuation["expected"]
    marginal_expected = continuation["marginal_expected"]
    beta = problem.discount_factor(problem.evaluator(discrete))
    utility, marginal = utility_of(solver, problem, discrete)
    cap = marginal(jnp.asarray(CONSUMPTION_CAP, expected.dtype))
    target = euler_target(beta, marginal_expected, cap)
    if consumption is None:
        consumption = invert(solver, problem, discrete, marginal, target)
    if "savings" in continuation:  # with the breakpoints of a kinked budget
        m = continuation["savings"] + consumption
    else:
        m = solver.savings_points(problem, continuation["limit"]) + consumption
    v = plus_discounted(utility(consumption), beta, expected)
    finite = jnp.isfinite(v) & jnp.isfinite(m)
    m = jnp.where(finite, m, jnp.inf)
    v = jnp.where(finite, v, NEG_INF)
    mu = marginal(consumption)
    raw = {
        "m": m,
        "c": consumption,
        "v": v,
        "mu": mu,
        "continuation0": plus_discounted(0.0, beta, expected[0]),
        "feasible": continuation["feasible"],
        "limit": continuation["limit"],
        # The Euler equation's right-hand side: the check `utility:euler` compares
        # the stored (`materialized`) `mu` with it (`euler_miss`).
        "target": target,
    }
    return raw


def refine(
    solver: DCEGMLike,
    utility: Callable,
    marginal: Callable,
    raw: dict[str, Array],
    dominated: Array | None = None,
) -> dict[str, Array]:
    """The upper envelope of one discrete state and action's raw points: its refined
    endogenous grid (`dominated`: the row of the envelope's `dominated_rows`)."""
    a0 = raw["limit"]

    def constrained_value(x):
        ok = x > a0
        value = utility(jnp.where(ok, x - a0, 1.0)) + raw["continuation0"]
        return jnp.where(ok, value, NEG_INF)

    extra = {} if dominated is None else {"dominated": dominated}
    nodes, count = solver.upper_envelope(
        raw["m"],
        raw["c"],
        raw["v"],
        raw["mu"],
        constrained_value,
        marginal,
        utility=utility,
        **extra,
    )
    # The grid's rows carry u(c) in place of the envelope's u'(c): the read of the
    # value between two points needs each end's utility, and computing it once here
    # is cheaper than at every read (see `read`).
    c = nodes[:, 1]
    positive = c > 0
    u = jnp.where(positive, utility(jnp.where(positive, c, 1.0)), 0.0)
    nodes = jnp.concatenate([nodes[:, :3], u[:, None]], axis=1)
    return {
        "nodes": nodes,
        "count": count,
        "continuation0": raw["continuation0"],
        "feasible": raw["feasible"],
        "limit": raw["limit"],
    }


def refine_rows(
    solver: DCEGMLike,
    blocks: list[Block],
    row_codes: tuple[Array, list[dict[str, Array]]],
    raw: dict[str, Array],
) -> dict[str, Array]:
    """`refine` of every row of `raw` (leading axis), each a discrete state and
    action of the regime of its block (consecutive rows, `blocks`), with its
    regime's utility selected (every regime's utility is evaluated in the same
    kernels and the row's own taken: `row_utility`)."""

    def at_row(k, codes, raw, dominated):
        utility, marginal = row_utility(blocks, k, codes)
        return refine(solver, utility, marginal, raw, dominated)

    regime, codes = row_codes
    # The envelope's test of all rows at once, where it has one (outside the map
    # over rows, so that it can skip rows).
    dominated = solver.upper_envelope.dominated_rows(raw["m"], raw["v"])
    return map_axis(lambda xs: at_row(*xs), (regime, codes, raw, dominated), 0)


def values_rows(
    blocks: list[Block],
    row_codes: tuple[Array, list[dict[str, Array]]],
    refined: dict[str, Array],
    nodes: Array,
) -> Array:
    """Each row's choice value at its `nodes` (`(rows, n_nodes)`): its refined grid
    read with its regime's utility (see `refine_rows`)."""

    def at_row(k, codes, grid, x):
        utility, marginal = row_utility(blocks, k, codes)

        def at(point):
            _, v, _ = read(
                grid["nodes"],
                grid["count"],
                grid["continuation0"],
                grid["limit"],
                point,
                utility,
                marginal,
            )
            return jnp.where(grid["feasible"], v, NEG_INF)

        return jax.vmap(at)(x)

    regime, codes = row_codes
    return map_axis(lambda xs: at_row(*xs), (regime, codes, refined, nodes), 0)


def utility_of(solver: DCEGMLike, problem: RegimeProblem, discrete: dict[str, Array]):
    regime = problem.regime

    def utility(c):
        evaluate = problem.evaluator({**discrete, solver.action: c, solver.state: c})
        return jnp.asarray(evaluate(regime.utility))

    return jnp.vectorize(utility), marginal_of(utility)


def invert(
    solver: DCEGMLike,
    problem: RegimeProblem,
    discrete: dict[str, Array],
    marginal: Callable[[Array], Array],
    q: Array,
) -> Array:
    """`c` with `u'(c) = q`: the user's inverse, or Newton's method on
    `log u'(exp(x)) = log q`."""
    if solver.inverse_marginal_utility is None:
        return invert_marginal(marginal, q, solver.newton_steps)
    inputs = problem.inputs(discrete)
    utility_params = problem.params.get("utility", {})
    kwargs = {}
    for name in inspect.signature(solver.inverse_marginal_utility).parameters:
        if name == "marginal_utility":
            kwargs[name] = q
        elif name in inputs:
            kwargs[name] = inputs[name]
        elif name in utility_params:
            kwargs[name] = utility_params[name]
        else:
            raise InvalidParamsError(
                f"Regime {problem.regime.name!r}: DCEGM's inverse_marginal_utility takes "
                f"{name!r}, which is neither 'marginal_utility', a discrete state or "
                "action of the regime, 'period'/'age', nor a parameter of its utility."
            )
    return jnp.asarray(solver.inverse_marginal_utility(**kwargs), q.dtype)
