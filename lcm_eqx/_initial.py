"""Initial conditions of `simulate` and `distribution`: the regimes, states and entry
periods each subject starts from, checked against the model (a state's codes, a
process's node values, the regimes active at entry) and encoded, eagerly or inside the
caller's `jax.jit` (`encode_initial_conditions`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ._errors import InvalidInitialConditionsError
from ._grids import (
    INDEX_SUFFIX,
    AbstractProcessGrid,
    AgeGrid,
    DiscreteGrid,
    state_spellings,
    unknown_states_message,
)
from ._model._params import resolve_params
from ._model._plan import ModelPlan
from ._simulate._simulate import variable_kinds
from ._validation import enforce


class _ValueChecks:
    """Checks on the values of initial conditions: raised at once when the values are
    concrete; when they are traced (arguments of the caller's `jax.jit`), collected as
    flags and reported by `enforce` inside the program, with the same messages."""

    def __init__(self):
        self.failed: list[jax.Array] = []
        self.messages: list[str] = []

    def require(self, ok, message: str) -> None:
        if isinstance(ok, jax.core.Tracer):
            self.failed.append(~ok)
            self.messages.append(message)
        elif not bool(ok):
            raise InvalidInitialConditionsError(message)

    def enforce(self) -> None:
        if not self.failed:
            return
        names = tuple(f"{i}:initial" for i in range(len(self.failed)))
        enforce(
            "raise",  # like the eager checks: bad initial conditions always raise
            {"initial_conditions": jnp.stack(self.failed).astype(jnp.zeros(()).dtype)[None]},
            {"initial_conditions": names},
            texts=dict(zip(names, self.messages, strict=True)),
        )


def _xp(*arrays):
    """`jax.numpy` if any of the arrays is traced, else `numpy`."""
    return jnp if any(isinstance(a, jax.core.Tracer) for a in arrays) else np


def process_nodes(plan: ModelPlan, params) -> dict[str, dict[str, np.ndarray | jax.Array]]:
    """The node values of every process state, by regime (they may depend on params:
    traced ones under the caller's `jax.jit` stay JAX arrays; `params` None: the grids'
    own, which only grids without parameters have)."""
    nodes: dict[str, dict[str, np.ndarray | jax.Array]] = {}
    resolved = None
    for name, regime in plan.regimes.items():
        for state in regime.states:
            grid = regime.grids[state]
            if isinstance(grid, AbstractProcessGrid):
                if params is None:
                    if grid.free_parameters():
                        raise InvalidInitialConditionsError(
                            f"initial_mass: the nodes of the process state {state!r} depend "
                            f"on the parameters {list(grid.free_parameters())}; pass params "
                            f"to read its node values, or give grid indices under "
                            f"{state + INDEX_SUFFIX!r}."
                        )
                    values = {}
                else:
                    if resolved is None:
                        resolved = resolve_params(plan, params)
                    values = resolved[name].get(f"next_{state}", {})
                points, _ = grid.discretize(values)
                nodes.setdefault(name, {})[state] = (
                    points if isinstance(points, jax.core.Tracer) else np.asarray(points)
                )
    return nodes


def encode_initial_conditions(
    plan: ModelPlan,
    initial_conditions,
    ages: AgeGrid | None,
    process_nodes: Callable[[], dict[str, dict[str, np.ndarray | jax.Array]]],
):
    """Regime ids, states (codes or values) and entry periods of the subjects.

    `process_nodes()` returns the node values of the process states by regime (called
    only when a process state is given as values).
    """
    checks = _ValueChecks()
    try:
        if isinstance(initial_conditions, pd.DataFrame):
            initial_conditions = {c: initial_conditions[c].to_numpy() for c in initial_conditions}
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(initial_conditions, Mapping):
        raise InvalidInitialConditionsError(
            "simulate: initial_conditions must be a dict of arrays or a pandas DataFrame, got "
            f"{type(initial_conditions).__name__}."
        )
    if "regime" not in initial_conditions:
        hint = (
            " (pylcm's 'regime_id' is spelled 'regime' here)"
            if "regime_id" in initial_conditions
            else ""
        )
        raise InvalidInitialConditionsError(
            f"simulate: initial_conditions needs a 'regime' entry (ids or names){hint}."
        )
    state_kinds, _ = variable_kinds(plan)
    process_states = {s for s in state_kinds if isinstance(plan.state_grid(s), AbstractProcessGrid)}
    known = {"regime", "age", *state_kinds, *(s + INDEX_SUFFIX for s in process_states)}
    unknown = [k for k in initial_conditions if k not in known]
    if unknown:
        raise InvalidInitialConditionsError(
            unknown_states_message(
                "simulate: initial_conditions", unknown, list(state_kinds), process_states
            )
            + ", plus 'regime' and 'age'."
        )
    raw_regime = _as_array("regime", initial_conditions["regime"])
    if raw_regime.ndim != 1 or raw_regime.shape[0] == 0:
        raise InvalidInitialConditionsError(
            "simulate: initial_conditions['regime'] must be a non-empty 1-d array."
        )
    n = raw_regime.shape[0]
    names = plan.names
    ids = {name: plan.regimes[name].id for name in names}
    if raw_regime.dtype.kind in "OUS":
        bad = sorted({str(r) for r in raw_regime if str(r) not in ids})
        if bad:
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions['regime'] has unknown regime names {bad}; "
                f"the regimes are {list(names)}."
            )
        regime: np.ndarray | jax.Array = np.array([ids[str(r)] for r in raw_regime], dtype=np.int32)
    else:
        xp = _xp(raw_regime)
        xp = _xp(raw_regime)
        regime = raw_regime.astype(np.int32)
        checks.require(
            xp.all(regime == raw_regime) & xp.all((regime >= 0) & (regime < len(names))),
            f"simulate: initial_conditions['regime'] must hold regime ids 0..{len(names) - 1} "
            "or regime names.",
        )
    xp = _xp(regime)
    entry = _entry_periods(plan, initial_conditions, ages, n)
    if "age" not in initial_conditions:  # everyone enters in period 0 (regime may be traced)
        for name, regime_plan in plan.regimes.items():
            if 0 not in regime_plan.active:
                checks.require(
                    ~xp.any(regime == regime_plan.id),
                    f"simulate: regime {name!r} is not active in period 0, but subjects start "
                    "in it.",
                )
    else:
        for name, regime_plan in plan.regimes.items():
            starting = np.asarray(regime) == regime_plan.id
            inactive = sorted({int(p) for p in entry[starting] if int(p) not in regime_plan.active})
            if inactive:
                when = f"period {inactive[0]}" + (
                    f" (age {ages.age(inactive[0]):g})" if ages is not None else ""
                )
                raise InvalidInitialConditionsError(
                    f"simulate: regime {name!r} is not active in {when}, but subjects start in it."
                )
    dtype = jnp.zeros(()).dtype
    states: dict[str, np.ndarray | jax.Array] = {}
    for state, discrete in state_kinds.items():
        given, both = state_spellings("simulate: initial_conditions", state, initial_conditions)
        if both:
            raise InvalidInitialConditionsError(both)
        if not given:
            for name, regime_plan in plan.regimes.items():
                if state in regime_plan.states:
                    checks.require(
                        ~xp.any(regime == regime_plan.id),
                        f"simulate: initial_conditions lacks state {state!r}, which regime "
                        f"{name!r} needs.",
                    )
            states[state] = np.zeros(n, np.int32 if discrete else dtype)
            continue
        values = _as_array(given[0], initial_conditions[given[0]])
        if values.shape != (n,):
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions[{given[0]!r}] has shape {values.shape}, expected "
                f"({n},) like 'regime'."
            )
        grid = plan.state_grid(state)
        if state in process_states and given[0] == state:
            states[state] = _process_codes(plan, state, values, regime, process_nodes(), checks)
        elif discrete:
            states[state] = _codes(given[0], grid, values, checks)
        else:
            message = f"simulate: initial_conditions[{state!r}] must be finite numbers."
            if values.dtype.kind not in "fiu":
                raise InvalidInitialConditionsError(message)
            checks.require(_xp(values).all(_xp(values).isfinite(values)), message)
            states[state] = values.astype(dtype)
    checks.enforce()
    return regime, states, entry


def _entry_periods(plan: ModelPlan, initial_conditions, ages, n: int) -> np.ndarray:
    """Each subject's first period, from the optional `age` entry (default: period 0)."""
    if "age" not in initial_conditions:
        return np.zeros(n, np.int32)
    if ages is None:
        raise InvalidInitialConditionsError(
            "simulate: initial_conditions['age'] needs a model with ages; pass "
            "ages=AgeGrid(...) to Model."
        )
    values = _as_array("age", initial_conditions["age"])
    if values.shape != (n,):
        raise InvalidInitialConditionsError(
            f"simulate: initial_conditions['age'] has shape {values.shape}, expected ({n},) "
            "like 'regime'."
        )
    if values.dtype.kind not in "fiu" or not np.all(np.isfinite(values)):
        raise InvalidInitialConditionsError(
            "simulate: initial_conditions['age'] must be finite numbers."
        )
    horizon = [ages.age(t) for t in range(plan.n_periods)]
    entry = np.empty(n, np.int32)
    for i, age in enumerate(values.astype(float)):
        try:
            period = ages.period(age)
        except ValueError:
            period = -1
        if not 0 <= period < plan.n_periods:
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions['age'] has {age:g} (subject {i}), which is not "
                f"an age of the model (ages {horizon[0]:g} to {horizon[-1]:g} in steps of "
                f"{ages.step:g})."
            )
        entry[i] = period
    return entry


