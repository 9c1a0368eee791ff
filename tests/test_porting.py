"""Porting a model from pylcm: the three silent traps and the familiar spellings.

1. `active` is resolved by argument name (`period` and/or `age`), like every user function.
2. Reading a parameter array out of bounds (e.g. survival probabilities shorter than the
   horizon, indexed by `period`) is an `InvalidParamsError` under validation, not a
   silently clamped read.
3. Keywords bound with `functools.partial` are not parameters; a default value makes a
   parameter optional.

Values are checked against a numpy backward induction in float64.
"""

from __future__ import annotations

import functools
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

WEALTH = np.linspace(1.0, 9.0, 5)  # 1, 3, 5, 7, 9
CONSUMPTION = np.linspace(0.5, 9.0, 18)
INCOME = 1.5
BETA = 0.9


def interpolate(x, points, values):
    """Linear interpolation on `points`, extrapolating linearly outside (as lcm_eqx)."""
    i = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    weight = (x - points[i]) / (points[i + 1] - points[i])
    return values[i] + weight * (values[i + 1] - values[i])


def oracle(survival, n_periods, k=1.0):
    """V_t(w) = max_{c <= w} k log c + beta * s_t * V_{t+1}(w - c + income); dead: 0."""
    values = np.zeros((n_periods, WEALTH.size))
    following = np.zeros(WEALTH.size)
    for t in reversed(range(n_periods)):
        c = CONSUMPTION[None, :]
        w = WEALTH[:, None]
        q = k * np.log(c) + BETA * survival[min(t, len(survival) - 1)] * interpolate(
            w - c + INCOME, WEALTH, following
        )
        values[t] = np.max(np.where(c <= w, q, -np.inf), axis=1)
        following = values[t]
    return values


def alive_regime(utility=None, survival_argument="survival_prob", **overrides):
    def next_regime(period, survival_prob):
        return jnp.array([survival_prob[period], 1 - survival_prob[period]])

    if survival_argument != "survival_prob":
        next_regime = functools.partial(next_regime, survival_prob=survival_argument)
    kwargs = {
        "states": {"wealth": lcm.IrregSpacedGrid(points=WEALTH.tolist())},
        "actions": {"consumption": lcm.IrregSpacedGrid(points=CONSUMPTION.tolist())},
        "functions": {"utility": utility or (lambda consumption: jnp.log(consumption))},
        "state_transitions": {
            "wealth": lambda wealth, consumption, income: wealth - consumption + income
        },
        "transition": lcm.MarkovTransition(next_regime),
        "constraints": {"budget": lambda consumption, wealth: consumption <= wealth},
    }
    kwargs.update(overrides)
    return lcm.Regime(**kwargs)


DEAD = lcm.Regime(functions={"utility": lambda: 0.0})


def mortality_model(n_periods=4, **regime_overrides):
    return lcm.Model({"alive": alive_regime(**regime_overrides), "dead": DEAD}, n_periods)


def params(survival):
    return {"discount_factor": BETA, "income": INCOME, "survival_prob": jnp.asarray(survival)}


# ---------------------------------------------------------------------------------------
# Trap 1: `active` by name
# ---------------------------------------------------------------------------------------


AGES = lcm.AgeGrid(start=40, step=10)


def _active_model(active, ages=AGES):
    early = lcm.Regime(functions={"utility": lambda: 1.0}, transition=lambda: 0, active=active)
    return lcm.Model({"early": early}, n_periods=3, ages=ages)


def test_active_with_age_reads_ages_not_periods():
    model = _active_model(lambda age: age < 50)  # ages 40, 50, 60
    assert model.plan.regimes["early"].active == frozenset({0})


def test_active_with_period_and_age():
    model = _active_model(lambda age, period: (age >= 50) & (period < 2))
    assert model.plan.regimes["early"].active == frozenset({1})
    assert _active_model(lambda period: period != 1).plan.regimes["early"].active == {0, 2}


def test_active_iterables_keep_working():
    assert _active_model(range(1, 3)).plan.regimes["early"].active == frozenset({1, 2})
    assert _active_model([0, 2]).plan.regimes["early"].active == frozenset({0, 2})


