"""Preference aggregators: Epstein–Zin and β–δ present bias.

The oracles are small numpy float64 backward inductions written here from the formulas
in the docstrings of `EpsteinZin` and `PresentBias`: grid search over consumption,
linear interpolation (and extrapolation) on the wealth grid, a 2-state Markov income
and mortality to a zero-utility terminal regime.
"""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

N_PERIODS = 4
# The grids' own points; no consumption point equals a wealth point (where the borrowing
# constraint would be a tie decided by the last bit).
WEALTH = np.asarray(lcm.LinSpacedGrid(1.0, 12.0, 12).to_jax())
CONSUMPTION = np.asarray(lcm.LinSpacedGrid(0.45, 9.95, 39).to_jax())
INCOME = np.array([0.5, 1.5])
INTEREST = 0.03
INCOME_TRANSITION = np.array([[0.7, 0.3], [0.2, 0.8]])
SURVIVAL = np.array([0.95, 0.9, 0.8, 0.7])

EZ_PARAMS = {
    "discount_factor": 0.95,
    "risk_aversion": 4.0,
    "eis": 0.5,
    "interest_rate": INTEREST,
    "income_transition": jnp.asarray(INCOME_TRANSITION),
    "survival": jnp.asarray(SURVIVAL),
}


def labor_income(income):
    return jnp.where(income == 1, INCOME[1], INCOME[0])


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def borrowing(consumption, wealth):
    return consumption <= wealth


def build(aggregator, utility, *, mortality=True):
    """Wealth and a 2-state Markov income; with `mortality`, death by `survival[period]`."""
    transition = (
        lcm.MarkovTransition(
            lambda survival, period: jnp.stack([survival[period], 1 - survival[period]])
        )
        if mortality
        else (lambda: 0)
    )
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(WEALTH[0], WEALTH[-1], len(WEALTH)),
            "income": lcm.DiscreteGrid(["low", "high"]),
        },
        actions={
            "consumption": lcm.LinSpacedGrid(CONSUMPTION[0], CONSUMPTION[-1], len(CONSUMPTION))
        },
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={
            "wealth": next_wealth,
            "income": lcm.MarkovTransition(
                lambda income, income_transition: income_transition[income]
            ),
        },
        transition=transition,
        constraints={"borrowing": borrowing},
        aggregator=aggregator,
    )
    regimes = {"alive": alive}
    if mortality:
        regimes["dead"] = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(regimes=regimes, n_periods=N_PERIODS)


def interpolate(values, x):
    """Linear interpolation on WEALTH with linear extrapolation (the engine's rule)."""
    step = WEALTH[1] - WEALTH[0]
    lo = np.clip(np.floor((x - WEALTH[0]) / step), 0, len(WEALTH) - 2).astype(int)
    weight = (x - WEALTH[lo]) / step
    return (1 - weight) * values[..., lo] + weight * values[..., lo + 1]


def next_wealth_np(wealth, income):
    return (1 + INTEREST) * (wealth - CONSUMPTION) + INCOME[income]


# ---------------------------------------------------------------------------------------
# Epstein–Zin
# ---------------------------------------------------------------------------------------


def ez_oracle(beta, gamma, psi, *, mortality=True):
    """V[t, income, wealth] by the formula of `EpsteinZin` (survival discounting)."""
    rho = 1 - 1 / psi
    tiny = np.finfo(float).tiny
    values = np.zeros((N_PERIODS, 2, len(WEALTH)))
    for t in reversed(range(N_PERIODS)):
        for i in range(2):
            for k, wealth in enumerate(WEALTH):
                future = np.zeros(len(CONSUMPTION))
                if t < N_PERIODS - 1:
                    transformed = values[t + 1] ** (1 - gamma)
                    nodes = interpolate(transformed, next_wealth_np(wealth, i))  # (2, n_c)
                    mean = np.maximum(INCOME_TRANSITION[i] @ nodes, tiny)
                    equivalent = mean ** (1 / (1 - gamma))
                    survival = SURVIVAL[t] if mortality else 1.0
                    future = survival * equivalent**rho
                value = ((1 - beta) * CONSUMPTION**rho + beta * future) ** (1 / rho)
                value = np.where(wealth >= CONSUMPTION, value, -np.inf)
                values[t, i, k] = value.max()
    return values


