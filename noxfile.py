"""Nox sessions: ``nox -s tests lint typecheck benchmarks examples docs asv``."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint", "typecheck"]

ROOT = Path(__file__).parent
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the whole test suite, the tests marked slow included (`nox -s tests -- -m
    "not slow"` runs what the README's command and CI run)."""
    session.install("-e", ".[test]")
    # A `-m` in the arguments comes later, so it wins over this one.
    session.run("python", "-m", "pytest", "-m", "", *session.posargs, env={"MPLBACKEND": "Agg"})


@nox.session(python=PYTHON)
@nox.parametrize("pandas", ["<3", ">=3"], ids=["pandas2", "pandas3"])
def pandas_versions(session: nox.Session, pandas: str) -> None:
    """The code that reads and writes pandas (data, moments, labelled parameters,
    estimation) under pandas 2 and 3: `nox -s pandas_versions`."""
    session.install("-e", ".[test]", f"pandas{pandas}")
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        "2",
        "tests/test_estimate.py",
        "tests/test_grammar_params.py",
        "tests/test_pandas.py",
        *session.posargs,
        env={"MPLBACKEND": "Agg"},
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Lint and check formatting with ruff."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """Type-check the library with mypy and pyright (basic mode; both configured in
    pyproject.toml), then the package as a user sees it (tests/test_typing.py: a wheel
    with py.typed, a user's script checked against it)."""
    session.install("-e", ".[test]")
    session.run("mypy", "lcm_eqx")
    session.run("pyright")
    session.run(
        "python", "-m", "pytest", "-q", "tests/test_typing.py", "-k", "user_script or py_typed"
    )


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


def _figure_scripts() -> list[Path]:
    return [p for p in sorted((ROOT / "examples").glob("*.py")) if "savefig" in p.read_text()]


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ (strict: any warning fails the build).

    The examples that draw a figure run first, so their pages show it. `nox -s docs --
    serve` serves the site with live reload instead.
    """
    session.install("-e", ".[docs,plot]")
    for script in _figure_scripts():
        session.run("python", str(script.relative_to(ROOT)), env={"MPLBACKEND": "Agg"})
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(python=PYTHON)
def asv(session: nox.Session) -> None:
    """Benchmark the current commit with asv in this session's environment, then write
    the HTML to .asv/html (see docs/benchmarking.md). Extra arguments go to `asv run`;
    the default is a `--quick` run (each benchmark once)."""
    session.install("-e", ".[bench]")
    commit = session.run("git", "rev-parse", "HEAD", silent=True, external=True).strip()
    session.run("asv", "machine", "--yes")
    session.run(
        "asv",
        "run",
        "--python=same",
        "--set-commit-hash",
        commit,
        "--show-stderr",
        *(session.posargs or ["--quick"]),
    )
    session.run("asv", "publish")
