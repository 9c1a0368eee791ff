"""The exact forward distribution over the state grid (non-stochastic simulation).

Young's (2010) method: instead of drawing subjects, probability mass on the nodes of
each regime's state grid is pushed through the solution's policies. In period `t`, the
mass at a node is split over the discrete actions by their choice probabilities
(`softmax(v_d / λ)` with taste shocks, the argmax without), then over next period's
regimes by the regime transition probabilities, then onto the target regime's grid:
a discrete next state by its code or its Markov / process probabilities, the continuous
next state onto the two nodes around it with linear-interpolation weights.

Mass that a continuous next state would put beyond the ends of the target grid is kept
at the end node (the interpolation weight is clipped to `[0, 1]`); nothing is
renormalised. Mass that leaves the model is accounted for: `exited` holds the mass that
has left through terminal regimes (a subject in a terminal regime gets one period
there, as in `simulate`), `stranded` the mass at nodes with no feasible action, in
regimes inactive in that period, or sent to a regime that cannot be reached (all three
are errors of the model that `solve`'s checks report; the array makes them visible
here too). In every period `sum of mass + exited + stranded` equals the initial mass.

With taste shocks and an endogenous-grid solver (`DCEGM`) every step is smooth in the
parameters, so moments of the distribution can be differentiated with `jax.grad`. With
`GridSearch` the continuous actions are points of the action grid: moments then move
continuously only through parameters that enter the next states given the action
(wages, interest, the income process), and are piecewise constant in those that move
the chosen grid point (preferences).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import InvalidInitialConditionsError, LcmError
from .._model._params import resolve_params
from .._model._plan import ModelPlan
from .._simulate._simulate import TracedOnce
from .._solve._axes import Carried, auto_splayed, lift
from .._solve._kernel import RegimeProblem
from .._solve._reduce import choice_weights
from .._solve._sharding import sharding_plan
from .._solve._solver import taste_shock_scale
from ._choice import regime_problem
from ._flows import (
    along_chain,
    chained_states,
    dense_states,
    interpolation,
    joint_states,
    outer,
    push,
    scatter,
    widen,
)


class RegimeLayout(eqx.Module):
    """The axes of one regime's arrays in a `Distribution` (static structure)."""

    name: str = eqx.field(static=True)
    states: tuple[str, ...] = eqx.field(static=True)
    discrete_actions: tuple[str, ...] = eqx.field(static=True)
    continuous_actions: tuple[str, ...] = eqx.field(static=True)
    functions: tuple[str, ...] = eqx.field(static=True)
    labels: tuple[tuple[str, tuple[str, ...]], ...] = eqx.field(static=True)


