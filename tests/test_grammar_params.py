"""Model grammar: `fixed_params`, per-target state transitions, model-level shared
functions and state transitions.

The oracle is a separate NumPy float64 backward induction of a small working/retired
model, written the long way: grid search over consumption, linear interpolation (and
extrapolation) of next period's value on the wealth grid. Its knobs:

- `severance`: a working agent who retires gets it on top of next wealth: the law of
  motion of wealth depends on the regime moved to (a per-target transition);
- `stochastic`: a working agent who works is forced into retirement with probability
  `forced` (a Markov regime transition); otherwise retiring is the labor choice.

Wages are an array indexed by period (so a fixed parameter may be an array).
"""

from __future__ import annotations

import itertools
import warnings
from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

N_PERIODS = 3
WEALTH = np.linspace(1.0, 12.0, 7)
CONSUMPTION = np.linspace(1.0, 12.0, 9)
PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.04,
    "disutility_of_work": 0.3,
    "wages": np.array([2.0, 2.5, 3.0]),
}
SEVERANCE = 1.5
FORCED = 0.2


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


# ------------------------------------------------------------------------ the oracle
def _interpolate(values: np.ndarray, x: float) -> float:
    i = int(np.clip(np.searchsorted(WEALTH, x, side="right") - 1, 0, len(WEALTH) - 2))
    weight = (x - WEALTH[i]) / (WEALTH[i + 1] - WEALTH[i])
    return float((1 - weight) * values[i] + weight * values[i + 1])


def oracle(params, *, severance=None, stochastic=False) -> dict[str, np.ndarray]:
    """Value arrays `(n_periods, n_wealth)` of both regimes, in float64."""
    beta, r = params["discount_factor"], params["interest_rate"]
    disutility, wages = params["disutility_of_work"], np.asarray(params["wages"])
    values = {name: np.zeros((N_PERIODS, len(WEALTH))) for name in ("working", "retired")}
    for t in reversed(range(N_PERIODS)):
        last = t == N_PERIODS - 1
        next_work = None if last else values["working"][t + 1]
        next_retired = None if last else values["retired"][t + 1]
        for i, w in enumerate(WEALTH):
            best_retired = -np.inf
            for c in CONSUMPTION[w >= CONSUMPTION]:
                continuation = 0.0 if last else _interpolate(next_retired, (1 + r) * (w - c))
                best_retired = max(best_retired, np.log(c) + beta * continuation)
            values["retired"][t, i] = best_retired
            best_working = -np.inf
            for labor in (Labor.work, Labor.retire):
                income = wages[t] if labor == Labor.work else 0.0
                for c in CONSUMPTION[w >= CONSUMPTION]:
                    u = np.log(c) - disutility * (labor == Labor.work)
                    if last:
                        best_working = max(best_working, u)
                        continue
                    base = (1 + r) * (w - c) + income
                    to_retired = base + (severance or 0.0)
                    if stochastic:
                        p_retire = FORCED if labor == Labor.work else 1.0
                    else:
                        p_retire = 0.0 if labor == Labor.work else 1.0
                    expected = 0.0
                    if p_retire < 1.0:
                        expected += (1 - p_retire) * _interpolate(next_work, base)
                    if p_retire > 0.0:
                        expected += p_retire * _interpolate(next_retired, to_retired)
                    best_working = max(best_working, u + beta * expected)
            values["working"][t, i] = best_working
    return values


# ------------------------------------------------------------------------ the model
def utility(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)


def labor_income(labor, wages, period):
    return jnp.where(labor == Labor.work, wages[period], 0.0)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_wealth_into_retirement(wealth, consumption, labor_income, interest_rate, severance):
    return (1 + interest_rate) * (wealth - consumption) + labor_income + severance


def next_wealth_retired(wealth, consumption, interest_rate):
    return (1 + interest_rate) * (wealth - consumption)


def next_regime(labor):
    return jnp.where(labor == Labor.work, RegimeId.working, RegimeId.retired)


def next_regime_stochastic(labor, forced):
    return jnp.where(labor == Labor.work, jnp.array([1 - forced, forced]), jnp.array([0.0, 1.0]))


def borrowing(consumption, wealth):
    return consumption <= wealth


def grids():
    return lcm.IrregSpacedGrid(points=list(WEALTH)), lcm.IrregSpacedGrid(points=list(CONSUMPTION))


