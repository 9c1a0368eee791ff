"""`Model(...)` warns when a user function reads a `jax.Array` from outside its arguments.

A module-level `jnp.array` lives on one device, which breaks sharding and multi-process
runs; NumPy arrays and parameters do not. The warning names the regime, the function
(keyed as in `params`) and the variable, and says how to fix it.
"""

from __future__ import annotations

import functools
import re
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm

DEVICE_RATES = jnp.array([1.0, 2.0])
HOST_RATES = np.array([1.0, 2.0])
DEVICE_TABLE = {"high": jnp.array([0.5, 0.5])}
HOST_TRANSITION = np.array([[0.9, 0.1], [0.2, 0.8]])
DEVICE_TRANSITION = jnp.asarray(HOST_TRANSITION)


def utility_device(consumption):
    return jnp.log(consumption) * DEVICE_RATES[1]


def utility_host(consumption):
    return jnp.log(consumption) * HOST_RATES[1]


def scaled_log(consumption):
    return jnp.log(consumption) * DEVICE_RATES[0]


def utility_calls_helper(consumption):
    return scaled_log(consumption)


def utility_scaled(consumption, scale):
    return jnp.log(consumption) * scale


def next_wealth(wealth, consumption):
    return wealth - consumption


def borrowing(consumption, wealth):
    return consumption <= wealth


def regime(utility=utility_host, **overrides):
    kwargs = {
        "states": {"wealth": lcm.LinSpacedGrid(start=1.0, stop=5.0, n_points=3)},
        "actions": {"consumption": lcm.LinSpacedGrid(start=1.0, stop=5.0, n_points=3)},
        "functions": {"utility": utility},
        "state_transitions": {"wealth": next_wealth},
        "transition": lambda: 0,
        "constraints": {"borrowing": borrowing},
    }
    kwargs.update(overrides)
    return lcm.Regime(**kwargs)


def build(**regimes):
    return lcm.Model(regimes=regimes or {"saver": regime()}, n_periods=2)


def messages(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, lcm.LcmWarning)]


def assert_no_warning(**regimes):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(**regimes)


def test_module_level_jax_array_warns_with_names_and_fix():
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=regime(utility_device))
    (message,) = messages(record)
    assert "Regime 'saver'" in message and "function 'utility'" in message
    assert f"module-level global 'DEVICE_RATES' of module {__name__}" in message
    assert "numpy.asarray(...) or pass it as a parameter" in message
    assert "distributed=True" in message and "jax.distributed" in message
    # It points at the user's `Model(...)` line, not into lcm_eqx or equinox.
    assert record[0].filename == __file__
    assert issubclass(record[0].category, UserWarning)


def test_numpy_arrays_and_parameters_do_not_warn():
    assert_no_warning(saver=regime(utility_host))
    assert_no_warning(saver=regime(utility_scaled))  # `scale` is a parameter
    assert_no_warning(saver=regime(functools.partial(utility_scaled, scale=HOST_RATES[0])))
    assert_no_warning(saver=regime(functools.partial(utility_scaled, scale=2.0)))


def test_closed_over_jax_array_warns():
    def make_utility():
        scale = jnp.ones(3)
        return lambda consumption: jnp.log(consumption) * scale[0]

    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=regime(make_utility()))
    (message,) = messages(record)
    assert "function 'utility'" in message and "closed-over variable 'scale'" in message


def test_partial_bound_jax_array_warns():
    keyword = functools.partial(utility_scaled, scale=jnp.float32(2.0))
    positional = functools.partial(lambda scale, consumption: consumption * scale, jnp.ones(()))
    for utility in (keyword, positional):
        with pytest.warns(lcm.LcmWarning) as record:
            build(saver=regime(utility))
        (message,) = messages(record)
        assert "functools.partial argument 'scale'" in message


def test_jax_array_read_through_a_called_function_warns():
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=regime(utility_calls_helper))
    (message,) = messages(record)
    assert "'DEVICE_RATES'" in message and "read through 'scaled_log'" in message


def test_jax_array_inside_a_module_level_dict_warns():
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=regime(lambda consumption: jnp.log(consumption) * DEVICE_TABLE["high"][0]))
    assert "'DEVICE_TABLE'" in messages(record)[0]


def test_every_kind_of_user_function_is_checked():
    health = lcm.DiscreteGrid(["bad", "good"])
    checked = regime(
        states={"wealth": lcm.LinSpacedGrid(start=1.0, stop=5.0, n_points=3), "health": health},
        functions={
            "utility": utility_host,
            "bonus": lambda health: DEVICE_RATES[health],
        },
        state_transitions={
            "wealth": next_wealth,
            "health": lcm.MarkovTransition(lambda health: DEVICE_TRANSITION[health]),
        },
        transition=lcm.MarkovTransition(lambda health: DEVICE_TRANSITION[health]),
        constraints={"borrowing": lambda consumption, wealth: consumption <= DEVICE_RATES[1]},
    )
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=checked)
    pattern = re.compile(r"function '(\w+)' reads the module-level global '(\w+)'")
    found = {pattern.search(m).groups() for m in messages(record)}  # type: ignore[union-attr]
    assert found == {
        ("bonus", "DEVICE_RATES"),
        ("next_health", "DEVICE_TRANSITION"),
        ("next_regime", "DEVICE_TRANSITION"),
        ("borrowing", "DEVICE_RATES"),
    }
    assert all(m.startswith("Regime 'saver'") for m in messages(record))


def test_function_shared_by_regimes_warns_once_naming_both():
    shared = regime(utility_device)
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=shared, spender=shared)
    (message,) = messages(record)
    assert message.startswith("Regimes 'saver', 'spender': function 'utility'")


def test_warning_can_be_filtered_by_class():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=lcm.LcmWarning)
        build(saver=regime(utility_device))


def test_a_law_of_motion_per_target_regime_is_checked():
    def next_wealth_device(wealth, consumption):
        return (wealth - consumption) * DEVICE_RATES[0]

    saver = regime(state_transitions={"wealth": {"saver": next_wealth_device}})
    with pytest.warns(lcm.LcmWarning) as record:
        build(saver=saver)
    (message,) = messages(record)
    assert "function 'next_wealth'" in message and "'DEVICE_RATES'" in message
