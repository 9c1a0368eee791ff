"""A table of bad inputs: each raises its `LcmError` subclass at the earliest point.

Every row of `CASES` is a *case function* that does the set-up (which must succeed:
building the grids, regimes and models that are valid so far) and returns the one
call that must fail. The stage in each id says where that call sits:

- `grid-*`: constructing a grid (`GridInitializationError`);
- `regime-*`: constructing a `Regime`, `model-*`: constructing a `Model`
  (`ModelInitializationError`);
- `solve-*`: `model.solve` (`InvalidParamsError`, `InvalidTransitionProbabilitiesError`);
- `solution-*`: reading a valid solution (`InvalidPeriodError`);
- `simulate-*`: `model.simulate` with a valid solution (`InvalidInitialConditionsError`).

A few rows are marked xfail where the fix lies outside the files this test's author
could change; each names the fix in its reason.

Each row also lists substrings the message must contain: the regime, function and
variable concerned, quoted as `repr` does, wherever those exist.
"""

from __future__ import annotations

import functools
import re
import warnings
from enum import Enum, IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

# ---------------------------------------------------------------------------------------
# A tiny valid model: `working` (wealth, health; labor, consumption) and `retired`
# ---------------------------------------------------------------------------------------


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


class Health(IntEnum):
    bad = 0
    good = 1


N_PERIODS = 2


def wealth_grid():
    return lcm.LinSpacedGrid(start=1.0, stop=10.0, n_points=3)


def consumption_grid():
    return lcm.LinSpacedGrid(start=1.0, stop=10.0, n_points=4)


def utility(consumption, labor, health, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work) + 0.1 * health


def labor_income(labor, wage):
    return jnp.where(labor == Labor.work, wage, 0.0)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_health(health, health_transition):
    return health_transition[health]


def next_regime(labor, regime_transition):
    return regime_transition[labor]


def utility_retired(consumption):
    return jnp.log(consumption)


def next_wealth_retired(wealth, consumption, interest_rate):
    return (1 + interest_rate) * (wealth - consumption)


def borrowing(consumption, wealth):
    return consumption <= wealth


def working_kwargs(**overrides):
    """The arguments of the valid `working` regime, with some replaced."""
    kwargs = {
        "states": {"wealth": wealth_grid(), "health": lcm.DiscreteGrid(Health)},
        "actions": {"labor": lcm.DiscreteGrid(Labor), "consumption": consumption_grid()},
        "functions": {"utility": utility, "labor_income": labor_income},
        "state_transitions": {
            "wealth": next_wealth,
            "health": lcm.MarkovTransition(next_health),
        },
        "transition": lcm.MarkovTransition(next_regime),
        "constraints": {"borrowing": borrowing},
    }
    kwargs.update(overrides)
    return kwargs


def retired_kwargs(**overrides):
    kwargs = {
        "states": {"wealth": wealth_grid()},
        "actions": {"consumption": consumption_grid()},
        "functions": {"utility": utility_retired},
        "state_transitions": {"wealth": next_wealth_retired},
        "transition": lambda: RegimeId.retired,
        "constraints": {"borrowing": borrowing},
    }
    kwargs.update(overrides)
    return kwargs


def working_regime(**overrides):
    return lcm.Regime(**working_kwargs(**overrides))


def retired_regime(**overrides):
    return lcm.Regime(**retired_kwargs(**overrides))


def model_kwargs(working=None, retired=None, **overrides):
    kwargs = {
        "regimes": {
            "working": working_regime() if working is None else working,
            "retired": retired_regime() if retired is None else retired,
        },
        "n_periods": N_PERIODS,
        "regime_ids": RegimeId,
    }
    kwargs.update(overrides)
    return kwargs


PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.0,
    "disutility_of_work": 0.5,
    "wage": 5.0,
    "health_transition": jnp.array([[0.6, 0.4], [0.2, 0.8]]),
    "regime_transition": jnp.array([[0.9, 0.1], [0.0, 1.0]]),
}


def params_with(**changes):
    """`PARAMS` with top-level entries replaced (`None` deletes one)."""
    params = dict(PARAMS)
    for key, value in changes.items():
        if value is None:
            params.pop(key)
        else:
            params[key] = value
    return params


# Bad health probabilities in bad health (row 0 sums to 0.99).
BAD_PROBABILITIES = params_with(health_transition=jnp.array([[0.6, 0.39], [0.2, 0.8]]))


@functools.cache
def model():
    return lcm.Model(**model_kwargs())


@functools.cache
def solution():
    return model().solve(PARAMS)


def initial_conditions(**changes):
    """Valid initial conditions for two subjects, with entries replaced (`None` deletes)."""
    conditions = {
        "regime": np.array([RegimeId.working, RegimeId.retired]),
        "wealth": np.array([5.0, 8.0]),
        "health": np.array(["good", "bad"]),
    }
    for key, value in changes.items():
        if value is None:
            conditions.pop(key)
        else:
            conditions[key] = value
    return conditions


def simulate(conditions, params=None, **kwargs):
    """The failing call: simulate with a valid solution, so only the conditions (or the
    `params` of the draws) are at fault; a partial, like `solve`'s."""
    the_model, the_solution = model(), solution()
    return functools.partial(
        the_model.simulate,
        PARAMS if params is None else params,
        conditions,
        solution=the_solution,
        key=jax.random.key(0),
        **kwargs,
    )


def solve(params, the_model=None, **kwargs):
    """The failing call `the_model.solve(params, **kwargs)`, as a `functools.partial` so
    that the jitted variants below can call the same solve under `jax.jit`."""
    the_model = model() if the_model is None else the_model
    return functools.partial(the_model.solve, params, **kwargs)


def build_model(**kwargs):
    """The failing call: construct a Model from regimes that were built successfully."""
    return lambda: lcm.Model(**model_kwargs(**kwargs))


def _process_simulate(**changes):
    """The failing call: simulate a model whose `working` regime has an income process."""
    working = working_regime(
        states={
            "wealth": wealth_grid(),
            "health": lcm.DiscreteGrid(Health),
            "income": lcm.RouwenhorstGrid(3, rho=0.5, sigma=0.1),
        }
    )
    the_model = lcm.Model(**model_kwargs(working=working))
    the_solution = the_model.solve(PARAMS)
    conditions = initial_conditions(**{"income": np.array([0.0, 0.0]), **changes})
    return lambda: the_model.simulate(PARAMS, conditions, solution=the_solution)


def _aged_simulate(**changes):
    """The failing call: simulate the base model with ages 40, 50."""
    the_model = lcm.Model(**model_kwargs(ages=lcm.AgeGrid(start=40, step=10)))
    the_solution = the_model.solve(PARAMS)
    conditions = initial_conditions(**changes)
    return lambda: the_model.simulate(PARAMS, conditions, solution=the_solution)


def _period_indexed_utility():
    def utility_with_bonus(consumption, labor, health, disutility_of_work, bonus, period):
        return utility(consumption, labor, health, disutility_of_work) + bonus[period]

    working = working_regime(
        functions={"utility": utility_with_bonus, "labor_income": labor_income}
    )
    the_model = lcm.Model(**model_kwargs(working=working))
    return solve({**PARAMS, "bonus": jnp.array([1.0])}, the_model)


def _bound_keyword_given():
    working = working_regime(
        functions={"utility": utility, "labor_income": functools.partial(labor_income, wage=5.0)}
    )
    return solve(PARAMS, lcm.Model(**model_kwargs(working=working)))


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------

G = lcm.GridInitializationError
M = lcm.ModelInitializationError
P = lcm.InvalidParamsError
T = lcm.InvalidTransitionProbabilitiesError
I = lcm.InvalidInitialConditionsError


class NotZeroBased(IntEnum):
    low = 1
    high = 2


class WithGap(IntEnum):
    low = 0
    high = 2


class StringValued(Enum):
    low = "x"
    high = "y"


# `Model.solve` hands `params` straight to `jax.jit`, which rejects a non-pytree or a
# string leaf with a raw TypeError before lcm_eqx sees them. `_params.check_params` does
# these checks eagerly; these rows pass once `Model.solve`/`simulate` call it first.


def _cycle_regime():
    def a(b):
        return b + 1.0

    def b(a):
        return a - 1.0

    working = working_regime(
        functions={"utility": lambda consumption, a: jnp.log(consumption) + a, "a": a, "b": b}
    )
    return build_model(working=working)


def _age_model():
    working = working_regime(
        functions={
            "utility": lambda consumption, age: jnp.log(consumption) * age,
            "labor_income": labor_income,
        }
    )
    return build_model(working=working)


def _unreachable_target_model():
    """`retired` has a state (`pension`) that `working`'s transitions do not produce."""
    retired = retired_regime(
        states={"wealth": wealth_grid(), "pension": lcm.DiscreteGrid(["low", "high"])},
        state_transitions={"wealth": next_wealth_retired, "pension": lambda pension: pension},
    )
    the_model = lcm.Model(**model_kwargs(retired=retired))
    return solve(PARAMS, the_model)


def _discrete_next_state_out_of_range():
    """`next_health` is deterministic and moves good health (code 1) to code 2."""
    working = working_regime(
        state_transitions={"wealth": next_wealth, "health": lambda health: health + 1}
    )
    return solve(params_with(health_transition=None), lcm.Model(**model_kwargs(working=working)))


def _inactive_target_model():
    """`early` always moves to `late`, which only starts in period 2."""

    def regime(active):
        return lcm.Regime(
            states={"wealth": wealth_grid()},
            actions={"consumption": consumption_grid()},
            functions={"utility": lambda consumption: jnp.log(consumption)},
            state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 1},
            transition=lambda: 1,
            constraints={"borrowing": borrowing},
            active=active,
        )

    the_model = lcm.Model({"early": regime(range(0, 2)), "late": regime(range(2, 4))}, n_periods=4)
    return solve({"discount_factor": 0.9}, the_model)


