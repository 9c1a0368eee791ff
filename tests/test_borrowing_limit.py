"""Borrowing limits that vary: a regime function `borrowing_limit` of the income state.

One regime: cash on hand `m`, a two-state Markov income, savings `m − c >= L_z` with
`L_z = −limit_scale · y_z` (a fraction of the current income may be borrowed), income
drawn after the decision. `DCEGM` shifts its savings grid (the offsets above the limit)
by each income state's limit; the reference is `tests/oracles/natural_limit.py`, an EGM
written in numpy apart from the library. `GridSearch` enforces the same limit through
the constraint that reads it.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.oracles import natural_limit as oracle  # noqa: E402

N_PERIODS = 5
LEVELS = np.array([0.4, 1.2])
P_INCOME = np.array([[0.7, 0.3], [0.1, 0.9]])
OFFSETS = np.concatenate([[0.0], np.geomspace(1e-3, 30.0, 59)])
PARAMS = {
    "interest_rate": 0.03,
    "risk_aversion": 2.0,
    "discount_factor": 0.95,
    "limit_scale": 0.3,
    "income_levels": LEVELS,
    "income_transition": P_INCOME,
}
WEALTH = np.linspace(0.05, 10.0, 50)


def utility(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def borrowing_limit(income, limit_scale, income_levels):
    return -limit_scale * income_levels[income]


def next_wealth(wealth, consumption, interest_rate, next_income, income_levels):
    return (1 + interest_rate) * (wealth - consumption) + income_levels[next_income]


def borrowing(wealth, consumption, borrowing_limit):
    return wealth - consumption >= borrowing_limit


def dcegm(offsets=OFFSETS):
    return lcm.DCEGM(
        state="wealth", action="consumption", savings=lcm.IrregSpacedGrid(points=offsets)
    )


def regime(solver, n_consumption=100, **changes):
    spec = {
        "states": {
            "wealth": lcm.LinSpacedGrid(0.05, 10.0, 40),
            "income": lcm.DiscreteGrid(["low", "high"]),
        },
        "actions": {"consumption": lcm.LinSpacedGrid(0.01, 10.5, n_consumption)},
        "functions": {"utility": utility, "borrowing_limit": borrowing_limit},
        "state_transitions": {
            "wealth": next_wealth,
            "income": lcm.MarkovTransition(
                lambda income, income_transition: income_transition[income]
            ),
        },
        "transition": lambda: 0,
        "constraints": {"borrowing": borrowing},
        "solver": solver,
    }
    return lcm.Regime(**{**spec, **changes})


def model_of(solver, **changes):
    return lcm.Model(regimes={"alive": regime(solver, **changes)}, n_periods=N_PERIODS)


def oracle_grids(limit_scale=PARAMS["limit_scale"]):
    return oracle.egm(
        offsets=OFFSETS,
        income=LEVELS,
        transition=P_INCOME,
        limits=-limit_scale * LEVELS,
        n_periods=N_PERIODS,
        beta=PARAMS["discount_factor"],
        interest_rate=PARAMS["interest_rate"],
        rho=PARAMS["risk_aversion"],
    )


def policy(model, solution, period, income_code, wealth=WEALTH):
    states = {"wealth": wealth, "income": np.full(wealth.shape[0], income_code)}
    actions, _ = lcm.compute_policy(model, PARAMS, solution, "alive", period, states)
    return np.asarray(actions["consumption"])


@pytest.fixture(scope="module")
def solved():
    model = model_of(dcegm())
    return model, model.solve(PARAMS)


def test_dcegm_equals_the_egm_oracle_with_a_limit_by_income_state(solved):
    model, solution = solved
    grids = oracle_grids()
    limits = -PARAMS["limit_scale"] * LEVELS
    for period in range(N_PERIODS):
        for z in range(2):
            if grids[period] is None:  # the last period: consume down to the limit
                expected = WEALTH - limits[z]
            else:
                expected = oracle.read_policy(*grids[period][z], limits[z], WEALTH)
            got = policy(model, solution, period, z)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8, err_msg=f"{period=}")
    # The limit binds at low wealth: the agent borrows (consumes more than its wealth).
    assert policy(model, solution, 0, 1)[0] > WEALTH[0]


def test_gradient_with_respect_to_the_limit_equals_central_differences(solved):
    model, _ = solved

    def total(limit_scale):
        values = model.solve({**PARAMS, "limit_scale": limit_scale}, validate="off").values
        return jnp.sum(values["alive"][0])

    scale = PARAMS["limit_scale"]
    gradient = jax.grad(total)(scale)
    h = 1e-5
    central = (total(scale + h) - total(scale - h)) / (2 * h)
    assert abs(float(gradient)) > 1e-2  # the limit matters for the values
    np.testing.assert_allclose(float(gradient), float(central), rtol=1e-5)


def test_grid_search_honours_the_limit_through_the_constraint(solved):
    """Grid search reads the limit through the constraint: its savings never fall
    below the limit, it borrows at low wealth, and its values approach DC-EGM's."""
    _, solution = solved
    search = model_of(lcm.GridSearch(), n_consumption=200)
    searched = search.solve(PARAMS)
    limits = -PARAMS["limit_scale"] * LEVELS
    for z in range(2):
        consumption = policy(search, searched, 0, z)
        assert np.all(WEALTH - consumption >= limits[z] - 1e-12)
        assert consumption[0] > WEALTH[0]
    # Within the grid search's accuracy (measured: 3.6e-2 relative at most, above the
    # lowest wealth nodes, where the consumption grid is coarse against consumption).
    exact = np.asarray(solution.values["alive"])[:, 4:]
    gap = np.abs(np.asarray(searched.values["alive"])[:, 4:] - exact)
    assert np.max(gap / np.abs(exact)) < 5e-2