def regimes(*, per_target=False, stochastic=False, working_solver=None):
    wealth, consumption = grids()
    wealth_law = next_wealth
    if per_target:
        wealth_law = {"working": next_wealth, "retired": next_wealth_into_retirement}
    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={"wealth": wealth_law},
        transition=lcm.MarkovTransition(next_regime_stochastic) if stochastic else next_regime,
        constraints={"borrowing": borrowing},
        solver=working_solver,
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": next_wealth_retired},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": borrowing},
    )
    return {"working": working, "retired": retired}


def build(*, per_target=False, stochastic=False, **kwargs):
    return lcm.Model(
        regimes=regimes(per_target=per_target, stochastic=stochastic),
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
        **kwargs,
    )


def assert_matches(solution, expected):
    for name in ("working", "retired"):
        for t in range(N_PERIODS):
            np.testing.assert_allclose(
                np.asarray(solution.value(name, t)), expected[name][t], rtol=0, atol=1e-8
            )


def initial_conditions(n=6):
    return {"regime": np.zeros(n, dtype=int), "wealth": np.linspace(2.0, 11.0, n)}


def finite_difference(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# ------------------------------------------------------------------------ fixed_params
FIXED = {"interest_rate": 0.04, "working": {"labor_income": {"wages": PARAMS["wages"]}}}
FREE = {"discount_factor": 0.95, "disutility_of_work": 0.3}


def test_the_oracle_agrees_with_the_plain_model():
    assert_matches(build().solve(PARAMS), oracle(PARAMS))


def test_fixed_params_match_the_oracle_and_leave_the_template():
    model = build(fixed_params=FIXED)
    template = model.params_template()
    assert template == {
        "working": {
            "discount_factor": template["working"]["discount_factor"],
            "utility": {"disutility_of_work": template["working"]["utility"]["disutility_of_work"]},
        },
        "retired": {"discount_factor": template["retired"]["discount_factor"]},
    }
    assert_matches(model.solve(FREE), oracle(PARAMS))
    assert set(model.fixed_params) == {"interest_rate", "working"}


WAGES = PARAMS["wages"]


@pytest.mark.parametrize(
    ("fixed", "free"),
    [
        ({"interest_rate": 0.04}, {**FREE, "wages": WAGES}),
        (
            {
                "working": {"interest_rate": 0.04},
                "retired": {"next_wealth": {"interest_rate": 0.04}},
            },
            {**FREE, "wages": WAGES},
        ),
        ({"discount_factor": 0.95}, {k: v for k, v in PARAMS.items() if k != "discount_factor"}),
        (
            {"working": {"discount_factor": 0.95}},
            {**FREE, "discount_factor": None, "retired": {"discount_factor": 0.95}},
        ),
    ],
    ids=["top", "regime-and-function", "discount-factor", "discount-factor-of-one-regime"],
)
def test_fixed_params_at_every_level(fixed, free):
    free = {"interest_rate": 0.04, "wages": WAGES, **free}
    free = {k: v for k, v in free.items() if v is not None and not _fixed_at_top(fixed, k)}
    model = build(fixed_params=fixed)
    assert_matches(model.solve(free), oracle(PARAMS))


def _fixed_at_top(fixed, key):
    """Whether `key` is fixed somewhere, so that it may not be given at the top."""
    return key in fixed or any(
        isinstance(v, dict)
        and (key in v or any(isinstance(w, dict) and key in w for w in v.values()))
        for v in fixed.values()
    )


def test_fixed_params_as_a_series_and_not_traced():
    model = build(fixed_params=lcm.params_to_series(FIXED))
    assert_matches(model.solve(FREE), oracle(PARAMS))

    @jax.jit
    def build_inside(rate):
        return (
            build(fixed_params={"interest_rate": rate})
            .solve({**FREE, "wages": PARAMS["wages"]})
            .value("working", 0)
        )

    with pytest.raises(lcm.ModelInitializationError, match="traced"):
        build_inside(0.04)


def test_a_fixed_param_given_again_is_an_error():
    model = build(fixed_params={"interest_rate": 0.04})
    with pytest.raises(lcm.InvalidParamsError, match="fixed at construction"):
        model.solve({**FREE, "wages": PARAMS["wages"], "interest_rate": 0.04})
    with pytest.raises(lcm.InvalidParamsError, match="fixed at construction"):
        model.solve(
            {**FREE, "wages": PARAMS["wages"], "retired": {"next_wealth": {"interest_rate": 0.1}}}
        )


def test_fixed_params_compile_once_and_differentiate_in_the_free_ones():
    model = build(fixed_params=FIXED)
    solve = jax.jit(lambda p: model.solve(p).value("working", 0))
    for disutility in (0.3, 0.35, 0.4):
        solve({**FREE, "disutility_of_work": disutility})
    assert solve._cache_size() == 1
    np.testing.assert_allclose(
        np.asarray(solve(FREE)), oracle(PARAMS)["working"][0], rtol=0, atol=1e-8
    )

    def objective(beta):
        return jnp.sum(model.solve({**FREE, "discount_factor": beta}).value("working", 0))

    gradient = jax.grad(objective)(0.95)
    numeric = finite_difference(lambda b: float(objective(b)), 0.95)
    np.testing.assert_allclose(float(gradient), numeric, rtol=1e-5)

    betas = jnp.array([0.9, 0.95])
    batched = jax.vmap(lambda b: model.solve({**FREE, "discount_factor": b}).value("working", 0))(
        betas
    )
    for beta, row in zip([0.9, 0.95], batched, strict=True):
        expected = oracle({**PARAMS, "discount_factor": beta})["working"][0]
        np.testing.assert_allclose(np.asarray(row), expected, rtol=0, atol=1e-8)


@pytest.mark.slow
def test_fixed_params_in_simulate_distribution_likelihood_and_dataframe():
    plain, fixed = build(), build(fixed_params=FIXED)
    conditions = initial_conditions()
    a = plain.simulate(PARAMS, conditions, key=jax.random.key(1)).to_dataframe()
    b = fixed.simulate(FREE, conditions, key=jax.random.key(1)).to_dataframe()
    assert a.equals(b)
    extra = fixed.simulate(FREE, conditions, key=jax.random.key(1)).to_dataframe(
        extra=["labor_income"], model=fixed, params=FREE
    )
    working = extra["regime"] == "working"
    wages = PARAMS["wages"][extra["period"].to_numpy()]
    expected = np.where(extra["labor"] == "work", wages, 0.0)
    np.testing.assert_allclose(extra["labor_income"][working], expected[working])
    mass_a = plain.distribution(PARAMS, conditions).mass
    mass_b = fixed.distribution(FREE, conditions).mass
    for name in mass_a:
        np.testing.assert_allclose(np.asarray(mass_a[name]), np.asarray(mass_b[name]), atol=1e-12)
    p_a = lcm.choice_probabilities(plain, PARAMS, None, "working", 0)
    p_b = lcm.choice_probabilities(fixed, FREE, None, "working", 0)
    np.testing.assert_allclose(np.asarray(p_a), np.asarray(p_b), atol=1e-12)


def test_fixed_params_are_part_of_a_saved_solution(tmp_path):
    model = build(fixed_params=FIXED)
    solution = model.solve(FREE)
    path = tmp_path / "solution.lcm"
    solution.save(path)
    loaded = lcm.load_solution(path, model)
    np.testing.assert_array_equal(
        np.asarray(loaded.value("working", 0)), np.asarray(solution.value("working", 0))
    )
    other = build(fixed_params={**FIXED, "interest_rate": 0.05})
    with pytest.raises(lcm.SavedFileError, match="fixed_params"):
        lcm.load_solution(path, other)


def test_with_batch_size_keeps_fixed_params():
    model = build(fixed_params=FIXED).with_batch_size("wealth", 3)
    assert_matches(model.solve(FREE), oracle(PARAMS))


@pytest.mark.slow
def test_fixed_params_with_dcegm():
    savings = lcm.IrregSpacedGrid(points=[12.0 * (i / 39) ** 2 for i in range(40)])
    solver = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
    plain = lcm.Model(regimes=regimes(), n_periods=N_PERIODS, regime_ids=RegimeId, solver=solver)
    fixed = lcm.Model(
        regimes=regimes(),
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
        solver=solver,
        fixed_params=FIXED,
    )
    assert isinstance(fixed.solvers["working"], lcm.DCEGM)
    a, b = plain.solve(PARAMS), fixed.solve(FREE)
    for name in ("working", "retired"):
        np.testing.assert_allclose(
            np.asarray(a.values[name]), np.asarray(b.values[name]), rtol=0, atol=1e-12
        )
    conditions = initial_conditions()
    sim_a = plain.simulate(PARAMS, conditions, a, key=jax.random.key(0)).to_dataframe()
    sim_b = fixed.simulate(FREE, conditions, b, key=jax.random.key(0)).to_dataframe()
    # Constants and traced parameters may round differently in the last bits.
    pd.testing.assert_frame_equal(sim_a, sim_b, check_exact=False, rtol=1e-10, atol=1e-10)

    def objective(beta):
        return jnp.sum(fixed.solve({**FREE, "discount_factor": beta}).value("working", 0))

    numeric = finite_difference(lambda x: float(objective(x)), 0.95)
    np.testing.assert_allclose(float(jax.grad(objective)(0.95)), numeric, rtol=1e-4)


# ------------------------------------------------------------------------ per-target
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "markov"])
def test_per_target_transitions_match_the_oracle(stochastic):
    model = build(per_target=True, stochastic=stochastic)
    params = {**PARAMS, "severance": SEVERANCE, "forced": FORCED}
    if not stochastic:
        params.pop("forced")
    template = model.params_template()
    assert set(template["working"]["next_wealth"]) == {"interest_rate", "severance"}
    expected = oracle(PARAMS, severance=SEVERANCE, stochastic=stochastic)
    assert_matches(model.solve(params), expected)
    # Without severance the per-target model is the plain one.
    assert_matches(model.solve({**params, "severance": 0.0}), oracle(PARAMS, stochastic=stochastic))