class Distribution(eqx.Module):
    """The exact distribution of a model's population over its state grids, by period.

    Built by `model.distribution(params, initial)`. All arrays are JAX arrays of the
    parameters, so `jax.grad` of any moment flows back to `params`.

    Attributes:
        mass: `mass[regime]` of shape `(n_periods, *state shape)`: the mass at each node
            of the regime's state grid at the start of each period (states in
            declaration order; a regime without states has shape `(n_periods,)`).
        choice: `choice[regime]` of shape `(n_periods, *state shape, *discrete actions)`:
            the probability of each discrete action at each node (1 where a regime has
            none; 0 at nodes with no feasible action).
        actions: `actions[regime][name]`, same shape as `choice`: each continuous action
            at each node for each discrete action (the solver's policy).
        functions: `functions[regime][name]`, same shape as `choice`: `utility` and each
            entry of the regime's `functions` that returns a scalar, at each node and
            discrete action with its continuous actions.
        state_values: `state_values[regime][state]` of shape `(n_periods, n_points)`:
            the values user functions see at the nodes (process states: their nodes).
        exited: `(n_periods,)`: mass that has left through terminal regimes before
            each period.
        stranded: `(n_periods,)`: mass lost before each period at nodes with no feasible
            action, in inactive regimes or to unreachable regimes (0 in a valid model).
        layouts: the axis names of each regime's arrays.

    Example:
        >>> dist = model.distribution(params, {"regime": regimes, "wealth": wealth})
        >>> dist.mean("wealth")                 # (n_periods,)
        >>> dist.share("labor", Labor.work)     # (n_periods,)
    """

    mass: dict[str, Array]
    choice: dict[str, Array]
    actions: dict[str, dict[str, Array]]
    functions: dict[str, dict[str, Array]]
    state_values: dict[str, dict[str, Array]]
    exited: Array
    stranded: Array
    layouts: tuple[RegimeLayout, ...] = eqx.field(static=True)

    def _layout(self, regime: str) -> RegimeLayout:
        for layout in self.layouts:
            if layout.name == regime:
                return layout
        raise LcmError(
            f"Distribution: unknown regime {regime!r}; the regimes are "
            f"{[lay.name for lay in self.layouts]}."
        )

    def total(
        self, x: str | Callable[..., Any] | None = None, regime: str | None = None
    ) -> Float[Array, " n_periods"]:
        """The mass, or the sum of `x` over the mass, by period.

        Args:
            x: `None` (default): the mass in the model's regimes (in `regime` only, if
                given) at the start of each period. A name (a state, action or scalar
                function, as for `mean`) or a function (as for `expect`): its sum over
                the mass, each node's mass times the probability of each discrete
                action, over the regimes that have it (regimes without it add nothing).
            regime: only this regime.

        Returns:
            An array `(n_periods,)`: an aggregate (not a mean) of the population, e.g.
            total savings; `expect(x)` is `total(x)` over the mass that has `x`.
        """
        if x is None:
            masses = (
                self.mass.values() if regime is None else [self.mass[self._layout(regime).name]]
            )
            return sum((_per_period(m) for m in masses), start=jnp.zeros_like(self.exited))
        if isinstance(x, str):
            return _sum(self, _identity(x), regime)[0]
        return self._sums(x, regime)[0]

    def regime_share(self, regime: str) -> Float[Array, " n_periods"]:
        """The share of the mass present in each period that is in `regime`.

        Args:
            regime: the regime's name.
        """
        self._layout(regime)
        mass = self.mass[regime]
        return _ratio(_per_period(mass), self.total())

    def mean(self, name: str, regime: str | None = None) -> Float[Array, " n_periods"]:
        """The mean of a state, action or function by period, over the regimes that have it.

        Args:
            name: a state or action (a discrete one's mean is that of its codes), or a
                scalar entry of a regime's `functions` (e.g. `"labor_income"`).
            regime: only this regime (default: every regime that has `name`).

        Returns:
            An array `(n_periods,)`; NaN in periods where no mass has `name`.
        """
        return _expect(self, _identity(name), regime)

    def share(self, name: str, value: Any, regime: str | None = None) -> Float[Array, " n_periods"]:
        """The share with a discrete state or action equal to `value`, by period.

        Args:
            name: a discrete state or action.
            value: its code, label or `IntEnum` member.
            regime: only this regime (default: every regime that has `name`).
        """
        layouts = self._having((name,), regime)
        labels = dict(layouts[0].labels)
        if name not in labels:
            raise LcmError(f"Distribution.share: {name!r} is not a discrete state or action.")
        if isinstance(value, str) and not isinstance(value, int):
            if value not in labels[name]:
                raise LcmError(
                    f"Distribution.share: {value!r} is not a label of {name!r}; its labels "
                    f"are {list(labels[name])}."
                )
            code = labels[name].index(value)
        else:
            code = int(value)
            if not 0 <= code < len(labels[name]):
                raise LcmError(
                    f"Distribution.share: code {code} is outside 0..{len(labels[name]) - 1} "
                    f"for {name!r}."
                )
        return _expect(self, _equal(name, code), regime)

    def expect(
        self, fn: Callable[..., Any], regime: str | None = None
    ) -> Float[Array, " n_periods"]:
        """The mean of `fn` by period, over the regimes that have all its arguments.

        Args:
            fn: a function whose arguments are states, actions and scalar entries of
                the regime's `functions` by name (e.g.
                `lambda wealth, consumption: consumption / wealth`); it is called on
                arrays broadcast over the grid nodes and discrete actions, and must
                broadcast like a NumPy ufunc.
            regime: only this regime (default: every regime that has `fn`'s arguments).

        Returns:
            An array `(n_periods,)`: `sum(weight * fn) / sum(weight)` with weight the mass
            at each node times the probability of each discrete action; NaN in periods
            where that mass is 0.
        """
        return _ratio(*self._sums(fn, regime))

    def _sums(self, fn: Callable[..., Any], regime: str | None) -> tuple[Array, Array]:
        """By period: the sum of `fn` over the weights (mass times choice probability) of
        the regimes that have its arguments, and the sum of those weights."""
        names = tuple(inspect.signature(fn).parameters)
        layouts = self._having(names, regime)
        numerator = jnp.zeros_like(self.exited)
        denominator = jnp.zeros_like(self.exited)
        for layout in layouts:
            weight = self._weight(layout)
            values = jnp.broadcast_to(
                jnp.asarray(fn(**{n: self._values(layout, n) for n in names})), weight.shape
            )
            # A zero weight makes any value (an infeasible choice's -inf or NaN) drop
            # out, its derivative included.
            values = jnp.where(weight > 0, values, 0.0)
            numerator = numerator + _per_period(weight * values)
            denominator = denominator + _per_period(weight)
        return numerator, denominator

    def _having(self, names: tuple[str, ...], regime: str | None) -> list[RegimeLayout]:
        if regime is not None:
            layouts = [self._layout(regime)]
        else:
            layouts = list(self.layouts)
        having = [
            lay
            for lay in layouts
            if all(
                n in (*lay.states, *lay.discrete_actions, *lay.continuous_actions, *lay.functions)
                for n in names
            )
        ]
        if not having:
            where = f"regime {regime!r}" if regime is not None else "any regime"
            raise LcmError(
                f"Distribution: {list(names)} are not all states, actions or functions of {where}."
            )
        return having

    def _weight(self, layout: RegimeLayout) -> Array:
        choice = self.choice[layout.name]
        return widen(self.mass[layout.name], choice.shape) * choice

    def _values(self, layout: RegimeLayout, name: str) -> Array:
        n_s, n_d = len(layout.states), len(layout.discrete_actions)
        ndim = 1 + n_s + n_d
        if name in layout.states:
            values = self.state_values[layout.name][name]
            axis = 1 + layout.states.index(name)
            shape = [values.shape[0]] + [1] * (ndim - 1)
            shape[axis] = values.shape[1]
            return values.reshape(shape)
        if name in layout.discrete_actions:
            axis = 1 + n_s + layout.discrete_actions.index(name)
            n = self.choice[layout.name].shape[axis]
            shape = [1] * ndim
            shape[axis] = n
            return jnp.arange(n).reshape(shape)
        if name in layout.continuous_actions:
            return self.actions[layout.name][name]
        return self.functions[layout.name][name]


