"""Saving and loading solutions and simulated panels: bit-exact round trips, structure
checks with clear messages, corrupt files, version warnings and atomic writes."""

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import lcm_eqx as lcm
from tests.models import retirement

jax.config.update("jax_enable_x64", True)

REPO = Path(__file__).resolve().parents[1]
PREAMBLE = struct.Struct("<8sQ32s")


def _retirement(
    n_wealth=10,
    *,
    stop=400.0,
    n_periods=3,
    n_consumption=20,
    taste_shocks=False,
    wealth_batch_size=0,
):
    wealth = lcm.LinSpacedGrid(1.0, stop, n_wealth, batch_size=wealth_batch_size)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, n_consumption)
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
        n_periods=n_periods,
        regime_ids=retirement.RegimeId,
    )


def _rich(health=("bad", "good"), rho=0.9):
    """A process state, a labelled discrete state, an irregular action grid, ages, and a
    terminal regime without states."""
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(1.0, 10.0, 6),
            "income": lcm.RouwenhorstGrid(n_points=3, rho=rho, sigma=0.2),
            "health": lcm.DiscreteGrid(list(health)),
        },
        actions={
            "consumption": lcm.IrregSpacedGrid([0.5, 1.0, 2.0, 4.0, 8.0]),
            "work": lcm.DiscreteGrid(["no", "yes"]),
        },
        functions={
            "utility": lambda consumption, work, health: (
                jnp.log(consumption) - 0.1 * work + 0.1 * health
            ),
            "earnings": lambda income, work: jnp.exp(income) * work,
        },
        state_transitions={
            "wealth": lambda wealth, consumption, earnings: wealth - consumption + earnings,
            "health": lambda health: health,
        },
        transition=lambda age: jnp.where(age < 62, 0, 1),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        regimes={"alive": alive, "dead": dead}, n_periods=4, ages=lcm.AgeGrid(start=60, step=1)
    )


RICH_PARAMS = {"discount_factor": 0.95}
RICH_INITIAL = {
    "regime": np.zeros(4, dtype=int),
    "wealth": np.full(4, 5.0),
    "income:index": np.array([0, 1, 2, 1]),
    "health": np.array(["bad", "good", "good", "bad"]),
}


@pytest.fixture(scope="module")
def model():
    return _retirement()


@pytest.fixture(scope="module")
def solution(model):
    return model.solve(retirement.PARAMS)


@pytest.fixture
def saved(solution, tmp_path):
    path = tmp_path / "solution.lcm"
    solution.save(path)
    return path


def _assert_same_solution(loaded, solution):
    assert isinstance(loaded, lcm.Solution)
    assert loaded.checks == solution.checks
    assert loaded.active == solution.active
    assert loaded.state_names == solution.state_names
    for field in ("values", "violations"):
        original, restored = getattr(solution, field), getattr(loaded, field)
        assert restored.keys() == original.keys()
        for regime in original:
            assert isinstance(restored[regime], jax.Array)
            assert restored[regime].dtype == original[regime].dtype
            np.testing.assert_array_equal(
                np.asarray(restored[regime]), np.asarray(original[regime]), strict=True
            )


def _rewrite_header(path, **changes):
    """Change header fields of a saved file, keeping its checksums valid."""
    data = Path(path).read_bytes()
    magic, size, _ = PREAMBLE.unpack_from(data)
    header = json.loads(data[PREAMBLE.size : PREAMBLE.size + size])
    header.update(changes)
    new = json.dumps(header).encode()
    Path(path).write_bytes(
        PREAMBLE.pack(magic, len(new), hashlib.sha256(new).digest())
        + new
        + data[PREAMBLE.size + size :]
    )


# ------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_solution_round_trip_is_bit_exact(model, solution, tmp_path, dtype):
    solution = jax.tree.map(lambda x: x.astype(dtype), solution)
    path = tmp_path / "solution.lcm"
    solution.save(path)
    loaded = lcm.load_solution(path, model)
    _assert_same_solution(loaded, solution)
    np.testing.assert_array_equal(loaded.value("working", 0), solution.value("working", 0))


