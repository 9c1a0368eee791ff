"""`GridSearch`: every action of the action grids evaluated, the best one taken."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _factor_plan, _factored, _factored_policy, _refine, _refine_spec
from ._axes import auto_splayed, lift, map_axis, reduce_axis
from ._check_arrays import max_each
from ._on_grid import q_on_action_grid
from ._reduce import max_along, smooth_max
from ._refine_spec import Refine
from ._solver import AbstractPointwiseSolver, AbstractSolver, PeriodSolution, taste_shock_scale

if TYPE_CHECKING:
    from .._model._plan import ModelPlan, RegimePlan

# A regime that the structure-aware search leaves to the plain product above this many
# state-action pairs per period is warned about (`GridSearch.notices`).
PLAIN_PRODUCT_WARNING_PAIRS = 10**8


class GridSearch(AbstractPointwiseSolver):
    """Evaluates every action on the action grids and takes the best.

    With taste shocks, the continuous actions are maximised for each combination of
    discrete actions (`v_d`), and the discrete ones are combined as
    `scale * logsumexp(v_d / scale)`. Action axes with `batch_size > 0` are scanned in
    chunks of that size.

    Args:
        factored: evaluate each piece of the objective on the axes it depends on and
            maximise each action over the pieces that contain it (see
            docs/architecture.md, "Structure-aware grid search"), where that needs at
            most half the work of the plain state x action product; the same values and
            derivatives up to the order of floating-point sums. `False` evaluates the
            plain product (for tests and benchmarks).
        refine: refine continuous actions off their grids (see docs/solvers.md): after
            the grid search, each is polished inside its bracket (the grid neighbours of
            the best point) by a safeguarded Newton iteration, the others at their best;
            the value is `q` there, and the refined actions have the implicit function
            theorem's derivatives. `True` (every continuous action), an action name or a
            tuple of names, or an `lcm.Refine(...)` with the settings; default off: the
            best grid point, as without the argument.

    Example:
        >>> solver = lcm.GridSearch(refine=True)
    """

    factored: bool = eqx.field(default=True, static=True)
    refine: Refine | None = eqx.field(default=None, static=True, converter=_refine_spec.as_refine)

    def check(self, model: ModelPlan, regime: RegimePlan) -> None:
        if self.refine is not None:
            _refine_spec.check(self.refine, model, regime)

    def _refines(self, problem) -> bool:
        """Whether `problem` has continuous actions to refine."""
        if self.refine is None:
            return False
        return bool(self.refine.names(problem.regime.continuous_actions))

    def _refined(self, problem, state) -> _refine.Refined:
        """The refined choice for every combination of the discrete actions."""
        refine = self.refine
        assert refine is not None
        return _refine.over_discrete(
            problem, lambda fixed: _refine.refine_choice(problem, state, fixed, refine)
        )

    def _policy(self, problem, state) -> tuple[_refine.Refined, dict]:
        """`_refined`, and the continuous actions with their derivatives."""
        refine = self.refine
        assert refine is not None

        def at(fixed):
            refined = _refine.refine_choice(problem, state, fixed, refine)
            return refined, _refine.with_derivatives(problem, state, fixed, refined, refine)

        return _refine.over_discrete(problem, at)

    def factoring(self, problem, state=None):
        """How the period of `problem` is evaluated piece by piece (at one `state`: every
        state fixed, as the simulation asks), or None where the plain product is
        evaluated (see `factored`)."""
        planned = self._plan(problem, state, limit_pieces=state is None)
        if planned is None or not _factor_plan.worth_it(planned[0]):
            return None
        return None if planned[0].refine_obstacle else planned

    def _plan(self, problem, state=None, *, limit_pieces: bool = True):
        """`_factor_plan.plan_factoring` of `problem`, or None where this solver never
        factors it (`factored=False`, no actions, two values per point; with refinement:
        at one state, or several refined actions, which are refined jointly)."""
        aggregator = problem.aggregator
        if (
            not self.factored
            or not problem.action_axes
            or (aggregator is not None and aggregator.n_values > 1)
        ):
            return None
        refined, evaluations = None, 0
        if self._refines(problem):
            assert self.refine is not None
            names = self.refine.names(problem.regime.continuous_actions)
            if state is not None or len(names) != 1:
                return None
            refined, evaluations = names[0], _refine.evaluations(self.refine)
        # At one state the taste shocks are drawn and every action maximised.
        smooth = state is None and taste_shock_scale(problem) is not None
        return _factor_plan.plan_factoring(
            problem,
            smooth,
            fixed=state,
            limit_pieces=limit_pieces,
            refined=refined,
            refine_evaluations=evaluations,
        )

    def work(self, problem):
        planned = self.factoring(problem)
        return None if planned is None else tuple(planned[0].work_by_piece())

    def obstacles(self, problem):
        if not problem.action_axes:
            return ()
        if not self.factored:
            return ("GridSearch(factored=False) evaluates the plain product",)
        aggregator = problem.aggregator
        if aggregator is not None and aggregator.n_values > 1:
            return (
                f"{type(aggregator).__name__} carries two values per point, which only the "
                "plain product evaluates",
            )
        smooth = taste_shock_scale(problem) is not None
        if self._refines(problem):
            # Refined inside the elimination where the plan allows, else the plain product.
            reason = "refinement (GridSearch(refine=...)) evaluates the plain product"
            assert self.refine is not None
            names = self.refine.names(problem.regime.continuous_actions)
            if len(names) != 1:  # (at least one: `_refines`)
                joint = f"several refined actions ({', '.join(names)}) are refined jointly"
                return (f"{reason}: {joint}",)
            planned = _factor_plan.plan_factoring(
                problem,
                smooth,
                limit_pieces=False,
                refined=names[0],
                refine_evaluations=_refine.evaluations(self.refine),
            )
            assert planned is not None
            reasons = planned[0].obstacles()
            return (reason, *reasons) if reasons else ()
        planned = _factor_plan.plan_factoring(problem, smooth, limit_pieces=False)
        assert planned is not None
        return planned[0].obstacles()

    def notices(self, problem):
        pairs = math.prod(
            int(a.points.shape[0]) for a in (*problem.state_axes, *problem.action_axes)
        )
        if not self.factored or pairs <= PLAIN_PRODUCT_WARNING_PAIRS:
            return ()
        reasons = self.obstacles(problem)
        if not reasons:
            return ()
        return (
            f"Regime {problem.regime.name!r}: GridSearch evaluates the plain state x action "
            f"product, {pairs:,} pairs per period, because it could not evaluate the "
            f"objective piece by piece: {'; '.join(reasons)}. `model.describe(params)` shows "
            "the pieces (docs/architecture.md, 'Structure-aware grid search').",
        )

    def solve_period(self, problem):
        # Checks apart need the plan whatever the size of its pieces: planned once (the
        # plan traces the kernel; a second trace was a tenth of a first solve's tracing).
        apart = bool(problem.validate and problem.checks and not problem.carried())
        planned = self._plan(problem, limit_pieces=not apart)
        if self._refines(problem):
            # Refined inside the elimination (`_factored.solve_factored`) where the plan
            # allows; else the plain product's refinement, state by state.
            if planned is None or problem.carried() or not planned[0].usable():
                return super().solve_period(problem)
            value, checks = _factored.solve_factored(
                problem, *planned, taste_shock_scale(problem), self.refine
            )
            return PeriodSolution(value, checks, None)
        if planned is None or not (planned[0].pieces_fit() and _factor_plan.worth_it(planned[0])):
            if apart and planned is not None:
                # The plain product's values, and the checks on their own axes.
                return self._plain_with_checks_apart(problem, *planned)
            return super().solve_period(problem)
        scale = taste_shock_scale(problem)
        carried = problem.carried()
        if not carried:
            value, checks = _factored.solve_factored(problem, *planned, scale)
            return PeriodSolution(value, checks, None)
        # Sharded states whose continuation slices are mapped jointly (device-local
        # reads): mapped outermost, each point factored over the other axes.
        sharded = tuple(
            a for a in problem.state_axes if any(a.name in c.labels for c in carried.values())
        )

        def at(point, arrays):
            local = problem.with_continuations(arrays)
            # The same structure as the whole product's plan, at the point's states.
            planned = _factor_plan.plan_factoring(
                local, scale is not None, fixed=point, limit_pieces=False
            )
            assert planned is not None
            return _factored.solve_factored(local, *planned, scale)

        value, checks = lift(at, sharded, carried=carried)
        names = [a.name for a in sharded]
        names += [a.name for a in problem.state_axes if a.name not in names]
        order = [names.index(a.name) for a in problem.state_axes]
        return PeriodSolution(
            jnp.transpose(value, order), jnp.transpose(checks, [*order, len(order)]), None
        )

    def _plain_with_checks_apart(self, problem, factoring, evaluate) -> PeriodSolution:
        """The plain product's value array, without the checks (`value(...,
        checks=False)`), and the checks by `_factored.checks_apart`.

        The value at each pair is the plan's jaxpr bound again (`evaluate`), not `q`
        traced a second time: the plan traced it once already, and rebinding its
        equations skips the user functions' Python."""

        def q(state, action):
            (value,) = evaluate([factoring.value], {**state, **action})
            return value, ()

        axes = auto_splayed(problem.state_axes, problem.action_axes, jnp.zeros(()).dtype.itemsize)
        value, _ = lift(lambda state: self.value(problem, state, checks=False, q=q), axes)
        return PeriodSolution(value, _factored.checks_apart(problem, factoring, evaluate), None)

    def value(self, problem, state, checks: bool = True, q=None):
        """The best value at `state` and the checks maximised over the actions (with
        `checks=False` none: computed apart, `_plain_with_checks_apart`; `q`: the
        objective at a state-action pair, `problem.q` by default)."""
        q = problem.q if q is None else q
        if self._refines(problem):
            refined = self._refined(problem, state)
            v_d = refined.value.reshape(-1)
            scale = taste_shock_scale(problem)
            top = max_along(v_d, 0) if scale is None else smooth_max(v_d, scale, 0)
            return top, max_each(refined.violations, tuple(range(refined.value.ndim)))
        axes = problem.action_axes
        n_discrete = len(problem.regime.discrete_actions)
        scale = taste_shock_scale(problem)
        aggregator = problem.aggregator
        if aggregator is not None and aggregator.n_values > 1:
            # Two values per point (no taste shocks): reduced together by the aggregator.
            def best_pair(outputs):
                values, violations = outputs
                return aggregator.best(values), max_each(violations, (0,))

            def reduce_pair(action: dict, depth: int):
                if depth == len(axes):
                    return problem.q_values(state, action)
                axis = axes[depth]
                return reduce_axis(
                    lambda x: reduce_pair({**action, axis.name: x}, depth + 1),
                    axis.points,
                    axis.batch_size,
                    best_pair,
                )

            return reduce_pair({}, 0)

        def best(outputs, smooth: bool):
            values, violations = outputs
            violations = max_each(violations, (0,))
            if smooth and scale is not None:  # a logsumexp of chunks' logsumexps
                return smooth_max(values, scale, 0), violations
            return max_along(values, 0), violations

        def reduce(action: dict, depth: int):
            if depth == len(axes):
                value, violations = q(state, action)
                return value, violations if checks else ()
            axis = axes[depth]
            smooth = scale is not None and depth < n_discrete
            return reduce_axis(
                lambda x: reduce({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
                lambda outputs: best(outputs, smooth),
            )

        return reduce({}, 0)

    def discrete_values(self, problem, state):
        if self._refines(problem):
            return self._refined(problem, state).value
        # The best continuous action is located on the grid without derivatives
        # (`stop_gradient`), then `q` is evaluated once more there: the same value as the
        # max over the grid, and the same derivative (that of the maximising element),
        # but reverse mode differentiates one point per discrete action instead of the
        # whole continuous grid.
        axes = problem.action_axes
        n_discrete = len(problem.regime.discrete_actions)
        continuous = axes[n_discrete:]

        def grid(action: dict, depth: int):
            if depth == len(axes):
                return problem.q(state, action)[0]
            axis = axes[depth]
            return map_axis(
                lambda x: grid({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
            )

        def at_discrete(action: dict, depth: int):
            if depth == n_discrete:
                if not continuous:
                    return problem.q(state, action)[0]
                values = jax.lax.stop_gradient(grid(action, depth))
                index = jnp.unravel_index(jnp.argmax(values.reshape(-1)), values.shape)
                best = {a.name: a.points[i] for a, i in zip(continuous, index, strict=True)}
                return problem.q(state, {**action, **best})[0]
            axis = axes[depth]
            return map_axis(
                lambda x: at_discrete({**action, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
            )

        return at_discrete({}, 0)

    def choose(self, problem, state, key):
        if self._refines(problem):
            return self._choose_refined(problem, state, key)
        planned = self.factoring(problem, state)
        if planned is not None:
            return self._choose_factored(problem, *planned, key)
        axes = problem.action_axes
        values = q_on_action_grid(problem, state)  # axes: discrete..., continuous...
        n_discrete = len(problem.regime.discrete_actions)
        shape = values.shape
        discrete_shape, continuous_shape = shape[:n_discrete], shape[n_discrete:]
        per_discrete = values.reshape((*discrete_shape, -1))
        best_continuous = jnp.argmax(per_discrete, axis=-1)
        v_d = jnp.max(per_discrete, axis=-1)
        flat_d, value = _best_discrete(problem, v_d, key)
        d_index = jnp.unravel_index(flat_d, discrete_shape) if n_discrete else ()
        c_flat = best_continuous[d_index] if n_discrete else best_continuous
        c_index = jnp.unravel_index(c_flat, continuous_shape) if continuous_shape else ()
        chosen = {}
        for axis, i in zip(axes, (*d_index, *c_index), strict=True):
            chosen[axis.name] = axis.points[i]
        return chosen, value

    def subject_chooser(self, problem, n_subjects):
        # The period's plan (no state fixed), its pieces that no continuous state
        # enters tabulated once for all subjects (`tabulate_shared_pieces`).
        planned = None if self._refines(problem) else self._plan(problem, limit_pieces=False)
        if planned is not None and not problem.carried():
            factoring, evaluate = planned
            tables = _factored.tabulate_shared_pieces(problem, factoring, evaluate, n_subjects)
            if tables:

                def choose(state, key):
                    noise = self._taste_shocks(problem, key)
                    codes, value = _factored.choose_tabulated(
                        problem, factoring, evaluate, tables, state, noise
                    )
                    return {a.name: a.points[codes[a.name]] for a in problem.action_axes}, value

                return choose
        return super().subject_chooser(problem, n_subjects)

    def _taste_shocks(self, problem, key):
        """The taste shocks of one subject, `(discrete action names, draws)`, one draw per
        combination of discrete actions in their order; None without taste shocks."""
        scale = taste_shock_scale(problem)
        if scale is None:
            return None
        assert key is not None
        discrete = problem.action_axes[: len(problem.regime.discrete_actions)]
        shape = tuple(int(a.points.shape[0]) for a in discrete)
        dtype = jnp.zeros(()).dtype
        return (tuple(a.name for a in discrete), scale * jax.random.gumbel(key, shape, dtype))

    def _choose_factored(self, problem, factoring, evaluate, key):
        """`choose` by elimination: the same taste shocks (one draw per combination of
        discrete actions, in their order) and the same choice as the plain product."""
        axes = problem.action_axes
        noise = self._taste_shocks(problem, key)
        points = {a.name: a.points for a in axes}
        codes, value = _factored.choose_factored(factoring, evaluate, points, noise)
        return {a.name: a.points[codes[a.name]] for a in axes}, value

    def _choose_refined(self, problem, state, key):
        refine = self.refine
        assert refine is not None
        refined = self._refined(problem, state)
        v_d = refined.value
        n_discrete = len(problem.regime.discrete_actions)
        flat_d, value = _best_discrete(problem, v_d, key)
        d_index = jnp.unravel_index(flat_d, v_d.shape) if n_discrete else ()
        discrete = {
            axis.name: axis.points[i]
            for axis, i in zip(problem.action_axes[:n_discrete], d_index, strict=True)
        }
        at_choice = jax.tree.map(lambda x: x[d_index] if n_discrete else x, refined)
        actions = _refine.with_derivatives(problem, state, discrete, at_choice, refine)
        return {**discrete, **actions}, value

    def continuous_policy(self, problem, state):
        if self._refines(problem):
            return self._policy(problem, state)[1]
        return super().continuous_policy(problem, state)

    def best_continuous_actions(self, problem, state, discrete_action):
        if not self._refines(problem):
            return super().best_continuous_actions(problem, state, discrete_action)
        refine = self.refine
        assert refine is not None
        fixed = {a: discrete_action[a] for a in problem.regime.discrete_actions}
        refined = _refine.refine_choice(problem, state, fixed, refine)
        return _refine.with_derivatives(problem, state, fixed, refined, refine)

    def choices_at(self, problem, state):
        if self._refines(problem):
            refined, actions = self._policy(problem, state)
            return refined.value, actions
        return super().choices_at(problem, state)

    def choices_on_grid(self, problem):
        # The whole grid by the period's plan, where the solve would use it (no carried
        # slices: a sharded state's continuation is read node by node on its device).
        if problem.carried():
            return None
        planned = self._plan(problem)
        if planned is None:
            return None
        factoring, evaluate = planned
        if self._refines(problem):
            if not factoring.usable():
                return None
            return _factored_policy.choices_factored(problem, factoring, evaluate, self.refine)
        if not (factoring.pieces_fit() and _factor_plan.worth_it(factoring)):
            return None
        return _factored_policy.choices_factored(problem, factoring, evaluate)

    def refine_codes(self, problem, state):
        if not self._refines(problem):
            return None
        refine = self.refine
        assert refine is not None
        codes = self._refined(problem, state).codes
        names = refine.names(problem.regime.continuous_actions)
        return {name: codes[..., i] for i, name in enumerate(names)}


def _best_discrete(problem, v_d, key):
    """The flat index of the chosen combination of discrete actions (taste shocks drawn
    with `key` where the regime has them) and its value."""
    scale = taste_shock_scale(problem)
    if scale is not None:
        assert key is not None
        v_d = v_d + scale * jax.random.gumbel(key, v_d.shape, v_d.dtype)
    flat_d = jnp.argmax(v_d.reshape(-1)) if problem.regime.discrete_actions else jnp.asarray(0)
    return flat_d, v_d.reshape(-1)[flat_d]


def assign_solvers(plan: ModelPlan, regimes, default: AbstractSolver) -> dict[str, AbstractSolver]:
    """The solver of each regime: its own `solver`, else the model's default.

    A default that does not apply to a regime (`applies_to`, e.g. `DCEGM` on a terminal
    regime) leaves it to `GridSearch`; a regime's own solver must fit it (`check` raises
    `ModelInitializationError` otherwise).
    """
    solvers: dict[str, AbstractSolver] = {}
    for name, regime_plan in plan.regimes.items():
        own = regimes[name].solver
        if own is not None:
            solver = own
        elif default.applies_to(regime_plan):
            solver = default
        else:
            solver = GridSearch()
        solver.check(plan, regime_plan)
        solvers[name] = solver
    return solvers
