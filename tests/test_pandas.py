"""pandas interop: params as a Series, extra data-frame columns, labelled columns."""

from enum import IntEnum

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import lcm_eqx as lcm
from lcm_eqx._pandas import params_from_series, params_to_series
from tests.models import retirement


def _series(entries: dict, *, n_levels: int = 3) -> pd.Series:
    names = ["regime", "function", "name"][-n_levels:]
    index = pd.MultiIndex.from_tuples(list(entries), names=names)
    cells = np.empty(len(entries), dtype=object)
    cells[:] = list(entries.values())
    return pd.Series(cells, index=index)


@pytest.fixture(scope="module")
def model():
    return retirement.build(n_periods=4, n_wealth=12, n_consumption=30)


@pytest.fixture(scope="module")
def simulated(model):
    params = dict(retirement.PARAMS)
    result = model.simulate(
        params,
        initial_conditions={
            "regime": jnp.array([0, 0, 0, 1, 1]),
            "wealth": jnp.linspace(5.0, 300.0, 5),
        },
        key=jax.random.key(0),
    )
    return params, result


# --------------------------------------------------------------- params as a Series
def test_flat_index_is_the_top_level():
    series = pd.Series({"discount_factor": 0.9, "wage": 20.0})
    assert params_from_series(series) == {"discount_factor": 0.9, "wage": 20.0}


def test_two_levels_are_regime_and_name():
    series = _series({("", "wage"): 20.0, ("working", "disutility_of_work"): 1.0}, n_levels=2)
    assert params_from_series(series) == {"wage": 20.0, "working": {"disutility_of_work": 1.0}}


def test_three_levels_with_empty_and_nan_levels():
    series = _series(
        {
            ("", "", "discount_factor"): 0.9,
            (np.nan, np.nan, "wage"): 20.0,
            ("working", np.nan, "interest_rate"): 0.01,
            ("working", "utility", "disutility_of_work"): 1.0,
        }
    )
    assert params_from_series(series) == {
        "discount_factor": 0.9,
        "wage": 20.0,
        "working": {"interest_rate": 0.01, "utility": {"disutility_of_work": 1.0}},
    }


def test_numbers_come_back_as_python_numbers_and_arrays_as_arrays():
    series = _series(
        {("", "", "wage"): np.float64(20.0), ("", "", "survival"): np.array([0.9, 0.8])}
    )
    params = params_from_series(series)
    assert type(params["wage"]) is float
    np.testing.assert_array_equal(params["survival"], [0.9, 0.8])


def test_round_trip_through_a_series():
    params = {
        "discount_factor": 0.9,
        "working": {"wage": 20.0, "utility": {"disutility_of_work": 1.5}},
        "survival": jnp.array([0.9, 0.8, 0.7]),
    }
    series = params_to_series(params)
    assert series.index.names == ["regime", "function", "name"]
    assert series.dtype == object  # an array lives in an object cell
    back = params_from_series(series)
    assert back["discount_factor"] == 0.9
    assert back["working"] == {"wage": 20.0, "utility": {"disutility_of_work": 1.5}}
    np.testing.assert_allclose(back["survival"], [0.9, 0.8, 0.7])


def test_scalar_params_make_a_float_series():
    series = params_to_series(retirement.PARAMS)
    assert series.dtype == float
    assert params_from_series(series) == retirement.PARAMS


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ({("", "", "wage"): 1.0, (np.nan, "", "wage"): 2.0}, "more than once"),
        ({("", "utility", "x"): 1.0}, "no regime"),
        ({("working", "", ""): 1.0}, "no parameter name"),
        ({("working", "", "utility"): 1.0, ("working", "utility", "x"): 2.0}, "both"),
        ({("", "", "wage"): "twenty"}, "number or an array"),
        ({("", "", "wage"): None}, "number or an array"),
    ],
)
def test_bad_series_raise(entries, match):
    with pytest.raises(lcm.InvalidParamsError, match=match):
        params_from_series(_series(entries))


def test_too_many_levels_and_non_series_raise():
    index = pd.MultiIndex.from_tuples([("a", "b", "c", "d")])
    with pytest.raises(lcm.InvalidParamsError, match="at most 3"):
        params_from_series(pd.Series([1.0], index=index))
    with pytest.raises(lcm.InvalidParamsError, match="Series"):
        params_from_series({"wage": 1.0})


