"""DC-EGM: the discrete-continuous endogenous grid method (Iskhakov, Jørgensen, Rust &
Schjerning 2017).

For each discrete state and discrete action of a regime, the Euler equation is inverted
at every point `a_j` of an exogenous grid of savings (the post-decision state
`state − action`): `u'(c_j) = β·E[R·V'_m(m'(a_j))]`, so `c_j` and the endogenous state
`m_j = a_j + c_j` come without any search. An upper envelope removes the points that are
not optimal where future discrete choices make the continuation non-concave, and the
credit-constrained segment below the first point (consume down to the borrowing limit)
is exact. The choice-specific solutions are kept on their endogenous grids
(`EndogenousGrid`), which the next period, the simulation and the likelihoods read
directly; the value array on the regime's state grid is derived from them.

Marginal utility is `jax.grad` of the user's utility; its inverse is found by Newton's
method on `log u'(exp(x)) = log q`, which is linear in `x` for CRRA utility (one step is
exact) and is differentiated by one final Newton step from the converged point (the
implicit function theorem), not through the iterations.

The folder, by role: this file (the class: its class check, the period's inversion and
refinement, the queries), `_period.py` (the state the backward induction carries, the
period step, what is computed after the loop), `_rows.py` (choices as rows of one pass),
`_readers.py` (how earlier periods read its grids), `_envelope.py` (the upper envelope
and the grids' reads).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..._errors import InvalidParamsError, ModelInitializationError
from ..._grids import AbstractContinuousGrid
from ..._model._dag import transitive_inputs
from ..._model._plan import ModelPlan, RegimePlan
from ..._numerics import one_kernel_reduce, relative
from .._axes import lift, map_axis
from .._continuation import NEG_INF
from .._groups import member_parts
from .._kernel import RegimeProblem
from .._reading import (
    REFERENCE_ACTION,
    ContinuationReader,
    expected_at_savings,
    invert_marginal,
    invert_marginals,
    marginal_of,
)
from .._reduce import max_along, smooth_max
from .._solver import AbstractSolver, Period, PeriodSolution, SegmentOutputs, taste_shock_scale
from .._static import constant_outputs
from . import _period
from ._checks import check_dcegm
from ._envelope import (
    ORDINARY,
    AbstractUpperEnvelope,
    EndogenousGrid,
    ExactEnvelope,
    materialize,
    read,
)
from ._kinks import BudgetKinks, kinked_savings, next_levels
from ._members import MEMBERS, in_order, rows_of
from ._readers import endogenous_reader
from ._rows import (
    Block,
    codes_of_rows,
    euler_target,
    lift_choices,
    lift_with_readers,
    map_choices,
    materialized,
    plus_discounted,
    row_utility,
)


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


class DCEGM(AbstractSolver):
    """The discrete-continuous endogenous grid method with an upper envelope.

    Args:
        state: the regime's continuous state (cash on hand, wealth).
        action: the regime's continuous action (consumption).
        savings: the exogenous grid of the post-decision state `state − action`; its
            first point is the borrowing limit. With a regime function
            `"borrowing_limit"` (a limit that varies with discrete states, period, age or
            parameters, read by a constraint), the offsets above that limit, from 0.
        upper_envelope: how the non-optimal endogenous points are removed (default
            `ExactEnvelope()`).
        newton_steps: Newton iterations that invert marginal utility (one is exact for
            CRRA utility).
        inverse_marginal_utility: optional fast path: a function returning the
            consumption whose marginal utility is `marginal_utility`. Its arguments are
            resolved by name: `marginal_utility`, the regime's discrete states and
            actions, `period`, `age`, and the parameters of `utility` (e.g.
            `lambda marginal_utility, risk_aversion: marginal_utility ** (-1 /
            risk_aversion)`). Without it, Newton's method inverts `u'` numerically.
        kinks: `BudgetKinks(n_kinks)` where the law of motion of `state` is piecewise
            affine in savings (a consumption floor, a means test, tax brackets): each
            affine piece solved by the EGM, the breakpoints themselves added as savings
            points, the upper envelope taken across (NB-EGM; see `BudgetKinks`).

    The regime must have exactly one continuous state (`state`) and one continuous
    action (`action`); its utility must depend on `action` and not on `state`; the next
    value of `state` must depend on `state` and `action` only through `state − action`;
    the regime transition and the discrete state transitions must not depend on either.
    Constraints that involve `state` or `action` are the borrowing limit, which the
    method takes from `savings` (its first point): when solving, each must allow saving
    exactly `savings[0]` and forbid saving less. The marginal utility must grow without
    bound as `action` falls to 0 (log, CRRA), and where the state grid reaches the limit
    the utility must be `-inf` at 0 (checked when solving: `utility:inada`). Any number
    of discrete actions and discrete, process and Markov states, taste shocks and
    stochastic regime transitions work as with `GridSearch`.

    Example:
        >>> savings = IrregSpacedGrid(points=[400.0 * (i / 199) ** 3 for i in range(200)])
        >>> solver = DCEGM(state="wealth", action="consumption", savings=savings)
        >>> working = Regime(..., solver=solver)
    """

    state: str = eqx.field(static=True)
    action: str = eqx.field(static=True)
    savings: AbstractContinuousGrid
    upper_envelope: AbstractUpperEnvelope = ExactEnvelope()
    newton_steps: int = eqx.field(static=True, default=6)
    inverse_marginal_utility: Callable | None = eqx.field(static=True, default=None)
    kinks: BudgetKinks | None = None

    # It reads next period through readers of the targets' own solutions
    # (`Period.read`), and nothing follows the model's last period: no Euler equation to
    # invert there, no envelope (`_last_period_grid`).
    reads_next_values: ClassVar[bool] = False
    solves_last_period_apart: ClassVar[bool] = True

    def __check_init__(self):
        for name in ("state", "action"):
            if not isinstance(getattr(self, name), str):
                raise ModelInitializationError(
                    f"DCEGM: {name} must be the name of the regime's continuous {name}, got "
                    f"{getattr(self, name)!r}."
                )
        if not isinstance(self.savings, AbstractContinuousGrid):
            raise ModelInitializationError(
                f"DCEGM: savings must be a continuous grid (e.g. IrregSpacedGrid), got "
                f"{self.savings!r}."
            )
        if self.savings.varies_with_age:
            raise ModelInitializationError(
                "DCEGM: the savings grid must be the same in every period; its bounds vary "
                "with age. (The state grid may vary with age: the endogenous policy is read "
                "onto each period's own state grid.)"
            )
        if not isinstance(self.upper_envelope, AbstractUpperEnvelope):
            raise ModelInitializationError(
                f"DCEGM: upper_envelope must be an AbstractUpperEnvelope, got "
                f"{self.upper_envelope!r}."
            )
        if self.inverse_marginal_utility is not None and not callable(
            self.inverse_marginal_utility
        ):
            raise ModelInitializationError(
                f"DCEGM: inverse_marginal_utility must be a function or None, got "
                f"{self.inverse_marginal_utility!r}."
            )
        if self.kinks is not None and not isinstance(self.kinks, BudgetKinks):
            raise ModelInitializationError(
                f"DCEGM: kinks must be a BudgetKinks(n_kinks=...) or None, got {self.kinks!r}."
            )
        if not isinstance(self.newton_steps, int) or self.newton_steps < 1:
            raise ModelInitializationError(
                f"DCEGM: newton_steps must be an int >= 1, got {self.newton_steps!r}."
            )

    # ------------------------------------------------------------------ build
    def applies_to(self, regime: RegimePlan) -> bool:
        """Whether a model-wide default DCEGM takes this regime (else GridSearch does).

        Terminal regimes and regimes with neither the state nor the action have no
        consumption–saving problem to invert.
        """
        return not regime.is_terminal and (
            self.state in regime.states or self.action in regime.actions
        )

    def check(self, model: ModelPlan, regime: RegimePlan) -> None:
        check_dcegm(self, model, regime)

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]:
        # A regime function `borrowing_limit` must give a finite limit
        # (`borrowing_limit:unbounded`, first: an infinite limit fails the others too).
        # The law of motion of `state` must go through savings, and each constraint on
        # `state` or `action` must bind exactly at the borrowing limit (the savings
        # grid's first point, or that function). The utility must be in the method's
        # class at zero consumption (`utility:inada`), and the Euler equation solved
        # with positive consumption at every savings point (`utility:euler`).
        return (
            *(("borrowing_limit:unbounded",) if "borrowing_limit" in regime.helpers else ()),
            f"next_{self.state}:savings",
            *((f"next_{self.state}:kinks",) if self.kinks is not None else ()),
            *(f"{key}:limit" for key in self._limit_constraints(regime)),
            f"utility:inada:{self.action}",
            f"utility:euler:{self.action}",
        )

    def compiler_options(self) -> dict[str, Any]:
        # A DC-EGM program is ~120 small kernels, and compiling them is most of its first
        # solve (see docs/architecture.md, "Compiler options per solver"):
        # - XLA:CPU's loop emitters: the MLIR fusion emitters' fixed set-up per kernel
        #   doubled XLA's code generation (trace + lower + compile of the retirement
        #   model 2.21 -> 1.62 s; steady time the same or 2 % less). A CPU option:
        #   other backends do not read it.
        # - No loop-invariant code motion: the invariants it hoists out of the period
        #   loop are microseconds of work, but each became a kernel of its own
        #   (compile 0.90 -> 0.79 s; steady time 1-2 % longer).
        return {
            "xla_cpu_use_fusion_emitters": False,
            "xla_disable_hlo_passes": "while-loop-invariant-code-motion",
        }

    def n_savings(self, regime: RegimePlan) -> int:
        """How many savings points a choice of `regime` has: the grid's, and with a
        kinked budget (`kinks`) two for each breakpoint and one for each of next
        period's kinks mapped back to savings."""
        extra = (
            0
            if self.kinks is None
            else 2 * self.kinks.count(regime) + self.kinks.count_next(regime)
        )
        return self.savings.n_points + extra

    def choices_always_feasible(self, regime: RegimePlan) -> bool:
        """Whether every discrete choice of the regime is allowed in every period: no
        constraint is on its discrete variables alone (`EndogenousGrid.feasible` is then
        True throughout)."""
        limits = self._limit_constraints(regime)
        return all(key in limits for key in regime.constraints)

    def _limit_constraints(self, regime: RegimePlan) -> tuple[str, ...]:
        """The constraints that involve `state` or `action` (the borrowing limit)."""
        continuous = {self.state, self.action}
        return tuple(
            key
            for key, constraint in regime.constraints.items()
            if transitive_inputs(constraint, regime.helpers) & continuous
        )

    # ------------------------------------------------------------------ solve
    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        def at_choice(continuation, discrete):
            if problem.last_period:
                return self._last_period_grid(problem, continuation)
            raw = materialized(self._inverted(problem, discrete, continuation))
            utility, marginal = self._utility(problem, discrete)
            refined = self._refine(utility, marginal, raw)
            miss = euler_miss(raw["mu"], raw["target"], continuation["expected"])
            return {**refined, "euler": jnp.max(miss)}

        # Where every choice can move to the same subset of the targets, only those
        # are read (the choices of a splayed or sharded axis are not grouped).
        _, codes = self._flat_choices(problem)
        groups = self._target_groups(problem, codes)
        targets = groups[0][1] if groups is not None and len(groups) == 1 else None
        policy, violations, _ = self._lift_choices(problem, at_choice, targets)
        if "euler" in policy:
            policy = dict(policy)
            violations = self._with_euler_check(problem, violations, policy.pop("euler"))
        return self._period_solution(problem, policy, violations)

    def _with_euler_check(self, problem: RegimeProblem, violations: Array, miss: Array) -> Array:
        """The choices' check violations (`(*choices, n_checks)`) with the column of the
        check `utility:euler` raised to `miss` (`(*choices,)`: how far the inverted Euler
        equation misses, its worst savings point; see `euler_miss`)."""
        if not problem.validate:
            return violations
        checks = (*problem.checks, *self.extra_checks(problem.regime))
        column = np.zeros(len(checks))
        column[checks.index(f"utility:euler:{self.action}")] = 1.0
        return jnp.maximum(violations, miss[..., None].astype(violations.dtype) * column)

    def _last_period_grid(self, problem: RegimeProblem, continuation) -> dict[str, Array]:
        """The refined grids of choices (leading axes: any) in the model's last period,
        where nothing follows (`E[V'] = 0`, `problem.last_period`): with `u' > 0` the
        Euler equation has no solution, and the choice consumes down to the borrowing
        limit at every cash on hand. That is the credit-constrained segment that `read`
        takes below a grid's first point: no point at all (`count` 0, rows of padding),
        so no Euler equation is inverted and no upper envelope computed."""
        expected = continuation["expected"]
        lead = expected.shape[:-1]
        rows = self.upper_envelope.n_rows(self.n_savings(problem.regime))
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

    def _flat_choices(self, problem: RegimeProblem):
        """The shape of the regime's discrete state and action axes, and the codes of
        every choice (their flat product in row-major order; host arrays, by name)."""
        discrete_states = tuple(a for a in problem.state_axes if a.name != self.state)
        discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
        axes = (*discrete_states, *discrete_actions)
        shape = tuple(a.points.shape[0] for a in axes)
        flat = np.indices(shape).reshape(len(shape), math.prod(shape)).astype(np.int32)
        return shape, {a.name: flat[i] for i, a in enumerate(axes)}

    def _lift_choices(self, problem: RegimeProblem, finish, targets=None):
        """`finish(continuation, discrete)` of every discrete state and action of the
        regime (`continuation`: `_continuation`'s reads of next period at the savings
        points), lifted over their axes: the results and check violations with leading
        axes the discrete states, then the discrete actions, and those axes.
        `targets`: the regimes read next period (default: all it can move to)."""
        discrete_states = tuple(a for a in problem.state_axes if a.name != self.state)
        discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
        checks = (*problem.checks, *self.extra_checks(problem.regime)) if problem.validate else ()

        def at_discrete_state(z: dict[str, Array], readers: dict[str, ContinuationReader]):
            def at_choice(d: dict[str, Array]):
                discrete = {**z, **d}
                continuation, violations = self._continuation(
                    problem, readers, discrete, checks, targets
                )
                return finish(continuation, discrete), violations

            return lift_choices(at_choice, discrete_actions, {})

        result, violations = lift_with_readers(
            at_discrete_state, discrete_states, {}, problem.next_policies, problem
        )
        return result, violations, (*discrete_states, *discrete_actions)

    def _continuation_rows(self, problem: RegimeProblem):
        """`_continuation` of every discrete state and action of a regime without
        splayed or sharded discrete axes, mapped over their flat product (one map, not
        one per axis), each reading only the regimes it can move to where that is known
        when tracing (`_target_groups`).

        A choice that moves to another regime with certainty (retiring) then reads only
        that regime's next-period grids, not every target's: the reads are most of a
        period's work. The choices with the same targets are mapped together, one map
        per group of them.

        Returns the continuations (leading axis: the flat choices), the check
        violations (leading axes: the discrete states, then the discrete actions), those
        axes' shape, and the flat choices' codes (host arrays, by name).
        """
        shape, codes = self._flat_choices(problem)
        size = math.prod(shape)
        groups = self._target_groups(problem, codes) or [(np.arange(size), problem.regime.targets)]
        checks = (*problem.checks, *self.extra_checks(problem.regime)) if problem.validate else ()
        parts = []
        for rows, targets in groups:
            members = {k: v[rows] for k, v in codes.items()}
            parts.append(self._group_continuation(problem, members, len(rows), checks, targets))
        merged = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
        order = np.concatenate([rows for rows, _ in groups])
        if not np.array_equal(order, np.arange(size)):
            merged = jax.tree.map(lambda x: x[np.argsort(order)], merged)
        continuation, violations = merged
        violations = violations.reshape((*shape, *violations.shape[1:]))
        return continuation, violations, shape, codes

    def _group_continuation(
        self, problem: RegimeProblem, members: dict[str, np.ndarray], size: int, checks, targets
    ):
        """`_continuation` of the choices `members` (their codes, by name, host arrays;
        `size` of them) that read the same `targets`, leading axis the choices.

        A group of one choice is not mapped over the choices: under a `vmap` of length
        1 every traced operation of its read (a map over the savings points) would be
        batched a second time, and its codes would no longer be constants of the
        program, which XLA folds (6 kernels of the quick start's model, whose three
        groups have one choice each). Groups of several choices keep the map over their
        choices around the map over the points: one flat map over the (choice, point)
        pairs traced faster but ran 1.15x as long on a model with income states (each
        pair then gathered what its choice shares with the others).
        """
        readers = problem.next_policies
        if size == 1:
            one = {k: jnp.asarray(v[0]) for k, v in members.items()}
            result = self._continuation(problem, readers, one, checks, targets)
            return jax.tree.map(lambda x: x[None], result)
        return jax.vmap(
            lambda d: self._continuation(problem, readers, d, checks, targets), axis_size=size
        )({k: jnp.asarray(v) for k, v in members.items()})

    def _euler_targets(self, problem: RegimeProblem, continuation, codes):
        """The marginal utility of every flat choice of `_continuation_rows` (vectorised
        over them) and the `u'(c)` the Euler equation asks for at each of their savings
        points: what `invert_marginals` solves, for all the regimes of a pass at once."""
        savings = self.savings.to_jax()
        size = jax.tree.leaves(continuation)[0].shape[0]
        discrete = {k: jnp.asarray(v) for k, v in codes.items()}
        beta = problem.params[""].get("discount_factor")
        if beta is None:  # the regime's function `discount_factor`, per choice
            beta = jax.vmap(
                lambda d: problem.discount_factor(problem.evaluator(d)), axis_size=size
            )(discrete)[:, None]

        def marginal(c):
            return jax.vmap(lambda d, c: self._utility(problem, d)[1](c), axis_size=size)(
                discrete, c
            )

        top = jnp.asarray(CONSUMPTION_CAP, savings.dtype)
        cap = jax.vmap(lambda d: self._utility(problem, d)[1](top), axis_size=size)(discrete)
        return marginal, euler_target(beta, continuation["marginal_expected"], cap[:, None])

    def _inverted_rows(
        self, problem: RegimeProblem, continuation, codes, consumption: Array | None
    ) -> dict[str, Array]:
        """`_inverted` of every flat choice of `_continuation_rows`, given the consumption
        that solves the Euler equation at each of their savings points (None: the
        user's inverse, per choice)."""
        discrete = {k: jnp.asarray(v) for k, v in codes.items()}
        if consumption is None:
            return map_axis(
                lambda xs: self._inverted(problem, xs[0], xs[1]),
                (discrete, continuation),
                0,
            )
        return map_axis(
            lambda xs: self._inverted(problem, xs[0], xs[1], xs[2]),
            (discrete, continuation, consumption),
            0,
        )

    def _target_groups(
        self, problem: RegimeProblem, codes: dict[str, np.ndarray]
    ) -> list[tuple[np.ndarray, tuple[str, ...]]] | None:
        """The discrete states and actions (indices into the flat `codes`) grouped by
        the regimes they can move to, in order of their first member; `None` where the
        regime transition is not known when tracing (it depends on a parameter, the
        period or the age) or every choice can move to every target.

        The transition is evaluated at the codes on the host (`constant_outputs`). A
        target counts as reachable unless its probability is exactly 0 (a NaN counts).
        """
        regime = problem.regime
        if len(regime.targets) < 2:
            return None
        reference = jnp.asarray(REFERENCE_ACTION)

        def probabilities(point):
            evaluate = problem.evaluator({**point, self.state: reference, self.action: reference})
            return problem.regime_probabilities_and_id(evaluate)[0]

        if codes:
            known = constant_outputs(jax.vmap(probabilities), codes)
        else:  # no discrete axis: one choice
            known = constant_outputs(lambda: probabilities({})[None])
        if known is None:
            return None
        (p,) = known
        ids = [problem.model.regimes[t].id for t in regime.targets]
        reach = p[:, ids] != 0
        groups: dict[tuple[bool, ...], list[int]] = {}
        for row, key in enumerate(map(tuple, reach)):
            groups.setdefault(key, []).append(row)
        if len(groups) == 1 and all(next(iter(groups))):
            return None
        return [
            (np.asarray(rows), tuple(t for t, r in zip(regime.targets, key, strict=True) if r))
            for key, rows in groups.items()
        ]

    def _period_solution(
        self,
        problem: RegimeProblem,
        policy: dict[str, Array],
        violations: Array,
        choice_values: Array | None = None,
        with_values: bool = True,
    ) -> PeriodSolution:
        """The `PeriodSolution` of one regime from its refined grids (leading axes: the
        discrete states, then the discrete actions) and the choices' check violations;
        `choice_values`: each choice's value on the state grid (`(*z, *d, n_nodes)`),
        where the caller read them. Without `with_values`, its `values` are None: the
        caller reads them later (`regime_values`)."""
        regime = problem.regime
        n_z = len(regime.states) - 1
        n_d = len(regime.discrete_actions)
        # Violations: max over the discrete actions, then broadcast over the state grid.
        violations = jnp.max(violations, axis=tuple(range(n_z, n_z + n_d))) if n_d else violations
        grid = self._grid(policy)
        values = self._regime_values(problem, grid, choice_values) if with_values else None
        position = regime.states.index(self.state)
        # The same at every point of the continuous state: an axis of length 1 there,
        # which the backward induction reduces as it is (a broadcast would be one XLA
        # kernel more, and its reduction another).
        violations = jnp.expand_dims(violations, position)
        return PeriodSolution(values, violations, grid)

    def _grid(self, policy: dict[str, Array]) -> EndogenousGrid:
        """A period's `EndogenousGrid` from its refined rows."""
        return EndogenousGrid(
            nodes=policy["nodes"],
            count=policy["count"],
            continuation0=policy["continuation0"],
            feasible=policy["feasible"],
            borrowing_limit=policy["limit"],
            status=jnp.asarray(ORDINARY, jnp.int32),
        )

    def _regime_values(
        self, problem: RegimeProblem, grid: EndogenousGrid, choice_values: Array | None = None
    ) -> Array:
        """The regime's value array (its state shape) from its refined grids, or from
        each choice's value at the state nodes (`choice_values`, `(*z, *d, n_nodes)`)
        where the caller read them."""
        regime = problem.regime
        position = regime.states.index(self.state)
        if choice_values is None:
            nodes = problem.state_axes[position].points
            values = self.values_on(problem, grid, nodes)  # (*z, n_nodes)
        else:
            values = self.combine_choices(problem, jnp.moveaxis(choice_values, -1, 0))
            values = jnp.moveaxis(values, 0, -1)
        return jnp.moveaxis(values, -1, position)

    def batchable(self, regime: RegimePlan) -> bool:
        """Whether the regime's choices can join other regimes' in one pass over rows:
        none of its discrete axes is splayed (the pass would hold every row at once)
        or sharded (rows of different regimes would be gathered across devices)."""
        names = (*regime.states, *regime.discrete_actions, *regime.continuous_actions)
        return not any(
            g.distributed or 0 < g.batch_size < g.n_points
            for g in (regime.grids[name] for name in names)
            if g.is_discrete
        )

    def solve_batched(
        self, problems: list[RegimeProblem], with_values: bool = True
    ) -> tuple[list[PeriodSolution], dict[str, Array]]:
        """`solve_period` of several regimes that this solver solves; and their refined
        grids as rows (the regimes' flat choices one after the other, in the order of
        `problems`), which the backward induction carries and emits as they are.

        Regimes of equal structure (`_groups.py`: the same functions, grids and targets,
        differing in parameter values) are traced once: one member's pass
        (`_solve_together`) mapped over the group's stacked parameters, so that their
        rows come out one member after the other, as the concatenation would. The
        other regimes share one pass over rows.
        """
        parts = member_parts(problems)
        if len(parts) == 1 and parts[0][1] is None:
            return self._solve_together(problems, with_values)
        solutions: list[Any] = [None] * len(problems)
        pieces: list[tuple[list[int], dict[str, Array]]] = []
        for indices, stacked in parts:
            if stacked is None:
                solved, rows = self._solve_together([problems[i] for i in indices], with_values)
                solutions_of = dict(zip(indices, solved, strict=True))
            else:
                params, axes = stacked
                representative = problems[indices[0]]

                def member(params, representative=representative):
                    solved, rows = self._solve_together(
                        [representative.with_params(params)], with_values, MEMBERS
                    )
                    return solved[0], rows

                solved, rows = jax.vmap(
                    member, in_axes=(axes,), axis_size=len(indices), axis_name=MEMBERS
                )(params)
                rows = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), rows)
                solutions_of = {
                    i: jax.tree.map(lambda x, j=j: x[j], solved) for j, i in enumerate(indices)
                }
            for i, solution in solutions_of.items():
                solutions[i] = solution
            pieces.append((indices, rows))
        sizes = [math.prod(self._flat_choices(p)[0]) for p in problems]
        return solutions, in_order(pieces, sizes)

    def _solve_together(
        self, problems: list[RegimeProblem], with_values: bool = True, members=None
    ) -> tuple[list[PeriodSolution], dict[str, Array]]:
        """`solve_period` of several regimes that this solver solves, in one pass; and
        their refined grids as rows (`nodes`, `count`, `continuation0`, `feasible`: the
        regimes' flat choices one after the other, in the order of `problems`), which
        the backward induction carries and emits as they are.

        Each regime reads next period and inverts the Euler equation on its own (its
        transitions, targets, checks and marginal utility), then the choices of all of
        them are rows of one array: one upper envelope and one read of the values on the
        state grid for every row, with each row's own utility (every regime's utility
        evaluated and the row's regime's selected). The same XLA kernels then serve
        every regime rather than a copy per regime, which shortens the compilation.

        (Inverting in the same pass costs more kernels than it saves: XLA:CPU splits
        each Newton step of the selected marginal utilities into three or four kernels,
        where each regime's own step is one.)
        """
        shapes, read, violations, blocks = [], [], [], []
        for problem in problems:
            continuation, violation, shape, codes = self._continuation_rows(problem)
            shapes.append(shape)
            read.append((problem, continuation, codes))
            violations.append(violation)

            def functions(codes, problem=problem):
                return self._utility(problem, codes)

            blocks.append(Block(functions, codes, math.prod(shape)))
        row_codes = codes_of_rows(blocks)
        if problems[0].last_period:  # the same for every regime of a period
            grids = [self._last_period_grid(problem, c) for problem, c, _ in read]
            refined = {key: jnp.concatenate([g[key] for g in grids]) for key in grids[0]}
        else:
            # Newton's method on all the regimes' points at once, outside the maps over
            # their choices: one chain of steps with one early exit (`invert_marginals`).
            consumptions: list[Array | None] = (
                [None] * len(read)
                if self.inverse_marginal_utility is not None
                else list(
                    invert_marginals(
                        [self._euler_targets(*r) for r in read], self.newton_steps, members
                    )
                )
            )
            raws = [
                self._inverted_rows(problem, continuation, codes, consumption)
                for (problem, continuation, codes), consumption in zip(
                    read, consumptions, strict=True
                )
            ]
            rows = materialized(
                {
                    key: jnp.concatenate([raw[key] for raw in raws])
                    for key in raws[0]
                    if key != "target"
                }
            )
            # The Euler check on the stored marginal utilities (`materialized`), not on
            # the inversion's own: a second consumer of `c = exp(x)` made XLA compile the
            # exponential as a kernel of its own (two kernels, each ~2,600 lines of
            # vectorised LLVM IR: a fifth of the validated program's code).
            offsets = np.cumsum([0, *(block.size for block in blocks)])
            violations = [
                self._with_euler_check(
                    problem,
                    violation,
                    one_kernel_reduce(
                        jax.lax.max,
                        0.0,
                        euler_miss(rows["mu"][start:stop], raw["target"], continuation["expected"]),
                        1,
                    ).reshape(shape),
                )
                for problem, violation, raw, (_, continuation, _), shape, start, stop in zip(
                    problems, violations, raws, read, shapes, offsets[:-1], offsets[1:], strict=True
                )
            ]
            refined = self._refine_rows(blocks, row_codes, rows)
        choice_values = (
            self._choice_values_rows(problems, shapes, blocks, row_codes, refined)
            if with_values
            else [None] * len(problems)
        )
        solutions, offset = [], 0
        for problem, shape, block, violation, values in zip(
            problems, shapes, blocks, violations, choice_values, strict=True
        ):
            policy = {
                key: value[offset : offset + block.size].reshape((*shape, *value.shape[1:]))
                for key, value in refined.items()
            }
            offset += block.size
            solutions.append(self._period_solution(problem, policy, violation, values, with_values))
        return solutions, refined

    def _choice_values_rows(
        self,
        problems: list[RegimeProblem],
        shapes: list[tuple[int, ...]],
        blocks: list[Block],
        row_codes: tuple[Array, list[dict[str, Array]]],
        refined: dict[str, Array],
    ) -> list[Array | None]:
        """Each regime's choice values on its state grid (`(*z, *d, n_nodes)`), read
        for all rows together where the regimes' grids have one size (else None)."""
        grids = [p.state_axes[p.regime.states.index(self.state)].points for p in problems]
        if len({g.shape for g in grids}) != 1:
            return [None] * len(problems)
        sizes = [block.size for block in blocks]
        nodes = jnp.concatenate(
            [jnp.broadcast_to(g, (n, g.shape[0])) for g, n in zip(grids, sizes, strict=True)]
        )
        values = self._values_rows(blocks, row_codes, refined, nodes)
        offsets = np.cumsum([0, *sizes])
        return [
            values[start:stop].reshape((*shape, -1))
            for start, stop, shape in zip(offsets[:-1], offsets[1:], shapes, strict=True)
        ]

    def values_batched(
        self,
        problems: list[RegimeProblem],
        grids: list[EndogenousGrid],
        refined: dict[str, Array] | None = None,
    ) -> list[Array]:
        """The value arrays of regimes solved by `solve_batched(..., with_values=False)`,
        from their period's refined grids (`refined`: the grids as `solve_batched`'s
        rows, where the caller has them); regimes of equal structure read by one
        member's read mapped over the group, as `solve_batched` solves them."""
        parts = member_parts(problems)
        if len(parts) == 1 and parts[0][1] is None:
            return self._values_together(problems, grids, refined)
        sizes = [math.prod(self._flat_choices(p)[0]) for p in problems]
        offsets = np.cumsum([0, *sizes])
        values: list[Any] = [None] * len(problems)
        for indices, stacked in parts:
            rows = None if refined is None else rows_of(refined, offsets, indices)
            if stacked is None:
                read = self._values_together(
                    [problems[i] for i in indices], [grids[i] for i in indices], rows
                )
            else:
                params, axes = stacked
                representative = problems[indices[0]]
                grid = jax.tree.map(lambda *xs: jnp.stack(xs), *(grids[i] for i in indices))
                if rows is not None:  # one member's rows after the other: (members, rows)
                    k = len(indices)
                    rows = jax.tree.map(lambda x: x.reshape((k, -1, *x.shape[1:])), rows)

                def member(params, grid, rows, representative=representative):
                    return self._values_together(
                        [representative.with_params(params)], [grid], rows
                    )[0]

                stacked_values = jax.vmap(member, in_axes=(axes, 0, None if rows is None else 0))(
                    params, grid, rows
                )
                read = [stacked_values[j] for j in range(len(indices))]
            for i, v in zip(indices, read, strict=True):
                values[i] = v
        return values

    def _values_together(
        self,
        problems: list[RegimeProblem],
        grids: list[EndogenousGrid],
        refined: dict[str, Array] | None = None,
    ) -> list[Array]:
        """The value arrays of regimes solved by `solve_batched(..., with_values=False)`,
        from their period's refined grids: one read of all their choices at the state
        nodes, as `solve_batched` does in the period (`refined`: the grids as
        `solve_batched`'s rows, where the caller has them)."""
        shapes, blocks, rows = [], [], []
        for problem, grid in zip(problems, grids, strict=True):
            shape, codes = self._flat_choices(problem)
            size = math.prod(shape)

            def functions(codes, problem=problem):
                return self._utility(problem, codes)

            shapes.append(shape)
            blocks.append(Block(functions, codes, size))
            if refined is None:
                policy = {
                    "nodes": grid.nodes,
                    "count": grid.count,
                    "continuation0": grid.continuation0,
                    "feasible": grid.feasible,
                    "limit": jnp.broadcast_to(grid.borrowing_limit, grid.count.shape),
                }
                rows.append(
                    {k: v.reshape((size, *v.shape[len(shape) :])) for k, v in policy.items()}
                )
        row_codes = codes_of_rows(blocks)
        if refined is None:
            refined = {key: jnp.concatenate([r[key] for r in rows]) for key in rows[0]}
        choice_values = self._choice_values_rows(problems, shapes, blocks, row_codes, refined)
        return [
            self._regime_values(problem, grid, values)
            for problem, grid, values in zip(problems, grids, choice_values, strict=True)
        ]

    def _continuation(
        self,
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
        limit = self.choice_limit(problem, discrete)
        unbounded = ~jnp.isfinite(limit)
        if checks and "borrowing_limit" in problem.regime.helpers:
            # Solved at a finite stand-in where the limit is not finite, so that the check
            # `borrowing_limit:unbounded` names the cause rather than the NaN it would
            # give every next state (without checks the NaN shows in the values).
            limit = jnp.where(unbounded, 0.0, limit)
        savings = self.savings_points(problem, limit)
        reference = jnp.asarray(REFERENCE_ACTION, savings.dtype)
        at_limit = {**discrete, self.state: limit + reference, self.action: reference}
        limits = self._limit_constraints(problem.regime)
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
                problem.evaluator({**at_limit, self.state: at_limit[self.state] + shift})
                for shift in (margin, -margin)
            )
            for key in limits:
                constraint = problem.regime.constraints[key]
                allowed = jnp.asarray(evaluate_above(constraint)).astype(bool)
                allowed_below = jnp.asarray(evaluate_below(constraint)).astype(bool)
                limit_violations[f"{key}:limit"] = jnp.where(
                    feasible & ~(allowed & ~allowed_below), 1.0, 0.0
                )
            limit_violations[f"utility:inada:{self.action}"] = self._inada_violation(
                problem, discrete, savings
            )
            if "borrowing_limit" in problem.regime.helpers:
                limit_violations["borrowing_limit:unbounded"] = jnp.where(unbounded, 1.0, 0.0)

        slope_at = None
        if self.kinks is not None:
            levels = None
            if self.kinks.n_next:
                reading = tuple(problem.regime.targets if targets is None else targets)
                levels = next_levels(
                    problem,
                    readers,
                    reading,
                    discrete,
                    self.state,
                    self.action,
                    self.kinks.n_next,
                    savings.dtype,
                )
            breakpoints, excess, mapped = self.kinks.breakpoints(
                problem, self.state, self.action, discrete, savings, levels
            )
            savings, slope_at = kinked_savings(savings, breakpoints, mapped)
            if checks:
                limit_violations[f"next_{self.state}:kinks"] = excess

        def at_savings(a):
            return expected_at_savings(
                problem, readers, self.state, self.action, discrete, a, checks, targets
            )

        expected, marginal_expected, violations = map_axis(
            at_savings, savings if slope_at is None else slope_at, self.savings.batch_size
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
        violations = one_kernel_reduce(
            jax.lax.max, -jnp.inf, jnp.where(late, jnp.inf, violations), 0
        )
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

    def choice_limit(self, problem: RegimeProblem, discrete: dict[str, Array]) -> Array:
        """The borrowing limit of one discrete state and action: the regime's function
        `borrowing_limit` where it has one (a traced scalar), else `savings[0]`."""
        if "borrowing_limit" not in problem.regime.helpers:
            return self.savings.to_jax()[0]
        limit = jnp.asarray(problem.evaluator(discrete).helper("borrowing_limit"))
        if limit.shape != ():
            raise ModelInitializationError(
                f"Regime {problem.regime.name!r}: function 'borrowing_limit' returns shape "
                f"{limit.shape}; DCEGM needs one number per discrete state and action."
            )
        return limit.astype(self.savings.to_jax().dtype)

    def savings_points(self, problem: RegimeProblem, limit: Array) -> Array:
        """The savings points of a choice whose borrowing limit is `limit`: the grid
        itself, or with a regime function `borrowing_limit` the grid's offsets above
        that limit (`limit + savings`, the grid starting at 0)."""
        savings = self.savings.to_jax()
        if "borrowing_limit" not in problem.regime.helpers:
            return savings
        return limit + savings

    def _inada_violation(
        self, problem: RegimeProblem, discrete: dict[str, Array], savings: Array
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
        utility, marginal = self._utility(problem, discrete)
        zero = jnp.zeros((), savings.dtype)
        slope, level = jax.lax.stop_gradient((marginal(zero), utility(zero)))
        position = problem.regime.states.index(self.state)
        lowest = jnp.min(problem.state_axes[position].points)
        # u(0) = -inf also makes u' unbounded near 0 (u is concave): a utility guarded by
        # `where(c > 0, log(c), -inf)` has derivative 0 at 0 itself.
        bounded = jnp.isfinite(slope) & (level > NEG_INF)
        finite_at_limit = jnp.isfinite(level) & (lowest <= savings[0])
        # 2: u'(0) finite; 1: u(0) finite at a state on the limit (the message says which).
        return jnp.where(bounded, 2.0, jnp.where(finite_at_limit, 1.0, 0.0))

    def _inverted(
        self,
        problem: RegimeProblem,
        discrete: dict[str, Array],
        continuation: dict[str, Array],
        consumption: Array | None = None,
    ) -> dict[str, Array]:
        """The raw endogenous points `(m, c, v, mu)`, `continuation0`, feasibility and
        the Euler equation's target `u'(c)` of one discrete state and action: the Euler
        equation inverted at the savings points, given `_continuation`'s result (and
        the consumption that solves it, where the caller found it)."""
        expected = continuation["expected"]
        marginal_expected = continuation["marginal_expected"]
        beta = problem.discount_factor(problem.evaluator(discrete))
        utility, marginal = self._utility(problem, discrete)
        cap = marginal(jnp.asarray(CONSUMPTION_CAP, expected.dtype))
        target = euler_target(beta, marginal_expected, cap)
        if consumption is None:
            consumption = self._invert(problem, discrete, marginal, target)
        if "savings" in continuation:  # with the breakpoints of a kinked budget
            m = continuation["savings"] + consumption
        else:
            m = self.savings_points(problem, continuation["limit"]) + consumption
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

    def _refine(
        self,
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
        nodes, count = self.upper_envelope(
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

    def _refine_rows(
        self,
        blocks: list[Block],
        row_codes: tuple[Array, list[dict[str, Array]]],
        raw: dict[str, Array],
    ) -> dict[str, Array]:
        """`_refine` of every row of `raw` (leading axis), each a discrete state and
        action of the regime of its block (consecutive rows, `blocks`), with its
        regime's utility selected (every regime's utility is evaluated in the same
        kernels and the row's own taken: `row_utility`)."""

        def at_row(k, codes, raw, dominated):
            utility, marginal = row_utility(blocks, k, codes)
            return self._refine(utility, marginal, raw, dominated)

        regime, codes = row_codes
        # The envelope's test of all rows at once, where it has one (outside the map
        # over rows, so that it can skip rows).
        dominated = self.upper_envelope.dominated_rows(raw["m"], raw["v"])
        return map_axis(lambda xs: at_row(*xs), (regime, codes, raw, dominated), 0)

    def _values_rows(
        self,
        blocks: list[Block],
        row_codes: tuple[Array, list[dict[str, Array]]],
        refined: dict[str, Array],
        nodes: Array,
    ) -> Array:
        """Each row's choice value at its `nodes` (`(rows, n_nodes)`): its refined grid
        read with its regime's utility (see `_refine_rows`)."""

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

    def _utility(self, problem: RegimeProblem, discrete: dict[str, Array]):
        regime = problem.regime

        def utility(c):
            evaluate = problem.evaluator({**discrete, self.action: c, self.state: c})
            return jnp.asarray(evaluate(regime.utility))

        return jnp.vectorize(utility), marginal_of(utility)

    def _invert(
        self,
        problem: RegimeProblem,
        discrete: dict[str, Array],
        marginal: Callable[[Array], Array],
        q: Array,
    ) -> Array:
        """`c` with `u'(c) = q`: the user's inverse, or Newton's method on
        `log u'(exp(x)) = log q`."""
        if self.inverse_marginal_utility is None:
            return invert_marginal(marginal, q, self.newton_steps)
        inputs = problem.inputs(discrete)
        utility_params = problem.params.get("utility", {})
        kwargs = {}
        for name in inspect.signature(self.inverse_marginal_utility).parameters:
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
        return jnp.asarray(self.inverse_marginal_utility(**kwargs), q.dtype)

    # ------------------------------------------------------------------ reading
    def values_on(self, problem: RegimeProblem, grid: EndogenousGrid, nodes: Array) -> Array:
        """The regime's value at `nodes` of `state` for every discrete state: `(*z, n)`."""

        def at(x):
            values, _ = self.choice_values(problem, grid, x)
            return self.combine_choices(problem, values)

        return jax.vmap(at, out_axes=-1)(nodes)

    def choice_values(
        self,
        problem: RegimeProblem,
        grid: EndogenousGrid,
        x: Array,
        discrete_state: dict[str, Array] | None = None,
    ) -> tuple[Array, Array]:
        """Value and consumption of each discrete choice at cash on hand `x`.

        Axes: the discrete states, then the discrete actions; with `discrete_state`,
        only that state's choices (axes: the discrete actions).
        """
        discrete_states = tuple(a for a in problem.state_axes if a.name != self.state)
        discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
        fixed = {} if discrete_state is None else discrete_state

        def at(codes: dict, nodes, count, continuation0, feasible, limit):
            utility, marginal = self._utility(problem, {**fixed, **codes})
            c, v, _ = read(nodes, count, continuation0, limit, x, utility, marginal)
            return jnp.where(feasible, v, NEG_INF), c

        if discrete_state is None:
            return map_choices(at, grid, [a.name for a in (*discrete_states, *discrete_actions)])
        index = tuple(problem.local_code(a.name, discrete_state[a.name]) for a in discrete_states)
        own = jax.tree.map(lambda array: array[index] if array.ndim else array, grid)
        return map_choices(at, own, [a.name for a in discrete_actions])

    def combine_choices(self, problem: RegimeProblem, values: Array) -> Array:
        """The value over the discrete actions (the last axes of `values`): the max, or
        `λ·logsumexp(v / λ)` with taste shocks."""
        n_d = len(problem.regime.discrete_actions)
        if n_d == 0:
            return values
        flat = values.reshape((*values.shape[: values.ndim - n_d], -1))
        scale = taste_shock_scale(problem)
        if scale is None:
            return max_along(flat, flat.ndim - 1)
        return smooth_max(flat, scale)

    def choose(self, problem, state, key):
        regime = problem.regime
        discrete_states = {s: state[s] for s in regime.states if s != self.state}
        v_d, c_d = self.choice_values(problem, problem.policy, state[self.state], discrete_states)
        discrete_actions = regime.discrete_actions
        scale = taste_shock_scale(problem)
        if scale is not None:
            assert key is not None
            v_d = v_d + scale * jax.random.gumbel(key, v_d.shape, v_d.dtype)
        if not discrete_actions:
            return {self.action: c_d}, v_d
        flat = jnp.argmax(v_d.reshape(-1))
        index = jnp.unravel_index(flat, v_d.shape)
        chosen = {
            name: i.astype(jnp.int32) for name, i in zip(discrete_actions, index, strict=True)
        }
        chosen[self.action] = c_d.reshape(-1)[flat]
        return chosen, v_d.reshape(-1)[flat]

    def discrete_values(self, problem, state):
        discrete_states = {s: state[s] for s in problem.regime.states if s != self.state}
        v_d, _ = self.choice_values(problem, problem.policy, state[self.state], discrete_states)
        return v_d

    def policy(self, problem, state):
        """Consumption of each discrete choice at `state` (axes: discrete actions)."""
        discrete_states = {s: state[s] for s in problem.regime.states if s != self.state}
        _, c_d = self.choice_values(problem, problem.policy, state[self.state], discrete_states)
        return c_d

    # ------------------------------------------------------------------ the period loop
    def defers_values(self, regime: RegimePlan) -> bool:
        # The value arrays on the state grid are output only where no regime reads them
        # next period (every regime that can move here reads the refined grids): read
        # after the loop for all periods at once (`_period.postprocess`), not in every
        # period. Not with a splayed state axis, whose period step bounds its memory.
        return not any(0 < (g := regime.grids[s]).batch_size < g.n_points for s in regime.states)

    def init(self, plan: ModelPlan, names: tuple[str, ...], dtype) -> _period.State:
        return _period.initial_state(self, plan, names, dtype)

    def enter(self, plan: ModelPlan, state: _period.State, active) -> _period.State:
        return _period.regrouped(self, plan, state, active)

    def step(self, problems, state, period: Period):
        return _period.step(self, problems, state, period)

    def postprocess(self, emitted, segment: SegmentOutputs):
        return _period.postprocess(self, emitted, segment)

    def reader(self, target: str, state, period: Period, along: str) -> ContinuationReader:
        return _period.reader(self, target, state, period)

    # ------------------------------------------------------------------ estimation
    def continuous_policy(self, problem, state):
        return {self.action: self.policy(problem, state)}

    def best_continuous_actions(self, problem, state, discrete_action):
        consumption = self.policy(problem, state)
        index = tuple(discrete_action[a] for a in problem.regime.discrete_actions)
        return {self.action: consumption[index]}

    def choices_on_grid(self, problem):
        # Read off the endogenous grids for all discrete states at once.
        axis = next(a for a in problem.state_axes if a.name == self.state)
        v, c = lift(
            lambda point: self.choice_values(problem, problem.policy, point[self.state]), (axis,)
        )
        position = problem.regime.states.index(self.state)
        return jnp.moveaxis(v, 0, position), {self.action: jnp.moveaxis(c, 0, position)}

    def euler_variables(self) -> tuple[str, str]:
        return self.state, self.action

    def borrowing_limit(self, problem, discrete) -> Array:
        return self.choice_limit(problem, discrete)

    def action_step(self, problem, action) -> Array:
        # The policy is continuous: only savings at the limit itself are constrained.
        return jnp.asarray(1e-9)

    def policy_reader(self, plan, target, policy, params, period, age) -> ContinuationReader:
        return endogenous_reader(plan, target, self, policy, params, period, age)
