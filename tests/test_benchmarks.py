"""The benchmark suite's smoke run (`benchmarks/run.py --quick`) works and reports every
number it promises. It asserts structure, never wall-clock times."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A guard against a hung run, not a time limit (tests never assert wall-clock times): a
# loaded machine took longer than the 600 s this once was. `LCM_TEST_SUBPROCESS_TIMEOUT_S`
# overrides it.
TIMEOUT_S = float(os.environ.get("LCM_TEST_SUBPROCESS_TIMEOUT_S", 3600))


@pytest.mark.slow
def test_quick_benchmark_run(tmp_path):
    output = tmp_path / "quick.json"
    completed = _run("run.py", "--quick", "--json", str(output))
    rows = {row["model"]: row for row in json.loads(output.read_text())["rows"]}
    assert set(rows) == {"retirement", "precautionary", "large"}
    for row in rows.values():
        for key in ("compile_s", "solve_s", "simulate_s", "temp_bytes", "evaluations_per_s"):
            assert row[key] is not None and row[key] > 0, (row["model"], key)
    # A quick run compiles in fresh processes (by horizon, with the persistent cache) for
    # the first model only.
    for key in ("compile_ratio_96_to_6", "cache_cold_compile_s", "cache_warm_compile_s"):
        assert rows["retirement"][key] is not None and rows["retirement"][key] > 0, key
    assert rows["retirement"]["solve_ratio_library_to_reference"] > 0
    assert rows["retirement"]["solve_ratio_library_to_tuned_reference"] > 0
    assert "library/reference" in completed.stdout
    dcegm = json.loads(output.read_text())["dcegm"]["retirement"]
    for key in ("dcegm_steady_s", "grid_steady_s", "dcegm_simulate_s", "dcegm_temp_bytes"):
        assert dcegm[key] is not None and dcegm[key] > 0, key
    assert "DC-EGM" in completed.stdout
    overhead = json.loads(output.read_text())["overhead"]
    assert [(r["model"], r["dtype"]) for r in overhead["rows"]] == [("retirement", "float64")]
    assert overhead["rows"][0]["steady"]["overhead_ms"] is not None
    regimes = json.loads(output.read_text())["compile_regimes"]
    assert [r["n_regimes"] for r in regimes["by_regimes"]] == [1, 3]
    assert "overhead.py" in completed.stdout and "compile_regimes.py" in completed.stdout


def test_asv_suite_builds_every_benchmark_model():
    """The asv suite (benchmarks/asv/) finds its models and sizes; it is run by `nox -s asv`,
    not here. Building a model compiles nothing."""
    from benchmarks.asv import lifecycle

    classes = [lifecycle.Solve, lifecycle.Simulate, lifecycle.Gradient, lifecycle.Compile]
    for cls in classes:
        assert cls.params == lifecycle.MODEL_NAMES
        methods = [m for m in vars(cls) if m.startswith(("time_", "peakmem_", "track_"))]
        assert methods, cls
    for name in lifecycle.MODEL_NAMES:
        model, params, sizes = lifecycle._model(name)
        assert model.n_periods == sizes["n_periods"]
        assert params


def _run(script: str, *options: str) -> subprocess.CompletedProcess:
    """`benchmarks/<script> <options>` in a subprocess from the repository root; it must
    exit 0."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *options],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


def _run_script(tmp_path, script: str, *options: str) -> tuple[dict, str]:
    output = tmp_path / "out.json"
    completed = _run(script, *options, "--json", str(output))
    return json.loads(output.read_text()), completed.stdout


@pytest.mark.slow
def test_overhead_quick(tmp_path):
    """`benchmarks/overhead.py --quick`: cold start (first call, its trace / lower /
    compile split, programs compiled) and steady per-call times, float64 retirement, and
    the quick start's cold-start model."""
    result, stdout = _run_script(tmp_path, "overhead.py", "--quick", "--rounds", "2")
    (row,) = result["rows"]
    assert (row["model"], row["dtype"]) == ("retirement", "float64")
    for key in ("first_s", "trace_s", "lower_s", "compile_s", "second_s"):
        assert row["cold"][key] > 0, key
    assert row["cold"]["n_compiled"] >= 1
    for key in (
        "solve_s",
        "jit_s",
        "compiled_s",
        "reference_s",
        "ratio_solve_to_jit",
        "ratio_solve_to_reference",
    ):
        assert row["steady"][key] > 0, key
    assert "overhead_ms" in row["steady"]
    api = result["api_cold_start"]
    assert (api["n_periods"], api["n_wealth"], api["n_consumption"]) == (5, 100, 500)
    assert not api["taste_shocks"] and api["dtype"] == "float64"
    for key in ("first_s", "trace_s", "lower_s", "compile_s"):
        assert api[key] > 0, key
    assert "The quick start's retirement model" in stdout


@pytest.mark.slow
def test_compile_regimes_quick(tmp_path):
    """`benchmarks/compile_regimes.py`: trace / lower / compile times and kernel counts
    against regimes and user functions (two points, one process each)."""
    result, stdout = _run_script(
        tmp_path, "compile_regimes.py", "--quick", "--regimes", "2", "--functions", "2"
    )
    assert [r["n_regimes"] for r in result["by_regimes"]] == [2]
    assert [r["n_functions"] for r in result["by_functions"]] == [2]
    for row in (*result["by_regimes"], *result["by_functions"]):
        for key in ("trace_s", "lower_s", "compile_s", "total_s"):
            assert row[key] > 0, key
        assert row["kernels"] >= 1
    assert "n_regimes" in stdout and "n_functions" in stdout


