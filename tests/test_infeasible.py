"""No simulated subject ever takes an infeasible action (issue 32, item 1).

A subject that reaches a state where no action is feasible (value -inf) would otherwise
take the argmax of an all -inf row, i.e. the first point of the action grids, whatever
the constraints say. `simulate` raises `InfeasibleStateError` there (with
`validate="warn"`: warns, and flags the rows with value -inf and NaN continuous actions);
`solve` warns of the states with no feasible action of each regime and period.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.models import retirement  # noqa: E402

PARAMS = {"discount_factor": 0.95, "interest_rate": 0.03, "disutility_of_work": 1.0, "wage": 20.0}
TASTE = {**PARAMS, "taste_shock_scale": 0.5}
N_PERIODS = 4


def build(*, consumption_start=1.0, taste_shocks=False, solver=None):
    """The retirement model on small grids; wealth from 1, consumption from
    `consumption_start` (above 1: the lowest wealth points have no feasible action)."""
    wealth = lcm.LinSpacedGrid(1.0, 100.0, 30)
    consumption = lcm.LinSpacedGrid(consumption_start, 100.0, 60)
    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(retirement.Labor), "consumption": consumption},
        functions={"utility": retirement.utility, "labor_income": retirement.labor_income},
        state_transitions={"wealth": retirement.next_wealth},
        transition=retirement.next_regime,
        constraints={"borrowing": retirement.borrowing},
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": retirement.utility_retired},
        state_transitions={"wealth": retirement.next_wealth_retired},
        transition=lambda: retirement.RegimeId.retired,
        constraints={"borrowing": retirement.borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired},
        n_periods=N_PERIODS,
        regime_ids=retirement.RegimeId,
        solver=solver,
    )


def dcegm():
    savings = lcm.IrregSpacedGrid(points=[100.0 * (i / 49) ** 3 for i in range(50)])
    return lcm.DCEGM(state="wealth", action="consumption", savings=savings)


def initial_conditions(n=200, seed=0, low=1.0):
    """Subjects in both regimes; a quarter of them at wealth `low`, where the constraint
    binds hardest. (A retired subject at wealth 1 consumes 1 and reaches wealth 0,
    where no point of a consumption grid from 1 is feasible.)"""
    rng = np.random.default_rng(seed)
    return {
        "regime": rng.integers(0, 2, n),
        "wealth": np.concatenate([np.full(n // 4, low), rng.uniform(low, 100.0, n - n // 4)]),
    }


def lcm_messages(record):
    return [str(w.message) for w in record if issubclass(w.category, lcm.LcmWarning)]


@pytest.mark.parametrize("taste_shocks", [False, True], ids=["max", "taste-shocks"])
@pytest.mark.parametrize("solver", ["grid-search", "dcegm"])
def test_no_simulated_row_violates_a_constraint(solver, taste_shocks):
    model = build(taste_shocks=taste_shocks, solver=dcegm() if solver == "dcegm" else None)
    params = TASTE if taste_shocks else PARAMS
    with warnings.catch_warnings():
        warnings.simplefilter("error", lcm.LcmWarning)  # every state is feasible: no warning
        result = model.simulate(params, initial_conditions(low=20.0), key=jax.random.key(1))
    frame = result.to_dataframe(extra=["borrowing"], model=model, params=params)
    assert len(frame) == 200 * N_PERIODS
    assert np.isfinite(frame["value"]).all()
    assert np.isfinite(frame["consumption"]).all()
    # The constraint evaluated by the model itself on every row, and independently.
    assert frame["borrowing"].astype(bool).all()
    assert (frame["consumption"] <= frame["wealth"] + 1e-9).all()
    assert (frame["wealth"] >= 0).all()
    if taste_shocks:  # the shocks do move choices: both labor choices are taken
        assert frame.loc[frame["regime"] == "working", "labor"].nunique() == 2


def test_infeasible_state_raises_at_simulate_and_warns_at_solve():
    model = build(consumption_start=3.0)
    with pytest.warns(lcm.LcmWarning) as record:
        solution = model.solve(PARAMS)
    messages = lcm_messages(record)
    # Wealth grid 1, 4.41, ...: only wealth 1 is infeasible in `working` (its wage lifts
    # next wealth above 3); in `retired` the infeasible states grow towards period 0.
    working = next(m for m in messages if m.startswith("Regime 'working'"))
    assert "period 0: 1 (first at wealth=1)" in working
    assert "period 2: 1 (first at wealth=1); and 1 more periods" in working
    assert "'borrowing'" in working
    retired = next(m for m in messages if m.startswith("Regime 'retired'"))
    counts = np.isneginf(np.asarray(solution.values["retired"])).sum(axis=1)
    assert counts[0] > counts[-1] >= 1
    assert f"period 0: {counts[0]} (first at wealth=1)" in retired

    conditions = {"regime": np.array([0, 0, 1]), "wealth": np.array([50.0, 1.0, 60.0])}
    with pytest.raises(lcm.InfeasibleStateError) as info:
        model.simulate(PARAMS, conditions, solution)
    message = str(info.value)
    for part in ("'working'", "period 0", "subject 1", "wealth=1", "'borrowing'"):
        assert part in message, message


@pytest.mark.parametrize("taste_shocks", [False, True], ids=["max", "taste-shocks"])
def test_infeasible_rows_are_flagged_under_warn(taste_shocks):
    model = build(consumption_start=3.0, taste_shocks=taste_shocks)
    params = TASTE if taste_shocks else PARAMS
    conditions = initial_conditions(n=40)
    with pytest.warns(lcm.LcmWarning) as record:
        result = model.simulate(params, conditions, key=jax.random.key(2), validate="warn")
    assert any("no action is feasible" in m for m in lcm_messages(record))
    frame = result.to_dataframe(extra=["borrowing"], model=model, params=params)
    flagged = np.isneginf(frame["value"])
    assert flagged.sum() >= 10  # the subjects starting at wealth 1
    # A flagged row has no action to show; every other row satisfies the constraint.
    assert frame.loc[flagged, "consumption"].isna().all()
    feasible = frame[~flagged]
    assert np.isfinite(feasible["consumption"]).all()
    assert feasible["borrowing"].astype(bool).all()
    assert (feasible["consumption"] <= feasible["wealth"] + 1e-9).all()
    # Nothing is reported silently: validate='off' still flags the same rows.
    silent = model.simulate(params, conditions, key=jax.random.key(2), validate="off")
    np.testing.assert_array_equal(np.isneginf(silent.value), np.isneginf(result.value))


def test_infeasible_state_under_jit_raises_in_the_program():
    model = build(consumption_start=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)
        solution = model.solve(PARAMS)
    conditions = {"regime": jnp.array([0, 1]), "wealth": jnp.array([1.0, 60.0])}

    @jax.jit
    def mean_value(wealth):
        result = model.simulate(PARAMS, {**conditions, "wealth": wealth}, solution)
        return jnp.nanmean(jnp.where(jnp.isneginf(result.value), jnp.nan, result.value))

    with pytest.raises(jax.errors.JaxRuntimeError, match="InfeasibleStateError: Regime 'working'"):
        jax.block_until_ready(mean_value(conditions["wealth"]))


def test_feasible_model_solves_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", lcm.LcmWarning)
        build().solve(PARAMS)