@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "markov"])
def test_per_target_transitions_in_simulate(stochastic):
    model = build(per_target=True, stochastic=stochastic)
    params = {**PARAMS, "severance": SEVERANCE}
    if stochastic:
        params["forced"] = 0.5
    # Without severance a few poor retired subjects reach a wealth below the consumption
    # grid's first point, where nothing is feasible: their rows are flagged (value -inf,
    # consumption NaN) in both panels alike.
    flagged = {"key": jax.random.key(3), "validate": "warn"}
    df = model.simulate(params, initial_conditions(40), key=jax.random.key(3)).to_dataframe()
    df = df.sort_values(["subject_id", "period"])
    # Without severance, the panel is the plain model's (same draws), values included.
    plain_params = {k: v for k, v in params.items() if k != "severance"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)
        plain = build(stochastic=stochastic).simulate(
            plain_params, initial_conditions(40), **flagged
        )
        no_severance = model.simulate(
            {**params, "severance": 0.0}, initial_conditions(40), **flagged
        )
    pd.testing.assert_frame_equal(
        no_severance.to_dataframe(), plain.to_dataframe(), check_exact=False, rtol=1e-12
    )
    moves = 0
    for _, subject in df.groupby("subject_id"):
        rows = subject.to_dict("records")
        for now, after in itertools.pairwise(rows):
            if now["regime"] != "working":
                continue
            income = PARAMS["wages"][now["period"]] if now["labor"] == "work" else 0.0
            base = 1.04 * (now["wealth"] - now["consumption"]) + income
            expected = base + (SEVERANCE if after["regime"] == "retired" else 0.0)
            np.testing.assert_allclose(after["wealth"], expected, rtol=0, atol=1e-10)
            moves += after["regime"] == "retired"
    assert moves > 0
    mass = model.distribution(params, initial_conditions(40)).mass
    total = sum(np.asarray(mass[name]).sum(axis=tuple(range(1, mass[name].ndim))) for name in mass)
    np.testing.assert_allclose(total, 1.0, atol=1e-10)


