"""The solver interface: what every solver provides, and all that the backward induction,
the simulation and the estimation ask of it.

The backward induction (`solve_model`) owns the segments, the scan over periods,
checkpointing, progress, sharding, checks and the `Solution`. It groups the regimes by
equal solver and carries, for each group, the solver's own state without opening it
(as optimistix's `iterative_solve` carries a solver state):

- `init(plan, names, dtype)`: the state after the model's last period;
- `enter(plan, state, active)`: the state as the regimes `active` of a segment use it;
- `step(problems, state, period)`: one period of the group's active regimes, their
  `PeriodSolution`s, the new state, and what the period emits (stacked by the scan);
- `postprocess(emitted, segment)`: after the loop, the value arrays a step left out
  (`defers_values`) and each regime's policy of every period (`Solution.policies`);
- `reader(target, state, period, along)`: how an earlier period reads regime `target`
  of the group (as diffrax's loop builds `solver.interpolation_cls` from a step's
  `dense_info`): by default, its value array interpolated along `along`.

Queries after the solve (simulation, likelihoods, the distribution, Euler errors) have
defaults that search the action grids; a solver with a policy of its own overrides them.
The Euler errors (`euler_errors`) default to one continuous state and action read through
`continuous_policy`; a solver whose Euler equation has another shape overrides them. No
module outside a solver's folder names a concrete solver.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from . import _on_grid
from ._axes import auto_splayed, lift
from ._euler_equation import euler_errors_on_axes
from ._groups import member_parts
from ._kernel import RegimeProblem
from ._reading import ContinuationReader, array_reader

if TYPE_CHECKING:
    from .._model._plan import ModelPlan, RegimePlan, Segment


class PeriodSolution(NamedTuple):
    """What a solver returns for one regime in one period.

    `values` has the regime's state shape (None where the solver computes it after the
    period loop: `defers_values`); `violations` the check violations at every state
    point (see `RegimeProblem.checks` and the solver's `extra_checks`): a tuple of arrays
    of the state shape, one per check, or one array with a last axis of checks that
    broadcasts against the state shape (an axis of length 1 where the checks do not vary
    along it); `policy` is whatever the solver keeps for later queries (simulation,
    likelihoods, its state), or None; `carried` the second value array of an aggregator
    that has one, or None.
    """

    values: Array | None
    violations: Array | tuple[Array, ...]
    policy: Any
    # The value array earlier periods read as this one's continuation, where it is not
    # `values` (an aggregator that carries a second value array: `PresentBias`'s `W`).
    carried: Array | None = None


@dataclasses.dataclass(frozen=True)
class Period:
    """What the backward induction tells a solver's `step` and `reader` about a period.

    `period`, `age` and `next_age` are traced scalars; `next_values` holds next period's
    value array of every regime; `segment` is the segment being solved and `following`
    the regimes of the one after it (None after the model's last period); `last` is True
    where the model's last period is solved apart from the loop (nothing follows);
    `values_later` the regimes whose value arrays no regime reads next period, which a
    solver that `defers_values` may leave to `postprocess`.
    """

    plan: ModelPlan
    resolved: dict
    period: Array
    age: Array
    next_age: Array
    next_values: dict[str, Array]
    next_grid_points: dict
    segment: Segment
    following: frozenset[str] | None
    last: bool
    values_later: frozenset[str]
    read_target: Callable[[str, str], ContinuationReader]

    def read(self, target: str, along: str) -> ContinuationReader:
        """How regime `target` is read next period, along the reader's continuous state
        `along`: through the target's solver (`AbstractSolver.reader`)."""
        return self.read_target(target, along)


@dataclasses.dataclass(frozen=True)
class SegmentOutputs:
    """What `postprocess` gets besides the emitted arrays: the segment, its scanned
    inputs (the periods, and the points of age-varying grids), the regimes whose values
    its steps left out, and `problems(inputs, names)`, which builds the regime-period
    problems (without continuation) at one element of `inputs`."""

    plan: ModelPlan
    segment: Segment
    inputs: Any
    deferred: frozenset[str]
    problems: Callable[[Any, tuple[str, ...]], dict[str, RegimeProblem]]


@dataclasses.dataclass(frozen=True)
class FollowingPeriod:
    """Next period as a period's Euler equation reads it (`AbstractSolver.euler_errors`).

    `problem(target)`: the problem of regime `target` next period, carrying the
    solution's policy of that period (`RegimeProblem.policy`); `readers()`: every regime
    the period can move to, read for its marginal value through its own solver's
    choices (`ContinuationReader`s along the Euler equation's state).
    """

    problem: Callable[[str], RegimeProblem]
    readers: Callable[[], dict[str, ContinuationReader]]


class AbstractSolver(eqx.Module):
    """How the regimes of a model are solved, one period at a time, and queried after.

    Capabilities (class variables):
        reads_next_values: whether the solver's problems read next period's value arrays
            (prepared continuations); False for a solver that reads next period only
            through `Period.read`.
        solves_last_period_apart: whether the model's last period is cheaper for it
            solved apart from the loop (`RegimeProblem.last_period`: nothing follows).
    """

    reads_next_values: ClassVar[bool] = True
    solves_last_period_apart: ClassVar[bool] = False

    # ------------------------------------------------------------------ build
    def applies_to(self, regime: RegimePlan) -> bool:
        """Whether a model-wide default of this solver takes `regime` (else GridSearch)."""
        return True

    def check(self, model: ModelPlan, regime: RegimePlan) -> None:
        """Raise `ModelInitializationError` if `regime` is outside the solver's class."""

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]:
        """Names of the solver's own validation checks for `regime`, after the problem's."""
        return ()

    def compiler_options(self) -> dict[str, Any]:
        """XLA options for the solve program of a model that uses this solver.

        Applied when `Model.solve` is called eagerly (a nested `jit` cannot carry
        options: inside a caller's `jax.jit`, `grad` or `vmap` the caller's compile
        decides); the simulation keeps XLA's defaults. A model compiles with the options
        that the solvers of all its non-terminal regimes ask for alike; an XLA that does
        not know one is answered by compiling without any.
        """
        return {}

    def defers_values(self, regime: RegimePlan) -> bool:
        """Whether `step` may leave the value array of `regime` to `postprocess` where no
        regime reads it next period (`Period.values_later`)."""
        return False

    # ------------------------------------------------------------------ the period loop
    def init(self, plan: ModelPlan, names: tuple[str, ...], dtype) -> Any:
        """The state of the regimes `names` after the model's last period (V_T = 0)."""
        return None

    def enter(self, plan: ModelPlan, state: Any, active: tuple[str, ...]) -> Any:
        """`state` at the start of a segment whose active regimes are `active`."""
        return state

    def step(
        self, problems: dict[str, RegimeProblem], state: Any, period: Period
    ) -> tuple[dict[str, PeriodSolution], Any, Any]:
        """One period of the active regimes of the group (`problems`, by name; possibly
        none): their solutions, the new state, and what the scan emits for
        `postprocess`. By default each regime on its own (`solve_period`)."""
        return {name: self.solve_period(p) for name, p in problems.items()}, state, None

    def postprocess(
        self, emitted: Any, segment: SegmentOutputs
    ) -> tuple[dict[str, Array], dict[str, Any]]:
        """After a segment's loop: the value arrays of `segment.deferred` in every period
        (leading axis), and each regime's policy of every period (`Solution.policies`)."""
        return {}, {}

    def reader(self, target: str, state: Any, period: Period, along: str) -> ContinuationReader:
        """How `period` reads regime `target` (of this solver's group, whose state next
        period is `state`): by default, its value array on the state grid interpolated
        along `along`."""
        points = period.next_grid_points.get(target, {}).get(along)
        return array_reader(period.plan, target, period.next_values[target], along, points)

    @abc.abstractmethod
    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        """Solve one regime in one period on its whole state grid."""

    # ------------------------------------------------------------------ queries
    @abc.abstractmethod
    def choose(
        self, problem: RegimeProblem, state: dict[str, Array], key: PRNGKeyArray | None
    ) -> tuple[dict[str, Array], Array]:
        """The chosen action (codes / values by name) at `state`, and its value.

        `key` draws the taste shocks of regimes that have them. `problem.policy` holds
        the solver's policy of that period (`postprocess`), where it keeps one.
        """

    def subject_chooser(
        self, problem: RegimeProblem, n_subjects: int
    ) -> Callable[[dict[str, Array], PRNGKeyArray | None], tuple[dict[str, Array], Array]]:
        """How each of `n_subjects` subjects chooses in `problem`: `(state, key) ->
        (chosen, value)`, as `choose`. The simulation asks once per regime and period and
        maps the function over its subjects, so a solver may compute here, once, what
        every subject's choice shares; by default `choose` itself."""
        return functools.partial(self.choose, problem)

    @abc.abstractmethod
    def discrete_values(self, problem: RegimeProblem, state: dict[str, Array]) -> Array:
        """`v_d`: the best value over the continuous actions for each discrete action.

        Returns an array with one axis per discrete action of the regime (in declaration
        order; a 0-d array when the regime has none).
        """

    def continuous_policy(self, problem: RegimeProblem, state: dict[str, Array]) -> dict:
        """The continuous actions at `state` for each discrete action (arrays with one
        axis per discrete action): by default the best points of the action grids."""
        return _on_grid.best_grid_points(problem, state)

    def best_continuous_actions(
        self, problem: RegimeProblem, state: dict[str, Array], discrete_action: dict
    ) -> dict[str, Array]:
        """The best continuous actions at `state` given the discrete actions, smooth in
        the parameters where the solver can make them so (the likelihood of observed
        continuous choices). By default the grid's best point, a single continuous
        action refined to the vertex of the parabola through it and its neighbours."""
        return _on_grid.refined_grid_actions(problem, state, discrete_action)

    def choices_at(self, problem: RegimeProblem, state: dict[str, Array]) -> tuple[Array, dict]:
        """`v_d` and the continuous actions of each discrete action at a grid node (the
        forward distribution)."""
        return _on_grid.choices_at(problem, state)

    def refine_codes(self, problem: RegimeProblem, state: dict[str, Array]) -> dict | None:
        """How the refinement of each continuous action that the solver polishes off its
        grid ended at `state` (`RefineCode`s by action, one axis per discrete action);
        None (the default) where the solver refines none."""
        return None

    def choices_on_grid(self, problem: RegimeProblem) -> tuple[Array, dict] | None:
        """`choices_at` at every node of the regime's state grid at once (axes: the
        states, then the discrete actions), where the solver reads them faster that way
        than node by node; None (the default) to read them node by node."""
        return None

    def euler_variables(self) -> tuple[str, str] | None:
        """The continuous state and action of the regime's Euler equation, where the
        solver knows them (`lcm.euler_errors`' defaults)."""
        return None

    def borrowing_limit(self, problem: RegimeProblem, discrete: dict[str, Array]) -> Array:
        """The lowest saving the Euler equation's regime allows at the discrete states
        and actions `discrete` (Euler errors)."""
        return jnp.asarray(0.0)

    def action_step(self, problem: RegimeProblem, action: str) -> Array:
        """The resolution of the solver's continuous `action`: a saving within one step
        of the borrowing limit counts as constrained (Euler errors)."""
        names = [a.name for a in problem.action_axes]
        return jnp.max(jnp.diff(problem.action_axes[names.index(action)].points))

    def euler_errors(
        self,
        problem: RegimeProblem,
        following: FollowingPeriod,
        state: str,
        action: str,
        points: Array,
    ) -> Array:
        """`log10` relative Euler-equation errors of the solution's policy in `problem`
        (which carries it) at `points` of the continuous `state`, with `action` the
        consumption: axes the regime's other states, its discrete actions, then
        `points`; NaN where not defined (`lcm.euler_errors`). By default one continuous
        state and action, consumption from `continuous_policy`, next period read through
        `following.readers()`."""
        return euler_errors_on_axes(self, problem, following.readers(), state, action, points)

    def work(self, problem: RegimeProblem) -> tuple[tuple[str, int], ...] | None:
        """What one period of `problem` evaluates, as `(label, points)` rows (shown by
        `Model.describe`), where it is not the plain state x action product; None for
        the plain product."""
        return None

    def obstacles(self, problem: RegimeProblem) -> tuple[str, ...]:
        """What keeps one period of `problem` from being evaluated by its structure, in
        words (shown by `Model.describe`); empty where nothing does or the solver does
        not exploit structure."""
        return ()

    def notices(self, problem: RegimeProblem) -> tuple[str, ...]:
        """Warnings about how this solver will solve `problem` (a plain product it could
        not split, at a size that costs): issued once per regime when the solve is
        traced (`LcmWarning`); none by default."""
        return ()

    def policy_reader(
        self, plan: ModelPlan, target: str, policy: Any, params, period, age
    ) -> ContinuationReader | None:
        """How an earlier period's Euler equation reads regime `target` through this
        solver's `policy` of `period`; None to read it through its choices on the action
        grids."""
        return None


class AbstractPointwiseSolver(AbstractSolver):
    """A solver that finds the best action one state point at a time (`value`).

    `solve_period` lifts `value` over the state axes with the knobs (`lift`): splayed
    axes are scanned in chunks, sharded axes read their own slice of the continuation.
    Where the state-action product would take more than `EVALUATION_BYTES` at once,
    state axes are splayed by themselves (`auto_splayed`).
    """

    @abc.abstractmethod
    def value(self, problem: RegimeProblem, state: dict[str, Array]) -> tuple[Any, Array]:
        """Value of the best action at `state`, and the maximal check violations.

        With an aggregator that carries a second value array (`problem.aggregator.n_values
        == 2`), the value is the pair `(decision value, carried value)`.
        """

    def step(
        self, problems: dict[str, RegimeProblem], state: Any, period: Period
    ) -> tuple[dict[str, PeriodSolution], Any, Any]:
        """Each regime's `solve_period`; regimes of equal structure (`_groups.py`: the
        same functions, grids and targets, differing in parameter values) traced once:
        one member's `solve_period` mapped over the group's stacked parameters by
        `jax.lax.map`, one member after the other, so that the program and the memory
        are one member's. Regimes with a sharded state axis are solved on their own."""
        names = list(problems)
        solutions: dict[str, PeriodSolution] = {}
        for indices, stacked in member_parts([problems[n] for n in names], _is_sharded):
            if stacked is None:
                solutions.update({names[i]: self.solve_period(problems[names[i]]) for i in indices})
                continue
            representative = problems[names[indices[0]]]

            def member(params: Any, r: RegimeProblem = representative) -> PeriodSolution:
                return self.solve_period(r.with_params(params))

            solved = _map_members(member, len(indices), *stacked)
            for j, i in enumerate(indices):
                solutions[names[i]] = jax.tree.map(lambda x, j=j: x[j], solved)
        return solutions, state, None

    def solve_period(self, problem: RegimeProblem) -> PeriodSolution:
        carried = problem.carried()
        # Splayed by themselves where the state-action product would not fit at once.
        axes = auto_splayed(problem.state_axes, problem.action_axes, jnp.zeros(()).dtype.itemsize)
        if carried:
            value, check = lift(
                lambda state, arrays: self.value(problem.with_continuations(arrays), state),
                axes,
                carried=carried,
            )
        else:
            value, check = lift(lambda state: self.value(problem, state), axes)
        if isinstance(value, tuple):
            return PeriodSolution(value[0], check, None, value[1])
        return PeriodSolution(value, check, None)


def _is_sharded(problem: RegimeProblem) -> bool:
    sharding = problem.sharding
    return sharding is not None and any(sharding.is_sharded(s) for s in problem.regime.states)


def _map_members(f: Callable[[Any], Any], n: int, params: Any, axes: Any) -> Any:
    """`f` of each of `n` members' parameters (`stacked_params`: leaves with axis 0
    stacked along their leading axis, leaves with axis None shared), by `jax.lax.map`;
    outputs stacked along a leading axis."""
    leaves, tree = jax.tree.flatten(params)
    along = jax.tree.leaves(axes, is_leaf=lambda a: a is None)
    stacked = [leaf for leaf, axis in zip(leaves, along, strict=True) if axis == 0]
    if not stacked:  # the members' parameters are the same objects: one solve
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)), f(params))

    def member(slices):
        sliced = iter(slices)
        own = [
            next(sliced) if axis == 0 else leaf for leaf, axis in zip(leaves, along, strict=True)
        ]
        return f(jax.tree.unflatten(tree, own))

    return jax.lax.map(member, [jnp.asarray(x) for x in stacked])


def taste_shock_scale(problem: RegimeProblem):
    """The regime's taste-shock scale `λ`, or None without taste shocks."""
    if not problem.regime.taste_shocks:
        return None
    return problem.params[""]["taste_shock_scale"]


def solver_groups(
    plan: ModelPlan, solvers: dict[str, AbstractSolver]
) -> list[tuple[AbstractSolver, tuple[str, ...]]]:
    """The model's regimes grouped by equal solver (in the order of their first regime):
    the backward induction carries one state per group."""
    groups: list[tuple[AbstractSolver, list[str]]] = []
    for name in plan.regimes:
        solver = solvers[name]
        for representative, names in groups:
            if representative is solver or (
                type(representative) is type(solver)
                and bool(eqx.tree_equal(representative, solver))
            ):
                names.append(name)
                break
        else:
            groups.append((solver, [name]))
    return [(solver, tuple(names)) for solver, names in groups]
