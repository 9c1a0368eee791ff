"""Regimes of equal structure: traced once and mapped over their stacked parameters.

Two regimes have the same structure where everything that shapes their period's program
is equal: states, actions and grids, the user functions (the same code with the same
defaults and closures), constraints, transitions, the regimes they can move to, the
active periods and the taste shocks. They may differ in their name, their id and the
values of their parameters. A solver may then trace one member's period problem with
each member's parameters as a mapped input (`jax.vmap` over a leading member axis), so
that tracing and XLA compilation happen once per group, not once per regime.

The key is computed from the plan (host values only); a function is compared by its
code object, defaults, closure and globals, never by calling it. Anything not
recognised is compared by identity, so two regimes are grouped only where they are
certainly the same program.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._model._plan import RegimePlan

if TYPE_CHECKING:  # pragma: no cover
    from ._kernel import RegimeProblem

# Leaves of this size or less are compared by value inside a key (grids' points,
# constants captured in a closure); larger ones by identity.
_VALUE_BYTES = 2**16


def regime_structure(regime: RegimePlan) -> Hashable:
    """A hashable key equal for two regimes of the same structure (see the module)."""
    transitions = tuple(
        (
            name,
            _function_key(t.function),
            t.is_markov,
            t.precontract,
            tuple((k, _function_key(f)) for k, f in t.per_target.items()),
            tuple(sorted(t.per_target_markov)),
            t.draws,
        )
        for name, t in regime.state_transitions.items()
    )
    return (
        regime.states,
        regime.actions,
        tuple((name, _value_key(grid)) for name, grid in regime.grids.items()),
        tuple((name, _function_key(f)) for name, f in regime.helpers.items()),
        _function_key(regime.utility),
        tuple((name, _function_key(f)) for name, f in regime.constraints.items()),
        transitions,
        _function_key(regime.next_regime),
        regime.next_regime_is_markov,
        tuple(sorted(regime.active)),
        regime.taste_shocks,
        regime.targets,
        tuple((k, tuple(v)) for k, v in regime.parameters.items()),
        regime.regime_parameters,
        _value_key(regime.aggregator),
    )


def structure_groups(regimes: Sequence[RegimePlan]) -> list[list[int]]:
    """The indices of `regimes` grouped by equal structure, in order of their first
    member (each index once)."""
    groups: dict[Hashable, list[int]] = {}
    for i, regime in enumerate(regimes):
        groups.setdefault(regime_structure(regime), []).append(i)
    return list(groups.values())


def stacked_params(members: Sequence[Any]) -> tuple[Any, Any] | None:
    """The members' parameter trees as one tree for `jax.vmap`: each leaf that is the
    same object in every member as it is (axis None), the others stacked along a new
    leading axis (axis 0); and those axes. None where the trees differ in structure or
    a leaf in shape or dtype (then the members cannot share one program)."""
    flat = [jax.tree.flatten(m) for m in members]
    tree = flat[0][1]
    if len({t for _, t in flat}) != 1:
        return None
    leaves: list[Any] = []
    axes: list[int | None] = []
    for column in zip(*(f for f, _ in flat), strict=True):
        first = column[0]
        if all(leaf is first for leaf in column[1:]):
            leaves.append(first)
            axes.append(None)
            continue
        shapes = {(np.shape(leaf), _dtype(leaf)) for leaf in column}
        if len(shapes) != 1:
            return None
        if all(isinstance(leaf, np.ndarray | np.generic | int | float) for leaf in column):
            leaves.append(np.stack([np.asarray(leaf) for leaf in column]))
        else:
            leaves.append(jnp.stack([jnp.asarray(leaf) for leaf in column]))
        axes.append(0)
    return jax.tree.unflatten(tree, leaves), jax.tree.unflatten(tree, axes)


Part = tuple[list[int], tuple[Any, Any] | None]


def member_parts(
    problems: list[RegimeProblem], alone: Callable[[RegimeProblem], bool] | None = None
) -> list[Part]:
    """The indices of `problems` in parts: the regimes that have no structural twin
    among them (one part; stacked None), and each group of
    equal structure whose parameters stack (the stacked parameters and their `vmap`
    axes, `stacked_params`). `alone`: the problems that join no group (a solver's
    exclusions, e.g. a regime with a sharded axis)."""
    if len(problems) < 2:
        return [(list(range(len(problems))), None)]
    singles: list[int] = []
    groups: list[Part] = []
    for indices in structure_groups([p.regime for p in problems]):
        if alone is not None:
            singles.extend(i for i in indices if alone(problems[i]))
            indices = [i for i in indices if not alone(problems[i])]
            if not indices:
                continue
        stacked = (
            stacked_params([problems[i].params for i in indices]) if len(indices) > 1 else None
        )
        if stacked is None or not _same_context(problems, indices):
            singles.extend(indices)
        else:
            groups.append((indices, stacked))
    return ([(sorted(singles), None)] if singles else []) + groups


def _same_context(problems: list[RegimeProblem], indices: list[int]) -> bool:
    """Whether the members' problems differ in nothing but their regime and parameters
    (the same period, checks and readers' targets), so that one member's problem with
    each member's parameters is each member's problem."""
    first = problems[indices[0]]
    return all(
        problems[i].validate == first.validate
        and problems[i].last_period == first.last_period
        and problems[i].period is first.period
        and problems[i].next_policies.keys() == first.next_policies.keys()
        for i in indices[1:]
    )


def _dtype(leaf) -> str:
    dtype = getattr(leaf, "dtype", None)
    return str(dtype) if dtype is not None else type(leaf).__name__


def _function_key(resolved) -> Hashable:
    """The key of a `ResolvedFunction` (or None): its classification and its code."""
    if resolved is None:
        return None
    return (
        resolved.key,
        _callable_key(resolved.fn),
        resolved.inputs,
        resolved.helpers,
        resolved.params,
        resolved.arguments,
        tuple((name, _value_key(default)) for name, default in resolved.defaults),
    )


def _callable_key(fn) -> Hashable:
    if isinstance(fn, functools.partial):
        return (
            "partial",
            _callable_key(fn.func),
            tuple(_value_key(a) for a in fn.args),
            tuple((k, _value_key(v)) for k, v in sorted(fn.keywords.items())),
        )
    if isinstance(fn, types.FunctionType):
        closure = tuple(_value_key(cell.cell_contents) for cell in fn.__closure__ or ())
        return (
            "function",
            fn.__code__,
            tuple(_value_key(d) for d in fn.__defaults__ or ()),
            tuple((k, _value_key(v)) for k, v in sorted((fn.__kwdefaults__ or {}).items())),
            closure,
            id(fn.__globals__),
        )
    return ("object", id(fn))


def _value_key(value) -> Hashable:
    """A key of a value captured by a function or held by the plan: by value for
    numbers, strings, enums, small arrays, tuples, mappings and equinox modules (their
    leaves and static structure), by code for functions, else by identity."""
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__qualname__, value.name, value.value)
    if isinstance(value, types.FunctionType | functools.partial):
        return _callable_key(value)
    if isinstance(value, np.ndarray | np.generic):
        if value.nbytes <= _VALUE_BYTES and value.dtype != object:
            return ("array", value.shape, str(value.dtype), value.tobytes())
        return ("object", id(value))
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_value_key(v) for v in value))
    if isinstance(value, Mapping):
        return ("mapping", tuple((k, _value_key(v)) for k, v in value.items()))
    if isinstance(value, jax.Array):
        try:
            return _value_key(np.asarray(value))
        except Exception:  # a tracer: by identity
            return ("object", id(value))
    if isinstance(value, eqx.Module):
        leaves, tree = jax.tree.flatten(value)
        try:
            hash(tree)
        except TypeError:
            return ("object", id(value))
        return ("module", tree, tuple(_value_key(leaf) for leaf in leaves))
    return ("object", id(value))
