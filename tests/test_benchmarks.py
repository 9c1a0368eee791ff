"""The benchmark suite's smoke run (`benchmarks/run.py --quick`) works and reports every
number it promises. It asserts structure, never wall-clock times."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_benchmark_run(tmp_path):
    output = tmp_path / "quick.json"
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--json", str(output)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    rows = {row["model"]: row for row in json.loads(output.read_text())["rows"]}
    assert set(rows) == {"retirement", "precautionary", "large"}
    for row in rows.values():
        for key in (
            "compile_s",
            "solve_s",
            "simulate_s",
            "temp_bytes",
            "evaluations_per_s",
            "compile_ratio_96_to_6",
            "cache_cold_compile_s",
            "cache_warm_compile_s",
        ):
            assert row[key] is not None and row[key] > 0, (row["model"], key)
    assert rows["retirement"]["solve_ratio_library_to_reference"] > 0
    assert rows["retirement"]["solve_ratio_library_to_tuned_reference"] > 0
    assert "library/reference" in completed.stdout
    dcegm = json.loads(output.read_text())["dcegm"]["retirement"]
    for key in ("dcegm_steady_s", "grid_steady_s", "dcegm_simulate_s", "dcegm_temp_bytes"):
        assert dcegm[key] is not None and dcegm[key] > 0, key
    assert "DC-EGM" in completed.stdout


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