# `mean` and `share` run as one compiled program (one per name and regime: their
# functions are cached), not as the 20 or so eager operations of `expect`, each an XLA
# program compiled on a first call. `expect` itself stays eager: a user's function is a
# new object at each call, and would compile again each time.
_expect = jax.jit(Distribution.expect, static_argnums=(1, 2))
_sum = jax.jit(Distribution._sums, static_argnums=(1, 2))


@functools.cache
def _identity(name: str) -> Callable[..., Any]:
    def value(**kwargs):
        return kwargs[name]

    value.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)]
    )
    return value


@functools.cache
def _equal(name: str, code: int) -> Callable[..., Any]:
    def value(**kwargs):
        return (kwargs[name] == code).astype(float)

    value.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)]
    )
    return value


def _per_period(x: Array) -> Array:
    """The sum of `x` `(n_periods, ...)` over all its other axes (no reshape)."""
    return jnp.sum(x, axis=tuple(range(1, x.ndim)))


def _ratio(numerator: Array, denominator: Array) -> Array:
    safe = jnp.where(denominator > 0, denominator, 1.0)
    return jnp.where(denominator > 0, numerator / safe, jnp.nan)


# ---------------------------------------------------------------------------- layouts
def layouts(plan: ModelPlan, functions: Mapping[str, Any]) -> tuple[RegimeLayout, ...]:
    """The static axis structure of each regime's arrays (`functions`: by regime, the
    names of the functions evaluated at the nodes)."""
    out = []
    for name, regime in plan.regimes.items():
        labels = tuple(
            (v, tuple(getattr(regime.grids[v], "labels", ())))
            for v in (*regime.states, *regime.actions)
            if regime.grids[v].is_discrete
        )
        out.append(
            RegimeLayout(
                name=name,
                states=regime.states,
                discrete_actions=regime.discrete_actions,
                continuous_actions=regime.continuous_actions,
                functions=tuple(functions[name]),
                labels=labels,
            )
        )
    return tuple(out)


