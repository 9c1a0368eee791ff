"""Static types: the library passes mypy and pyright (basic mode), and a user's script is
type-checked against the package as installed (a wheel, with its `py.typed` marker), not
against the source tree.

Run the same checks with `nox -s typecheck`. The caches live in temporary folders, so
each run is cold (about 10 s for each checker on two cores).
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300

# A user's script: every public call below must type-check, with the types asserted.
GOOD = """
from typing import assert_type

import jax
import jax.numpy as jnp

import lcm_eqx as lcm

wealth = lcm.LinSpacedGrid(start=1.0, stop=50.0, n_points=20)
assert_type(wealth, lcm.LinSpacedGrid)
assert_type(lcm.DiscreteGrid(["bad", "good"]), lcm.DiscreteGrid)
assert_type(lcm.IrregSpacedGrid(points=[0.0, 1.0, 3.0]), lcm.IrregSpacedGrid)
solver = lcm.GridSearch()
assert_type(solver, lcm.GridSearch)

alive = lcm.Regime(
    states={"wealth": wealth},
    actions={"consumption": lcm.LinSpacedGrid(start=1.0, stop=50.0, n_points=40)},
    functions={"utility": lambda consumption: jnp.log(consumption)},
    state_transitions={
        "wealth": lambda wealth, consumption, interest_rate: (1 + interest_rate)
        * (wealth - consumption)
    },
    transition=lambda: 0,
    constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
)
model = lcm.Model(regimes={"alive": alive}, n_periods=3, solver=solver)
params = {"discount_factor": 0.95, "interest_rate": 0.03}

solution = model.solve(params, validate="warn", progress=True)
assert_type(solution, lcm.Solution)
assert_type(solution.value("alive", 0), jax.Array)
result = model.simulate(
    params,
    {"regime": jnp.zeros(4, dtype=int), "wealth": jnp.linspace(1.0, 40.0, 4)},
    solution,
    key=jax.random.key(0),
)
assert_type(result, lcm.SimulationResult)
assert_type(lcm.load_solution("solution.lcm", model), lcm.Solution)
assert_type(lcm.choice_probabilities(model, params, solution, "alive", 0), jax.Array)
"""

# Deliberately wrong calls, one per line marked `# wrong`.
BAD = """
import lcm_eqx as lcm


def check(model: lcm.Model, solution: lcm.Solution) -> None:
    lcm.LinSpacedGrid(start=1.0, stop=50.0, n_points="20")  # wrong
    solution.value(0, "alive")  # wrong
    panel: lcm.Solution = model.simulate({}, {})  # wrong
    model.solve({}, progress=None)  # wrong
    lcm.load_solution(3, model)  # wrong
"""


def _run(command: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.mark.slow
def test_mypy_is_clean_on_the_library(tmp_path: Path):
    completed = _run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "lcm_eqx"], ROOT
    )
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]


@pytest.mark.slow
def test_pyright_basic_is_clean_on_the_library():
    pytest.importorskip("pyright", reason="pyright[nodejs] is in the test extra")
    # The configuration (basic mode, lcm_eqx only) is [tool.pyright] in pyproject.toml.
    completed = _run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable],
        ROOT,
    )
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert "0 errors" in completed.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package built as a wheel and installed into a folder of its own."""
    site = tmp_path_factory.mktemp("site-packages")
    build = tmp_path_factory.mktemp("build")
    shutil.copytree(
        ROOT, build / "src", ignore=shutil.ignore_patterns(".*", "build", "site", "*.egg-info")
    )
    completed = _run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(build / "src")],
        build,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert (site / "lcm_eqx" / "py.typed").is_file(), "the wheel does not ship py.typed"
    return site


def _mypy_user_scripts(site: Path, folder: Path, *scripts: str) -> str:
    """mypy's report on `scripts` in `folder`, outside the source tree, with the installed
    copy first on the path (mypy treats it as an installed package: py.typed required)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "MYPYPATH"}}
    env["PYTHONPATH"] = str(site)
    completed = _run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(folder / ".cache"),
         "--no-error-summary", "--show-error-codes", *scripts],
        folder,
        env,
    )  # fmt: skip
    assert completed.returncode in (0, 1), completed.stderr[-4000:]
    return completed.stdout


@pytest.mark.slow
def test_user_script_type_checks_against_the_installed_package(installed: Path, tmp_path):
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    report = _mypy_user_scripts(installed, tmp_path, "good.py", "bad.py")

    good_errors = [line for line in report.splitlines() if line.startswith("good.py")]
    assert not good_errors, report
    expected = {
        number
        for number, line in enumerate(textwrap.dedent(BAD).splitlines(), start=1)
        if line.endswith("# wrong")
    }
    flagged = {int(m) for m in re.findall(r"^bad\.py:(\d+): error", report, flags=re.MULTILINE)}
    assert flagged == expected, report


@pytest.mark.slow
def test_without_py_typed_mypy_does_not_read_the_package(installed: Path, tmp_path):
    """The check above depends on the marker: without it, mypy skips the package."""
    untyped = tmp_path / "site-packages"
    shutil.copytree(installed / "lcm_eqx", untyped / "lcm_eqx")
    (untyped / "lcm_eqx" / "py.typed").unlink()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "script.py").write_text("import lcm_eqx\n")
    report = _mypy_user_scripts(untyped, tmp_path / "user", "script.py")
    assert "py.typed" in report and "import-untyped" in report, report
