"""Nox sessions: ``nox -s tests lint typecheck benchmarks examples``."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint", "typecheck"]

ROOT = Path(__file__).parent
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs, env={"MPLBACKEND": "Agg"})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Lint and check formatting with ruff."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """Type-check the library with mypy."""
    session.install("-e", ".", "mypy")
    session.run("mypy", "--ignore-missing-imports", "lcm_eqx")


@nox.session(python=PYTHON)
def benchmarks(session: nox.Session) -> None:
    """Run the quick benchmark suite."""
    session.install("-e", ".")
    session.run("python", "benchmarks/run.py", "--quick", *session.posargs)


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """Run every example script (non-interactive matplotlib backend)."""
    session.install("-e", ".[plot]")
    scripts = sorted((ROOT / "examples").glob("*.py"))
    if not scripts:
        session.skip("no examples/*.py found")
    for script in scripts:
        session.run("python", str(script.relative_to(ROOT)), env={"MPLBACKEND": "Agg"})