def _inconsistent_state(categories):
    def case():
        retired = retired_regime(
            states={"wealth": wealth_grid(), "health": lcm.DiscreteGrid(categories)},
            state_transitions={"wealth": next_wealth_retired, "health": lambda health: health},
        )
        return build_model(retired=retired)

    return case


def _dcegm(**overrides):
    kwargs = {
        "state": "wealth",
        "action": "consumption",
        "savings": lcm.LinSpacedGrid(start=0.0, stop=10.0, n_points=5),
    }
    kwargs.update(overrides)
    return lcm.DCEGM(**kwargs)


def _dcegm_working(solver=None, **overrides):
    return build_model(working=working_regime(solver=solver or _dcegm(), **overrides))


def _dcegm_not_through_savings():
    working = working_regime(
        solver=_dcegm(),
        state_transitions={
            "wealth": lambda wealth, consumption, labor_income: (
                wealth - 0.5 * consumption + labor_income
            ),
            "health": lcm.MarkovTransition(next_health),
        },
    )
    return solve(PARAMS, lcm.Model(**model_kwargs(working=working)))


def _ez_regimes(aggregator=None, utility=None, **overrides):
    """`working` and `retired` with an aggregator and a positive utility (consumption)."""
    aggregator = lcm.EpsteinZin(terminal="time_aggregator") if aggregator is None else aggregator
    positive = utility or {"utility": lambda consumption: consumption}
    working = working_regime(
        aggregator=aggregator, functions={**positive, "labor_income": labor_income}
    )
    retired = retired_regime(aggregator=aggregator, functions=positive, **overrides)
    return {"working": working, "retired": retired}


EZ_PARAMS = {**params_with(disutility_of_work=None), "risk_aversion": 4.0, "eis": 0.5}
PB_PARAMS = {**params_with(disutility_of_work=None), "present_bias": 0.7}


def _working_only(params, **bad):
    """`params` with the regime-level entries `bad` set for `working` only."""
    params = dict(params)
    good = {name: params.pop(name) for name in bad}
    return {**params, "working": bad, "retired": good}


def _ez_zero_death():
    """The failing call: `working` (EpsteinZin, death inside the certainty equivalent by
    default) can reach a terminal `retired` whose value is 0, with risk aversion 4."""
    working = working_regime(
        aggregator=lcm.EpsteinZin(),
        functions={"utility": lambda consumption: consumption, "labor_income": labor_income},
    )
    retired = retired_regime(
        transition=None, state_transitions={}, functions={"utility": lambda: 0.0}
    )
    return solve(EZ_PARAMS, lcm.Model(**model_kwargs(working=working, retired=retired)))


def _aggregator_solve(params, aggregator=None, utility=None):
    return solve(params, lcm.Model(**model_kwargs(**_ez_regimes(aggregator, utility))))


# ------------------------------------------------------------- third-wave grammar
HEALTH_BONUS_TABLE = np.array([0.0, 0.1])


def _iid_solve(params_income, grid=None):
    """The failing call: solve with an i.i.d. `income` state in `working` whose chain's
    parameters are `params_income` (at `params['working']['next_income']`)."""
    grid = lcm.IIDGrid(points=np.array([0.0, 1.0]), n_points=2) if grid is None else grid
    working = working_regime(
        states={"wealth": wealth_grid(), "health": lcm.DiscreteGrid(Health), "income": grid}
    )
    the_model = lcm.Model(**model_kwargs(working=working))
    return solve({**PARAMS, "working": {"next_income": params_income}}, the_model)


def _discount_function(discount_factor, solver=None):
    """`working` with a regime function `discount_factor` (and no scalar parameter)."""
    functions = {"utility": utility, "labor_income": labor_income}
    return working_regime(
        functions={**functions, "discount_factor": discount_factor}, solver=solver
    )


def _series_solve(bonus):
    """The failing call: solve a model whose utility reads `bonus[health]`, given as a
    labelled Series `bonus`."""

    def utility_with_bonus(consumption, labor, health, disutility_of_work, bonus):
        return utility(consumption, labor, health, disutility_of_work) + bonus[health]

    working = working_regime(
        functions={"utility": utility_with_bonus, "labor_income": labor_income}
    )
    the_model = lcm.Model(**model_kwargs(working=working))
    return solve({**PARAMS, "working": {"utility": {"bonus": bonus}}}, the_model)


def _numpy_table_solve():
    def utility_with_table(consumption, labor, health, disutility_of_work):
        return utility(consumption, labor, health, disutility_of_work) + HEALTH_BONUS_TABLE[health]

    working = working_regime(
        functions={"utility": utility_with_table, "labor_income": labor_income}
    )
    return solve(PARAMS, lcm.Model(**model_kwargs(working=working)))


def _infeasible_state_simulate():
    """A consumption grid from 3: a worker at wealth 1 has no feasible action."""
    actions = {"labor": lcm.DiscreteGrid(Labor), "consumption": lcm.LinSpacedGrid(3.0, 10.0, 4)}
    the_model = lcm.Model(**model_kwargs(working=working_regime(actions=actions)))
    with pytest.warns(lcm.LcmWarning, match="no feasible action"):  # solve warns of it
        the_solution = the_model.solve(PARAMS)
    return functools.partial(
        the_model.simulate,
        PARAMS,
        initial_conditions(wealth=np.array([1.0, 8.0])),
        solution=the_solution,
        key=jax.random.key(0),
    )


