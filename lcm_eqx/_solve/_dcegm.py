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
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._errors import InvalidParamsError, ModelInitializationError
from .._grids import AbstractContinuousGrid, AbstractProcessGrid
from .._model._dag import Evaluator, transitive_inputs
from .._model._plan import ModelPlan, RegimePlan
from ._axes import map_axis
from ._continuation import NEG_INF, settle, weighted
from ._envelope import (
    INACTIVE,
    ORDINARY,
    ZERO,
    AbstractUpperEnvelope,
    EndogenousGrid,
    ExactEnvelope,
    materialize,
    one_kernel_reduce,
    read,
)
from ._kernel import RegimeProblem
from ._solver import AbstractSolver, PeriodSolution, taste_shock_scale
from ._static import constant_outputs

# The action value at which transitions are evaluated for a savings point `a`: the
# state is `a + REFERENCE_ACTION`, so `state − action = a`. The class check verifies that
# the result does not depend on this choice.
REFERENCE_ACTION = 1.0
# Consumption where the continuation's marginal value vanishes (after the last period):
# the Euler equation has no finite solution, every point is credit constrained.
CONSUMPTION_CAP = 1e8


class _Block(NamedTuple):
    """Consecutive rows of one regime in `DCEGM._refine_rows`: its utility and marginal
    utility of a row's discrete codes (`DCEGM._utility`), the rows' codes (host arrays),
    and how many rows."""

    functions: Callable[[dict[str, Array]], tuple[Callable, Callable]]
    codes: dict[str, np.ndarray]
    size: int


