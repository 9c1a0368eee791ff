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

The folder, by role: this file (the class: its settings and class check, the period's
entry points, the queries), `_egm.py` (one choice's step: next period read at the
savings points, the inversion, the refinement), `_passes.py` (a regime's choices
mapped over or laid out as rows, several regimes in one pass), `_period.py` (the state
the backward induction carries, the period step, what is computed after the loop),
`_rows.py` (choices as rows of one pass), `_readers.py` (how earlier periods read its
grids), `_envelope.py` (the upper envelope and the grids' reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..._errors import ModelInitializationError
from ..._grids import AbstractContinuousGrid
from ..._model._plan import ModelPlan, RegimePlan
from .._axes import lift
from .._continuation import NEG_INF
from .._kernel import RegimeProblem
from .._reading import (
    ContinuationReader,
)
from .._reduce import max_along, smooth_max
from .._solver import AbstractSolver, Period, PeriodSolution, SegmentOutputs, taste_shock_scale
from . import _egm, _passes, _period
from ._checks import check_dcegm
from ._envelope import (
    AbstractUpperEnvelope,
    EndogenousGrid,
    ExactEnvelope,
    read,
)
from ._kinks import BudgetKinks
from ._readers import endogenous_reader
from ._rows import (
    map_choices,
    materialized,
)


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
    # invert there, no envelope (`last_period_grid`).
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
            *(f"{key}:limit" for key in _egm.limit_constraints(self, regime)),
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
        limits = _egm.limit_constraints(self, regime)
        return all(key in limits for key in regime.constraints)

    # ------------------------------------------------------------------ solve
    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        def at_choice(continuation, discrete):
            if problem.last_period:
                return _egm.last_period_grid(self, problem, continuation)
            raw = materialized(_egm.inverted(self, problem, discrete, continuation))
            utility, marginal = _egm.utility_of(self, problem, discrete)
            refined = _egm.refine(self, utility, marginal, raw)
            miss = _egm.euler_miss(raw["mu"], raw["target"], continuation["expected"])
            return {**refined, "euler": jnp.max(miss)}

        # Where every choice can move to the same subset of the targets, only those
        # are read (the choices of a splayed or sharded axis are not grouped).
        _, codes = _passes.flat_choices(self, problem)
        groups = _passes.target_groups(self, problem, codes)
        targets = groups[0][1] if groups is not None and len(groups) == 1 else None
        policy, violations, _ = _passes.lift_all_choices(self, problem, at_choice, targets)
        if "euler" in policy:
            policy = dict(policy)
            violations = _egm.with_euler_check(self, problem, violations, policy.pop("euler"))
        return _passes.period_solution(self, problem, policy, violations)

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
        """`solve_period` of several regimes that this solver solves, in passes over
        their choices as rows (`_passes.solve_batched`); and their refined grids as
        rows, which the backward induction carries and emits as they are."""
        return _passes.solve_batched(self, problems, with_values)

    def values_batched(
        self,
        problems: list[RegimeProblem],
        grids: list[EndogenousGrid],
        refined: dict[str, Array] | None = None,
    ) -> list[Array]:
        """The value arrays of regimes solved by `solve_batched(..., with_values=False)`,
        from their period's refined grids (`_passes.values_batched`)."""
        return _passes.values_batched(self, problems, grids, refined)

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
            utility, marginal = _egm.utility_of(self, problem, {**fixed, **codes})
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