def test_kernel_map_names_the_kernels():
    """`benchmarks/kernel_map.py`: every kernel of the compiled first solve is listed
    once, and the functions it was traced in survive the library's replay of traced
    equations (else every kernel would be unattributed, `-`)."""
    completed = _run("kernel_map.py", "--solver", "grid", "--list")
    lines = completed.stdout.splitlines()
    total = int(lines[0].split(": ")[1].split()[0])
    listed = lines[-total:]
    assert len(listed) == total and all(len(line.split()) >= 3 for line in listed)
    scopes = [line.split()[-1] for line in listed]
    # The period loop's kernels are named too, not only those outside it.
    in_loop = [line.split()[-1] for line in listed if line.startswith("loop body")]
    assert any(s.startswith("solve_period/value") for s in in_loop)
    assert sum(s != "-" for s in scopes) >= total // 2


def _kernel_cost_sections(what: str, n_lines: int) -> list[tuple[list[str], bool]]:
    """`benchmarks/kernel_costs.py what` with two copies, one round: each emitter's
    lines (`n_lines` of them), and whether it is the loop emitters' section (where each
    copy is exactly one fusion)."""
    completed = _run("kernel_costs.py", what, "--copies", "2", "--rounds", "1")
    sections = completed.stdout.split("MLIR fusion emitters")
    assert len(sections) == 2
    out = []
    for section, exact in zip(sections, (True, False), strict=True):
        lines = [line for line in section.splitlines() if line.startswith("  ")]
        assert len(lines) == n_lines
        out.append((lines, exact))
    return out


def test_kernel_costs_counts_each_kind():
    """`benchmarks/kernel_costs.py kinds`: a line per kind of kernel and emitter, each
    program of copies holding one fusion per copy under DC-EGM's loop emitters (the
    copies were not merged by XLA, so the difference per copy is one kernel's compile),
    except the lone broadcasts (no fusion)."""
    for lines, exact in _kernel_cost_sections("kinds", 10):
        for line in lines:
            if line.strip().startswith("broadcast of a constant"):
                continue
            fusions = int(line.split("(")[-1].split()[0])
            assert fusions == 2 if exact else fusions >= 2, line


def test_kernel_costs_keeps_identical_copies_apart():
    """`benchmarks/kernel_costs.py reuse`: a line per kind and emitter, and both the
    differing and the identical copies compiled as one fusion (or, for a reduction
    that the MLIR emitters split, the same number) per copy: XLA merged none of them,
    so what an identical copy costs is what compiling a kernel seen before costs."""
    for lines, exact in _kernel_cost_sections("reuse", 3):
        for line in lines:
            differing, identical = (
                int(part.split("(")[-1].split()[0]) for part in line.split("identical")
            )
            assert differing == identical, line
            assert differing == 2 if exact else differing >= 2, line


def test_compile_profile_reads_the_compilers_events():
    """`benchmarks/compile_profile.py` sums the profiler's events of one compile by name:
    the compiler's own are among them, and the compiled HLO comes back."""
    import jax
    import jax.numpy as jnp

    from benchmarks.compile_profile import compile_events

    # Every event (a busy machine may put the short compile below other events' time).
    result = compile_events(lambda: jax.jit(lambda x: jnp.sin(x) * 2.0).lower(1.0), top=10_000)
    names = [name for name, _, _ in result["events"]]
    assert any("ompile" in name for name in names), names
    assert all(count > 0 and ms >= 0 for _, count, ms in result["events"])
    assert "sine" in result["hlo"]
    assert result["compile_s"] > 0


def test_accelerator_layout_forms_flatten_alike():
    """`benchmarks/accelerator_layout.py` times one flatten written in several forms: each
    gives numpy's row-major flatten of the product (the index forms, its two integer
    columns), so the timings compare the same work."""
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.accelerator_layout import forms

    shape = (3, 2, 4, 2, 2)
    rng = np.random.default_rng(0)
    a = rng.uniform(1.0, 5.0, shape[:-2]).astype(np.float32)
    b = rng.uniform(1.0, 5.0, shape[-2:]).astype(np.float32)
    expected = (a[..., None, None] * b).reshape(-1)
    found = forms(shape)
    for name in ("direct", "barrier", "flatfirst", "iota"):
        np.testing.assert_allclose(found[name](jnp.asarray(a), jnp.asarray(b)), expected, rtol=1e-6)
    columns = np.stack([expected.astype(np.int32), (2 * expected).astype(np.int32)], -1)
    np.testing.assert_array_equal(found["stack_index"](jnp.asarray(a), jnp.asarray(b)), columns)
    np.testing.assert_array_equal(found["stack_index_T"](jnp.asarray(a), jnp.asarray(b)), columns.T)


def test_accelerator_layout_scatter_forms_agree():
    """The flow-scatter forms `benchmarks/accelerator_layout.py` times add the same mass
    at the same codes as a numpy loop."""
    import numpy as np

    from benchmarks.accelerator_layout import flow_inputs, scatter_forms

    spec = ((3, 2), (2,), 2, (4, 3), 2)
    mass, p, w, codes, dense = (np.asarray(x, np.float64) for x in flow_inputs(*spec, seed=1))
    codes = codes.astype(int)
    expected = np.zeros((4, 3, 2))
    for i in np.ndindex(3, 2, 2, 2):
        expected[tuple(codes[i])] += mass[i[:2]] * p[i[:3]] * w[i] * dense[i[:3]]
    args = flow_inputs(*spec, seed=1)
    for name, form in scatter_forms(*spec).items():
        np.testing.assert_allclose(form(*args), expected, rtol=1e-5, err_msg=name)