class DCEGM(AbstractSolver):
    """The discrete-continuous endogenous grid method with an upper envelope.

    Args:
        state: the regime's continuous state (cash on hand, wealth).
        action: the regime's continuous action (consumption).
        savings: the exogenous grid of the post-decision state `state − action`; its
            first point is the borrowing limit.
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

    The regime must have exactly one continuous state (`state`) and one continuous
    action (`action`); its utility must depend on `action` and not on `state`; the next
    value of `state` must depend on `state` and `action` only through `state − action`;
    the regime transition and the discrete state transitions must not depend on either.
    Constraints that involve `state` or `action` are the borrowing limit, which the
    method takes from `savings` (its first point): when solving, each must allow saving
    exactly `savings[0]` and forbid saving less. Any number of discrete actions and
    discrete, process and Markov states, taste shocks and stochastic regime transitions
    work as with `GridSearch`.

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
        name = regime.name

        def fail(what: str):
            raise ModelInitializationError(
                f"Regime {name!r}: DCEGM(state={self.state!r}, action={self.action!r}) "
                f"cannot solve it: {what}"
            )

        if regime.is_terminal:
            fail("the regime is terminal (no continuation to invert); use GridSearch().")
        if regime.aggregator is not None:
            fail(
                f"aggregator {type(regime.aggregator).__name__} not supported by DCEGM yet; "
                "solve this regime with GridSearch()."
            )
        if self.state not in regime.states or regime.grids[self.state].is_discrete:
            fail(f"{self.state!r} is not a continuous state of the regime.")
        if self.action not in regime.actions or regime.grids[self.action].is_discrete:
            fail(f"{self.action!r} is not a continuous action of the regime.")
        for other in regime.states:
            if other != self.state and not regime.grids[other].is_discrete:
                fail(f"it has a second continuous state {other!r}; DC-EGM handles one.")
        for other in regime.actions:
            if other != self.action and not regime.grids[other].is_discrete:
                fail(f"it has a second continuous action {other!r}; DC-EGM handles one.")
        continuous = {self.state, self.action}
        utility_inputs = transitive_inputs(regime.utility, regime.helpers)
        if self.action not in utility_inputs:
            fail(f"its utility does not depend on {self.action!r}, so there is no Euler equation.")
        if self.state in utility_inputs:
            fail(
                f"its utility depends on the state {self.state!r}; DC-EGM needs utility of "
                f"the action {self.action!r} and discrete variables only."
            )
        assert regime.next_regime is not None
        if transitive_inputs(regime.next_regime, regime.helpers) & continuous:
            fail(
                f"its regime transition depends on {self.state!r} or {self.action!r}; "
                "DC-EGM needs it to depend on discrete variables only."
            )
        for state, transition in regime.state_transitions.items():
            if transition.per_target:
                fail(
                    f"the law of motion of {state!r} depends on the regime moved to "
                    f"(state_transitions[{state!r}] is a dict by target); DC-EGM needs one "
                    "law of motion per state. Solve this regime with GridSearch()."
                )
            if state == self.state:
                continue
            if not model.state_grid(state).is_discrete:
                fail(f"it produces a second continuous next state {state!r}; DC-EGM handles one.")
            if transition.function is not None and (
                transitive_inputs(transition.function, regime.helpers) & continuous
            ):
                fail(
                    f"the transition of the discrete state {state!r} (function "
                    f"'next_{state}') depends on {self.state!r} or {self.action!r}."
                )
        if self.state not in regime.state_transitions:
            fail(f"it has no transition for {self.state!r}.")
        discount = regime.helpers.get("discount_factor")
        if discount is not None and transitive_inputs(discount, regime.helpers) & continuous:
            fail(
                f"its function 'discount_factor' depends on {self.state!r} or "
                f"{self.action!r}; DC-EGM needs it to depend on discrete variables, period, "
                "age and parameters only."
            )
        for target in regime.targets:
            target_plan = model.regimes[target]
            for state in target_plan.states:
                if state != self.state and not target_plan.grids[state].is_discrete:
                    fail(f"the regime it can move to, {target!r}, has another continuous state.")

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]:
        # The law of motion of `state` must go through savings, and each constraint on
        # `state` or `action` must bind exactly at the savings grid's first point.
        return (
            f"next_{self.state}:savings",
            *(f"{key}:limit" for key in self._limit_constraints(regime)),
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

    def _choices_always_feasible(self, regime: RegimePlan) -> bool:
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
        savings = self.savings.to_jax()

        def at_choice(continuation, discrete):
            if problem.last_period:
                return self._last_period_grid(problem, continuation)
            raw = self._inverted(problem, discrete, continuation, savings)
            utility, marginal = self._utility(problem, discrete)
            return self._refine(utility, marginal, _materialized(raw), savings)

        # Where every choice can move to the same subset of the targets, only those
        # are read (the choices of a splayed or sharded axis are not grouped).
        _, codes = self._flat_choices(problem)
        groups = self._target_groups(problem, codes)
        targets = groups[0][1] if groups is not None and len(groups) == 1 else None
        policy, violations, _ = self._lift_choices(problem, at_choice, targets)
        return self._period_solution(problem, policy, violations)

    def _last_period_grid(self, problem: RegimeProblem, continuation) -> dict[str, Array]:
        """The refined grids of choices (leading axes: any) in the model's last period,
        where nothing follows (`E[V'] = 0`, `problem.last_period`): with `u' > 0` the
        Euler equation has no solution, and the choice consumes down to the borrowing
        limit at every cash on hand. That is the credit-constrained segment that `read`
        takes below a grid's first point: no point at all (`count` 0, rows of padding),
        so no Euler equation is inverted and no upper envelope computed."""
        expected = continuation["expected"]
        lead = expected.shape[:-1]
        rows = self.upper_envelope.n_rows(self.savings.n_points)
        padding = jnp.asarray([jnp.inf, 0.0, 0.0, 0.0], expected.dtype)
        # E[V'] = 0 here: a discount factor that differs by choice multiplies zeros.
        beta = problem.params[""].get("discount_factor", 1.0)
        return {
            "nodes": jnp.broadcast_to(padding, (*lead, rows, 4)),
            "count": jnp.zeros(lead, jnp.int32),
            "continuation0": _plus_discounted(0.0, beta, expected[..., 0]),
            "feasible": jnp.broadcast_to(continuation["feasible"], lead),
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
        savings = self.savings.to_jax()
        discrete_states = tuple(a for a in problem.state_axes if a.name != self.state)
        discrete_actions = tuple(a for a in problem.action_axes if a.is_discrete)
        checks = (*problem.checks, *self.extra_checks(problem.regime)) if problem.validate else ()

        def at_discrete_state(z: dict[str, Array], readers: dict[str, ContinuationReader]):
            def at_choice(d: dict[str, Array]):
                discrete = {**z, **d}
                continuation, violations = self._continuation(
                    problem, readers, discrete, savings, checks, targets
                )
                return finish(continuation, discrete), violations

            return _lift(at_choice, discrete_actions, {})

        result, violations = _lift_with_readers(
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
        savings = self.savings.to_jax()
        checks = (*problem.checks, *self.extra_checks(problem.regime)) if problem.validate else ()
        parts = []
        for rows, targets in groups:

            def at_choice(xs, targets=targets):
                discrete, _ = xs
                return self._continuation(
                    problem, problem.next_policies, discrete, savings, checks, targets
                )

            members = ({k: jnp.asarray(v[rows]) for k, v in codes.items()}, jnp.asarray(rows))
            # A plain `vmap`: `_continuation`'s map over the savings points is already a
            # flat program (`map_axis`); flattening this map too would batch each of its
            # primitives a second time (0.02-0.03 s of tracing; the same compiled program).
            parts.append(jax.vmap(at_choice)(members))
        merged = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
        order = np.concatenate([rows for rows, _ in groups])
        if not np.array_equal(order, np.arange(size)):
            merged = jax.tree.map(lambda x: x[np.argsort(order)], merged)
        continuation, violations = merged
        violations = violations.reshape((*shape, *violations.shape[1:]))
        return continuation, violations, shape, codes

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
        return marginal, _euler_target(beta, continuation["marginal_expected"], cap[:, None])

    def _inverted_rows(
        self, problem: RegimeProblem, continuation, codes, consumption: Array | None
    ) -> dict[str, Array]:
        """`_inverted` of every flat choice of `_continuation_rows`, given the consumption
        that solves the Euler equation at each of their savings points (None: the
        user's inverse, per choice)."""
        savings = self.savings.to_jax()
        discrete = {k: jnp.asarray(v) for k, v in codes.items()}
        if consumption is None:
            return map_axis(
                lambda xs: self._inverted(problem, xs[0], xs[1], savings),
                (discrete, continuation),
                0,
            )
        return map_axis(
            lambda xs: self._inverted(problem, xs[0], xs[1], savings, xs[2]),
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
            return problem._regime_probabilities_and_id(evaluate)[0]

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
        shape = tuple(a.points.shape[0] for a in problem.state_axes)
        violations = jnp.expand_dims(violations, position)
        violations = jnp.broadcast_to(violations, (*shape, violations.shape[-1]))
        return PeriodSolution(values, violations, grid)

    def _grid(self, policy: dict[str, Array]) -> EndogenousGrid:
        """A period's `EndogenousGrid` from its refined rows."""
        return EndogenousGrid(
            nodes=policy["nodes"],
            count=policy["count"],
            continuation0=policy["continuation0"],
            feasible=policy["feasible"],
            borrowing_limit=self.savings.to_jax()[0],
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

    def _batchable(self, regime: RegimePlan) -> bool:
        """Whether the regime's choices can join other regimes' in one pass over rows:
        none of its discrete axes is splayed (the pass would hold every row at once)
        or sharded (rows of different regimes would be gathered across devices)."""
        names = (*regime.states, *regime.discrete_actions, *regime.continuous_actions)
        return not any(
            g.distributed or 0 < g.batch_size < g.n_points
            for g in (regime.grids[name] for name in names)
            if g.is_discrete
        )

    def _solve_batched(
        self, problems: list[RegimeProblem], with_values: bool = True
    ) -> tuple[list[PeriodSolution], dict[str, Array]]:
        """`solve_period` of several regimes that this solver solves, in one pass; and
        their refined grids as rows (`nodes`, `count`, `continuation0`, `feasible`: the
        regimes' flat choices one after the other, in the order of `problems`), which
        the backward induction carries and emits as they are.

        Each regime reads next period and inverts the Euler equation on its own (its
        transitions, targets, checks and marginal utility), then the choices of all of
        them are rows of one array: one upper envelope and one read of the values on the
        state grid for every row, with each row's own utility (`lax.switch` on its
        regime, which `vmap` turns into a selection). The same XLA kernels then serve
        every regime rather than a copy per regime, which shortens the compilation.

        (Inverting in the same pass costs more kernels than it saves: XLA:CPU splits
        each Newton step of the selected marginal utilities into three or four kernels,
        where each regime's own step is one.)
        """
        savings = self.savings.to_jax()
        shapes, read, violations, blocks = [], [], [], []
        for problem in problems:
            continuation, violation, shape, codes = self._continuation_rows(problem)
            shapes.append(shape)
            read.append((problem, continuation, codes))
            violations.append(violation)

            def functions(codes, problem=problem):
                return self._utility(problem, codes)

            blocks.append(_Block(functions, codes, math.prod(shape)))
        row_codes = _row_codes(blocks)
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
                    invert_marginals([self._euler_targets(*r) for r in read], self.newton_steps)
                )
            )
            raws = [
                self._inverted_rows(problem, continuation, codes, consumption)
                for (problem, continuation, codes), consumption in zip(
                    read, consumptions, strict=True
                )
            ]
            rows = {key: jnp.concatenate([raw[key] for raw in raws]) for key in raws[0]}
            refined = self._refine_rows(blocks, row_codes, _materialized(rows), savings)
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
        blocks: list[_Block],
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
        values = self._values_rows(blocks, row_codes, refined, nodes, self.savings.to_jax())
        offsets = np.cumsum([0, *sizes])
        return [
            values[start:stop].reshape((*shape, -1))
            for start, stop, shape in zip(offsets[:-1], offsets[1:], shapes, strict=True)
        ]

    def _values_batched(
        self,
        problems: list[RegimeProblem],
        grids: list[EndogenousGrid],
        refined: dict[str, Array] | None = None,
    ) -> list[Array]:
        """The value arrays of regimes solved by `_solve_batched(..., with_values=False)`,
        from their period's refined grids: one read of all their choices at the state
        nodes, as `_solve_batched` does in the period (`refined`: the grids as
        `_solve_batched`'s rows, where the caller has them)."""
        shapes, blocks, rows = [], [], []
        for problem, grid in zip(problems, grids, strict=True):
            shape, codes = self._flat_choices(problem)
            size = math.prod(shape)

            def functions(codes, problem=problem):
                return self._utility(problem, codes)

            shapes.append(shape)
            blocks.append(_Block(functions, codes, size))
            if refined is None:
                policy = {
                    "nodes": grid.nodes,
                    "count": grid.count,
                    "continuation0": grid.continuation0,
                    "feasible": grid.feasible,
                }
                rows.append(
                    {k: v.reshape((size, *v.shape[len(shape) :])) for k, v in policy.items()}
                )
        row_codes = _row_codes(blocks)
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
        savings,
        checks,
        targets=None,
    ):
        """`E[V']` and `E[R·V'_m]` at the savings points of one discrete state and
        action, whether the choice is allowed, and the check violations (reduced over
        the savings points). `targets`: the regimes it reads next period (see
        `expected_at_savings`)."""
        feasible = jnp.asarray(True)
        reference = jnp.asarray(REFERENCE_ACTION, savings.dtype)
        at_limit = {**discrete, self.state: savings[0] + reference, self.action: reference}
        limits = self._limit_constraints(problem.regime)
        evaluate = problem.evaluator(at_limit)
        for key, constraint in problem.regime.constraints.items():
            if key not in limits:  # constraints on discrete variables: is the choice allowed
                feasible = feasible & jnp.asarray(evaluate(constraint)).astype(bool)
        # The borrowing limit is savings[0]: each constraint on the state or the action
        # must allow saving exactly that and forbid saving a little less (else the model
        # solved would not be the one written).
        limit_violations = {}
        if checks:
            below = {
                **at_limit,
                self.state: at_limit[self.state] - 1e-6 * (1.0 + jnp.abs(savings[0])),
            }
            evaluate_below = problem.evaluator(below)
            for key in limits:
                constraint = problem.regime.constraints[key]
                allowed = jnp.asarray(evaluate(constraint)).astype(bool)
                allowed_below = jnp.asarray(evaluate_below(constraint)).astype(bool)
                limit_violations[f"{key}:limit"] = jnp.where(
                    feasible & ~(allowed & ~allowed_below), 1.0, 0.0
                )

        def at_savings(a):
            return expected_at_savings(
                problem, readers, self.state, self.action, discrete, a, checks, targets
            )

        expected, marginal_expected, violations = map_axis(
            at_savings, savings, self.savings.batch_size
        )
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
        }
        return continuation, violations

    def _inverted(
        self,
        problem: RegimeProblem,
        discrete: dict[str, Array],
        continuation: dict[str, Array],
        savings,
        consumption: Array | None = None,
    ) -> dict[str, Array]:
        """The raw endogenous points `(m, c, v, mu)`, `continuation0` and feasibility
        of one discrete state and action: the Euler equation inverted at the savings
        points, given `_continuation`'s result (and the consumption that solves it,
        where the caller found it)."""
        expected = continuation["expected"]
        marginal_expected = continuation["marginal_expected"]
        beta = problem.discount_factor(problem.evaluator(discrete))
        utility, marginal = self._utility(problem, discrete)
        if consumption is None:
            cap = marginal(jnp.asarray(CONSUMPTION_CAP, savings.dtype))
            target = _euler_target(beta, marginal_expected, cap)
            consumption = self._invert(problem, discrete, marginal, target)
        m = savings + consumption
        v = _plus_discounted(utility(consumption), beta, expected)
        finite = jnp.isfinite(v) & jnp.isfinite(m)
        m = jnp.where(finite, m, jnp.inf)
        v = jnp.where(finite, v, NEG_INF)
        raw = {
            "m": m,
            "c": consumption,
            "v": v,
            "mu": marginal(consumption),
            "continuation0": _plus_discounted(0.0, beta, expected[0]),
            "feasible": continuation["feasible"],
        }
        return raw

    def _refine(
        self,
        utility: Callable,
        marginal: Callable,
        raw: dict[str, Array],
        savings,
        dominated: Array | None = None,
    ) -> dict[str, Array]:
        """The upper envelope of one discrete state and action's raw points: its refined
        endogenous grid (`dominated`: the row of the envelope's `dominated_rows`)."""
        a0 = savings[0]

        def constrained_value(x):
            ok = x > a0
            value = utility(jnp.where(ok, x - a0, 1.0)) + raw["continuation0"]
            return jnp.where(ok, value, NEG_INF)

        extra = {} if dominated is None else {"dominated": dominated}
        nodes, count = self.upper_envelope(
            raw["m"], raw["c"], raw["v"], raw["mu"], constrained_value, marginal, **extra
        )
        return {
            "nodes": nodes,
            "count": count,
            "continuation0": raw["continuation0"],
            "feasible": raw["feasible"],
        }

    def _refine_rows(
        self,
        blocks: list[_Block],
        row_codes: tuple[Array, list[dict[str, Array]]],
        raw: dict[str, Array],
        savings,
    ) -> dict[str, Array]:
        """`_refine` of every row of `raw` (leading axis), each a discrete state and
        action of the regime of its block (consecutive rows, `blocks`), with its
        regime's utility selected by `lax.switch` (under `vmap`, every regime's utility
        is evaluated in the same kernels and the row's own taken)."""

        def at_row(k, codes, raw, dominated):
            utility, marginal = _row_utility(blocks, k, codes)
            return self._refine(utility, marginal, raw, savings, dominated)

        regime, codes = row_codes
        # The envelope's test of all rows at once, where it has one (outside the map
        # over rows, so that it can skip rows).
        dominated = self.upper_envelope.dominated_rows(raw["m"], raw["v"])
        return map_axis(lambda xs: at_row(*xs), (regime, codes, raw, dominated), 0)

    def _values_rows(
        self,
        blocks: list[_Block],
        row_codes: tuple[Array, list[dict[str, Array]]],
        refined: dict[str, Array],
        nodes: Array,
        savings,
    ) -> Array:
        """Each row's choice value at its `nodes` (`(rows, n_nodes)`): its refined grid
        read with its regime's utility (see `_refine_rows`)."""

        def at_row(k, codes, grid, x):
            utility, marginal = _row_utility(blocks, k, codes)

            def at(point):
                _, v, _ = read(
                    grid["nodes"],
                    grid["count"],
                    grid["continuation0"],
                    savings[0],
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

        return jnp.vectorize(utility), _marginal(utility)

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

        def at(codes: dict, nodes, count, continuation0, feasible):
            utility, marginal = self._utility(problem, {**fixed, **codes})
            c, v, _ = read(nodes, count, continuation0, grid.borrowing_limit, x, utility, marginal)
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
            return jnp.max(flat, axis=-1)
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


def expected_at_savings(
    problem: RegimeProblem,
    readers: dict[str, ContinuationReader],
    state_name: str,
    action: str,
    discrete,
    a,
    checks=(),
    targets=None,
):
    """`E[V']` and `E[R·V'_m]` at savings `a` (`state_name − action`), and the check
    violations, for the discrete states and actions `discrete`.

    Next period's regimes are read through `readers` (`ContinuationReader`s): those in
    `targets` (default: every regime this one can move to; a subset where the others
    are known to have probability 0).
    """
    regime = problem.regime
    c_ref = jnp.asarray(REFERENCE_ACTION, a.dtype)
    point = {**discrete, state_name: a + c_ref, action: c_ref}
    evaluate = problem.evaluator(point)
    function = regime.state_transitions[state_name].function
    assert function is not None

    def next_state(m, c):
        e = problem.evaluator({**discrete, state_name: m, action: c})
        return jnp.asarray(e(function))

    m_next, gross_return = jax.jvp(
        next_state, (a + c_ref, c_ref), (jnp.ones_like(a), jnp.zeros_like(a))
    )
    regime_p, regime_code = problem._regime_probabilities_and_id(evaluate)
    codes, probabilities = problem.next_states(evaluate)
    for name, t in regime.state_transitions.items():
        if t.is_markov and name not in probabilities:
            if t.function is None:
                probabilities[name] = problem.process_matrices[name][point[name]]
            else:
                probabilities[name] = jnp.asarray(evaluate(t.function))
    violations: dict[str, Any] = dict(problem._period_violations)
    if checks:
        problem._record_violations(regime_p, codes, probabilities, violations)
        _, along = jax.jvp(next_state, (a + c_ref, c_ref), (jnp.ones_like(a), jnp.ones_like(a)))
        scale = 1.0 + jnp.abs(gross_return)
        violations[f"next_{state_name}:savings"] = jnp.where(
            jnp.abs(along) <= 1e-6 * scale, 0.0, jnp.abs(along)
        )
    if checks and problem.index_checks:
        # Parameter arrays read out of bounds (JAX would clamp): the utility and its
        # helpers are evaluated here only for their checks; the transitions were above.
        evaluate(regime.utility)
        for key, failed in evaluate.index_errors.items():
            if key not in problem.index_checks:
                continue
            if problem._is_transition(key):
                failed = failed & problem._before_last_period()
            check = problem.index_checks[key]
            violations[check] = jnp.maximum(
                violations.get(check, 0.0), jnp.asarray(failed, a.dtype)
            )
    expected = jnp.asarray(0.0, a.dtype)
    marginal = jnp.asarray(0.0, a.dtype)
    unreachable = [r.id for n, r in problem.model.regimes.items() if n not in regime.targets]
    for target in regime.targets if targets is None else targets:
        target_id = problem.model.regimes[target].id
        p = regime_p[target_id]
        reader = readers[target]
        value, slope = reader(m_next)  # arrays over the target's discrete states
        target_plan = problem.model.regimes[target]
        for state in reader.axes:
            if state in probabilities:
                value = jnp.sum(weighted(_front(probabilities[state], value), value), axis=0)
                slope = jnp.sum(_front(probabilities[state], slope) * slope, axis=0)
            else:
                value, slope = value[codes[state]], slope[codes[state]]
        value = settle(value) if target_plan.states else value
        expected = expected + weighted(p, value)
        marginal = marginal + p * slope
    if unreachable:
        blocked = jnp.any(regime_p[jnp.asarray(unreachable)] > 0)
        expected = jnp.where(blocked, NEG_INF, expected)
    del regime_code
    diagnostics = (
        jnp.stack([jnp.asarray(violations.get(c, 0.0), a.dtype) for c in checks])
        if checks
        else jnp.zeros((0,), a.dtype)
    )
    return settle(expected), gross_return * marginal, diagnostics


def _materialized(raw: dict[str, Array]) -> dict[str, Array]:
    """`raw` with its endogenous points `(m, c, v, mu)` computed once, for all of them
    together, rather than inside each of the envelope's kernels (see `materialize`)."""
    keys = ("m", "c", "v", "mu")
    return {**raw, **dict(zip(keys, materialize(*(raw[k] for k in keys)), strict=True))}


def _row_codes(blocks: list[_Block]) -> tuple[Array, list[dict[str, Array]]]:
    """Each row's block, and for each block the codes of its regime's discrete
    variables in every row: the row's own in the block's rows, 0 elsewhere (so that
    each branch of `_switched` is evaluated at valid codes of its own grids)."""
    sizes = [block.size for block in blocks]
    codes = []
    for b, block in enumerate(blocks):
        codes.append(
            {
                name: jnp.asarray(
                    np.concatenate(
                        [
                            own if c == b else np.zeros(size, np.int32)
                            for c, size in enumerate(sizes)
                        ]
                    )
                )
                for name, own in block.codes.items()
            }
        )
    regime = np.concatenate([np.full(size, b, np.int32) for b, size in enumerate(sizes)])
    return jnp.asarray(regime), codes


def _row_utility(blocks: list[_Block], k: Array, codes: list[dict[str, Array]]):
    """The utility and marginal utility of a row of block `k`, each block's functions
    at its own `codes` of that row."""
    rows = [block.functions(own) for block, own in zip(blocks, codes, strict=True)]
    return rows[0] if len(rows) == 1 else _switched(k, rows)


def _switched(index: Array, rows: list[tuple[Callable, Callable]]) -> tuple[Callable, Callable]:
    """The utility and marginal utility of `rows[index]` (under `vmap`, every branch is
    evaluated and the row's own result selected, in the same XLA kernels)."""

    def dispatch(functions):
        return lambda x: jax.lax.switch(index, functions, x)

    return dispatch([row[0] for row in rows]), dispatch([row[1] for row in rows])


def solve_regimes(
    solvers: dict[str, AbstractSolver],
    problems: dict[str, RegimeProblem],
    later: frozenset[str] = frozenset(),
) -> tuple[dict[str, PeriodSolution], dict[tuple[str, ...], dict[str, Array]]]:
    """The period solutions of DC-EGM regimes (`problems`, by name), and the refined
    grids of each group solved together, as rows (by the group's names: see
    `batch_groups`).

    Regimes solved by equal `DCEGM`s whose discrete axes are neither splayed nor
    sharded are solved together (`DCEGM._solve_batched`); the others on their own.
    Where every regime of such a group is in `later`, their value arrays are left out
    (`values` None): the caller reads them from the refined grids after the period loop,
    for all periods at once (`regime_values`).
    """
    solutions: dict[str, PeriodSolution] = {}
    rows: dict[tuple[str, ...], dict[str, Array]] = {}
    for representative, names in _batches(solvers, problems):
        if representative is None:
            (name,) = names
            solutions[name] = cast(DCEGM, solvers[name]).solve_period(problems[name])
            continue
        solved, rows[tuple(names)] = representative._solve_batched(
            [problems[name] for name in names], with_values=not set(names) <= later
        )
        solutions.update(zip(names, solved, strict=True))
    return solutions, rows


def regime_values(
    solvers: dict[str, AbstractSolver],
    problems: dict[str, RegimeProblem],
    grids: dict[str, EndogenousGrid],
    rows: dict[tuple[str, ...], dict[str, Array]] | None = None,
) -> dict[str, Array]:
    """The value arrays that `solve_regimes` left out, from the period's refined grids
    (the same batches, so the same reads as in the period; `rows`: a group's grids as
    `solve_regimes` returned them, where the caller has them)."""
    values: dict[str, Array] = {}
    for representative, names in _batches(solvers, problems):
        assert representative is not None
        read = representative._values_batched(
            [problems[name] for name in names],
            [grids[name] for name in names],
            (rows or {}).get(tuple(names)),
        )
        values.update(zip(names, read, strict=True))
    return values


def batch_groups(
    model: ModelPlan, solvers: dict[str, AbstractSolver], names
) -> list[tuple[str, ...]]:
    """The groups of DC-EGM regimes among `names` (in their order) that `solve_regimes`
    solves together: what the backward induction carries as one set of rows."""
    problems = {name: model.regimes[name] for name in names if isinstance(solvers[name], DCEGM)}
    return [tuple(group) for rep, group in _grouped(solvers, problems) if rep is not None]


def _batches(
    solvers: dict[str, AbstractSolver], problems: dict[str, RegimeProblem]
) -> list[tuple[DCEGM | None, list[str]]]:
    """The regimes of `problems` grouped by equal `DCEGM`s, the ones that cannot be
    batched (`DCEGM._batchable`) each alone with representative None."""
    return _grouped(solvers, {name: problem.regime for name, problem in problems.items()})


def _grouped(
    solvers: dict[str, AbstractSolver], regimes: dict[str, RegimePlan]
) -> list[tuple[DCEGM | None, list[str]]]:
    groups: list[tuple[DCEGM | None, list[str]]] = []
    for name, regime in regimes.items():
        solver = solvers[name]
        assert isinstance(solver, DCEGM)
        if not solver._batchable(regime):
            groups.append((None, [name]))
            continue
        for representative, names in groups:
            if representative is not None and (
                representative is solver or bool(eqx.tree_equal(representative, solver))
            ):
                names.append(name)
                break
        else:
            groups.append((solver, [name]))
    return groups


def invert_marginal(marginal: Callable[[Array], Array], q: Array, steps: int) -> Array:
    """`c > 0` with `marginal(c) = q`, by Newton's method in logs (`invert_marginals` of
    one marginal utility)."""
    return invert_marginals([(marginal, q)], steps)[0]


def invert_marginals(
    problems: list[tuple[Callable[[Array], Array], Array]], steps: int
) -> list[Array]:
    """For each `(marginal, q)`: `c > 0` with `marginal(c) = q`, by Newton's method in
    logs.

    The iterations run without derivatives, in a `fori_loop` (its step is traced once,
    not once per iteration) that is unrolled when lowered: XLA then fuses the steps into
    the kernels around them, where a loop ran two kernels per step (the step and its
    counter): the steady solve takes 5 % less time. A last Newton step from the
    converged point carries the derivative with respect to `q` and to whatever
    `marginal` closes over (the implicit function theorem). It is also the second step:
    where it moved no point of any problem by more than rounding (CRRA utility: the
    first step is exact), it is the result, and the remaining steps are skipped (one
    branch taken at run time for all the problems, e.g. all the regimes of a period; a
    selection under `vmap`); otherwise they run from it, and the last step is taken
    again from their end. (Three Newton steps per point were two: `model.solve` 0.945
    of before, the same solution to the last bit on the retirement model.)
    """

    def newton(x, marginal, log_q):
        def residual(x):
            return jnp.log(marginal(jnp.exp(x))) - log_q

        value, slope = jax.jvp(residual, (x,), (jnp.ones_like(x),))
        slope = jnp.where(slope == 0, -1.0, slope)
        return x - value / slope

    if not problems:
        return []
    log_qs, steppers, xs = [], [], []
    for marginal, q in problems:
        log_q = jnp.log(q)
        x = jax.lax.stop_gradient(-log_q)
        # The loop sees no differentiable input (what `marginal` closes over is passed
        # in, without derivative), so differentiating the solve does not carry tangents
        # through it.
        converted, closed = jax.closure_convert(marginal, x)
        closed = jax.lax.stop_gradient(closed)
        frozen_log_q = jax.lax.stop_gradient(log_q)

        def step(_, x, converted=converted, closed=closed, frozen_log_q=frozen_log_q):
            return newton(x, lambda c: converted(c, *closed), frozen_log_q)

        log_qs.append(log_q)
        steppers.append(step)
        xs.append(x)

    def rest(xs, start):
        return tuple(
            jax.lax.fori_loop(start, steps, step, x, unroll=True)
            for step, x in zip(steppers, xs, strict=True)
        )

    def final(xs):
        return tuple(
            newton(x, marginal, log_q)
            for x, (marginal, _), log_q in zip(xs, problems, log_qs, strict=True)
        )

    if steps <= 2:
        return [jnp.exp(x) for x in final(rest(xs, 0))]
    first = tuple(step(0, x) for step, x in zip(steppers, xs, strict=True))
    second = final(first)
    # A step smaller than this (relative to 1 + |x|) is rounding: converged.
    moved = jnp.concatenate(
        [
            (jnp.abs(b - a) > 64 * jnp.finfo(b.dtype).eps * (1.0 + jnp.abs(b))).reshape(-1)
            for a, b in zip(first, jax.lax.stop_gradient(second), strict=True)
        ]
    )
    xs = jax.lax.cond(
        one_kernel_reduce(jax.lax.bitwise_or, False, moved, 0),
        lambda: final(rest(jax.lax.stop_gradient(second), 2)),
        lambda: second,
    )
    return [jnp.exp(x) for x in xs]


def _euler_target(beta, marginal_expected, cap) -> Array:
    """`u'(c)` that the Euler equation asks for, `β·E[R·V'_m]`, floored at `cap` (`u'` at
    the consumption cap, without derivative: where the continuation's marginal value is
    0, the choice consumes the cap)."""
    q = beta * marginal_expected
    return jnp.maximum(q, jax.lax.stop_gradient(cap.astype(q.dtype)))


def combine_values_and_slopes(values, slopes, scale) -> tuple[Array, Array]:
    """The value over the discrete choices (last axis) and its marginal value: the best
    choice's, or with taste shocks `λ·logsumexp(v / λ)` and the choice-probability
    weighted slope."""
    if scale is None:
        if values.shape[-1] <= _UNROLL:
            return _unrolled_best(values, slopes)
        best = jnp.argmax(values, axis=-1)
        slope = jnp.take_along_axis(slopes, best[..., None], axis=-1)[..., 0]
        return jnp.max(values, axis=-1), slope
    return smooth_max(values, scale), jnp.sum(choice_weights(values, scale) * slopes, axis=-1)


# Up to this many discrete choices, their max is unrolled into elementwise operations
# (each small reduction and gather would be an XLA kernel of its own).
_UNROLL = 8


def _unrolled_best(values, slopes) -> tuple[Array, Array]:
    """`max(values, -1)` and the slope of the first best choice (`argmax`), as a chain of
    elementwise comparisons over the (few) choices: the same results, NaN included (a
    NaN is the max and its first occurrence is taken, like `argmax`)."""
    best, slope = values[..., 0], slopes[..., 0]
    for i in range(1, values.shape[-1]):
        v = values[..., i]
        better = (v > best) | (jnp.isnan(v) & ~jnp.isnan(best))
        best = jnp.where(better, v, best)
        slope = jnp.where(better, slopes[..., i], slope)
    return best, slope


def _plus_discounted(utility, beta, expected):
    """`utility + beta * expected`, `-inf` where `expected` is, with a finite derivative."""
    finite = jnp.isfinite(expected)
    return jnp.where(finite, utility + beta * jnp.where(finite, expected, 0.0), NEG_INF)


def smooth_max(values, scale):
    """`scale · logsumexp(values / scale)` over the last axis.

    `-inf` entries (infeasible choices) are left out through `logsumexp`'s weights rather
    than divided by `scale`, whose derivative would be infinite there; a row of `-inf`
    stays `-inf` with a zero derivative.
    """
    finite = jnp.isfinite(values)
    any_finite = jnp.any(finite, axis=-1)
    weights = jnp.where(any_finite[..., None], finite, True)
    safe = jnp.where(finite, values, 0.0)
    value = scale * jax.nn.logsumexp(safe / scale, axis=-1, b=weights)
    return jnp.where(any_finite, value, NEG_INF)


def choice_weights(values, scale):
    """`softmax(values / scale)` over the last axis, with `-inf` entries weighted 0 and
    a finite derivative (see `smooth_max`); a row of `-inf` gets weights 0."""
    finite = jnp.isfinite(values)
    safe = jnp.where(finite, values, 0.0)
    top = jax.lax.stop_gradient(
        jnp.max(jnp.where(finite, values, -jnp.finfo(values.dtype).max), axis=-1, keepdims=True)
    )
    exponent = jnp.where(finite, (safe - jnp.where(finite, top, 0.0)) / scale, 0.0)
    mass = jnp.where(finite, jnp.exp(exponent), 0.0)
    total = jnp.sum(mass, axis=-1, keepdims=True)
    return mass / jnp.where(total > 0, total, 1.0)


def _marginal(utility: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """`u'` of a scalar utility, applied elementwise."""
    return jnp.vectorize(jax.grad(utility))


def _front(p: Array, values: Array) -> Array:
    """`p` (over the first axis of `values`) shaped to broadcast against `values`."""
    return p.reshape((p.shape[0],) + (1,) * (values.ndim - 1))


def _lift_with_readers(fn, axes, point, readers, problem: RegimeProblem):
    """`fn(point, readers)` on the product of the discrete state `axes`.

    A sharded state that never transitions is mapped jointly with the matching axis of
    every reader's arrays, so each state point reads only its own slice of next period
    and the sweep needs no communication between devices.
    """
    if not axes:
        return fn(point, readers)
    first, rest = axes[0], axes[1:]
    joint = (
        {t: r for t, r in readers.items() if first.name in r.axes}
        if problem._stays_sharded(first.name)
        else {}
    )
    leading = {t: r.leading(first.name) for t, r in joint.items()}

    def inner(args):
        code, slices = args
        inner_readers = dict(readers)
        for target, data in slices.items():
            inner_readers[target] = joint[target].sliced(first.name, code, data)
        return _lift_with_readers(fn, rest, {**point, first.name: code}, inner_readers, problem)

    return map_axis(inner, (first.points, leading), first.batch_size)


def _lift(fn, axes, point):
    """`fn(point)` on the product of discrete `axes` (vmap, or splay by batch_size)."""
    if not axes:
        return fn(point)
    first, rest = axes[0], axes[1:]
    return map_axis(
        lambda x: _lift(fn, rest, {**point, first.name: x}), first.points, first.batch_size
    )


def map_choices(fn, arrays, names: list[str]):
    """`fn(codes, nodes, count, continuation0, feasible)` for every discrete state and
    action on the leading axes (named `names`) of `arrays` (those four arrays of an
    `EndogenousGrid`, or the grid itself): a vmap along each axis, so each call sees its
    own slices without indexing (gathers) by code."""
    if isinstance(arrays, EndogenousGrid):
        arrays = (arrays.nodes, arrays.count, arrays.continuation0, arrays.feasible)

    def over(depth, codes, nodes, count, continuation0, feasible):
        if depth == len(names):
            return fn(codes, nodes, count, continuation0, feasible)
        size = count.shape[0]
        return jax.vmap(lambda k, *arrays: over(depth + 1, {**codes, names[depth]: k}, *arrays))(
            jnp.arange(size, dtype=jnp.int32), nodes, count, continuation0, feasible
        )

    return over(0, {}, *arrays)


class ContinuationReader(eqx.Module):
    """Reads one next regime at a next-period cash on hand `m'`: its value and marginal
    value for each of its discrete states (axes `axes`, in its state order; `continuous`
    left out).

    The arrays it reads are `data` (leading axes `axes`), so that a sharded state that
    never transitions can be mapped jointly with them (`sliced`): each state point then
    reads only its own slice, on its own device, and `fixed` holds the codes taken.
    """

    continuous: str | None = eqx.field(static=True)
    axes: tuple[str, ...] = eqx.field(static=True)
    data: tuple[Array, ...]
    fixed: dict[str, Array]
    read_fn: Callable = eqx.field(static=True)

    def __call__(self, m_next):
        return self.read_fn(self.data, self.fixed, m_next)

    def leading(self, name: str) -> tuple[Array, ...]:
        """`data` with the axis of state `name` first."""
        axis = self.axes.index(name)
        return tuple(jnp.moveaxis(array, axis, 0) for array in self.data)

    def sliced(self, name: str, code: Array, data: tuple[Array, ...]) -> ContinuationReader:
        """The reader of one code of state `name`, given that slice of `leading(name)`."""
        return ContinuationReader(
            continuous=self.continuous,
            axes=tuple(a for a in self.axes if a != name),
            data=data,
            fixed={**self.fixed, name: code},
            read_fn=self.read_fn,
        )


def endogenous_reader(
    model: ModelPlan,
    target: str,
    solver: DCEGM,
    grid: EndogenousGrid,
    params,
    period,
    age,
) -> ContinuationReader:
    """A reader of a DC-EGM regime's next-period `EndogenousGrid`."""
    target_plan = model.regimes[target]
    process_points = {}
    for name in target_plan.states:
        g = target_plan.grids[name]
        if isinstance(g, AbstractProcessGrid):
            process_points[name] = g.discretize(params.get(f"next_{name}", {}))[0]
    discrete_actions = list(target_plan.discrete_actions)
    scale = params[""]["taste_shock_scale"] if target_plan.taste_shocks else None
    borrowing_limit, status = grid.borrowing_limit, grid.status

    def read_fn(data, fixed, x):
        axes = [s for s in target_plan.states if s != solver.state and s not in fixed]

        def at(codes: dict, nodes, count, continuation0, feasible):
            def utility(c):
                inputs = {
                    n: (process_points[n][k] if n in process_points else k)
                    for n, k in {**fixed, **codes}.items()
                }
                inputs[solver.action] = c
                inputs[solver.state] = c
                inputs["period"] = period
                inputs["age"] = age
                return jnp.asarray(
                    Evaluator(target_plan.helpers, inputs, params)(target_plan.utility)
                )

            _, v, mu = read(
                nodes,
                count,
                continuation0,
                borrowing_limit,
                x,
                jnp.vectorize(utility),
                _marginal(utility),
            )
            return jnp.where(feasible, v, NEG_INF), jnp.where(feasible, mu, 0.0)

        v, mu = map_choices(at, data, [*axes, *discrete_actions])
        shape = data[1].shape
        n_d = len(discrete_actions)
        if n_d:
            lead = shape[: len(shape) - n_d]
            value, slope = combine_values_and_slopes(
                v.reshape((*lead, -1)), mu.reshape((*lead, -1)), scale
            )
        else:
            value, slope = v, mu
        value = jnp.where(status == ZERO, 0.0, value)
        value = jnp.where(status == INACTIVE, NEG_INF, value)
        slope = jnp.where(status == ORDINARY, slope, 0.0)
        return value, slope

    return ContinuationReader(
        continuous=solver.state,
        axes=tuple(s for s in target_plan.states if s != solver.state),
        data=(grid.nodes, grid.count, grid.continuation0, grid.feasible),
        fixed={},
        read_fn=read_fn,
    )


def zero_reader(model: ModelPlan, target: str, continuous: str, dtype) -> ContinuationReader:
    """A reader of the period after the model's last: value and marginal value 0 at
    every cash on hand, for each of the target's discrete states (no array is read)."""
    target_plan = model.regimes[target]
    axes = tuple(s for s in target_plan.states if s != continuous)
    zeros = jnp.zeros(tuple(target_plan.grids[s].n_points for s in axes), dtype)

    def constant(data, fixed, x):
        return data[0], data[0]

    return ContinuationReader(continuous=None, axes=axes, data=(zeros,), fixed={}, read_fn=constant)


def array_reader(
    model: ModelPlan, target: str, values: Array, continuous: str, points: Array | None = None
) -> ContinuationReader:
    """A reader of a value array on a regime's state grid (e.g. a `GridSearch` regime):
    linear interpolation along `continuous` and the interpolant's slope. `points`: the
    grid's points in the period read (for a grid whose bounds vary with age)."""
    target_plan = model.regimes[target]
    if continuous not in target_plan.states:

        def constant(data, fixed, x):
            return data[0], jnp.zeros_like(data[0])

        return ContinuationReader(
            continuous=None, axes=target_plan.states, data=(values,), fixed={}, read_fn=constant
        )
    axis = target_plan.states.index(continuous)
    grid = target_plan.grids[continuous]
    assert isinstance(grid, AbstractContinuousGrid)

    nodes = grid.to_jax() if points is None else points

    def linear(data, fixed, x):
        moved = data[0]
        lo, w = grid.interval(x, nodes)
        low, high = moved[..., lo], moved[..., lo + 1]
        value = settle(weighted(1 - w, low) + weighted(w, high))
        slope = (high - low) / (nodes[lo + 1] - nodes[lo])
        slope = jnp.where(jnp.isfinite(slope), slope, 0.0)
        return value, slope

    return ContinuationReader(
        continuous=continuous,
        axes=tuple(s for s in target_plan.states if s != continuous),
        data=(jnp.moveaxis(values, axis, -1),),
        fixed={},
        read_fn=linear,
    )


def zero_grid(model: ModelPlan, regime: str, solver: DCEGM, dtype) -> EndogenousGrid:
    """The `EndogenousGrid` of the period after the last (value 0 everywhere)."""
    plan = model.regimes[regime]
    shape = tuple(
        plan.grids[s].n_points for s in (*plan.states, *plan.discrete_actions) if s != solver.state
    )
    k = solver.upper_envelope.n_rows(solver.savings.n_points)
    line = jnp.linspace(1.0, 2.0, k, dtype=dtype)
    rows = jnp.stack([line, line, jnp.zeros_like(line), jnp.zeros_like(line)], axis=1)
    return EndogenousGrid(
        nodes=jnp.broadcast_to(rows, (*shape, k, 4)),
        count=jnp.full(shape, k, jnp.int32),
        continuation0=jnp.zeros(shape, dtype),
        feasible=jnp.ones(shape, bool),
        borrowing_limit=jnp.asarray(solver.savings.to_jax()[0], dtype),
        status=jnp.asarray(ZERO, jnp.int32),
    )


def inactive_grid(grid: EndogenousGrid) -> EndogenousGrid:
    return eqx.tree_at(lambda g: g.status, grid, jnp.asarray(INACTIVE, jnp.int32))
