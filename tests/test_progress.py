"""Progress meters (`progress=` on solve / simulate) and the `lcm_eqx` logger."""

import functools
import logging
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._logging import logger, set_log_level
from tests.models import retirement

jax.config.update("jax_enable_x64", True)

N_PERIODS = 48
SOLVE_LINE = re.compile(r"^solve: period (\d+) \((\d+)/(\d+)\)$")


@pytest.fixture(scope="module")
def model():
    return retirement.build(n_periods=N_PERIODS, n_wealth=8, n_consumption=12)


@pytest.fixture
def log_level():
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


def _solve_lines(err: str) -> list[tuple[int, int, int]]:
    return [tuple(int(g) for g in m.groups()) for m in map(SOLVE_LINE.match, err.splitlines()) if m]


def _assert_one_line_per_period(err: str, n_periods: int = N_PERIODS):
    lines = _solve_lines(err)
    assert lines == [(n_periods - k, k, n_periods) for k in range(1, n_periods + 1)]


def test_meter_under_jit_prints_each_period_once_and_keeps_results(model, capfd):
    plain = model.solve(retirement.PARAMS)
    capfd.readouterr()
    jitted = jax.jit(functools.partial(model.solve, progress=True))(retirement.PARAMS)
    jax.block_until_ready(jitted.values)
    _assert_one_line_per_period(capfd.readouterr().err)
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(plain.values[regime], jitted.values[regime])
    # progress as a static argument of a user jit, and eagerly with "text"
    jax.jit(model.solve, static_argnames="progress")(retirement.PARAMS, progress="text")
    _assert_one_line_per_period(capfd.readouterr().err)
    model.solve(retirement.PARAMS, progress="text")
    _assert_one_line_per_period(capfd.readouterr().err)


def test_default_program_has_no_callbacks(model):
    def jaxpr(progress):
        return str(
            jax.make_jaxpr(functools.partial(model._solve, validate=False, progress=progress))(
                retirement.PARAMS
            )
        )

    assert "callback" not in jaxpr(None)
    assert "callback" in jaxpr("text")


def _objective(model, progress):
    def f(wage):
        solution = model.solve(
            {**retirement.PARAMS, "wage": wage}, validate="off", progress=progress
        )
        return jnp.sum(solution.values["working"][0])

    return f


def test_grad_with_progress_equals_grad_without(model, capfd):
    without = jax.grad(_objective(model, False))(20.0)
    capfd.readouterr()
    with_progress = jax.grad(_objective(model, True))(20.0)
    _assert_one_line_per_period(capfd.readouterr().err)  # the backward pass does not tick
    assert np.isfinite(without)
    np.testing.assert_allclose(with_progress, without, rtol=1e-12)


def test_vmap_over_params_with_progress(model, capfd):
    wages = jnp.array([15.0, 20.0, 25.0])
    without = jax.vmap(_objective(model, False))(wages)
    capfd.readouterr()
    with_progress = jax.vmap(_objective(model, True))(wages)
    _assert_one_line_per_period(capfd.readouterr().err)  # once per period, not per element
    np.testing.assert_array_equal(with_progress, without)


@pytest.mark.slow
def test_simulate_meter_over_chunks_and_periods(capfd):
    model = retirement.build(n_periods=3, n_wealth=8, n_consumption=12)
    initial = {"regime": np.zeros(5, int), "wealth": np.linspace(5.0, 50.0, 5)}
    solution = model.solve(retirement.PARAMS)
    plain = model.simulate(retirement.PARAMS, initial, solution, subject_batch_size=2)
    capfd.readouterr()
    shown = model.simulate(
        retirement.PARAMS, initial, solution, subject_batch_size=2, progress=True
    )
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("simulate")]
    assert lines == [
        f"simulate: chunk {c}/3, period {t} ({3 * (c - 1) + t + 1}/9)"
        for c in (1, 2, 3)
        for t in range(3)
    ]
    np.testing.assert_array_equal(plain.value, shown.value)
    model.simulate(retirement.PARAMS, initial, progress=True)  # solves first, with the meter
    err = capfd.readouterr().err
    _assert_one_line_per_period(err, 3)
    assert [line for line in err.splitlines() if line.startswith("simulate")] == [
        f"simulate: period {t} ({t + 1}/3)" for t in range(3)
    ]