def test_loaded_solution_simulates_like_the_original(model, solution, saved):
    loaded = lcm.load_solution(saved, model)
    initial = {"regime": np.zeros(6, dtype=int), "wealth": np.linspace(1.0, 100.0, 6)}
    expected = model.simulate(retirement.PARAMS, initial, solution, key=jax.random.key(1))
    actual = model.simulate(retirement.PARAMS, initial, loaded, key=jax.random.key(1))
    pd.testing.assert_frame_equal(actual.to_dataframe(), expected.to_dataframe())


def test_simulation_result_round_trip_is_bit_exact(model, solution, tmp_path):
    initial = {"regime": np.array([0, 0, 1, 0, 1]), "wealth": np.linspace(1.0, 100.0, 5)}
    result = model.simulate(retirement.PARAMS, initial, solution, key=jax.random.key(0))
    path = tmp_path / "panel.lcm"
    result.save(path)
    loaded = lcm.load_simulation_result(path, model)
    assert isinstance(loaded, lcm.SimulationResult)
    for original, restored in zip(jax.tree.leaves(result), jax.tree.leaves(loaded), strict=True):
        assert isinstance(restored, np.ndarray)
        np.testing.assert_array_equal(restored, original, strict=True)
    assert (loaded.regime_names, loaded.has_variable, loaded.labels, loaded.ages) == (
        result.regime_names,
        result.has_variable,
        result.labels,
        result.ages,
    )
    pd.testing.assert_frame_equal(loaded.to_dataframe(), result.to_dataframe())


def test_round_trip_with_process_and_labelled_states_ages_and_a_terminal_regime(tmp_path):
    model = _rich()
    solution = model.solve(RICH_PARAMS)
    result = model.simulate(RICH_PARAMS, RICH_INITIAL, solution, key=jax.random.key(0))
    solution.save(tmp_path / "solution.lcm")
    result.save(tmp_path / "panel.lcm")
    _assert_same_solution(lcm.load_solution(tmp_path / "solution.lcm", model), solution)
    loaded = lcm.load_simulation_result(tmp_path / "panel.lcm", model)
    pd.testing.assert_frame_equal(loaded.to_dataframe(), result.to_dataframe())
    assert "age" in loaded.to_dataframe()


def test_an_equal_model_built_again_and_different_knobs_load_the_file(solution, saved):
    _assert_same_solution(lcm.load_solution(saved, _retirement()), solution)
    _assert_same_solution(lcm.load_solution(saved, _retirement(wealth_batch_size=3)), solution)


def test_save_overwrites_and_leaves_no_temporary_files(model, solution, saved):
    doubled = jax.tree.map(lambda x: 2 * x, solution)
    doubled.save(saved)
    _assert_same_solution(lcm.load_solution(saved, model), doubled)
    assert sorted(p.name for p in saved.parent.iterdir()) == [saved.name]


def test_save_inside_jit_is_refused(model, tmp_path):
    def solve_and_save(params):
        model.solve(params).save(tmp_path / "traced.lcm")

    with pytest.raises(lcm.LcmError, match="traced"):
        jax.jit(solve_and_save)(retirement.PARAMS)
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------- a different model
@pytest.mark.parametrize(
    ("other", "message"),
    [
        (
            lambda: _retirement(n_wealth=12),
            "regime 'working': state 'wealth' has 10 points in the file, 12 in the model",
        ),
        (
            lambda: _retirement(stop=300.0),
            "regime 'working': state 'wealth' has stop 400.0 in the file, 300.0 in the model",
        ),
        (lambda: _retirement(n_periods=4), "n_periods is 3 in the file, 4 in the model"),
        (
            lambda: _retirement(n_consumption=25),
            "regime 'retired': action 'consumption' has 20 points in the file, 25 in the model",
        ),
        (
            lambda: _retirement(taste_shocks=True),
            "regime 'working': taste shocks False in the file, True in the model",
        ),
        (_rich, "regime 'working' is in the file but not in the model"),
    ],
)
def test_loading_into_a_different_model_says_what_differs(saved, other, message):
    with pytest.raises(lcm.SavedFileError, match="different structure") as error:
        lcm.load_solution(saved, other())
    assert message in str(error.value)