def test_solve_and_simulate_accept_a_series(model):
    params = {
        "discount_factor": 0.98,
        "interest_rate": 0.0,
        "wage": 20.0,
        "working": {"utility": {"disutility_of_work": 1.0}},
    }
    series = params_to_series(params)
    from_dict = model.solve(params)
    from_series = model.solve(series)
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(from_dict.values[regime], from_series.values[regime])
    initial = {"regime": jnp.array([0, 0]), "wealth": jnp.array([10.0, 200.0])}
    a = model.simulate(params, initial, from_dict, key=jax.random.key(1)).to_dataframe()
    b = model.simulate(series, initial, key=jax.random.key(1)).to_dataframe()
    pd.testing.assert_frame_equal(a, b)


def test_a_series_with_an_unknown_parameter_raises_like_a_dict(model):
    series = params_to_series({**retirement.PARAMS, "wages": 1.0})
    with pytest.raises(lcm.InvalidParamsError, match="wages"):
        model.solve(series)


def test_array_parameter_in_an_object_cell():
    class RegimeId(IntEnum):
        alive = 0
        dead = 1

    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 6)},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 10.0, 12)},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 1.0},
        transition=lcm.MarkovTransition(
            lambda period, survival: jnp.array([survival[period], 1 - survival[period]])
        ),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    model = lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=3, regime_ids=RegimeId)
    params = {"discount_factor": 0.95, "survival": np.array([0.9, 0.8, 0.7])}
    series = params_to_series(params)
    np.testing.assert_array_equal(
        model.solve(series).values["alive"], model.solve(params).values["alive"]
    )


# ------------------------------------------------------------ extra data-frame columns
def test_extra_columns_are_the_functions_at_each_row(model, simulated):
    params, result = simulated
    df = result.to_dataframe(
        extra=["labor_income", "utility", "borrowing", "next_regime", "next_wealth"],
        model=model,
        params=params,
    )
    working = df["regime"] == "working"
    assert working.any() and (~working).any()
    expected_income = np.where(df["labor"] == "work", params["wage"], 0.0)
    np.testing.assert_allclose(df.loc[working, "labor_income"], expected_income[working])
    assert df.loc[~working, "labor_income"].isna().all()  # the retired have no labor_income
    work = (df["labor"] == "work").to_numpy()
    expected_utility = np.log(df["consumption"]) - params["disutility_of_work"] * work
    np.testing.assert_allclose(df["utility"], expected_utility, rtol=1e-6)
    assert df["borrowing"].dtype == "boolean"
    assert df["borrowing"].all()  # the chosen actions are feasible
    assert isinstance(df["next_regime"].dtype, pd.CategoricalDtype)
    assert list(df["next_regime"].cat.categories) == ["working", "retired"]
    # next period's wealth is this row's next_wealth, for subjects seen next period
    following = df.groupby("subject_id")["wealth"].shift(-1)
    seen = following.notna()
    np.testing.assert_allclose(df.loc[seen, "next_wealth"], following[seen], rtol=1e-5)
    # next_regime agrees with the regime of the following row
    next_seen = df.groupby("subject_id")["regime"].shift(-1)
    assert (df.loc[seen, "next_regime"].astype(str) == next_seen[seen].astype(str)).all()


def test_extra_accepts_a_single_name_and_a_params_series(model, simulated):
    params, result = simulated
    a = result.to_dataframe(extra="labor_income", model=model, params=params)
    b = result.to_dataframe(extra=["labor_income"], model=model, params=params_to_series(params))
    pd.testing.assert_frame_equal(a, b)
    assert list(a.columns)[-1] == "labor_income"


def test_extra_column_errors(model, simulated):
    params, result = simulated
    with pytest.raises(lcm.LcmError, match="pass the model and the params"):
        result.to_dataframe(extra=["labor_income"])
    with pytest.raises(lcm.LcmError, match="no regime has a function 'labour_income'"):
        result.to_dataframe(extra=["labour_income"], model=model, params=params)
    with pytest.raises(lcm.LcmError, match="already a column"):
        result.to_dataframe(extra=["wealth"], model=model, params=params)
    other = retirement.build(n_periods=4, n_wealth=13, n_consumption=30)
    with pytest.raises(lcm.LcmError, match="pass the model that was simulated"):
        result.to_dataframe(extra=["labor_income"], model=other, params=params)
    with pytest.raises(lcm.InvalidParamsError, match="wage"):
        result.to_dataframe(
            extra=["labor_income"],
            model=model,
            params={k: v for k, v in params.items() if k != "wage"},
        )