CASES = [
    # ------------------------------------------------------ preference aggregators
    pytest.param(
        lambda: lambda: working_regime(aggregator="EpsteinZin"),
        M,
        ["Regime", "aggregator", "'EpsteinZin'"],
        id="regime-aggregator-not-an-aggregator",
    ),
    pytest.param(
        lambda: lambda: lcm.PresentBias(kind="hyperbolic"),
        M,
        ["PresentBias", "kind", "'hyperbolic'", "'naive'"],
        id="regime-present-bias-unknown-kind",
    ),
    pytest.param(
        lambda: build_model(
            retired=retired_regime(
                aggregator=lcm.EpsteinZin(), transition=None, state_transitions={}
            )
        ),
        M,
        ["'retired'", "EpsteinZin", "terminal"],
        id="model-aggregator-on-terminal-regime",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                aggregator=lcm.PresentBias(), taste_shocks=lcm.ExtremeValueShocks()
            ),
            retired=retired_regime(aggregator=lcm.PresentBias()),
        ),
        M,
        ["'working'", "PresentBias", "taste_shocks"],
        id="model-aggregator-with-taste-shocks",
    ),
    pytest.param(
        lambda: build_model(working=working_regime(aggregator=lcm.EpsteinZin())),
        M,
        ["'working'", "'retired'", "EpsteinZin", "same aggregator"],
        id="model-aggregator-differs-from-reached-regime",
    ),
    pytest.param(
        lambda: build_model(
            **_ez_regimes(),
            solver=lcm.DCEGM(
                state="wealth", action="consumption", savings=lcm.LinSpacedGrid(0.0, 10.0, 5)
            ),
        ),
        M,
        ["'working'", "DCEGM", "EpsteinZin", "not supported by DCEGM yet", "Euler equation"],
        id="model-aggregator-with-dcegm",
    ),
    pytest.param(
        lambda: build_model(
            **_ez_regimes(
                solver=lcm.DCEGM(
                    state="wealth", action="consumption", savings=lcm.LinSpacedGrid(0.0, 10.0, 5)
                )
            )
        ),
        M,
        ["'retired'", "EpsteinZin", "not supported by DCEGM yet", "GridSearch()"],
        id="regime-epstein-zin-with-dcegm",
    ),
    pytest.param(
        lambda: build_model(
            **_ez_regimes(aggregator=lcm.PresentBias()),
            solver=lcm.DCEGM(
                state="wealth", action="consumption", savings=lcm.LinSpacedGrid(0.0, 10.0, 5)
            ),
        ),
        M,
        ["'working'", "PresentBias", "not supported by DCEGM yet", "Euler equation"],
        id="model-present-bias-with-dcegm",
    ),
    pytest.param(
        lambda: _aggregator_solve(_working_only(EZ_PARAMS, risk_aversion=1.0)),
        P,
        ["'working'", "EpsteinZin", "'risk_aversion'", "!= 1"],
        id="solve-epstein-zin-risk-aversion-one",
    ),
    pytest.param(
        lambda: _aggregator_solve(_working_only(EZ_PARAMS, eis=1.0)),
        P,
        ["'working'", "EpsteinZin", "'eis'", "!= 1"],
        id="solve-epstein-zin-eis-one",
    ),
    pytest.param(
        lambda: _aggregator_solve(
            EZ_PARAMS,
            utility={"utility": lambda consumption: jnp.log(consumption)},
        ),
        M,
        ["'retired'", "'utility'", "EpsteinZin", "positive"],
        id="solve-epstein-zin-non-positive-utility",
    ),
    pytest.param(
        lambda: _aggregator_solve(_working_only(PB_PARAMS, present_bias=1.5), lcm.PresentBias()),
        P,
        ["'working'", "PresentBias", "'present_bias'", "(0, 1]"],
        id="solve-present-bias-above-one",
    ),
    pytest.param(
        lambda: _aggregator_solve(
            _working_only(PB_PARAMS, present_bias=0.0), lcm.PresentBias(kind="naive")
        ),
        P,
        ["'working'", "PresentBias", "'present_bias'", "(0, 1]"],
        id="solve-present-bias-zero",
    ),
    # ------------------------------------------------------ porting from pylcm
    pytest.param(
        lambda: lambda: lcm.AgeGrid(start=40, step="10W"),
        G,
        ["AgeGrid", "step", "'10W'", "'Y'"],
        id="grid-age-unknown-step-string",
    ),
    pytest.param(
        lambda: lambda: lcm.AgeGrid(start=40, stop=55, step=10),
        G,
        ["AgeGrid", "stop", "whole number", "10"],
        id="grid-age-stop-not-whole-steps",
    ),
    pytest.param(
        lambda: lambda: working_regime().replace(stats={}),
        M,
        ["Regime.replace", "'stats'", "'states'"],
        id="regime-replace-unknown-argument",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(active=lambda t: t < 1)),
        M,
        ["'retired'", "active", "'t'", "'period'", "'age'"],
        id="model-active-argument-not-period-or-age",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(active=lambda age: age < 50)),
        M,
        ["'retired'", "active", "'age'", "AgeGrid"],
        id="model-active-by-age-without-ages",
    ),
    pytest.param(
        lambda: build_model(ages=lcm.AgeGrid(start=40, stop=60, step="10Y")),
        M,
        ["n_periods=2", "3 periods", "ages"],
        id="model-n-periods-disagrees-with-ages",
    ),
    pytest.param(
        _period_indexed_utility,
        P,
        ["'working'", "'utility'", "'bonus'", "(1,)", "period 1"],
        id="solve-period-indexed-parameter-too-short",
    ),
    pytest.param(
        lambda: solve(params_with(regime_transition=jnp.array([[0.9, 0.1]]))),
        P,
        ["'working'", "'next_regime'", "'regime_transition'", "(1, 2)", "period 0"],
        id="solve-parameter-row-read-out-of-bounds",
    ),
    pytest.param(
        _bound_keyword_given,
        P,
        ["Unknown parameter", "'wage'"],
        id="solve-bound-keyword-given-as-parameter",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(regime=None, regime_id=np.array([0, 1]))),
        I,
        ["'regime'", "'regime_id'"],
        id="simulate-regime-id-spelling",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(age=np.array([40, 40]))),
        I,
        ["'age'", "AgeGrid"],
        id="simulate-age-without-ages",
    ),
    pytest.param(
        lambda: _aged_simulate(age=np.array([40, 45])),
        I,
        ["'age'", "45", "40 to 50"],
        id="simulate-age-not-on-the-grid",
    ),
    pytest.param(
        lambda: _process_simulate(income=np.array([0.01, 0.0])),
        I,
        ["'income'", "'working'", "0.01", "nearest nodes", "'income:index'"],
        id="simulate-process-value-not-a-node",
    ),
    pytest.param(
        lambda: _process_simulate(**{"income:index": np.array([1, 1])}),
        I,
        ["'income'", "'income:index'", "one of them"],
        id="simulate-process-value-and-index",
    ),
    # ------------------------------------------------- grids that vary with age
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=1.0, stop=lambda age: 10.0 + age, n_points=1),
        G,
        ["LinSpacedGrid", "n_points", ">= 2"],
        id="grid-age-varying-one-point",
    ),
    pytest.param(
        lambda: (
            lambda: lcm.LinSpacedGrid(
                start=np.array([1.0, 5.0]), stop=np.array([2.0, 3.0]), n_points=3
            )
        ),
        G,
        ["LinSpacedGrid", "start must be < stop in every period", "start=5", "stop=3", "period 1"],
        id="grid-age-varying-start-above-stop-in-a-period",
    ),
    pytest.param(
        lambda: lambda: lcm.LogSpacedGrid(start=np.array([1.0, 0.0]), stop=5.0, n_points=3),
        G,
        ["LogSpacedGrid", "start must be > 0", "period 1"],
        id="grid-age-varying-log-start-not-positive",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=1.0, stop=lambda wealth: wealth, n_points=3),
        G,
        ["LinSpacedGrid", "stop", "'wealth'", "'age'"],
        id="grid-age-varying-bound-not-a-function-of-age",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=1.0, stop=np.ones((2, 2)), n_points=3),
        G,
        ["LinSpacedGrid", "stop", "one-dimensional", "(2, 2)"],
        id="grid-age-varying-bound-two-dimensional",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                states={
                    "wealth": lcm.LinSpacedGrid(start=1.0, stop=lambda age: 50.0 - age, n_points=3),
                    "health": lcm.DiscreteGrid(Health),
                }
            ),
            ages=lcm.AgeGrid(start=48),
        ),
        G,
        ["LinSpacedGrid", "'working'", "'wealth'", "start=1", "stop=1", "period 1"],
        id="model-age-varying-start-reaches-stop-at-some-age",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                states={
                    "wealth": lcm.LinSpacedGrid(
                        start=1.0, stop=np.array([10.0, 11.0, 12.0]), n_points=3
                    ),
                    "health": lcm.DiscreteGrid(Health),
                }
            )
        ),
        M,
        ["LinSpacedGrid", "'working'", "'wealth'", "stop has 3 values", "(2)"],
        id="model-age-varying-array-of-wrong-length",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                states={
                    "wealth": lcm.LinSpacedGrid(start=1.0, stop=lambda age: age, n_points=3),
                    "health": lcm.DiscreteGrid(Health),
                }
            )
        ),
        M,
        ["LinSpacedGrid", "'working'", "'wealth'", "'age'", "AgeGrid"],
        id="model-age-varying-function-of-age-without-ages",
    ),
    pytest.param(
        lambda: (
            lambda: lcm.DCEGM(
                state="wealth",
                action="consumption",
                savings=lcm.LinSpacedGrid(start=0.0, stop=lambda age: 10.0 + age, n_points=5),
            )
        ),
        M,
        ["DCEGM", "savings", "vary with age"],
        id="solver-dcegm-savings-varies-with-age",
    ),
    # ------------------------------------------------------------------- grids
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=1),
        G,
        ["LinSpacedGrid", "n_points", ">= 2"],
        id="grid-lin-one-point",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=2.5),
        G,
        ["LinSpacedGrid", "n_points", "int"],
        id="grid-lin-float-n-points",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=1.0, stop=1.0, n_points=3),
        G,
        ["LinSpacedGrid", "start", "stop"],
        id="grid-lin-start-equals-stop",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=2.0, stop=1.0, n_points=3),
        G,
        ["LinSpacedGrid", "start", "stop"],
        id="grid-lin-start-above-stop",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start="zero", stop=1.0, n_points=3),
        G,
        ["LinSpacedGrid", "start", "number", "'zero'"],
        id="grid-lin-start-not-a-number",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=0.0, stop=np.inf, n_points=3),
        G,
        ["LinSpacedGrid", "stop", "finite"],
        id="grid-lin-stop-infinite",
    ),
    pytest.param(
        lambda: lambda: lcm.LogSpacedGrid(start=0.0, stop=1.0, n_points=3),
        G,
        ["LogSpacedGrid", "start", "> 0"],
        id="grid-log-start-zero",
    ),
    pytest.param(
        lambda: lambda: lcm.LogSpacedGrid(start=-1.0, stop=1.0, n_points=3),
        G,
        ["LogSpacedGrid", "start", "> 0"],
        id="grid-log-start-negative",
    ),
    pytest.param(
        lambda: lambda: lcm.LogSpacedGrid(start=2.0, stop=1.0, n_points=3),
        G,
        ["LogSpacedGrid", "start", "stop"],
        id="grid-log-start-above-stop",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid([]),
        G,
        ["DiscreteGrid", "empty"],
        id="grid-discrete-empty-list",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(IntEnum("Empty", {})),
        G,
        ["DiscreteGrid", "Empty", "no members"],
        id="grid-discrete-empty-enum",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(NotZeroBased),
        G,
        ["DiscreteGrid", "NotZeroBased", "0, 1"],
        id="grid-discrete-enum-not-zero-based",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(WithGap),
        G,
        ["DiscreteGrid", "WithGap", "[0, 2]"],
        id="grid-discrete-enum-with-gap",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(StringValued),
        G,
        ["DiscreteGrid", "StringValued", "0, 1", "'x'"],
        id="grid-discrete-enum-string-values",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(["a", "b", "a"]),
        G,
        ["DiscreteGrid", "unique", "'a'"],
        id="grid-discrete-duplicate-labels",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid("ab"),
        G,
        ["DiscreteGrid", "'ab'"],
        id="grid-discrete-string-categories",
    ),
    pytest.param(
        lambda: lambda: lcm.IrregSpacedGrid(points=[0.0, 2.0, 1.0]),
        G,
        ["IrregSpacedGrid", "strictly increasing", "[0.0, 2.0, 1.0]"],
        id="grid-irreg-not-increasing",
    ),
    pytest.param(
        lambda: lambda: lcm.IrregSpacedGrid(points=[0.0, 1.0, 1.0]),
        G,
        ["IrregSpacedGrid", "strictly increasing"],
        id="grid-irreg-repeated-point",
    ),
    pytest.param(
        lambda: lambda: lcm.IrregSpacedGrid(points=[0.0, np.nan, 1.0]),
        G,
        ["IrregSpacedGrid", "finite", "nan"],
        id="grid-irreg-nan-point",
    ),
    pytest.param(
        lambda: lambda: lcm.IrregSpacedGrid(points=[1.0]),
        G,
        ["IrregSpacedGrid", "at least 2"],
        id="grid-irreg-one-point",
    ),
    pytest.param(
        lambda: lambda: lcm.PiecewiseLinSpacedGrid(breakpoints=[0.0, 1.0, 2.0], n_points=[3]),
        G,
        ["PiecewiseLinSpacedGrid", "n_points", "one entry per segment"],
        id="grid-piecewise-n-points-wrong-length",
    ),
    pytest.param(
        lambda: lambda: lcm.PiecewiseLinSpacedGrid(breakpoints=[0.0, 2.0, 1.0], n_points=[3, 3]),
        G,
        ["PiecewiseLinSpacedGrid", "breakpoints", "strictly increasing"],
        id="grid-piecewise-breakpoints-not-increasing",
    ),
    pytest.param(
        lambda: lambda: lcm.PiecewiseLinSpacedGrid(breakpoints=[0.0, 1.0, 2.0], n_points=[3, 1]),
        G,
        ["PiecewiseLinSpacedGrid", "n_points[1]", ">= 2"],
        id="grid-piecewise-segment-one-point",
    ),
    pytest.param(
        lambda: lambda: lcm.PiecewiseLogSpacedGrid(breakpoints=[0.0, 1.0, 2.0], n_points=[3, 3]),
        G,
        ["PiecewiseLogSpacedGrid", "breakpoints", "> 0"],
        id="grid-piecewise-log-start-zero",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=3, batch_size=-1),
        G,
        ["LinSpacedGrid", "batch_size", ">= 0", "-1"],
        id="grid-lin-negative-batch-size",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(Health, batch_size=-2),
        G,
        ["DiscreteGrid", "batch_size", ">= 0", "-2"],
        id="grid-discrete-negative-batch-size",
    ),
    pytest.param(
        lambda: lambda: lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=3, distributed=True),
        G,
        ["LinSpacedGrid", "distributed=True", "discrete"],
        id="grid-lin-distributed",
    ),
    pytest.param(
        lambda: lambda: lcm.IrregSpacedGrid(points=[0.0, 1.0], distributed=True),
        G,
        ["IrregSpacedGrid", "distributed=True", "discrete"],
        id="grid-irreg-distributed",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(Health, distributed="yes"),
        G,
        ["DiscreteGrid", "distributed", "True or False", "'yes'"],
        id="grid-discrete-distributed-not-bool",
    ),
    pytest.param(
        lambda: lambda: lcm.DiscreteGrid(Health, batch_size=1, distributed=True),
        G,
        ["DiscreteGrid", "batch_size=1", "distributed=True"],
        id="grid-discrete-batch-size-and-distributed",
    ),
    pytest.param(
        lambda: lambda: lcm.AgeGrid(start=40, step=0),
        G,
        ["AgeGrid", "step", "> 0"],
        id="grid-age-zero-step",
    ),
    # ----------------------------------------------------------------- regimes
    pytest.param(
        lambda: lambda: working_regime(functions={"labor_income": labor_income}),
        M,
        ["'utility'", "'labor_income'"],
        id="regime-missing-utility",
    ),
    pytest.param(
        lambda: lambda: working_regime(states={"wealth": (1.0, 10.0)}),
        M,
        ["states['wealth']", "grid"],
        id="regime-state-not-a-grid",
    ),
    pytest.param(
        lambda: lambda: working_regime(constraints={"borrowing": 1.0}),
        M,
        ["constraints['borrowing']", "function"],
        id="regime-constraint-not-callable",
    ),
    pytest.param(
        lambda: (
            lambda: working_regime(functions={"utility": utility, "labor income": labor_income})
        ),
        M,
        ["functions", "'labor income'", "identifier"],
        id="regime-function-name-not-identifier",
    ),
    pytest.param(
        lambda: lambda: working_regime(transition=RegimeId.retired),
        M,
        ["transition", "function"],
        id="regime-transition-not-callable",
    ),
    pytest.param(
        lambda: lambda: working_regime(active=["first"]),
        M,
        ["active", "'first'"],
        id="regime-active-not-periods",
    ),
    pytest.param(
        lambda: lambda: working_regime(taste_shocks="gumbel"),
        M,
        ["taste_shocks", "ExtremeValueShocks"],
        id="regime-taste-shocks-wrong-type",
    ),
    # ------------------------------------------------------------------ models
    pytest.param(
        _cycle_regime,
        M,
        ["'working'", "cycle", "'a' -> 'b' -> 'a'"],
        id="model-function-cycle",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    **working_kwargs()["state_transitions"],
                    "savings": lambda wealth: wealth,
                }
            )
        ),
        M,
        ["'working'", "state_transitions['savings']", "no regime has"],
        id="model-transition-for-unknown-state",
    ),
    pytest.param(
        lambda: build_model(working=working_regime(state_transitions={"wealth": next_wealth})),
        M,
        ["'working'", "missing state_transitions", "'health'"],
        id="model-missing-state-transition",
    ),
    pytest.param(
        lambda: build_model(regime_ids=IntEnum("RegimeId", {"working": 0, "retirement": 1})),
        M,
        ["regime_ids", "'retirement'", "'retired'"],
        id="model-regime-ids-wrong-names",
    ),
    pytest.param(
        lambda: build_model(regime_ids=IntEnum("RegimeId", {"working": 1, "retired": 2})),
        M,
        ["regime_ids", "0..1", "'working': 1"],
        id="model-regime-ids-wrong-values",
    ),
    pytest.param(
        lambda: build_model(regime_ids=Labor),
        M,
        ["regime_ids", "'work'", "'working'"],
        id="model-regime-ids-of-another-enum",
    ),
    pytest.param(
        lambda: build_model(regime_ids={"working": 0, "retired": 1}),
        M,
        ["regime_ids", "IntEnum"],
        id="model-regime-ids-not-an-enum",
    ),
    pytest.param(
        lambda: (
            lambda: lcm.Model(
                regimes={"working": working_regime(), "retired ": retired_regime()},
                n_periods=N_PERIODS,
            )
        ),
        M,
        ["regime names", "'retired '"],
        id="model-regime-name-not-identifier",
    ),
    pytest.param(
        lambda: (
            lambda: lcm.Model(
                regimes={"working": working_regime(), "retired": retired_kwargs()},
                n_periods=N_PERIODS,
            )
        ),
        M,
        ["regimes['retired']", "Regime", "dict"],
        id="model-regime-not-a-regime",
    ),
    pytest.param(
        _age_model,
        M,
        ["'working'", "'utility'", "'age'", "ages=AgeGrid"],
        id="model-age-without-ages",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                actions={"labor": lcm.DiscreteGrid(Labor), "wealth": consumption_grid()}
            )
        ),
        M,
        ["'working'", "'wealth'", "both a state and an action"],
        id="model-state-and-action-same-name",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={
                    "utility": utility,
                    "labor_income": labor_income,
                    "wealth": lambda consumption: consumption,
                }
            )
        ),
        M,
        ["'working'", "function 'wealth'", "state or action"],
        id="model-function-named-like-state",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={
                    "utility": utility,
                    "labor_income": labor_income,
                    "next_wealth": lambda consumption: consumption,
                }
            )
        ),
        M,
        ["'working'", "'next_wealth'", "reserved"],
        id="model-function-named-like-transition",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={
                    "utility": utility,
                    "labor_income": labor_income,
                    "period": lambda consumption: consumption,
                }
            )
        ),
        M,
        ["'working'", "'period'", "reserved"],
        id="model-function-named-period",
    ),
    pytest.param(
        lambda: build_model(working=working_regime(constraints={"labor_income": borrowing})),
        M,
        ["'working'", "constraint 'labor_income'"],
        id="model-constraint-named-like-function",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(transition=None)),
        M,
        ["'retired'", "terminal", "'wealth'"],
        id="model-terminal-with-state-transitions",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    "wealth": lcm.MarkovTransition(lambda wealth: jnp.ones(3) / 3),
                    "health": lcm.MarkovTransition(next_health),
                }
            )
        ),
        M,
        ["'working'", "state_transitions['wealth']", "MarkovTransition", "continuous"],
        id="model-markov-on-continuous-state",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                actions={
                    "labor": lcm.DiscreteGrid(Labor, distributed=True),
                    "consumption": consumption_grid(),
                }
            )
        ),
        M,
        ["'working'", "action 'labor'", "distributed=True"],
        id="model-distributed-action",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(taste_shocks=lcm.ExtremeValueShocks())),
        M,
        ["'retired'", "taste_shocks", "discrete action"],
        id="model-taste-shocks-without-discrete-actions",
    ),
    pytest.param(
        _inconsistent_state(["bad", "fair", "good"]),
        M,
        ["'working'", "'retired'", "'health'"],
        id="model-discrete-state-different-sizes",
    ),
    pytest.param(
        _inconsistent_state(["poor", "good"]),
        M,
        ["'working'", "'retired'", "'health'", "'poor'"],
        id="model-discrete-state-different-labels",
    ),
    pytest.param(
        lambda: build_model(
            retired=retired_regime(
                states={"wealth": wealth_grid(), "health": wealth_grid()},
                state_transitions={"wealth": next_wealth_retired, "health": lambda health: health},
            )
        ),
        M,
        ["'working'", "'retired'", "'health'"],
        id="model-state-discrete-and-continuous",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(active=[0, 1, 5])),
        M,
        ["'retired'", "active periods", "[5]", "0..1"],
        id="model-active-outside-horizon",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(active=lambda period: period > 10)),
        M,
        ["'retired'", "active in no period"],
        id="model-never-active",
    ),
    pytest.param(
        lambda: build_model(n_periods=0),
        M,
        ["n_periods", ">= 1", "0"],
        id="model-zero-periods",
    ),
    pytest.param(
        lambda: build_model(n_periods=2.0),
        M,
        ["n_periods", "int"],
        id="model-float-periods",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={"utility": utility, "labor_income": lambda labor, retired: labor}
            )
        ),
        M,
        ["'working'", "'labor_income'", "'retired'", "named like a regime"],
        id="model-parameter-named-like-regime",
    ),
    pytest.param(
        lambda: build_model(retired=retired_regime(functions={"utility": jnp.log})),
        M,
        ["'retired'", "'utility'", "positionally"],
        id="model-positional-only-argument",
    ),
    pytest.param(
        lambda: build_model(ages=(40, 10)),
        M,
        ["ages", "AgeGrid"],
        id="model-ages-not-age-grid",
    ),
    # A code compared with a string is `False`, silently (issue 62): named at build.
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={
                    "utility": lambda consumption, labor, disutility_of_work: (
                        jnp.log(consumption) - disutility_of_work * (labor == "work")
                    ),
                    "labor_income": labor_income,
                }
            )
        ),
        M,
        ["'working'", "'utility'", "'labor'", "'work'", "code 0", "`labor == 0`"],
        id="model-discrete-action-compared-with-its-label",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                functions={
                    "utility": utility,
                    "labor_income": lambda labor, wage: jnp.where("retire" != labor, wage, 0.0),  # noqa: SIM300
                }
            )
        ),
        M,
        ["'working'", "'labor_income'", "'labor'", "'retire'", "code 1"],
        id="model-label-compared-with-a-discrete-action-by-not-equal",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                constraints={
                    "borrowing": borrowing,
                    "healthy_work": lambda labor, health: (
                        (labor == Labor.retire) | (health in ("good", "fair"))
                    ),
                }
            )
        ),
        M,
        ["'working'", "'healthy_work'", "'health'", "'good'", "code 1"],
        id="model-discrete-state-in-a-tuple-of-labels",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    "wealth": next_wealth,
                    "health": lcm.MarkovTransition(
                        lambda health, health_transition: health_transition[
                            jnp.where(health == "excellent", 1, health)
                        ]
                    ),
                }
            )
        ),
        M,
        ["'working'", "'next_health'", "'health'", "'excellent'", "not even one of its labels"],
        id="model-discrete-state-compared-with-a-string-not-a-label",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                transition=lcm.MarkovTransition(
                    lambda labor, regime_transition: (
                        (lambda: regime_transition[labor])() * (lambda: labor != "retire")()
                    )
                )
            )
        ),
        M,
        ["'working'", "'next_regime'", "'labor'", "'retire'"],
        id="model-label-compared-in-a-nested-lambda",
    ),
    pytest.param(
        lambda: build_model(
            retired=retired_regime(
                functions={
                    "utility": lambda consumption, wealth: jnp.log(consumption) * (wealth == "rich")
                }
            )
        ),
        M,
        ["'retired'", "'utility'", "'wealth'", "'rich'", "is a number"],
        id="model-continuous-state-compared-with-a-string",
    ),
    # ------------------------------------------------------------------ params
    pytest.param(
        lambda: solve(params_with(wage=None)),
        P,
        ["'working'", "'labor_income'", "missing parameter 'wage'"],
        id="solve-missing-parameter",
    ),
    pytest.param(
        lambda: solve(
            PARAMS,
            lcm.Model(
                **model_kwargs(
                    retired=retired_regime(
                        functions={"utility": lambda consumtion: jnp.log(consumtion)}
                    )
                )
            ),
        ),
        P,
        ["'retired'", "'utility'", "missing parameter 'consumtion'", "action 'consumption'"],
        id="solve-misspelt-action-becomes-missing-parameter",
    ),
    pytest.param(
        lambda: solve(params_with(discount_factor=None)),
        P,
        ["'working'", "missing parameter 'discount_factor'"],
        id="solve-missing-regime-level-parameter",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "working": {"labor_income": {"wage": 3.0}}}),
        P,
        ["'working'", "'labor_income'", "'wage'", "ambiguous"],
        id="solve-ambiguous-parameter-function-and-top",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "working": {"discount_factor": 0.9}}),
        P,
        ["'working'", "'discount_factor'", "ambiguous"],
        id="solve-ambiguous-parameter-regime-and-top",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "wages": 5.0}),
        P,
        ["params['wages']", "'wage'"],
        id="solve-unknown-top-level-parameter",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "retired": {"wage": 5.0}}),
        P,
        ["'retired'", "unknown parameter 'wage'"],
        id="solve-unknown-parameter-in-regime",
    ),
    pytest.param(
        lambda: solve(
            {**params_with(wage=None), "working": {"labor_income": {"wage": 5.0, "tax": 0.1}}}
        ),
        P,
        ["'working'", "'labor_income'", "unknown parameter 'tax'", "'wage'"],
        id="solve-unknown-parameter-in-function",
    ),
    pytest.param(
        lambda: solve({**params_with(wage=None), "working": {"utility": {"wage": 5.0}}}),
        P,
        ["'working'", "'utility'", "unknown parameter 'wage'", "'disutility_of_work'"],
        id="solve-parameter-under-wrong-function",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "working": {"borrowing": {"limit": 0.0}}}),
        P,
        ["'working'", "'borrowing'", "not a function with parameters"],
        id="solve-dict-for-function-without-parameters",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "working": 1.0}),
        P,
        ["params['working']", "dict", "'working''s parameters"],
        id="solve-regime-params-not-a-dict",
    ),
    pytest.param(
        lambda: solve([("wage", 5.0)]),
        P,
        ["params", "dict", "list"],
        id="solve-params-not-a-dict",
    ),
    pytest.param(
        lambda: solve(params_with(wage="five")),
        P,
        ["'working'", "'labor_income'", "'wage'", "number or an array", "'five'"],
        id="solve-parameter-not-a-number",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "wage": None}),
        P,
        ["'working'", "'labor_income'", "'wage'", "number or an array", "None"],
        id="solve-parameter-is-none",
    ),
    pytest.param(
        lambda: solve({**PARAMS, "wage": {"level": 5.0}}),
        P,
        ["params['wage']", "dict", "not a regime"],
        id="solve-parameter-is-a-dict",
    ),
    pytest.param(
        lambda: solve({**params_with(wage=None), "labor_income": {"wage": 5.0}}),
        P,
        ["params['labor_income']", "params[regime]['labor_income']", "'working'"],
        id="solve-function-params-at-top-level",
    ),
    pytest.param(
        lambda: solve(params_with(disutility_of_work=jnp.ones(3))),
        P,
        ["'working'", "'utility'", "shape (3,)"],
        id="solve-utility-returns-vector",
    ),
    pytest.param(
        lambda: solve(params_with(health_transition=jnp.full((2, 3), 1 / 3))),
        T,  # a probability vector of the wrong length is a transition error
        ["'working'", "'next_health'", "shape (3,)", "(2,)"],
        id="solve-markov-returns-wrong-length",
    ),
    # ------------------------------------------------- transition probabilities
    pytest.param(
        lambda: solve(params_with(health_transition=jnp.array([[0.6, 0.39], [0.2, 0.8]]))),
        T,
        ["'working'", "'next_health'"],
        id="solve-state-probabilities-sum-to-0.99",
    ),
    pytest.param(
        lambda: solve(params_with(health_transition=jnp.array([[1.1, -0.1], [0.2, 0.8]]))),
        T,
        ["'working'", "'next_health'"],
        id="solve-state-probability-negative",
    ),
    pytest.param(
        lambda: solve(params_with(regime_transition=jnp.array([[0.9, 0.09], [0.0, 1.0]]))),
        T,
        ["'working'", "'next_regime'"],
        id="solve-regime-probabilities-sum-to-0.99",
    ),
    pytest.param(
        lambda: solve(params_with(regime_transition=jnp.array([[0.9, 0.1], [-0.5, 1.5]]))),
        T,
        ["'working'", "'next_regime'"],
        id="solve-regime-probability-negative",
    ),
    pytest.param(
        _unreachable_target_model,
        T,
        ["'working'", "'next_regime'", "cannot reach"],
        id="solve-mass-on-unreachable-regime",
    ),
    pytest.param(
        _discrete_next_state_out_of_range,
        T,
        ["'working'", "'next_health'", "period 0", "out of range"],
        id="solve-discrete-next-state-out-of-range",
    ),
    pytest.param(
        _inactive_target_model,
        T,
        ["'early'", "'next_regime'", "period 0", "inactive in period 1"],
        id="solve-mass-on-regime-inactive-next-period",
    ),
    # --------------------------------------------------------- NaN (validate=)
    pytest.param(
        lambda: solve(params_with(wage=jnp.nan)),
        lcm.NaNError,
        ["'working'", "'next_wealth'", "period 0", "NaN"],
        id="solve-nan-next-state-at-feasible-point",
    ),
    pytest.param(
        lambda: solve(params_with(disutility_of_work=jnp.nan)),
        lcm.NaNError,
        ["'working'", "period 1", "function 'utility'"],
        id="solve-nan-in-utility",
    ),
    pytest.param(
        lambda: solve(PARAMS, validate="loud"),
        lcm.LcmError,
        ["validate", "'loud'"],
        id="solve-unknown-validate-option",
    ),
    # ---------------------------------------------------------------- solution
    pytest.param(
        lambda: functools.partial(solution().value, "dead", 0),
        lcm.InvalidRegimeError,
        ["'dead'", "'working'", "'retired'"],
        id="solution-value-unknown-regime",
    ),
    pytest.param(
        lambda: functools.partial(solution().value, "working", N_PERIODS),
        lcm.InvalidPeriodError,
        ["'working'", "period 2", "0..1"],
        id="solution-value-period-outside-horizon",
    ),
    # ------------------------------------------------------ initial conditions
    pytest.param(
        lambda: simulate(initial_conditions(regime=None)),
        I,
        ["'regime'"],
        id="simulate-missing-regime",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(regime=np.array(["working", "unemployed"]))),
        I,
        ["'unemployed'", "'working'", "'retired'"],
        id="simulate-unknown-regime-name",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(regime=np.array([0, 2]))),
        I,
        ["'regime'", "0..1"],
        id="simulate-regime-id-out-of-range",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(health=np.array(["good", "excellent"]))),
        I,
        ["'health'", "'excellent'", "'bad'", "'good'"],
        id="simulate-unknown-discrete-label",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(health=np.array([1, 2]))),
        I,
        ["'health'", "0..1"],
        id="simulate-discrete-code-out-of-range",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(wealth=None)),
        I,
        ["'wealth'", "'working'"],
        id="simulate-missing-state",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(wealth=np.array([5.0, 8.0, 9.0]))),
        I,
        ["'wealth'", "(3,)", "(2,)"],
        id="simulate-state-wrong-length",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(wealth=np.array([[5.0, 8.0]]))),
        I,
        ["'wealth'", "(1, 2)", "(2,)"],
        id="simulate-state-wrong-shape",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(wealth=np.array([np.nan, 8.0]))),
        I,
        ["'wealth'", "finite"],
        id="simulate-nan-continuous-state",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(income=np.array([1.0, 2.0]))),
        I,
        ["'income'", "'wealth'", "'health'"],
        id="simulate-unknown-column",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(), subject_batch_size=-1),
        I,
        ["subject_batch_size", "-1"],
        id="simulate-negative-subject-batch-size",
    ),
    pytest.param(
        lambda: solve(
            params_with(regime_transition=None),
            lcm.Model(
                **model_kwargs(
                    working=working_regime(transition=lambda labor: jnp.where(labor == 0, 5, 1))
                )
            ),
        ),
        T,
        ["'working'", "'next_regime'", "regime id 5", "health='bad'", "labor='work'", "0..1"],
        id="solve-regime-id-out-of-range-says-which",
    ),
    pytest.param(
        lambda: solve(BAD_PROBABILITIES),
        T,
        ["'next_health'", "[0.6, 0.39]", "sum to 0.99", "health='bad'", "[0, 1]"],
        id="solve-probability-row-says-which",
    ),
    pytest.param(
        lambda: solve(params_with(regime_transition=jnp.array([[0.9, 0.05, 0.05], [0, 0, 1.0]]))),
        T,
        ["'working'", "'next_regime'", "(3,)", "(2,)", "working=0, retired=1"],
        id="solve-regime-probabilities-wrong-length",
    ),
    pytest.param(
        lambda: solve(
            params_with(regime_transition=None),
            lcm.Model(
                **model_kwargs(
                    working=working_regime(transition=lcm.MarkovTransition(lambda: {"retird": 1}))
                )
            ),
        ),
        M,
        ["'working'", "'next_regime'", "'retird'", "Did you mean 'retired'?"],
        id="solve-regime-probabilities-by-unknown-name",
    ),
    pytest.param(
        lambda: solve(params_with(discount_factor=None, discont_factor=0.95)),
        P,
        ["'discont_factor'", "did you mean 'discount_factor'?"],
        id="solve-misspelt-parameter",
    ),
    pytest.param(
        _infeasible_state_simulate,
        lcm.InfeasibleStateError,
        ["'working'", "period 0", "subject 0", "wealth=1", "health='good'", "'borrowing'"],
        id="simulate-state-with-no-feasible-action",
    ),
    pytest.param(
        lambda: simulate(
            initial_conditions(
                regime=np.array([], dtype=int), wealth=np.array([]), health=np.array([])
            )
        ),
        I,
        ["'regime'", "non-empty"],
        id="simulate-no-subjects",
    ),
    pytest.param(
        lambda: simulate(initial_conditions(), BAD_PROBABILITIES),
        T,
        ["'working'", "'next_health'", "period 1", "in simulate"],
        id="simulate-draw-probabilities-sum-to-0.99",
    ),
    pytest.param(
        lambda: simulate([(0, 5.0, "good")]),
        I,
        ["initial_conditions", "dict", "list"],
        id="simulate-conditions-not-a-dict",
    ),
    # ------------------------------------------------------------------- DC-EGM
    pytest.param(
        lambda: lambda: _dcegm(savings=[0.0, 1.0, 2.0]),
        M,
        ["DCEGM", "savings", "continuous grid"],
        id="solver-dcegm-savings-not-a-grid",
    ),
    pytest.param(
        lambda: lambda: working_regime(solver="dcegm"),
        M,
        ["solver", "'dcegm'"],
        id="regime-solver-not-a-solver",
    ),
    pytest.param(
        lambda: _dcegm_working(_dcegm(state="health")),
        M,
        ["'working'", "DCEGM", "'health'", "continuous state"],
        id="model-dcegm-state-is-discrete",
    ),
    pytest.param(
        lambda: _dcegm_working(_dcegm(action="leisure")),
        M,
        ["'working'", "'leisure'", "continuous action"],
        id="model-dcegm-unknown-action",
    ),
    pytest.param(
        lambda: _dcegm_working(
            actions={
                "labor": lcm.DiscreteGrid(Labor),
                "consumption": consumption_grid(),
                "hours": lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=3),
            }
        ),
        M,
        ["'working'", "second continuous action", "'hours'"],
        id="model-dcegm-second-continuous-action",
    ),
    pytest.param(
        lambda: _dcegm_working(
            functions={
                "utility": lambda consumption, wealth: jnp.log(consumption) + 0.01 * wealth,
                "labor_income": labor_income,
            }
        ),
        M,
        ["'working'", "utility", "'wealth'"],
        id="model-dcegm-utility-depends-on-state",
    ),
    pytest.param(
        lambda: _dcegm_working(
            transition=lcm.MarkovTransition(
                lambda labor, wealth, regime_transition: regime_transition[labor] * (wealth > 0)
            )
        ),
        M,
        ["'working'", "regime transition", "'wealth'"],
        id="model-dcegm-regime-transition-depends-on-wealth",
    ),
    pytest.param(
        lambda: build_model(
            retired=retired_regime(solver=_dcegm(), transition=None, state_transitions={})
        ),
        M,
        ["'retired'", "terminal", "GridSearch"],
        id="model-dcegm-terminal-regime",
    ),
    pytest.param(
        _dcegm_not_through_savings,
        M,
        ["'working'", "'next_wealth'", "savings", "GridSearch"],
        id="solve-dcegm-next-state-not-through-savings",
    ),
    pytest.param(
        lambda: solve(
            PARAMS,
            lcm.Model(
                **model_kwargs(
                    working=working_regime(
                        solver=_dcegm(savings=lcm.LinSpacedGrid(start=-5.0, stop=10.0, n_points=5))
                    )
                )
            ),
        ),
        M,
        ["'working'", "constraint 'borrowing'", "borrowing limit", "savings"],
        id="solve-dcegm-savings-below-the-borrowing-constraint",
    ),
    # ------------------------------------------------------ fixed_params (issue 12)
    pytest.param(
        lambda: build_model(fixed_params={"interst_rate": 0.03}),
        M,
        ["fixed_params", "'interst_rate'"],
        id="model-fixed-param-unknown",
    ),
    pytest.param(
        lambda: build_model(
            fixed_params={"interest_rate": 0.03, "working": {"interest_rate": 0.0}}
        ),
        M,
        ["'working'", "'next_wealth'", "'interest_rate'", "two levels"],
        id="model-fixed-param-at-two-levels",
    ),
    pytest.param(
        lambda: build_model(fixed_params={"wage": "high"}),
        M,
        ["'working'", "'labor_income'", "'wage'", "fixed_params"],
        id="model-fixed-param-not-a-number",
    ),
    pytest.param(
        lambda: build_model(fixed_params=[("wage", 1.0)]),
        M,
        ["fixed_params", "list"],
        id="model-fixed-params-not-a-dict",
    ),
    pytest.param(
        lambda: solve(PARAMS, lcm.Model(**model_kwargs(fixed_params={"interest_rate": 0.0}))),
        P,
        ["'working'", "'next_wealth'", "'interest_rate'", "fixed at construction"],
        id="solve-fixed-param-given-again",
    ),
    # ------------------------------------------------------ per-target state transitions
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    "wealth": {"working": next_wealth, "retird": next_wealth},
                    "health": lcm.MarkovTransition(next_health),
                }
            )
        ),
        M,
        ["'working'", "state_transitions['wealth']", "'retird'", "not a regime"],
        id="model-per-target-unknown-regime",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    "wealth": next_wealth,
                    "health": {"working": lambda health: health, "retired": lambda health: health},
                }
            )
        ),
        M,
        ["'working'", "state_transitions['health']['retired']", "no state 'health'"],
        id="model-per-target-into-a-regime-without-the-state",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                state_transitions={
                    "wealth": {"working": lcm.MarkovTransition(next_health)},
                    "health": lcm.MarkovTransition(next_health),
                }
            )
        ),
        M,
        ["'working'", "state_transitions['wealth']['working']", "continuous"],
        id="model-per-target-markov-of-a-continuous-state",
    ),
    pytest.param(
        lambda: lambda: lcm.EpsteinZin(terminal="bequest"),
        M,
        ["EpsteinZin", "terminal", "'bequest'", "'time_aggregator'"],
        id="regime-epstein-zin-unknown-terminal",
    ),
    pytest.param(
        lambda: lambda: lcm.EpsteinZin(interpolate="levels"),
        M,
        ["EpsteinZin", "interpolate", "'levels'", "'values'"],
        id="regime-epstein-zin-unknown-interpolate",
    ),
    pytest.param(
        lambda: _ez_zero_death(),
        M,
        ["Regime 'working'", "terminal regime", "certainty_equivalent", "time_aggregator"],
        id="solve-epstein-zin-zero-terminal-value-in-the-certainty-equivalent",
    ),
    pytest.param(
        lambda: (
            lambda: working_regime(
                state_transitions={"wealth": {}, "health": lcm.MarkovTransition(next_health)}
            )
        ),
        M,
        ["state_transitions['wealth']", "empty"],
        id="regime-per-target-empty",
    ),
    pytest.param(
        lambda: solve(
            PARAMS,
            lcm.Model(
                **model_kwargs(
                    working=working_regime(
                        state_transitions={
                            "wealth": {"retired": next_wealth},
                            "health": lcm.MarkovTransition(next_health),
                        }
                    )
                )
            ),
        ),
        T,
        ["'working'", "'next_regime'", "per-target"],
        id="solve-per-target-reachable-regime-left-out",
    ),
    pytest.param(
        lambda: build_model(
            working=working_regime(
                solver=_dcegm(),
                state_transitions={
                    "wealth": {"working": next_wealth, "retired": next_wealth},
                    "health": lcm.MarkovTransition(next_health),
                },
            )
        ),
        M,
        ["'working'", "DCEGM", "'wealth'", "GridSearch"],
        id="model-dcegm-per-target-transition",
    ),
    # ------------------------------------------------------ model-level shared entries
    pytest.param(
        lambda: build_model(functions={"labor_income": labor_income}),
        M,
        ["'working'", "functions['labor_income']", "Model", "exactly one level"],
        id="model-shared-function-also-in-a-regime",
    ),
    pytest.param(
        lambda: build_model(state_transitions={"wealth": next_wealth_retired}),
        M,
        ["'working'", "state_transitions['wealth']", "Model", "exactly one level"],
        id="model-shared-transition-also-in-a-regime",
    ),
    pytest.param(
        lambda: build_model(functions={"utility": utility_retired}),
        M,
        ["functions['utility']", "each regime"],
        id="model-shared-utility",
    ),
    pytest.param(
        lambda: build_model(functions={"pension": 3.0}),
        M,
        ["functions['pension']", "must be a function"],
        id="model-shared-function-not-callable",
    ),
    # ------------------------------------------------------ third-wave grammar
    pytest.param(
        lambda: lambda: lcm.UniformIIDGrid(3, start=1.0, stop=0.5),
        G,
        ["UniformIIDGrid", "start", "stop"],
        id="grid-uniform-iid-start-not-below-stop",
    ),
    pytest.param(
        lambda: lambda: lcm.IIDGrid(points=[0.0, 1.0], probabilities=[0.5, 0.49]),
        G,
        ["IIDGrid", "probabilities", "sum to 1", "never renormalised"],
        id="grid-iid-probabilities-sum-to-0.99",
    ),
    pytest.param(
        lambda: lambda: lcm.IIDGrid(points=[0.0, 1.0], probabilities=[1.2, -0.2]),
        G,
        ["IIDGrid", "probabilities", ">= 0"],
        id="grid-iid-probability-negative",
    ),
    pytest.param(
        lambda: lambda: lcm.IIDGrid(),
        G,
        ["IIDGrid", "n_points"],
        id="grid-iid-without-a-size",
    ),
    pytest.param(
        lambda: lambda: lcm.IIDGrid(points=[0.0, 1.0, 2.0], probabilities=[0.5, 0.5]),
        G,
        ["IIDGrid", "points", "probabilities", "disagree"],
        id="grid-iid-sizes-disagree",
    ),
    pytest.param(
        lambda: _iid_solve({"probabilities": np.array([0.2, 0.3, 0.5])}),
        P,
        ["'working'", "'next_income'", "'probabilities'", "IIDGrid", "(2,)", "(3,)"],
        id="solve-iid-parameter-wrong-shape",
    ),
    pytest.param(
        lambda: _iid_solve({"probabilities": np.array([0.5, 0.4])}),
        T,
        ["'working'", "'next_income'", "renormalised"],
        id="solve-iid-parameter-probabilities-sum-to-0.9",
    ),
    pytest.param(
        lambda: build_model(
            retired=retired_regime(
                transition=None,
                state_transitions={},
                functions={"utility": utility_retired, "discount_factor": lambda: 0.9},
            )
        ),
        M,
        ["'retired'", "'discount_factor'", "terminal"],
        id="model-discount-function-in-terminal-regime",
    ),
    pytest.param(
        lambda: build_model(
            working=_discount_function(lambda wealth: 0.9 + 0.0 * wealth, solver=_dcegm())
        ),
        M,
        ["'working'", "DCEGM", "'discount_factor'", "'wealth'"],
        id="model-dcegm-discount-function-of-the-state",
    ),
    pytest.param(
        lambda: solve(
            PARAMS,
            lcm.Model(**model_kwargs(working=_discount_function(lambda: jnp.array([0.9, 0.8])))),
        ),
        P,
        ["'working'", "'discount_factor'", "shape (2,)"],
        id="solve-discount-function-not-a-scalar",
    ),
    pytest.param(
        lambda: _series_solve(pd.Series([0.0, 0.1], index=["bad", "good"])),
        P,
        ["params['working']['utility']['bonus']", "level None", "'health'"],
        id="solve-series-parameter-unnamed-level",
    ),
    pytest.param(
        lambda: _series_solve(
            pd.Series([0.0, 0.1], index=pd.Index(["bad", "fine"], name="health"))
        ),
        P,
        ["params['working']['utility']['bonus']", "'health'", "'fine'", "bad, good"],
        id="solve-series-parameter-unknown-label",
    ),
    pytest.param(
        lambda: _series_solve(pd.Series([0.1], index=pd.Index(["good"], name="health"))),
        P,
        ["params['working']['utility']['bonus']", "lacks 1 of the 2", "('bad',)"],
        id="solve-series-parameter-missing-label",
    ),
    pytest.param(
        lambda: _series_solve(
            pd.Series([0.0, 0.1, 0.2], index=pd.Index(["bad", "good", "good"], name="health"))
        ),
        P,
        ["params['working']['utility']['bonus']", "more than once", "'good'"],
        id="solve-series-parameter-duplicate-label",
    ),
    pytest.param(
        lambda: build_model(
            fixed_params={"wage": pd.Series([5.0], index=pd.Index([0], name="period"))}
        ),
        M,
        ["fixed_params['wage']", "lacks 1 of the 2", "'period'"],
        id="model-fixed-series-parameter-missing-period",
    ),
    pytest.param(
        _numpy_table_solve,
        M,
        ["'working'", "function 'utility'", "'HEALTH_BONUS_TABLE'", "(2,)", "fixed_params"],
        id="solve-numpy-table-indexed-by-a-code",
    ),
]


