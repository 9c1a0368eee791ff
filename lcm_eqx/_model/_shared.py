"""Model-level functions and state transitions that the regimes share.

`Model(functions=..., state_transitions=...)` is spelling only: before the plan is
built, each regime is given the shared entries it uses, and everything downstream sees
ordinary regimes. Like parameters, an entry lives at exactly one level: a regime that
defines a shared name itself is an error naming both levels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .._errors import ModelInitializationError
from ._dag import argument_names
from ._markov import MarkovTransition
from ._regime import Regime


def with_shared(
    regimes: Mapping[str, Regime],
    functions: Mapping[str, Callable] | None,
    state_transitions: Mapping[str, object] | None,
) -> Mapping[str, Regime]:
    """The regimes with the shared entries each of them uses.

    - a shared state transition goes to every non-terminal regime that has the state;
    - a shared function goes to every regime whose own functions, constraints or
      transitions (or other shared functions it gets) take an argument of that name,
      unless the name is one of the regime's states or actions (which come first in the
      lookup by name); a shared `discount_factor` goes to every non-terminal regime.
    """
    if functions is None and state_transitions is None:
        return regimes
    functions = _checked(functions, "functions")
    state_transitions = _checked(state_transitions, "state_transitions")
    for key, fn in functions.items():
        if key == "utility":
            raise ModelInitializationError(
                "Model: functions['utility'] is not shared; utility is each regime's own "
                "(Regime(functions={'utility': ...}))."
            )
        if not callable(fn) or isinstance(fn, MarkovTransition):
            raise ModelInitializationError(
                f"Model: functions[{key!r}] must be a function, got {fn!r}."
            )
    if not isinstance(regimes, Mapping):
        return regimes  # the plan reports it
    return {
        name: _with_shared(name, regime, functions, state_transitions)
        if isinstance(regime, Regime)
        else regime
        for name, regime in regimes.items()
    }


def _checked(entries, argument: str) -> dict:
    if entries is None:
        return {}
    if not isinstance(entries, Mapping):
        raise ModelInitializationError(
            f"Model: {argument} must be a dict by name, got {type(entries).__name__}."
        )
    for key in entries:
        if not isinstance(key, str) or not key.isidentifier():
            raise ModelInitializationError(
                f"Model: the keys of {argument} must be valid Python identifiers, got {key!r}."
            )
    return dict(entries)


def _with_shared(name: str, regime: Regime, functions: dict, state_transitions: dict) -> Regime:
    for group, shared in (("functions", functions), ("state_transitions", state_transitions)):
        for key in shared:
            if key in getattr(regime, group):
                raise ModelInitializationError(
                    f"Regime {name!r}: {group}[{key!r}] is defined both by the Model "
                    f"(Model({group}=...)) and by the regime (Regime({group}=...)); an entry "
                    "lives at exactly one level. Remove one, or move the shared entry into "
                    "the regimes that use it."
                )
    own_transitions = dict(regime.state_transitions)
    if not regime.is_terminal:
        for state, transition in state_transitions.items():
            if state in regime.states:
                own_transitions[state] = transition
    variables = set(regime.states) | set(regime.actions)
    own_functions = dict(regime.functions)
    needed = _arguments(
        name,
        [*own_functions.items(), *regime.constraints.items(), *_callables(own_transitions)],
    )
    if regime.transition is not None:
        needed |= _arguments(name, _callables({"regime": regime.transition}))
        needed.add("discount_factor")  # the Bellman equation reads it, if shared
    # In the order of `functions` (a set's order varies between Python processes).
    pending = [n for n in functions if n in needed and n not in variables][::-1]
    while pending:
        key = pending.pop()
        if key in own_functions:
            continue
        own_functions[key] = functions[key]
        more = _arguments(name, [(key, functions[key])])
        pending += [n for n in functions if n in more and n not in variables][::-1]
    if own_functions == regime.functions and own_transitions == regime.state_transitions:
        return regime
    return regime.replace(functions=own_functions, state_transitions=own_transitions)


def _callables(transitions: Mapping[str, object]) -> list[tuple[str, object]]:
    """`(next_<state>, function)` inside transitions (Markov ones unwrapped, per-target
    ones split)."""
    out = []
    for key, transition in transitions.items():
        entries = transition.values() if isinstance(transition, Mapping) else [transition]
        for fn in entries:
            fn = fn.fn if isinstance(fn, MarkovTransition) else fn
            out.append((f"next_{key}", fn))
    return out


def _arguments(regime: str, fns: Iterable[tuple[str, object]]) -> set[str]:
    names: set[str] = set()
    for key, fn in fns:
        if callable(fn):
            names |= set(argument_names(fn, regime=regime, key=key))
    return names
