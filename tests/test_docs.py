"""Every ```python block in README.md and docs/*.md runs.

Each file's blocks run in order in one fresh namespace, in a subprocess per file (cwd: a
temporary folder, so saved plots do not litter; matplotlib without a display). Blocks
meant not to run are fenced as ```text or ```bash.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# Pages whose blocks fit and solve several models (each a long compile): `-m slow`.
SLOW_DOCUMENTS = {
    ROOT / "docs" / name
    for name in (
        "estimation.md",
        "solvers.md",
        "models.md",
        "coming_from_pylcm.md",
        "budget_kinks.md",
        "equilibrium.md",
    )
}
# Pages that tools/docs_hooks.py generates when the site is built (tests/test_docs_site.py
# builds it and checks every link, these included).
GENERATED_PAGES = {ROOT / "docs" / "reference.md"}
TIMEOUT_S = 300

RUNNER = """
import json
import sys
import traceback

source, blocks_file = sys.argv[1], sys.argv[2]
with open(blocks_file) as f:
    blocks = json.load(f)
namespace = {"__name__": "__main__"}
for number, (line, code) in enumerate(blocks, start=1):
    try:
        exec(compile(code, f"{source} (block {number}, line {line})", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"{source}: python block {number} (starting at line {line}) failed",
              file=sys.stderr)
        sys.exit(1)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown text, with the line each starts on."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if current is None:
            if re.fullmatch(r"```\s*python\s*", stripped):
                current, start = [], number + 1
        elif stripped == "```":
            blocks.append((start, "\n".join(current) + "\n"))
            current = None
        else:
            current.append(line)
    if current is not None:
        raise ValueError(f"unclosed ```python block starting at line {start}")
    return blocks


def test_block_extraction():
    text = "x\n```python\na = 1\n```\n```text\nnot code\n```\n```python\nb = a\n```\n"
    assert python_blocks(text) == [(3, "a = 1\n"), (9, "b = a\n")]


@pytest.mark.parametrize(
    "document",
    [pytest.param(d, marks=pytest.mark.slow) if d in SLOW_DOCUMENTS else d for d in DOCUMENTS],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_python_blocks_run(document: Path, tmp_path: Path):
    blocks = python_blocks(document.read_text())
    if not blocks:
        pytest.skip("no python blocks")
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(blocks))
    runner = tmp_path / "run_blocks.py"
    runner.write_text(RUNNER)
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    name = str(document.relative_to(ROOT))
    completed = subprocess.run(
        [sys.executable, str(runner), name, str(blocks_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert completed.returncode == 0, (
        f"{name}: a python block failed\n{completed.stderr[-4000:]}\n{completed.stdout[-1000:]}"
    )


def test_relative_links_resolve():
    broken = []
    for document in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (document.parent / target).resolve()
            if not path.exists() and path not in GENERATED_PAGES:
                broken.append(f"{document.relative_to(ROOT)} -> {target}")
    assert not broken, "broken relative links:\n" + "\n".join(broken)
