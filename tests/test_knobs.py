"""The tuning knobs: splay (`batch_size`) and shard (`distributed`) give the plain results.

Single-device checks run in this process. The multi-device checks need XLA_FLAGS set
before jax is imported, so they run in subprocesses started when the first test of this
module asks for them and run while the in-process tests do:

- `tests/knobs_devices.py`: 4 host CPU devices; sharded (a permanent type, a Markov
  chain, a process state, an action-dependent deterministic state), and sharded +
  splayed, solves against the plain one; value arrays span all devices; the compiled
  HLO of a solve with a never-transitioning sharded axis has no cross-device collective
  unvalidated, and validated (`jax.jit(model.solve)` as a user compiles it) only an
  all-reduce of the per-period check flags; one with a transitioning (Markov or
  process) sharded axis only all-reduces; simulation
  with a sharded solution (the panel of the unsharded simulation against the same
  values; the compiled simulation moves only per-subject results between devices and
  its per-device memory is the sharded slice's); the indivisible-grid error.
- `tests/knobs_multiprocess.py` twice: 2 processes x 2 CPU devices under
  `jax.distributed` (gloo collectives) solve with a sharded axis and simulate against
  it; the gathered values equal the single-process solve, the panels the single-process
  simulation.
"""

import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import knobs_model  # noqa: E402