def test_a_limit_that_reads_the_continuous_state_is_rejected():
    def limit_of_wealth(wealth, limit_scale):
        return -limit_scale * wealth

    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*'borrowing_limit'.*wealth"):
        model_of(dcegm(), functions={"utility": utility, "borrowing_limit": limit_of_wealth})


def test_savings_must_start_at_zero_with_a_limit_function():
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*offset.*start at 0"):
        model_of(dcegm(OFFSETS + 0.1))


@pytest.mark.parametrize("solver", ["grid_search", "dcegm"])
def test_a_limit_that_no_constraint_reads_is_rejected(solver):
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*'borrowing_limit'.*no con"):
        model_of(
            lcm.GridSearch() if solver == "grid_search" else dcegm(),
            constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        )


def test_a_constraint_that_does_not_bind_at_the_limit_is_rejected():
    """A limit function with a constraint that binds elsewhere would solve another
    model: the check `<constraint>:limit` names it."""

    def tighter(wealth, consumption, borrowing_limit):
        return wealth - consumption >= borrowing_limit + 0.1

    model = model_of(dcegm(), constraints={"borrowing": tighter})
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive', constraint 'borrowing'"):
        model.solve(PARAMS)


def test_a_limit_that_is_not_finite_is_rejected(solved):
    model, _ = solved
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*'borrowing_limit'.*finite"):
        model.solve({**PARAMS, "limit_scale": np.inf})


def test_euler_errors_count_saving_at_each_states_limit_as_constrained(solved):
    """Euler errors read each income state's own limit: points that save exactly the
    limit are left out (NaN); the others are the interpolation error between the 60
    savings points (measured: mean -4.15, worst -2.47 near the high-income limit; -4.35
    and -3.52 with limit_scale 0, the same as without the function)."""
    model, solution = solved
    errors = np.asarray(lcm.euler_errors(model, PARAMS, solution, regime="alive"))
    inner = errors[:-1]  # (periods, income, wealth); the last period has none
    assert np.all(np.isnan(errors[-1]))
    assert np.isfinite(inner).sum() > inner.size // 2
    assert np.nanmean(inner) < -4 and np.nanmax(inner) < -2
    # At the lowest wealth of the high-income state the agent borrows to its limit.
    assert np.all(np.isnan(inner[:, 1, 0]))
