"""Core properties of the solve: jit, no recompilation, compile once per segment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from tests.models import retirement

jax.config.update("jax_enable_x64", True)


def _counting_utility():
    traces = []

    def utility(consumption, labor, disutility_of_work):
        traces.append(1)
        return retirement.utility(consumption, labor, disutility_of_work)

    return utility, traces


def test_jit_of_solve_equals_solve():
    model = retirement.build(n_periods=4, n_wealth=30, n_consumption=60)
    eager = model.solve(retirement.PARAMS)
    jitted = jax.jit(model.solve)(retirement.PARAMS)
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(eager.values[regime], jitted.values[regime])


def test_solve_pauses_the_garbage_collector_only_while_its_program_runs():
    """`Model.solve` pauses Python's cyclic collector while it calls (and on a first
    call traces and compiles) its program, and leaves it as it found it, also when the
    call raises."""
    import gc

    model = retirement.build(n_periods=3, n_wealth=10, n_consumption=20)
    seen = []

    def utility(consumption, labor, disutility_of_work):
        seen.append(gc.isenabled())
        return retirement.utility(consumption, labor, disutility_of_work)

    traced = retirement.build(n_periods=3, n_wealth=10, n_consumption=20, utility_fn=utility)
    assert gc.isenabled()
    traced.solve(retirement.PARAMS)
    assert seen and not any(seen)  # traced with the collector paused
    assert gc.isenabled()
    gc.disable()
    try:
        model.solve(retirement.PARAMS)
        assert not gc.isenabled()  # a collector the caller had paused stays paused
    finally:
        gc.enable()

    def broken(consumption, labor, disutility_of_work):
        raise ValueError("raised while tracing")

    failing = retirement.build(n_periods=3, n_wealth=10, n_consumption=20, utility_fn=broken)
    with pytest.raises(ValueError, match="raised while tracing"):
        failing.solve(retirement.PARAMS)
    assert gc.isenabled()


def test_new_parameter_values_do_not_recompile():
    utility, traces = _counting_utility()
    model = retirement.build(n_periods=4, n_wealth=20, n_consumption=40, utility_fn=utility)
    model.solve(retirement.PARAMS)
    after_first = len(traces)
    assert after_first > 0
    for wage in (10.0, 25.0, 30.0):
        model.solve({**retirement.PARAMS, "wage": wage, "discount_factor": 0.9})
    assert len(traces) == after_first


def test_periods_share_one_compiled_step():
    """The utility is traced the same number of times for 3 and for 40 periods."""
    counts = []
    for n_periods in (3, 40):
        utility, traces = _counting_utility()
        model = retirement.build(
            n_periods=n_periods, n_wealth=10, n_consumption=20, utility_fn=utility
        )
        model.solve(retirement.PARAMS)
        counts.append(len(traces))
    assert counts[0] == counts[1]


def test_active_periods_make_segments_and_inactive_values_raise():
    wealth = lcm.LinSpacedGrid(1.0, 10.0, 5)
    consumption = lcm.LinSpacedGrid(0.5, 10.0, 20)
    late = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption},
        transition=lambda: 0,
        constraints={"feasible": lambda consumption, wealth: consumption <= wealth},
        active=range(2, 4),
    )
    model = lcm.Model({"late": late}, n_periods=4)
    assert [(s.start, s.stop) for s in model.plan.segments] == [(0, 2), (2, 4)]
    solution = model.solve({"discount_factor": 0.9})
    np.testing.assert_allclose(
        solution.value("late", 3),
        np.log(np.minimum(np.linspace(1.0, 10.0, 5), 10.0)),
        rtol=0,
        atol=np.log(10) / 19,
    )
    with pytest.raises(lcm.InvalidPeriodError, match="'late' is not active in period 1"):
        solution.value("late", 1)


def test_regime_ids_are_derived_when_not_given():
    model = retirement.build(n_periods=2, n_wealth=5, n_consumption=5)
    derived = lcm.Model(model.regimes, n_periods=2)
    assert [m.name for m in derived.regime_ids] == ["working", "retired"]
    assert [int(m) for m in derived.regime_ids] == [0, 1]


def test_terminal_regime_without_states_is_zero_dimensional():
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 2.0, 3)},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 2.0, 4)},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption},
        transition=lcm.MarkovTransition(lambda survival: jnp.array([survival, 1 - survival])),
        constraints={"feasible": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model({"alive": alive, "dead": dead}, n_periods=3)
    solution = model.solve({"discount_factor": 0.95, "survival": 0.5})
    assert solution.value("dead", 1).shape == ()
    assert float(solution.value("dead", 1)) == 0.0
    template = model.params_template()
    assert template["alive"]["next_regime"] == {
        "survival": template["alive"]["next_regime"]["survival"]
    }
