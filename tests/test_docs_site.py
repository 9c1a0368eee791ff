"""The documentation site builds in strict mode, and its API reference has an entry for
every public name of `lcm_eqx`.

Strict mode turns every warning into a failure: a broken link or anchor, a page left out
of the navigation, a docstring whose arguments do not match the signature, a reference
that mkdocstrings cannot resolve. The build takes a few seconds (no JAX import: the
reference is read from the source by griffe).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lcm_eqx

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120


def _build(config_dir: Path, site_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=config_dir,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _public_names() -> set[str]:
    return {
        name
        for name, value in vars(lcm_eqx).items()
        if not name.startswith("_") and type(value).__name__ != "module"
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    completed = _build(ROOT, site_dir)
    assert completed.returncode == 0, completed.stderr[-6000:]
    return site_dir


def test_reference_has_an_anchor_for_every_public_name(site: Path):
    html = (site / "reference" / "index.html").read_text()
    anchors = set(re.findall(r'id="lcm_eqx\.([A-Za-z_][A-Za-z0-9_]*)"', html))
    # The solver interface has a page of its own, for solver authors.
    authors = (site / "solver_authors" / "index.html").read_text()
    protocol = set(re.findall(r'id="lcm_eqx\.([A-Za-z_][A-Za-z0-9_]*)"', authors))
    missing = sorted(_public_names() - anchors - protocol)
    assert not missing, f"the API reference has no entry for {missing}"
    assert {"AbstractSolver", "AbstractPointwiseSolver"} <= protocol - anchors
    # A user's reference starts with the model: the first entries are Model and Regime.
    first = re.findall(r'id="lcm_eqx\.([A-Z][A-Za-z0-9_]*)"', html)[:2]
    assert first == ["Model", "Regime"], first
    assert "applies_to" not in html.split('id="lcm_eqx.DCEGM"')[1].split('id="lcm_eqx.')[0]


def test_site_has_every_page_and_the_search_index(site: Path):
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    built = {p.parent.name for p in site.glob("*/index.html")}
    assert pages - {"index"} <= built
    examples = {p.stem for p in (ROOT / "examples").glob("*.py")}
    assert examples <= {p.parent.name for p in (site / "examples").glob("*/index.html")}
    index = (site / "search" / "search_index.json").read_text()
    assert '"location":"reference/#lcm_eqx.Model"' in index.replace(" ", "")


def test_strict_build_fails_on_a_broken_link(tmp_path: Path):
    """The same configuration, with one more page that links to a missing page."""
    for name in ("lcm_eqx", "examples", "tools", "README.md"):
        (tmp_path / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "docs" / "broken.md").write_text("# Broken\n\nSee [nowhere](nowhere.md).\n")
    completed = _build(tmp_path, tmp_path / "site")
    assert completed.returncode != 0
    assert "nowhere.md" in completed.stderr
