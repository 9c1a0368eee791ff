"""DC-EGM at the borrowing limit, against closed forms and named errors (issue 31).

- A CRRA retiree with no income (`m' = R·(m − c)`, `c <= m`): at the limit the next state
  is 0, where the value is `-inf`; consumption falls to 0 there and the policy starts at
  `(0, 0)`. Exact solution `c_t(m) = m / S_t`, `V_t(m) = B_t·u(m)` (a numpy oracle
  written here), for risk aversion above and below 1.
- Utilities outside the class at zero consumption (`u'(0)` finite, as `log(x + 1)`, whose
  exact policy is negative; `u(0)` finite where the state grid reaches the limit) and an
  Euler equation that the inversion does not solve: named errors when solving.
- The borrowing-limit check tolerates the rounding of the constraint's own arithmetic.
"""

from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402


class Alive(IntEnum):
    alive = 0


N_PERIODS = 10
WEALTH = np.linspace(0.05, 3.0, 60)
RETIREE = {"discount_factor": 0.96, "gross_return": 1.03}


def crra(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def next_wealth(wealth, consumption, gross_return):
    return gross_return * (wealth - consumption)


def spend_at_most_wealth(consumption, wealth):
    return consumption <= wealth


def retiree(wealth=WEALTH, utility=crra, n_periods=N_PERIODS, **solver_options):
    regime = lcm.Regime(
        states={"wealth": lcm.IrregSpacedGrid(points=list(wealth))},
        actions={"consumption": lcm.LinSpacedGrid(0.01, 3.0, 50)},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth},
        transition=lambda: Alive.alive,
        constraints={"budget": spend_at_most_wealth},
    )
    solver = lcm.DCEGM(
        state="wealth",
        action="consumption",
        savings=lcm.LinSpacedGrid(0.0, 50.0, 500),
        **solver_options,
    )
    return lcm.Model(
        regimes={"alive": regime}, n_periods=n_periods, regime_ids=Alive, solver=solver
    )


def retiree_oracle(m, risk_aversion, discount_factor, gross_return):
    """The exact values and consumption by period, by backward recursion on the
    coefficients: `c_t = m / S_t` with `S_T = 1` and, from the Euler equation
    `c_t^-ρ = β·R·(R·(m − c_t) / S_{t+1})^-ρ`, `S_t = 1 + (β·R^(1−ρ))^(1/ρ)·S_{t+1}`;
    `V_t = B_t·u(m)` with `B_t·u(m) = u(m / S_t) + β·B_{t+1}·u(R·m·(1 − 1/S_t))`."""
    rho, beta, r = risk_aversion, discount_factor, gross_return
    s = np.ones(N_PERIODS)
    b = np.ones(N_PERIODS)
    for t in range(N_PERIODS - 2, -1, -1):
        s[t] = 1 + (beta * r ** (1 - rho)) ** (1 / rho) * s[t + 1]
        b[t] = s[t] ** (rho - 1) + beta * b[t + 1] * (r * (1 - 1 / s[t])) ** (1 - rho)
    u = m ** (1 - rho) / (1 - rho)
    return [b[t] * u for t in range(N_PERIODS)], [m / s[t] for t in range(N_PERIODS)]


@pytest.mark.parametrize("risk_aversion", [1.95, 0.5])
def test_zero_income_retiree_is_exact_at_every_node_and_period(risk_aversion):
    # Measured: relative errors at most 7e-15 (values) and 4e-15 (consumption) for
    # both risk aversions. Before: -inf on 6, 10, 20 of the 60 nodes at periods 7, 5, 0
    # and consumption off by up to 7x (risk aversion 1.95).
    model = retiree()
    params = {**RETIREE, "risk_aversion": risk_aversion}
    solution = model.solve(params)
    values, consumption = retiree_oracle(WEALTH, risk_aversion, **RETIREE)
    for period in range(N_PERIODS):
        v = np.asarray(solution.value("alive", period))
        assert np.isfinite(v).all(), period
        np.testing.assert_allclose(v, values[period], rtol=1e-6, atol=0)
        actions, policy_values = lcm.compute_policy(
            model, params, solution, "alive", period, {"wealth": WEALTH}
        )
        np.testing.assert_allclose(
            np.asarray(actions["consumption"]), consumption[period], rtol=1e-6, atol=0
        )
        np.testing.assert_allclose(np.asarray(policy_values), values[period], rtol=1e-6, atol=0)


def test_zero_income_retiree_is_finite_right_above_the_limit():
    """Between the limit and the first endogenous point (at `m ≈ 0.11` in period 0 and
    `0.2` in period 8) the policy runs from `(0, 0)`: finite values and exact consumption
    however close to the limit."""
    wealth = np.geomspace(1e-6, 0.3, 12)
    model = retiree(wealth)
    params = {**RETIREE, "risk_aversion": 1.95}
    solution = model.solve(params)
    values, _ = retiree_oracle(wealth, 1.95, **RETIREE)
    for period in (0, N_PERIODS - 2):
        np.testing.assert_allclose(
            np.asarray(solution.value("alive", period)), values[period], rtol=1e-6, atol=0
        )


# ---------------------------------------------------------------------------------------
# Outside the class: named errors when solving
# ---------------------------------------------------------------------------------------