@pytest.mark.slow
def test_per_target_transitions_jit_grad_vmap():
    model = build(per_target=True, stochastic=True)
    params = {**PARAMS, "severance": SEVERANCE, "forced": FORCED}

    def objective(severance):
        return jnp.sum(model.solve({**params, "severance": severance}).value("working", 0))

    solve = jax.jit(objective)
    for severance in (1.0, 1.5):
        solve(severance)
    assert solve._cache_size() == 1
    numeric = finite_difference(lambda x: float(objective(x)), SEVERANCE)
    np.testing.assert_allclose(float(jax.grad(objective)(SEVERANCE)), numeric, rtol=1e-5)
    batched = jax.vmap(objective)(jnp.array([0.5, SEVERANCE]))
    for severance, value in zip([0.5, SEVERANCE], batched, strict=True):
        expected = oracle(PARAMS, severance=severance, stochastic=True)["working"][0].sum()
        np.testing.assert_allclose(float(value), expected, rtol=0, atol=1e-8)


def test_a_target_left_out_cannot_be_reached():
    wealth_law = {"retired": next_wealth_into_retirement}  # working -> working missing
    working = regimes()["working"].replace(state_transitions={"wealth": wealth_law})
    model = lcm.Model(
        regimes={"working": working, "retired": regimes()["retired"]},
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
    )
    assert model.plan.regimes["working"].targets == ("retired",)
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="'next_regime'"):
        model.solve({**PARAMS, "severance": SEVERANCE})


