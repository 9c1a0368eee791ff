"""Parameters given as labelled pandas Series (indexed by age, period and categories).

The reference is each table written by hand as the array that the functions index by
period and code; a Series in any row order, as a parameter or a fixed parameter, must
give that array and the same solution, and a mismatched index a named error.
"""

import itertools
from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

AGES = (40.0, 50.0, 60.0)
HEALTH = ("bad", "good")


class Education(IntEnum):
    low = 0
    high = 1


# survival[period, education, health], written by hand in code order
SURVIVAL = np.array(
    [[[0.90, 0.95], [0.93, 0.97]], [[0.80, 0.90], [0.85, 0.92]], [[0.5, 0.6], [0.55, 0.7]]]
)
BONUS = np.array([0.3, 0.1])  # bonus[education]


def utility(consumption, health, education, bonus):
    return jnp.log(consumption) + 0.2 * health + bonus[education]


def next_regime(period, education, health, survival):
    alive = survival[period, education, health]
    return jnp.stack([alive, 1.0 - alive])


def model(fixed_params=None):
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(1.0, 6.0, 5),
            "health": lcm.DiscreteGrid(list(HEALTH)),
            "education": lcm.DiscreteGrid(Education),
        },
        actions={"consumption": lcm.LinSpacedGrid(0.5, 6.0, 8)},
        functions={"utility": utility},
        state_transitions={
            "wealth": lambda wealth, consumption: wealth - consumption + 1.0,
            "health": lambda health: health,
            "education": lambda education: education,
        },
        transition=lcm.MarkovTransition(next_regime),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        {"alive": alive, "dead": dead},
        ages=lcm.AgeGrid(start=40, step=10, stop=60),
        fixed_params=fixed_params,
    )


def survival_series(order=None) -> pd.Series:
    rows = [
        ((age, education.name, health), SURVIVAL[t, education, h])
        for (t, age), education, (h, health) in itertools.product(
            enumerate(AGES), Education, enumerate(HEALTH)
        )
    ]
    if order is not None:
        rows = [rows[i] for i in order]
    index = pd.MultiIndex.from_tuples([r[0] for r in rows], names=["age", "education", "health"])
    return pd.Series([r[1] for r in rows], index=index)


BONUS_SERIES = pd.Series([0.1, 0.3], index=pd.Index(["high", "low"], name="education"))


def test_a_series_becomes_the_array_indexed_by_period_and_code():
    shuffled = np.random.default_rng(0).permutation(12)
    plan = model().plan
    from lcm_eqx._model._params import arrays_from_series  # the conversion on its own

    converted = arrays_from_series(
        plan,
        {
            "s": survival_series(shuffled),
            "b": BONUS_SERIES,
            "p": pd.Series([1.0, 2.0, 3.0], index=pd.Index([2, 0, 1], name="period")),
        },
    )
    np.testing.assert_array_equal(converted["s"], SURVIVAL)
    np.testing.assert_array_equal(converted["b"], BONUS)
    np.testing.assert_array_equal(converted["p"], [2.0, 3.0, 1.0])


def test_series_parameters_solve_like_the_arrays():
    arrays = {"discount_factor": 0.9, "survival": SURVIVAL, "bonus": BONUS}
    expected = model().solve(arrays).values["alive"]
    series = {**arrays, "survival": survival_series(np.arange(12)[::-1]), "bonus": BONUS_SERIES}
    np.testing.assert_array_equal(model().solve(series).values["alive"], expected)
    fixed = model(fixed_params={"alive": {"next_regime": {"survival": survival_series()}}})
    solved = fixed.solve({"discount_factor": 0.9, "bonus": BONUS_SERIES}).values["alive"]
    np.testing.assert_array_equal(solved, expected)
    conditions = {
        "regime": np.zeros(2, int),
        "wealth": np.array([2.0, 5.0]),
        "health": np.array([0, 1]),
        "education": np.array([1, 0]),
    }
    frame = model().simulate(series, conditions, key=jax.random.key(0)).to_dataframe()
    reference = model().simulate(arrays, conditions, key=jax.random.key(0)).to_dataframe()
    pd.testing.assert_frame_equal(frame, reference)


def _with_index(tuples, names, values=None):
    index = pd.MultiIndex.from_tuples(tuples, names=names)
    return pd.Series(np.ones(len(tuples)) if values is None else values, index=index)


@pytest.mark.parametrize(
    ("bonus", "match"),
    [
        (pd.Series([0.1, 0.3], index=["high", "low"]), "level None"),
        (pd.Series([0.1, 0.3], index=pd.Index(["high", "low"], name="schooling")), "'schooling'"),
        (pd.Series([0.1, 0.3], index=pd.Index(["high", "college"], name="education")), "'college'"),
        (pd.Series([0.1], index=pd.Index(["high"], name="education")), "lacks 1 of the 2"),
        (
            pd.Series([0.1, 0.3, 0.2], index=pd.Index(["high", "low", "low"], name="education")),
            "more than once",
        ),
        (_with_index([(45.0, "low"), (50.0, "high")], ["age", "education"]), "[45.0]"),
    ],
)
def test_a_mismatched_index_is_a_named_error(bonus, match):
    params = {"discount_factor": 0.9, "survival": SURVIVAL, "alive": {"utility": {"bonus": bonus}}}
    with pytest.raises(
        lcm.InvalidParamsError, match=r"params\['alive'\]\['utility'\]\['bonus'\]"
    ) as info:
        model().solve(params)
    assert match in str(info.value)


def test_a_mismatched_fixed_series_fails_at_construction():
    with pytest.raises(lcm.ModelInitializationError, match=r"fixed_params\['survival'\].*lacks"):
        model(fixed_params={"survival": survival_series()[:-1]})