def test_active_with_another_argument_is_a_model_error():
    with pytest.raises(lcm.ModelInitializationError, match=r"'early'.*active.*\['t'\]"):
        _active_model(lambda t: t < 1)
    with pytest.raises(lcm.ModelInitializationError, match=r"'early'.*active.*'y'"):
        _active_model(lambda period, y: period < 1)


def test_active_with_age_needs_ages():
    with pytest.raises(lcm.ModelInitializationError, match=r"'early'.*active.*'age'.*AgeGrid"):
        _active_model(lambda age: age < 50, ages=None)


def test_active_that_returns_no_bool_is_a_model_error():
    with pytest.raises(lcm.ModelInitializationError, match=r"'early'.*active\(period=0\)"):
        _active_model(lambda period: "yes")


# ---------------------------------------------------------------------------------------
# Trap 2: parameter arrays read out of bounds
# ---------------------------------------------------------------------------------------

SURVIVAL = np.array([0.95, 0.9, 0.8, 0.7, 0.6, 0.5])


def test_long_enough_survival_array_matches_the_oracle():
    model = mortality_model(n_periods=6)
    solution = model.solve(params(SURVIVAL))
    expected = oracle(SURVIVAL, 6)
    for t in range(6):
        np.testing.assert_allclose(solution.value("alive", t), expected[t], rtol=1e-12)


def test_survival_array_one_short_is_fine_because_the_last_transition_is_unread():
    """pylcm's idiom: n_periods - 1 entries; the last period's transition has no future."""
    model = mortality_model(n_periods=6)
    solution = model.solve(params(SURVIVAL[:5]))
    expected = oracle(SURVIVAL[:5], 6)
    for t in range(6):
        np.testing.assert_allclose(solution.value("alive", t), expected[t], rtol=1e-12)


def test_too_short_survival_array_is_an_invalid_params_error():
    model = mortality_model(n_periods=6)
    with pytest.raises(lcm.InvalidParamsError) as info:
        model.solve(params(SURVIVAL[:3]))
    message = str(info.value)
    for part in ("'alive'", "'next_regime'", "'survival_prob'", "(3,)", "period 3"):
        assert part in message, message