@functools.cache
def ez_model(mortality=True):
    # Zero-utility death in the time aggregator, as the oracle writes it (inside the
    # certainty equivalent, the default, a value of 0 with γ > 1 is an error).
    aggregator = lcm.EpsteinZin(terminal="time_aggregator")
    return build(aggregator, lambda consumption: consumption, mortality=mortality)


def ez_params(**changes):
    return {**EZ_PARAMS, **changes}


@pytest.mark.parametrize(("gamma", "psi"), [(4.0, 0.5), (0.5, 1.5), (10.0, 1.5), (2.0, 0.25)])
def test_epstein_zin_matches_numpy_oracle(gamma, psi):
    solution = ez_model().solve(ez_params(risk_aversion=gamma, eis=psi))
    expected = ez_oracle(0.95, gamma, psi)
    values = np.moveaxis(np.asarray(solution.values["alive"]), 1, 2)  # (t, income, wealth)
    np.testing.assert_allclose(values, expected, rtol=1e-10, atol=0)


def test_epstein_zin_without_mortality_matches_numpy_oracle():
    params = {k: v for k, v in ez_params().items() if k != "survival"}
    solution = ez_model(False).solve(params)
    values = np.moveaxis(np.asarray(solution.values["alive"]), 1, 2)
    np.testing.assert_allclose(values, ez_oracle(0.95, 4.0, 0.5, mortality=False), rtol=1e-10)


def test_last_period_has_no_certainty_equivalent_term():
    solution = ez_model().solve(ez_params())
    last = np.asarray(solution.value("alive", N_PERIODS - 1))
    rho = 1 - 1 / 0.5
    best = np.array([CONSUMPTION[w >= CONSUMPTION].max() for w in WEALTH])
    np.testing.assert_allclose(last, ((1 - 0.95) ** (1 / rho) * best)[:, None] * np.ones(2))


@pytest.mark.parametrize("gamma", [3.0, 0.5])
def test_epstein_zin_with_gamma_one_over_psi_is_the_additive_crra_model(gamma):
    """With γ = 1/ψ, `U = V^(1−γ)/((1−β)(1−γ))` solves the additive model with utility
    `c^(1−γ)/(1−γ)` and zero-utility death, interpolation included."""
    beta = 0.95
    params = ez_params(risk_aversion=gamma, eis=1 / gamma)
    ez = np.asarray(ez_model().solve(params).values["alive"])
    additive_model = build(None, lambda consumption, crra: consumption ** (1 - crra) / (1 - crra))
    additive_params = {k: v for k, v in params.items() if k not in ("risk_aversion", "eis")}
    additive = np.asarray(additive_model.solve({**additive_params, "crra": gamma}).values["alive"])
    transformed = ez ** (1 - gamma) / ((1 - beta) * (1 - gamma))
    np.testing.assert_allclose(transformed, additive, rtol=1e-10)


def _value_sum(params):
    return jnp.sum(ez_model().solve(params).value("alive", 0))


@pytest.mark.parametrize("name", ["risk_aversion", "eis", "discount_factor"])
def test_gradients_match_central_finite_differences(name):
    params = ez_params(risk_aversion=4.0, eis=0.5)
    gradient = jax.grad(_value_sum)(params)[name]
    h = 1e-5
    up = float(_value_sum({**params, name: params[name] + h}))
    down = float(_value_sum({**params, name: params[name] - h}))
    finite_difference = (up - down) / (2 * h)
    assert abs(float(gradient) - finite_difference) <= 1e-6 * abs(finite_difference)


def test_jit_and_vmap_of_solve():
    model = ez_model()
    eager = np.asarray(model.solve(ez_params()).values["alive"])
    jitted = jax.jit(model.solve)(ez_params())
    np.testing.assert_allclose(np.asarray(jitted.values["alive"]), eager, rtol=1e-12)
    gammas = jnp.array([2.0, 4.0, 8.0])
    batched = jax.vmap(lambda g: model.solve(ez_params(risk_aversion=g)).values["alive"])(gammas)
    for g, values in zip(gammas, batched, strict=True):
        expected = np.moveaxis(ez_oracle(0.95, float(g), 0.5), 1, 2)
        np.testing.assert_allclose(np.asarray(values), expected, rtol=1e-10)


