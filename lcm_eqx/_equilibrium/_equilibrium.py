"""Stationary general equilibrium: prices from the model's own aggregates.

`Equilibrium` names which parameters of a model are prices, the aggregates of the
stationary population (`Population`) and the market-clearing conditions; `solve` finds
the prices at which every condition holds by Newton's method with the exact Jacobian
(forward mode through `model.solve` and `model.distribution`), and the result is
differentiable in every other parameter by the implicit function theorem (`_newton`).
`calibrate` does the same one level up: it finds the parameters at which aggregates of
the equilibrium reach targets, with the Jacobian of the equilibrium by that theorem.

Names are resolved as in the model's own functions: an argument of an aggregate, of a
clearing condition or of `initial` is `population` (aggregates only), a price, an
aggregate defined before it, or otherwise a parameter (`params[name]`).
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import EquilibriumError, InvalidParamsError, LcmWarning
from .._facade import Model
from .._validation import is_traced
from . import _newton
from ._population import Population
from ._results import Calibration, EquilibriumResult

POPULATION = "population"
VALIDATE_OPTIONS = ("raise", "warn", "off")


class Equilibrium(eqx.Module):
    """A stationary overlapping-generations equilibrium of a model: prices that clear
    markets given the aggregates of the model's own stationary population.

    Every period a cohort is born `1 + population_growth` times the size of the one
    before and lives through the model (`model.distribution` from `initial`); the
    cross-section of all cohorts at one date (`lcm.Population`) gives the aggregates,
    and `solve` finds the prices at which every clearing condition is 0, by Newton's
    method with the exact Jacobian (forward mode through the solve and the
    distribution). The equilibrium is differentiable in every other parameter by the
    implicit function theorem, so aggregates can be calibrated by gradient
    (`calibrate`, `jax.grad`, `jax.jacfwd`).

    Arguments of `aggregates`, `clearing` and a callable `initial` are resolved by name:
    `population` (the `lcm.Population`; aggregates only), a price, an aggregate defined
    earlier in `aggregates`, otherwise a parameter read from `params[name]` (the model's
    own parameters and any others, such as a production function's).

    Args:
        model: the `lcm.Model` (with mortality as a regime transition into a terminal
            regime, if any).
        prices: the names of the parameters that are prices (top-level entries of
            `params`, e.g. `"interest_rate"`, `"wage"`, a pension contribution rate);
            their values in `params` are Newton's starting point.
        aggregates: `{name: function}`, in order: e.g.
            `{"capital": lambda population: population.per_capita("savings")}`.
        clearing: `{name: function}`, one market-clearing condition (an excess demand,
            0 in equilibrium) per price, e.g.
            `{"capital_market": lambda interest_rate, capital, labor, alpha, delta:
            interest_rate - (alpha * (capital / labor) ** (alpha - 1) - delta)}`.
        initial: the newborns, as `model.distribution` takes them (initial conditions
            with a `"regime"` entry, or mass arrays by regime), or a function of prices
            and parameters by name that returns them (e.g. newborn cash on hand equal
            to the first wage).
        population_growth: the growth rate `n` of the cohorts: a number, or the name of
            a parameter.
        living: the regimes whose mass is the living population (default: every regime
            except terminal ones without states and actions, such as `dead`).
        bounds: `{price: (lower, upper)}`: Newton's steps stay strictly inside; with one
            price, a failure reports whether the bounds bracket an equilibrium.
        tolerance: converged when every clearing condition is at most this in absolute
            value (default `eps ** 0.75` of the float type: 1.8e-12 in float64).
        max_steps: the most Newton steps.

    Example:
        >>> equilibrium = lcm.Equilibrium(model, prices=["interest_rate", "wage"],
        ...     aggregates={...}, clearing={...}, initial=newborns)
        >>> result = equilibrium.solve(params)   # params hold the starting prices
        >>> result.prices["interest_rate"], result.aggregates["capital"]
    """

    model: Model
    prices: tuple[str, ...] = eqx.field(static=True)
    aggregates: tuple[tuple[str, Callable[..., Any]], ...] = eqx.field(static=True)
    clearing: tuple[tuple[str, Callable[..., Any]], ...] = eqx.field(static=True)
    initial: Any
    population_growth: float | str = eqx.field(static=True)
    living: tuple[str, ...] = eqx.field(static=True)
    bounds: tuple[tuple[float, float], ...] = eqx.field(static=True)
    tolerance: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    # The compiled search over the prices (one program per structure of `params`).
    _search: Callable = eqx.field(static=True, repr=False)

    def __init__(
        self,
        model: Model,
        *,
        prices: Sequence[str],
        aggregates: Mapping[str, Callable[..., Any]],
        clearing: Mapping[str, Callable[..., Any]],
        initial: Any,
        population_growth: float | str = 0.0,
        living: Sequence[str] | None = None,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        tolerance: float | None = None,
        max_steps: int = 20,
    ):
        if not isinstance(model, Model):
            raise EquilibriumError(f"Equilibrium: model must be an lcm.Model, got {model!r}.")
        plan = model.plan
        prices = (prices,) if isinstance(prices, str) else tuple(prices)
        if not prices or not all(isinstance(p, str) for p in prices):
            raise EquilibriumError(
                f"Equilibrium: prices must be a non-empty sequence of parameter names, got "
                f"{prices!r}."
            )
        if len(set(prices)) != len(prices):
            raise EquilibriumError(f"Equilibrium: prices {list(prices)} repeat a name.")
        aggregate_items = _functions("aggregates", aggregates)
        clearing_items = _functions("clearing", clearing)
        if len(clearing_items) != len(prices):
            raise EquilibriumError(
                f"Equilibrium: {len(clearing_items)} clearing condition(s) "
                f"{[name for name, _ in clearing_items]} for {len(prices)} price(s) "
                f"{list(prices)}; give one condition per price."
            )
        names = [name for name, _ in aggregate_items]
        for name in names:
            if name in prices or name == POPULATION:
                raise EquilibriumError(
                    f"Equilibrium: the aggregate {name!r} has the name of "
                    f"{'a price' if name in prices else 'the population argument'}; "
                    "rename it."
                )
        for i, (name, function) in enumerate(aggregate_items):
            for argument in _arguments(function):
                if argument in names[i:]:
                    raise EquilibriumError(
                        f"Equilibrium: aggregate {name!r} reads the aggregate {argument!r}, "
                        "which is not defined before it; order the aggregates so that each "
                        "reads only earlier ones."
                    )
        for name, function in clearing_items:
            if POPULATION in _arguments(function):
                raise EquilibriumError(
                    f"Equilibrium: clearing condition {name!r} reads 'population'; compute "
                    "what it needs in an aggregate and read that."
                )
        if callable(initial):
            for argument in _arguments(initial):
                if argument == POPULATION or argument in names:
                    raise EquilibriumError(
                        f"Equilibrium: initial reads {argument!r}; the newborns may depend "
                        "on prices and parameters only."
                    )
        model_names = _model_parameters(model)
        read = {a for _, f in (*aggregate_items, *clearing_items) for a in _arguments(f)}
        if callable(initial):
            read |= set(_arguments(initial))
        for price in prices:
            if price not in model_names and price not in read:
                raise EquilibriumError(
                    f"Equilibrium: the price {price!r} is neither a parameter of the model "
                    f"nor read by an aggregate or clearing condition; the model's "
                    f"parameters are {sorted(model_names - set(plan.regimes))}."
                )
        if living is None:
            living = tuple(
                name
                for name, regime in plan.regimes.items()
                if not (regime.is_terminal and not regime.states and not regime.actions)
            )
        else:
            living = (living,) if isinstance(living, str) else tuple(living)
            unknown = [r for r in living if r not in plan.regimes]
            if unknown or not living:
                raise EquilibriumError(
                    f"Equilibrium: living must name regimes of the model "
                    f"({list(plan.regimes)}), got {list(living)}."
                )
        if isinstance(population_growth, bool) or not isinstance(
            population_growth, int | float | str
        ):
            raise EquilibriumError(
                "Equilibrium: population_growth must be a number or the name of a "
                f"parameter, got {population_growth!r}."
            )
        bounds = dict(bounds or {})
        unknown = [name for name in bounds if name not in prices]
        if unknown:
            raise EquilibriumError(
                f"Equilibrium: bounds for {unknown}, which are not prices ({list(prices)})."
            )
        box = []
        for price in prices:
            lower, upper = (float(b) for b in bounds.get(price, (-math.inf, math.inf)))
            if not lower < upper:
                raise EquilibriumError(
                    f"Equilibrium: the bounds of {price!r} must have lower < upper, got "
                    f"({lower}, {upper})."
                )
            box.append((lower, upper))
        if tolerance is not None and not tolerance > 0:
            raise EquilibriumError(f"Equilibrium: tolerance must be > 0, got {tolerance!r}.")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise EquilibriumError(
                f"Equilibrium: max_steps must be an int >= 1, got {max_steps!r}."
            )
        self.model = model
        self.prices = prices
        self.aggregates = aggregate_items
        self.clearing = clearing_items
        self.initial = initial
        self.population_growth = (
            population_growth if isinstance(population_growth, str) else float(population_growth)
        )
        self.living = living
        self.bounds = tuple(box)
        self.tolerance = tolerance
        self.max_steps = max_steps
        self._search = jax.jit(functools.partial(_search_prices, self))

    # An equilibrium holds a model, compared by identity; so is it (`jax.jit` hashes it).
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> bool:
        return self is other

    def solve(self, params: Mapping[str, Any], *, validate: str = "raise") -> EquilibriumResult:
        """The stationary equilibrium: prices at which every clearing condition is 0.

        A pure function of `params`: `jax.jit`, `jax.vmap`, `jax.grad` and `jax.jacfwd`
        work (derivatives of the prices by the implicit function theorem).

        Args:
            params: every parameter of the model and of the equilibrium's functions;
                the prices at Newton's starting values.
            validate: `"raise"` (default): an `EquilibriumError` if Newton's method
                fails (under `jax.jit` inside a `jax.errors.JaxRuntimeError`), and the
                model's checks of `solve` at the equilibrium prices; `"warn"` warns
                instead; `"off"` does neither (read `result.converged`).

        Returns:
            An `EquilibriumResult`.
        """
        _check_validate(validate)
        params = self._checked(params)
        root = self._search(_starting_prices(self, params), params)
        # The aggregates and excess demands that the search found, with the derivatives
        # of its rule (the economy at the prices adds the population and the solution).
        result = self._economy(root.x, params, validate, root.steps, root.status, root)
        _report(self, validate, root, params)
        return result

    def evaluate(self, params: Mapping[str, Any], *, validate: str = "raise") -> EquilibriumResult:
        """The economy at the prices in `params`, without solving: its aggregates and
        excess demands (e.g. to plot excess demand curves or check a bracket).
        `steps` is 0 and `converged` says whether the prices happen to clear markets."""
        _check_validate(validate)
        params = self._checked(params)
        return self._economy(_starting_prices(self, params), params, validate, 0, None)

    def calibrate(
        self,
        params: Mapping[str, Any],
        *,
        free: Sequence[str | tuple[str, ...]],
        targets: Mapping[str, float],
        bounds: Mapping[str | tuple[str, ...], tuple[float, float]] | None = None,
        tolerance: float | None = None,
        max_steps: int = 20,
        validate: str = "raise",
    ) -> Calibration:
        """Parameters at which aggregates (or prices) of the equilibrium reach targets.

        Newton's method on the free parameters, as many as targets, with the exact
        Jacobian of the equilibrium (forward mode, by the implicit function theorem):
        one compiled program with the equilibrium's search inside. E.g. the discount
        factor at which the capital–output ratio is 3. Call it eagerly (not under
        `jax.jit`); to differentiate or batch a calibration, write the loss of
        `solve` and use any optimiser.

        Args:
            params: every parameter; the free ones at their starting values, the prices
                at the equilibrium search's starting values.
            free: the parameters to calibrate: top-level names of `params` or paths
                such as `("alive", "discount_factor")`; each a scalar.
            targets: `{name: value}`, names of aggregates or prices; as many as `free`.
            bounds: `{free parameter: (lower, upper)}`: Newton's steps stay inside.
            tolerance: converged when every error is at most this (default: 100 times
                the equilibrium's tolerance, times the largest target's magnitude if
                above 1).
            max_steps: the most Newton steps on the free parameters.
            validate: as for `solve`; a failed calibration raises `EquilibriumError`.

        Returns:
            A `Calibration`: `params`, the `equilibrium` there, `values` and `errors`
            of the targets.
        """
        _check_validate(validate)
        params = self._checked(params)
        free = tuple(f if isinstance(f, str) else tuple(f) for f in free)
        targets = dict(targets)
        known = (*self.prices, *(name for name, _ in self.aggregates))
        unknown = [name for name in targets if name not in known]
        if unknown or not targets:
            raise EquilibriumError(
                f"calibrate: targets must name aggregates or prices ({list(known)}), got "
                f"{unknown or list(targets)}."
            )
        if len(free) != len(targets) or len(set(free)) != len(free):
            raise EquilibriumError(
                f"calibrate: {len(free)} free parameter(s) {list(free)} for {len(targets)} "
                f"target(s) {list(targets)}; give as many distinct free parameters as "
                "targets."
            )
        for path in free:
            if _label(path) in self.prices:
                raise EquilibriumError(
                    f"calibrate: {_label(path)!r} is a price, set by the equilibrium; it "
                    "cannot be calibrated."
                )
            value = _get(params, path, "calibrate")
            if np.ndim(value) != 0:
                raise InvalidParamsError(
                    f"calibrate: the free parameter {_label(path)!r} must be a scalar, got "
                    f"shape {np.shape(value)}."
                )
        bounds = {(k if isinstance(k, str) else tuple(k)): v for k, v in (bounds or {}).items()}
        not_free = [k for k in bounds if k not in free]
        if not_free:
            raise EquilibriumError(f"calibrate: bounds for {not_free}, which are not free.")
        box = [tuple(float(b) for b in bounds.get(path, (-math.inf, math.inf))) for path in free]
        start = jnp.stack([jnp.asarray(_get(params, path, "calibrate"), float) for path in free])
        for path, (lower, upper), value in zip(free, box, np.asarray(start), strict=True):
            if not lower < value < upper:
                raise EquilibriumError(
                    f"calibrate: the start {value} of {_label(path)!r} is not strictly "
                    f"inside its bounds ({lower}, {upper})."
                )
        goal = jnp.asarray([float(v) for v in targets.values()], start.dtype)
        scale = max(1.0, float(np.max(np.abs(np.asarray(goal)))))
        options = _newton.Options(
            lower=tuple(b[0] for b in box),
            upper=tuple(b[1] for b in box),
            tolerance=tolerance
            if tolerance is not None
            else 100 * _tolerance(self, start.dtype) * scale,
            max_steps=max_steps,
            max_halvings=30,
        )
        program = _calibration_program(self, free, tuple(targets), options)
        root = program(start, (params, goal))
        calibrated = dict(params)
        for path, value in zip(free, root.x, strict=True):
            calibrated = _set(calibrated, path, value)
        if validate != "off" and not is_traced(root.status) and int(root.status) != 0:
            message = (
                f"calibrate: Newton's method on {[_label(p) for p in free]} "
                f"{_newton.STATUS_MESSAGES[int(root.status)]} after {int(root.steps)} "
                f"step(s), at {_listing(free, root.x)} with errors "
                f"{_listing(tuple(targets), root.value)}."
            )
            if validate == "raise":
                raise EquilibriumError(message)
            warnings.warn(message, LcmWarning, stacklevel=2)
        equilibrium = self.solve(calibrated, validate=validate)
        values = {name: {**equilibrium.prices, **equilibrium.aggregates}[name] for name in targets}
        return Calibration(
            params=calibrated,
            equilibrium=equilibrium,
            values=values,
            errors={name: values[name] - goal[i] for i, name in enumerate(targets)},
            steps=root.steps,
            converged=root.converged,
            status=root.status,
        )

    # ------------------------------------------------------------------ internals
    def _checked(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` as a plain dict, checked: the prices present and scalar, every
        parameter of the equilibrium's functions present, nothing unknown."""
        if not isinstance(params, Mapping):
            raise InvalidParamsError(
                f"Equilibrium: params must be a dict, got {type(params).__name__}."
            )
        params = _strongly_typed(params)
        for price in self.prices:
            if price not in params:
                raise InvalidParamsError(
                    f"Equilibrium: params lacks the price {price!r} (its value is Newton's "
                    "starting point)."
                )
            if np.ndim(params[price]) != 0:
                raise InvalidParamsError(
                    f"Equilibrium: the price {price!r} must be a scalar, got shape "
                    f"{np.shape(params[price])}."
                )
        own = _own_parameters(self)
        for name, where in own.items():
            if name not in params:
                raise InvalidParamsError(
                    f"Equilibrium: {where} reads the parameter {name!r}, which params lacks."
                )
        model_names = _model_parameters(self.model)
        unknown = [k for k in params if k not in (*model_names, *own, *self.prices)]
        if unknown:
            raise InvalidParamsError(
                f"Equilibrium: params has {unknown}, which neither the model nor the "
                "equilibrium's functions read."
            )
        return params

    def _economy(
        self, x, params, validate: str, steps, status, root: _newton.Root | None = None
    ) -> EquilibriumResult:
        """The result at the prices `x` (`status` None: converged if they clear markets
        within the tolerance, else `MAX_STEPS`; `root`: the search's aggregates and
        excess demands at `x`, used in place of the economy's own)."""
        with_prices = _with_prices(self, x, params)
        population, solution, aggregates, excess = _economy(self, with_prices, validate)
        if root is not None:
            aggregates = {name: root.aux[name] for name, _ in self.aggregates}
            excess = root.value
        if status is None:
            clears = jnp.max(jnp.abs(excess)) <= _tolerance(self, x.dtype)
            status = jnp.where(clears, _newton.CONVERGED, _newton.MAX_STEPS)
        return EquilibriumResult(
            prices={p: with_prices[p] for p in self.prices},
            aggregates=aggregates,
            excess={name: excess[i] for i, (name, _) in enumerate(self.clearing)},
            params=with_prices,
            population=population,
            solution=solution,
            steps=jnp.asarray(steps, jnp.int32),
            converged=jnp.asarray(status) == _newton.CONVERGED,
            status=jnp.asarray(status, jnp.int32),
        )


# ---------------------------------------------------------------------------- the economy
def _economy(equilibrium: Equilibrium, params: dict[str, Any], validate: str):
    """The population, solution, aggregates and excess demands at `params` (prices in
    place)."""
    model = equilibrium.model
    model_names = _model_parameters(model)
    model_params = {k: v for k, v in params.items() if k in model_names}
    initial = equilibrium.initial
    if callable(initial):
        initial = _call(initial, params, {})
    solution = model.solve(model_params, validate=validate)
    distribution = model.distribution(model_params, initial, solution)
    growth = equilibrium.population_growth
    if isinstance(growth, str):
        growth = params[growth]
    dtype = jnp.zeros(()).dtype
    periods = jnp.arange(model.n_periods, dtype=dtype)
    weights = (1 + jnp.asarray(growth, dtype)) ** (-periods)
    population = Population(
        distribution=distribution, cohort_weights=weights, living=equilibrium.living
    )
    aggregates: dict[str, Any] = {}
    for name, function in equilibrium.aggregates:
        aggregates[name] = jnp.asarray(
            _call(function, params, {POPULATION: population, **aggregates}), dtype
        )
    excess = jnp.stack(
        [
            jnp.asarray(_call(f, params, aggregates), dtype).reshape(())
            for _, f in equilibrium.clearing
        ]
    )
    return population, solution, aggregates, excess


def _excess(equilibrium: Equilibrium, x, params: dict[str, Any]):
    """The excess demands and the aggregates at prices `x` (validation off: Newton's
    trial prices may lie where the model has no valid solution, and count as no
    decrease)."""
    _, _, aggregates, excess = _economy(equilibrium, _with_prices(equilibrium, x, params), "off")
    return excess, aggregates


def _search_prices(equilibrium: Equilibrium, x0, params) -> _newton.Root:
    options = _newton.Options(
        lower=tuple(b[0] for b in equilibrium.bounds),
        upper=tuple(b[1] for b in equilibrium.bounds),
        tolerance=_tolerance(equilibrium, x0.dtype),
        max_steps=equilibrium.max_steps,
        max_halvings=30,
    )
    return _newton.root(functools.partial(_excess, equilibrium), options, x0, params)


@functools.lru_cache(maxsize=16)
def _calibration_program(
    equilibrium: Equilibrium,
    free: tuple[str | tuple[str, ...], ...],
    names: tuple[str, ...],
    options: _newton.Options,
):
    def errors(theta, args):
        params, goal = args
        for path, value in zip(free, theta, strict=True):
            params = _set(params, path, value)
        root = _search_prices(equilibrium, _starting_prices(equilibrium, params), params)
        prices = {p: root.x[i] for i, p in enumerate(equilibrium.prices)}
        known = {**prices, **root.aux}
        reached = jnp.stack([jnp.asarray(known[name]).reshape(()) for name in names])
        # An inner search that failed has no equilibrium to calibrate: not finite.
        return jnp.where(root.converged, reached - goal, jnp.nan), reached

    return jax.jit(functools.partial(_newton.root, errors, options))


# ------------------------------------------------------------------------------ helpers
def _tolerance(equilibrium: Equilibrium, dtype) -> float:
    if equilibrium.tolerance is not None:
        return equilibrium.tolerance
    return float(jnp.finfo(dtype).eps) ** 0.75


def _starting_prices(equilibrium: Equilibrium, params: Mapping[str, Any]):
    return jnp.stack(
        [jnp.asarray(params[p], jnp.zeros(()).dtype).reshape(()) for p in equilibrium.prices]
    )


def _with_prices(equilibrium: Equilibrium, x, params: Mapping[str, Any]) -> dict[str, Any]:
    return {**params, **{p: x[i] for i, p in enumerate(equilibrium.prices)}}


def _strongly_typed(params: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers and arrays as JAX arrays of fixed (not weak) types, floats in the default
    float type: a Python float and the array a calibration returns then give the same
    compiled programs. Other leaves (a labelled pandas Series) are left as they are."""

    def leaf(value):
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return jnp.asarray(
                value, dtype=jnp.zeros(()).dtype if isinstance(value, float) else None
            )
        if isinstance(value, np.ndarray | np.generic | jax.Array):
            return jnp.asarray(value, dtype=jnp.asarray(value).dtype)
        return value

    return {k: _strongly_typed(v) if isinstance(v, Mapping) else leaf(v) for k, v in params.items()}


def _functions(kind: str, functions) -> tuple[tuple[str, Callable[..., Any]], ...]:
    if not isinstance(functions, Mapping) or not functions:
        raise EquilibriumError(
            f"Equilibrium: {kind} must be a non-empty dict of functions by name, got {functions!r}."
        )
    for name, function in functions.items():
        if not isinstance(name, str) or not callable(function):
            raise EquilibriumError(
                f"Equilibrium: {kind}[{name!r}] must be a function (keyed by a name), got "
                f"{function!r}."
            )
    return tuple(functions.items())


def _arguments(function: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )


def _call(function: Callable[..., Any], params: Mapping[str, Any], known: Mapping[str, Any]):
    """`function` with its arguments by name: from `known` (population, aggregates),
    else `params` (prices in place)."""
    return function(**{a: known[a] if a in known else params[a] for a in _arguments(function)})


def _own_parameters(equilibrium: Equilibrium) -> dict[str, str]:
    """The parameters that the equilibrium's functions read, with where (the first)."""
    own: dict[str, str] = {}
    known = {POPULATION, *equilibrium.prices, *(name for name, _ in equilibrium.aggregates)}
    functions = [(f"aggregate {name!r}", f) for name, f in equilibrium.aggregates]
    functions += [(f"clearing condition {name!r}", f) for name, f in equilibrium.clearing]
    if callable(equilibrium.initial):
        functions.append(("initial", equilibrium.initial))
    for where, function in functions:
        for argument in _arguments(function):
            if argument not in known:
                own.setdefault(argument, where)
    if isinstance(equilibrium.population_growth, str):
        own.setdefault(equilibrium.population_growth, "population_growth")
    return own


@functools.lru_cache(maxsize=64)
def _model_parameters(model: Model) -> frozenset[str]:
    """The names that may be top-level entries of the model's params: its regimes and
    its parameters."""
    names = set(model.plan.regimes)
    for entry in model.params_template().values():
        for key, value in entry.items():
            names.update(value if isinstance(value, dict) else (key,))
    return frozenset(names)


def _label(path: str | tuple[str, ...]) -> str:
    return path if isinstance(path, str) else ".".join(path)


def _get(params: Mapping[str, Any], path: str | tuple[str, ...], where: str):
    keys = (path,) if isinstance(path, str) else path
    value: Any = params
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise InvalidParamsError(f"{where}: params has no entry {_label(path)!r}.")
        value = value[key]
    return value


def _set(params: Mapping[str, Any], path: str | tuple[str, ...], value) -> dict[str, Any]:
    keys = (path,) if isinstance(path, str) else path
    if len(keys) == 1:
        return {**params, keys[0]: value}
    return {**params, keys[0]: _set(params[keys[0]], keys[1:], value)}


def _listing(names: Sequence[str | tuple[str, ...]], values) -> str:
    return ", ".join(
        f"{_label(n)}={float(v):.10g}" for n, v in zip(names, np.asarray(values), strict=True)
    )


def _check_validate(validate: str) -> None:
    if validate not in VALIDATE_OPTIONS:
        raise EquilibriumError(
            f"Equilibrium: validate must be one of {VALIDATE_OPTIONS}, got {validate!r}."
        )


# ---------------------------------------------------------------------- failure reports
def _failure(equilibrium: Equilibrium, status, steps, x, value) -> str:
    names = [name for name, _ in equilibrium.clearing]
    return (
        f"Equilibrium: Newton's method {_newton.STATUS_MESSAGES[int(status)]} after "
        f"{int(steps)} step(s), at prices {_listing(equilibrium.prices, x)} with excess "
        f"demands {_listing(names, value)} (tolerance "
        f"{_tolerance(equilibrium, np.asarray(x).dtype):.3g})."
    )


def _bracket(equilibrium: Equilibrium, params: dict[str, Any]) -> str:
    """With one bounded price: whether the bounds bracket an equilibrium."""
    if len(equilibrium.prices) != 1 or not all(map(math.isfinite, equilibrium.bounds[0])):
        return (
            " Start closer to an equilibrium (the prices in params are the start), give "
            "bounds, or raise max_steps."
        )
    (price,), (name, _) = equilibrium.prices, equilibrium.clearing[0]
    lower, upper = equilibrium.bounds[0]
    ends = [
        float(_excess(equilibrium, jnp.asarray([bound], jnp.zeros(()).dtype), params)[0][0])
        for bound in (lower, upper)
    ]
    where = (
        f" The excess demand {name!r} is {ends[0]:.6g} at {price}={lower:g} and {ends[1]:.6g} "
        f"at {price}={upper:g}"
    )
    if not all(map(math.isfinite, ends)):
        return where + ": not finite at a bound; narrow the bounds."
    if ends[0] * ends[1] > 0:
        return where + f": the same sign, so no equilibrium is bracketed in [{lower:g}, {upper:g}]."
    return where + ": an equilibrium lies between; start closer to it."


def _report(equilibrium: Equilibrium, validate: str, root: _newton.Root, params) -> None:
    if validate == "off":
        return
    if not is_traced(root.status):
        if int(root.status) == _newton.CONVERGED:
            return
        message = _failure(equilibrium, root.status, root.steps, root.x, root.value)
        if validate == "raise":
            raise EquilibriumError(message + _bracket(equilibrium, params))
        warnings.warn(message, LcmWarning, stacklevel=3)
        return

    def host(status, steps, x, value):
        status = np.asarray(status)
        failed = np.argwhere(status.reshape(-1) != _newton.CONVERGED)
        if not len(failed):
            return
        i = int(failed[0][0])  # the first failed member of a jax.vmap

        def at(array):
            return np.asarray(array).reshape(-1, *np.shape(array)[status.ndim :])[i]

        message = _failure(equilibrium, at(status), at(steps), at(x), at(value))
        if status.ndim:
            message += f" (batch member {i} of a jax.vmap)"
        if validate == "raise":
            raise EquilibriumError(message)
        warnings.warn(message, LcmWarning, stacklevel=2)

    stopped = jax.lax.stop_gradient((root.status, root.steps, root.x, root.value))
    jax.debug.callback(host, *stopped)