TESTS = Path(__file__).parent
ROOT = TESTS.parent
TOLERANCE = 1e-12
SUBPROCESS_TIMEOUT = 480  # three subprocesses share the cores with the in-process tests


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Background:
    """The multi-device subprocesses, started once and awaited on first use."""

    def __init__(self, tmp: Path):
        env = _env()
        self.npz = tmp / "multiprocess.npz"
        self.devices_npz = tmp / "devices.npz"
        self.devices = subprocess.Popen(
            [sys.executable, str(TESTS / "knobs_devices.py"), str(self.devices_npz)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.processes = self._start_processes()
        self._report = None
        self._multiprocess = None

    def _start_processes(self) -> list[subprocess.Popen]:
        port = str(_free_port())
        return [
            subprocess.Popen(
                [sys.executable, str(TESTS / "knobs_multiprocess.py"), port, str(i), str(self.npz)],
                env=_env(),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]

    @staticmethod
    def _finish(process) -> str:
        """The output of a subprocess once it ends (a failed test if it hangs)."""
        try:
            output, _ = process.communicate(timeout=SUBPROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            pytest.fail(f"subprocess timed out:\n{output[-4000:]}")
        return output

    @classmethod
    def _wait(cls, process) -> str:
        output = cls._finish(process)
        assert process.returncode == 0, f"subprocess failed:\n{output[-4000:]}"
        return output

    def report(self) -> dict:
        if self._report is None:
            output = self._wait(self.devices)
            line = next(x for x in output.splitlines() if x.startswith("REPORT "))
            self._report = json.loads(line[len("REPORT ") :])
            with np.load(self.devices_npz) as data:
                self._report["values"] = {k: data[k] for k in data.files}
            self._report["simulated"] = pd.read_pickle(str(self.devices_npz) + ".simulated.pkl")
        return self._report

    def multiprocess(self) -> dict[str, np.ndarray]:
        if self._multiprocess is None:
            # Gloo gives a process 30 s to join a collective: on a loaded machine one
            # process can still be compiling then. That is the machine, not the code
            # under test, so the pair is started once more (any other failure fails).
            outputs = [self._finish(process) for process in self.processes]
            if any(p.returncode for p in self.processes) and any(
                "Gloo context initialization failed" in o for o in outputs
            ):
                self.processes = self._start_processes()
                outputs = [self._finish(process) for process in self.processes]
            for process, output in zip(self.processes, outputs, strict=True):
                assert process.returncode == 0, f"subprocess failed:\n{output[-4000:]}"
            with np.load(self.npz) as data:
                self._multiprocess = {k: data[k] for k in data.files}
        return self._multiprocess

    def multiprocess_panels(self) -> dict[int, pd.DataFrame]:
        self.multiprocess()
        return {b: pd.read_pickle(f"{self.npz}.sim{b}.pkl") for b in (0, 4)}

    def close(self):
        for process in (self.devices, *self.processes):
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture(scope="module", autouse=True)
def background(tmp_path_factory):
    runs = _Background(tmp_path_factory.mktemp("knobs"))
    yield runs
    runs.close()


@pytest.fixture(scope="module")
def plain():
    return knobs_model.build().solve(knobs_model.params())


def assert_same_values(values, reference):
    """`values[regime]` equal the reference solution's, -inf pattern and axis order included."""
    for regime, expected in reference.values.items():
        actual = np.asarray(values[regime])
        expected = np.asarray(expected)
        assert actual.shape == expected.shape, regime  # knobs never change the axis order
        np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
        finite = np.isfinite(expected)
        np.testing.assert_allclose(actual[finite], expected[finite], rtol=0, atol=TOLERANCE)


def simulate(model, solution, batch):
    return model.simulate(
        knobs_model.params(),
        knobs_model.initial_conditions(),  # as in tests/knobs_devices.py
        solution,
        key=jax.random.key(3),
        subject_batch_size=batch,
    ).to_dataframe()


def assert_frames_match(actual, expected, tolerance=1e-10):
    """Same rows and labels; floats equal up to rounding (the solves differ by ~1e-15)."""
    assert list(actual.columns) == list(expected.columns)
    assert len(actual) == len(expected) > 0
    for column in expected.columns:
        x, y = actual[column], expected[column]
        if y.dtype.kind == "f":
            np.testing.assert_allclose(x.values, y.values, rtol=0, atol=tolerance, err_msg=column)
        else:
            pd.testing.assert_series_equal(x, y)


# --------------------------------------------------------------------------- splay


@pytest.mark.parametrize(
    ("knobs", "validate"),
    [
        # a state axis, chunks that do not divide the grid; unvalidated (empty checks)
        ({"wealth_batch": 5}, "off"),
        ({"consumption_batch": 7, "labor_batch": 1}, "raise"),  # action axes
        # several state axes and an action axis splayed together
        (
            {"wealth_batch": 6, "skill_batch": 2, "income_batch": 2, "consumption_batch": 10},
            "raise",
        ),
    ],
    ids=["state", "actions", "composed"],
)
def test_splay_matches_plain(knobs, validate, plain):
    solution = knobs_model.build(**knobs).solve(knobs_model.params(), validate=validate)
    assert_same_values(solution.values, plain)
    assert solution.value("working", 0).shape == (24, 4, 4)  # wealth, income, skill


def _temp_bytes(model) -> int:
    compiled = model._solve.lower(knobs_model.params(), validate=True, progress=None).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.slow
def test_action_splay_keeps_one_chunk_live():
    """A splayed action axis is maximised chunk by chunk (a running max over the chunks),
    so the compiled temp memory falls with the chunk size instead of holding every
    action's value before the max (XLA's own memory analysis)."""
    plain = _temp_bytes(knobs_model.build())
    halves = _temp_bytes(knobs_model.build(consumption_batch=15))
    fifths = _temp_bytes(knobs_model.build(consumption_batch=6))
    assert halves <= 0.5 * plain, (halves, plain)
    assert fifths <= halves, (fifths, halves)


_BIT_IDENTICAL_CHILD = """
import jax
import numpy as np
jax.config.update("jax_enable_x64", True)
import knobs_model
params = knobs_model.params()
knobs = {"wealth_batch": 6, "skill_batch": 2, "income_batch": 2, "consumption_batch": 10}
plain = knobs_model.build().solve(params)
splayed = knobs_model.build(**knobs).solve(params)
for name, value in plain.values.items():
    a, b = np.asarray(value), np.asarray(splayed.values[name])
    assert np.array_equal(a, b, equal_nan=True), (name, np.nanmax(np.abs(a - b)))
print("identical")
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA flag")
def test_splay_changes_values_only_by_fma_contraction():
    """Splayed and plain solves are the same arithmetic: in float64 and without FMA
    instructions (`--xla_cpu_max_isa=SSE4_2`) their values are bit-identical. With FMA,
    LLVM may contract an interpolation's multiply-add in one program's kernel and not in
    the other's (a difference of an ULP, see docs/performance.md)."""
    env = _env()
    env["XLA_FLAGS"] = "--xla_cpu_max_isa=SSE4_2"
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env["PYTHONPATH"]])
    result = subprocess.run(
        [sys.executable, "-c", _BIT_IDENTICAL_CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 0 and "identical" in result.stdout, result.stderr[-4000:]


# --------------------------------------------------------------------------- guards


def test_distributed_continuous_grid_is_rejected():
    with pytest.raises(lcm.GridInitializationError, match="only valid on discrete"):
        lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=4, distributed=True)


def test_splayed_and_sharded_axis_is_rejected():
    with pytest.raises(lcm.GridInitializationError, match="both splayed and sharded"):
        lcm.DiscreteGrid(["a", "b"], batch_size=1, distributed=True)


def test_negative_batch_size_is_rejected():
    with pytest.raises(lcm.GridInitializationError, match="batch_size"):
        lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=4, batch_size=-1)


def test_distributed_action_is_rejected():
    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(start=1.0, stop=2.0, n_points=3)},
        actions={"labor": lcm.DiscreteGrid(["work", "rest"], distributed=True)},
        functions={"utility": lambda wealth, labor: wealth - labor},
        state_transitions={"wealth": lambda wealth: wealth},
        transition=lambda: 0,
    )
    with pytest.raises(lcm.ModelInitializationError, match=r"action 'labor'.*reduced"):
        lcm.Model(regimes={"only": regime}, n_periods=2)


