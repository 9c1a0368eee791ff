"""A regime function named `discount_factor` replaces the scalar parameter.

The oracle: a NumPy float64 backward induction written the long way (grid search over
consumption, linear interpolation and extrapolation of next period's value on the
wealth grid), run once per discount factor. A model whose permanent `discount_type`
state selects β by a function must give, at each type, the values of the model solved
apart with that scalar β — under `GridSearch`, `DCEGM` and Epstein–Zin.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

N_PERIODS = 4
WEALTH = np.linspace(1.0, 10.0, 12)
CONSUMPTION = np.linspace(0.5, 10.0, 40)
BETAS = np.array([0.97, 0.8])
INCOME, INTEREST = 1.0, 0.05
SAVINGS = lcm.IrregSpacedGrid(points=[12.0 * (i / 49) ** 2 for i in range(50)])


def oracle(beta: float) -> np.ndarray:
    """Value arrays `(n_periods, n_wealth)` of the one-type model with scalar `beta`."""
    values = np.zeros((N_PERIODS, len(WEALTH)))
    for t in reversed(range(N_PERIODS)):
        for i, w in enumerate(WEALTH):
            best = -np.inf
            for c in CONSUMPTION[w >= CONSUMPTION]:
                future = 0.0
                if t < N_PERIODS - 1:
                    x = (1 + INTEREST) * (w - c) + INCOME
                    k = int(
                        np.clip(np.searchsorted(WEALTH, x, side="right") - 1, 0, len(WEALTH) - 2)
                    )
                    weight = (x - WEALTH[k]) / (WEALTH[k + 1] - WEALTH[k])
                    future = (1 - weight) * values[t + 1, k] + weight * values[t + 1, k + 1]
                best = max(best, np.log(c) + beta * future)
            values[t, i] = best
    return values


def utility(consumption):
    return jnp.log(consumption)


def next_wealth(wealth, consumption, interest_rate, income):
    return (1 + interest_rate) * (wealth - consumption) + income


def discount_factor(discount_type, beta_by_type):
    return beta_by_type[discount_type]


def regime(typed: bool, solver=None, aggregator=None, functions=None):
    states = {"wealth": lcm.LinSpacedGrid(WEALTH[0], WEALTH[-1], len(WEALTH))}
    transitions = {"wealth": next_wealth}
    extra = {}
    if typed:
        states["discount_type"] = lcm.DiscreteGrid(["patient", "impatient"])
        transitions["discount_type"] = lambda discount_type: discount_type
        extra = {"discount_factor": discount_factor} if functions is None else functions
    return lcm.Regime(
        states=states,
        actions={
            "consumption": lcm.LinSpacedGrid(CONSUMPTION[0], CONSUMPTION[-1], len(CONSUMPTION))
        },
        functions={"utility": utility, **extra},
        state_transitions=transitions,
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        solver=solver,
        aggregator=aggregator,
    )


BASE = {"interest_rate": INTEREST, "income": INCOME}


def typed_values(solver=None, aggregator=None, extra=None):
    model = lcm.Model({"alive": regime(True, solver, aggregator)}, n_periods=N_PERIODS)
    params = {**BASE, "beta_by_type": BETAS, **(extra or {})}
    # The function's parameters, not a scalar β, sit at `discount_factor`.
    assert list(model.params_template()["alive"]["discount_factor"]) == ["beta_by_type"]
    return model.solve(params).values["alive"]


def apart_values(beta, solver=None, aggregator=None, extra=None):
    model = lcm.Model({"alive": regime(False, solver, aggregator)}, n_periods=N_PERIODS)
    return model.solve({**BASE, "discount_factor": beta, **(extra or {})}).values["alive"]


def test_the_oracle_agrees_with_the_scalar_model():
    for beta in BETAS:
        np.testing.assert_allclose(apart_values(beta), oracle(beta), rtol=1e-12, atol=1e-12)


def test_each_discount_type_has_the_values_of_its_own_model():
    values = typed_values()
    assert not np.allclose(values[..., 0], values[..., 1])  # today's bug: both types alike
    for code, beta in enumerate(BETAS):
        np.testing.assert_allclose(values[..., code], oracle(beta), rtol=1e-12, atol=1e-12)


def test_with_dcegm():
    make = lambda: lcm.DCEGM(state="wealth", action="consumption", savings=SAVINGS)
    values = typed_values(make())
    for code, beta in enumerate(BETAS):
        expected = apart_values(beta, make())
        np.testing.assert_allclose(values[..., code], expected, rtol=1e-12, atol=1e-12)


def test_with_epstein_zin():
    extra = {"risk_aversion": 3.0, "eis": 0.5}

    def ez_utility(consumption):
        return consumption

    def make(typed):
        r = regime(typed, aggregator=lcm.EpsteinZin())
        return r.replace(functions={**r.functions, "utility": ez_utility})

    typed = lcm.Model({"alive": make(True)}, n_periods=N_PERIODS)
    values = typed.solve({**BASE, "beta_by_type": BETAS, **extra}).values["alive"]
    for code, beta in enumerate(BETAS):
        apart = lcm.Model({"alive": make(False)}, n_periods=N_PERIODS)
        expected = apart.solve({**BASE, "discount_factor": beta, **extra}).values["alive"]
        np.testing.assert_allclose(values[..., code], expected, rtol=1e-12, atol=1e-12)


def test_gradient_with_respect_to_a_type_discount_factor():
    model = lcm.Model({"alive": regime(True)}, n_periods=N_PERIODS)

    def value(beta_patient):
        betas = jnp.stack([beta_patient, BETAS[1]])
        return jnp.sum(model.solve({**BASE, "beta_by_type": betas}).values["alive"][0, :, 0])

    h = 1e-6
    numeric = (value(BETAS[0] + h) - value(BETAS[0] - h)) / (2 * h)
    assert float(jax.grad(value)(BETAS[0])) == pytest.approx(float(numeric), rel=1e-6)


def test_a_scalar_discount_factor_beside_the_function_is_unknown():
    model = lcm.Model({"alive": regime(True)}, n_periods=N_PERIODS)
    with pytest.raises(lcm.InvalidParamsError, match="discount_factor"):
        model.solve({**BASE, "beta_by_type": BETAS, "discount_factor": 0.9})


def test_euler_errors_read_each_types_discount_factor():
    make = lambda: lcm.DCEGM(state="wealth", action="consumption", savings=SAVINGS)
    typed = lcm.Model({"alive": regime(True, make())}, n_periods=N_PERIODS)
    errors = lcm.euler_errors(typed, {**BASE, "beta_by_type": BETAS}, regime="alive")
    assert errors.shape == (N_PERIODS, 2, len(WEALTH))  # (period, discount_type, wealth)
    for code, beta in enumerate(BETAS):
        apart = lcm.Model({"alive": regime(False, make())}, n_periods=N_PERIODS)
        expected = lcm.euler_errors(apart, {**BASE, "discount_factor": beta}, regime="alive")
        np.testing.assert_allclose(errors[:, code], expected, rtol=1e-9, equal_nan=True)
