"""Mahler & Yum (2024): lifestyle behaviours and wealth-health gaps in Germany.

A research-scale life-cycle model (Mahler & Yum 2024, *Econometrica*, "Lifestyle Behaviors
and Wealth-Health Gaps in Germany"), written as pylcm's example writes it (the paper's
recursion, eq. (6): today's effort is tomorrow's habit):

- regimes `alive` and `dead` (terminal, utility 0); two-year periods from age 25, 39 of
  them (alive through age 99, when survival is 0);
- states: wealth (50 points), health (bad/good), an AR(1) productivity shock (Rouwenhorst,
  5 nodes, persistence 0.975), lagged effort (40 levels on [0, 1]), an i.i.d. uniform
  adjustment-cost draw on [0, 1] (5 nodes, `lcm.UniformIIDGrid`) and four binary
  permanent types: education, productivity type, health type and discount type (the
  discount factor is the regime function `discount_factor` of the discount type);
- actions: labour supply (not working, part time, full time), saving (the next period's
  wealth, 50 points) and effort (40 levels);
- health follows a logit in age, education, health, health type, effort and lagged
  effort; survival depends on age, education and health (the reference data).

`build(size)` returns `(model, params, initial_conditions)`; `build(size,
continuous_effort=True)` makes effort a continuous action (and lagged effort a continuous
state) that `GridSearch(refine=["effort"])` chooses off its grid
(`benchmarks/refine_mahler_yum.py`); `build(size, scaled_utility=True)` writes the
discount types as the reference library does, one discount factor and the utility scaled
by `utility_scale(discount_type, period)` (`benchmarks/spellings.py`):

- `"full"`: the paper's grids (pylcm's): 1.6·10⁶ states × 6,000 actions, about 9.6·10⁹
  state-action pairs per period. `GridSearch` evaluates it piece by piece (1.6·10⁸
  points per period: see `--describe`) and solves it in seconds on two CPU cores.
- `"medium"`: wealth 20, saving 20, effort 10 (39 periods); for the benchmark.
- `"reduced"`: wealth 10, saving 10, effort 5 (39 periods): seconds.
- `"tiny"`: wealth 5, saving 5, effort 3, shock 3 nodes, adjustment cost 2 nodes, 6
  periods: for the tests.

Parameters are pylcm's start values (`START_PARAMS` of its example), the survival
probabilities and the initial type distribution are the reference data in
`examples/mahler_yum_data/` (copied from pylcm; see the README there). Age-profiled
tables (work disutility, effort cost, the adjustment-cost envelope, health age effects,
survival) are labelled pandas Series indexed by `age` and categories.

Run from the repository root: `python examples/mahler_yum.py --size reduced` (solves,
simulates 2,000 subjects and prints mean effort and wealth by age and education).
"""

from __future__ import annotations

import argparse
import time
from enum import IntEnum
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy.interpolate import make_interp_spline

import lcm_eqx as lcm

DATA = Path(__file__).resolve().parent / "mahler_yum_data"

START_AGE = 25
AGE_STEP = 2
RETIREMENT_AGE = 65
RETIREMENT_PERIOD = (RETIREMENT_AGE - START_AGE) // AGE_STEP  # 20
SHOCK_PERSISTENCE = 0.975
PRODUCTIVITY_TYPE_LOG = 0.2898
WEALTH_NORMALIZATION = 48201.0  # pylcm's wealth_normalization[1]
WEALTH_MAX = 30.0

SIZES = {
    "full": {"wealth": 50, "saving": 50, "effort": 40, "shock": 5, "adjustment": 5, "periods": 39},
    "medium": {
        "wealth": 20,
        "saving": 20,
        "effort": 10,
        "shock": 5,
        "adjustment": 5,
        "periods": 39,
    },
    "reduced": {
        "wealth": 10,
        "saving": 10,
        "effort": 5,
        "shock": 5,
        "adjustment": 5,
        "periods": 39,
    },
    "tiny": {"wealth": 5, "saving": 5, "effort": 3, "shock": 3, "adjustment": 2, "periods": 6},
}


