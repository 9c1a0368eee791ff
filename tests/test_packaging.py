"""`pip install lcm_eqx` works from a built wheel (issue 32, item 8).

Builds the sdist and the wheel (`python -m build`, which fetches the build backend
of `pyproject.toml` from the package index, as `pip install` would), installs the wheel
without its dependencies into a folder of its own (JAX and the rest come from this
environment), and runs the quick start's model, parameters and first solve (the first
three code blocks of docs/quickstart.md) from a folder outside the repository, so that
the installed package is the one imported.
"""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tests.test_docs import python_blocks

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_and_runs_the_quick_start(tmp_path: Path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("lcm_eqx-*.whl")
    (sdist,) = dist.glob("lcm_eqx-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lcm_eqx/__init__.py" in names and "lcm_eqx/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "examples/"))]
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("lcm_eqx/_solve/_backward.py") for n in archive.getnames())

    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    blocks = [code for _, code in python_blocks((ROOT / "docs" / "quickstart.md").read_text())]
    script = tmp_path / "quickstart.py"
    script.write_text(
        "\n\n".join(blocks[:3]) + "\n\nimport lcm_eqx\nprint('installed at', lcm_eqx.__file__)\n"
    )
    run = tmp_path / "elsewhere"
    run.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "MPLBACKEND": "Agg"}
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"installed at {site}" in completed.stdout, completed.stdout