def test_too_short_array_warns_under_validate_warn_and_is_silent_when_off():
    model = mortality_model(n_periods=6)
    with pytest.warns(UserWarning, match="'survival_prob' of shape"):
        model.solve(params(SURVIVAL[:3]), validate="warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solution = model.solve(params(SURVIVAL[:3]), validate="off")
    assert solution.checks["alive"] == ()  # nothing traced


def test_index_check_is_named_only_for_functions_with_array_parameters():
    solution = mortality_model(n_periods=3).solve(params(SURVIVAL[:3]))
    index_checks = [c for c in solution.checks["alive"] if ":index:" in c]
    assert index_checks == ["next_regime:index:'survival_prob' of shape (3,)"]


def test_out_of_bounds_in_utility_by_state_code():
    """An index that depends on a state, not the period: a 2-entry table for 3 codes."""
    health = lcm.DiscreteGrid(["bad", "fair", "good"])
    regime = lcm.Regime(
        states={"health": health},
        functions={"utility": lambda health, bonus: bonus[health]},
        state_transitions={"health": lambda health: health},
        transition=lambda: 0,
    )
    model = lcm.Model({"only": regime}, n_periods=2)
    with pytest.raises(lcm.InvalidParamsError, match=r"'utility'.*'bonus' of shape \(2,\)"):
        model.solve({"discount_factor": 0.9, "bonus": jnp.array([1.0, 2.0])})
    solution = model.solve({"discount_factor": 0.9, "bonus": jnp.array([1.0, 2.0, 3.0])})
    np.testing.assert_allclose(solution.value("only", 0), [1.9, 3.8, 5.7], rtol=1e-12)


def test_out_of_bounds_in_a_precontracted_transition():
    """`next_health` depends only on `health`: its probabilities are computed per period."""
    health = lcm.DiscreteGrid(["bad", "good"])
    regime = lcm.Regime(
        states={"health": health},
        functions={"utility": lambda health: 1.0 * health},
        state_transitions={"health": lcm.MarkovTransition(lambda health, p: p[health])},
        transition=lambda: 0,
    )
    model = lcm.Model({"only": regime}, n_periods=3)
    with pytest.raises(lcm.InvalidParamsError, match=r"'next_health'.*'p' of shape \(1, 2\)"):
        model.solve({"discount_factor": 0.9, "p": jnp.array([[0.5, 0.5]])})


def test_out_of_bounds_in_a_helper_of_a_precontracted_transition():
    health = lcm.DiscreteGrid(["bad", "good"])
    regime = lcm.Regime(
        states={"health": health},
        functions={"utility": lambda health: 1.0 * health, "row": lambda health, p: p[health]},
        state_transitions={"health": lcm.MarkovTransition(lambda row: row)},
        transition=lambda: 0,
    )
    model = lcm.Model({"only": regime}, n_periods=3)
    with pytest.raises(lcm.InvalidParamsError, match=r"'row'.*'p' of shape \(1, 2\)"):
        model.solve({"discount_factor": 0.9, "p": jnp.array([[0.5, 0.5]])})
    solution = model.solve({"discount_factor": 0.9, "p": jnp.array([[1.0, 0.0], [0.0, 1.0]])})
    np.testing.assert_allclose(solution.value("only", 0), [0.0, 1 + 0.9 + 0.81], rtol=1e-12)


def test_out_of_bounds_at_infeasible_points_only_is_not_an_error():
    """Points that a constraint rules out may return anything, index errors included."""
    table = jnp.array([1.0, 2.0])  # read at consumption codes 0, 1; code 2 is infeasible
    regime = lcm.Regime(
        actions={"choice": lcm.DiscreteGrid(["a", "b", "c"])},
        functions={"utility": lambda choice, table: table[choice]},
        constraints={"allowed": lambda choice: choice < 2},
    )
    solution = lcm.Model({"only": regime}, n_periods=1).solve({"only": {"table": table}})
    assert float(solution.value("only", 0)) == 2.0


def test_deliberate_clamping_is_allowed():
    def next_regime(period, survival_prob):
        alive = survival_prob[jnp.minimum(period, len(survival_prob) - 1)]
        return jnp.array([alive, 1 - alive])

    regime = alive_regime(transition=lcm.MarkovTransition(next_regime))
    model = lcm.Model({"alive": regime, "dead": DEAD}, n_periods=6)
    solution = model.solve(params(SURVIVAL[:3]))
    expected = oracle(SURVIVAL[:3], 6)  # the oracle clamps as well
    for t in range(6):
        np.testing.assert_allclose(solution.value("alive", t), expected[t], rtol=1e-12)


def test_out_of_bounds_under_jit_raises():
    model = mortality_model(n_periods=6)
    # Under jit the check's own message comes back (through a host callback), with the
    # error class name: the same text as eagerly.
    with pytest.raises(Exception, match="InvalidParamsError") as raised:
        jax.block_until_ready(jax.jit(model.solve)(params(SURVIVAL[:3])))
    assert "function 'next_regime', period 3: indexes an array out of bounds" in str(raised.value)
    assert "'survival_prob' of shape (3,)" in str(raised.value)


def test_gradient_through_a_checked_array_parameter():
    model = mortality_model(n_periods=4)

    def total(survival):
        return jnp.sum(model.solve(params(survival)).value("alive", 0))

    gradient = jax.grad(total)(jnp.asarray(SURVIVAL[:4]))
    step = 1e-6
    for i in range(3):
        bumped = SURVIVAL[:4].copy()
        bumped[i] += step
        numeric = (oracle(bumped, 4)[0].sum() - oracle(SURVIVAL[:4], 4)[0].sum()) / step
        np.testing.assert_allclose(gradient[i], numeric, rtol=1e-4)


# ---------------------------------------------------------------------------------------
# Trap 3: bound keywords and defaults
# ---------------------------------------------------------------------------------------


def crra(consumption, k):
    return k * jnp.log(consumption)


def test_partial_keyword_is_not_a_parameter():
    model = mortality_model(utility=functools.partial(crra, k=2.0))
    assert "utility" not in model.params_template()["alive"]
    solution = model.solve(params(SURVIVAL[:4]))
    np.testing.assert_allclose(
        solution.value("alive", 0), oracle(SURVIVAL[:4], 4, k=2.0)[0], rtol=1e-12
    )
    with pytest.raises(lcm.InvalidParamsError, match=r"Unknown parameter params\['k'\]"):
        model.solve({**params(SURVIVAL[:4]), "k": 3.0})


def test_partial_bound_array_is_a_constant():
    # A device array bound by partial is a constant of the solve, with a warning that
    # says so (a sharded or multi-process solve would have to copy it).
    with pytest.warns(lcm.LcmWarning, match="functools.partial argument 'survival_prob'"):
        model = mortality_model(survival_argument=jnp.asarray(SURVIVAL[:4]))
    assert "next_regime" not in model.params_template()["alive"]
    solution = model.solve({"discount_factor": BETA, "income": INCOME})
    np.testing.assert_allclose(solution.value("alive", 0), oracle(SURVIVAL, 4)[0], rtol=1e-12)


def test_default_value_makes_a_parameter_optional():
    model = mortality_model(utility=lambda consumption, k=2.0: k * jnp.log(consumption))
    assert model.params_template()["alive"]["utility"] == {"k": 2.0}
    default = model.solve(params(SURVIVAL[:4]))
    np.testing.assert_allclose(
        default.value("alive", 0), oracle(SURVIVAL[:4], 4, k=2.0)[0], rtol=1e-12
    )
    for given in ({"k": 3.0}, {"alive": {"k": 3.0}}, {"alive": {"utility": {"k": 3.0}}}):
        p = params(SURVIVAL[:4])
        p.update({key: value for key, value in given.items() if key != "alive"})
        if "alive" in given:
            p["alive"] = given["alive"]
        overridden = model.solve(p)
        np.testing.assert_allclose(
            overridden.value("alive", 0), oracle(SURVIVAL[:4], 4, k=3.0)[0], rtol=1e-12
        )


def test_template_with_defaults_solves_as_is():
    model = mortality_model(utility=lambda consumption, k=2.0: k * jnp.log(consumption))
    template = model.params_template()
    template["alive"]["discount_factor"] = BETA
    template["alive"]["next_wealth"]["income"] = INCOME
    template["alive"]["next_regime"]["survival_prob"] = jnp.asarray(SURVIVAL[:4])
    solution = model.solve(template)
    np.testing.assert_allclose(
        solution.value("alive", 0), oracle(SURVIVAL[:4], 4, k=2.0)[0], rtol=1e-12
    )


def test_non_numeric_default_is_a_constant_left_out_of_the_template():
    def utility(consumption, how="log"):
        return jnp.log(consumption) if how == "log" else consumption

    model = mortality_model(utility=utility)
    assert "utility" not in model.params_template()["alive"]
    solution = model.solve(params(SURVIVAL[:4]))
    np.testing.assert_allclose(solution.value("alive", 0), oracle(SURVIVAL[:4], 4)[0])


# ---------------------------------------------------------------------------------------
# Familiar spellings
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "expected_step", "n_periods"),
    [(1, 1, 21), ("Y", 1, 21), ("2Y", 2, 11), ("10y", 10, 3), ("Q", 0.25, 81), ("M", 1 / 12, 241)],
)
def test_age_grid_stop_and_step_strings(step, expected_step, n_periods):
    ages = lcm.AgeGrid(start=40, stop=60, step=step)
    assert ages.step == pytest.approx(expected_step)
    assert ages.n_periods == n_periods
    assert ages.age(n_periods - 1) == pytest.approx(60)