def test_simulation_takes_the_epstein_zin_decisions():
    model = ez_model()
    params = ez_params()
    solution = model.solve(params)
    wealth = WEALTH[[2, 5, 9]]
    result = model.simulate(
        params,
        initial_conditions={
            "regime": jnp.zeros(3, dtype=int),
            "wealth": jnp.asarray(wealth),
            "income": jnp.array([0, 1, 1]),
        },
        solution=solution,
        key=jax.random.key(0),
    )
    frame = result.to_dataframe()
    first = frame[frame["period"] == 0].sort_values("subject_id")
    np.testing.assert_allclose(
        first["value"], np.asarray(solution.values["alive"][0])[[2, 5, 9], [0, 1, 1]], rtol=1e-10
    )
    # the oracle's choice at those grid nodes
    gamma, psi, beta = 4.0, 0.5, 0.95
    rho = 1 - 1 / psi
    values = ez_oracle(beta, gamma, psi)
    for (_, row), w, i in zip(first.iterrows(), wealth, [0, 1, 1], strict=True):
        nodes = interpolate(values[1] ** (1 - gamma), next_wealth_np(w, i))
        equivalent = (INCOME_TRANSITION[i] @ nodes) ** (1 / (1 - gamma))
        q = ((1 - beta) * CONSUMPTION**rho + beta * SURVIVAL[0] * equivalent**rho) ** (1 / rho)
        q = np.where(w >= CONSUMPTION, q, -np.inf)
        assert row["consumption"] == pytest.approx(CONSUMPTION[np.argmax(q)])
    assert set(frame["regime"]) <= {"alive", "dead"}


# ---------------------------------------------------------------------------------------
# β–δ present bias
# ---------------------------------------------------------------------------------------

PB_PARAMS = {
    "discount_factor": 0.96,
    "present_bias": 0.6,
    "interest_rate": INTEREST,
    "income_transition": jnp.asarray(INCOME_TRANSITION),
    "survival": jnp.asarray(SURVIVAL),
}


def log_utility(consumption):
    return jnp.log(consumption)


def pb_oracle(beta, delta, kind):
    """(V, W)[t, income, wealth]: the decision value and the exponential value."""
    decision = np.zeros((N_PERIODS, 2, len(WEALTH)))
    exponential = np.zeros((N_PERIODS, 2, len(WEALTH)))
    choice = np.zeros((N_PERIODS, 2, len(WEALTH)))
    for t in reversed(range(N_PERIODS)):
        for i in range(2):
            for k, wealth in enumerate(WEALTH):
                expected = np.zeros(len(CONSUMPTION))
                if t < N_PERIODS - 1:
                    nodes = interpolate(exponential[t + 1], next_wealth_np(wealth, i))
                    expected = SURVIVAL[t] * (INCOME_TRANSITION[i] @ nodes)
                feasible = wealth >= CONSUMPTION
                u = np.log(CONSUMPTION)
                v = np.where(feasible, u + beta * delta * expected, -np.inf)
                w = np.where(feasible, u + delta * expected, -np.inf)
                best = np.argmax(v)
                decision[t, i, k] = v[best]
                exponential[t, i, k] = w[best] if kind == "sophisticated" else w.max()
                choice[t, i, k] = CONSUMPTION[best]
    return decision, exponential, choice


@functools.cache
def pb_model(kind):
    return build(lcm.PresentBias(kind=kind), log_utility)