def log_one_plus(x):
    return jnp.log(x + 1.0)


def next_wealth_spent(wealth, x):
    return wealth - x


def spend_x_at_most_wealth(x, wealth):
    return x <= wealth


def log_one_plus_model(solver):
    """`u(x) = log(x + 1)`, `m' = m − x`, 2 periods: with discount factor 3 the exact
    period-0 policy is `(m − 2) / 4`, negative for `m < 2`."""
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(0.0, 4.0, 9)},
        actions={"x": lcm.LinSpacedGrid(-1.0, 4.0, 2001)},
        functions={"utility": log_one_plus},
        state_transitions={"wealth": next_wealth_spent},
        transition=lambda: Alive.alive,
        constraints={"budget": spend_x_at_most_wealth},
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=2, regime_ids=Alive, solver=solver)


def test_a_bounded_marginal_utility_is_a_named_error():
    """`u'(0) = 1`: the optimal action may be <= 0 (here -0.25 at m = 1), outside DC-EGM's
    class. DC-EGM raises a `ModelInitializationError` naming the
    regime, the function and the action, for any discount factor (with 0.3 the policy is
    positive, but no consumption falls to 0 at the limit: the class does not hold)."""
    dcegm = log_one_plus_model(
        lcm.DCEGM(state="wealth", action="x", savings=lcm.LinSpacedGrid(0.0, 10.0, 101))
    )
    for beta in (3.0, 0.3):
        with pytest.raises(lcm.ModelInitializationError) as raised:
            dcegm.solve({"discount_factor": beta})
        message = str(raised.value)
        assert "Regime 'alive', function 'utility', action 'x'" in message
        assert "u'(x) stays finite" in message and "GridSearch()" in message
    with pytest.warns(lcm.LcmWarning, match="outside DCEGM's class"):
        dcegm.solve({"discount_factor": 3.0}, validate="warn")


def test_a_finite_utility_at_zero_on_a_grid_that_reaches_the_limit_is_a_named_error():
    """CRRA with risk aversion 0.5 is in the class (`u'(0) = inf`: exact above, at every
    node above the limit), but its utility is finite at 0, and on a state grid with a
    node at the limit DC-EGM would give `-inf` there: a named error."""
    model = retiree(np.linspace(0.0, 3.0, 7), n_periods=2)
    with pytest.raises(lcm.ModelInitializationError, match="finite at consumption = 0"):
        model.solve({**RETIREE, "risk_aversion": 0.5})
    # Log utility is -inf at 0 like the value there: the same grid is fine.
    model = retiree(
        np.linspace(0.0, 3.0, 7), utility=lambda consumption: jnp.log(consumption), n_periods=2
    )
    with pytest.warns(lcm.LcmWarning, match="no feasible action"):  # wealth 0: none
        values = np.asarray(model.solve(RETIREE).value("alive", 0))
    assert values[0] == -np.inf and np.isfinite(values[1:]).all()


def test_an_euler_equation_left_unsolved_is_a_named_error():
    """A wrong `inverse_marginal_utility` (twice the consumption that solves the Euler
    equation) is caught by the check `utility:euler`, not returned."""
    model = retiree(
        n_periods=2,
        inverse_marginal_utility=lambda marginal_utility, risk_aversion: (
            2 * marginal_utility ** (-1 / risk_aversion)
        ),
    )
    with pytest.raises(lcm.ModelInitializationError, match="Euler equation") as raised:
        model.solve({**RETIREE, "risk_aversion": 1.95})
    assert "function 'utility', action 'consumption'" in str(raised.value)


# ---------------------------------------------------------------------------------------
# The borrowing-limit check and rounding
# ---------------------------------------------------------------------------------------


def save_at_least(consumption, wealth, minimum_savings):
    return consumption <= wealth - minimum_savings


def minimum_savings_model(savings_start):
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 20)},
        actions={"consumption": lcm.LinSpacedGrid(0.01, 10.0, 20)},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": lambda wealth, consumption: 1.02 * (wealth - consumption) + 1},
        transition=lambda: Alive.alive,
        constraints={"budget": save_at_least},
    )
    solver = lcm.DCEGM(
        state="wealth", action="consumption", savings=lcm.LinSpacedGrid(savings_start, 20.0, 30)
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=2, regime_ids=Alive, solver=solver)


def test_the_limit_check_allows_rounding_of_the_constraint():
    """Saving at least 0.13: at the limit the check evaluates `1 <= (0.13 + 1) − 0.13`,
    which is `0.9999999999999999` in float64; the constraint binds exactly there all the
    same (it raised "does not bind there" before). A grid that starts above the limit
    is still refused."""
    params = {"discount_factor": 0.95, "minimum_savings": 0.13}
    assert 1.0 > (0.13 + 1.0) - 0.13  # the rounding the check must not count
    values = np.asarray(minimum_savings_model(0.13).solve(params).value("alive", 0))
    assert np.isfinite(values).all()
    with pytest.raises(lcm.ModelInitializationError, match="does not bind there"):
        minimum_savings_model(0.14).solve(params)
    with pytest.raises(lcm.ModelInitializationError, match="does not bind there"):
        minimum_savings_model(0.12).solve(params)