# ------------------------------------------------------------------------- initial mass
def bin_initial(
    plan: ModelPlan, regime: Array, states: Mapping[str, Any], subject_mass: Array | None = None
) -> dict[str, Array]:
    """Each subject's mass (`subject_mass`, `1/n` each by default) on its regime's state
    grid.

    Discrete and process states by their code; a continuous state onto the two nodes
    around it with linear-interpolation weights (beyond the grid: the end node).
    """
    dtype = jnp.zeros(()).dtype
    n = regime.shape[0]
    own = jnp.full(n, 1.0 / n, dtype) if subject_mass is None else jnp.asarray(subject_mass, dtype)
    mass = {}
    for name, regime_plan in plan.regimes.items():
        shape = tuple(regime_plan.grids[s].n_points for s in regime_plan.states)
        weight = jnp.where(regime == regime_plan.id, own, 0.0)
        dims: list[tuple[Array, Array | None]] = []
        for s in regime_plan.states:
            grid = regime_plan.grids[s]
            if grid.is_discrete:
                dims.append((jnp.asarray(states[s]).astype(jnp.int32), None))
            else:
                dims.append(interpolation(grid, jnp.asarray(states[s], dtype)))
        codes, weights = outer(dims, (n,), dtype)
        mass[name] = scatter(shape, codes, weights * widen(weight, weights.shape))
    return mass


