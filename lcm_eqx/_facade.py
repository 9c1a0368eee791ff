"""The model: regimes over a finite horizon, with `solve` and `simulate`."""

from __future__ import annotations

import dataclasses
import enum
import functools
import gc
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import equinox as eqx
import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np

from . import _describe, _diagnostics
from ._errors import (
    InvalidInitialConditionsError,
    InvalidParamsError,
    LcmError,
    ModelInitializationError,
    warn,
)
from ._estimation._distribution import Distribution, bin_initial, check_initial_mass, forward
from ._grids import (
    AgeGrid,
    DiscreteGrid,
)
from ._initial import encode_initial_conditions, process_nodes
from ._logging import log_time, logger, timed
from ._model._params import (
    arrays_from_series,
    bind_fixed,
    check_params,
    params_template,
    resolve_params,
)
from ._model._plan import ModelPlan, build_plan
from ._model._regime import Regime
from ._model._shared import with_shared
from ._numerics import float64_on_device_without_it
from ._pandas import coerce_params
from ._persistence import model_structure
from ._progress import progress_mode
from ._simulate._result import SimulationResult
from ._simulate._simulate import (
    draw_checks,
    simulate_chunk,
    variable_kinds,
)
from ._solve._backward import solve_model
from ._solve._grid_search import GridSearch, assign_solvers
from ._solve._solution import Solution
from ._solve._solver import AbstractSolver
from ._typing import InitialConditions, Params
from ._validation import INFEASIBLE_ADVICE, INFEASIBLE_CHECK, enforce, is_traced

VALIDATE_OPTIONS = ("raise", "warn", "off")


class _DirectMethod:
    """A `Model` method bound as a `functools.partial` of the model rather than an
    equinox `BoundMethod` (see `_direct_method`)."""

    def __init__(self, function: Callable):
        self.function = function
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__wrapped__ = function

    def __call__(self, *args, **kwargs):  # a Callable, as `_direct_method` declares
        return self.function(*args, **kwargs)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self.function
        bound = functools.partial(self.function, instance)
        bound.__doc__ = self.function.__doc__
        return bound


_Method = TypeVar("_Method", bound=Callable)


def _direct_method(function: _Method) -> _Method:
    """Bind a `Model` method as a `functools.partial` of the model.

    Equinox turns every method of a Module into a `BoundMethod` on each attribute
    access, a Module built field by field: 60–150 µs for each `model.solve(...)`, a
    tenth of a steady solve of the quick start's retirement model. A partial keeps the
    signature and the docstring, and `jax.jit(model.solve)` still works (the model is
    then a constant of the program, as it was). Type checkers see the method itself.
    """
    return cast(_Method, _DirectMethod(function))


class _CollectorPaused:
    """Python's cyclic garbage collector paused for a block (`Model.solve` and
    `Model.simulate` calling their programs).

    A first call traces and lowers the program, which allocates about a million
    objects: the full collections they triggered took 0.08 s of the 0.5 s trace of the
    DC-EGM retirement model. Reference counting still frees what is not cyclic, and the
    collector is back (if it was on) after the block. A steady call pays ~0.3 µs.
    """

    __slots__ = ("collecting",)

    def __enter__(self) -> None:
        self.collecting = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info) -> None:
        if self.collecting:
            gc.enable()


# Set when an XLA refused a solver's compiler option: later solves compile without any.
_OPTIONS_REFUSED: list[str] = []


def _compiler_options(plan: ModelPlan, solvers: Mapping[str, AbstractSolver]) -> dict[str, Any]:
    """The XLA options of a model's solve program: those that the solvers of all its
    non-terminal regimes ask for alike (`AbstractSolver.compiler_options`).

    An option helps its own solver's kernels and may slow another's (DC-EGM's suit
    grid search's kernel poorly), so a model that mixes solvers compiles with the
    options they share. Terminal regimes have no Bellman problem to speak of.
    """
    wanted = [
        solvers[name].compiler_options()
        for name, regime in plan.regimes.items()
        if not regime.is_terminal
    ]
    if not wanted:
        return {}
    first, *others = wanted
    return {
        key: value
        for key, value in first.items()
        if all(key in other and other[key] == value for other in others)
    }