def _process_codes(
    plan: ModelPlan, state: str, values, regime, nodes, checks: _ValueChecks
) -> np.ndarray | jax.Array:
    """Grid indices of process-state values: each must be a node (within a tolerance) of
    the grid in the subject's initial regime; nothing is rounded to the nearest node."""
    if values.dtype.kind not in "fiu":
        raise InvalidInitialConditionsError(
            f"simulate: initial_conditions[{state!r}] must hold the node values of {state!r} "
            f"(numbers), or give grid indices under {state + INDEX_SUFFIX!r}."
        )
    if _xp(values, regime, *(n[state] for n in nodes.values() if state in n)) is jnp:
        return _traced_process_codes(plan, state, values, regime, nodes, checks)
    values = values.astype(float)
    codes = np.zeros(values.shape, np.int32)
    for name, regime_plan in plan.regimes.items():
        rows = np.nonzero(regime == regime_plan.id)[0]
        if state not in regime_plan.states or rows.size == 0:
            continue
        points = np.asarray(nodes[name][state], dtype=float)
        tolerance = 1e-6 * max(1.0, float(np.max(np.abs(points))))
        distance = np.abs(values[rows, None] - points[None, :])
        nearest = np.argmin(distance, axis=1)
        off = ~(distance[np.arange(rows.size), nearest] <= tolerance)
        if np.any(off):
            i = int(rows[np.argmax(off)])
            value = values[i]
            below = points[points <= value]
            above = points[points >= value]
            neighbours = [f"{x:.6g}" for x in (*below[-1:], *above[:1])] or [f"{points[0]:.6g}"]
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions[{state!r}] has {value:.6g} (subject {i}, "
                f"regime {name!r}), which is not a node of {state!r}; the nearest nodes are "
                f"{' and '.join(neighbours)} (all: {[float(f'{x:.6g}') for x in points]}). "
                "Process states are given as node values, as user functions and "
                f"to_dataframe show them; give grid indices under {state + INDEX_SUFFIX!r}."
            )
        codes[rows] = nearest
    return codes