# ------------------------------------------------------------------------- forward pass
@functools.partial(jax.jit, static_argnames=("model",))
def forward(
    model, params, values, policies, initial: dict[str, Array] | None, subjects=None
) -> Distribution:
    """Push `initial` (mass per regime on its state grid) through every period.

    `subjects` (regime ids and states, as `bin_initial` takes them) in place of
    `initial` are binned here: inside the program, not operation by operation (eagerly
    that was some 70 XLA programs, each compiled on a first call).
    """
    plan: ModelPlan = model.plan
    if subjects is not None:
        initial = bin_initial(plan, *subjects)
    assert initial is not None
    resolved = resolve_params(plan, params)
    dtype = jnp.zeros(()).dtype
    sharding = sharding_plan(plan)  # None unless some state has distributed=True

    def place(name: str, array: Array) -> Array:
        """Constrain a regime's mass (state axes, then any more) to its sharding."""
        if sharding is None:
            return array
        states = plan.regimes[name].states
        return sharding.constrain(array, (*states, *(None,) * (array.ndim - len(states))))

    carry = (
        {name: place(name, jnp.asarray(m, dtype)) for name, m in initial.items()},
        jnp.zeros((), dtype),
        jnp.zeros((), dtype),
    )
    # One scan over every period, every regime once in its body (not one scan per segment
    # of the solve, which put a regime's period into the program once for each segment
    # it is active in: Mahler–Yum's alive regime twice). A regime's period runs where it
    # is active (a `cond`, traced once: `TracedOnce`); where it is not, its mass has
    # nowhere to go (stranded), its choices are 0 and its actions NaN.
    active = jnp.asarray(
        np.array([[p in r.active for p in range(plan.n_periods)] for r in plan.regimes.values()])
    )

    def step(carry, period):
        mass, exited, stranded = carry
        incoming = {name: jnp.zeros(m.shape, dtype) for name, m in mass.items()}
        record: dict[str, Any] = {"mass": mass, "exited": exited, "stranded": stranded}
        choice, actions, functions, state_values = {}, {}, {}, {}
        for index, (name, regime_plan) in enumerate(plan.regimes.items()):
            run = functools.partial(
                _regime_period, model, resolved, values, policies, sharding, name, period
            )
            if all(p in regime_plan.active for p in range(plan.n_periods)):
                out = run(mass[name])
            else:
                once = TracedOnce(run, mass[name])

                def idle(regime_mass, once=once, regime_plan=regime_plan):
                    p, chosen, named, _, arrivals, _, _ = once.shapes
                    nodes = {
                        s: _node_values(None, regime_plan, s, dtype) for s in regime_plan.states
                    }
                    return (
                        jnp.zeros(p.shape, p.dtype),
                        *jax.tree.map(
                            lambda x: jnp.full(x.shape, jnp.nan, x.dtype), (chosen, named)
                        ),
                        nodes,
                        jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), arrivals),
                        jnp.zeros((), dtype),
                        jnp.sum(regime_mass),
                    )

                out = jax.lax.cond(active[index, period], once, idle, mass[name])
            p, chosen, named, nodes, arrivals, leaving, lost = out
            choice[name], actions[name], functions[name] = p, chosen, named
            state_values[name] = nodes
            exited, stranded = exited + leaving, stranded + lost
            for target, arriving in arrivals.items():
                incoming[target] = place(target, incoming[target] + arriving)
        record.update(
            choice=choice, actions=actions, functions=functions, state_values=state_values
        )
        return (incoming, exited, stranded), record

    periods = jnp.arange(plan.n_periods, dtype=jnp.int32)
    _, stacked = jax.lax.scan(step, carry, periods)
    return Distribution(
        mass=stacked["mass"],
        choice=stacked["choice"],
        actions=stacked["actions"],
        functions=stacked["functions"],
        state_values=stacked["state_values"],
        exited=stacked["exited"],
        stranded=stacked["stranded"],
        layouts=layouts(plan, stacked["functions"]),
    )


def check_initial_mass(mass: dict[str, Any], dtype) -> None:
    """Raise unless the (concrete) mass arrays are >= 0 and sum to 1: summed in float64,
    to the dtype's round-off (float32 mass built on a device sums to 1 only to a few of
    its ulps). Never renormalised."""
    total = sum(float(np.sum(np.asarray(m, np.float64))) for m in mass.values())
    negative = any(bool(np.any(np.asarray(m) < 0)) for m in mass.values())
    tolerance = max(1e-9, 100 * float(jnp.finfo(dtype).eps))
    if negative or abs(total - 1.0) > tolerance:
        raise InvalidInitialConditionsError(
            f"distribution: the initial mass must be >= 0 and sum to 1 (to {tolerance:.1g}), "
            f"got a sum of {total!r}{' and negative entries' if negative else ''}."
        )