@pytest.mark.parametrize(("case", "error", "substrings"), CASES)
def test_bad_input_raises(case, error, substrings):
    call = case()  # set-up: everything before the failing call is valid
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, lcm.LcmError)
    message = str(info.value)
    missing = [s for s in substrings if s not in message]
    assert not missing, f"message lacks {missing}: {message}"
    # Every message names its regime (no empty name; see `_EMPTY_REGIME_NAME`).
    assert not _EMPTY_REGIME_NAME.search(message), message


# A regime named in a message: `Regime 'name'` (or `regimes['name']`), never an empty
# name. Only `Regime(...)` itself, which runs before the regime has a name (the key it
# gets in `Model(regimes={...})`), says `Regime(...)`: the constructor call that failed.
_EMPTY_REGIME_NAME = re.compile(r"Regime(?!\(\.\.\.\)|\.replace)(\s*:|\s+''|\s+\"\"|\s+,)")


def test_the_empty_regime_name_pattern():
    assert _EMPTY_REGIME_NAME.search("Regime: state_transitions['health'] is bad")
    assert _EMPTY_REGIME_NAME.search("Regime '', function 'utility'")
    assert not _EMPTY_REGIME_NAME.search("Regime(...): state_transitions['health'] is bad")
    assert not _EMPTY_REGIME_NAME.search("Regime 'working': state_transitions['health']")


