"""A NaN in the solution is reported with the regime, period and term that produced it."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm

jax.config.update("jax_enable_x64", True)


def _model(savings_floor):
    """`log_savings` is log(wealth - consumption - floor): NaN where that is negative."""
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 6)},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 5.0, 5)},
        functions={
            "utility": lambda consumption, log_savings: jnp.log(consumption) + 0.1 * log_savings,
            "log_savings": lambda wealth, consumption, floor: jnp.log(wealth - consumption - floor),
        },
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 1.0},
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model({"saver": regime}, n_periods=3), {
        "discount_factor": 0.9,
        "floor": savings_floor,
    }


def test_nan_in_a_helper_is_named_with_regime_period_and_state():
    model, params = _model(savings_floor=1.0)
    with pytest.raises(lcm.NaNError) as error:
        model.solve(params)
    message = str(error.value)
    assert "Regime 'saver'" in message
    assert "period 2" in message  # the last period: NaN first appears there
    assert "function 'log_savings'" in message
    assert "wealth=1" in message and "consumption=" in message


def test_nan_under_warn_and_off():
    model, params = _model(savings_floor=1.0)
    with pytest.warns(UserWarning, match="log_savings"):
        solution = model.solve(params, validate="warn")
    assert np.isnan(np.asarray(solution.values["saver"])).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.solve(params, validate="off")  # documented as unvalidated


def test_no_nan_no_report():
    model, params = _model(savings_floor=-100.0)
    solution = model.solve(params)
    assert model.diagnose_nan(params, solution) is None


def test_nan_under_jit_names_regime_and_period_and_points_to_diagnose_nan():
    model, params = _model(savings_floor=1.0)
    with pytest.raises(jax.errors.JaxRuntimeError) as error:
        jax.block_until_ready(jax.jit(model.solve)(params))
    message = str(error.value)
    assert "NaNError: Regime 'saver', period 2: the value array contains NaN" in message
    assert "model.diagnose_nan(params)" in message
    with pytest.warns(UserWarning, match="Regime 'saver', period 2: the value array"):
        solution = jax.jit(lambda p: model.solve(p, validate="warn"))(params)
        jax.block_until_ready(solution)
    assert np.isnan(np.asarray(solution.values["saver"])).any()


def _transition_model(nan_where):
    """next wealth is NaN where `nan_where(wealth, consumption)` holds."""
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 6)},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 5.0, 5)},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption: jnp.where(
                nan_where(wealth, consumption), jnp.nan, wealth - consumption + 1.0
            )
        },
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model({"saver": regime}, n_periods=3), {"discount_factor": 0.9}


def test_nan_next_state_at_a_feasible_point_is_an_error():
    model, params = _transition_model(lambda w, c: (w > 5.0) & (c < 1.0))
    with pytest.raises(lcm.NaNError) as error:
        model.solve(params)
    message = str(error.value)
    assert "Regime 'saver'" in message and "function 'next_wealth'" in message
    assert "period 0" in message  # the first period where it happens
    with pytest.raises(jax.errors.JaxRuntimeError) as jitted:
        jax.block_until_ready(jax.jit(model.solve)(params))
    assert f"NaNError: {message}" in str(jitted.value)  # the same message under jit


def test_nan_next_state_at_infeasible_points_is_ignored():
    model, params = _transition_model(lambda w, c: c > w)  # only where borrowing fails
    solution = model.solve(params)
    assert np.isfinite(np.asarray(solution.values["saver"])).all()