def test_a_changed_discrete_grid_or_process_is_named(tmp_path):
    model = _rich()
    solution = model.solve(RICH_PARAMS)
    solution.save(tmp_path / "solution.lcm")
    with pytest.raises(
        lcm.SavedFileError,
        match=r"state 'health' has labels \['bad', 'good'\] in"
        r" the file, \['poor', 'good'\] in the model",
    ):
        lcm.load_solution(tmp_path / "solution.lcm", _rich(health=("poor", "good")))
    with pytest.raises(lcm.SavedFileError, match=r"state 'income' has rho 0\.9 in the file, 0\.8"):
        lcm.load_solution(tmp_path / "solution.lcm", _rich(rho=0.8))


def test_a_solution_that_records_no_model_is_still_checked(solution, tmp_path):
    import dataclasses

    path = tmp_path / "bare.lcm"
    dataclasses.replace(solution, model_structure=None).save(path)
    _assert_same_solution(lcm.load_solution(path, _retirement()), solution)
    with pytest.raises(
        lcm.SavedFileError, match="state 'wealth' has 10 points in the file, 12 in the model"
    ):
        lcm.load_solution(path, _retirement(n_wealth=12))


def test_a_file_of_the_other_kind_is_named(model, solution, saved, tmp_path):
    with pytest.raises(lcm.SavedFileError, match="holds a solution, not a simulation result"):
        lcm.load_simulation_result(saved, model)
    result = model.simulate(
        retirement.PARAMS,
        {"regime": np.zeros(2, dtype=int), "wealth": np.array([5.0, 50.0])},
        solution,
    )
    result.save(tmp_path / "panel.lcm")
    with pytest.raises(lcm.SavedFileError, match=r"lcm\.load_simulation_result"):
        lcm.load_solution(tmp_path / "panel.lcm", model)


def test_load_needs_a_model(saved):
    with pytest.raises(lcm.LcmError, match="model must be the lcm_eqx Model"):
        lcm.load_solution(saved, None)


# ------------------------------------------------------------------------ versions
def test_another_library_version_warns_when_the_structure_matches(model, solution, saved):
    _rewrite_header(saved, lcm_eqx_version="0.0.1")
    with pytest.warns(UserWarning, match=r"written by lcm_eqx 0\.0\.1; this is lcm_eqx"):
        loaded = lcm.load_solution(saved, model)
    _assert_same_solution(loaded, solution)
    with pytest.raises(lcm.SavedFileError, match=r"written by lcm_eqx 0\.0\.1.*has 10 points"):
        lcm.load_solution(saved, _retirement(n_wealth=12))


def test_a_newer_file_format_is_refused(model, saved):
    _rewrite_header(saved, format_version=99)
    with pytest.raises(lcm.SavedFileError, match=r"file format 99.*Upgrade lcm_eqx"):
        lcm.load_solution(saved, model)


# ------------------------------------------------------------------ corrupt files
def _truncate(at):
    return lambda data: data[: at(data)]


def _flip(at):
    def mutate(data):
        i = at(data)
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]

    return mutate


def _header_end(data):
    return PREAMBLE.size + PREAMBLE.unpack_from(data)[1]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda data: b"", "is empty"),
        (lambda data: b"not a saved solution at all", "not an lcm_eqx file"),
        (_truncate(lambda data: 5), "truncated: it ends inside the file preamble"),
        (_truncate(lambda data: 30), "truncated: it ends inside the file preamble"),
        (_truncate(lambda data: PREAMBLE.size + 20), "truncated: it ends inside the header"),
        (_truncate(lambda data: _header_end(data) + 100), "truncated: it holds 100 of the"),
        (_truncate(lambda data: len(data) - 1), "is truncated"),
        (lambda data: data + b"\0", "1 unexpected bytes follow the arrays"),
        (_flip(lambda data: PREAMBLE.size + 10), "corrupt: the header's checksum"),
        (_flip(lambda data: len(data) - 3), "corrupt: the arrays' checksum"),
        (lambda data: data[:8] + struct.pack("<Q", 1 << 40) + data[16:], "truncated"),
    ],
    ids=[
        "empty",
        "junk",
        "in-magic",
        "in-preamble",
        "in-header",
        "in-arrays",
        "last-byte",
        "extra-byte",
        "flipped-header",
        "flipped-arrays",
        "huge-header-length",
    ],
)
def test_corrupt_or_truncated_files_raise_saved_file_error(model, saved, mutate, message):
    saved.write_bytes(mutate(saved.read_bytes()))
    with pytest.raises(lcm.SavedFileError, match=message):
        lcm.load_solution(saved, model)