@pytest.fixture
def tqdm_bars(monkeypatch):
    """The tqdm bars the meter opens, each recording its position after every update."""
    import tqdm.auto

    bars = []

    class RecordingBar(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.positions = []
            bars.append(self)

        def update(self, n=1):
            shown = super().update(n)
            self.positions.append(self.n)
            return shown

    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    return bars


def _assert_one_full_solve_bar(bars, err: str, n_periods: int = N_PERIODS):
    assert len(bars) == 1
    (bar,) = bars
    assert (bar.desc, bar.total) == ("solve", n_periods)
    assert bar.positions == list(range(1, n_periods + 1))  # each period once, in order
    assert bar.disable  # closed at the last period
    assert f"{n_periods}/{n_periods}" in err  # drawn on stderr by tqdm itself
    assert not _solve_lines(err)  # and no text meter besides
    bars.clear()


def test_tqdm_meter_under_jit_grad_and_vmap(model, tqdm_bars, capfd):
    plain = model.solve(retirement.PARAMS)
    capfd.readouterr()
    jitted = jax.jit(functools.partial(model.solve, progress="tqdm"))(retirement.PARAMS)
    jax.block_until_ready(jitted.values)
    _assert_one_full_solve_bar(tqdm_bars, capfd.readouterr().err)
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(plain.values[regime], jitted.values[regime])

    # The results under grad and vmap do not depend on the meter (the text meter's tests
    # compare them with progress off); here only the ticks are checked.
    gradient = jax.grad(_objective(model, "tqdm"))(20.0)
    _assert_one_full_solve_bar(tqdm_bars, capfd.readouterr().err)  # no ticks backwards
    assert np.isfinite(gradient)

    values = jax.vmap(_objective(model, "tqdm"))(jnp.array([15.0, 20.0, 25.0]))
    _assert_one_full_solve_bar(tqdm_bars, capfd.readouterr().err)  # not one per element
    assert values.shape == (3,)


def test_tqdm_meter_over_simulation_chunks(tqdm_bars, capfd):
    model = retirement.build(n_periods=3, n_wealth=8, n_consumption=12)
    initial = {"regime": np.zeros(5, int), "wealth": np.linspace(5.0, 50.0, 5)}
    solution = model.solve(retirement.PARAMS)
    model.simulate(retirement.PARAMS, initial, solution, subject_batch_size=2, progress="tqdm")
    (bar,) = tqdm_bars
    assert (bar.desc, bar.total, bar.positions) == ("simulate", 9, list(range(1, 10)))
    assert bar.disable


def test_tqdm_falls_back_to_text_without_tqdm(model, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    with pytest.warns(UserWarning, match="tqdm"):
        model.solve(retirement.PARAMS, progress="tqdm")
    _assert_one_line_per_period(capfd.readouterr().err)


def test_invalid_progress_raises(model):
    with pytest.raises(lcm.LcmError, match="progress must be one of"):
        model.solve(retirement.PARAMS, progress="bar")


def test_log_levels_emit_phase_timings(caplog, log_level):
    set_log_level("progress")
    model = retirement.build(n_periods=3, n_wealth=8, n_consumption=12)
    model.solve(retirement.PARAMS)
    model.simulate(retirement.PARAMS, {"regime": np.zeros(2, int), "wealth": np.array([5.0, 9.0])})
    messages = [r.getMessage() for r in caplog.records if r.name == "lcm_eqx"]
    assert any(m.startswith("build:") for m in messages)
    assert any(
        m.startswith("solve (3 periods):") and "compiled a new program" in m for m in messages
    )
    assert any(m.startswith("simulate (2 subjects") for m in messages)
    assert not any(r.levelno < logging.INFO for r in caplog.records)

    caplog.clear()
    set_log_level("debug")
    model.solve(retirement.PARAMS)
    messages = [r.getMessage() for r in caplog.records if r.name == "lcm_eqx"]
    assert any(m.startswith("solve: compiled") for m in messages)
    assert any(m.startswith("solve (3 periods):") and "compiled" not in m for m in messages)

    caplog.clear()
    set_log_level("off")
    model.solve(retirement.PARAMS)
    assert not [r for r in caplog.records if r.name == "lcm_eqx"]
    with pytest.raises(lcm.LcmError, match="log level"):
        set_log_level("loud")