def _traced_process_codes(plan: ModelPlan, state: str, values, regime, nodes, checks):
    """`_process_codes` where the values, the regimes or the nodes are traced (the nodes
    depend on the parameters, which the caller's `jax.jit` traces): the same nearest
    node, and the same check inside the program, whose message cannot name the
    subject."""
    values = jnp.asarray(values, jnp.zeros(()).dtype)
    codes = jnp.zeros(values.shape, jnp.int32)
    for name, regime_plan in plan.regimes.items():
        if state not in regime_plan.states:
            continue
        points = jnp.asarray(nodes[name][state], values.dtype)
        tolerance = 1e-6 * jnp.maximum(1.0, jnp.max(jnp.abs(points)))
        distance = jnp.abs(values[:, None] - points[None, :])
        nearest = jnp.argmin(distance, axis=1).astype(jnp.int32)
        here = regime == regime_plan.id
        checks.require(
            jnp.all(~here | (jnp.min(distance, axis=1) <= tolerance)),
            f"simulate: initial_conditions[{state!r}] has a value that is not a node of "
            f"{state!r} in regime {name!r} (at these parameters). Process states are given "
            "as node values, as user functions and to_dataframe show them; give grid "
            f"indices under {state + INDEX_SUFFIX!r}.",
        )
        codes = jnp.where(here, nearest, codes)
    return codes


def _as_array(name: str, values) -> np.ndarray | jax.Array:
    if isinstance(values, jax.core.Tracer):
        return values
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as error:
        raise InvalidInitialConditionsError(
            f"simulate: initial_conditions[{name!r}] must be a 1-d array, got {values!r:.80}."
        ) from error


def _codes(state, grid, values, checks: _ValueChecks) -> np.ndarray | jax.Array:
    n_points = grid.n_points
    if values.dtype.kind in "OUS":
        if not isinstance(grid, DiscreteGrid):
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions[{state!r}] has labels, but {state!r} is a "
                f"{type(grid).__name__}; give grid indices 0..{n_points - 1}."
            )
        codes, bad = grid.codes_of(values)
        if bad:
            raise InvalidInitialConditionsError(
                f"simulate: initial_conditions[{state!r}] has unknown labels {bad}; valid: "
                f"{list(grid.labels)}."
            )
        return codes
    kind = "codes" if not isinstance(grid, AbstractProcessGrid) else "grid indices"
    message = (
        f"simulate: initial_conditions[{state!r}] must hold {kind} 0..{n_points - 1}"
        + (f" or labels {list(grid.labels)}" if isinstance(grid, DiscreteGrid) else "")
        + "."
    )
    if values.dtype.kind not in "iub":
        raise InvalidInitialConditionsError(message)
    codes = values.astype(np.int32)
    xp = _xp(codes)
    checks.require(xp.all((codes >= 0) & (codes < n_points)), message)
    return codes
