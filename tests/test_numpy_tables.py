"""A NumPy table indexed by a state's code inside a user function.

NumPy cannot index with a JAX tracer, so `TABLE[health]` fails while the solve is
traced. The library names the regime, the function and the table, and says what works
instead: the same table as a parameter (checked here against the table written into
the utility by hand, a NumPy oracle of one period) or `jnp.asarray(TABLE)[health]`.
"""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

HEALTH_BONUS = np.array([0.0, 0.7])
CONSUMPTION = np.linspace(0.5, 4.0, 8)


def utility_numpy_global(consumption, health):
    return jnp.log(consumption) + HEALTH_BONUS[health]


def utility_as_jax(consumption, health):
    return jnp.log(consumption) + jnp.asarray(HEALTH_BONUS)[health]


def utility_parameter(consumption, health, health_bonus):
    return jnp.log(consumption) + health_bonus[health]


def model(utility):
    alive = lcm.Regime(
        states={"health": lcm.DiscreteGrid(["bad", "good"])},
        actions={"consumption": lcm.LinSpacedGrid(CONSUMPTION[0], CONSUMPTION[-1], 8)},
        functions={"utility": utility},
        constraints={"budget": lambda consumption: consumption <= 3.0},
    )
    return lcm.Model({"alive": alive}, n_periods=1)


def test_the_table_as_a_parameter_or_a_jax_array_works():
    expected = np.log(CONSUMPTION[CONSUMPTION <= 3.0].max()) + HEALTH_BONUS  # by health
    values = model(utility_parameter).solve({"health_bonus": HEALTH_BONUS}).values["alive"][0]
    np.testing.assert_allclose(values, expected, rtol=1e-14)
    values = model(utility_as_jax).solve({}).values["alive"][0]
    np.testing.assert_allclose(values, expected, rtol=1e-14)


@pytest.mark.parametrize(
    ("utility", "variable"),
    [
        (utility_numpy_global, "the module-level global 'HEALTH_BONUS'"),
        (
            functools.partial(
                lambda consumption, health, table: jnp.log(consumption) + table[health],
                table=HEALTH_BONUS,
            ),
            "the functools.partial argument 'table'",
        ),
    ],
)
def test_a_numpy_table_indexed_by_a_code_is_a_named_error(utility, variable):
    with pytest.raises(lcm.ModelInitializationError) as info:
        model(utility).solve({})
    message = str(info.value)
    for part in ("Regime 'alive'", "function 'utility'", variable, "fixed_params", "(2,)"):
        assert part in message, message


def test_a_python_conversion_without_a_table_is_named_too():
    def utility(consumption, health):
        return jnp.log(consumption) + float(health)

    with pytest.raises(lcm.ModelInitializationError, match="Regime 'alive': function 'utility'"):
        model(utility).solve({})