def test_a_zip_file_is_not_mistaken_for_a_solution(model, tmp_path):
    path = tmp_path / "solution.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", "{}")
    with pytest.raises(lcm.SavedFileError, match="not an lcm_eqx file"):
        lcm.load_solution(path, model)


def test_a_header_that_does_not_match_the_arrays_is_caught(model, saved):
    data = saved.read_bytes()
    header = json.loads(data[PREAMBLE.size : _header_end(data)])
    header["arrays"]["values"]["working"]["dtype"] = "int64"
    _rewrite_header(saved, arrays=header["arrays"])
    with pytest.raises(lcm.SavedFileError, match="the arrays could not be read"):
        lcm.load_solution(saved, model)


def test_a_missing_file_raises_file_not_found(model, tmp_path):
    with pytest.raises(FileNotFoundError):
        lcm.load_solution(tmp_path / "nothing.lcm", model)


# --------------------------------------------------------------- float32 process
FLOAT32_SCRIPT = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    import lcm_eqx as lcm
    from tests.test_persistence import _retirement
    jax.config.update("jax_enable_x64", False)
    path32, path64 = sys.argv[1:3]
    model = _retirement()
    solution = model.solve({"discount_factor": 0.98, "interest_rate": 0.0,
                            "disutility_of_work": 1.0, "wage": 20.0})
    assert solution.values["working"].dtype == np.float32
    solution.save(path32)
    loaded = lcm.load_solution(path32, model)
    for field in ("values", "violations"):
        for regime, array in getattr(solution, field).items():
            restored = getattr(loaded, field)[regime]
            assert restored.dtype == np.float32, restored.dtype
            np.testing.assert_array_equal(np.asarray(restored), np.asarray(array), strict=True)
    try:
        lcm.load_solution(path64, model)
    except lcm.SavedFileError as error:
        assert "jax_enable_x64" in str(error), error
    else:
        raise AssertionError("a float64 file loaded without 64-bit JAX")
    print("float32 ok")
""")


def test_float32_solution_in_a_32_bit_process(saved, tmp_path):
    """A natively 32-bit solve round-trips; a 64-bit file is refused there, not downcast."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_ENABLE_X64": "0"}
    done = subprocess.run(
        [sys.executable, "-c", FLOAT32_SCRIPT, str(tmp_path / "f32.lcm"), str(saved)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "float32 ok" in done.stdout


# ------------------------------------------------------------------ atomic writes
KILLED_WRITER_SCRIPT = textwrap.dedent("""
    import sys
    import time
    import jax
    from lcm_eqx import _persistence
    from tests.test_persistence import _retirement
    jax.config.update("jax_enable_x64", True)
    model = _retirement(n_wealth=4000, n_consumption=10)
    solution = model.solve({"discount_factor": 0.98, "interest_rate": 0.0,
                            "disutility_of_work": 1.0, "wage": 20.0})
    # Write in small chunks and stall after a few, so the parent can kill us mid-write.
    _persistence._CHUNK_BYTES = 16 * 1024
    real_chunks = _persistence._chunks
    written = 0
    def stalling_chunks(data):
        global written
        for chunk in real_chunks(data):
            yield chunk
            written += 1
            if written == 4:
                print("writing", flush=True)
                time.sleep(600)
    _persistence._chunks = stalling_chunks
    solution.save(sys.argv[1])
""")


@pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL")
def test_a_writer_killed_mid_write_leaves_the_previous_file(model, solution, saved):
    before = saved.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER_SCRIPT, str(saved)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = writer.stdout.readline()
        assert line.strip() == "writing", line + writer.stderr.read()
        (partial,) = saved.parent.glob(f".{saved.name}.*.tmp")
        assert partial.stat().st_size > 2 * 16 * 1024  # the new file is being written...
        assert saved.read_bytes() == before  # ...next to the untouched target
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        writer.stdout.close()
        writer.stderr.close()
    assert writer.returncode == -signal.SIGKILL
    assert saved.read_bytes() == before
    _assert_same_solution(lcm.load_solution(saved, model), solution)
    # A later save is not disturbed by the orphaned temporary file.
    doubled = jax.tree.map(lambda x: 2 * x, solution)
    doubled.save(saved)
    _assert_same_solution(lcm.load_solution(saved, model), doubled)