def test_model_takes_its_horizon_from_ages():
    regime = lcm.Regime(functions={"utility": lambda age: age * 1.0}, transition=lambda: 0)
    model = lcm.Model({"only": regime}, ages=lcm.AgeGrid(40, 60, "10Y"))
    assert model.n_periods == 3
    values = [float(model.solve({"discount_factor": 0.5}).value("only", t)) for t in range(3)]
    np.testing.assert_allclose(values, [40 + 0.5 * (50 + 0.5 * 60), 50 + 0.5 * 60, 60])
    lcm.Model({"only": regime}, 3, ages=lcm.AgeGrid(40, 60, "10Y"))  # agreeing: fine
    with pytest.raises(lcm.ModelInitializationError, match=r"n_periods=4.*3 periods"):
        lcm.Model({"only": regime}, 4, ages=lcm.AgeGrid(40, 60, "10Y"))
    with pytest.raises(lcm.ModelInitializationError, match="n_periods"):
        lcm.Model({"only": regime}, ages=lcm.AgeGrid(40, step=10))


def test_regime_replace():
    regime = alive_regime()
    later = regime.replace(active=range(1, 3))
    assert later.active == (1, 2) and regime.active is None
    assert later.functions == regime.functions
    with pytest.raises(lcm.ModelInitializationError, match=r"Regime.replace.*\['activ'\]"):
        regime.replace(activ=range(2))
    with pytest.raises(lcm.ModelInitializationError, match="utility"):
        regime.replace(functions={})