def _regime_period(model, resolved, values, policies, sharding, name, period, mass):
    """One active regime's period: its choice probabilities, actions, functions and node
    values, the mass it moves to each target regime, and what leaves (a terminal regime's
    mass) or is lost (nodes without a feasible action, flows off every regime)."""
    plan: ModelPlan = model.plan
    regime_plan = plan.regimes[name]
    dtype = jnp.zeros(()).dtype
    shape = tuple(regime_plan.grids[s].n_points for s in regime_plan.states)
    d_shape = tuple(regime_plan.grids[d].n_points for d in regime_plan.discrete_actions)
    problem = regime_problem(model, resolved, name, period, values, policies)
    targets = () if regime_plan.is_terminal else regime_plan.targets
    nodes = {s: _node_values(problem, regime_plan, s, dtype) for s in regime_plan.states}
    p, chosen, named, (flows, lost) = _over_nodes(plan, model.solvers[name], problem, targets)
    n_lead = len(shape) + len(d_shape)
    node_mass = widen(mass, p.shape) * p
    arrivals: dict[str, Array] = {}
    zero = jnp.zeros((), dtype)
    if regime_plan.is_terminal:
        return p, chosen, named, nodes, arrivals, jnp.sum(mass), zero
    # Mass at nodes without a feasible action: choice probabilities are 0.
    no_choice = jnp.sum(p, axis=tuple(range(len(shape), n_lead))) == 0
    stranded = jnp.sum(jnp.where(no_choice, mass, 0.0)) + jnp.sum(node_mass * lost)
    for target, (codes, weights, dense) in flows.items():
        # `(*states, *choices, *combinations, *dense states)`, every new axis made by
        # broadcasting (no reshape: see `_flows.scatter`).
        full = (*weights.shape, *dense.shape[n_lead:])
        moved = widen(weights * widen(node_mass, weights.shape), full)
        moved = moved * jax.lax.broadcast_in_dim(
            dense, full, (*range(n_lead), *range(weights.ndim, len(full)))
        )
        target_plan = plan.regimes[target]
        chained = chained_states(regime_plan, target_plan)
        pushed_shape = tuple(
            problem.process_matrices[s].shape[0] if s in chained else target_plan.grids[s].n_points
            for s in target_plan.states
        )
        arriving = push(
            pushed_shape,
            target_plan.states,
            regime_plan.states,
            codes,
            moved,
            joint_states(sharding, regime_plan, target_plan),
            dense_states(regime_plan, target_plan),
        )
        for s in chained:
            arriving = along_chain(
                arriving, target_plan.states.index(s), problem.process_matrices[s]
            )
        arrivals[target] = arriving
    return p, chosen, named, nodes, arrivals, zero, stranded


def _node_values(problem: RegimeProblem | None, regime_plan, state: str, dtype) -> Array:
    grid = regime_plan.grids[state]
    if problem is not None and state in problem.process_points:
        return problem.process_points[state].astype(dtype)
    if grid.is_discrete:
        return jnp.arange(grid.n_points).astype(dtype)
    return grid.to_jax().astype(dtype)


def _over_nodes(plan: ModelPlan, solver, problem: RegimeProblem, targets):
    """`_node` at every node of the regime's state grid (outputs: state axes first).

    Where the solver reads its choices on the whole grid at once (`choices_on_grid`,
    e.g. off endogenous grids), they are mapped jointly with the state axes (`Carried`):
    each node sees its own slice, so a sharded state's policy is read on its own device.
    """
    on_grid = solver.choices_on_grid(problem)
    if on_grid is None:
        # Node by node on the action grids: splayed where the solve is (`auto_splayed`).
        itemsize = jnp.zeros(()).dtype.itemsize
        axes = auto_splayed(problem.state_axes, problem.action_axes, itemsize)
        return lift(lambda state: _node(plan, solver, problem, state, targets), axes)
    v, chosen = on_grid
    n_d = len(problem.regime.discrete_actions)
    labels = (*problem.regime.states, *(None,) * n_d)
    carried = {"values": Carried(v, labels)}
    carried.update({f"action:{name}": Carried(c, labels) for name, c in chosen.items()})

    def at(state, arrays):
        choices = (arrays["values"], {name: arrays[f"action:{name}"] for name in chosen})
        return _node(plan, solver, problem, state, targets, choices)

    return lift(at, problem.state_axes, carried=carried)


