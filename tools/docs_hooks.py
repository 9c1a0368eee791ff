"""MkDocs hooks that generate the parts of the site nobody should keep in sync by hand.

- `reference.md`: one mkdocstrings entry (`::: lcm_eqx.Name`) per public name of
  `lcm_eqx/__init__.py`, grouped by the private module it comes from. A name added to
  the façade appears in the reference without editing a list.
- `examples/<name>.md`: each `examples/*.py` with its docstring, its figure (when the
  script has been run: `nox -s docs` runs them first) and its source.
- `readme.md`: the repository's README, so that the docs can link to it.
- The navigation: the known pages in reading order, then any other `docs/*.md` page
  under "Guides", so a new page is never left out of the site.

Links from the docs to files outside `docs/` (`../README.md`, `../examples/x.py`) are
rewritten to the generated pages; any other link that leaves `docs/` stays as it is and
fails the strict build.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lcm_eqx"

# Where a public name comes from (its module in `from .<module> import X as X`) decides its
# section; the first matching prefix wins, names from elsewhere go to "Other".
SECTIONS = (
    ("_model", "Models"),
    ("_facade", "Models"),
    ("_grids", "Grids"),
    ("_solve._solution", "Results"),
    ("_simulate", "Results"),
    ("_loading", "Results"),
    ("_solve", "Solvers"),
    ("_diagnostics", "Diagnostics"),
    ("_pandas", "Parameters as pandas"),
    ("_plotting", "Plots"),
    ("_estimation", "Estimation"),
    ("_equilibrium", "Equilibrium"),
    ("_errors", "Errors"),
    ("_logging", "Logging"),
)
# As a user reads: the model, its grids, the solvers, the results, estimation, errors.
SECTION_ORDER = [
    "Models",
    "Grids",
    "Solvers",
    "Results",
    "Estimation",
    "Equilibrium",
    "Errors",
    "Diagnostics",
    "Parameters as pandas",
    "Plots",
    "Logging",
    "Other",
]
# Names that open their section, in this order; the other names follow in import order,
# abstract base classes last.
FIRST = ("Model", "Regime", "MarkovTransition", "ExtremeValueShocks", "GridSearch", "DCEGM")
# The solver interface: documented on a page of its own (`solver_authors.md`), not in the
# user's reference; the concrete solvers there show no protocol methods.
SOLVER_PROTOCOL = ("AbstractSolver", "AbstractPointwiseSolver", "AbstractUpperEnvelope")
SOLVER_PROTOCOL_USERS = ("GridSearch", "DCEGM", "ExactEnvelope")

# Reading order of the hand-written pages; any other docs/*.md page joins "Guides".
GUIDES = ["quickstart.md", "models.md", "tuning.md", "estimation.md", "equilibrium.md"]
PERFORMANCE = ["performance.md", "benchmarking.md", "development_notes.md"]
CONTRIBUTORS = ["architecture.md"]
API = ["api.md", "reference.md"]
CONTRIBUTORS_GENERATED = ["solver_authors.md"]


def public_names() -> dict[str, list[str]]:
    """Public names of `lcm_eqx/__init__.py` by section, in the order they are imported.

    Read from the source (no import of JAX): every `from .<module> import X as X` whose
    name does not start with an underscore.
    """
    tree = ast.parse((ROOT / PACKAGE / "__init__.py").read_text())
    sections: dict[str, list[str]] = {title: [] for title in SECTION_ORDER}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        module = node.module or ""
        for alias in node.names:
            name = alias.asname or alias.name
            if name.startswith("_"):
                continue
            title = next(
                (title for prefix, title in SECTIONS if module.startswith(prefix)), "Other"
            )
            sections[title].append(name)
    for names in sections.values():
        names.sort(key=_reading_order)
    return {title: names for title, names in sections.items() if names}


def _reading_order(name: str) -> tuple[int, int]:
    if name in FIRST:
        return (0, FIRST.index(name))
    return (2 if name.startswith("Abstract") else 1, 0)  # a stable sort keeps the rest


def reference_markdown() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings of every public name of `lcm_eqx` "
        "(`import lcm_eqx as lcm`). For a shorter, hand-written overview with the main "
        "signatures, see the [API overview](api.md).",
        "",
    ]
    for title, names in public_names().items():
        names = [n for n in names if n not in SOLVER_PROTOCOL]
        if not names:
            continue
        lines += [f"## {title}", ""]
        for name in names:
            lines.append(f"::: {PACKAGE}.{name}")
            if name in SOLVER_PROTOCOL_USERS:  # the protocol's methods: see solver_authors
                lines += ["    options:", "      members: false"]
            lines.append("")
        if title == "Solvers":
            lines += [
                "The interface a solver implements (`AbstractSolver`) is documented in "
                "[Writing a solver](solver_authors.md).",
                "",
            ]
    return "\n".join(lines)


def solver_authors_markdown() -> str:
    lines = [
        "# Writing a solver",
        "",
        "For authors of new solvers: the interface every solver implements, and the "
        "upper-envelope interface of endogenous-grid solvers. A model's user needs none "
        "of this (see [the reference](reference.md) and [Solvers](solvers.md)). "
        "[Architecture](architecture.md) explains how the backward induction calls it.",
        "",
    ]
    for name in SOLVER_PROTOCOL:
        lines += [f"::: {PACKAGE}.{name}", ""]
    return "\n".join(lines)


def _examples() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py"))


def example_markdown(script: Path) -> str:
    docstring = ast.get_docstring(ast.parse(script.read_text())) or ""
    title, _, body = docstring.partition("\n")
    lines = [f"# `examples/{script.name}`", "", title, "", body.strip(), ""]
    if script.with_suffix(".png").is_file():
        lines += [f"![The figure of examples/{script.name}]({script.stem}.png)", ""]
    elif "savefig" in script.read_text():
        lines += [
            '!!! note "Figure"',
            f"    Run `python examples/{script.name}` (or `nox -s docs`, which runs every "
            "example before building) to draw the figure shown here.",
            "",
        ]
    lines += [
        f"Run it with `python examples/{script.name}`.",
        "",
        f'```python title="examples/{script.name}"',
        script.read_text().rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def examples_index_markdown() -> str:
    lines = ["# Examples", "", "Runnable scripts in `examples/`:", ""]
    for script in _examples():
        summary = (ast.get_docstring(ast.parse(script.read_text())) or "").partition("\n")[0]
        lines.append(f"- [`{script.name}`]({script.stem}.md): {summary}")
    return "\n".join(lines) + "\n"


def readme_markdown() -> str:
    text = (ROOT / "README.md").read_text()
    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\(examples/([A-Za-z0-9_]+)\.py\)", r"](examples/\1.md)", text)


def on_config(config, **kwargs):
    docs_dir = Path(config["docs_dir"])
    pages = sorted(p.name for p in docs_dir.glob("*.md"))
    known = {"index.md", *GUIDES, *PERFORMANCE, *CONTRIBUTORS, *API}
    guides = [p for p in GUIDES if p in pages] + [p for p in pages if p not in known]
    config["nav"] = [
        {"Home": "index.md"},
        {"Guides": guides},
        {"API": API},
        {
            "Examples": [
                "examples/index.md",
                *({s.name: f"examples/{s.stem}.md"} for s in _examples()),
            ]
        },
        {"Performance": [p for p in PERFORMANCE if p in pages]},
        {"Contributors": [p for p in CONTRIBUTORS if p in pages] + CONTRIBUTORS_GENERATED},
        {"README": "readme.md"},
    ]
    return config


def on_files(files, config, **kwargs):
    generated = {
        "reference.md": reference_markdown(),
        "solver_authors.md": solver_authors_markdown(),
        "readme.md": readme_markdown(),
        "examples/index.md": examples_index_markdown(),
        **{f"examples/{s.stem}.md": example_markdown(s) for s in _examples()},
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    for script in _examples():
        figure = script.with_suffix(".png")
        if figure.is_file():
            files.append(
                File.generated(config, f"examples/{figure.name}", abs_src_path=str(figure))
            )
    return files


_LINK = re.compile(r"\]\(((?:\.\./)+[^)#\s]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, **kwargs):
    """Point links that leave docs/ at the generated copies of README and examples."""
    if page.file.abs_src_path is None:
        return markdown
    docs_dir = Path(config["docs_dir"]).resolve()
    page_dir = Path(page.file.abs_src_path).resolve().parent

    def rewrite(match: re.Match) -> str:
        target = (page_dir / match.group(1)).resolve()
        relative = target.relative_to(ROOT) if target.is_relative_to(ROOT) else None
        if relative == Path("README.md"):
            site_target = docs_dir / "readme.md"
        elif relative is not None and relative.parent == Path("examples"):
            site_target = docs_dir / "examples" / f"{relative.stem}.md"
        else:
            return match.group(0)
        link = os.path.relpath(site_target, page_dir)
        return f"]({link}{match.group(2) or ''})"

    return _LINK.sub(rewrite, markdown)