def test_extra_columns_on_a_process_state_with_ages():
    income = lcm.RouwenhorstGrid(n_points=3)  # rho, sigma are parameters
    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 6), "income": income},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 10.0, 12)},
        functions={
            "utility": lambda consumption: jnp.log(consumption),
            "earnings": lambda income, age: jnp.exp(income) * (age < 62),
        },
        state_transitions={
            "wealth": lambda wealth, consumption, earnings: wealth - consumption + earnings
        },
        transition=lambda: 0,
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model(regimes={"alive": alive}, n_periods=3, ages=lcm.AgeGrid(start=60, step=1))
    params = {"discount_factor": 0.95, "rho": 0.9, "sigma": 0.2}
    result = model.simulate(
        params,
        {
            "regime": jnp.zeros(4, dtype=int),
            "wealth": jnp.full(4, 5.0),
            "income:index": jnp.array([0, 1, 2, 1]),
        },
        key=jax.random.key(0),
    )
    df = result.to_dataframe(extra=["earnings"], model=model, params=params)
    np.testing.assert_array_equal(df["age"], 60 + df["period"])
    points, _ = lcm.rouwenhorst(3, 0.9, 0.2)  # the income column holds the process values
    first = df.loc[df["period"] == 0, "income"]
    np.testing.assert_allclose(first, np.asarray(points)[[0, 1, 2, 1]], rtol=1e-6)
    expected = np.exp(df["income"]) * (df["age"] < 62)
    np.testing.assert_allclose(df["earnings"], expected, rtol=1e-6)
    with pytest.raises(lcm.LcmError, match="no regime has a function 'next_income'"):
        result.to_dataframe(extra=["next_income"], model=model, params=params)


# ------------------------------------------------------------------ labelled columns
def test_discrete_columns_are_labelled_categoricals(model, simulated):
    _, result = simulated
    df = result.to_dataframe()
    assert list(df.columns[:4]) == ["subject_id", "period", "regime", "value"]
    assert isinstance(df["regime"].dtype, pd.CategoricalDtype)
    assert list(df["regime"].cat.categories) == ["working", "retired"]
    assert isinstance(df["labor"].dtype, pd.CategoricalDtype)
    assert list(df["labor"].cat.categories) == ["work", "retire"]
    assert df.loc[df["regime"] == "retired", "labor"].isna().all()
    assert df.loc[df["regime"] == "working", "labor"].notna().all()


def test_age_column_follows_the_age_grid():
    model = retirement.build(n_periods=3, n_wealth=8, n_consumption=16)
    model = lcm.Model(
        regimes=model.regimes,
        n_periods=3,
        regime_ids=retirement.RegimeId,
        ages=lcm.AgeGrid(start=40, step=10),
    )
    result = model.simulate(
        retirement.PARAMS,
        {"regime": jnp.zeros(2, dtype=int), "wealth": jnp.array([5.0, 50.0])},
        key=jax.random.key(0),
    )
    df = result.to_dataframe()
    assert list(df.columns[:3]) == ["subject_id", "period", "age"]
    np.testing.assert_array_equal(df["age"], 40 + 10 * df["period"])


def test_discrete_state_columns_are_labelled_and_accept_labels():
    health = lcm.DiscreteGrid(["bad", "good"])
    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 6), "health": health},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 10.0, 12)},
        functions={"utility": lambda consumption, health: jnp.log(consumption) + 0.1 * health},
        state_transitions={
            "wealth": lambda wealth, consumption: wealth - consumption + 1.0,
            "health": lambda health: health,
        },
        transition=lambda: 0,
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model(regimes={"alive": alive}, n_periods=2)
    initial = pd.DataFrame(
        {"regime": ["alive"] * 3, "wealth": [2.0, 5.0, 9.0], "health": ["good", "bad", "good"]}
    )
    result = model.simulate({"discount_factor": 0.9}, initial, key=jax.random.key(0))
    df = result.to_dataframe()
    assert isinstance(df["health"].dtype, pd.CategoricalDtype)
    assert list(df["health"].cat.categories) == ["bad", "good"]
    assert df.loc[df["period"] == 0, "health"].tolist() == ["good", "bad", "good"]