class RegimeId(IntEnum):
    alive = 0
    dead = 1


class LaborSupply(IntEnum):
    retired = 0
    part_time = 1
    full_time = 2


class Education(IntEnum):
    low = 0
    high = 1


class Health(IntEnum):
    bad = 0
    good = 1


class ProductivityType(IntEnum):
    low = 0
    high = 1


class HealthType(IntEnum):
    low = 0
    high = 1


class DiscountType(IntEnum):
    small = 0
    large = 1


class EffortAdjustment(IntEnum):
    """With continuous effort: keep last period's effort (no adjustment cost) or pay the
    cost and choose any effort on [0, 1]."""

    stay = 0
    adjust = 1


# pylcm's START_PARAMS (the authors' estimates as pylcm states them).
START_PARAMS = {
    "work_disutility": {  # knots at ages 27, 41, 51, 65
        "bad": {
            27: 2.41177758126754,
            41: 1.8133670880598,
            51: 1.39103558901915,
            65: 2.41466980231321,
        },
        "good": {
            27: 2.63390750888379,
            41: 1.66602983591164,
            51: 1.27839561280412,
            65: 1.71439043350863,
        },
    },
    "education_disutility_adjustment": 0.807247922589072,
    "effort_cost": {  # knots at ages 27, 49, 65, 87
        "low": {
            "bad": {
                27: 0.628031290227532,
                49: 1.36593242946612,
                65: 1.64963812690034,
                87: 0.734873142494319,
            },
            "good": {
                27: 0.146075197675677,
                49: 0.55992411008533,
                65: 1.04795036000287,
                87: 1.60294886005945,
            },
        },
        "high": {
            "bad": {
                27: 0.46921037985024,
                49: 0.996665589702672,
                65: 1.65388250352532,
                87: 1.08866246911941,
            },
            "good": {
                27: 0.091312997289004,
                49: 0.302477689083851,
                65: 0.739843441095022,
                87: 1.36582077051777,
            },
        },
    },
    "income_process": {
        "y1": {"low": 0.899399488241831, "high": 1.1654726432446},
        "yt_s": {"low": 0.0615804210614531, "high": 0.0874283672769353},
        "yt_sq": {"low": -0.00250769285750586, "high": -0.00293713499239749},
        "wagep": {"low": 0.17769766414897, "high": 0.144836058314823},
        "sigx": 0.0289408524185787,  # innovation variance of the AR(1)
    },
    "adjustment_cost": (0.000120437772838191, 0.14468204213946),
    "discount_factor": {"mean": 0.942749393405227, "std": 0.0283688760224992},
    "effort_elasticity": 1.11497911620865,
    "utility_constant": 13.1079320277342,
    "health_consumption_penalty": 0.871503495423925,
    "pension_replacement_rate": 0.358766004066242,
}

HEALTH_TRANSITION = {  # the logit of good health next period (pylcm's constants)
    "health_intercept": -0.906,
    "good_health_coefficient": 2.311,
    "health_type_coefficient": 0.632,
    "college_coefficient": 0.238,
    "health_effort_coefficient": 0.693,
    "lagged_health_effort_coefficient": 0.734,
}
HEALTH_AGE_EFFECT_KNOTS = {25: 0.0, 35: -0.289, 45: -0.644, 55: -0.881, 65: -1.138, 75: -1.586}


# ---------------------------------------------------------------------------------------
# The model's functions (arguments resolved by name: states, actions, helpers, period,
# parameters).
# ---------------------------------------------------------------------------------------


def utility(consumption_utility, work_disutility, effort_cost, adjustment_cost_penalty):
    return consumption_utility - work_disutility - effort_cost - adjustment_cost_penalty


def discount_factor(discount_type, discount_factor_by_type):
    return discount_factor_by_type[discount_type]


