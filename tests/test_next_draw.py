"""The buffer-stock timing: a law of motion that reads the next value of a stochastic
state (`next_income`), drawn after this period's decision.

The model is `m' = R·(m − c) + θ'` in one regime: i.i.d. log-normal income `θ'`
(equiprobable atoms and an unemployment atom), survival by period (a regime function
`discount_factor`), CRRA utility, borrowing limit 0, 15 periods. The references are
`tests/oracles/buffer_stock.py`, written in numpy apart from the library: the endogenous
grid method (`DCEGM` must equal it to round-off at every period) and the discretised
Bellman equation (`GridSearch` must equal it; on finer grids it converges to the EGM
solution). A two-state Markov income and a Rouwenhorst income are checked the same way.
"""

import itertools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.oracles import buffer_stock as oracle  # noqa: E402

N_PERIODS = 15
RHO, R, BETA = 2.0, 1.03, 0.96
SURVIVAL = np.linspace(0.995, 0.9, N_PERIODS)
INCOME = lcm.IIDGrid.equiprobable_lognormal(7, mean=-0.005, sigma=0.1).with_atom(0.3, 0.05)
SAVINGS = np.concatenate([[0.0], np.geomspace(1e-3, 20.0, 79)])
PARAMS = {"interest_rate": R - 1, "risk_aversion": RHO, "beta": BETA, "survival": SURVIVAL}
# Markov income: two states, income levels by code.
LEVELS = np.array([0.4, 1.2])
P_MARKOV = np.array([[0.7, 0.3], [0.1, 0.9]])
MARKOV_PARAMS = {**PARAMS, "income_levels": LEVELS, "income_transition": P_MARKOV}


def utility(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def next_wealth(wealth, consumption, interest_rate, next_income):
    return (1 + interest_rate) * (wealth - consumption) + next_income


def next_wealth_markov(wealth, consumption, interest_rate, next_income, income_levels):
    return (1 + interest_rate) * (wealth - consumption) + income_levels[next_income]


def borrowing(consumption, wealth):
    return consumption <= wealth


def discount_factor(period, beta, survival):
    return beta * survival[period]


def dcegm():
    return lcm.DCEGM(
        state="wealth", action="consumption", savings=lcm.IrregSpacedGrid(points=SAVINGS)
    )


def buffer_stock(solver, n_wealth=60, n_consumption=200, income=INCOME, markov=False):
    if markov:
        income = lcm.DiscreteGrid(["low", "high"])
        transitions = {
            "wealth": next_wealth_markov,
            "income": lcm.MarkovTransition(
                lambda income, income_transition: income_transition[income]
            ),
        }
    else:
        transitions = {"wealth": next_wealth}
    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(0.05, 10.0, n_wealth), "income": income},
        actions={"consumption": lcm.LinSpacedGrid(0.01, 10.0, n_consumption)},
        functions={"utility": utility, "discount_factor": discount_factor},
        state_transitions=transitions,
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        solver=solver,
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=N_PERIODS)


def egm_grids(income=INCOME.points, transition=INCOME.probabilities, savings=SAVINGS):
    return oracle.egm(
        savings=savings,
        income=income,
        transition=transition,
        n_periods=N_PERIODS,
        beta=BETA,
        survival=SURVIVAL,
        interest_rate=R - 1,
        rho=RHO,
    )


def policy(model, params, solution, period, wealth, income_code):
    n = wealth.shape[0]
    # Grid indices: a Markov state's codes under its name, an i.i.d. state's under
    # "income:index" (its own name takes node values).
    markov = isinstance(model.regimes["alive"].states["income"], lcm.DiscreteGrid)
    states = {"wealth": wealth, "income" if markov else "income:index": np.full(n, income_code)}
    actions, _ = lcm.compute_policy(model, params, solution, "alive", period, states)
    return np.asarray(actions["consumption"])


@pytest.fixture(scope="module")
def iid_dcegm():
    model = buffer_stock(dcegm())
    return model, model.solve(PARAMS)


def test_dcegm_equals_the_egm_oracle_at_every_period(iid_dcegm):
    model, solution = iid_dcegm
    grids = egm_grids()
    wealth = np.linspace(0.05, 10.0, 120)
    for period in range(N_PERIODS):
        expected = oracle.egm_consumption(grids, period, 0, wealth)
        for code in (0, 4):  # the current draw does not matter: income arrives next period
            got = policy(model, PARAMS, solution, period, wealth, code)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8, err_msg=f"{period=}")


