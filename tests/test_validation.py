"""The check table and the order in which failed checks are reported (host side, no JAX
program): the first failed transition check is the earliest period's; a NaN is reported
in the latest period that has one (NaN propagates backwards, so it first appears there);
transition checks come before NaN; under `jax.vmap` the first failing batch member.
And the compile-time property: a validated solve compiles one program, nothing after it.
(The raise/warn behaviour eagerly and under jit, vmap and grad is in test_errors.py; the
sharded HLO in test_knobs.py.)"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx import _validation

CHECKS = {
    "working": ("next_health", "next_wealth:finite", "next_regime:inactive", "value:nan"),
    "retired": ("next_regime", "value:nan"),
}


def flags(**failed):
    """Violations of `CHECKS` for 3 periods, with `(regime, period, column, size)` set."""
    arrays = {r: np.zeros((3, len(c))) for r, c in CHECKS.items()}
    for regime, period, column, size in failed.values():
        arrays[regime][period, column] = size
    return arrays


def test_nothing_failed_reports_nothing():
    assert _validation.first_failures(flags(), CHECKS) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _validation.report("warn", flags(), CHECKS)


def test_earliest_transition_failure_across_regimes():
    found = _validation.first_failures(
        flags(a=("working", 2, 0, 0.1), b=("retired", 1, 0, 0.3)), CHECKS
    )
    assert [(f.regime, f.period, f.check) for f in found] == [("retired", 1, "next_regime")]
    assert found[0].size == pytest.approx(0.3)


def test_nan_in_latest_period_after_transition_failures():
    found = _validation.first_failures(
        flags(a=("working", 0, 3, 1.0), b=("retired", 2, 1, 1.0), c=("working", 1, 2, 0.5)),
        CHECKS,
    )
    assert [(f.regime, f.period, f.check) for f in found] == [
        ("working", 1, "next_regime:inactive"),
        ("retired", 2, "value:nan"),
    ]


@pytest.mark.parametrize(
    ("column", "error", "text"),
    [
        (0, lcm.InvalidTransitionProbabilitiesError, "function 'next_health', period 1"),
        (1, lcm.NaNError, "function 'next_wealth', period 1: returns NaN or an infinite"),
        (2, lcm.InvalidTransitionProbabilitiesError, "inactive in period 2"),
        (3, lcm.NaNError, "period 1: the value array contains NaN"),
    ],
)
def test_each_kind_raises_its_error(column, error, text):
    with pytest.raises(error, match="Regime 'working', ") as raised:
        _validation.report("raise", flags(a=("working", 1, column, 0.5)), CHECKS)
    assert text in str(raised.value)
    with pytest.warns(UserWarning) as warned:
        _validation.report("warn", flags(a=("working", 1, column, 0.5)), CHECKS)
    assert [str(w.message) for w in warned] == [str(raised.value)]


def test_nan_in_latest_period_within_a_regime_and_batch_member():
    batch = {r: np.stack([v, v, v]) for r, v in flags().items()}
    batch["working"][2, 2, 3] = 1.0  # a later member: not reported
    batch["working"][1, 0, 3] = 1.0
    batch["working"][1, 1, 3] = 1.0
    batch["working"][1, 1, 0] = 0.2  # and a transition failure of the same member
    found = _validation.first_failures(batch, CHECKS)
    assert [(f.batch, f.period, f.check) for f in found] == [
        ((1,), 1, "next_health"),
        ((1,), 1, "value:nan"),
    ]


def test_nan_counts_as_failed_and_batches_name_their_member():
    batch = {r: np.stack([v, v]) for r, v in flags().items()}
    batch["working"][1, 0, 0] = np.nan
    (found,) = _validation.first_failures(batch, CHECKS)
    assert (found.batch, found.regime, found.period) == ((1,), "working", 0)
    assert _validation.describe(found)[1].endswith("(batch member 1 of a jax.vmap)")


def test_a_kind_without_an_entry_reads_as_a_transition_check():
    checks = {"working": ("next_wealth:solver_specific",)}
    (found,) = _validation.first_failures({"working": np.array([[0.0], [2.0]])}, checks)
    error, message = _validation.describe(found)
    assert error is lcm.InvalidTransitionProbabilitiesError
    assert "Regime 'working', function 'next_wealth', period 1" in message


# --------------------------------------------------------------------------------------
# Compile time: the checks add no program after the solve
# --------------------------------------------------------------------------------------

COMPILES: list[str] = []  # programs compiled (or read from the persistent cache)


def _count(event, seconds, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        COMPILES.append(kwargs.get("fun_name", ""))


jax.monitoring.register_event_duration_secs_listener(_count)


def _fresh_model():
    """A new model (so nothing of it is compiled yet) with a Markov state and a NaN check."""
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 5.0, 4), "health": lcm.DiscreteGrid(["b", "g"])},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 5.0, 3)},
        functions={"utility": lambda consumption, health: jnp.log(consumption) + 0.1 * health},
        state_transitions={
            "wealth": lambda wealth, consumption: wealth - consumption + 1.0,
            "health": lcm.MarkovTransition(lambda health, p: p[health]),
        },
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model({"alive": regime}, n_periods=3)


PARAMS = {"discount_factor": 0.9, "p": jnp.array([[0.7, 0.3], [0.2, 0.8]])}


@pytest.mark.parametrize("validate", ["raise", "warn", "off"])
def test_a_first_solve_compiles_one_program(validate):
    model = _fresh_model()
    params = jax.tree.map(jnp.asarray, PARAMS)
    bad = {**params, "p": params["p"] * 0.9}
    jax.block_until_ready((params, bad))
    COMPILES.clear()
    jax.block_until_ready(model.solve(params, validate=validate))
    assert len(COMPILES) == 1, COMPILES
    COMPILES.clear()
    with (
        pytest.raises(lcm.InvalidTransitionProbabilitiesError)
        if validate == "raise"
        else (pytest.warns(UserWarning) if validate == "warn" else warnings.catch_warnings())
    ):
        jax.block_until_ready(model.solve(bad, validate=validate))
    # Failing checks are reported from the same program's flags: no second solve program
    # (the eager message re-evaluates the failed transition on the grids, op by op, to
    # name the state and the bad value: `transition_detail`).
    assert not [c for c in COMPILES if "solve" in c], COMPILES