# With `build(..., scaled_utility=True)`: the reference library's spelling of the
# discount types. One discount factor `β` for everyone, and each type's utility scaled
# by `(β_type / β)^period`: the scaled values `W_t = (β_type / β)^t V_t` solve
# `W_t = scale_t u_t + β E W_{t+1}`, the same choices as `V_t = u_t + β_type E V_{t+1}`.


def utility_scale(discount_type, period, relative_discount_factor):
    return relative_discount_factor[discount_type] ** period


def type_scaled_utility(
    utility_scale, consumption_utility, work_disutility, effort_cost, adjustment_cost_penalty
):
    return utility_scale * (
        consumption_utility - work_disutility - effort_cost - adjustment_cost_penalty
    )


def effort_value(effort, effort_grid):
    return effort_grid[effort]


def lagged_effort_value(lagged_effort, effort_grid):
    return effort_grid[lagged_effort]


def work_disutility(labor_supply, health, education, period, work_disutility_grid):
    return work_disutility_grid[period, education, health] * (labor_supply / 2) ** 2 / 2


def effort_cost(period, education, health, effort_value, effort_elasticity, effort_cost_grid):
    exponent = 1 + 1 / effort_elasticity
    return effort_cost_grid[period, education, health] * effort_value**exponent / exponent


def adjustment_cost_penalty(
    period, adjustment_cost, effort, lagged_effort, adjustment_cost_envelope
):
    return jnp.where(
        effort != lagged_effort, adjustment_cost * adjustment_cost_envelope[period], 0.0
    )


def base_income(period, health, education, y1, yt_s, yt_sq, wagep, income_normalization):
    profile = y1[education] * jnp.exp(yt_s[education] * period + yt_sq[education] * period**2)
    return profile * (1 - wagep[education] * (1 - health)) / income_normalization


def scaled_productivity_shock(productivity_shock, productivity_shock_scale):
    return productivity_shock * productivity_shock_scale


def income(
    labor_supply, productivity, scaled_productivity_shock, base_income, productivity_type_multiplier
):
    return (
        base_income
        * (labor_supply / 2)
        * productivity_type_multiplier[productivity]
        * jnp.exp(scaled_productivity_shock)
    )


def taxed_income(income, tax_scale, labor_tax_rate, avg_earnings):
    return tax_scale * income ** (1 - labor_tax_rate) * avg_earnings**labor_tax_rate


def benefits(period, health, labor_supply, benefit_rate, avg_earnings):
    eligible = (health == Health.bad) & (labor_supply == LaborSupply.retired)
    return jnp.where(eligible & (period < RETIREMENT_PERIOD), benefit_rate * avg_earnings, 0.0)


def pension(period, education, pension_base, pension_replacement_rate):
    return jnp.where(
        period >= RETIREMENT_PERIOD, pension_base[education] * pension_replacement_rate, 0.0
    )


def net_income(taxed_income, pension, benefits):
    return taxed_income + pension + benefits


def consumption(net_income, wealth, saving, gross_interest_rate, min_consumption):
    # The consumption floor is a free top-up (pylcm's and the authors' max rule).
    return jnp.maximum(net_income + wealth * gross_interest_rate - saving, min_consumption)


def consumption_utility(health, consumption, health_consumption_penalty, sigma, utility_constant):
    weight = jnp.where(health == Health.good, 1.0, health_consumption_penalty)
    return weight * (consumption ** (1 - sigma) / (1 - sigma) + utility_constant)


def next_wealth(saving):
    return saving


def next_lagged_effort(effort):
    return effort


# With continuous effort (`build(..., continuous_effort=True)`): effort is a point of
# [0, 1], lagged effort a continuous state, and keeping last period's effort is the
# discrete action `effort_adjustment` (the paper's fixed cost is paid for any change).


def continuous_effort_value(effort, lagged_effort, effort_adjustment):
    return jnp.where(effort_adjustment == EffortAdjustment.adjust, effort, lagged_effort)


def continuous_lagged_effort_value(lagged_effort):
    return lagged_effort


