"""The Bellman kernel: the value of one (state, action) point of one regime in one period.

`RegimeProblem` is built at trace time for one regime and period. It prepares the
expected continuation of each next regime once per period (`_prepared.py`: the layout of
each target's values and their read at one point) and exposes `q(state, action)`, a
scalar function of one point; solvers lift it over the grids.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any, cast

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._errors import InvalidParamsError, InvalidTransitionProbabilitiesError
from .._grids import AbstractContinuousGrid, AbstractProcessGrid
from .._model._dag import Evaluator, has_array_parameter
from .._model._markov import regime_vector
from .._model._plan import ModelPlan, RegimePlan
from ._age_tables import GridPoints, age_varying_points, points_in
from ._axes import Axis, Carried
from ._check_arrays import (
    aggregator_check,
    aggregator_checks,
    any_nan,
    probability_tolerance,
    probability_violation,
)
from ._continuation import (
    NEG_INF,
    Layout,
    discounted,
    reach,
)
from ._prepared import expected_value, prepare_target, stack_targets
from ._sharding import ShardingPlan, is_identity_transition

# The named scope of the discounted continuation in `q` (its operations carry it).
CONTINUATION_SCOPE = "continuation"


class RegimeProblem:
    """One regime's Bellman problem in one period, ready to evaluate point by point.

    Args:
        model: the model plan.
        regime: this regime's plan.
        params: resolved parameters, `{function key: {name: value}}`, regime level at "".
        period, age: traced scalars.
        next_values: next period's value array of every regime (`-inf` where inactive).
        validate: whether to compute the probability checks.
        sharding: the shard plan of the backward induction (None: no sharding). With it,
            each sharded state axis that indexes a prepared continuation by its own code
            (a never-transitioning state, or a chain pre-contracted on it) is mapped
            jointly with that continuation axis: see `carried` and `with_continuations`.
        prepare: whether to prepare the continuations `q` reads (solvers that read next
            period themselves, like `DCEGM`, skip it).
        grid_points: this period's points of the grids whose bounds vary with age, by
            regime and variable (see `age_varying_points`); the backward induction and the
            simulation pass them as scanned inputs. None: read from the model at `period`.
        next_grid_points: the same for period + 1, on which next period's values are
            interpolated.
    """

    def __init__(
        self,
        model: ModelPlan,
        regime: RegimePlan,
        params: dict[str, dict[str, Any]],
        period: Array,
        age: Array,
        next_values: dict[str, Array] | None,
        validate: bool,
        sharding: ShardingPlan | None = None,
        *,
        prepare: bool = True,
        grid_points: GridPoints | None = None,
        next_grid_points: GridPoints | None = None,
        policy: Any = None,
        next_policies: dict[str, Any] | None = None,
        last_period: bool = False,
        code_offsets: dict[str, Array] | None = None,
    ):
        # What `with_params` builds the same problem from, with other parameters.
        self._arguments: dict[str, Any] = dict(
            model=model,
            regime=regime,
            period=period,
            age=age,
            next_values=next_values,
            validate=validate,
            sharding=sharding,
            prepare=prepare,
            grid_points=grid_points,
            next_grid_points=next_grid_points,
        )
        if grid_points is None or next_grid_points is None:
            tables = age_varying_points(model)
            grid_points = points_in(tables, period)
            next_grid_points = points_in(tables, period + 1)
        self.grid_points = grid_points
        self.next_grid_points = next_grid_points
        self.sharding = sharding
        # For solvers that read next period themselves: readers of next period's
        # regimes (`Period.read`), and this period's own policy (simulation, likelihoods).
        self.next_policies: dict[str, Any] = {} if next_policies is None else next_policies
        self.policy: Any = policy
        # Where the backward induction solves the model's last period apart from the
        # period loop: nothing follows (the continuation is 0), which a solver may use to
        # skip work (`AbstractSolver.solves_last_period_apart`).
        self.last_period = last_period
        # Where the arrays this problem reads by a current state's code start along that
        # state's axis: 0 (absent) except inside the simulation's per-device blocks of a
        # sharded solution, where each device holds one block of the sharded axes.
        self.code_offsets: dict[str, Array] = {} if code_offsets is None else code_offsets
        self.model = model
        self.regime = regime
        self.params = params
        self.period = period
        self.age = age
        self.validate = validate
        self.tolerance = probability_tolerance()
        self.process_points: dict[str, Array] = {}
        self.process_matrices: dict[str, Array] = {}
        for name in regime.states:
            grid = regime.grids[name]
            if isinstance(grid, AbstractProcessGrid):
                points, matrix = grid.discretize(params.get(f"next_{name}", {}))
                self.process_points[name] = points
                self.process_matrices[name] = matrix
        self.state_axes = tuple(self._axis(n) for n in regime.states)
        # Discrete actions outermost, continuous innermost: taste shocks reduce the
        # continuous axes by max first, then the discrete ones by logsumexp.
        self.action_axes = tuple(
            self._axis(n) for n in (*regime.discrete_actions, *regime.continuous_actions)
        )
        self.checks: list[str] = []
        self.period_violations: dict[str, Array] = {}
        self.continuations: dict[str, tuple[Array, Layout]] = {}
        self.target_points: dict[str, dict[str, Array]] = {}
        self.aggregator = regime.aggregator
        # Per target, a transform of each interpolated next value before any expectation
        # (then no expectation is taken once per period: see `_prepared.prepare_target`).
        self.node_transforms: dict[str, Any] = {}
        self.per_node = (
            self.aggregator is not None
            and self.aggregator.node_transform(params[""], terminal=False) is not None
        )
        if not regime.is_terminal:
            self._register_checks()
            if self.aggregator is not None:
                self._register_aggregator_checks()
        self.index_checks = self._index_checks() if validate else {}
        self.checks.extend(self.index_checks.values())
        if not regime.is_terminal:
            assert next_values is not None
            for target in regime.targets if prepare else ():
                values = next_values[target]
                if self.aggregator is not None:
                    values = self.aggregator.prepare(
                        values,
                        params[""],
                        terminal=model.regimes[target].is_terminal,
                        has_future=self.has_future(),
                    )
                    # An aggregator that transforms each interpolated node (EpsteinZin's
                    # `interpolate="values"`): the transform the kernel applies.
                    transform = self.aggregator.node_transform(
                        params[""], terminal=model.regimes[target].is_terminal
                    )
                    if transform is not None:
                        self.node_transforms[target] = transform
                    for check, failed in self.aggregator.value_violations(
                        next_values[target],
                        params[""],
                        terminal=model.regimes[target].is_terminal,
                        has_future=self.has_future(),
                    ).items():
                        if check in self.checks:
                            self.period_violations[check] = jnp.maximum(
                                self.period_violations.get(check, 0.0), failed
                            )
                    if "value:range" in self.checks:
                        # A finite value whose transform the kernel would read as -inf.
                        probe = values if transform is None else transform(values)
                        beyond = jnp.isfinite(next_values[target]) & ~(
                            jnp.abs(probe) < reach(values.dtype)
                        )
                        self.period_violations["value:range"] = jnp.maximum(
                            self.period_violations.get("value:range", 0.0),
                            jnp.any(beyond).astype(values.dtype),
                        )
                self.continuations[target] = prepare_target(self, target, values)
                target_plan = model.regimes[target]
                self.target_points[target] = {
                    s: self.next_points(target, s)
                    for s in target_plan.states
                    if not target_plan.grids[s].is_discrete
                }
            self.groups = stack_targets(self)
            # A NaN in next period's values (a user function returned NaN there) makes
            # this whole period NaN: one test per period on the small prepared arrays,
            # instead of NaN bookkeeping at every state-action point. The NaN check of
            # `solve` then reports the period and point where it first appeared.
            # With sharding, the continuations mapped jointly with the sharded state axes
            # are tested per state point on their device-local slices instead (see
            # `with_continuations`), so that the test needs no communication.
            carried = set(self.carried())
            reads = [
                (members, stacked)
                for members, stacked in self.groups
                if not carried.intersection(members)
            ]
            self.continuation_has_nan = any_nan(
                [
                    self.continuations[members[0]][0]
                    for members, stacked in reads
                    if stacked is None
                ],
                tuple(stacked for _, stacked in reads if stacked is not None),
            )
        self._frozen = True

    def __setattr__(self, name: str, value) -> None:
        # The problem is data: built once, by its constructor; `replace` makes a changed
        # copy. (Its dictionaries of check violations are filled while it is evaluated.)
        if getattr(self, "_frozen", False):
            raise AttributeError(
                f"RegimeProblem is immutable: use problem.replace({name}=...) for a copy."
            )
        object.__setattr__(self, name, value)

    def replace(self, **changes) -> RegimeProblem:
        """A copy with the given attributes changed (e.g. `next_policies`, `policy`,
        `code_offsets`)."""
        problem = copy.copy(self)
        for name, value in changes.items():
            if not hasattr(self, name):
                raise AttributeError(f"RegimeProblem has no attribute {name!r}.")
            object.__setattr__(problem, name, value)
        return problem

    def with_params(self, params: dict[str, dict[str, Any]]) -> RegimeProblem:
        """The same problem built with other resolved parameters (of the same
        structure): e.g. one member of a group of regimes of equal structure, traced
        with the group's stacked parameters under `vmap` (see `_groups.py`). Keeps this
        problem's readers, policy, code offsets and `last_period`."""
        return RegimeProblem(
            **self._arguments,
            params=params,
            policy=self.policy,
            next_policies=self.next_policies,
            last_period=self.last_period,
            code_offsets=self.code_offsets,
        )

    # ----------------------------------------------------------------- set-up
    def points(self, name: str) -> Array:
        """This period's points of the regime's continuous state or action `name`."""
        varying = self.grid_points.get(self.regime.name, {})
        if name in varying:
            return varying[name]
        return cast(AbstractContinuousGrid, self.regime.grids[name]).to_jax()

    def next_points(self, target: str, state: str) -> Array:
        """Next period's points of the continuous state `state` of regime `target`."""
        varying = self.next_grid_points.get(target, {})
        if state in varying:
            return varying[state]
        return cast(AbstractContinuousGrid, self.model.regimes[target].grids[state]).to_jax()

    def _axis(self, name: str) -> Axis:
        grid = self.regime.grids[name]
        if grid.is_discrete:
            points = jnp.arange(grid.n_points, dtype=jnp.int32)
        else:
            points = self.points(name)
        return Axis(name, points, grid.batch_size, grid.is_discrete, grid.distributed)

    def _register_checks(self) -> None:
        for name, transition in self.regime.state_transitions.items():
            if transition.is_markov or self.model.state_grid(name).is_discrete:
                self.checks.append(f"next_{name}")
            elif not transition.is_process:
                # A continuous next state must be finite at feasible points: the kernel's
                # interpolation does no per-point NaN bookkeeping (see `settle_masked`).
                self.checks.append(f"next_{name}:finite")
        self.checks.append("next_regime")
        self.checks.append("next_regime:unreachable")
        self.checks.append("next_regime:inactive")

    def _register_aggregator_checks(self) -> None:
        """The aggregator's parameter checks (once per period) and, for aggregators that
        need it, positive utility at feasible points (see `aggregator_checks`)."""
        assert self.aggregator is not None
        names = aggregator_checks(self.regime)
        self.checks.extend(names)
        violations = self.aggregator.violations(self.params[""])
        for name in self.aggregator.parameters:
            if name in violations:
                self.period_violations[aggregator_check(self.aggregator, name)] = violations[name]

    def has_future(self) -> Array:
        """Whether a next period exists (False in the last period, where `V_T ≡ 0`)."""
        return self.period < self.model.n_periods - 1

    def _index_checks(self) -> dict[str, str]:
        """A check per function with an array-valued parameter: does it index out of bounds?

        Named `<function>:index:<its array parameters and their shapes>`, so that the
        message can name them. JAX would silently clamp such an index (e.g. survival
        probabilities shorter than the horizon, read at `period`).
        """
        regime = self.regime
        functions = [
            regime.utility,
            *regime.helpers.values(),
            *regime.constraints.values(),
            *(f for t in regime.state_transitions.values() for f in t.functions),
            *([regime.next_regime] if regime.next_regime is not None else []),
        ]
        checks = {}
        for function in functions:
            values = self.params.get(function.key, {})
            if has_array_parameter(function, values):
                arrays = ", ".join(
                    f"{p!r} of shape {tuple(jnp.shape(values[p]))}"
                    for p in function.params
                    if p in values and jnp.ndim(values[p]) > 0
                )
                checks[function.key] = f"{function.key}:index:{arrays}"
        return checks

    def is_transition(self, key: str) -> bool:
        return key == "next_regime" or (
            key.startswith("next_") and key[5:] in self.regime.state_transitions
        )

    def before_last_period(self) -> Array:
        """Transitions are evaluated in the last period too, but nothing reads them there
        (the continuation is 0): an array indexed by period may stop one period short,
        as in pylcm, without an index error."""
        return self.period < self.model.n_periods - 1

    def value_of(self, name: str, point: Array) -> Array:
        """The value user functions see for a state or action given its grid point."""
        if name in self.process_points:
            return self.process_points[name][point]
        return point

    def local_code(self, name: str, code: Array) -> Array:
        """`code` of state `name` as an index into the arrays this problem reads (shifted
        by `code_offsets`, set where those arrays are one device's block)."""
        offset = self.code_offsets.get(name)
        return code if offset is None else code - offset

    def inputs(self, point: dict[str, Array]) -> dict[str, Array]:
        values = {name: self.value_of(name, x) for name, x in point.items()}
        values["period"] = self.period
        values["age"] = self.age
        return values

    def evaluator(self, point: dict[str, Array]) -> Evaluator:
        return Evaluator(
            self.regime.helpers, self.inputs(point), self.params, check_indices=self.validate
        )

    def stays_sharded(self, state: str) -> bool:
        return (
            self.sharding is not None
            and self.sharding.is_sharded(state)
            and state in self.regime.states
            and is_identity_transition(self.regime, state)
        )

    def _joint_states(self, layout: Layout) -> tuple[str, ...]:
        if self.sharding is None:
            return ()
        return tuple(s for s in layout.current if self.sharding.is_sharded(s))

    def carried(self) -> dict[str, Carried]:
        """Prepared continuations to map jointly with the sharded state axes (may be empty).

        Pass them to `lift(..., carried=...)` and evaluate the kernel on
        `with_continuations(arrays)`: each state point then sees only the slice of the
        continuation along its own sharded codes, so XLA keeps the work device-local.
        """
        carried = {}
        for target, (prepared, layout) in self.continuations.items():
            joint = self._joint_states(layout)
            if not joint:
                continue
            labels = (
                (None,) * len(layout.stochastic)
                + tuple(s if s in joint else None for s in layout.current)
                + (None,) * (len(layout.discrete) + len(layout.continuous))
            )
            carried[target] = Carried(prepared, labels)
        return carried

    def with_continuations(self, arrays: dict[str, Array]) -> RegimeProblem:
        """A copy reading the given jointly-mapped continuation slices (see `carried`)."""
        continuations = dict(self.continuations)
        for target, array in arrays.items():
            layout = self.continuations[target][1]
            joint = self._joint_states(layout)
            reduced = dataclasses.replace(
                layout, current=tuple(s for s in layout.current if s not in joint)
            )
            continuations[target] = (array, reduced)
        return self.replace(
            continuations=continuations,
            continuation_has_nan=self.continuation_has_nan | any_nan(list(arrays.values())),
        )

    def check_shape(self, key: str, shape, expected) -> None:
        if tuple(shape) != tuple(expected) and key.startswith("next_") and len(expected) == 1:
            # A probability vector of the wrong length: a transition, not a parameter, error.
            if key == "next_regime":
                order = ", ".join(f"{n}={r.id}" for n, r in self.model.regimes.items())
                what = f"one probability per regime in the order of regime_ids ({order})"
            else:
                what = f"one probability per code of {key.removeprefix('next_')!r}"
            raise InvalidTransitionProbabilitiesError(
                f"Regime {self.regime.name!r}: function {key!r} returns probabilities of shape "
                f"{tuple(shape)}, expected {tuple(expected)}: {what}."
            )
        if tuple(shape) != tuple(expected):
            raise InvalidParamsError(
                f"Regime {self.regime.name!r}: function {key!r} returns shape {tuple(shape)}, "
                f"expected {tuple(expected)} at one point; check the shapes of its "
                "parameters (and of the helpers it uses)."
            )

    # ----------------------------------------------------------------- kernel
    def q(
        self, state: dict[str, Array], action: dict[str, Array]
    ) -> tuple[Array, tuple[Array, ...]]:
        """The value of taking `action` in `state`, and the check violations (one scalar
        per name in `checks`; empty without validation).

        `state` and `action` hold grid codes for discrete variables and values for
        continuous ones. Infeasible actions get `-inf`. With an aggregator that carries
        a second value array (`PresentBias`), this is the decision value; `q_values`
        returns both.
        """
        values, diagnostics = self.q_values(state, action)
        return values[0], diagnostics

    def q_values(
        self, state: dict[str, Array], action: dict[str, Array]
    ) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
        """Like `q`, with every value the regime's aggregator computes at the point:
        `(decision value, carried value)` for `PresentBias`, one value otherwise."""
        regime = self.regime
        evaluate = self.evaluator({**state, **action})
        utility = jnp.asarray(evaluate(regime.utility))
        self.check_shape("utility", utility.shape, ())
        feasible = jnp.asarray(True)
        for constraint in regime.constraints.values():
            allowed = jnp.asarray(evaluate(constraint))
            self.check_shape(constraint.key, allowed.shape, ())
            feasible = feasible & allowed.astype(bool)
        violations = dict(self.period_violations)
        aggregator = self.aggregator
        if regime.is_terminal:
            values: tuple[Array, ...] = (utility,)
        else:
            # NaN in next period's values: a NaN discount factor makes the period NaN
            # at no cost per point (see `continuation_has_nan`). The named scope marks
            # what the structure-aware grid search reports as the continuation.
            with jax.named_scope(CONTINUATION_SCOPE):
                beta = self.discount_factor(evaluate)
                beta = jnp.where(self.continuation_has_nan, jnp.nan, beta)
                split = aggregator is not None and aggregator.splits_terminal
                continuation = expected_value(self, evaluate, state, violations, split=split)
                future = discounted(beta, continuation) if aggregator is None else None
            if future is not None:
                values = (utility + future,)
            else:
                assert aggregator is not None
                values = aggregator.combine(
                    utility,
                    continuation,
                    {**self.params[""], "discount_factor": beta},
                    self.has_future(),
                )
                if aggregator.positive_utility and self.validate:
                    violations["utility:positive"] = jnp.where(feasible & ~(utility > 0), 1.0, 0.0)
        values = tuple(jnp.where(feasible, v, NEG_INF) for v in values)
        value = values[0]
        for check in self.checks:
            if check.endswith(":finite") and check in violations:
                violations[check] = jnp.where(feasible, violations[check], 0.0)
        for key, failed in evaluate.index_errors.items():
            # Points that a constraint rules out may index anything, except in the
            # constraints themselves.
            if key in self.index_checks:
                masked = failed if key in regime.constraints else failed & feasible
                if self.is_transition(key):
                    masked = masked & self.before_last_period()
                check = self.index_checks[key]
                violations[check] = jnp.maximum(
                    violations.get(check, 0.0), masked.astype(value.dtype)
                )
        # One scalar per check, kept apart (not stacked): they are reduced over the grids
        # together, in one variadic reduction (`max_each`), instead of materialising a
        # points x checks array.
        diagnostics = (
            tuple(jnp.asarray(violations.get(c, 0.0), dtype=value.dtype) for c in self.checks)
            if self.validate
            else ()
        )
        return values, diagnostics

    def discount_factor(self, evaluate: Evaluator) -> Array:
        """β at one point: the regime's function `"discount_factor"` where it has one
        (e.g. of a permanent discount type), else its regime-level parameter."""
        if "discount_factor" not in self.regime.helpers:
            return self.params[""]["discount_factor"]
        beta = jnp.asarray(evaluate.helper("discount_factor"))
        self.check_shape("discount_factor", beta.shape, ())
        return beta

    def regime_probabilities(self, evaluate: Evaluator) -> Array:
        """Probabilities of next period's regimes (one-hot for a deterministic transition)."""
        return self.regime_probabilities_and_id(evaluate)[0]

    def regime_probabilities_and_id(self, evaluate: Evaluator) -> tuple[Array, Array | None]:
        n_regimes = len(self.model.regimes)
        assert self.regime.next_regime is not None
        raw = evaluate(self.regime.next_regime)
        if isinstance(raw, dict):  # probabilities by regime name, in any order
            raw = regime_vector(self.model, self.regime, raw)
        raw = jnp.asarray(raw)
        if self.regime.next_regime_is_markov:
            self.check_shape("next_regime", raw.shape, (n_regimes,))
            return raw, None
        self.check_shape("next_regime", raw.shape, ())
        code = raw.astype(jnp.int32)
        return jax.nn.one_hot(code, n_regimes), code

    def next_states(self, evaluate: Evaluator) -> tuple[dict[str, Array], dict[str, Array]]:
        """Deterministic next values and in-kernel probability vectors, by state (the
        states with a per-target law of motion are in `target_next_states`; the drawn
        states and the laws of motion that read them in `drawn_probabilities` and
        `drawn_next_states`)."""
        values, probabilities = {}, {}
        drawn = self.regime.drawn
        for name, transition in self.regime.state_transitions.items():
            if transition.function is None or (
                transition.precontract is not None and not self.per_node
            ):
                continue
            if transition.draws or name in drawn:
                continue  # per node of the draw: `drawn_probabilities`, `drawn_next_states`
            result = jnp.asarray(evaluate(transition.function))
            grid = self.model.state_grid(name)
            if transition.is_markov:
                self.check_shape(f"next_{name}", result.shape, (grid.n_points,))
                probabilities[name] = result
            else:
                self.check_shape(f"next_{name}", result.shape, ())
                values[name] = result.astype(jnp.int32) if grid.is_discrete else result
        return values, probabilities

    def drawn_probabilities(self, evaluate: Evaluator, state: dict[str, Array]) -> dict[str, Array]:
        """The probability vector of the next value of each drawn state (`RegimePlan.drawn`)
        at one point: a process state's row of its chain, a Markov state's function."""
        probabilities = {}
        for name in self.regime.drawn:
            if name in self.process_matrices:
                code = self.local_code(name, state[name])
                probabilities[name] = self.process_matrices[name][code]
                continue
            function = self.regime.state_transitions[name].function
            assert function is not None
            result = jnp.asarray(evaluate(function))
            self.check_shape(f"next_{name}", result.shape, (self.model.state_grid(name).n_points,))
            probabilities[name] = result
        return probabilities

    def drawn_nodes(self, probabilities: dict[str, Array]) -> tuple[dict[str, Array], Array]:
        """Every joint node of the drawn states: their codes, `(n_nodes,)` by state, and
        the node's probability `(n_nodes,)`."""
        drawn = self.regime.drawn
        sizes = [probabilities[s].shape[0] for s in drawn]
        mesh = jnp.meshgrid(*(jnp.arange(n, dtype=jnp.int32) for n in sizes), indexing="ij")
        codes = {s: m.reshape(-1) for s, m in zip(drawn, mesh, strict=True)}
        weight = functools.reduce(jnp.multiply, [probabilities[s][codes[s]] for s in drawn])
        return codes, weight

    def drawn_next_states(self, evaluate: Evaluator, codes: dict[str, Array]) -> dict[str, Array]:
        """The next values of the laws of motion that read drawn states (`next_<state>`
        arguments), at each joint node `codes` (`(n_nodes,)` by drawn state): `(n_nodes,)`
        by state. Their index errors are merged into `evaluate`'s."""
        reading = {n: t for n, t in self.regime.state_transitions.items() if t.draws}

        def at(node_codes):
            node = evaluate.with_inputs(
                {f"next_{s}": self.value_of(s, c) for s, c in node_codes.items()}
            )
            values = {}
            for name, transition in reading.items():
                assert transition.function is not None
                result = jnp.asarray(node(transition.function))
                self.check_shape(f"next_{name}", result.shape, ())
                values[name] = result
            return values, node.index_errors

        values, errors = jax.vmap(at)(codes)
        for key, failed in errors.items():
            evaluate.record_index_error(key, jnp.any(failed))
        return values

    def target_next_states(self, evaluate: Evaluator) -> dict[str, dict[str, Array]]:
        """Next values of the states with a per-target law of motion, `{target: {state:
        value}}`, for every regime this one can move to."""
        values: dict[str, dict[str, Array]] = {}
        for name, transition in self.regime.state_transitions.items():
            grid = self.model.state_grid(name)
            for target, function in transition.per_target.items():
                if target not in self.regime.targets or target in transition.per_target_markov:
                    continue
                result = jnp.asarray(evaluate(function))
                self.check_shape(f"next_{name}", result.shape, ())
                values.setdefault(target, {})[name] = (
                    result.astype(jnp.int32) if grid.is_discrete else result
                )
        return values

    def target_next_probabilities(self, evaluate: Evaluator) -> dict[str, dict[str, Array]]:
        """The probability vectors of the states with a per-target `MarkovTransition`,
        `{target: {state: probabilities}}`, for every regime this one can move to."""
        probabilities: dict[str, dict[str, Array]] = {}
        for name, transition in self.regime.state_transitions.items():
            n_points = self.model.state_grid(name).n_points
            for target in transition.per_target:  # its order (a set's varies by process)
                if target not in transition.per_target_markov or target not in self.regime.targets:
                    continue
                result = jnp.asarray(evaluate(transition.per_target[target]))
                self.check_shape(f"next_{name}", result.shape, (n_points,))
                probabilities.setdefault(target, {})[name] = result
        return probabilities

    def _inactive_next_period(self) -> Array:
        """Which regimes are inactive in period + 1 (none after the last period)."""
        n_periods = self.model.n_periods
        active = [
            [t in r.active for t in range(n_periods)] + [True] for r in self.model.regimes.values()
        ]
        return ~jnp.asarray(active)[:, jnp.minimum(self.period + 1, n_periods)]

    def _ever_inactive(self) -> bool:
        """Whether some regime is inactive in some period after the first (static)."""
        n_periods = self.model.n_periods
        return any(
            t not in r.active for r in self.model.regimes.values() for t in range(1, n_periods)
        )

    def record_violations(
        self,
        regime_probabilities,
        next_values,
        next_probabilities,
        violations,
        next_regime_id: Array | None = None,
        *,
        by_target: dict[str, dict[str, Array]] | None = None,
        target_probabilities: dict[str, dict[str, Array]] | None = None,
    ) -> None:
        targets = self.regime.targets
        unreachable = [r.id for name, r in self.model.regimes.items() if name not in targets]
        if next_regime_id is not None:
            # A deterministic transition: its one-hot vector is valid exactly when the id
            # is a regime's; tested on the id, without building the vector.
            outside = (next_regime_id < 0) | (next_regime_id >= len(self.model.regimes))
            violations["next_regime"] = jnp.where(outside, 1.0, 0.0)
        else:
            violations["next_regime"] = probability_violation(regime_probabilities, self.tolerance)
        if self._ever_inactive() and not self.regime.transition_reads_actions:
            # Where the transition depends on the actions, an action that puts mass on a
            # regime inactive next period has value -inf (that regime's), so it is never
            # chosen, like one a constraint rules out (a state where every action does so
            # has none feasible, reported as such). Where it does not, no choice avoids
            # that mass: a modelling error.
            violations["next_regime:inactive"] = jnp.sum(
                jnp.where(self._inactive_next_period(), jnp.abs(regime_probabilities), 0.0)
            )
        if unreachable:
            violations["next_regime:unreachable"] = jnp.sum(
                jnp.abs(regime_probabilities[jnp.asarray(unreachable)])
            )
        for name, p in next_probabilities.items():
            violations[f"next_{name}"] = probability_violation(p, self.tolerance)
        for name, code in next_values.items():
            grid = self.model.state_grid(name)
            if not grid.is_discrete:
                violations[f"next_{name}:finite"] = jnp.where(jnp.isfinite(code), 0.0, 1.0)
            if grid.is_discrete:
                violations[f"next_{name}"] = jnp.where(
                    (code < 0) | (code >= grid.n_points), 1.0, 0.0
                )
        # A per-target next state is checked where its target regime is reached.
        for target, values in (by_target or {}).items():
            reached = regime_probabilities[self.model.regimes[target].id] > 0
            for name, code in values.items():
                grid = self.model.state_grid(name)
                if grid.is_discrete:
                    check, bad = f"next_{name}", (code < 0) | (code >= grid.n_points)
                else:
                    check, bad = f"next_{name}:finite", ~jnp.isfinite(code)
                violations[check] = jnp.maximum(
                    violations.get(check, 0.0), jnp.where(reached & bad, 1.0, 0.0)
                )
        # So is a per-target probability vector.
        for target, vectors in (target_probabilities or {}).items():
            reached = regime_probabilities[self.model.regimes[target].id] > 0
            for name, p in vectors.items():
                check = f"next_{name}"
                violations[check] = jnp.maximum(
                    violations.get(check, 0.0),
                    jnp.where(reached, probability_violation(p, self.tolerance), 0.0),
                )