def test_sharding_on_one_device_is_the_plain_solve(plain):
    if jax.device_count() != 1:
        pytest.skip("needs a single-device process")
    solution = knobs_model.build(skill_distributed=True).solve(knobs_model.params())
    assert_same_values(solution.values, plain)


# --------------------------------------------------------------------------- shard (4 devices)


@pytest.mark.parametrize("case", ["skill", "income", "skill+splay"])
def test_sharded_solve_matches_plain(case, background, plain):
    report = background.report()
    assert report["device_count"] == 4
    result = report[case]
    assert_same_values({r: report["values"][f"{case}/{r}"] for r in plain.values}, plain)
    assert result["shapes"] == {"dead": [4], "retired": [4, 24, 4], "working": [4, 24, 4, 4]}
    # The value arrays stay sharded: they span all 4 devices, split along the sharded axis.
    assert result["devices"]["working"] == 4
    assert result["period_value_devices"] == 4
    axis = "income" if case == "income" else "skill"
    position = {"wealth": 1, "income": 2, "skill": 3}[axis]
    assert result["spec"]["working"][position] == axis
    if axis == "skill":
        assert result["spec"]["retired"][2] == "skill"


def test_never_transitioning_sharded_axis_needs_no_collective(background):
    result = background.report()["skill"]
    assert result["collectives"] == []  # the solve without checks
    assert result["user"]["off"] == []  # jax.jit(partial(model.solve, validate="off"))


def _small(collectives, user):
    """At most `n_periods x n_checks` elements: the reduced check flags."""
    return all(size <= knobs_model.N_PERIODS * user["n_checks"] for _, size in collectives)


@pytest.mark.parametrize("case", ["skill", "income"])
def test_validation_moves_only_its_flags_across_devices(case, background):
    """`jax.jit(model.solve)` as a user compiles it (default validation): the checks add
    only an all-reduce of the per-period flags, never a gather or anything value-sized."""
    result = background.report()[case]
    validated, unvalidated = result["user"]["raise"], result["user"]["off"]
    assert all(kind != "all-gather" for kind, _ in validated)
    added = list(validated)
    for collective in unvalidated:
        added.remove(collective)  # everything the unvalidated solve has is still there
    assert added and all(kind == "all-reduce" for kind, _ in added)
    assert _small(added, result["user"])
    if case == "skill":
        assert result["validated_collectives"] == ["all-reduce"]


def test_validated_simulate_moves_only_flags_across_devices(background):
    """`jax.jit(model.simulate)` solving inside: the simulation reads each device's own
    block of the sharded value arrays, so validated or not, only all-reduces of
    per-subject results and check flags cross devices (XLA may fuse them into one)."""
    result = background.report()["skill"]["simulate_user"]
    for validate in ("off", "raise"):
        assert all(kind == "all-reduce" for kind, _ in result[validate]), validate
        assert _small(result[validate], result), validate
    assert len(result["raise"]) > len(result["off"])  # the flags


def test_transitioning_sharded_axis_only_all_reduces(background):
    result = background.report()["income"]
    assert "all-gather" not in result["collectives"]
    assert set(result["collectives"]) <= {"all-reduce", "reduce-scatter"}
    assert result["collectives"]  # the contraction over the chain does sum across devices