class Model(eqx.Module):
    """A finite-horizon life-cycle model.

    Args:
        regimes: the regimes by name.
        n_periods: periods are `0 ... n_periods - 1`; the continuation after the last is 0.
            May be left out when `ages` has a `stop` (then it is `ages.n_periods`).
        regime_ids: an `IntEnum` whose member names equal the regime names; `None`
            derives one from the order of `regimes` (see `model.regime_ids`).
        ages: an `AgeGrid` labelling periods with ages and providing `age`.
        solver: the default solver of every regime (default `GridSearch()`); a regime's
            own `Regime(solver=...)` wins. A default `DCEGM` leaves terminal regimes and
            regimes without its state and action to `GridSearch`.
        fixed_params: parameters bound at construction, nested like `params` (at
            `[regime][function][name]`, `[regime][name]` or `[name]`, one level each; a
            pandas Series like `params` works too).
            They leave `params_template()`, giving one again in `params` is an
            `InvalidParamsError`, and they are constants of the compiled programs.
        functions: functions shared by the regimes: each regime gets the entries that
            it uses (by argument name, from its own functions, constraints and
            transitions). Not `"utility"`; a name that a regime also defines is an error.
        state_transitions: laws of motion shared by the regimes: each non-terminal
            regime with the state gets the entry; a regime that also defines it is an
            error.

    All structural errors surface here as `ModelInitializationError`.

    Example:
        >>> model = Model(regimes={"working": working, "retired": retired}, n_periods=5,
        ...               regime_ids=RegimeId)
        >>> solution = model.solve(params)
    """

    regimes: dict[str, Regime]
    fixed_params: dict[str, Any]
    n_periods: int = eqx.field(static=True)
    regime_ids: type[enum.IntEnum] = eqx.field(static=True)
    ages: AgeGrid | None
    solver: AbstractSolver
    solvers: dict[str, AbstractSolver]
    plan: ModelPlan = eqx.field(static=True)
    _solve: Callable = eqx.field(static=True)  # the top-level program (compiler options)
    _solve_nested: Callable = eqx.field(static=True)  # inside a caller's trace
    _simulate: Callable = eqx.field(static=True)
    _forward: Callable = eqx.field(static=True)  # the forward distribution's program

    def __init__(
        self,
        regimes: Mapping[str, Regime],
        n_periods: int | None = None,
        *,
        regime_ids: type[enum.IntEnum] | None = None,
        ages: AgeGrid | None = None,
        solver: AbstractSolver | None = None,
        fixed_params: Mapping[str, Any] | None = None,
        functions: Mapping[str, Callable] | None = None,
        state_transitions: Mapping[str, Any] | None = None,
    ):

        if ages is not None and not isinstance(ages, AgeGrid):
            raise ModelInitializationError(f"Model: ages must be an AgeGrid, got {ages!r}.")
        n_periods = _horizon(n_periods, ages)
        solver = GridSearch() if solver is None else solver
        if not isinstance(solver, AbstractSolver):
            raise ModelInitializationError(
                f"Model: solver must be an lcm_eqx solver such as GridSearch(), got {solver!r}."
            )
        concern = float64_on_device_without_it()
        if concern is not None:
            warn(f"Model: {concern}")
        start = time.perf_counter()
        regimes = with_shared(regimes, functions, state_transitions)
        plan = build_plan(regimes, n_periods, regime_ids, has_ages=ages is not None, ages=ages)
        fixed = _plain_dicts(coerce_params(fixed_params))  # a Series, like params
        try:
            fixed = arrays_from_series(plan, fixed, "fixed_params")
        except InvalidParamsError as error:
            raise ModelInitializationError(f"Model: {error}") from error
        plan = dataclasses.replace(plan, fixed=bind_fixed(plan, fixed))
        self.regimes = dict(regimes)
        self.fixed_params = dict(plan.fixed.values)
        self.n_periods = n_periods
        self.regime_ids = plan.regime_ids
        self.ages = ages
        self.solver = solver
        self.solvers = assign_solvers(plan, regimes, solver)
        self.plan = plan
        solve = functools.partial(solve_model, plan, self.solvers, ages)
        static = ("validate", "progress")
        self._solve_nested = jax.jit(solve, static_argnames=static)
        options = _compiler_options(plan, self.solvers)
        self._solve = (
            jax.jit(solve, static_argnames=static, compiler_options=options)
            if options
            else self._solve_nested
        )
        self._simulate = jax.jit(
            functools.partial(_simulate_chunk_with_params, plan, self.solvers, ages),
            static_argnames=("progress", "validate"),
        )
        # One program for the forward distribution (eagerly, the work around its period
        # scans would be dispatched, and compiled, operation by operation).
        self._forward = jax.jit(functools.partial(forward, self))
        logger.info(
            "build: %d regimes, %d periods, %d segments in %.3f s",
            len(plan.regimes),
            n_periods,
            len(plan.segments),
            time.perf_counter() - start,
        )

    # A model is a large, immutable specification: identity is the right notion of
    # equality (it is what `jax.jit(model.solve)` hashes), not field-by-field comparison.
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> bool:
        return self is other

    def compiler_options(self) -> dict[str, Any]:
        """The XLA options that `model.solve` compiles with, for a program of your own
        that contains this model (a moment's `jax.grad`, an estimation step).

        A `jax.jit` inside another cannot carry options, so a `model.solve` or
        `model.distribution` traced by your `jax.jit` compiles with yours. On the
        30-period DC-EGM model of `benchmarks/first_hour.py` these options cut the
        compile of a distribution moment's gradient by about a fifth. Empty where the
        model's solvers ask for none, or where this XLA refused one.

        Example:
            >>> grad = jax.jit(jax.grad(moment), compiler_options=model.compiler_options())
        """
        return {} if _OPTIONS_REFUSED else _compiler_options(self.plan, self.solvers)

    def describe(
        self,
        params: Params | None = None,
        *,
        memory_budget: int | None = None,
        axis: str | None = None,
    ):
        """A readable summary of the model that sizes the knobs (`print()` it).

        Lists every regime's states, actions, grid sizes, parameters and state-action
        points per period. Given `params`, adds XLA's compiled memory of the solve; given
        also `memory_budget` (bytes), the fewest `batch_size` chunks on `axis` (default:
        the largest splayable state axis) whose compiled temp memory fits, found by
        compiling the candidates. Apply it with `model.with_batch_size(axis, batch_size)`.
        """
        return _describe.describe(self, params, memory_budget=memory_budget, axis=axis)

    def with_batch_size(self, axis: str, batch_size: int) -> Model:
        """A copy of the model whose grids named `axis` are splayed in chunks of `batch_size`."""
        return _describe.with_batch_size(self, axis, batch_size)

    def params_template(self) -> dict:
        """Every parameter, nested as `{regime: {function: {name: nan}}}`."""
        return params_template(self.plan)

    @_direct_method
    def solve(
        self, params: Params, *, validate: str = "raise", progress: bool | str = False
    ) -> Solution:
        """Solve the model by backward induction.

        A pure function of `params`: it can be wrapped in `jax.jit`, `jax.vmap` and
        `jax.grad`. Compiles once per shape of `params` and reuses the program for new
        values.

        Args:
            params: the parameters (see `params_template()`).
            validate: `"raise"` (default) raises `InvalidTransitionProbabilitiesError` if
                a transition probability vector is outside [0, 1] or does not sum to 1
                on the grid, and `NaNError` if a value is NaN or a continuous next state
                is NaN or infinite at a feasible point; `"warn"` warns instead; `"off"`
                skips the checks (results are then unvalidated). The checks are reduced
                inside the compiled solve; when the call is traced (`jax.jit`, `grad`,
                `vmap`) a host callback raises or warns with the same message (a raise
                under `jax.jit` reaches the caller as `jax.errors.JaxRuntimeError`
                holding the `LcmError` class name and message).
            progress: `False` (default), `True` / `"text"` (a line per period on stderr)
                or `"tqdm"` (a tqdm bar; text if tqdm is missing). Works under `jax.jit`
                (pass it as a static argument), `jax.vmap` and `jax.grad`.
        """
        _check_validate(validate)
        return self._solve_checked(self.checked_params(params), validate, progress_mode(progress))

    def checked_params(self, params: Params) -> dict[str, Any]:
        """`params` normalised (a Series becomes nested dicts, labelled Series leaves
        arrays) and checked against the model: once per call of a public method, which
        then hands the result down (`_solve_checked`)."""
        checked = arrays_from_series(self.plan, _plain_dicts(coerce_params(params)))
        check_params(self.plan, checked)
        return checked

    def _solve_checked(self, params: Params, validate: str, mode: str | None) -> Solution:
        """`solve` of parameters that `checked_params` returned."""
        options: dict[str, Any] = {"validate": validate != "off", "progress": mode}
        program = self._solve
        if program is not self._solve_nested and (_OPTIONS_REFUSED or is_traced(params)):
            program = self._solve_nested
        with timed(program, "solve", params, **options) as timer:
            with _CollectorPaused():
                try:
                    raw, infeasible = program(params, **options)
                except (jax.errors.JaxRuntimeError, ValueError) as error:
                    # An XLA without an option, or a caller's trace of untraced params.
                    refused = "No such compile option" in str(error)
                    if program is self._solve_nested or not (refused or "top-level" in str(error)):
                        raise
                    _OPTIONS_REFUSED.extend([str(error)] * refused)
                    raw, infeasible = self._solve_nested(params, **options)
            timer.done(raw, f" ({self.n_periods} periods)")
        solution = raw  # it records the model's structure (`Solution.model_structure`)
        if validate != "off" and not is_traced(infeasible):
            _start_copies_to_host((solution.violations, infeasible))
        enforce(
            validate,
            solution.violations,
            solution.checks,
            nan_detail=lambda: _diagnostics.diagnose_nan(self, params, solution),
            detail=lambda failure: self._transition_detail(params, solution, failure),
            stacklevel=3,  # the caller of `solve` (of `simulate`, `distribution`)
        )
        if infeasible and not is_traced(infeasible):
            _diagnostics.warn_infeasible_states(self, params, solution, infeasible)
        return solution

    def _transition_detail(self, params, solution: Solution, failure) -> str | None:
        return _diagnostics.transition_detail(self, params, solution, failure)

    def diagnose_nan(self, params: Params, solution: Solution | None = None) -> str | None:
        """Where a NaN first appears in the solution (regime, period, term, state, action).

        Returns None when the value arrays have no NaN. `solve` calls this itself under
        `validate="raise"` / `"warn"`.
        """
        params = coerce_params(params)
        if solution is None:
            solution = self.solve(params, validate="off")
        return _diagnostics.diagnose_nan(self, params, solution)

    def simulate(
        self,
        params: Params,
        initial_conditions: InitialConditions,
        solution: Solution | None = None,
        *,
        key: jax.Array | None = None,
        subject_batch_size: int = 0,
        validate: str = "raise",
        progress: bool | str = False,
    ) -> SimulationResult:
        """Simulate a panel of subjects forward.

        Args:
            params: the parameters.
            initial_conditions: a dict of arrays or a pandas DataFrame with `"regime"`
                (ids or names) and every state of the subjects' initial regimes
                (discrete states as codes or labels; process states as their node
                values, as user functions and `to_dataframe` show them, or as grid
                indices under the key `"<state>:index"`). An optional `"age"` (models
                with ages) is each subject's age on entry: a subject has no rows before
                it and starts there in its regime and states.
            solution: a solution of this model with these params; `None` solves first.
            key: a `jax.random.key` for the draws; same key, same draws.
            subject_batch_size: simulate in chunks of this many subjects (0: one pass);
                results do not depend on it.
            validate: `"raise"` (default) raises `InvalidTransitionProbabilitiesError`
                (or `NaNError`) when a transition at a simulated state and choice fails
                the checks of `solve` (probabilities outside [0, 1] or not summing to 1,
                a discrete next state out of range, a NaN or infinite continuous next
                state); `"warn"` warns, `"off"` skips the checks. Unless `"off"`, it
                also warns where subjects stand beyond a continuous state's grid (the
                solution is extrapolated there). Also passed to `solve` when `solution`
                is None. Invalid initial conditions always raise
                `InvalidInitialConditionsError`.
            progress: `False` (default), `True` / `"text"` or `"tqdm"`: a meter over
                periods and subject chunks (and over the solve when `solution` is None).
        """
        _check_validate(validate)
        mode = progress_mode(progress)
        params = self.checked_params(params)
        if (
            not isinstance(subject_batch_size, int)
            or isinstance(subject_batch_size, bool)
            or subject_batch_size < 0
        ):
            raise InvalidInitialConditionsError(
                f"simulate: subject_batch_size must be an int >= 0, got {subject_batch_size!r}."
            )
        if key is None:
            key = jax.random.key(0)
        if isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.shape == (2,):
            key = jax.random.wrap_key_data(key)  # a legacy jax.random.PRNGKey
        if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
            raise InvalidInitialConditionsError(
                f"simulate: key must be a typed JAX random key from jax.random.key(seed), got "
                f"{key!r}."
            )
        regime, states, entry = encode_initial_conditions(
            self.plan, initial_conditions, self.ages, lambda: process_nodes(self.plan, params)
        )
        traced = is_traced((params, regime, states, solution, key))
        if solution is None:
            solution = self._solve_checked(params, validate, mode)
        elif not isinstance(solution, Solution):
            raise LcmError(
                f"simulate: solution must be a Solution from model.solve, got "
                f"{type(solution).__name__}."
            )
        n = regime.shape[0]
        chunk = subject_batch_size if 0 < subject_batch_size < n else n
        parts, violations = [], []
        n_chunks = -(-n // chunk)
        with log_time(f"simulate ({n} subjects in {n_chunks} chunk(s), {self.n_periods} periods)"):
            for i, start in enumerate(range(0, n, chunk)):
                stop = min(start + chunk, n)
                index = np.arange(start, start + chunk)
                index = np.where(index < stop, index, start)  # pad the last chunk, drop after
                args = (
                    params,
                    solution.continuation_values,
                    solution.policies,
                    jnp.asarray(regime[index]),
                    {name: jnp.asarray(v[index]) for name, v in states.items()},
                    jnp.asarray(index, dtype=jnp.int32),
                    key,
                    jnp.asarray([i, n_chunks], dtype=jnp.int32),
                )
                entered = jnp.asarray(entry[index], dtype=jnp.int32)
                with timed(
                    self._simulate,
                    f"simulate chunk {i + 1}/{n_chunks}",
                    *args,
                    level=logging.DEBUG,
                    progress=mode,
                    validate=validate != "off",
                    entry=entered,
                ) as timer:
                    with _CollectorPaused():
                        record = self._simulate(
                            *args, progress=mode, validate=validate != "off", entry=entered
                        )
                    timer.done(record)
                violations.append(record.pop("violations", {}))
                # Eagerly each chunk's panel goes to host memory; traced, it stays an array.
                keep = (lambda x: x) if traced else np.asarray
                parts.append(jax.tree.map(lambda x, k=stop - start: keep(x)[:, :k], record))
        concatenate = jnp.concatenate if traced else np.concatenate
        record = jax.tree.map(lambda *xs: concatenate(xs, axis=1), *parts)
        if validate != "off":
            maximum = jnp.maximum if traced else np.maximum
            flags = jax.tree.map(lambda *xs: functools.reduce(maximum, xs), *violations)
            checks = {name: draw_checks(self.plan, r) for name, r in self.plan.regimes.items()}
            infeasible = _infeasible_subjects(self.plan, record, traced)
            texts = {} if traced else _infeasible_texts(self.plan, record, infeasible)
            enforce(
                validate,
                {
                    name: jnp.concatenate([flags[name], counts], axis=1)
                    if traced
                    else np.concatenate([np.asarray(flags[name]), counts], axis=1)
                    for name, counts in infeasible.items()
                },
                {name: (*checks[name], f"{INFEASIBLE_CHECK}:{name}") for name in checks},
                context=" (in simulate, at a simulated state and choice)",
                texts=texts,
                stacklevel=2,
            )
            if not traced:
                _diagnostics.warn_extrapolation(self.plan, record)
        return self._result(record)

    def distribution(
        self,
        params: Params,
        initial: InitialConditions | Mapping[str, Any],
        solution: Solution | None = None,
        *,
        validate: str = "raise",
    ) -> Distribution:
        """The exact distribution over the regimes' state grids in every period.

        Mass is pushed through the solution's policies (non-stochastic simulation, no
        draws): see `Distribution` for the moments, and docs/estimation.md. A pure
        function of `params`: `jax.grad` of a moment flows back to them.

        Args:
            params: the parameters.
            initial: either initial conditions like `simulate`'s (a dict of arrays or a
                DataFrame with `"regime"` and the states; each subject's mass `1/n` is
                put on the two grid nodes around its continuous state with
                linear-interpolation weights, beyond the grid on the end node), or a
                dict `{regime: mass}` of arrays of the regime's state shape (missing
                regimes start empty), summing to 1 over all regimes.
            solution: a solution of this model with these params; `None` solves first.
            validate: passed to `solve` when `solution` is None.
        """
        self.plan.reject_age_varying_grids("distribution")
        _check_validate(validate)
        params = self.checked_params(params)
        mass = self._initial_mass(params, initial)
        if solution is None:
            solution = self._solve_checked(params, validate, None)
        elif not isinstance(solution, Solution):
            raise LcmError(
                f"distribution: solution must be a Solution from model.solve, got "
                f"{type(solution).__name__}."
            )
        if mass is None:
            regime, states, entry = encode_initial_conditions(
                self.plan, initial, self.ages, lambda: process_nodes(self.plan, params)
            )
            if np.any(np.asarray(entry) != 0):
                raise InvalidInitialConditionsError(
                    "distribution: every subject must start in period 0 (an 'age' entry "
                    "other than the first age is not supported)."
                )
            return self._forward(
                params,
                solution.continuation_values,
                solution.policies,
                None,
                (jnp.asarray(regime), states),
            )
        return self._forward(params, solution.continuation_values, solution.policies, mass)

    def initial_mass(
        self, initial, params: Params | None = None, *, subject_mass=None
    ) -> dict[str, Any]:
        """`initial` (initial conditions with a `regime` entry, or mass arrays by
        regime) as the mass arrays by regime that `distribution` starts from.

        Args:
            initial: as `distribution` takes it.
            params: the parameters; needed only where a process state is given as node
                values and its nodes depend on parameters (without them the nodes are
                the grid's own).
            subject_mass: with initial conditions, each subject's mass, an array
                `(n_subjects,)` (default `1/n` each); the result is linear in it, and it
                may be traced (`jax.jacrev` in it gives each subject's own mass).
        """
        mass = self._initial_mass(None, initial)
        if mass is not None:
            if subject_mass is not None:
                raise InvalidInitialConditionsError(
                    "initial_mass: subject_mass goes with initial conditions (a 'regime' "
                    "entry), not with mass arrays by regime."
                )
            return mass
        checked = None if params is None else self.checked_params(params)
        regime, states, _ = encode_initial_conditions(
            self.plan, initial, self.ages, lambda: process_nodes(self.plan, checked)
        )
        if subject_mass is not None and jnp.shape(subject_mass) != jnp.shape(regime):
            raise InvalidInitialConditionsError(
                f"initial_mass: subject_mass has shape {jnp.shape(subject_mass)}, expected "
                f"{jnp.shape(regime)} (one per subject)."
            )
        return bin_initial(self.plan, jnp.asarray(regime), states, subject_mass)

    def _initial_mass(self, params, initial) -> dict[str, Any] | None:
        """`initial` as mass arrays by regime, or None when it is initial conditions."""
        if not isinstance(initial, Mapping) or "regime" in initial:
            return None
        unknown = [k for k in initial if k not in self.plan.regimes]
        if unknown:
            raise InvalidInitialConditionsError(
                f"distribution: initial must be initial conditions (with a 'regime' entry) "
                f"or a dict of mass arrays by regime; {unknown} are not regimes "
                f"({list(self.plan.regimes)})."
            )
        dtype = jnp.zeros(()).dtype
        mass = {}
        for name, regime in self.plan.regimes.items():
            shape = tuple(regime.grids[s].n_points for s in regime.states)
            if name not in initial:
                mass[name] = jnp.zeros(shape, dtype)
                continue
            array = jnp.asarray(initial[name], dtype)
            if array.shape != shape:
                raise InvalidInitialConditionsError(
                    f"distribution: initial[{name!r}] has shape {array.shape}, expected {shape} "
                    f"(the grids of {list(regime.states)})."
                )
            mass[name] = array
        if not is_traced(mass):
            check_initial_mass(mass, dtype)
        return mass

    def _result(self, record) -> SimulationResult:
        plan = self.plan
        state_kinds, _ = variable_kinds(plan)
        labels = {}
        states = {}
        for name in state_kinds:
            grid = plan.state_grid(name)
            if isinstance(grid, DiscreteGrid):
                labels[name] = grid.labels
                states[name] = record["states"][name]
            else:
                states[name] = record["state_values"][name]
        for regime in plan.regimes.values():
            for name in regime.actions:
                grid = regime.grids[name]
                if isinstance(grid, DiscreteGrid):
                    labels[name] = grid.labels
        ages = None
        if self.ages is not None:
            ages = tuple(float(self.ages.age(t)) for t in range(self.n_periods))
        return SimulationResult(
            regime=record["regime"],
            present=record["present"],
            value=record["value"],
            states=states,
            actions=dict(record["actions"]),
            regime_names=plan.names,
            has_variable={n: (*r.states, *r.actions) for n, r in plan.regimes.items()},
            labels=labels,
            ages=ages,
            model_structure=model_structure(self),
        )


def _infeasible_subjects(plan: ModelPlan, record, traced: bool) -> dict[str, Any]:
    """By regime, `(n_periods, 1)`: how many simulated subjects had no feasible action
    (value -inf) in each period."""
    xp = jnp if traced else np
    stuck = xp.asarray(record["present"]) & xp.isneginf(xp.asarray(record["value"]))
    dtype = record["value"].dtype
    regime = xp.asarray(record["regime"])
    return {
        name: xp.sum(stuck & (regime == r.id), axis=1, keepdims=True).astype(dtype)
        for name, r in plan.regimes.items()
    }


def _infeasible_texts(plan: ModelPlan, record, infeasible) -> dict[str, str]:
    """The eager message of each regime's first simulated subject with no feasible
    action: the subject, its state and the regime's constraints."""
    texts = {}
    for name, counts in infeasible.items():
        periods = np.flatnonzero(counts[:, 0])
        if not periods.size:
            continue
        period = int(periods[0])
        regime = plan.regimes[name]
        stuck = (
            np.asarray(record["present"][period])
            & np.isneginf(np.asarray(record["value"][period]))
            & (np.asarray(record["regime"][period]) == regime.id)
        )
        subject = int(np.flatnonzero(stuck)[0])
        shown = []
        for state in regime.states:
            grid = regime.grids[state]
            x = record["state_values"][state][period, subject]
            if isinstance(grid, DiscreteGrid):
                shown.append(
                    f"{state}={grid.labels[int(record['states'][state][period, subject])]!r}"
                )
            else:
                shown.append(f"{state}={float(x):.6g}")
        constraints = list(regime.constraints) or "none"
        texts[f"{INFEASIBLE_CHECK}:{name}"] = (
            f"Regime {name!r}, period {period}: {int(counts[period, 0])} simulated subject(s) "
            f"reached a state where no action is feasible, the first subject {subject} at "
            f"({', '.join(shown)}): the constraints {constraints} rule out every point of "
            "the action grids there, or every feasible action leads only to such states. "
            "Their continuous actions are NaN and their value -inf. " + INFEASIBLE_ADVICE
        )
    return texts


def _simulate_chunk_with_params(
    plan,
    solvers,
    ages,
    params,
    values,
    policies,
    regime,
    states,
    subject_ids,
    key,
    chunk=None,
    progress=None,
    validate=False,
    entry=None,
):
    return simulate_chunk(
        plan,
        solvers,
        ages,
        resolve_params(plan, params),
        values,
        regime,
        states,
        subject_ids,
        key,
        entry=entry,
        chunk=chunk,
        progress=progress,
        validate=validate,
        policies=policies,
    )


def _horizon(n_periods: int | None, ages: AgeGrid | None) -> int:
    """`n_periods`, or the horizon of an `AgeGrid` with a `stop`; they must agree."""
    from_ages = None if ages is None else ages.n_periods
    if n_periods is None:
        if from_ages is None:
            raise ModelInitializationError(
                "Model: give n_periods, or ages=AgeGrid(start, stop, step) from which it follows."
            )
        return from_ages
    if ages is not None and from_ages is not None and n_periods != from_ages:
        raise ModelInitializationError(
            f"Model: n_periods={n_periods!r} disagrees with ages, which run from "
            f"{ages.start} to {ages.stop} in steps of {ages.step:g} ({from_ages} periods); "
            "give one of them."
        )
    return n_periods


def _start_copies_to_host(tree) -> None:
    """Start copying every array of `tree` to the host at once: the checks then read them
    after one round trip to an accelerator, not one per array (about 0.5 ms each on a
    TPU). Free on a CPU; arrays spanning other processes are left to the checks."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and leaf.is_fully_addressable:
            leaf.copy_to_host_async()


def _plain_dicts(params):
    """Any mapping (e.g. a MappingProxyType) as plain dicts, which `jax.jit` accepts."""
    if isinstance(params, Mapping):
        return {k: _plain_dicts(v) for k, v in params.items()}
    return params


def _check_validate(validate: str) -> None:
    if validate not in VALIDATE_OPTIONS:
        raise LcmError(f"validate must be one of {VALIDATE_OPTIONS}, got {validate!r}.")