def test_the_model_read_with_this_periods_income_is_a_different_model(iid_dcegm):
    """The oracle's policy depends on the timing: reading this period's income instead
    (the only spelling before `next_income`) changes consumption by far more than 1e-8."""
    model, solution = iid_dcegm
    wrong = lcm.Model(
        regimes={
            "alive": model.regimes["alive"].replace(
                state_transitions={
                    "wealth": lambda wealth, consumption, interest_rate, income: (
                        (1 + interest_rate) * (wealth - consumption) + income
                    )
                }
            )
        },
        n_periods=N_PERIODS,
    )
    wealth = np.linspace(0.5, 5.0, 20)
    other = policy(wrong, PARAMS, wrong.solve(PARAMS), 5, wealth, 0)
    expected = oracle.egm_consumption(egm_grids(), 5, 0, wealth)
    assert np.max(np.abs(other - expected)) > 1e-2
    del solution


def test_grid_search_equals_the_discretised_oracle():
    wealth, consumption = np.linspace(0.05, 10.0, 40), np.linspace(0.01, 10.0, 100)
    model = buffer_stock(lcm.GridSearch(), 40, 100)
    values = np.asarray(model.solve(PARAMS).values["alive"])
    expected, _ = oracle.grid_search(
        wealth=wealth,
        consumption=consumption,
        income=INCOME.points,
        transition=INCOME.probabilities,
        n_periods=N_PERIODS,
        beta=BETA,
        survival=SURVIVAL,
        interest_rate=R - 1,
        rho=RHO,
    )
    for code in range(INCOME.n_points):
        np.testing.assert_allclose(values[..., code], expected[:, 0], rtol=1e-12, atol=1e-12)


def test_grid_search_converges_to_the_egm_solution():
    """Mean |c_grid − c_EGM| over periods and cash on hand in [0.5, 8], against an EGM
    solution on 2000 savings points; it falls about as the grids' step (measured: 0.072,
    0.024, 0.012, 0.0087 for 25/60, 50/125, 100/250, 200/500 wealth/consumption points;
    the argmax on piecewise-linear next-period values is what is left)."""
    fine = egm_grids(savings=np.concatenate([[0.0], np.geomspace(1e-4, 30.0, 2000)]))
    wealth = np.linspace(0.5, 8.0, 40)
    periods = (0, 4, 9, 13)
    errors = []
    for n_wealth, n_consumption in ((25, 60), (50, 125), (100, 250), (200, 500)):
        model = buffer_stock(lcm.GridSearch(), n_wealth, n_consumption)
        solution = model.solve(PARAMS)
        errors.append(
            np.mean(
                [
                    np.abs(
                        policy(model, PARAMS, solution, t, wealth, 0)
                        - oracle.egm_consumption(fine, t, 0, wealth)
                    )
                    for t in periods
                ]
            )
        )
    print("mean |c_grid - c_EGM| by grid:", errors)
    assert all(b < a for a, b in itertools.pairwise(errors)), errors
    assert errors[-1] < errors[0] / 6 and errors[-1] < 0.01, errors


@pytest.mark.parametrize("solver", ["grid_search", "dcegm"])
def test_simulation_draws_income_after_the_decision(solver):
    model = buffer_stock(lcm.GridSearch() if solver == "grid_search" else dcegm())
    n = 100
    initial = {
        "regime": np.zeros(n, int),
        "wealth": np.linspace(0.5, 5.0, n),
        "income": np.full(n, INCOME.points[3]),
    }
    df = model.simulate(PARAMS, initial, key=jax.random.key(3)).to_dataframe()

    def panel(column):
        return df.pivot(index="subject_id", columns="period", values=column).to_numpy(float)

    wealth, consumption, income = panel("wealth"), panel("consumption"), panel("income")
    # Next period's cash on hand holds next period's draw, the one the panel shows then.
    np.testing.assert_allclose(
        wealth[:, 1:], R * (wealth[:, :-1] - consumption[:, :-1]) + income[:, 1:], atol=1e-12
    )
    assert np.max(np.abs(wealth[:, 1:] - R * (wealth[:, :-1] - consumption[:, :-1]))) > 0.2
    # The draws have the grid's probabilities (the unemployment atom: 5 %).
    share = np.mean(np.isclose(income[:, 1:], INCOME.points[0]))
    assert 0.03 < share < 0.07
    if solver == "dcegm":  # the decision is the policy at this period's state
        grids = egm_grids()
        for t in (0, 7):
            np.testing.assert_allclose(
                consumption[:, t], oracle.egm_consumption(grids, t, 0, wealth[:, t]), atol=1e-8
            )