def _node(plan: ModelPlan, solver, problem: RegimeProblem, state, targets, choices=None):
    """Choice probabilities, continuous actions, the regime's functions and outflows of
    one grid node.

    Functions: `utility` and every entry of the regime's `functions` that returns a
    scalar, at the node and each discrete action with its continuous actions.

    Outflows per unit of mass taking each discrete action: `{target: (codes, weights
    (*D, *ks), dense (*D, *dense states))}` (`codes`: one per target state that is not
    dense, as `_flows.outer` gives them), and the probability `(*D)` of a regime that
    cannot be reached.

    Every array keeps one axis per discrete action: the choices are mapped axis by
    axis, never flattened (see `_flows.scatter`).
    """
    regime = problem.regime
    v_d, chosen = solver.choices_at(problem, state) if choices is None else choices
    d_shape = v_d.shape
    p = _probabilities(v_d, taste_shock_scale(problem))
    d_names = regime.discrete_actions

    def named_at(codes, continuous):
        evaluate = problem.evaluator(
            {**state, **dict(zip(d_names, codes, strict=True)), **continuous}
        )
        out = {"utility": jnp.asarray(evaluate(regime.utility))}
        for key, function in regime.helpers.items():
            out[key] = jnp.asarray(evaluate(function))
        return {k: v.astype(p.dtype) for k, v in out.items() if v.shape == ()}

    named = _over_choices(named_at, d_shape, chosen)
    if not targets:
        return p, chosen, named, ({}, jnp.zeros(d_shape, p.dtype))

    def per_choice(codes, continuous):
        action = {**dict(zip(d_names, codes, strict=True)), **continuous}
        evaluate = problem.evaluator({**state, **action})
        regime_p = problem.regime_probabilities(evaluate)
        shared, stochastic = problem.next_states(evaluate)
        by_target = problem.target_next_states(evaluate)
        target_probabilities = problem.target_next_probabilities(evaluate)
        flows = {}
        drawn = regime.drawn
        if drawn:
            # Laws of motion that read the next value of drawn states: the flows of each
            # joint node of the draw, at that node's code and next states, by its mass.
            node_codes, node_weights = problem.drawn_nodes(
                problem.drawn_probabilities(evaluate, state)
            )
            node_values = problem.drawn_next_states(evaluate, node_codes)

            def probabilities_of(s, target):
                """The next-value probabilities of a stochastic state that is not drawn."""
                if target in regime.state_transitions[s].per_target_markov:
                    return target_probabilities[target][s]
                if s in stochastic:
                    return stochastic[s]
                transition = regime.state_transitions[s]
                if transition.function is None:
                    return problem.process_matrices[s][state[s]]
                return jnp.asarray(evaluate(transition.function))

        for target in targets:
            target_plan = plan.regimes[target]
            deterministic = {**shared, **by_target.get(target, {})}
            if drawn:

                def node_flow(codes, values, weight, target=target, fixed=deterministic):
                    dims = _node_dims(
                        plan, regime, target, {**fixed, **values}, codes, probabilities_of
                    )
                    codes_k, weights = outer(dims, (), p.dtype)
                    return codes_k, weights * weight

                codes_k, weights = jax.vmap(node_flow)(node_codes, node_values, node_weights)
                flows[target] = (codes_k, weights * regime_p[target_plan.id], jnp.ones((), p.dtype))
                continue
            dims: list = []
            dense = jnp.ones((), p.dtype)
            chained = chained_states(regime, target_plan)
            for s in target_plan.states:
                transition = regime.state_transitions[s]
                grid = target_plan.grids[s]
                if s in chained:  # at the current code; moved along its chain later
                    dims.append((jnp.asarray(state[s], jnp.int32), None))
                elif target in transition.per_target_markov:
                    dense = _append_axis(dense, target_probabilities[target][s])
                elif transition.is_markov:
                    if s in stochastic:
                        probabilities = stochastic[s]
                    elif transition.function is None:
                        probabilities = problem.process_matrices[s][state[s]]
                    else:
                        probabilities = jnp.asarray(evaluate(transition.function))
                    dense = _append_axis(dense, probabilities)
                elif grid.is_discrete:
                    dims.append((jnp.asarray(deterministic[s], jnp.int32), None))
                else:
                    dims.append(interpolation(grid, jnp.asarray(deterministic[s])))
            codes_k, weights = outer(dims, (), p.dtype)
            flows[target] = (codes_k, weights * regime_p[target_plan.id], dense)
        unreachable = [r.id for n, r in plan.regimes.items() if n not in targets]
        lost = (
            jnp.sum(regime_p[jnp.asarray(unreachable)]) if unreachable else jnp.zeros((), p.dtype)
        )
        return flows, lost

    flows, lost = _over_choices(per_choice, d_shape, chosen)
    return p, chosen, named, (flows, lost)