def test_table_is_large_enough():
    assert len(CASES) >= 30
    assert len({p.id for p in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------
# The value checks under jax.jit, jax.vmap and jax.grad
# ---------------------------------------------------------------------------------------

# The rows whose check needs traced values, with what a jitted call must say instead of
# the eager message (None: exactly the eager message). The eager message of a failed
# transition check re-evaluates the transition on the grids (`transition_detail`: the
# state, the bad value, the valid range); inside the program only the flags are known.
# The eager NaN-in-a-value-array message comes from `diagnose_nan`, which runs outside
# the compiled program; inside it only the regime and period are known.
JITTED = {
    "solve-state-probabilities-sum-to-0.99": [
        "Regime 'working', function 'next_health', period 0: invalid transition"
    ],
    "solve-state-probability-negative": [
        "Regime 'working', function 'next_health', period 0: invalid transition"
    ],
    "solve-regime-probabilities-sum-to-0.99": [
        "Regime 'working', function 'next_regime', period 0: invalid transition"
    ],
    "solve-regime-probability-negative": [
        "Regime 'working', function 'next_regime', period 0: invalid transition"
    ],
    "solve-mass-on-unreachable-regime": None,
    "solve-discrete-next-state-out-of-range": [
        "Regime 'working', function 'next_health', period 0: invalid transition"
    ],
    "solve-mass-on-regime-inactive-next-period": None,
    "solve-nan-next-state-at-feasible-point": None,
    "solve-epstein-zin-risk-aversion-one": None,
    "solve-present-bias-above-one": None,
    "simulate-draw-probabilities-sum-to-0.99": None,
    "solve-nan-in-utility": [
        "Regime 'working', period 1: the value array contains NaN",
        "model.diagnose_nan(params)",
    ],
}
JITTED_CASES = [p for p in CASES if p.id in JITTED]


def _jitted(call, **changes):
    """`call` (a partial of `model.solve` or `model.simulate`) under `jax.jit`, traced in
    its parameters, run to completion."""
    keywords = {**call.keywords, **changes}
    params, *rest = call.args
    run = jax.jit(lambda params: call.func(params, *rest, **keywords))
    return lambda: jax.block_until_ready(run(params))


def _lcm_warnings(record) -> list[str]:
    return [str(w.message) for w in record if str(w.message).startswith("Regime ")]


def test_every_jitted_row_is_in_the_table():
    assert len(JITTED_CASES) == len(JITTED)


@pytest.mark.parametrize(("case", "error", "substrings"), JITTED_CASES)
def test_bad_values_raise_the_same_under_jit(case, error, substrings):
    """Under `jax.jit` the error surfaces as `JaxRuntimeError` (a raise inside a compiled
    program always does), and its text holds the LcmError class and the eager message."""
    call = case()
    with pytest.raises(error) as eager:
        call()
    with pytest.raises(jax.errors.JaxRuntimeError) as jitted:
        _jitted(call)()
    text = str(jitted.value)
    expected = JITTED[next(p.id for p in JITTED_CASES if p.values[0] is case)]
    if expected is None:
        assert f"{error.__name__}: {eager.value}" in text, text
    else:
        assert f"{error.__name__}: " in text
        missing = [s for s in expected if s not in text]
        assert not missing, f"message lacks {missing}: {text}"


@pytest.mark.parametrize(("case", "error", "substrings"), JITTED_CASES)
def test_bad_values_warn_the_same_under_jit(case, error, substrings):
    call = case()
    with pytest.warns(UserWarning) as eager:
        functools.partial(call, validate="warn")()
    with pytest.warns(UserWarning) as jitted:
        solution = _jitted(call, validate="warn")()  # the solve carries on
    expected = _lcm_warnings(eager)
    assert len(expected) >= 1
    if JITTED[next(p.id for p in JITTED_CASES if p.values[0] is case)] is None:
        assert _lcm_warnings(jitted) == expected
    else:
        assert len(_lcm_warnings(jitted)) == len(expected)
    assert isinstance(solution, lcm.Solution | lcm.SimulationResult)


@pytest.mark.parametrize(("case", "error", "substrings"), JITTED_CASES[:1])
def test_off_traces_no_check(case, error, substrings):
    call = case()
    keywords = {**call.keywords, "validate": "off"}
    jaxpr = str(jax.make_jaxpr(lambda p: call.func(p, **keywords))(*call.args))
    assert "callback" not in jaxpr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solution = _jitted(call, validate="off")()
    assert all(v.shape[-1] == 0 for v in solution.violations.values())
    validated = str(jax.make_jaxpr(lambda p: call.func(p, **call.keywords))(*call.args))
    assert validated.count("debug_callback[") == 1  # one host callback for every check


# Rows whose initial conditions are checked by value: under `jax.jit` with the conditions
# as traced arguments, the same message (the checks run inside the program).
JITTED_CONDITIONS = [
    p
    for p in CASES
    if p.id
    in {
        "simulate-regime-id-out-of-range",
        "simulate-discrete-code-out-of-range",
        "simulate-missing-state",
        "simulate-nan-continuous-state",
    }
]


@pytest.mark.parametrize(("case", "error", "substrings"), JITTED_CONDITIONS)
def test_bad_initial_conditions_raise_the_same_under_jit(case, error, substrings):
    assert len(JITTED_CONDITIONS) == 4
    call = case()
    with pytest.raises(error) as eager:
        call()
    params, conditions = call.args
    traced = {k: v for k, v in conditions.items() if np.asarray(v).dtype.kind in "biuf"}
    fixed = {k: v for k, v in conditions.items() if k not in traced}

    def run(traced):
        return call.func(params, {**fixed, **traced}, **call.keywords)

    with pytest.raises(jax.errors.JaxRuntimeError) as jitted:
        jax.block_until_ready(jax.jit(run)(traced))
    assert f"{error.__name__}: {eager.value}" in str(jitted.value)


def _batch(*params):
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *params)


def test_vmap_raises_if_any_member_fails():
    batch = _batch(PARAMS, BAD_PROBABILITIES, PARAMS)
    with pytest.raises(T, match=r"'next_health', period 0.*batch member 1 of a jax.vmap"):
        jax.vmap(lambda p: model().solve(p).values)(batch)
    with pytest.warns(UserWarning, match="batch member 1 of") as record:
        values = jax.block_until_ready(
            jax.jit(jax.vmap(lambda p: model().solve(p, validate="warn").values))(batch)
        )
    assert len(_lcm_warnings(record)) == 1  # one callback sees the whole batch
    assert values["working"].shape[0] == 3
    good = jax.vmap(lambda p: model().solve(p).values)(_batch(PARAMS, PARAMS))
    np.testing.assert_array_equal(good["working"][0], good["working"][1])


def test_grad_raises_the_same():
    def loss(params):
        return jnp.sum(model().solve(params).values["working"][0])

    with pytest.raises(T) as eager:
        model().solve(BAD_PROBABILITIES)
    with pytest.raises(T) as under_grad:  # no jit: the callback's error reaches the caller
        jax.grad(loss)(BAD_PROBABILITIES)
    # Traced, the message says what the flags say: the regime, function and period (the
    # eager one adds the state and the bad value, re-evaluated on the host).
    head = "Regime 'working', function 'next_health', period 0: "
    assert str(eager.value).startswith(head) and str(under_grad.value).startswith(head)
    assert "[0.6, 0.39]" in str(eager.value)
    with pytest.raises(jax.errors.JaxRuntimeError, match="InvalidTransitionProbabilitiesError"):
        jax.block_until_ready(jax.jit(jax.grad(loss))(BAD_PROBABILITIES))
    assert np.isfinite(jax.jit(jax.grad(loss))(PARAMS)["wage"])


# ---------------------------------------------------------------------------------------
# validate= "warn" and "off" for the same bad probabilities
# ---------------------------------------------------------------------------------------


def test_bad_probabilities_warn_under_validate_warn():
    with pytest.warns(UserWarning, match="next_health") as record:
        result = model().solve(BAD_PROBABILITIES, validate="warn")
    assert "'working'" in str(record[0].message)
    assert np.all(np.isfinite(np.asarray(result.value("working", 0))))


def test_bad_probabilities_pass_silently_under_validate_off():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = model().solve(BAD_PROBABILITIES, validate="off")
    assert np.all(np.isfinite(np.asarray(result.value("working", 0))))


def test_valid_inputs_pass():
    """The base model, params and initial conditions that every row perturbs are valid."""
    result = model().simulate(
        PARAMS, initial_conditions(), solution=solution(), key=jax.random.key(0)
    )
    assert len(result.to_dataframe()) > 0


def test_comparisons_with_codes_and_string_parameters_are_not_flagged():
    """Only an input compared with a string literal is an error: codes, IntEnum members,
    string parameters and string defaults are fine, through `functools.partial` and
    `jax.jit` wrappers too (the code read is the wrapped function's)."""

    def utility_with_mode(consumption, labor, disutility_of_work, mode="log"):
        felicity = jnp.log(consumption) if mode == "log" else consumption
        return felicity - disutility_of_work * (labor == Labor.work) * (labor != 1)

    build_model(
        working=working_regime(
            functions={"utility": utility_with_mode, "labor_income": labor_income}
        )
    )()

    def utility_by_label(consumption, labor, disutility_of_work, scale):
        return scale * jnp.log(consumption) - disutility_of_work * (labor == "work")

    for wrapped in (
        functools.partial(utility_by_label, scale=1.0),
        jax.jit(functools.partial(utility_by_label, scale=1.0)),
    ):
        with pytest.raises(lcm.ModelInitializationError, match="compares 'labor' with"):
            build_model(
                working=working_regime(functions={"utility": wrapped, "labor_income": labor_income})
            )()


def test_mass_on_a_regime_inactive_next_period_is_caught():
    """A transition into a regime that is not active in the next period is an error."""
    wealth = lcm.LinSpacedGrid(1.0, 5.0, 3)
    consumption = lcm.LinSpacedGrid(0.5, 5.0, 4)

    def regime(active, transition):
        return lcm.Regime(
            states={"wealth": wealth},
            actions={"consumption": consumption},
            functions={"utility": lambda consumption: jnp.log(consumption)},
            state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 1},
            transition=transition,
            constraints={"feasible": lambda consumption, wealth: consumption <= wealth},
            active=active,
        )

    early = regime(range(0, 2), lambda: 1)  # always moves to `late`
    late = regime(range(2, 4), lambda: 1)  # ... which only starts in period 2
    model = lcm.Model({"early": early, "late": late}, n_periods=4)
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError) as error:
        model.solve({"discount_factor": 0.9})
    assert "'early'" in str(error.value) and "inactive in period 1" in str(error.value)
    fixed = lcm.Model(
        {"early": regime(range(0, 2), lambda period: jnp.where(period >= 1, 1, 0)), "late": late},
        n_periods=4,
    )
    fixed.solve({"discount_factor": 0.9})


def test_simulate_under_jit_matches_eager():
    """`jax.jit(model.simulate)` returns the panel as arrays; the same frame as eagerly."""
    conditions = initial_conditions(health=np.array([1, 0]))

    def run(params):
        return model().simulate(params, conditions, key=jax.random.key(0))

    eager = run(PARAMS).to_dataframe()
    jitted = jax.jit(run)(PARAMS)
    assert isinstance(jitted.value, jax.Array)
    assert jitted.to_dataframe().equals(eager)
