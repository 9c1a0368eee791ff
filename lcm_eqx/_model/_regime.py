"""The specification of one regime: plain user functions plus grids."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import equinox as eqx

from .._errors import ModelInitializationError
from .._grids import AbstractGrid
from ._aggregator import AbstractAggregator
from ._markov import ExtremeValueShocks, MarkovTransition

# Where the solver interface lives. The spec sits below the engine and must not import
# it; a solver instance can only exist once its interface module has been imported. The
# package is named by this module's own (not spelled `lcm_eqx`), so that a copy of the
# library imported under another name (benchmarks/versus.py) checks its own solvers.
_SOLVER_INTERFACE = (f"{__name__.partition('.')[0]}._solve._solver", "AbstractSolver")


def _is_solver(candidate: object) -> bool:
    """Whether `candidate` is an lcm_eqx solver, without importing the engine.

    An instance of a subclass of `AbstractSolver` implies that the interface module is in
    `sys.modules`; if it is not, nothing can be a solver yet.
    """
    module_name, class_name = _SOLVER_INTERFACE
    interface = sys.modules.get(module_name)
    return interface is not None and isinstance(candidate, getattr(interface, class_name))


class Regime(eqx.Module):
    """One regime of a life-cycle model (working, retired, dead, ...).

    Args:
        functions: user functions by name; must hold `"utility"`. Other entries are
            helpers whose outputs other functions use as arguments (a DAG by name).
        states: state grids by name; value arrays have one axis per state in this order.
        actions: action grids by name.
        state_transitions: next value of each state, by state name: a function, a
            `MarkovTransition` returning probabilities over the target grid's points, or a
            dict `{target regime: function}` when the law of motion depends on the regime
            moved to (every regime with the state that can follow needs an entry).
        transition: the next regime id (a function returning a member of the model's
            `regime_ids`) or a `MarkovTransition` over all regimes; `None` makes the
            regime terminal.
        constraints: functions returning `True` where an action is feasible.
        active: the periods in which the regime is active: an iterable of periods or a
            function of `period` and/or `age` (resolved by name, like any user function)
            returning a bool, e.g. `lambda age: age < 65`; `None` means every period.
            An action whose transition puts probability on this regime in a period
            where it is inactive is never chosen (infeasible, like one a constraint
            rules out).
        taste_shocks: `ExtremeValueShocks()` for EV1 shocks on the discrete actions.
        solver: how this regime's problem is solved (`GridSearch()`, `DCEGM(...)`);
            `None` uses the model's `solver`.
        aggregator: how utility and the continuation combine: `EpsteinZin()` or
            `PresentBias(kind=...)`; `None` is the additive `u + β·E[V']`.

    Example:
        >>> retired = Regime(
        ...     states={"wealth": LinSpacedGrid(1.0, 100.0, 50)},
        ...     actions={"consumption": LinSpacedGrid(1.0, 100.0, 200)},
        ...     functions={"utility": lambda consumption: jnp.log(consumption)},
        ...     state_transitions={"wealth": lambda wealth, consumption: wealth - consumption},
        ...     transition=lambda: RegimeId.retired,
        ...     constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        ... )
    """

    functions: dict[str, Callable]
    states: dict[str, AbstractGrid]
    actions: dict[str, AbstractGrid]
    state_transitions: dict[str, Callable | MarkovTransition | dict[str, Callable]]
    transition: Callable | MarkovTransition | None
    constraints: dict[str, Callable]
    active: Callable[..., bool] | tuple[int, ...] | None = eqx.field(static=True)
    taste_shocks: ExtremeValueShocks | None
    solver: Any
    aggregator: AbstractAggregator | None

    def __init__(
        self,
        *,
        functions: Mapping[str, Callable],
        states: Mapping[str, AbstractGrid] | None = None,
        actions: Mapping[str, AbstractGrid] | None = None,
        state_transitions: Mapping[str, Callable | MarkovTransition | Mapping[str, Callable]]
        | None = None,
        transition: Callable | MarkovTransition | None = None,
        constraints: Mapping[str, Callable] | None = None,
        active: Callable[..., bool] | Iterable[int] | None = None,
        taste_shocks: ExtremeValueShocks | None = None,
        solver: Any = None,
        aggregator: AbstractAggregator | None = None,
    ):
        self.functions = _as_dict(functions, "functions")
        self.states = _as_dict(states, "states")
        self.actions = _as_dict(actions, "actions")
        self.state_transitions = {
            state: dict(fn) if isinstance(fn, Mapping) else fn
            for state, fn in _as_dict(state_transitions, "state_transitions").items()
        }
        self.transition = transition
        self.constraints = _as_dict(constraints, "constraints")
        if active is not None and not callable(active):
            try:
                active = tuple(sorted(int(p) for p in active))
            except (TypeError, ValueError) as error:
                raise ModelInitializationError(
                    "Regime(...): active must be None, an iterable of periods or a function of "
                    f"period and/or age returning a bool, got {active!r}."
                ) from error
        self.active = active
        self.taste_shocks = taste_shocks
        self.solver = solver
        self.aggregator = aggregator

    def __check_init__(self):
        if "utility" not in self.functions:
            raise ModelInitializationError(
                "Regime(...): functions must contain 'utility'; got functions "
                f"{sorted(self.functions)} (states {sorted(self.states)}, "
                f"actions {sorted(self.actions)})."
            )
        for state, by_target in self.state_transitions.items():
            if not isinstance(by_target, Mapping):
                continue
            if not by_target:
                raise ModelInitializationError(
                    f"Regime(...): state_transitions[{state!r}] is an empty dict; give "
                    "{target regime: function} or one function."
                )
            for target, fn in by_target.items():
                if not isinstance(target, str):
                    raise ModelInitializationError(
                        f"Regime(...): the keys of state_transitions[{state!r}] must be regime "
                        f"names, got {target!r}."
                    )
                if not (isinstance(fn, MarkovTransition) or callable(fn)):
                    raise ModelInitializationError(
                        f"Regime(...): state_transitions[{state!r}][{target!r}] must be a function "
                        f"or a MarkovTransition, got {fn!r}."
                    )
        for group in ("functions", "state_transitions", "constraints"):
            for name, fn in getattr(self, group).items():
                if group == "state_transitions" and isinstance(fn, Mapping):
                    continue
                if not (callable(fn) or isinstance(fn, MarkovTransition)):
                    raise ModelInitializationError(
                        f"Regime(...): {group}[{name!r}] must be a function, got {fn!r}."
                    )
        for group in ("states", "actions"):
            for name, grid in getattr(self, group).items():
                if not isinstance(grid, AbstractGrid):
                    raise ModelInitializationError(
                        f"Regime(...): {group}[{name!r}] must be an lcm_eqx grid, got {grid!r}."
                    )
        for name, fn in self.functions.items():
            if isinstance(fn, MarkovTransition):
                raise ModelInitializationError(
                    f"Regime(...): functions[{name!r}] is a MarkovTransition; those belong in "
                    "state_transitions or transition."
                )
        if self.transition is not None and not (
            callable(self.transition) or isinstance(self.transition, MarkovTransition)
        ):
            raise ModelInitializationError(
                f"Regime(...): transition must be a function, a MarkovTransition or None, "
                f"got {self.transition!r}."
            )
        if self.solver is not None and not _is_solver(self.solver):
            raise ModelInitializationError(
                f"Regime(...): solver must be None or an lcm_eqx solver such as GridSearch() or "
                f"DCEGM(...), got {self.solver!r}."
            )
        if self.aggregator is not None and not isinstance(self.aggregator, AbstractAggregator):
            raise ModelInitializationError(
                "Regime(...): aggregator must be None or an lcm_eqx aggregator such as "
                f"EpsteinZin() or PresentBias(kind='naive'), got {self.aggregator!r}."
            )
        if self.taste_shocks is not None and not isinstance(self.taste_shocks, ExtremeValueShocks):
            raise ModelInitializationError(
                "Regime(...): taste_shocks must be None or ExtremeValueShocks(), got "
                f"{self.taste_shocks!r}."
            )

    def replace(self, **changes) -> Regime:
        """A copy of the regime with the given constructor arguments replaced.

        Example:
            >>> early = retired.replace(active=range(0, 5))
            >>> richer = retired.replace(states={"wealth": LinSpacedGrid(1.0, 500.0, 80)})
        """
        # Every constructor argument is stored under its own name.
        fields = tuple(inspect.signature(type(self).__init__).parameters)[1:]
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise ModelInitializationError(
                f"Regime.replace: unknown arguments {unknown}; a Regime takes {list(fields)}."
            )
        return type(self)(**{name: changes.get(name, getattr(self, name)) for name in fields})

    @property
    def is_terminal(self) -> bool:
        """A terminal regime has no transition: its value is the best current utility."""
        return self.transition is None


def _as_dict(value, argument: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelInitializationError(
            f"Regime(...): {argument} must be a dict by name, got {type(value).__name__}."
        )
    for key in value:
        if not isinstance(key, str) or not key.isidentifier():
            raise ModelInitializationError(
                f"Regime(...): the keys of {argument} must be valid Python identifiers, "
                f"got {key!r}."
            )
    return dict(value)