def test_per_target_transitions_are_rejected_by_dcegm():
    savings = lcm.IrregSpacedGrid(points=[12.0 * (i / 39) ** 2 for i in range(40)])
    solver = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
    with pytest.raises(lcm.ModelInitializationError, match="depends on the regime moved to"):
        lcm.Model(
            regimes=regimes(per_target=True, working_solver=solver),
            n_periods=N_PERIODS,
            regime_ids=RegimeId,
        )


def test_per_target_transitions_are_recorded_in_a_saved_solution(tmp_path):
    model = build(per_target=True)
    path = tmp_path / "solution.lcm"
    model.solve({**PARAMS, "severance": SEVERANCE}).save(path)
    with pytest.raises(lcm.SavedFileError, match="state transitions"):
        lcm.load_solution(path, build())


# ------------------------------------------------------------------------ shared entries
def shared_model(**kwargs):
    """The plain model with `savings` and the law of motion of wealth written once at
    the model level; each regime defines its own `income`."""
    wealth, consumption = grids()
    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "income": labor_income},
        transition=next_regime,
        constraints={"borrowing": borrowing},
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption), "income": lambda: 0.0},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
        functions={
            "savings": lambda wealth, consumption: wealth - consumption,
            "unused": lambda wealth, never_given: wealth * never_given,
        },
        state_transitions={
            "wealth": lambda savings, income, interest_rate: (1 + interest_rate) * savings + income
        },
        **kwargs,
    )


def test_shared_functions_and_transitions_match_the_oracle():
    model = shared_model()
    assert set(model.regimes["retired"].functions) == {"utility", "income", "savings"}
    assert "wealth" in model.regimes["working"].state_transitions
    template = model.params_template()
    assert "unused" not in template["working"]  # a shared function no regime uses
    assert template["working"]["income"] == {"wages": template["working"]["income"]["wages"]}
    solution = model.solve(PARAMS)
    assert_matches(solution, oracle(PARAMS))
    df = model.simulate(PARAMS, initial_conditions(), solution).to_dataframe()
    plain = build().simulate(PARAMS, initial_conditions()).to_dataframe()
    np.testing.assert_allclose(df["value"], plain["value"], atol=1e-10)


def test_shared_entries_jit_grad_vmap_and_fixed_params():
    model = shared_model(fixed_params={"interest_rate": 0.04})
    free = {k: v for k, v in PARAMS.items() if k != "interest_rate"}

    def objective(disutility):
        return jnp.sum(model.solve({**free, "disutility_of_work": disutility}).value("working", 0))

    solve = jax.jit(objective)
    solve(0.3)
    solve(0.4)
    assert solve._cache_size() == 1
    numeric = finite_difference(lambda x: float(objective(x)), 0.3)
    np.testing.assert_allclose(float(jax.grad(objective)(0.3)), numeric, rtol=1e-5)
    batched = jax.vmap(objective)(jnp.array([0.2, 0.3]))
    for disutility, value in zip([0.2, 0.3], batched, strict=True):
        expected = oracle({**PARAMS, "disutility_of_work": disutility})["working"][0].sum()
        np.testing.assert_allclose(float(value), expected, rtol=0, atol=1e-8)