def test_distribution_pushes_each_draw_to_its_own_cash_on_hand(iid_dcegm):
    model, solution = iid_dcegm
    grid = np.linspace(0.05, 10.0, 60)
    node = 20
    mass = np.zeros((60, INCOME.n_points))
    mass[node, 2] = 1.0
    distribution = model.distribution(PARAMS, {"alive": mass}, solution)
    c0 = float(oracle.egm_consumption(egm_grids(), 0, 0, grid[node]))
    np.testing.assert_allclose(
        distribution.actions["alive"]["consumption"][0][node, 2], c0, atol=1e-8
    )
    arrived = np.asarray(distribution.mass["alive"][1])
    np.testing.assert_allclose(arrived.sum(axis=0), INCOME.probabilities, atol=1e-14)
    # Linear-interpolation weights keep the mean: per draw, R·(m − c) + θ_k.
    mean_by_draw = grid @ arrived / INCOME.probabilities
    np.testing.assert_allclose(mean_by_draw, R * (grid[node] - c0) + INCOME.points, atol=1e-8)


def test_euler_errors_read_next_period_at_the_draw(iid_dcegm):
    """The library's Euler errors equal those computed in numpy from the oracle's policy
    (which the DC-EGM policy equals to round-off), with `θ'` in next cash on hand."""
    model, solution = iid_dcegm
    points = np.linspace(0.6, 8.0, 25)
    errors = np.asarray(lcm.euler_errors(model, PARAMS, solution, regime="alive", points=points))
    grids = egm_grids()
    for t in (0, 6, 12):
        c = oracle.egm_consumption(grids, t, 0, points)
        expected_marginal = sum(
            p * oracle.egm_consumption(grids, t + 1, 0, R * (points - c) + theta) ** -RHO
            for p, theta in zip(INCOME.probabilities, INCOME.points, strict=True)
        )
        implied = (BETA * SURVIVAL[t] * R * expected_marginal) ** (-1 / RHO)
        expected = np.log10(np.abs(1 - implied / c))
        got = errors[t, 0]
        ok = np.isfinite(got)
        assert ok.sum() > 15
        np.testing.assert_allclose(got[ok], expected[ok], atol=1e-4)


def test_log_likelihood_of_consumption_uses_the_policy_at_the_draw(iid_dcegm):
    model, solution = iid_dcegm
    grids = egm_grids()
    wealth = np.array([0.7, 1.5, 3.0, 6.0])
    period = np.array([0, 3, 8, 12])
    observed = np.array([0.6, 1.2, 1.9, 3.1])
    data = {
        "subject_id": np.arange(4),
        "period": period,
        "regime": np.zeros(4, int),
        "wealth": wealth,
        "income": np.full(4, INCOME.points[1]),
        "consumption": observed,
    }
    sd = 0.2
    got = lcm.log_likelihood(
        model, PARAMS, data, solution=solution, measurement_sd=sd, per_row=True
    )
    best = np.array(
        [oracle.egm_consumption(grids, t, 0, m) for t, m in zip(period, wealth, strict=True)]
    )
    expected = -0.5 * ((observed - best) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-8)


# --------------------------------------------------------------------- Markov income
def test_markov_income_grid_search_equals_the_discretised_oracle():
    wealth, consumption = np.linspace(0.05, 10.0, 40), np.linspace(0.01, 10.0, 100)
    model = buffer_stock(lcm.GridSearch(), 40, 100, markov=True)
    values = np.asarray(model.solve(MARKOV_PARAMS).values["alive"])
    expected, _ = oracle.grid_search(
        wealth=wealth,
        consumption=consumption,
        income=LEVELS,
        transition=P_MARKOV,
        n_periods=N_PERIODS,
        beta=BETA,
        survival=SURVIVAL,
        interest_rate=R - 1,
        rho=RHO,
    )
    np.testing.assert_allclose(values, np.moveaxis(expected, 1, 2), rtol=1e-12, atol=1e-12)


def test_markov_income_dcegm_equals_the_egm_oracle():
    model = buffer_stock(dcegm(), markov=True)
    solution = model.solve(MARKOV_PARAMS)
    grids = egm_grids(income=LEVELS, transition=P_MARKOV)
    wealth = np.linspace(0.05, 10.0, 80)
    for period in (0, 5, 10, 13, 14):
        for code in (0, 1):
            got = policy(model, MARKOV_PARAMS, solution, period, wealth, code)
            expected = oracle.egm_consumption(grids, period, code, wealth)
            np.testing.assert_allclose(got, expected, atol=1e-8, err_msg=f"{period=}, {code=}")


