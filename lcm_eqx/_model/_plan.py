"""Build: turn a model specification into a static plan, surfacing every structural error.

The plan holds only Python structure (names, axis order, resolved functions, which
regimes can follow which, period segments), and the values of `fixed_params`. Nothing in
it depends on the values of `params`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import cast

import numpy as np

from .._errors import LcmError, ModelInitializationError
from .._grids import AbstractGrid, AbstractProcessGrid, DiscreteGrid
from ._aggregator import AbstractAggregator
from ._constants import warn_device_constants
from ._dag import (
    SPECIAL_ARGUMENTS,
    ResolvedFunction,
    argument_names,
    check_acyclic,
    check_string_comparisons,
    resolve,
    transitive_helpers,
    transitive_inputs,
)
from ._markov import MarkovTransition
from ._regime import Regime

REGIME_LEVEL_PARAMS = ("discount_factor", "taste_shock_scale")


@dataclasses.dataclass(frozen=True)
class StateTransition:
    """How regime r produces next period's value of one state.

    `function` is None for a process state whose transition is its own Markov chain, and
    for a per-target law of motion, whose deterministic functions by target regime are in
    `per_target` (all looked up under the key `next_<state>`). `precontract` lists the
    current discrete states the probabilities depend on, when they depend on nothing else
    (besides period, age and parameters): then the
    expectation over this state is taken once per period, before the state-action sweep.
    """

    state: str
    function: ResolvedFunction | None
    is_markov: bool
    precontract: tuple[str, ...] | None
    per_target: Mapping[str, ResolvedFunction] = dataclasses.field(default_factory=dict)
    # The targets whose per-target law is a `MarkovTransition` (its function returns the
    # probabilities over the state's points, read in the kernel where it is reached).
    per_target_markov: frozenset[str] = frozenset()
    # The stochastic states whose next value this law of motion reads (its arguments
    # `next_<state>`: the draw made after this period's decision), in state order.
    draws: tuple[str, ...] = ()

    @property
    def is_process(self) -> bool:
        return self.function is None and not self.per_target

    @property
    def functions(self) -> tuple[ResolvedFunction, ...]:
        """Every user function of this transition (one, or one per target regime)."""
        if self.per_target:
            return tuple(self.per_target.values())
        return () if self.function is None else (self.function,)


@dataclasses.dataclass(frozen=True)
class RegimePlan:
    name: str
    id: int
    states: tuple[str, ...]
    actions: tuple[str, ...]
    grids: Mapping[str, AbstractGrid]  # states and actions
    helpers: Mapping[str, ResolvedFunction]
    utility: ResolvedFunction
    constraints: Mapping[str, ResolvedFunction]
    state_transitions: Mapping[str, StateTransition]
    next_regime: ResolvedFunction | None
    next_regime_is_markov: bool
    active: frozenset[int]
    taste_shocks: bool
    targets: tuple[str, ...]
    parameters: Mapping[str, tuple[str, ...]]  # function key -> parameter names
    regime_parameters: tuple[str, ...]
    aggregator: AbstractAggregator | None = None

    @property
    def is_terminal(self) -> bool:
        return self.next_regime is None

    def is_discrete(self, name: str) -> bool:
        return self.grids[name].is_discrete

    @property
    def drawn(self) -> tuple[str, ...]:
        """The stochastic states whose next value some law of motion reads (`next_<state>`
        arguments), in state order: the expectation over them is taken per node, after the
        continuous next states are evaluated at the node."""
        read = {s for t in self.state_transitions.values() for s in t.draws}
        return tuple(s for s in self.states if s in read)

    @property
    def discrete_actions(self) -> tuple[str, ...]:
        return tuple(a for a in self.actions if self.grids[a].is_discrete)

    @property
    def transition_reads_actions(self) -> bool:
        """Whether the regime transition depends on an action (directly or through
        helpers): then the agent can choose where to go, and an action that puts mass
        on a regime inactive next period is merely never chosen (its value is `-inf`)."""
        if self.next_regime is None:
            return False
        return bool(transitive_inputs(self.next_regime, self.helpers) & set(self.actions))

    @property
    def continuous_actions(self) -> tuple[str, ...]:
        return tuple(a for a in self.actions if not self.grids[a].is_discrete)

    def function(self, key: str) -> ResolvedFunction:
        if key == "utility":
            return self.utility
        if key == "next_regime":
            assert self.next_regime is not None
            return self.next_regime
        if key in self.constraints:
            return self.constraints[key]
        if key.startswith("next_") and key[5:] in self.state_transitions:
            transition = self.state_transitions[key[5:]]
            # A per-target law of motion: its first function (callers that need all of
            # them read `transition.functions`).
            return transition.functions[0]
        return self.helpers[key]


@dataclasses.dataclass(frozen=True)
class Segment:
    """A maximal run of consecutive periods `start..stop-1` with the same active regimes."""

    start: int
    stop: int
    regimes: tuple[str, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class FixedParams:
    """Parameters bound at model construction, nested like `params` (NumPy values).

    Compared by identity: the values are constants of the compiled programs of the one
    model that holds them.
    """

    values: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ModelPlan:
    regimes: Mapping[str, RegimePlan]
    regime_ids: type[enum.IntEnum]
    n_periods: int
    segments: tuple[Segment, ...]
    has_ages: bool
    fixed: FixedParams = dataclasses.field(default_factory=FixedParams)
    ages: tuple[float, ...] | None = None  # the age of each period, with ages

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.regimes)

    def age_varying_grids(self) -> tuple[tuple[str, str], ...]:
        """(regime, variable) of every grid whose bounds vary with age."""
        return tuple(
            (name, variable)
            for name, regime in self.regimes.items()
            for variable, grid in regime.grids.items()
            if grid.varies_with_age
        )

    def reject_age_varying_grids(self, what: str) -> None:
        """Raise for a feature that does not support grids whose bounds vary with age."""
        varying = self.age_varying_grids()
        if varying:
            regime, variable = varying[0]
            raise LcmError(
                f"{what} does not support grids whose bounds vary with age yet; regime "
                f"{regime!r}, variable {variable!r} has one. Use fixed bounds for it."
            )

    def state_grid(self, name: str) -> AbstractGrid:
        for regime in self.regimes.values():
            if name in regime.states:
                return regime.grids[name]
        raise KeyError(name)


def build_plan(
    regimes: Mapping[str, Regime],
    n_periods: int,
    regime_ids: type[enum.IntEnum] | None,
    has_ages: bool,
    ages=None,
) -> ModelPlan:
    """The plan of a model; `ages` (an `AgeGrid`) labels periods for `active(age)`."""
    if not isinstance(n_periods, int) or isinstance(n_periods, bool) or n_periods < 1:
        raise ModelInitializationError(f"Model: n_periods must be an int >= 1, got {n_periods!r}.")
    if not isinstance(regimes, Mapping) or not regimes:
        raise ModelInitializationError("Model: regimes must be a non-empty dict of Regime by name.")
    for name, regime in regimes.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ModelInitializationError(
                f"Model: regime names must be identifiers, got {name!r}."
            )
        if not isinstance(regime, Regime):
            raise ModelInitializationError(
                f"Model: regimes[{name!r}] must be a Regime, got {type(regime).__name__}."
            )
    ids = _regime_ids(regimes, regime_ids)
    _check_shared_states(regimes)
    all_states = {s for regime in regimes.values() for s in regime.states}
    by_period = _grids_by_period(regimes, n_periods, ages)
    plans = {}
    for name in sorted(regimes, key=lambda n: ids[n]):
        plans[name] = _regime_plan(
            name, ids[name], regimes, all_states, n_periods, has_ages, ages, by_period
        )
    _check_aggregators(plans)
    segments = _segments(plans, n_periods)
    warn_device_constants(regimes)  # the model is valid; now what would slow it down
    return ModelPlan(
        regimes=plans,
        regime_ids=ids,
        n_periods=n_periods,
        segments=segments,
        has_ages=has_ages,
        ages=None if ages is None else tuple(float(ages.age(t)) for t in range(n_periods)),
    )


def _regime_ids(regimes, regime_ids) -> type[enum.IntEnum]:
    names = list(regimes)
    if regime_ids is None:
        # The functional API makes a class (mypy types the call as a member).
        return cast(
            type[enum.IntEnum], enum.IntEnum("RegimeId", {name: i for i, name in enumerate(names)})
        )
    if not (isinstance(regime_ids, type) and issubclass(regime_ids, enum.IntEnum)):
        raise ModelInitializationError(
            f"Model: regime_ids must be an IntEnum class, got {regime_ids!r}."
        )
    members = {m.name: int(m.value) for m in regime_ids}
    if set(members) != set(names):
        raise ModelInitializationError(
            f"Model: the member names of regime_ids {regime_ids.__name__} "
            f"({sorted(members)}) must equal the regime names ({sorted(names)})."
        )
    if sorted(members.values()) != list(range(len(names))):
        raise ModelInitializationError(
            f"Model: the values of regime_ids {regime_ids.__name__} must be 0..{len(names) - 1}, "
            f"got {members}."
        )
    return regime_ids


def _check_shared_states(regimes: Mapping[str, Regime]) -> None:
    """A state shared by several regimes must be of the same kind everywhere."""
    seen: dict[str, tuple[str, AbstractGrid]] = {}
    for name, regime in regimes.items():
        for state, grid in regime.states.items():
            if state not in seen:
                seen[state] = (name, grid)
                continue
            other_name, other = seen[state]
            if grid.is_discrete != other.is_discrete or (
                grid.is_discrete and grid.n_points != other.n_points
            ):
                raise ModelInitializationError(
                    f"Regimes {other_name!r} and {name!r}: the state {state!r} must be of the "
                    "same kind in both (discrete states with the same number of points), got "
                    f"{type(other).__name__}({other.n_points}) and "
                    f"{type(grid).__name__}({grid.n_points})."
                )
            if (
                isinstance(grid, DiscreteGrid)
                and isinstance(other, DiscreteGrid)
                and grid.labels != other.labels
            ):
                raise ModelInitializationError(
                    f"Regimes {other_name!r} and {name!r}: the state {state!r} has "
                    f"different categories {list(other.labels)} and {list(grid.labels)}."
                )


def _grids_by_period(regimes: Mapping[str, Regime], n_periods: int, ages) -> dict:
    """Every grid of every regime, with bounds that vary with age resolved to one value
    per period (`AbstractGrid.by_period`), by regime and variable. A grid object shared
    by several regimes or variables stays one object."""
    periods = np.arange(n_periods)
    age_values = None if ages is None else np.asarray([ages.age(int(t)) for t in periods])
    resolved: dict[int, AbstractGrid] = {}
    grids: dict[str, dict[str, AbstractGrid]] = {}
    for name, regime in regimes.items():
        grids[name] = {}
        for kind, variables in (("state", regime.states), ("action", regime.actions)):
            for variable, grid in variables.items():
                if id(grid) not in resolved:
                    where = f" (regime {name!r}, {kind} {variable!r})"
                    resolved[id(grid)] = grid.by_period(periods, age_values, where)
                grids[name][variable] = resolved[id(grid)]
    return grids


def _is_read(helper: str, helpers, *functions) -> bool:
    """Whether a helper is an argument of another function of the regime."""
    return any(helper in f.helpers for f in (*helpers.values(), *functions))


def _regime_plan(
    name, regime_id, regimes, all_states, n_periods, has_ages, ages, by_period
) -> RegimePlan:
    regime = regimes[name]
    states = tuple(regime.states)
    actions = tuple(regime.actions)
    for clash in set(states) & set(actions):
        raise ModelInitializationError(f"Regime {name!r}: {clash!r} is both a state and an action.")
    for action in actions:
        if regime.actions[action].distributed:
            raise ModelInitializationError(
                f"Regime {name!r}: action {action!r} has distributed=True, but only state "
                "axes can be sharded: actions are reduced (maximised over) within each state, "
                "not stored in the value arrays. Use batch_size=k on the action grid to cut "
                "its memory instead."
            )
    variables = set(states) | set(actions)
    for special in SPECIAL_ARGUMENTS:
        if special in variables or special in regime.functions:
            raise ModelInitializationError(
                f"Regime {name!r}: {special!r} is reserved for the period label; rename the "
                "state, action or function."
            )
    for key in regime.functions:
        if key in variables:
            raise ModelInitializationError(
                f"Regime {name!r}: function {key!r} has the name of a state or action."
            )
        if key == "next_regime" or (key.startswith("next_") and key[5:] in all_states):
            raise ModelInitializationError(
                f"Regime {name!r}: function name {key!r} is reserved for a transition."
            )
    for key in regime.constraints:
        if key in regime.functions or key in variables:
            raise ModelInitializationError(
                f"Regime {name!r}: constraint {key!r} has the name of a function, state or "
                "action; give it its own name."
            )
    inputs = frozenset(variables | set(SPECIAL_ARGUMENTS))
    helper_names = frozenset(k for k in regime.functions if k != "utility")
    # The states whose next value is a draw (a Markov chain, a process or an i.i.d.
    # state): the law of motion of a continuous state may read it as `next_<state>`.
    stochastic = tuple(
        s
        for s in states
        if isinstance(regime.states[s], AbstractProcessGrid)
        or isinstance(regime.state_transitions.get(s), MarkovTransition)
    )

    # The labels of each input's DiscreteGrid (None: a number that is not a code), for
    # the check that no function compares an input with a string.
    grids = {**regime.states, **regime.actions}
    labels = {
        n: grid.labels if isinstance(grid, DiscreteGrid) else None for n, grid in grids.items()
    }
    labels.update({f"next_{n}": labels[n] for n in stochastic})
    labels.update(dict.fromkeys(SPECIAL_ARGUMENTS))

    def _resolve(fn, key, draws: frozenset[str] = frozenset()):
        resolved = resolve(fn, key=key, regime=name, inputs=inputs | draws, helpers=helper_names)
        _check_next_arguments(name, resolved, all_states, stochastic, draws)
        check_string_comparisons(resolved, labels)
        if "age" in resolved.inputs and not has_ages:
            raise ModelInitializationError(
                f"Regime {name!r}: function {key!r} uses 'age', but the model has no ages; "
                "pass ages=AgeGrid(...) to Model."
            )
        if "utility" in resolved.arguments:
            raise ModelInitializationError(
                f"Regime {name!r}: function {key!r} takes 'utility' as an argument; utility "
                "is the period reward and cannot feed other functions."
            )
        return resolved

    helpers = {k: _resolve(fn, k) for k, fn in regime.functions.items() if k != "utility"}
    utility = _resolve(regime.functions["utility"], "utility")
    check_acyclic({**helpers, "utility": utility}, regime=name)
    constraints = {k: _resolve(fn, k) for k, fn in regime.constraints.items()}

    discrete_states = frozenset(s for s in states if regime.states[s].is_discrete)
    allowed_precontract = discrete_states | set(SPECIAL_ARGUMENTS)
    # In the regime's order of states (a set's order varies between Python processes with
    # the hash seed; the order sets the keys of the simulation's draws).
    process_states = tuple(s for s in states if isinstance(regime.states[s], AbstractProcessGrid))
    state_transitions: dict[str, StateTransition] = {}
    parameters: dict[str, tuple[str, ...]] = {}
    terminal = regime.transition is None
    if not terminal:
        for state, fn in regime.state_transitions.items():
            if state not in all_states:
                raise ModelInitializationError(
                    f"Regime {name!r}: state_transitions[{state!r}] is a transition for a state "
                    f"that no regime has (states: {sorted(all_states)})."
                )
            if state in process_states:
                raise ModelInitializationError(
                    f"Regime {name!r}: state {state!r} is a "
                    f"{type(regime.states[state]).__name__}, whose transition is its own "
                    f"Markov chain; remove state_transitions[{state!r}]."
                )
            target_grid = _grid_of(regimes, state)
            if isinstance(fn, Mapping):
                if isinstance(target_grid, AbstractProcessGrid):
                    raise ModelInitializationError(
                        f"Regime {name!r}: state_transitions[{state!r}] is a dict by target "
                        f"regime, but {state!r} is a {type(target_grid).__name__}, whose "
                        "transition is its own Markov chain; remove the entry."
                    )
                state_transitions[state] = _per_target(name, state, fn, regimes, _resolve)
                continue
            is_markov = isinstance(fn, MarkovTransition)
            if is_markov and not target_grid.is_discrete:
                raise ModelInitializationError(
                    f"Regime {name!r}: state_transitions[{state!r}] is a MarkovTransition, but "
                    f"{state!r} is continuous; stochastic transitions need a discrete grid."
                )
            if not is_markov and isinstance(target_grid, AbstractProcessGrid):
                raise ModelInitializationError(
                    f"Regime {name!r}: state_transitions[{state!r}] must be a MarkovTransition "
                    f"(probabilities over the points of {type(target_grid).__name__})."
                )
            # A continuous state's law of motion may read next values of stochastic states.
            readable = (
                frozenset(f"next_{s}" for s in stochastic)
                if not (is_markov or target_grid.is_discrete)
                else frozenset()
            )
            resolved = _resolve(fn.fn if is_markov else fn, f"next_{state}", readable)
            precontract = None
            if is_markov:
                depends_on = transitive_inputs(resolved, helpers)
                if depends_on <= allowed_precontract:
                    precontract = tuple(s for s in states if s in depends_on)
            draws = tuple(s for s in stochastic if f"next_{s}" in resolved.inputs)
            state_transitions[state] = StateTransition(
                state, resolved, is_markov, precontract, draws=draws
            )
        for state in process_states:
            # An i.i.d. draw's expectation depends on no current state (one row).
            iid = regime.states[state].is_iid
            state_transitions[state] = StateTransition(state, None, True, () if iid else (state,))
        missing = [s for s in states if s not in state_transitions]
        if missing:
            raise ModelInitializationError(
                f"Regime {name!r}: missing state_transitions for state(s) {missing}; every "
                "state of a non-terminal regime needs one (use e.g. `lambda skill: skill` for "
                "a permanent state)."
            )
    elif regime.state_transitions:
        raise ModelInitializationError(
            f"Regime {name!r} is terminal (transition=None) but has state_transitions "
            f"{sorted(regime.state_transitions)}; a terminal regime has no next period."
        )
    for state in process_states:
        free = regime.states[state].free_parameters()
        if free:
            parameters[f"next_{state}"] = free

    next_regime = None
    next_regime_is_markov = False
    if not terminal:
        next_regime_is_markov = isinstance(regime.transition, MarkovTransition)
        fn = regime.transition.fn if next_regime_is_markov else regime.transition
        next_regime = _resolve(fn, "next_regime")

    for resolved in (
        utility,
        *helpers.values(),
        *constraints.values(),
        next_regime,
        *(f for t in state_transitions.values() for f in t.functions),
    ):
        if resolved is not None and resolved.params:
            parameters[resolved.key] = tuple(
                dict.fromkeys((*parameters.get(resolved.key, ()), *resolved.params))
            )
    for key, names in parameters.items():
        for param in names:
            if param in REGIME_LEVEL_PARAMS:
                continue
            if param in regimes:
                raise ModelInitializationError(
                    f"Regime {name!r}: function {key!r} has a parameter {param!r} named like a "
                    "regime; rename it (params[regime] holds that regime's parameters)."
                )

    regime_parameters: tuple[str, ...] = ()
    if not terminal and "discount_factor" not in helpers:
        regime_parameters += ("discount_factor",)  # else the function replaces it
    read = _is_read("discount_factor", helpers, utility, *constraints.values())
    if terminal and "discount_factor" in helpers and not read:
        raise ModelInitializationError(
            f"Regime {name!r}: function 'discount_factor' in a terminal regime "
            "(transition=None), which has no continuation to discount; remove it."
        )
    if "borrowing_limit" in helpers and not any(
        "borrowing_limit" in transitive_helpers(c, helpers) for c in constraints.values()
    ):
        # The limit is part of the model only through a constraint (GridSearch enforces
        # that; DCEGM checks that it binds at the limit): unread, it would be ignored.
        raise ModelInitializationError(
            f"Regime {name!r}: function 'borrowing_limit' is read by no constraint, so "
            "GridSearch would ignore it; state the limit as a constraint that reads it, "
            "e.g. constraints={'borrowing': lambda wealth, consumption, borrowing_limit: "
            "wealth - consumption >= borrowing_limit}."
        )
    if regime.taste_shocks is not None:
        if not regime.actions or not any(g.is_discrete for g in regime.actions.values()):
            raise ModelInitializationError(
                f"Regime {name!r}: taste_shocks need at least one discrete action."
            )
        regime_parameters += ("taste_shock_scale",)
    aggregator = regime.aggregator
    if aggregator is not None:
        aggregator.check(name, terminal=terminal, taste_shocks=regime.taste_shocks is not None)
        regime_parameters += tuple(p for p in aggregator.parameters if p not in regime_parameters)

    produced = set(state_transitions)
    targets = ()
    if not terminal:
        # A per-target law of motion produces its state only for the regimes it names.
        targets = tuple(
            r
            for r in regimes
            if set(regimes[r].states) <= produced
            and all(
                r in state_transitions[s].per_target
                for s in regimes[r].states
                if state_transitions[s].per_target
            )
        )
    return RegimePlan(
        name=name,
        id=regime_id,
        states=states,
        actions=actions,
        grids=dict(by_period[name]),  # states and actions, bounds resolved by period
        helpers=helpers,
        utility=utility,
        constraints=constraints,
        state_transitions=state_transitions,
        next_regime=next_regime,
        next_regime_is_markov=next_regime_is_markov,
        active=_active_periods(name, regime.active, n_periods, has_ages, ages),
        taste_shocks=regime.taste_shocks is not None,
        targets=targets,
        parameters=parameters,
        regime_parameters=regime_parameters,
        aggregator=aggregator,
    )


def _check_next_arguments(
    name: str,
    resolved: ResolvedFunction,
    all_states: set[str],
    stochastic: tuple[str, ...],
    readable: frozenset[str],
) -> None:
    """Reject an argument `next_<x>`, `x` a state of the model, that the function may not
    read: only a continuous state's law of motion reads next values, and only those of
    the regime's stochastic states (`readable` holds the ones this function may read)."""
    for argument in resolved.params:
        x = argument.removeprefix("next_")
        if not argument.startswith("next_") or x not in all_states:
            continue
        where = f"Regime {name!r}: function {resolved.key!r} takes {argument!r}"
        kinds = "Markov, process or i.i.d. states"
        if readable:
            raise ModelInitializationError(
                f"{where}, the next value of state {x!r}, but {x!r} is not a stochastic "
                f"state of this regime ({kinds}: {list(stochastic)}); a law of motion can "
                "read the next value of those only (the draw made after the decision)."
            )
        if x in stochastic:
            raise ModelInitializationError(
                f"{where}, the next value of the stochastic state {x!r}; only the law of "
                "motion of a continuous state (one function in state_transitions, not a "
                "helper, a constraint, a discrete state's law or a dict by target regime) "
                f"can read it. Pass {argument!r} to that law of motion directly."
            )
        raise ModelInitializationError(
            f"{where}, named like the next value of state {x!r}; only the law of motion of "
            f"a continuous state can read next values, and only of the regime's {kinds} "
            f"({list(stochastic)}). Rename the argument if it is a parameter."
        )