def test_a_shared_per_target_transition():
    """A model-level law of motion may itself be per target."""
    base = regimes()
    working = lcm.Regime(
        states=base["working"].states,
        actions=base["working"].actions,
        functions=base["working"].functions,
        transition=next_regime,
        constraints={"borrowing": borrowing},
    )
    retired = lcm.Regime(
        states=base["retired"].states,
        actions=base["retired"].actions,
        functions=base["retired"].functions,
        transition=None,
    )
    model = lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
        state_transitions={
            "wealth": {"working": next_wealth, "retired": next_wealth_into_retirement}
        },
    )
    assert model.regimes["retired"].state_transitions == {}  # terminal: nothing inherited
    model.solve({**PARAMS, "severance": SEVERANCE})


def claim_model(claim_law):
    """Working and retired with a discrete state `claimed`, set when the agent retires."""
    wealth, consumption = grids()
    states = {"wealth": wealth, "claimed": lcm.DiscreteGrid(["no", "yes"])}
    working = lcm.Regime(
        states=states,
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth, "claimed": claim_law},
        transition=next_regime,
        constraints={"borrowing": borrowing},
    )
    retired = lcm.Regime(
        states=states,
        actions={"consumption": consumption},
        functions={
            "utility": lambda consumption, claimed, bonus: jnp.log(consumption) + bonus * claimed
        },
        state_transitions={"wealth": next_wealth_retired, "claimed": lambda claimed: claimed},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired}, n_periods=N_PERIODS, regime_ids=RegimeId
    )


def test_a_per_target_discrete_state_equals_the_law_written_on_the_choice():
    per_target = claim_model({"working": lambda claimed: claimed, "retired": lambda: 1})
    on_choice = claim_model(lambda claimed, labor: jnp.where(labor == Labor.retire, 1, claimed))
    params = {**PARAMS, "bonus": 0.2}
    a, b = per_target.solve(params), on_choice.solve(params)
    for name in ("working", "retired"):
        np.testing.assert_allclose(
            np.asarray(a.values[name]), np.asarray(b.values[name]), rtol=0, atol=1e-12
        )
    conditions = {**initial_conditions(), "claimed": np.zeros(6, dtype=int)}
    sim_a = per_target.simulate(params, conditions, a, key=jax.random.key(2)).to_dataframe()
    sim_b = on_choice.simulate(params, conditions, b, key=jax.random.key(2)).to_dataframe()
    pd.testing.assert_frame_equal(sim_a, sim_b)
    assert (sim_a.loc[sim_a["regime"] == "retired", "claimed"] == "yes").all()


def test_a_per_target_code_out_of_range_is_caught_where_the_target_is_reached():
    bad = claim_model({"working": lambda claimed: claimed, "retired": lambda: 5})
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="'next_claimed'"):
        bad.solve({**PARAMS, "bonus": 0.2})
    # Never reached: a model whose working agents never retire is not flagged.
    never = claim_model({"working": lambda claimed: claimed, "retired": lambda: 5})
    never = lcm.Model(
        regimes={
            "working": never.regimes["working"].replace(transition=lambda: RegimeId.working),
            "retired": never.regimes["retired"],
        },
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
    )
    never.solve({**PARAMS, "bonus": 0.2})


def test_simulate_normalises_and_checks_its_parameters_once(monkeypatch):
    """`Model.simulate` normalises (`coerce_params`, `arrays_from_series`) and checks
    (`check_params`) its parameters once, at the façade; every layer below takes that
    normal form. `to_dataframe(extra=...)`, a call of its own, normalises through the
    model's façade (`checked_params`), not by importing the normalisation (issue 64)."""
    import sys

    from lcm_eqx import _pandas
    from lcm_eqx._model import _params

    model = build()
    conditions = initial_conditions()
    counts = dict.fromkeys(("coerce_params", "arrays_from_series", "check_params"), 0)
    originals = {
        "coerce_params": _pandas.coerce_params,
        "arrays_from_series": _params.arrays_from_series,
        "check_params": _params.check_params,
    }

    def counted(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)

        return call

    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("lcm_eqx"):
            for name, original in originals.items():
                if getattr(module, name, None) is original:
                    monkeypatch.setattr(module, name, counted(name))
    result = model.simulate(PARAMS, conditions, key=jax.random.key(1))
    assert counts == dict.fromkeys(counts, 1)
    frame = result.to_dataframe(extra=["labor_income"], model=model, params=PARAMS)
    assert counts == dict.fromkeys(counts, 2)
    assert "labor_income" in frame
