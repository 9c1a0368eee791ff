"""`lcm.Equilibrium`: stationary OLG equilibria against independent references.

- The example economy (`examples/olg.py`: mortality, annuities, a PAYG pension,
  Cobb–Douglas production, population growth; `DCEGM`) against a numpy oracle that
  solves the household in closed form and the equilibrium by bisection
  (`tests/oracles/olg.py`): prices to 1e-8 (measured: 1.4e-13), excess demands below
  1e-10 in at most 10 Newton steps (measured: 5e-14 in 3), the wealth profile.
- Diamond's (1965) two-period economy with log utility, whose steady state is in closed
  form (capital per worker `k = [β(1−α) / ((1+β)(1+n))]^(1/(1−α))`, e.g. Blanchard &
  Fischer 1989, ch. 3): prices and their derivatives in β, under `jax.jit` and
  `jax.vmap`.
- A static labour-supply economy solved by `GridSearch` (taste shocks: logit choices),
  against its logit oracle; and the errors when no equilibrium is bracketed.
- Derivatives by the implicit function theorem against central differences (forward and
  reverse mode), and the calibration of β to a capital–output ratio, checked by the
  oracle.
"""

import functools
import importlib.util
from enum import IntEnum
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.oracles import olg as oracle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# -------------------------------------------------------------- the example's economy
@pytest.fixture(scope="module")
def example():
    """`examples/olg.py` imported as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location("olg_example", ROOT / "examples" / "olg.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oracle_economy(example, **changes):
    params = {**example.params, **changes}
    return dict(
        survival=np.asarray(params["survival"]),
        working_periods=example.RETIREMENT_AGE - example.FIRST_AGE,
        beta=params["discount_factor"],
        gamma=params["risk_aversion"],
        alpha=params["capital_share"],
        delta=params["depreciation"],
        population_growth=params["population_growth"],
        replacement_rate=params["replacement_rate"],
    )


def oracle_equilibrium(example, **changes):
    return oracle.equilibrium(lower=0.02, upper=0.07, **oracle_economy(example, **changes))


@pytest.fixture(scope="module")
def solved(example):
    return example.equilibrium.solve(example.params)


def test_example_equilibrium_equals_the_numpy_oracle(example, solved):
    assert bool(solved.converged) and int(solved.steps) <= 10
    assert max(abs(float(v)) for v in solved.excess.values()) <= 1e-10
    expected = oracle_equilibrium(example)
    for price in ("interest_rate", "wage", "contribution_rate"):
        assert abs(float(solved.prices[price]) - expected[price]) <= 1e-8, price
    for name in ("capital", "labor", "retirees", "output", "capital_output"):
        np.testing.assert_allclose(float(solved.aggregates[name]), expected[name], rtol=1e-8)
    # The exact distribution carries the mean of cash on hand exactly (policies are
    # affine in it: the borrowing constraint never binds).
    profile = np.asarray(solved.population.distribution.mean("wealth"))
    np.testing.assert_allclose(profile, expected["cash"], rtol=1e-9)
    # The stationary population: cohort t has weight (1 + n)^-t times survival to t.
    shares, _, _ = oracle.demographics(
        survival=example.survival, population_growth=0.01, working_periods=45
    )
    np.testing.assert_allclose(np.asarray(solved.population.cohort_sizes), shares, rtol=1e-12)


def test_example_result_fields(example, solved):
    assert set(solved.prices) == {"interest_rate", "wage", "contribution_rate"}
    assert float(solved.params["interest_rate"]) == float(solved.prices["interest_rate"])
    assert solved.message == "converged"
    table = solved.summary()
    assert list(table["kind"].unique()) == ["price", "aggregate", "excess demand"]
    population = solved.population
    # Per head of the living population vs mean over those who have it (retirees have
    # labor_supply 0, so the two differ only by the mass that has it: everyone here).
    labor = float(population.per_capita("labor_supply"))
    np.testing.assert_allclose(float(population.mean("labor_supply")), labor, rtol=1e-12)
    np.testing.assert_allclose(float(population.regime_share("alive")), 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        float(population.per_capita("savings", regime="alive")),
        float(population.per_capita("savings")),
        rtol=1e-14,
    )
    # Per head: the population-weighted mean of savings by age.
    by_age = np.asarray(population.distribution.mean("savings"))
    np.testing.assert_allclose(
        float(population.per_capita("savings")),
        np.sum(np.asarray(population.cohort_sizes) * by_age),
        rtol=1e-12,
    )
    distribution = population.distribution
    np.testing.assert_allclose(
        np.asarray(distribution.total("savings")),
        np.asarray(distribution.mean("savings") * distribution.total(regime="alive")),
        rtol=1e-12,
    )
    with pytest.raises(lcm.LcmError, match="not a living regime"):
        population.regime_share("dead")
    # The prices found are an equilibrium when evaluated without solving.
    evaluated = example.equilibrium.evaluate(solved.params)
    assert bool(evaluated.converged) and int(evaluated.steps) == 0


@pytest.mark.slow
def test_example_derivatives_equal_central_differences(example, solved):
    """d r*/dβ and d(K/Y)/dβ by the implicit function theorem (forward mode) against
    central differences of the library's equilibrium and of the oracle's."""
    equilibrium, params = example.equilibrium, example.params

    def outcome(beta):
        result = equilibrium.solve({**params, "discount_factor": beta})
        return jnp.stack([result.prices["interest_rate"], result.aggregates["capital_output"]])

    beta, step = 0.98, 1e-5
    exact = np.asarray(jax.jacfwd(outcome)(jnp.asarray(beta)))
    central = (np.asarray(outcome(beta + step)) - np.asarray(outcome(beta - step))) / (2 * step)
    np.testing.assert_allclose(exact, central, rtol=1e-6)
    up = oracle_equilibrium(example, discount_factor=beta + step)
    down = oracle_equilibrium(example, discount_factor=beta - step)
    for i, name in enumerate(("interest_rate", "capital_output")):
        np.testing.assert_allclose(exact[i], (up[name] - down[name]) / (2 * step), rtol=1e-6)
    # Reverse mode transposes the same rule.
    reverse = jax.grad(lambda b: outcome(b)[1])(jnp.asarray(beta))
    np.testing.assert_allclose(float(reverse), exact[1], rtol=1e-9)


@pytest.mark.slow
def test_example_calibration_reaches_the_capital_output_target(example):
    calibration = example.equilibrium.calibrate(
        example.params, free=["discount_factor"], targets={"capital_output": 3.0}
    )
    assert bool(calibration.converged) and int(calibration.steps) <= 10
    assert abs(float(calibration.errors["capital_output"])) <= 1e-10
    beta = float(calibration.params["discount_factor"])
    # K/Y = 3 means r = α / 3 − δ for Cobb–Douglas: 0.04 here.
    np.testing.assert_allclose(float(calibration.equilibrium.prices["interest_rate"]), 0.04)
    expected = oracle_equilibrium(example, discount_factor=beta)
    np.testing.assert_allclose(expected["capital_output"], 3.0, rtol=1e-8)


# ---------------------------------------------------------------- Diamond (closed form)
ALPHA, DELTA, GROWTH = 0.3, 0.05, 0.2


def diamond_capital(beta):
    return (beta * (1 - ALPHA) / ((1 + beta) * (1 + GROWTH))) ** (1 / (1 - ALPHA))


@pytest.fixture(scope="module")
def diamond():
    """Two periods of life: the young earn the wage and save, the old consume their
    savings with interest. Log utility, `DCEGM`."""

    def next_wealth(wealth, consumption, interest_rate):
        return (1 + interest_rate) * (wealth - consumption)

    wealth = lcm.LinSpacedGrid(start=0.01, stop=1.0, n_points=60)
    savings = lcm.IrregSpacedGrid(points=np.linspace(1e-9, 1.0, 60) ** 1.5)
    alive = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": lcm.LinSpacedGrid(start=0.001, stop=1.0, n_points=5)},
        functions={
            "utility": lambda consumption: jnp.log(consumption),
            "savings": lambda wealth, consumption: wealth - consumption,
            "labor_supply": lambda period: jnp.where(period == 0, 1.0, 0.0),
        },
        state_transitions={"wealth": next_wealth},
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model(
        regimes={"alive": alive},
        n_periods=2,
        solver=lcm.DCEGM(state="wealth", action="consumption", savings=savings),
    )
    equilibrium = lcm.Equilibrium(
        model,
        prices=["interest_rate", "wage"],
        aggregates={
            "capital": lambda population, population_growth: (
                population.per_capita("savings") / (1 + population_growth)
            ),
            "labor": lambda population: population.per_capita("labor_supply"),
        },
        clearing={
            "capital": lambda interest_rate, capital, labor: (
                interest_rate - (ALPHA * (capital / labor) ** (ALPHA - 1) - DELTA)
            ),
            "labor": lambda wage, capital, labor: wage - (1 - ALPHA) * (capital / labor) ** ALPHA,
        },
        initial=lambda wage: {"regime": jnp.zeros(1, dtype=int), "wealth": jnp.reshape(wage, (1,))},
        population_growth="population_growth",
        bounds={"interest_rate": (-DELTA, 5.0), "wage": (0.0, 10.0)},
    )
    params = {
        "discount_factor": jnp.asarray(0.6),
        "interest_rate": jnp.asarray(0.5),
        "wage": jnp.asarray(0.2),
        "population_growth": jnp.asarray(GROWTH),
    }
    return equilibrium, params


def diamond_prices(beta):
    k = diamond_capital(beta)
    return np.array([ALPHA * k ** (ALPHA - 1) - DELTA, (1 - ALPHA) * k**ALPHA])


def test_diamond_steady_state_equals_the_closed_form(diamond):
    equilibrium, params = diamond
    result = equilibrium.solve(params)
    assert bool(result.converged) and int(result.steps) <= 10
    found = np.array([float(result.prices["interest_rate"]), float(result.prices["wage"])])
    np.testing.assert_allclose(found, diamond_prices(0.6), rtol=1e-10)
    labor = float(result.aggregates["labor"])
    np.testing.assert_allclose(labor, (1 + GROWTH) / (2 + GROWTH), rtol=1e-12)
    np.testing.assert_allclose(
        float(result.aggregates["capital"]) / labor, diamond_capital(0.6), rtol=1e-10
    )


@pytest.mark.slow
def test_diamond_under_jit_vmap_and_jacfwd(diamond):
    equilibrium, params = diamond

    def prices(beta):
        result = equilibrium.solve({**params, "discount_factor": beta})
        return jnp.stack([result.prices["interest_rate"], result.prices["wage"]])

    betas = jnp.asarray([0.5, 0.6, 0.7])
    batched = np.asarray(jax.jit(jax.vmap(prices))(betas))
    np.testing.assert_allclose(batched, [diamond_prices(b) for b in (0.5, 0.6, 0.7)], rtol=1e-10)
    # d k / d β of the closed form, through r = α k^(α−1) − δ and w = (1−α) k^α.
    beta = 0.6
    k = diamond_capital(beta)
    dk = k / (1 - ALPHA) * (1 / beta - 1 / (1 + beta))
    expected = [
        ALPHA * (ALPHA - 1) * k ** (ALPHA - 2) * dk,
        (1 - ALPHA) * ALPHA * k ** (ALPHA - 1) * dk,
    ]
    np.testing.assert_allclose(
        np.asarray(jax.jacfwd(prices)(jnp.asarray(beta))), expected, rtol=1e-8
    )


# ------------------------------------------------------- grid search: static labour supply
class Labor(IntEnum):
    work = 0
    leisure = 1


class Life(IntEnum):
    alive = 0
    dead = 1


CAPITAL, BENEFIT, DISUTILITY, SCALE = 2.0, 0.3, 0.4, 0.5


def labor_economy(**options):
    alive = lcm.Regime(
        actions={"labor": lcm.DiscreteGrid(Labor)},
        functions={
            "utility": lambda labor, wage: jnp.where(
                labor == Labor.work, jnp.log(wage) - DISUTILITY, jnp.log(BENEFIT)
            ),
            "labor_supply": lambda labor: jnp.where(labor == Labor.work, 1.0, 0.0),
        },
        transition=lcm.MarkovTransition(lambda survival: jnp.stack([survival, 1 - survival])),
        taste_shocks=lcm.ExtremeValueShocks(),
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    model = lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=4, regime_ids=Life)
    equilibrium = lcm.Equilibrium(
        model,
        prices=["wage"],
        aggregates={"labor": lambda population: population.per_capita("labor_supply")},
        clearing={
            "labor": options.pop(
                "clearing",
                lambda wage, labor, alpha: wage - (1 - alpha) * (CAPITAL / labor) ** alpha,
            )
        },
        initial={"regime": np.zeros(1, dtype=int)},
        population_growth=0.02,
        **options,
    )
    params = {
        "discount_factor": 0.95,
        "taste_shock_scale": SCALE,
        "survival": 0.9,
        "wage": 1.0,
        "alpha": 0.4,
    }
    return equilibrium, params


def logit_wage(alpha):
    """The wage at which the firm's demand meets the share who work (the same in every
    period: the choice is static), by bisection."""

    def excess(wage):
        share = 1 / (1 + np.exp(-((np.log(wage) - DISUTILITY) - np.log(BENEFIT)) / SCALE))
        return wage - (1 - alpha) * (CAPITAL / share) ** alpha

    lower, upper = 0.01, 10.0
    while upper - lower > 1e-15:
        middle = 0.5 * (lower + upper)
        lower, upper = (middle, upper) if excess(middle) < 0 else (lower, middle)
    return 0.5 * (lower + upper)


def test_grid_search_equilibrium_equals_the_logit_oracle():
    equilibrium, params = labor_default()
    result = equilibrium.solve(params)
    assert bool(result.converged) and int(result.steps) <= 10
    np.testing.assert_allclose(float(result.prices["wage"]), logit_wage(0.4), rtol=1e-10)


@functools.cache
def labor_default():
    """The labour economy with its default clearing condition, built once (each
    `Equilibrium` compiles its own programs)."""
    return labor_economy()


def labor_wage(alpha):
    equilibrium, params = labor_default()
    return equilibrium.solve({**params, "alpha": alpha}).prices["wage"]


def test_grid_search_equilibrium_under_jit_and_vmap():
    np.testing.assert_allclose(float(jax.jit(labor_wage)(0.4)), logit_wage(0.4), rtol=1e-10)
    alphas = jnp.asarray([0.3, 0.4, 0.5])
    np.testing.assert_allclose(
        np.asarray(jax.vmap(labor_wage)(alphas)),
        [logit_wage(a) for a in (0.3, 0.4, 0.5)],
        rtol=1e-10,
    )


def test_grid_search_equilibrium_derivatives_forward_and_reverse():
    wage = labor_wage
    step = 1e-5
    central = (logit_wage(0.4 + step) - logit_wage(0.4 - step)) / (2 * step)
    forward = float(jax.jacfwd(wage)(jnp.asarray(0.4)))
    np.testing.assert_allclose(forward, central, rtol=1e-6)
    np.testing.assert_allclose(float(jax.grad(wage)(jnp.asarray(0.4))), forward, rtol=1e-12)


def test_grid_search_calibration():
    """The firm's capital share at which 60% of the population works."""
    equilibrium, params = labor_default()
    calibration = equilibrium.calibrate(
        params, free=["alpha"], targets={"labor": 0.6}, bounds={"alpha": (0.05, 0.95)}
    )
    assert bool(calibration.converged)
    assert abs(float(calibration.errors["labor"])) <= 1e-10
    alpha = float(calibration.params["alpha"])
    wage = logit_wage(alpha)
    share = 1 / (1 + np.exp(-((np.log(wage) - DISUTILITY) - np.log(BENEFIT)) / SCALE))
    np.testing.assert_allclose(share, 0.6, rtol=1e-9)
    np.testing.assert_allclose(float(calibration.equilibrium.prices["wage"]), wage, rtol=1e-9)