@pytest.mark.parametrize("kind", ["sophisticated", "naive"])
def test_present_bias_matches_numpy_oracle(kind):
    solution = pb_model(kind).solve(PB_PARAMS)
    decision, exponential, _ = pb_oracle(0.6, 0.96, kind)
    values = np.moveaxis(np.asarray(solution.values["alive"]), 1, 2)
    carried = np.moveaxis(np.asarray(solution.exponential_values["alive"]), 1, 2)
    np.testing.assert_allclose(values, decision, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(carried, exponential, rtol=1e-10, atol=1e-10)


def test_the_two_kinds_differ():
    sophisticated = pb_model("sophisticated").solve(PB_PARAMS).values["alive"]
    naive = pb_model("naive").solve(PB_PARAMS).values["alive"]
    assert np.max(np.abs(np.asarray(sophisticated) - np.asarray(naive))) > 1e-3


@pytest.mark.parametrize("kind", ["sophisticated", "naive"])
def test_present_bias_of_one_is_the_exponential_model(kind):
    params = {**PB_PARAMS, "present_bias": 1.0}
    solution = pb_model(kind).solve(params)
    exponential = build(None, log_utility).solve(
        {k: v for k, v in params.items() if k != "present_bias"}
    )
    expected = np.asarray(exponential.values["alive"])
    np.testing.assert_allclose(np.asarray(solution.values["alive"]), expected, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(solution.exponential_values["alive"]), expected, rtol=1e-12
    )


@pytest.mark.parametrize("kind", ["sophisticated", "naive"])
def test_simulation_takes_the_present_biased_decisions(kind):
    model = pb_model(kind)
    nodes = [(3, 0), (6, 1), (10, 0), (11, 1)]
    result = model.simulate(
        PB_PARAMS,
        initial_conditions={
            "regime": jnp.zeros(len(nodes), dtype=int),
            "wealth": jnp.asarray([WEALTH[k] for k, _ in nodes]),
            "income": jnp.asarray([i for _, i in nodes]),
        },
        solution=None,
        key=jax.random.key(1),
    )
    frame = result.to_dataframe()
    first = frame[frame["period"] == 0].sort_values("subject_id")
    decision, _, choice = pb_oracle(0.6, 0.96, kind)
    np.testing.assert_allclose(first["consumption"], [choice[0, i, k] for k, i in nodes])
    np.testing.assert_allclose(first["value"], [decision[0, i, k] for k, i in nodes], rtol=1e-10)
    exponential_choice = pb_oracle(1.0, 0.96, kind)[2]
    assert any(choice[0, i, k] != exponential_choice[0, i, k] for k, i in nodes)


def test_present_bias_under_jit_grad_and_vmap():
    model = pb_model("sophisticated")

    def total(params):
        return jnp.sum(model.solve(params).value("alive", 0))

    eager = model.solve(PB_PARAMS)
    jitted = jax.jit(model.solve)(PB_PARAMS)
    np.testing.assert_allclose(
        np.asarray(jitted.exponential_values["alive"]),
        np.asarray(eager.exponential_values["alive"]),
    )
    gradient = jax.grad(total)(PB_PARAMS)["present_bias"]
    h = 1e-6
    up = float(total({**PB_PARAMS, "present_bias": 0.6 + h}))
    down = float(total({**PB_PARAMS, "present_bias": 0.6 - h}))
    assert float(gradient) == pytest.approx((up - down) / (2 * h), rel=1e-6)
    biases = jnp.array([0.5, 0.8])
    batched = jax.vmap(lambda b: model.solve({**PB_PARAMS, "present_bias": b}).values["alive"])(
        biases
    )
    for b, values in zip(biases, batched, strict=True):
        expected = np.moveaxis(pb_oracle(float(b), 0.96, "sophisticated")[0], 1, 2)
        np.testing.assert_allclose(np.asarray(values), expected, rtol=1e-10, atol=1e-10)


def test_aggregator_regimes_are_checked_at_construction():
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*DCEGM"):
        lcm.Model(
            regimes={
                "alive": ez_model()
                .regimes["alive"]
                .replace(
                    solver=lcm.DCEGM(
                        state="wealth", action="consumption", savings=lcm.LinSpacedGrid(0, 10, 5)
                    )
                ),
                "dead": lcm.Regime(functions={"utility": lambda: 0.0}),
            },
            n_periods=2,
        )


def test_present_biased_solution_round_trips_through_a_file(tmp_path):
    model = pb_model("naive")
    solution = model.solve(PB_PARAMS)
    solution.save(tmp_path / "pb.lcm")
    loaded = lcm.load_solution(tmp_path / "pb.lcm", model)
    np.testing.assert_array_equal(
        np.asarray(loaded.exponential_values["alive"]),
        np.asarray(solution.exponential_values["alive"]),
    )
    np.testing.assert_array_equal(
        np.asarray(loaded.values["alive"]), np.asarray(solution.values["alive"])
    )


@pytest.mark.parametrize("kind", ["sophisticated", "naive"])
def test_splayed_action_and_state_axes_give_the_same_solution(kind):
    """`batch_size` scans the pair of values in chunks; results are unchanged."""
    base = pb_model(kind)
    alive = base.regimes["alive"]
    splayed = alive.replace(
        states={
            "wealth": lcm.LinSpacedGrid(WEALTH[0], WEALTH[-1], len(WEALTH), batch_size=5),
            "income": lcm.DiscreteGrid(["low", "high"]),
        },
        actions={
            "consumption": lcm.LinSpacedGrid(
                CONSUMPTION[0], CONSUMPTION[-1], len(CONSUMPTION), batch_size=7
            )
        },
    )
    model = lcm.Model(regimes={**base.regimes, "alive": splayed}, n_periods=N_PERIODS)
    expected = base.solve(PB_PARAMS)
    solution = model.solve(PB_PARAMS)
    for field in ("values", "exponential_values"):
        np.testing.assert_allclose(
            np.asarray(getattr(solution, field)["alive"]),
            np.asarray(getattr(expected, field)["alive"]),
            rtol=1e-12,
        )


def test_deterministic_death_equals_death_with_probability_one():
    """Terminal regimes reached by a deterministic transition (the stacked, selected
    path of the kernel) enter the time aggregator as with a Markov transition."""
    survival = jnp.array([1.0, 1.0, 0.0, 0.5])
    markov = ez_model().solve(ez_params(survival=survival))
    alive = (
        ez_model().regimes["alive"].replace(transition=lambda period: jnp.where(period >= 2, 1, 0))
    )
    deterministic_model = lcm.Model(
        regimes={"alive": alive, "dead": ez_model().regimes["dead"]}, n_periods=N_PERIODS
    )
    params = {k: v for k, v in ez_params().items() if k != "survival"}
    deterministic = deterministic_model.solve(params)
    np.testing.assert_allclose(
        np.asarray(deterministic.values["alive"][:3]),
        np.asarray(markov.values["alive"][:3]),
        rtol=1e-12,
    )
    # certain death next period: no continuation, as in the last period
    np.testing.assert_allclose(
        np.asarray(deterministic.values["alive"][2]),
        np.asarray(deterministic.values["alive"][3]),
        rtol=1e-12,
    )


def test_stochastic_transition_between_two_epstein_zin_regimes():
    """Two identical regimes reached with probability 1/2 each (no terminal regime) give
    the one-regime model: the certainty equivalent runs over both."""
    single = ez_model(False)
    alive = single.regimes["alive"]
    twin = alive.replace(transition=lcm.MarkovTransition(lambda: jnp.array([0.5, 0.5])))
    model = lcm.Model(regimes={"first": twin, "second": twin}, n_periods=N_PERIODS)
    params = {k: v for k, v in ez_params().items() if k != "survival"}
    expected = np.asarray(single.solve(params).values["alive"])
    solution = model.solve(params)
    for name in ("first", "second"):
        np.testing.assert_allclose(np.asarray(solution.values[name]), expected, rtol=1e-12)


def test_transformed_values_beyond_the_readable_range_raise():
    """V'^(1-γ) of values near 0 with a large γ overflows what the kernel can tell from
    an infeasible state (1e150 in float64): a named error, never values read as -inf."""
    tiny = build(
        lcm.EpsteinZin(terminal="time_aggregator"), lambda consumption: 1e-20 * consumption
    )
    with pytest.raises(lcm.NaNError, match=r"Epstein–Zin transform .* float64"):
        tiny.solve(ez_params(risk_aversion=10.0, eis=1.5))
    # The same model with utility in sensible units solves.
    assert np.all(np.isfinite(ez_model().solve(ez_params(risk_aversion=10.0)).values["alive"]))