def _probabilities(v_d: Array, scale) -> Array:
    """The probability of each discrete action `(*D)` from its value: the softmax with
    taste shocks (`scale`), else 1 at the first maximum in row-major order, 0 where no
    action is feasible. Reduced over all axes at once, without flattening them."""
    axes = tuple(range(v_d.ndim))
    if scale is not None:
        if not axes:  # one action: 1 (NaN where its value is NaN or +inf, as softmax)
            return jnp.where(jnp.isneginf(v_d), 0.0, v_d - v_d + 1.0)
        return choice_weights(v_d, scale, axis=axes)
    feasible = jnp.any(jnp.isfinite(v_d))
    if not axes:
        return jnp.where(feasible, 1.0, 0.0).astype(v_d.dtype)
    # The row-major code of each entry, and the smallest code where the maximum is.
    code = sum(
        (
            jax.lax.broadcasted_iota(jnp.int32, v_d.shape, i) * math.prod(v_d.shape[i + 1 :])
            for i in axes
        ),
        start=jnp.zeros(v_d.shape, jnp.int32),
    )
    best = jnp.max(v_d)
    # NaN counts as the maximum, as `argmax` takes it.
    at_best = (v_d == best) | jnp.isnan(v_d)
    first = jnp.min(jnp.where(at_best, code, v_d.size))
    return ((code == first) & feasible).astype(v_d.dtype)


def _over_choices(fn, d_shape: tuple[int, ...], chosen: dict[str, Array]):
    """`fn(codes, continuous)` at every discrete choice, mapped axis by axis (outputs:
    the discrete actions' axes first); `continuous` holds each entry of `chosen` (arrays
    `(*D)`) at that choice."""

    def at(level: int, codes: tuple, arrays: dict):
        if level == len(d_shape):
            return fn(codes, arrays)
        return jax.vmap(lambda c, a: at(level + 1, (*codes, c), a))(
            jnp.arange(d_shape[level], dtype=jnp.int32), arrays
        )

    return at(0, (), {k: jnp.broadcast_to(v, d_shape) for k, v in chosen.items()})


def _append_axis(dense: Array, probabilities: Array) -> Array:
    """`dense` `(...)` times `probabilities` `(n,)` along a new last axis: `(..., n)`."""
    shape = (*dense.shape, probabilities.shape[-1])
    return widen(dense, shape) * jax.lax.broadcast_in_dim(probabilities, shape, (dense.ndim,))


def _node_dims(plan: ModelPlan, regime, target: str, next_values, codes, probabilities_of):
    """Per state of `target`, as `_flows.outer` takes them, the flow from one joint node
    of the drawn states (`codes`): drawn states at their code, the other stochastic ones
    by `probabilities_of(state, target)`, the others at their next value
    (`next_values`)."""
    target_plan = plan.regimes[target]
    dims: list = []
    for s in target_plan.states:
        grid = target_plan.grids[s]
        transition = regime.state_transitions[s]
        if s in codes:
            dims.append((jnp.asarray(codes[s], jnp.int32), None))
        elif transition.is_markov or target in transition.per_target_markov:
            dims.append((jnp.arange(grid.n_points, dtype=jnp.int32), probabilities_of(s, target)))
        elif grid.is_discrete:
            dims.append((jnp.asarray(next_values[s], jnp.int32), None))
        else:
            dims.append(interpolation(grid, jnp.asarray(next_values[s])))
    return dims