def test_no_bracketed_equilibrium_is_an_error():
    equilibrium, params = labor_economy(
        clearing=lambda wage, labor: 1.0 + wage * labor,  # > 0 for every positive wage
        bounds={"wage": (0.5, 3.0)},
    )
    del params["alpha"]
    with pytest.raises(lcm.EquilibriumError, match="no equilibrium is bracketed in"):
        equilibrium.solve(params)
    result = equilibrium.solve(params, validate="off")
    assert not bool(result.converged)
    assert 0.5 <= float(result.prices["wage"]) < 3.0  # the steps stayed inside the bounds
    with pytest.warns(lcm.LcmWarning, match="Newton's method"):
        equilibrium.solve(params, validate="warn")
    with pytest.raises(jax.errors.JaxRuntimeError, match="EquilibriumError"):
        jax.jit(equilibrium.solve)(params)


# -------------------------------------------------------------------- specification errors
def test_specification_errors():
    equilibrium, params = labor_economy()
    model = equilibrium.model
    labor = {"labor": lambda population: population.per_capita("labor_supply")}
    clear = {"labor": lambda wage, labor: wage - labor}
    initial = {"regime": np.zeros(1, dtype=int)}

    def build(**changes):
        arguments = dict(prices=["wage"], aggregates=labor, clearing=clear, initial=initial)
        return lcm.Equilibrium(model, **{**arguments, **changes})

    with pytest.raises(lcm.EquilibriumError, match=r"must be an lcm\.Model"):
        lcm.Equilibrium("model", prices=["wage"], aggregates=labor, clearing=clear, initial=initial)
    with pytest.raises(lcm.EquilibriumError, match="one condition per price"):
        build(prices=["wage", "survival"])
    with pytest.raises(lcm.EquilibriumError, match="neither a parameter of the model"):
        build(prices=["rent"])
    with pytest.raises(lcm.EquilibriumError, match="not defined before it"):
        build(aggregates={"a": lambda b: b, "b": lambda population: 1.0})
    with pytest.raises(lcm.EquilibriumError, match="has the name of a price"):
        build(aggregates={"wage": lambda population: 1.0})
    with pytest.raises(lcm.EquilibriumError, match="living must name regimes"):
        build(living=["retired"])
    with pytest.raises(lcm.EquilibriumError, match="lower < upper"):
        build(bounds={"wage": (2.0, 1.0)})
    with pytest.raises(lcm.EquilibriumError, match="reads 'population'"):
        build(clearing={"labor": lambda population: 1.0})
    with pytest.raises(lcm.InvalidParamsError, match="reads the parameter 'alpha'"):
        equilibrium.solve({k: v for k, v in params.items() if k != "alpha"})
    with pytest.raises(lcm.InvalidParamsError, match=r"\['rent'\]"):
        equilibrium.solve({**params, "rent": 1.0})
    with pytest.raises(lcm.InvalidParamsError, match="lacks the price 'wage'"):
        equilibrium.solve({k: v for k, v in params.items() if k != "wage"})
    with pytest.raises(lcm.EquilibriumError, match="as many distinct free parameters"):
        equilibrium.calibrate(params, free=["alpha", "survival"], targets={"labor": 0.5})
    with pytest.raises(lcm.EquilibriumError, match="is a price"):
        equilibrium.calibrate(params, free=["wage"], targets={"labor": 0.5})
    with pytest.raises(lcm.EquilibriumError, match="targets must name"):
        equilibrium.calibrate(params, free=["alpha"], targets={"output": 0.5})


def test_float32_converges_to_a_tolerance_of_its_own():
    """The default tolerance scales with the float type (eps ** 0.75: 6.4e-6 in
    float32), so a float32 run converges rather than stalling at float64's."""
    jax.config.update("jax_enable_x64", False)
    try:
        equilibrium, params = labor_economy()
        result = equilibrium.solve(params)
        assert result.prices["wage"].dtype == jnp.float32
        assert bool(result.converged)
        assert abs(float(result.excess["labor"])) <= float(jnp.finfo(jnp.float32).eps) ** 0.75
        np.testing.assert_allclose(float(result.prices["wage"]), logit_wage(0.4), rtol=1e-5)
    finally:
        jax.config.update("jax_enable_x64", True)