def test_sharded_process_state_only_all_reduces(background):
    report = background.report()
    values = report["values"]
    assert_same_values(
        {"only": values["process/sharded"]}, _Values({"only": values["process/plain"]})
    )
    assert report["process"]["devices"] == 4 and report["process"]["spec"][2] == "z"
    assert report["process"]["collectives"] == ["all-reduce"]


def test_sharded_axis_with_action_dependent_transition_is_still_correct(background):
    # The kernel reads next values at codes chosen by the action: XLA gathers the
    # array across devices (allowed for this kind of axis), and the values are right.
    report = background.report()
    values = report["values"]
    assert_same_values(
        {"only": values["deterministic/sharded"]}, _Values({"only": values["deterministic/plain"]})
    )
    assert report["deterministic"]["devices"] == 4


class _Values:
    def __init__(self, values):
        self.values = values


def test_simulate_with_sharded_solution(background, plain):
    report = background.report()
    assert report["simulate"]["batch_invariant"]  # subject_batch_size 0 and 4 agree
    # The unsharded simulation's choices against the same values, chunked or not, and its
    # values to rounding: it reads the pieces that subjects share from tables computed
    # once (`GridSearch.subject_chooser`), the sharded one evaluates them at each state.
    assert report["simulate"]["choices_exact"] == [True, True]
    assert report["simulate"]["value_difference"] <= TOLERANCE
    assert_frames_match(report["simulated"], simulate(knobs_model.build(), plain, 0))


def test_sharded_simulate_moves_only_per_subject_results(background):
    """The compiled simulation against a solution with a sharded permanent type: each
    device reads its own block; only all-reduces of per-subject results (10 subjects) and
    of a NaN flag cross devices, nothing of a value array's size."""
    program = background.report()["simulate"]["program"]
    n_subjects = 10
    assert program["collectives"]
    assert all(kind == "all-reduce" and size <= n_subjects for kind, size in program["collectives"])
    assert program["value_elements"] > n_subjects


def test_sharded_simulate_memory_is_the_slice(background):
    """XLA's per-device memory of the simulation program: the value arrays enter as
    quarters (8 types over 4 devices) and the temporaries shrink with them."""
    memory = background.report()["simulate"]["memory"]
    sharded, unsharded = memory["sharded"], memory["unsharded"]
    subjects = 4096  # the initial conditions and keys, replicated on every device
    assert sharded["argument"] <= unsharded["argument"] / 4 + subjects
    assert sharded["temp"] < unsharded["temp"] / 2
    total = lambda m: m["argument"] + m["temp"]
    assert total(sharded) < 0.4 * total(unsharded)


def test_simulate_with_sharded_chain(background):
    """A sharded income chain: the simulation reads the pre-contracted continuation on
    the subject's device (the contraction sums across devices, as in the solve, so values
    agree to rounding); choices and states are those of the unsharded simulation."""
    result = background.report()["income"]["simulate"]
    assert result["choices_exact"] == [True, True]
    assert result["value_difference"] <= TOLERANCE
    assert all(kind == "all-reduce" for kind, _ in result["program"]["collectives"])


def test_indivisible_sharded_grid_raises_at_solve(background):
    kind, message = background.report()["indivisible"]
    assert kind == "ModelInitializationError"
    assert "'skill' (3 points" in message and "4 devices" in message


# --------------------------------------------------------------------------- 2 processes


def test_two_process_sharded_solve_matches_single_process(background, plain):
    gathered = background.multiprocess()
    assert set(gathered) == set(plain.values)
    assert_same_values(gathered, plain)


def test_two_process_simulate_matches_single_process(background, plain):
    """2 processes simulate against their sharded solution; the panel is the
    single-process simulation against the same values, in one pass and in chunks: the
    same choices, values to rounding (the single process reads the pieces subjects share
    from tables, `GridSearch.subject_chooser`)."""
    gathered = background.multiprocess()
    same_values = eqx.tree_at(lambda s: s.values, plain, gathered)
    expected = simulate(knobs_model.build(), same_values, 0)
    for batch, panel in background.multiprocess_panels().items():
        pd.testing.assert_frame_equal(
            panel.drop(columns="value"),
            expected.drop(columns="value"),
            check_exact=True,
            obj=f"batch {batch}",
        )
        assert_frames_match(panel, expected, tolerance=TOLERANCE)
    assert_frames_match(expected, simulate(knobs_model.build(), plain, 0))
