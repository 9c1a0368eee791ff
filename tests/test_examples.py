"""The example scripts run, print, and save their figures; the plotting helpers agree with
the simulation."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# The README's main example and the smallest run in the default suite; the others (each
# one more compile of a model that other tests cover) with `-m slow` or `nox -s tests`.
EXAMPLES = (
    "tiny",
    "retirement",
    *(
        pytest.param(name, marks=pytest.mark.slow)
        for name in ("precautionary_savings", "retirement_dcegm", "epstein_zin", "olg")
    ),
)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_saves_its_figure(name):
    script = ROOT / "examples" / f"{name}.py"
    png = script.with_suffix(".png")
    png.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert completed.stdout.strip(), "the example printed nothing"
    assert png.is_file() and png.stat().st_size > 10_000, f"{png} was not written"


@pytest.mark.slow
def test_calibrate_moments_reproduces_the_targets():
    # Measured: 42 L-BFGS iterations, largest moment error 8e-14, 45 s on 2 cores.
    script = ROOT / "examples" / "calibrate_moments.py"
    png = script.with_suffix(".png")
    png.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    error = float(completed.stdout.rsplit("largest moment error", 1)[1].split(":")[1])
    assert error < 1e-6
    assert png.is_file() and png.stat().st_size > 10_000


@pytest.mark.slow
def test_consumption_floor_example_finds_the_spend_down_and_the_mass_at_the_threshold():
    """The kinked DC-EGM's policy has both kinks' signatures, and it differs from the
    solvers that do not know the kinks by what docs/solvers.md says: 1e-4 without the
    declared kinks, 1e-2 for grid search on 2,000 consumption points. Measured: 35 s
    on 2 cores (three first solves)."""
    script = ROOT / "examples" / "consumption_floor.py"
    png = script.with_suffix(".png")
    png.unlink(missing_ok=True)
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    out = completed.stdout
    assert "saves nothing (spend-down) up to cash on hand" in out
    assert "saves exactly the threshold 0.4 for cash on hand" in out
    gaps = [
        float(line.rsplit("max difference", 1)[1])
        for line in out.splitlines()
        if "max difference" in line
    ]
    assert len(gaps) == 2 and 1e-5 < gaps[0] < 1e-3 and 1e-3 < gaps[1] < 5e-2, gaps
    assert png.is_file() and png.stat().st_size > 10_000


@pytest.mark.slow
def test_olg_example_clears_markets_and_reaches_its_target():
    """examples/olg.py's printed equilibria: excess demands below 1e-10 in at most 10
    Newton steps, and the capital–output ratio calibrated to 3 (measured: excess demands
    5e-14 and 4e-16, 3 steps each; K/Y = 3.000000000000; 40–65 s on 2 shared cores)."""
    script = ROOT / "examples" / "olg.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-4000:]
    lines = completed.stdout.splitlines()
    reports = [line for line in lines if line.startswith("Newton steps:")]
    assert len(reports) == 2
    for line in reports:
        steps = int(line.split("Newton steps:")[1].split(",")[0])
        largest = float(line.rsplit(":", 1)[1])
        assert steps <= 10 and largest <= 1e-10, line
    calibrated = next(line for line in lines if line.startswith("Calibrated"))
    assert abs(float(calibrated.split("K/Y =")[1].split()[0]) - 3.0) <= 1e-10


@pytest.fixture(scope="module")
def tiny():
    """The model of examples/tiny.py, imported as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location("tiny_example", ROOT / "examples" / "tiny.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compute_policy_matches_simulation_and_solution(tiny):
    import jax

    import lcm_eqx as lcm

    model, params = tiny.model, tiny.params
    solution = model.solve(params)
    wealth = np.linspace(1.0, 50.0, 50)  # the state grid
    simulated = model.simulate(
        params,
        {"regime": np.zeros(50, dtype=int), "wealth": wealth},
        solution=solution,
        key=jax.random.key(0),
    ).to_dataframe()
    first = simulated[simulated["period"] == 0]
    actions, values = lcm.compute_policy(model, params, solution, "alive", 0, {"wealth": wealth})
    np.testing.assert_allclose(actions["consumption"], first["consumption"].to_numpy())
    np.testing.assert_allclose(values, first["value"].to_numpy(), rtol=1e-6)
    for period in range(model.n_periods):
        _, values = lcm.compute_policy(model, params, solution, "alive", period, {"wealth": wealth})
        np.testing.assert_allclose(values, solution.value("alive", period), rtol=1e-5, atol=1e-5)


def test_plots_draw_one_line_per_period_and_reject_unknown_names(tiny):
    import jax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import lcm_eqx as lcm

    model, params = tiny.model, tiny.params
    solution = model.solve(params)
    ax = lcm.plot_values(model, solution, "alive")
    assert len(ax.get_lines()) == model.n_periods
    assert ax.get_xlabel() == "wealth"
    ax = lcm.plot_policy(model, params, solution, "alive", "consumption", period=[0, 3])
    consumption_last = ax.get_lines()[1].get_ydata()
    np.testing.assert_allclose(consumption_last[:5], [1.0, 2.0, 3.0, 4.0, 5.0], atol=0.25)
    result = model.simulate(
        params,
        {"regime": np.zeros(4, dtype=int), "wealth": np.full(4, 10.0)},
        solution=solution,
        key=jax.random.key(0),
    )
    ax = lcm.plot_profiles(result, "wealth")
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata()[0], 10.0)
    with pytest.raises(lcm.LcmError, match="no state 'income'"):
        lcm.plot_values(model, solution, "alive", state="income")
    with pytest.raises(lcm.LcmError, match="no action 'labor'"):
        lcm.plot_policy(model, params, solution, "alive", "labor")
    with pytest.raises(lcm.LcmError, match="not active in period 7"):
        lcm.plot_values(model, solution, "alive", periods=[7])
    with pytest.raises(lcm.LcmError, match="unknown variables"):
        lcm.plot_profiles(result, "savings")
    plt.close("all")