def test_rouwenhorst_income_grid_search_equals_the_discretised_oracle():
    income = lcm.RouwenhorstGrid(n_points=3, rho=0.9, sigma=0.1, mean=0.0)
    nodes, matrix = (np.asarray(x) for x in income.discretize({}))

    def next_wealth_log(wealth, consumption, interest_rate, next_income):
        return (1 + interest_rate) * (wealth - consumption) + jnp.exp(next_income)

    model = buffer_stock(lcm.GridSearch(), 30, 80, income=income)
    alive = model.regimes["alive"].replace(state_transitions={"wealth": next_wealth_log})
    model = lcm.Model(regimes={"alive": alive}, n_periods=N_PERIODS)
    values = np.asarray(model.solve(PARAMS).values["alive"])
    expected, _ = oracle.grid_search(
        wealth=np.linspace(0.05, 10.0, 30),
        consumption=np.linspace(0.01, 10.0, 80),
        income=np.exp(nodes),
        transition=matrix,
        n_periods=N_PERIODS,
        beta=BETA,
        survival=SURVIVAL,
        interest_rate=R - 1,
        rho=RHO,
    )
    np.testing.assert_allclose(values, np.moveaxis(expected, 1, 2), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- errors
def _regime(**changes):
    spec = {
        "states": {
            "wealth": lcm.LinSpacedGrid(0.05, 10.0, 10),
            "income": INCOME,
            "health": lcm.DiscreteGrid(["bad", "good"]),
        },
        "actions": {"consumption": lcm.LinSpacedGrid(0.01, 10.0, 10)},
        "functions": {"utility": utility},
        "state_transitions": {"wealth": next_wealth, "health": lambda health: health},
        "transition": lambda: 0,
        "constraints": {"borrowing": borrowing},
    }
    spec.update(changes)
    return lcm.Regime(**spec)


@pytest.mark.parametrize(
    ("changes", "pieces"),
    [
        (  # a deterministic discrete state has no draw to read
            {
                "state_transitions": {
                    "wealth": lambda wealth, consumption, next_health: wealth - consumption,
                    "health": lambda health: health,
                }
            },
            ["'alive'", "'next_wealth'", "'next_health'", "not a stochastic state"],
        ),
        (  # nor does a continuous state
            {
                "state_transitions": {
                    "wealth": lambda wealth, consumption, next_wealth: wealth - consumption,
                    "health": lambda health: health,
                }
            },
            ["'alive'", "'next_wealth'", "not a stochastic state"],
        ),
        (  # only a law of motion reads next values
            {"functions": {"utility": lambda consumption, next_income: jnp.log(consumption)}},
            ["'alive'", "'utility'", "'next_income'", "only the law of motion"],
        ),
        (
            {
                "functions": {
                    "utility": utility,
                    "windfall": lambda next_income: next_income,
                }
            },
            ["'alive'", "'windfall'", "'next_income'", "only the law of motion"],
        ),
        (  # a discrete state's law of motion
            {
                "state_transitions": {
                    "wealth": next_wealth,
                    "health": lambda health, next_income: health * (next_income > 0.5),
                }
            },
            ["'alive'", "'next_health'", "'next_income'", "only the law of motion"],
        ),
        (  # a law of motion by target regime
            {
                "state_transitions": {
                    "wealth": {"alive": next_wealth},
                    "health": lambda health: health,
                }
            },
            ["'alive'", "'next_wealth'", "'next_income'", "dict by target regime"],
        ),
        (
            {
                "constraints": {
                    "borrowing": lambda consumption, wealth, next_income: consumption <= wealth
                }
            },
            ["'alive'", "'borrowing'", "'next_income'", "only the law of motion"],
        ),
    ],
)
def test_next_values_that_cannot_be_read_are_named(changes, pieces):
    with pytest.raises(lcm.ModelInitializationError) as info:
        lcm.Model(regimes={"alive": _regime(**changes)}, n_periods=3)
    for piece in pieces:
        assert piece in str(info.value)


def test_a_drawn_law_of_motion_returning_nan_is_reported():
    def next_wealth_nan(wealth, consumption, next_income):
        return jnp.where(next_income < 0.5, jnp.nan, wealth - consumption + next_income)

    model = lcm.Model(
        regimes={
            "alive": _regime(
                state_transitions={"wealth": next_wealth_nan, "health": lambda health: health}
            )
        },
        n_periods=3,
    )
    with pytest.raises(lcm.LcmError, match="next_wealth"):
        model.solve({"discount_factor": 0.9, "risk_aversion": RHO})


def test_invalid_probabilities_of_a_drawn_markov_state_are_reported():
    model = buffer_stock(lcm.GridSearch(), 20, 40, markov=True)
    bad = {**MARKOV_PARAMS, "income_transition": np.array([[0.7, 0.4], [0.1, 0.9]])}
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="next_income"):
        model.solve(bad)