def continuous_adjustment_cost_penalty(
    period, adjustment_cost, effort_adjustment, adjustment_cost_envelope
):
    return jnp.where(
        effort_adjustment == EffortAdjustment.adjust,
        adjustment_cost * adjustment_cost_envelope[period],
        0.0,
    )


def continuous_next_lagged_effort(effort_value):
    return effort_value


def next_health(
    period,
    health,
    effort_value,
    lagged_effort_value,
    education,
    health_type,
    health_intercept,
    health_age_effects,
    good_health_coefficient,
    health_type_coefficient,
    college_coefficient,
    health_effort_coefficient,
    lagged_health_effort_coefficient,
):
    index = (
        health_intercept
        + health_age_effects[period]
        + college_coefficient * education
        + good_health_coefficient * health
        + health_type_coefficient * health_type
        + health_effort_coefficient * effort_value
        + lagged_health_effort_coefficient * lagged_effort_value
    )
    good = jax.nn.sigmoid(index)
    return jnp.stack([1 - good, good])  # over (bad, good)


def next_regime(period, education, health, survival):
    alive = survival[period, education, health]
    return jnp.stack([alive, 1 - alive])  # over (alive, dead)


def retirement_constraint(period, labor_supply):
    return (period < RETIREMENT_PERIOD) | (labor_supply == LaborSupply.retired)


def savings_constraint(net_income, wealth, saving, gross_interest_rate):
    return net_income + wealth * gross_interest_rate >= saving


# ---------------------------------------------------------------------------------------
# Grids, tables and the model.
# ---------------------------------------------------------------------------------------


def wealth_points(n_points: int) -> np.ndarray:
    """pylcm's wealth grid `30·(100^(i/(n−1)) − 1)/99`: dense near 0, from 0 to 30."""
    i = np.arange(n_points)
    return WEALTH_MAX * (100.0 ** (i / (n_points - 1)) - 1.0) / 99.0


def _ages(n_periods: int) -> np.ndarray:
    return START_AGE + AGE_STEP * np.arange(n_periods)


def _spline(knots: dict, periods: np.ndarray) -> np.ndarray:
    """A cubic through age-keyed knots, read at `periods`, floored at 0 (pylcm's rule)."""
    knot_periods = (np.array(list(knots)) - START_AGE) // AGE_STEP
    spline = make_interp_spline(knot_periods, np.array(list(knots.values())), k=3)
    return np.maximum(np.asarray(spline(periods)), 0.0)


def _series(values: dict, n_periods: int, name: str) -> pd.Series:
    """A Series indexed by (age, education, health) from {(period, edu, health): value}."""
    ages = _ages(n_periods)
    rows = [
        (ages[p], edu.name, h.name, values[p, edu, h])
        for p in range(n_periods)
        for edu in Education
        for h in Health
    ]
    frame = pd.DataFrame(rows, columns=["age", "education", "health", name])
    return frame.set_index(["age", "education", "health"])[name]


def work_disutility_table(n_periods: int) -> pd.Series:
    # As pylcm: the spline read at periods 1..20 is stored at periods 0..19; 0 from 65 on.
    knots = START_PARAMS["work_disutility"]
    splined = {h: _spline(knots[h.name], np.arange(1, RETIREMENT_PERIOD + 1)) for h in Health}
    factor = {
        Education.low: np.exp(START_PARAMS["education_disutility_adjustment"]),
        Education.high: 1.0,
    }
    values = {
        (p, e, h): (splined[h][p] * factor[e] if p < RETIREMENT_PERIOD else 0.0)
        for p in range(n_periods)
        for e in Education
        for h in Health
    }
    return _series(values, n_periods, "work_disutility")


def effort_cost_table(n_periods: int) -> pd.Series:
    # As pylcm: the spline read at periods 1..30 is stored at periods 0..29, then the
    # last knot's value.
    knots = START_PARAMS["effort_cost"]
    values = {}
    for e in Education:
        for h in Health:
            spec = knots[e.name][h.name]
            splined = _spline(spec, np.arange(1, 31))
            last = list(spec.values())[-1]
            for p in range(n_periods):
                values[p, e, h] = splined[p] if p < 30 else last
    return _series(values, n_periods, "effort_cost")