# ---------------------------------------------------------------------------------------
# Initial conditions: process states as values, entry ages; codes-only data frames
# ---------------------------------------------------------------------------------------


def income_model():
    alive = lcm.Regime(
        states={
            "wealth": lcm.IrregSpacedGrid(points=WEALTH.tolist()),
            "income": lcm.RouwenhorstGrid(3, mean=None),
        },
        actions={"consumption": lcm.IrregSpacedGrid(points=CONSUMPTION.tolist())},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption, income: wealth - consumption + jnp.exp(income)
        },
        transition=lambda age: jnp.where(age < 70, 0, 1),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0}, active=lambda age: age > 40)
    return lcm.Model({"alive": alive, "dead": dead}, ages=lcm.AgeGrid(40, 80, "10Y"))


INCOME_PARAMS = {"discount_factor": BETA, "rho": 0.9, "sigma": 0.2, "mean": 0.1}


def income_nodes():
    return np.asarray(lcm.rouwenhorst(3, 0.9, 0.2, 0.1)[0])


def test_process_states_are_given_as_node_values():
    model = income_model()
    nodes = income_nodes()
    conditions = {"regime": ["alive"] * 3, "wealth": [3.0, 5.0, 7.0], "income": nodes[[2, 0, 1]]}
    by_value = model.simulate(INCOME_PARAMS, conditions).to_dataframe()
    first = by_value[by_value["period"] == 0]
    np.testing.assert_allclose(first["income"], nodes[[2, 0, 1]], rtol=1e-12)
    del conditions["income"]
    by_index = model.simulate(INCOME_PARAMS, {**conditions, "income:index": [2, 0, 1]})
    pd.testing.assert_frame_equal(by_value, by_index.to_dataframe())


def test_round_trip_from_a_data_frame_to_initial_conditions():
    model = income_model()
    first = model.simulate(
        INCOME_PARAMS, {"regime": ["alive"] * 2, "wealth": [3.0, 9.0], "income:index": [0, 2]}
    ).to_dataframe()
    restart = first[first["period"] == 1][["regime", "wealth", "income", "age"]]
    again = model.simulate(INCOME_PARAMS, restart.astype({"regime": str}))
    second = again.to_dataframe()
    np.testing.assert_allclose(
        second.groupby("subject_id")["income"].first(), restart["income"], rtol=1e-12
    )


def test_a_value_that_is_not_a_node_names_the_nearest_nodes():
    nodes = income_nodes()
    with pytest.raises(lcm.InvalidInitialConditionsError) as info:
        income_model().simulate(
            INCOME_PARAMS, {"regime": ["alive"], "wealth": [3.0], "income": [0]}
        )
    message = str(info.value)
    assert "'income'" in message and "'alive'" in message and "'income:index'" in message
    assert f"{nodes[0]:.6g} and {nodes[1]:.6g}" in message


