"""NEGM: the nested endogenous grid method (Druedahl 2021) for a regime with liquid
wealth and a durable (or illiquid) stock, which the agent either keeps or adjusts.

Each period, for each discrete state:

1. The post-decision values `W(a, n)`, `W_a` and `W_n` at the savings grid × the
   durable grid: next period's value and marginal values read at the next liquid wealth
   and durable stock of each savings point (the envelope across next period's
   keep/adjust choice taken at each point read) and averaged over the discrete states.
2. The keeper, on each durable node: the Euler equation `u_c(c, n) = β·W_a(a, n)`
   inverted at every savings point (endogenous liquid wealth `a + c`), and read onto the
   liquid grid by an upper envelope over all segments of the endogenous points and the
   credit-constrained choice (the keep/adjust choice next period makes `W` non-concave).
   The value at each node is `u(c, n) + β·W(m − c, n)` with `W` read by cubic Hermite.
3. The adjuster, on the grid of total resources `x`: the best new stock `d` of
   `v_keep(x − d, d)` (the keeper's value, read by cubic Hermite through its marginal
   values), by a search over `adjuster_points` candidates and a golden-section
   refinement around the best. The refinement runs without derivatives; the value's
   derivative is that of `v_keep` at the optimum (the envelope theorem). Its
   consumption is then polished on its own Euler equation `u_c(c, d) = β·E[R·V'_m]`,
   next period read at the point (Newton steps in `log c` from the keeper's read), and
   its value is `u(c, d) + β·E[V']` at that choice (`_steps.polished`).

The value on the state grid is the better of keeping and adjusting at each node; the
period's `NEGMPolicy` keeps both, so that earlier periods, the simulation and the
queries take the envelope exactly at the point they read.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from ..._errors import LcmError, ModelInitializationError
from ..._grids import AbstractContinuousGrid
from ..._model._plan import ModelPlan, RegimePlan
from .._axes import map_axis
from .._euler_equation import feasible_at
from .._kernel import RegimeProblem
from .._reading import REFERENCE_ACTION, invert_marginal
from .._sharding import is_identity_transition
from .._solver import AbstractSolver, FollowingPeriod, Period, PeriodSolution, SegmentOutputs
from . import _steps
from ._checks import check_negm
from ._policy import (
    NEGMPolicy,
    adjust_choice_at,
    adjust_value_at,
    keep_consumption_at,
    keep_value_at,
    prepare,
    read_prepared,
)

# The codes of the `adjust` action.
KEEP, ADJUST = 0, 1


class NEGM(AbstractSolver):
    """The nested endogenous grid method for liquid wealth and a durable stock.

    Args:
        liquid: the regime's continuous state of liquid wealth (cash on hand).
        durable: the continuous state of the durable (or illiquid) stock.
        consumption: the continuous action of consumption.
        durable_choice: the continuous action of the new durable stock of an adjuster.
        adjust: the discrete action with two categories, code 0 to keep the durable and
            code 1 to adjust it (e.g. `IntEnum("Adjust", "keep adjust", start=0)`).
        savings: the exogenous grid of post-decision liquid wealth; its first point is
            the borrowing limit.
        resources: the grid of total resources of an adjuster (what the regime function
            `resources_function` returns), on which the adjuster's problem is solved.
        resources_function: the name of the regime function of liquid wealth, the
            durable stock (and discrete variables, period, age, parameters) that gives an
            adjuster's total resources, e.g. `wealth + (1 - adjustment_cost) * durable`.
        adjuster_points: candidates of the new durable stock searched for each point of
            `resources` before the golden-section refinement.
        golden_steps: golden-section steps that refine the best candidate (each keeps
            0.618 of the bracket; 24 steps reach 1e-5 of it, where values still differ
            by far more than rounding).
        bisection_steps: bisection steps on the sign of the objective's derivative
            that follow (each halves the bracket; 30 steps reach 1e-14 of it): the new
            stock to rounding, where comparing values would only compare rounding
            errors (a sharded and an unsharded solve then agree to 1e-12, not 1e-9).
        newton_steps: Newton iterations that invert marginal utility.

    The class of models: the regime has exactly the continuous states `liquid` and
    `durable`, the continuous actions `consumption` and `durable_choice` and the one
    discrete action `adjust`, besides discrete and process states; no taste shocks and
    no aggregator; it moves only to itself. The keeper (code 0) consumes out of `liquid`
    and holds `durable` this period: post-decision wealth `liquid − consumption`; the
    adjuster holds `durable_choice` and saves `resources − durable_choice −
    consumption`. So utility must be `u(consumption, h)` with `h = durable` for a keeper
    and `h = durable_choice` for an adjuster (it must not depend on `liquid`), the next
    liquid wealth a function of post-decision wealth and discrete variables, the next
    durable stock a function of `h` (e.g. `(1 − δ)·h`), and a constraint must forbid
    saving below `savings[0]`. Marginal utility of consumption must grow without bound
    as consumption falls to 0 (CRRA over a Cobb–Douglas aggregate).

    Example:
        >>> solver = NEGM(liquid="wealth", durable="durable", consumption="consumption",
        ...               durable_choice="new_durable", adjust="adjust",
        ...               savings=savings, resources=lcm.LinSpacedGrid(0, 20, 200))
    """

    liquid: str = eqx.field(static=True)
    durable: str = eqx.field(static=True)
    consumption: str = eqx.field(static=True)
    durable_choice: str = eqx.field(static=True)
    adjust: str = eqx.field(static=True)
    savings: AbstractContinuousGrid
    resources: AbstractContinuousGrid
    resources_function: str = eqx.field(static=True, default="resources")
    adjuster_points: int = eqx.field(static=True, default=64)
    golden_steps: int = eqx.field(static=True, default=24)
    bisection_steps: int = eqx.field(static=True, default=30)
    newton_steps: int = eqx.field(static=True, default=6)

    reads_next_values: ClassVar[bool] = False
    solves_last_period_apart: ClassVar[bool] = True

    def __check_init__(self):
        for name in ("liquid", "durable", "consumption", "durable_choice", "adjust"):
            if not isinstance(getattr(self, name), str):
                raise ModelInitializationError(
                    f"NEGM: {name} must be the name of a variable of the regime, got "
                    f"{getattr(self, name)!r}."
                )
        for name in ("savings", "resources"):
            grid = getattr(self, name)
            if not isinstance(grid, AbstractContinuousGrid):
                raise ModelInitializationError(
                    f"NEGM: {name} must be a continuous grid (e.g. LinSpacedGrid), got {grid!r}."
                )
            if grid.varies_with_age:
                raise ModelInitializationError(
                    f"NEGM: the {name} grid must be the same in every period; its bounds vary "
                    "with age."
                )
        for name, least in (
            ("adjuster_points", 3),
            ("golden_steps", 0),
            ("bisection_steps", 0),
            ("newton_steps", 1),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ModelInitializationError(
                    f"NEGM: {name} must be an int >= {least}, got {value!r}."
                )

    # ------------------------------------------------------------------ build
    def applies_to(self, regime: RegimePlan) -> bool:
        return not regime.is_terminal and self.durable in regime.states

    def check(self, model: ModelPlan, regime: RegimePlan) -> None:
        check_negm(self, model, regime)

    # ------------------------------------------------------------------ pieces
    def _discrete_states(self, regime: RegimePlan) -> tuple[str, ...]:
        return tuple(s for s in regime.states if s not in (self.liquid, self.durable))

    def _discrete_shape(self, regime: RegimePlan) -> tuple[int, ...]:
        return tuple(regime.grids[s].n_points for s in self._discrete_states(regime))

    def _flat_codes(self, regime: RegimePlan, names: tuple[str, ...]) -> dict[str, Array]:
        """The codes of the discrete states `names` at each point of their flat product."""
        shape = tuple(regime.grids[s].n_points for s in names)
        flat = np.indices(shape).reshape(len(shape), math.prod(shape)).astype(np.int32)
        return {s: jnp.asarray(flat[i]) for i, s in enumerate(names)}

    def _flattened(self, regime: RegimePlan, policy: NEGMPolicy, names: tuple[str, ...]):
        """`policy` (leading axes: the discrete states) with the axes of the discrete
        states `names` (a trailing run of them, in order) flattened into one."""
        n = len(self._discrete_states(regime)) - len(names)
        size = math.prod(regime.grids[s].n_points for s in names)
        return jax.tree.map(
            lambda a: a.reshape((*a.shape[:n], size, *a.shape[n + len(names) :])), policy
        )

    def _point(self, z: dict, c, h, m=None, adjust: int = KEEP) -> dict:
        return {
            **z,
            self.consumption: c,
            self.durable: h,
            self.durable_choice: h,
            self.adjust: jnp.asarray(adjust, jnp.int32),
            self.liquid: c if m is None else m,
        }

    def _utility(self, problem: RegimeProblem, z: dict):
        """`u(c, h)`, `u_c` and `u_h` at discrete states `z` (scalar functions)."""

        def utility(c, h):
            return jnp.asarray(problem.evaluator(self._point(z, c, h))(problem.regime.utility))

        return utility, jax.grad(utility, 0), jax.grad(utility, 1)

    def _resources(self, problem: RegimeProblem, z: dict):
        """`(m, n) -> (x, x_m, x_n)`: total resources of an adjuster and their slopes."""

        def total(m, n):
            zero = jnp.zeros_like(m)
            point = self._point(z, zero, n, m)
            return jnp.asarray(problem.evaluator(point).helper(self.resources_function))

        def at(m, n):
            x, x_m = jax.jvp(lambda m: total(m, n), (m,), (jnp.ones_like(m),))
            _, x_n = jax.jvp(lambda n: total(m, n), (n,), (jnp.ones_like(n),))
            return x, x_m, x_n

        return at

    def _grids(self, problem: RegimeProblem) -> tuple[Array, Array, Array]:
        return (
            problem.points(self.liquid),
            problem.points(self.durable),
            self.resources.to_jax(),
        )

    def _policy_at(self, problem: RegimeProblem, state: dict) -> NEGMPolicy:
        """The period's policy at the discrete states of `state` (codes local to the
        arrays the problem holds: one device's block in a sharded simulation)."""
        names = self._discrete_states(problem.regime)
        codes = tuple(problem.local_code(s, state[s]) for s in names)
        return jax.tree.map(lambda a: a[codes], problem.policy)

    def _deterministic(self, problem: RegimeProblem, names: tuple[str, ...]) -> tuple[str, ...]:
        """The states of `names` whose next code is certain (a law of motion that is not
        Markov, or none), unsharded: next period is read at their one next code only."""
        regime = problem.regime
        return tuple(
            s
            for s in names
            if (
                regime.state_transitions.get(s) is None or not regime.state_transitions[s].is_markov
            )
            and (problem.sharding is None or not problem.sharding.is_sharded(s))
        )

    def _next_codes(self, problem: RegimeProblem, z: dict, names: tuple[str, ...]) -> dict:
        """Next period's codes of the deterministic states `names` at discrete states `z`."""
        regime = problem.regime
        ref = jnp.asarray(REFERENCE_ACTION)
        codes, _ = problem.next_states(problem.evaluator(self._point(z, ref, ref, ref)))
        out = {}
        for s in names:
            if regime.state_transitions.get(s) is None:
                out[s] = problem.local_code(s, z[s])
            else:
                out[s] = codes[s]
        return out

    def _next_weights(
        self, problem: RegimeProblem, z: dict, names: tuple[str, ...]
    ) -> tuple[Array, Array]:
        """The probabilities of next period's discrete states `names` (flat over their
        product; the others keep their codes) and the discount factor, at discrete
        states `z`."""
        regime = problem.regime
        ref = jnp.asarray(REFERENCE_ACTION)
        evaluate = problem.evaluator(self._point(z, ref, ref, ref))
        codes, probabilities = problem.next_states(evaluate)
        joint = jnp.ones((1,))
        for s in names:
            n = regime.grids[s].n_points
            transition = regime.state_transitions.get(s)
            if transition is None:
                p = jax.nn.one_hot(problem.local_code(s, z[s]), n)
            elif transition.is_markov:
                if s in probabilities:
                    p = probabilities[s]
                elif transition.function is None:
                    p = problem.process_matrices[s][problem.local_code(s, z[s])]
                else:
                    p = jnp.asarray(evaluate(transition.function))
            else:
                p = jax.nn.one_hot(codes[s], n)
            joint = (joint[:, None] * p[None, :]).reshape(-1)
        return joint, problem.discount_factor(evaluate)

    def _laws(self, problem: RegimeProblem, z: dict):
        """`a, h -> (m', ∂m'/∂a)` and `h -> (n', ∂n'/∂h)` for a keeper (an adjuster
        with new stock `d` is a keeper of `d`)."""
        regime = problem.regime
        liquid_law = regime.state_transitions[self.liquid].function
        durable_law = regime.state_transitions[self.durable].function
        assert liquid_law is not None and durable_law is not None
        ref = jnp.asarray(REFERENCE_ACTION)

        def next_liquid(a, h):
            def f(a):
                point = self._point(z, ref, h, a + ref)
                return jnp.asarray(problem.evaluator(point)(liquid_law))

            return jax.jvp(f, (a,), (jnp.ones_like(a),))

        def next_durable(h):
            def f(h):
                return jnp.asarray(problem.evaluator(self._point(z, ref, h, ref))(durable_law))

            return jax.jvp(f, (h,), (jnp.ones_like(h),))

        return next_liquid, next_durable

    def _next_reader(
        self,
        next_problem: RegimeProblem,
        following: NEGMPolicy,
        fixed: dict,
        names: tuple[str, ...],
        certain: tuple[str, ...] = (),
    ):
        """`(m, n) -> (v, v_m, v_n)`: next period's value and marginal values at `(m, n)`
        at each point of the flat product of the discrete states `names` (with the others
        at their codes `fixed`), from its policy `following` (leading axis: that flat
        product)."""
        grids = self._grids(next_problem)
        limit = self._limit()
        codes = self._flat_codes(next_problem.regime, names)

        def tables(zc, policy):
            utility, marginal, _ = self._utility(next_problem, {**fixed, **zc})
            return prepare(policy, grids, limit, utility, marginal)

        # Once per period, not at every point read (`PreparedRead`).
        prepared = jax.vmap(tables)(codes, following)
        size = math.prod(next_problem.regime.grids[s].n_points for s in names[len(certain) :])

        def reader_at(next_codes: dict):
            """The read at the next codes of the states `certain` (the first of `names`),
            over the flat product of the others."""
            flat = jnp.asarray(0, jnp.int32)
            for s in certain:
                flat = flat * next_problem.regime.grids[s].n_points + next_codes[s]
            block = jax.tree.map(
                lambda a: jax.lax.dynamic_slice_in_dim(a, flat * size, size, 0),
                (codes, following, prepared),
            )

            def next_read(m, n):
                def at(zc, policy, prepared):
                    zc = {**fixed, **zc}
                    utility, marginal, _ = self._utility(next_problem, zc)
                    resources = self._resources(next_problem, zc)
                    return read_prepared(
                        policy, prepared, grids, limit, m, n, resources, utility, marginal
                    )

                return jax.vmap(at)(*block)

            return next_read

        return reader_at

    # ------------------------------------------------------------------ solve
    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        raise NotImplementedError("NEGM solves through `step`, which reads next period.")

    def solve(self, problem: RegimeProblem, following: NEGMPolicy | None, next_problem):
        """One period of the regime: its value array on the state grid and its policy
        (leading axes: the discrete states). `following` is next period's policy (None
        after the model's last period).

        A discrete state that never transitions (a permanent type: the identity law of
        motion) is mapped jointly with its axis of `following`: each type reads only its
        own slice of next period, so that a sharded type needs no communication between
        devices (and an unsharded one reads a type's share of next period, not all of
        it). The other discrete states are mapped one after the other, each reading next
        period at every one of them."""
        regime = problem.regime
        states = self._discrete_states(regime)
        joint = tuple(s for s in states if is_identity_transition(regime, s))
        rest = tuple(s for s in states if s not in joint)
        # The deterministic states first: next period is read at their next code only.
        certain = self._deterministic(problem, rest)
        rest = (*certain, *(s for s in rest if s not in certain))
        order = [*joint, *rest]
        if following is not None:
            moved: NEGMPolicy = jax.tree.map(
                lambda a: jnp.moveaxis(a, [states.index(s) for s in order], range(len(order))),
                following,
            )
            following = self._flattened(regime, moved, rest)

        def over_joint(axes, fixed, following):
            if not axes:
                return self._solve_rest(problem, following, next_problem, fixed, rest)
            first, others = axes[0], axes[1:]
            codes = jnp.arange(regime.grids[first].n_points, dtype=jnp.int32)
            batch_size = regime.grids[first].batch_size
            if following is None:
                return map_axis(
                    lambda k: over_joint(others, {**fixed, first: k}, None), codes, batch_size
                )
            return map_axis(
                lambda args: over_joint(others, {**fixed, first: args[0]}, args[1]),
                (codes, following),
                batch_size,
            )

        values, policy = over_joint(joint, {}, following)
        shape = tuple(regime.grids[s].n_points for s in order)

        def restore(a, tail):
            a = a.reshape((*shape, *a.shape[len(joint) + 1 :]))
            a = jnp.moveaxis(a, range(len(order)), [tail.index(s) for s in order])
            if problem.sharding is not None:
                a = problem.sharding.constrain(a, (*tail, *(None,) * (a.ndim - len(tail))))
            return a

        policy = jax.tree.map(lambda a: restore(a, states), policy)
        # (discrete states, m, n) -> the regime's state order.
        values = restore(values, states)
        values = jnp.moveaxis(
            values,
            range(values.ndim),
            [regime.states.index(s) for s in (*states, self.liquid, self.durable)],
        )
        return values, policy

    def _solve_rest(self, problem, following, next_problem, fixed: dict, rest: tuple[str, ...]):
        """The period at the discrete states `fixed` and each point of the flat product
        of the states `rest`: values `(R, m, n)` and the policy (leading axis `R`)."""
        regime = problem.regime
        liquid, durable, total = self._grids(problem)
        savings = self.savings.to_jax()
        liquid_batch = regime.grids[self.liquid].batch_size
        if following is not None:
            # Next period read at the one next code of each deterministic state (the first
            # of `rest`), over the others' product.
            certain = self._deterministic(problem, rest)
            stochastic = rest[len(certain) :]
            reader_at = self._next_reader(next_problem, following, fixed, rest, certain)

        def at_discrete(codes):
            z = {**fixed, **codes}
            utility, u_c, u_h = self._utility(problem, z)
            vu = jnp.vectorize(utility)
            vu_c = jnp.vectorize(u_c)
            vu_h = jnp.vectorize(u_h)
            polish = None
            if following is None:
                c = jnp.maximum(liquid[:, None] - savings[0], 0.0) * jnp.ones_like(durable)
                h = jnp.broadcast_to(durable, c.shape)
                value = vu(c, h)
                keep = (value, c, vu_c(c, h), vu_h(c, h))
            else:
                weights, beta = self._next_weights(problem, z, stochastic)
                next_read = reader_at(self._next_codes(problem, z, certain))
                next_liquid, next_durable = self._laws(problem, z)

                def post_decision(n):
                    n_next, n_slope = next_durable(n)

                    def at_savings(a):
                        m_next, gross = next_liquid(a, n)
                        v, v_m, v_n = next_read(m_next, n_next)
                        return (
                            jnp.sum(weights * v),
                            gross * jnp.sum(weights * v_m),
                            n_slope * jnp.sum(weights * v_n),
                        )

                    return map_axis(at_savings, savings, self.savings.batch_size)

                def keeper(n):
                    w, w_a, w_n = post_decision(n)
                    return _steps.keeper(
                        savings,
                        liquid,
                        w,
                        w_a,
                        w_n,
                        beta,
                        n,
                        vu,
                        vu_c,
                        vu_h,
                        liquid_batch,
                        newton_steps=self.newton_steps,
                    )

                # (durable, m) -> (m, durable)
                keep = map_axis(keeper, durable, regime.grids[self.durable].batch_size)
                keep = tuple(jnp.moveaxis(a, 0, 1) for a in keep)

                def continuation(c, d, x):
                    """Next period's expected value and `β·E[R·V'_m]` of an adjuster
                    who buys `d` and consumes `c` out of `x`, read at the point."""
                    m_next, gross = next_liquid(x - d - c, d)
                    n_next, _ = next_durable(d)
                    v, v_m, _ = next_read(m_next, n_next)
                    return beta * jnp.sum(weights * v), beta * gross * jnp.sum(weights * v_m)

                polish = functools.partial(
                    _steps.polished,
                    utility=utility,
                    u_c=u_c,
                    continuation=continuation,
                    newton_steps=self.newton_steps,
                )
            kv, kc, km, kn = keep
            adjust = map_axis(
                lambda x: _steps.adjuster(
                    liquid,
                    durable,
                    keep,
                    x,
                    utility,
                    u_c,
                    u_h,
                    polish,
                    limit_of=self._limit,
                    adjuster_points=self.adjuster_points,
                    golden_steps=self.golden_steps,
                    bisection_steps=self.bisection_steps,
                ),
                total,
                self.resources.batch_size,
            )
            av, ac, ad, am = adjust
            adjust_policy = NEGMPolicy(kv, kc, km, kn, av, ac, ad, am)
            x, _, _ = jnp.vectorize(self._resources(problem, z))(liquid[:, None], durable[None, :])
            adjusted = jax.vmap(lambda x: adjust_value_at(adjust_policy, total, x, u_c))
            values = jnp.maximum(kv, adjusted(x.reshape(-1)).reshape(x.shape))
            return values, NEGMPolicy(kv, kc, km, kn, av, ac, ad, am)

        codes = self._flat_codes(regime, rest)
        size = math.prod(regime.grids[s].n_points for s in rest)
        return jax.lax.map(
            lambda i: at_discrete({s: c[i] for s, c in codes.items()}), jnp.arange(size)
        )

    # ------------------------------------------------------------------ the period loop
    def init(self, plan: ModelPlan, names: tuple[str, ...], dtype) -> Any:
        return {name: None for name in names}

    def step(self, problems, state, period: Period):
        solutions, new_state, emitted = {}, dict(state), {}
        for name, problem in problems.items():
            following = None if period.last else state[name]
            next_problem = problem.replace(period=problem.period + 1, age=period.next_age)
            values, policy = self.solve(problem, following, next_problem)
            n_checks = len(problem.checks) + len(self.extra_checks(problem.regime))
            # The problem's checks are not computed inside the period (zeros); sharded
            # axes keep their length (the backward induction reduces them after the loop).
            shape = tuple(
                n if problem.sharding is not None and problem.sharding.is_sharded(s) else 1
                for s, n in zip(problem.regime.states, values.shape, strict=True)
            )
            violations = jnp.zeros((*shape, n_checks), values.dtype)
            if problem.validate and not period.last:
                beyond = self._beyond_liquid(problem, policy, shape).astype(values.dtype)
                violations = violations.at[..., n_checks - 1].set(beyond)
            solutions[name] = PeriodSolution(values, violations, policy)
            new_state[name] = policy
            emitted[name] = policy
        return solutions, new_state, emitted

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]:
        # The adjuster's choice read off the keeper within the liquid grid
        # (`<resources_function>:beyond:<liquid>`, `_beyond_liquid`).
        return (f"{self.resources_function}:beyond:{self.liquid}:{self.durable_choice}",)

    def _beyond_liquid(self, problem: RegimeProblem, policy: NEGMPolicy, shape) -> Array:
        """How far beyond the top of the liquid grid the adjuster's chosen point reads the
        keeper: `max(x − d) − liquid[-1]` over the resources grid (0 where within), at
        each discrete state, reduced over the unsharded ones (`shape`). The keeper's
        value there is extrapolated linearly from the top interval, and the adjuster's
        choice of stock can be wrong by far more than the grid's error (issue 61: a
        stock of 1.34 where the truth is 2.84), so it is a check failure, not a
        silent extrapolation. Not in the model's last period, whose adjuster evaluates
        utility itself rather than reading the keeper."""
        regime = problem.regime
        top = problem.points(self.liquid)[-1]
        x = self.resources.to_jax()
        # Beyond by more than rounding of the search (the bisection reaches 1e-14 of it).
        tolerance = 1e-9 * (1.0 + jnp.abs(top))
        excess = jnp.max(x - policy.adjust_durable - top, axis=-1)
        excess = jnp.where(excess > tolerance, excess, 0.0)
        states = self._discrete_states(regime)
        for axis in sorted(regime.states.index(s) for s in (self.liquid, self.durable)):
            excess = jnp.expand_dims(excess, axis)
        unsharded = tuple(
            i
            for i, (s, n) in enumerate(zip(regime.states, shape, strict=True))
            if s in states and n == 1
        )
        return jnp.max(excess, axis=unsharded, keepdims=True) if unsharded else excess

    def postprocess(self, emitted, segment: SegmentOutputs):
        return {}, dict(emitted)

    # ------------------------------------------------------------------ queries
    def _choices(self, problem: RegimeProblem, state: dict):
        """Value, consumption and new durable stock of keeping and of adjusting at
        `state` (axis: the `adjust` codes)."""
        policy = self._policy_at(problem, state)
        liquid, durable, total = self._grids(problem)
        m, n = state[self.liquid], state[self.durable]
        z = {s: state[s] for s in self._discrete_states(problem.regime)}
        x, _, _ = self._resources(problem, z)(m, n)
        _, marginal, _ = self._utility(problem, z)
        limit = self._limit()
        keep = keep_value_at(policy, liquid, durable, limit, m, n, marginal)
        keep_c = keep_consumption_at(policy, liquid, durable, limit, m, n)
        adjust = adjust_value_at(policy, total, x, marginal)
        adjust_c, adjust_d = adjust_choice_at(policy, total, x)
        return (
            jnp.stack([keep, adjust]),
            jnp.stack([keep_c, adjust_c]),
            jnp.stack([jnp.asarray(n, adjust_d.dtype), adjust_d]),
        )

    def choose(self, problem, state, key: PRNGKeyArray | None):
        values, consumption, durable = self._choices(problem, state)
        best = jnp.argmax(values)
        chosen = {
            self.adjust: best.astype(jnp.int32),
            self.consumption: consumption[best],
            self.durable_choice: durable[best],
        }
        return chosen, values[best]

    def discrete_values(self, problem, state):
        return self._choices(problem, state)[0]

    def continuous_policy(self, problem, state):
        _, consumption, durable = self._choices(problem, state)
        return {self.consumption: consumption, self.durable_choice: durable}

    def best_continuous_actions(self, problem, state, discrete_action):
        policy = self.continuous_policy(problem, state)
        code = discrete_action[self.adjust]
        return {name: x[code] for name, x in policy.items()}

    def choices_at(self, problem, state):
        values, consumption, durable = self._choices(problem, state)
        return values, {self.consumption: consumption, self.durable_choice: durable}

    def euler_variables(self) -> tuple[str, str]:
        return self.liquid, self.consumption

    def euler_errors(self, problem, following: FollowingPeriod, state, action, points):
        """The Euler equation of the liquid margin, `u_c(c, h) = β·E[R·V'_m(m', n')]`,
        of keeping (`h` the durable held, saving `m − c`) and of adjusting (`h` the new
        stock `d`, saving `x − d − c`) at `points` of liquid wealth and every durable
        node: `c`, `d` from the period's policy, `V'_m` the better choice's marginal
        value next period at the point read (`read`). Axes: the regime's states other
        than `liquid`, then the `adjust` codes, then `points`. A relative error below
        machine epsilon counts as epsilon."""
        if (state, action) != (self.liquid, self.consumption):
            raise LcmError(
                f"euler_errors: regime {problem.regime.name!r} is solved by NEGM, whose "
                f"Euler equation is that of liquid wealth {self.liquid!r} and consumption "
                f"{self.consumption!r}; got state={state!r}, action={action!r}."
            )
        liquid, durable, total = self._grids(problem)
        next_problem = following.problem(problem.regime.name)
        states = self._discrete_states(problem.regime)
        following_flat = self._flattened(problem.regime, next_problem.policy, states)
        next_read = self._next_reader(next_problem, following_flat, {}, states)({})
        savings_limit = self._limit()
        limit = savings_limit + self.action_step(problem, action)
        others = [a for a in problem.state_axes if a.name != self.liquid]

        def at(state: dict, m):
            z = {s: state[s] for s in self._discrete_states(problem.regime)}
            n = state[self.durable]
            policy = self._policy_at(problem, z)
            _, u_c, _ = self._utility(problem, z)
            weights, beta = self._next_weights(problem, z, states)
            next_liquid, next_durable = self._laws(problem, z)
            x, _, _ = self._resources(problem, z)(m, n)
            keep_c = keep_consumption_at(policy, liquid, durable, savings_limit, m, n)
            adjust_c, adjust_d = adjust_choice_at(policy, total, x)

            def error(code, c, h, saved):
                m_next, gross = next_liquid(saved, h)
                n_next, _ = next_durable(h)
                _, v_m, _ = next_read(m_next, n_next)
                q = beta * gross * jnp.sum(weights * v_m)
                implied = invert_marginal(
                    lambda c: u_c(c, h), jnp.maximum(q, jnp.finfo(q.dtype).tiny), self.newton_steps
                )
                # An equation met to rounding counts as met to machine precision
                # (not left out as -inf).
                relative = jnp.abs(1.0 - implied / c)
                error = jnp.log10(jnp.maximum(relative, jnp.finfo(relative.dtype).eps))
                point = {**self._point(z, c, n, m, code), self.durable_choice: h}
                feasible = feasible_at(problem, point)
                ok = feasible & (saved > limit) & (q > 0) & jnp.isfinite(error)
                return jnp.where(ok, error, jnp.nan)

            return jnp.stack(
                [
                    error(KEEP, keep_c, jnp.asarray(n, keep_c.dtype), m - keep_c),
                    error(ADJUST, adjust_c, adjust_d, x - adjust_d - adjust_c),
                ]
            )

        def over(axes, state):
            if axes:
                first, rest = axes[0], axes[1:]
                return jax.vmap(lambda x: over(rest, {**state, first.name: x}))(first.points)
            errors = jax.vmap(lambda m: at(state, m))(points)
            return jnp.moveaxis(errors, 0, -1)

        return over(others, {})

    def action_step(self, problem, action) -> Array:
        return jnp.asarray(1e-9)

    def borrowing_limit(self, problem, discrete) -> Array:
        return self._limit()

    def _limit(self) -> Array:
        """The borrowing limit: the lowest saving, the first point of `savings`."""
        return self.savings.to_jax()[0]

    def work(self, problem: RegimeProblem) -> tuple[tuple[str, int], ...]:
        regime = problem.regime
        z = math.prod(self._discrete_shape(regime))
        n_m = regime.grids[self.liquid].n_points
        n_n = regime.grids[self.durable].n_points
        k = self.savings.n_points
        return (
            ("keeper: savings x durable nodes", z * n_n * k),
            ("keeper envelope: liquid x segments", z * n_n * n_m * k),
            (
                "adjuster: resources x candidates",
                z * self.resources.n_points * self.adjuster_points,
            ),
        )