@pytest.mark.slow
def test_calibrate_example_runs():
    """The vmapped calibration sweep (it prints a table and saves no figure)."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "calibrate.py")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert completed.stdout.strip(), "the example printed nothing"


@pytest.mark.slow  # minutes: the refined model's simulation and forward-mode Jacobian compile
def test_mahler_yum_estimate_recovers_the_parameters_from_the_exact_moments():
    spec = importlib.util.spec_from_file_location(
        "mahler_yum_estimate", ROOT / "examples" / "mahler_yum_estimate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--size", "tiny", "--subjects", "500"])
    result, table, check = out["result"], out["table"], out["check"]
    assert result.converged, result.message
    # Exact targets: the estimates are the truth up to the optimiser's tolerance.
    assert np.all(np.abs(table["(est - truth)/s.e."]) < 0.05)
    assert np.all(np.isfinite(table["s.e."])) and np.all(table["s.e."] > 0)
    # Every parameter moves at least four moments, by derivatives equal to central
    # differences.
    assert np.all(check["equal to CD (1e-5)"] >= 4), check


@pytest.mark.slow  # minutes, as above
def test_mahler_yum_estimate_holds_fixed_parameters_and_batches_its_tangents():
    """`--fix` holds a parameter at the truth (four are estimated), `--tangent-batch-size`
    computes the Jacobian two tangents at a time: still the truth back from the exact
    moments, with finite standard errors."""
    spec = importlib.util.spec_from_file_location(
        "mahler_yum_estimate", ROOT / "examples" / "mahler_yum_estimate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--size", "tiny", "--subjects", "500", "--no-check"]
    argv += ["--fix", "discount_factor_scale", "--tangent-batch-size", "2"]
    out = module.main(argv)
    result, table = out["result"], out["table"]
    assert result.converged, result.message
    assert list(table.index) == [n for n in module.FREE if n != "discount_factor_scale"]
    assert np.all(np.abs(table["(est - truth)/s.e."]) < 0.05)
    assert np.all(np.isfinite(table["s.e."])) and np.all(table["s.e."] > 0)