@pytest.mark.parametrize("solver", ["grid_search", "dcegm"])
def test_a_drawn_law_of_motion_indexing_out_of_bounds_is_reported(solver):
    def next_wealth_bonus(wealth, consumption, interest_rate, next_income, bonus, period):
        return (1 + interest_rate) * (wealth - consumption) + next_income + bonus[period]

    model = buffer_stock(lcm.GridSearch() if solver == "grid_search" else dcegm(), 20, 40)
    alive = model.regimes["alive"].replace(state_transitions={"wealth": next_wealth_bonus})
    model = lcm.Model(regimes={"alive": alive}, n_periods=N_PERIODS)
    with pytest.raises(lcm.InvalidParamsError, match="bonus"):
        model.solve({**PARAMS, "bonus": np.zeros(5)})


@pytest.mark.slow
def test_dcegm_gradient_through_the_draw_matches_finite_differences():
    alive = buffer_stock(dcegm()).regimes["alive"]
    model = lcm.Model(regimes={"alive": alive}, n_periods=4)

    def total(rate):
        values = model.solve({**PARAMS, "interest_rate": rate}, validate="off").values
        return jnp.sum(values["alive"][0, 10:40, 0])

    rate, step = 0.03, 1e-5
    gradient = jax.grad(total)(rate)
    central = (total(rate + step) - total(rate - step)) / (2 * step)
    np.testing.assert_allclose(gradient, central, rtol=1e-5)


@pytest.mark.parametrize("interpolate", ["transformed", "values"])
def test_epstein_zin_grid_search_reads_the_draw_like_a_numpy_oracle(interpolate):
    """Epstein–Zin takes the certainty equivalent over the draw, each node at its own
    next cash on hand: `CE = (Σ_k p_k f(V'(R·(m − c) + θ'_k)))^(1/(1−γ))`."""
    n_periods, beta, gamma, psi = 4, 0.96, 2.0, 0.5
    wealth, consumption = np.linspace(0.05, 10.0, 30), np.linspace(0.01, 10.0, 60)
    alive = lcm.Regime(
        states={"wealth": lcm.IrregSpacedGrid(points=wealth), "income": INCOME},
        actions={"consumption": lcm.IrregSpacedGrid(points=consumption)},
        functions={"utility": lambda consumption: consumption},
        state_transitions={"wealth": next_wealth},
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        aggregator=lcm.EpsteinZin(interpolate=interpolate),
    )
    model = lcm.Model(regimes={"alive": alive}, n_periods=n_periods)
    params = {"discount_factor": beta, "risk_aversion": gamma, "eis": psi, "interest_rate": R - 1}
    values = np.asarray(model.solve(params).values["alive"])

    rho = 1 - 1 / psi
    m, c = wealth[:, None], consumption[None, :]
    expected = np.zeros((n_periods, wealth.shape[0]))
    for t in range(n_periods - 1, -1, -1):
        if t == n_periods - 1:
            q = (1 - beta) ** (1 / rho) * c * np.ones_like(m)
        else:
            following = expected[t + 1]
            mean = 0.0
            for p, theta in zip(INCOME.probabilities, INCOME.points, strict=True):
                m_next = R * (m - np.minimum(c, m)) + theta
                if interpolate == "values":
                    mean = mean + p * oracle.interpolate(wealth, following, m_next) ** (1 - gamma)
                else:
                    transformed = following ** (1 - gamma)
                    mean = mean + p * oracle.interpolate(wealth, transformed, m_next)
            equivalent = mean ** (1 / (1 - gamma))
            q = ((1 - beta) * c**rho + beta * equivalent**rho) ** (1 / rho)
        expected[t] = np.where(c <= m, q, -np.inf).max(axis=1)
    for code in (0, 3):
        np.testing.assert_allclose(values[..., code], expected, rtol=1e-12)


def test_the_next_value_is_an_input_not_a_parameter():
    model = lcm.Model(regimes={"alive": _regime()}, n_periods=3)
    assert set(model.params_template()["alive"]["next_wealth"]) == {"interest_rate"}


@pytest.mark.slow
def test_a_sharded_drawn_state_gives_the_unsharded_solution_and_panel():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("next_draw_devices.py")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    for solver, (values, panel) in result.items():
        assert values < 1e-12 and panel < 1e-12, (solver, values, panel)