def _check_aggregators(plans: Mapping[str, RegimePlan]) -> None:
    """A non-terminal regime and the non-terminal regimes it can reach share one aggregator:
    their values are in the same units (an Epstein–Zin value, a present-biased `W`)."""
    for name, plan in plans.items():
        for target in plan.targets:
            other = plans[target]
            if other.is_terminal or other.aggregator == plan.aggregator:
                continue
            raise ModelInitializationError(
                f"Regime {name!r} (aggregator {plan.aggregator!r}) can move to regime "
                f"{target!r} (aggregator {other.aggregator!r}); a regime and the non-terminal "
                "regimes it can reach must have the same aggregator."
            )


def _per_target(name, state, by_target, regimes, resolve_function) -> StateTransition:
    """A law of motion of `state` that depends on the regime moved to (a function, or a
    `MarkovTransition`, by target regime)."""
    resolved, markov = {}, set()
    for target, fn in by_target.items():
        if target not in regimes:
            raise ModelInitializationError(
                f"Regime {name!r}: state_transitions[{state!r}] names the target {target!r}, "
                f"which is not a regime of the model (regimes: {list(regimes)})."
            )
        if state not in regimes[target].states:
            raise ModelInitializationError(
                f"Regime {name!r}: state_transitions[{state!r}][{target!r}] is a law of "
                f"motion into regime {target!r}, which has no state {state!r} (its states: "
                f"{list(regimes[target].states)})."
            )
        if isinstance(fn, MarkovTransition):
            if not regimes[target].states[state].is_discrete:
                raise ModelInitializationError(
                    f"Regime {name!r}: state_transitions[{state!r}][{target!r}] is a "
                    f"MarkovTransition, but {state!r} is continuous in regime {target!r}; "
                    "stochastic transitions need a discrete grid."
                )
            markov.add(target)
            fn = fn.fn
        resolved[target] = resolve_function(fn, f"next_{state}")
    return StateTransition(state, None, False, None, resolved, frozenset(markov))