def test_entry_ages_give_no_rows_before_entry():
    model = income_model()
    solution = model.solve(INCOME_PARAMS)
    nodes = income_nodes()
    conditions = {
        "regime": ["alive"] * 3,
        "wealth": [5.0, 5.0, 7.0],  # on the wealth grid
        "income": nodes[[1, 1, 2]],
        "age": [40, 60, 70],
    }
    df = model.simulate(INCOME_PARAMS, conditions, solution).to_dataframe()
    first = df.groupby("subject_id").first()
    np.testing.assert_array_equal(first["period"], [0, 2, 3])
    np.testing.assert_array_equal(first["age"], [40.0, 60.0, 70.0])
    np.testing.assert_allclose(first["wealth"], [5.0, 5.0, 7.0])
    # At an on-grid state, the simulated value is the solution's value there.
    for subject, period, w, k in ((0, 0, 2, 1), (1, 2, 2, 1), (2, 3, 3, 2)):
        np.testing.assert_allclose(
            first.loc[subject, "value"], solution.value("alive", period)[w, k], rtol=1e-12
        )
    assert df.groupby("subject_id")["period"].max().tolist() == [4, 4, 4]


def test_entry_age_errors():
    model = income_model()
    base = {"regime": ["alive"], "wealth": [3.0], "income:index": [0]}
    with pytest.raises(lcm.InvalidInitialConditionsError, match=r"'age'.*45.*40 to 80"):
        model.simulate(INCOME_PARAMS, {**base, "age": [45]})
    with pytest.raises(lcm.InvalidInitialConditionsError, match=r"'age'.*90"):
        model.simulate(INCOME_PARAMS, {**base, "age": [90]})
    with pytest.raises(lcm.InvalidInitialConditionsError, match=r"'dead'.*period 0 \(age 40\)"):
        model.simulate(INCOME_PARAMS, {**base, "regime": ["dead"], "age": [40]})


def test_to_dataframe_codes_only():
    health = lcm.DiscreteGrid(["bad", "good"])
    working = lcm.Regime(
        states={"health": health},
        actions={"work": lcm.DiscreteGrid(["no", "yes"])},
        functions={"utility": lambda health, work: 1.0 * health - 0.5 * work},
        state_transitions={"health": lambda health: health},
        transition=lambda work: jnp.where(work == 1, 0, 1),
    )
    retired = lcm.Regime(functions={"utility": lambda: 0.0})
    model = lcm.Model({"working": working, "retired": retired}, n_periods=3)
    result = model.simulate(
        {"discount_factor": 0.9}, {"regime": ["working", "working"], "health": ["bad", "good"]}
    )
    labelled = result.to_dataframe()
    codes = result.to_dataframe(use_labels=False)
    assert isinstance(labelled["health"].dtype, pd.CategoricalDtype)  # the default is unchanged
    assert list(codes.columns) == list(labelled.columns)
    pd.testing.assert_series_equal(codes["regime"], labelled["regime"])  # names stay
    for name in ("health", "work"):
        assert str(codes[name].dtype) == "Int64"
        expected = labelled[name].cat.codes.astype("Int64").mask(labelled[name].isna())
        pd.testing.assert_series_equal(codes[name], expected, check_names=False)
    assert codes["health"].isna().any()  # retired rows lack health: <NA>, not a code


def test_defaults_round_trip_through_a_params_series():
    model = mortality_model(utility=lambda consumption, k=2.0: k * jnp.log(consumption))
    series = lcm.params_to_series({**params(SURVIVAL[:4]), "alive": {"utility": {"k": 3.0}}})
    assert series[("alive", "utility", "k")] == 3.0
    solution = model.solve(series)
    np.testing.assert_allclose(
        solution.value("alive", 0), oracle(SURVIVAL[:4], 4, k=3.0)[0], rtol=1e-12
    )


def test_out_of_bounds_under_vmap_raises_and_in_bounds_matches():
    model = mortality_model(n_periods=4)
    survival = jnp.asarray(SURVIVAL[:4])

    def first_values(batch):
        return jax.vmap(lambda s: model.solve(params(s)).value("alive", 0))(batch)

    values = first_values(jnp.stack([survival, 0.9 * survival]))
    np.testing.assert_allclose(values[1], oracle(0.9 * SURVIVAL[:4], 4)[0], rtol=1e-12)
    with pytest.raises(Exception, match="indexes an array out of bounds") as raised:
        jax.block_until_ready(first_values(jnp.stack([survival[:2], survival[:2]])))
    assert "'survival_prob' of shape (2,)" in str(raised.value)
    assert "batch member 0 of a jax.vmap" in str(raised.value)