def survival_table(n_periods: int) -> pd.Series:
    """Survival by (age, education, health) from the reference data; 0 from the alive
    regime's last period on (everyone dies by then)."""
    data = {
        Education.low: np.loadtxt(DATA / "surv_HS.txt", skiprows=1),
        Education.high: np.loadtxt(DATA / "surv_CL.txt", skiprows=1),
    }
    column = {Health.good: 0, Health.bad: 1}  # the files' columns: Healthy, Unhealthy
    last_alive = min(n_periods - 2, len(data[Education.low]) - 1)
    values = {
        (p, e, h): (data[e][p, column[h]] if p < last_alive else 0.0)
        for p in range(n_periods)
        for e in Education
        for h in Health
    }
    return _series(values, n_periods, "survival")


def by_age(values: np.ndarray, n_periods: int, name: str) -> pd.Series:
    return pd.Series(
        np.asarray(values)[:n_periods], index=pd.Index(_ages(n_periods), name="age"), name=name
    )


def build(
    size: str = "reduced",
    *,
    n_subjects: int = 2_000,
    seed: int = 0,
    solver: lcm.AbstractSolver | None = None,
    continuous_effort: bool = False,
    taste_shock_scale: float | None = None,
    scaled_utility: bool = False,
    **grid_sizes: int,
):
    """The model, its parameters and initial conditions at `size` ("full", "medium",
    "reduced" or "tiny"); `grid_sizes` override entries of `SIZES[size]` (e.g.
    `saving=4`); `solver` is the model's solver (default `lcm.GridSearch()`).

    `continuous_effort=True`: effort is a continuous action (`LinSpacedGrid(0, 1,
    n_effort)`, so `GridSearch(refine=["effort"])` can choose it off the grid) and lagged
    effort a continuous state on the same points (the continuation is interpolated
    linearly in it), next lagged effort being this period's effort itself (the paper's
    habit, eq. (6)). Rounding effort to the nearest lagged-effort node instead would make
    the habit's value and the adjustment cost steps inside each bracket (a refined effort
    would only trade effort cost against current health). Since an off-grid lagged effort
    is no point of the effort grid, keeping it (the only choice without the adjustment
    cost) is the discrete action `effort_adjustment` (`stay` / `adjust`). On the grid this
    is the discrete model: at every grid state the values are the same (`stay` is
    choosing the lagged level; adjusting to it pays the cost and never wins).

    `taste_shock_scale`: EV1 taste shocks of this scale (`params["alive"]
    ["taste_shock_scale"]`) on the alive regime's discrete actions (labour supply, and
    with continuous effort the adjustment); None (the default): none, as in the paper.

    `scaled_utility=True`: the discount types written as the reference library writes
    them, one discount factor and the utility scaled by `utility_scale(discount_type,
    period)` (`type_scaled_utility`); values are `utility_scale` times this model's, choices
    the same."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    unknown = set(grid_sizes) - set(SIZES[size])
    if unknown:
        raise ValueError(f"unknown grid sizes {sorted(unknown)}; known: {sorted(SIZES[size])}")
    n = {**SIZES[size], **grid_sizes}
    n_periods = n["periods"]
    effort_labels = [f"level_{i}" for i in range(n["effort"])]
    effort_grid = np.linspace(0.0, 1.0, n["effort"])
    shock = lcm.RouwenhorstGrid(n_points=n["shock"], rho=SHOCK_PERSISTENCE, sigma=1.0)
    wealth_grid = wealth_points(n["wealth"])
    last_alive_age = START_AGE + AGE_STEP * (n_periods - 2)

    if continuous_effort:
        effort_points = lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=n["effort"])
        effort_states = {"lagged_effort": effort_points}
        effort_actions = {
            "effort_adjustment": lcm.DiscreteGrid(EffortAdjustment),
            "effort": effort_points,
        }
        effort_functions = {
            "effort_value": continuous_effort_value,
            "lagged_effort_value": continuous_lagged_effort_value,
            "adjustment_cost_penalty": continuous_adjustment_cost_penalty,
        }
        lagged_effort_transition = continuous_next_lagged_effort
    else:
        effort_states = {"lagged_effort": lcm.DiscreteGrid(effort_labels)}
        effort_actions = {"effort": lcm.DiscreteGrid(effort_labels)}
        effort_functions = {
            "effort_value": effort_value,
            "lagged_effort_value": lagged_effort_value,
            "adjustment_cost_penalty": adjustment_cost_penalty,
        }
        lagged_effort_transition = next_lagged_effort
    alive = lcm.Regime(
        states={
            "wealth": lcm.IrregSpacedGrid(points=wealth_grid),
            "health": lcm.DiscreteGrid(Health),
            "productivity_shock": shock,
            **effort_states,
            "adjustment_cost": lcm.UniformIIDGrid(n_points=n["adjustment"], start=0.0, stop=1.0),
            "education": lcm.DiscreteGrid(Education),
            "productivity": lcm.DiscreteGrid(ProductivityType),
            "health_type": lcm.DiscreteGrid(HealthType),
            "discount_type": lcm.DiscreteGrid(DiscountType),
        },
        actions={
            "labor_supply": lcm.DiscreteGrid(LaborSupply),
            "saving": lcm.IrregSpacedGrid(points=wealth_points(n["saving"])),
            **effort_actions,
        },
        functions={
            **(
                {"utility": type_scaled_utility, "utility_scale": utility_scale}
                if scaled_utility
                else {"utility": utility, "discount_factor": discount_factor}
            ),
            **effort_functions,
            "work_disutility": work_disutility,
            "effort_cost": effort_cost,
            "consumption_utility": consumption_utility,
            "consumption": consumption,
            "base_income": base_income,
            "scaled_productivity_shock": scaled_productivity_shock,
            "income": income,
            "taxed_income": taxed_income,
            "benefits": benefits,
            "pension": pension,
            "net_income": net_income,
        },
        state_transitions={
            "wealth": next_wealth,
            "health": lcm.MarkovTransition(next_health),
            "lagged_effort": lagged_effort_transition,
            "education": lambda education: education,
            "productivity": lambda productivity: productivity,
            "health_type": lambda health_type: health_type,
            "discount_type": lambda discount_type: discount_type,
        },
        transition=lcm.MarkovTransition(next_regime),
        constraints={
            "retirement_constraint": retirement_constraint,
            "savings_constraint": savings_constraint,
        },
        active=lambda age: age <= last_alive_age,
        taste_shocks=None if taste_shock_scale is None else lcm.ExtremeValueShocks(),
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0}, active=lambda period: period >= 1)

    model = lcm.Model(
        regimes={"alive": alive, "dead": dead},
        ages=lcm.AgeGrid(start=START_AGE, step=AGE_STEP),
        n_periods=n_periods,
        regime_ids=RegimeId,
        fixed_params=make_fixed_params(n_periods, None if continuous_effort else effort_grid),
        solver=lcm.GridSearch() if solver is None else solver,
    )
    params = make_params(n_periods, scaled_utility=scaled_utility)
    if taste_shock_scale is not None:
        params["alive"]["taste_shock_scale"] = taste_shock_scale
    initial_conditions = make_initial_conditions(
        n_subjects=n_subjects,
        seed=seed,
        effort_grid=effort_grid,
        n=n,
        continuous_effort=continuous_effort,
    )
    return model, params, initial_conditions


def make_fixed_params(n_periods: int, effort_grid: np.ndarray | None) -> dict:
    """The constants of the model (not estimated in the paper): bound at construction
    (`effort_grid`: the effort levels' values; None with continuous effort)."""
    health_age_effects = pd.Series(HEALTH_AGE_EFFECT_KNOTS).reindex(
        _ages(n_periods), method="ffill"
    )
    health_age_effects.index.name = "age"
    return {
        "alive": {
            **({} if effort_grid is None else {"effort_grid": effort_grid}),
            "productivity_type_multiplier": np.exp([-PRODUCTIVITY_TYPE_LOG, PRODUCTIVITY_TYPE_LOG]),
            "consumption_utility": {"sigma": 2.0},
            "next_health": {**HEALTH_TRANSITION, "health_age_effects": health_age_effects},
            "next_regime": {"survival": survival_table(n_periods)},
        }
    }


def income_normalization(sigx: float) -> float:
    """E[exp θ]·E[exp z]: the mean of the multiplicative wage shock (pylcm's, corrected)."""
    stationary_variance = sigx / (1 - SHOCK_PERSISTENCE**2)
    return float(np.cosh(PRODUCTIVITY_TYPE_LOG) * np.exp(stationary_variance / 2))


def make_params(n_periods: int, *, scaled_utility: bool = False) -> dict:
    process = START_PARAMS["income_process"]
    normalization = income_normalization(process["sigx"])
    edu = ("low", "high")
    y1, yt_s, yt_sq, wagep = (
        np.array([process[k][e] for e in edu]) for k in ("y1", "yt_s", "yt_sq", "wagep")
    )
    last_working = RETIREMENT_PERIOD - 1  # full time, good health, median shock
    pension_base = y1 * np.exp(yt_s * last_working + yt_sq * last_working**2) / normalization
    avg_earnings = 57706.57 / WEALTH_NORMALIZATION
    beta = START_PARAMS["discount_factor"]
    level, growth = START_PARAMS["adjustment_cost"]
    envelope = np.maximum(level * np.exp(growth * np.arange(n_periods)), 0.0)
    by_type = np.array([beta["mean"] - beta["std"], beta["mean"] + beta["std"]])
    discounting = (
        {
            "discount_factor": beta["mean"],
            "utility_scale": {"relative_discount_factor": by_type / beta["mean"]},
        }
        if scaled_utility
        else {"discount_factor": {"discount_factor_by_type": by_type}}
    )
    return {
        "alive": {
            **discounting,
            "gross_interest_rate": 1.04**2,
            "avg_earnings": avg_earnings,
            "consumption": {"min_consumption": 0.10 * avg_earnings},
            "taxed_income": {"tax_scale": 1 - 0.321, "labor_tax_rate": 0.128},
            "benefits": {"benefit_rate": 0.115},
            "work_disutility": {"work_disutility_grid": work_disutility_table(n_periods)},
            "effort_cost": {
                "effort_elasticity": START_PARAMS["effort_elasticity"],
                "effort_cost_grid": effort_cost_table(n_periods),
            },
            "consumption_utility": {
                "utility_constant": START_PARAMS["utility_constant"],
                "health_consumption_penalty": START_PARAMS["health_consumption_penalty"],
            },
            "base_income": {
                "y1": y1,
                "yt_s": yt_s,
                "yt_sq": yt_sq,
                "wagep": wagep,
                "income_normalization": normalization,
            },
            "pension": {
                "pension_base": pension_base,
                "pension_replacement_rate": START_PARAMS["pension_replacement_rate"],
            },
            "adjustment_cost_penalty": {
                "adjustment_cost_envelope": by_age(envelope, n_periods, "adjustment_cost_envelope")
            },
            "scaled_productivity_shock": {"productivity_shock_scale": np.sqrt(process["sigx"])},
        }
    }


def type_distribution() -> pd.DataFrame:
    """The 16 permanent types (rows: education × discount × productivity × health type)."""
    raw = np.loadtxt(DATA / "init_distr_2b2t2h.txt", skiprows=1)
    index = pd.MultiIndex.from_product(
        [[m.name for m in g] for g in (Education, DiscountType, ProductivityType, HealthType)],
        names=["education", "discount_type", "productivity", "health_type"],
    )
    return pd.DataFrame(
        {
            "probability": np.diff(raw[:, 0], prepend=0.0),
            "good_health": raw[:, 1],
            "initial_effort": raw[:, 2],
        },
        index=index,
    ).reset_index()


def make_initial_conditions(
    *, n_subjects: int, seed: int, effort_grid: np.ndarray, n: dict, continuous_effort: bool
) -> pd.DataFrame:
    """Subjects at age 25 with no wealth, types from the reference distribution, health
    by the type's good-health share, lagged effort at the grid point nearest the type's
    initial effort (its value with continuous effort, so that both variants start
    alike), the shock from the chain's stationary distribution."""
    rng = np.random.default_rng(seed)
    types = type_distribution()
    probability = types["probability"].to_numpy()
    drawn = rng.choice(len(types), size=n_subjects, p=probability / probability.sum())
    good = rng.uniform(size=n_subjects) <= types["good_health"].to_numpy()[drawn]
    effort_code = np.abs(
        effort_grid[None, :] - types["initial_effort"].to_numpy()[drawn, None]
    ).argmin(axis=1)
    _, chain = lcm.rouwenhorst(n["shock"], rho=SHOCK_PERSISTENCE, sigma=1.0)
    stationary = np.linalg.matrix_power(np.asarray(chain, dtype=np.float64), 2_000)[0]
    return pd.DataFrame(
        {
            "regime": "alive",
            "wealth": np.zeros(n_subjects),
            "health": np.where(good, "good", "bad"),
            "productivity_shock:index": rng.choice(
                n["shock"], size=n_subjects, p=stationary / stationary.sum()
            ),
            "lagged_effort": (
                effort_grid[effort_code]
                if continuous_effort
                else [f"level_{k}" for k in effort_code]
            ),
            "adjustment_cost:index": rng.integers(0, n["adjustment"], size=n_subjects),
            **{
                c: types[c].to_numpy()[drawn]
                for c in ("education", "productivity", "health_type", "discount_type")
            },
        }
    )


def moments(frame: pd.DataFrame, effort_grid: np.ndarray | None = None) -> pd.DataFrame:
    """Mean effort (its value on [0, 1]) and wealth by age and education, alive subjects.
    `effort_grid`: the effort levels' values; None reads the column `effort_value` (with
    continuous effort: `result.to_dataframe(extra=["effort_value"], ...)`)."""
    alive = frame[frame["regime"] == "alive"].copy()
    if effort_grid is not None:
        alive["effort_value"] = effort_grid[alive["effort"].cat.codes.to_numpy()]
    return (
        alive.groupby(["age", "education"], observed=True)[["effort_value", "wealth"]]
        .mean()
        .unstack()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="reduced")
    parser.add_argument("--subjects", type=int, default=2_000)
    parser.add_argument(
        "--describe",
        action="store_true",
        help="print describe(params) only (the points evaluated by piece); no solve",
    )
    args = parser.parse_args()
    model, params, initial_conditions = build(args.size, n_subjects=args.subjects)
    if args.describe:
        print(model.describe(params))
        return
    print(model.describe())
    start = time.perf_counter()
    solution = model.solve(params)
    jax.block_until_ready(solution.value("alive", 0))
    print(f"solve ({args.size}, first call, incl. compile): {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    result = model.simulate(params, initial_conditions, solution=solution, key=jax.random.key(0))
    frame = result.to_dataframe()
    print(f"simulate {args.subjects} subjects: {time.perf_counter() - start:.1f} s")
    v0 = np.asarray(solution.value("alive", 0))
    print(
        "value at age 25, wealth 0, by discount type (small, large):",
        v0[0, ..., 0].mean(),
        v0[0, ..., 1].mean(),
    )
    table = moments(frame, np.linspace(0.0, 1.0, SIZES[args.size]["effort"]))
    with pd.option_context("display.width", 120, "display.max_rows", 60, "display.precision", 3):
        print("mean effort and wealth by age and education (alive subjects):")
        print(table.iloc[::2])


if __name__ == "__main__":
    main()