def _grid_of(regimes: Mapping[str, Regime], state: str) -> AbstractGrid:
    for regime in regimes.values():
        if state in regime.states:
            return regime.states[state]
    raise KeyError(state)


def _active_periods(name: str, active, n_periods: int, has_ages: bool, ages) -> frozenset[int]:
    if active is None:
        return frozenset(range(n_periods))
    if callable(active):
        periods = {p for p in range(n_periods) if _is_active(name, active, p, has_ages, ages)}
    else:
        periods = set(active)
        outside = sorted(p for p in periods if not 0 <= p < n_periods)
        if outside:
            raise ModelInitializationError(
                f"Regime {name!r}: active periods {outside} are outside 0..{n_periods - 1}."
            )
    if not periods:
        raise ModelInitializationError(f"Regime {name!r} is active in no period.")
    return frozenset(periods)


def _is_active(name: str, active, period: int, has_ages: bool, ages) -> bool:
    """`active(...)` in `period`, its arguments resolved by name like any user function."""
    arguments = argument_names(active, regime=name, key="active")
    other = [a for a in arguments if a not in SPECIAL_ARGUMENTS]
    if other:
        raise ModelInitializationError(
            f"Regime {name!r}: active takes {other}, but it may only take 'period' and/or "
            "'age' (by name), e.g. `active=lambda age: age < 65`."
        )
    if "age" in arguments and not has_ages:
        raise ModelInitializationError(
            f"Regime {name!r}: active uses 'age', but the model has no ages; pass "
            "ages=AgeGrid(...) to Model."
        )
    values = {"period": period, "age": ages.age(period) if ages is not None else None}
    flag = active(**{a: values[a] for a in arguments})
    array = np.asarray(flag)
    if array.shape != () or array.dtype.kind not in "biu":
        raise ModelInitializationError(
            f"Regime {name!r}: active({', '.join(f'{a}={values[a]}' for a in arguments)}) "
            f"must return a bool, got {flag!r}."
        )
    return bool(array)


def _segments(plans: Mapping[str, RegimePlan], n_periods: int) -> tuple[Segment, ...]:
    segments: list[Segment] = []
    for period in range(n_periods):
        active = tuple(n for n, p in plans.items() if period in p.active)
        if segments and segments[-1].regimes == active:
            last = segments[-1]
            segments[-1] = Segment(last.start, period + 1, active)
        else:
            segments.append(Segment(period, period + 1, active))
    return tuple(segments)
