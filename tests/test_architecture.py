"""The package's layering, checked by reading its source (no import of `lcm_eqx`).

STYLE.md's "data below, algorithms above" as six rules, each one test that names every
violation as ``file:line``:

1. no import cycle between the package's modules at run time (imports under
   ``if TYPE_CHECKING:`` do not run, function-local ones do), nor among the imports of
   the type annotations (those under ``if TYPE_CHECKING:`` too: a lower layer takes a
   structural type, such as `_protocols.ModelLike`, not the class above it);
2. no private name imported across modules (``from .x import _name``; a private
   *module* such as ``from . import _config`` is the house style and allowed);
3. no type test against a concrete solver outside that solver's own module or folder:
   solvers choose behaviour through the interface, never by being recognised;
4. no call of another object's private method (``obj._method(...)``, ``obj`` not
   ``self``/``cls``/``super()``);
5. no ``noqa: E402`` in an ``__init__.py``: JAX is configured by importing a module;
6. no function-local import of the package's own modules, except the few in
   `LOCAL_IMPORTS_ALLOWED`, each with its reason;
7. no import from a solver's folder (`lcm_eqx/_solve/<family>/`) outside it, except by
   the public façade (`lcm_eqx/__init__.py`): the rest of the package reaches a solver
   through the interface only;
8. no module over `MAX_LINES` lines (one room, one job), except those in
   `LONG_MODULES_LEFT`, each at most its recorded length: the list only shrinks;
9. the parameters' normalisation (`NORMALISATION`) imported only where parameters
   enter (`NORMALISING_MODULES`): every layer below takes the normal form, or asks a
   model for it (`ModelLike.checked_params`).

A violation anywhere fails; `python tests/test_architecture.py` lists them all.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = "lcm_eqx"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# (importing module, imported module) -> why the import cannot sit at the top.
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}

# The abstract solver interfaces: a class deriving from one of them, directly or through
# another class of the package, is a solver; one whose name is not ``Abstract…`` is
# concrete (and final, by the house rule).
SOLVER_BASES = frozenset({"AbstractSolver"})

# Private-looking methods that are public API of the standard library (namedtuples).
PUBLIC_UNDERSCORE_METHODS = frozenset({"_replace", "_asdict", "_make"})

# (file, called expression) -> why another library's private method is called.
PRIVATE_CALLS_ALLOWED: dict[tuple[str, str], str] = {
    ("lcm_eqx/_logging.py", "jitted._cache_size"): (
        "JAX has no public count of a jitted function's compiled programs, which the "
        "timing log uses to say 'compiled a new program'; guarded by AttributeError"
    ),
}


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement's edge from `module` to the package module `target`."""

    module: str
    target: str
    names: tuple[str, ...]  # names taken from `target` by ``from target import ...``
    file: str
    line: int
    local: bool  # inside a function body


@dataclasses.dataclass(frozen=True)
class Violation:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Module:
    name: str
    file: str  # relative to the repository root, with forward slashes
    tree: ast.Module
    source: str

    @property
    def is_package(self) -> bool:
        return self.file.endswith("__init__.py")


@cache
def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        source = path.read_text()
        file = path.relative_to(ROOT.parent).as_posix()
        found[".".join(parts)] = Module(
            ".".join(parts), file, ast.parse(source, filename=file), source
        )
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(
    node: ast.AST, *, in_function: bool = False, typing: bool = False
) -> Iterator[tuple[ast.AST, bool]]:
    """Every node that runs when its module is imported or its functions are called.

    Yields ``(node, in_function)``; skips the body of ``if TYPE_CHECKING:`` (its ``else``
    runs), unless `typing` (every node: what a type checker reads).
    """
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test) and not typing:
            for other in child.orelse:
                yield other, in_function
                yield from _runtime_nodes(other, in_function=in_function)
            continue
        inner = in_function or isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        yield child, in_function
        yield from _runtime_nodes(child, in_function=inner, typing=typing)


def _resolve(module: Module, level: int, name: str | None) -> str:
    """The absolute name of a (possibly relative) import's module."""
    if level == 0:
        return name or ""
    base = module.name.split(".")
    base = base if module.is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


@cache
def imports(typing: bool = False) -> tuple[Import, ...]:
    """The imports that run (`typing`: and those under ``if TYPE_CHECKING:``)."""
    known = modules()
    edges = []
    for module in known.values():
        for node, local in _runtime_nodes(module.tree, typing=typing):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        edges.append(
                            Import(module.name, alias.name, (), module.file, node.lineno, local)
                        )
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node.level, node.module)
                if target.split(".")[0] != PACKAGE:
                    continue
                names = tuple(alias.name for alias in node.names)
                # ``from pkg import submodule`` imports the submodule itself.
                submodules = [n for n in names if f"{target}.{n}" in known]
                others = tuple(n for n in names if f"{target}.{n}" not in known)
                for sub in submodules:
                    edges.append(
                        Import(module.name, f"{target}.{sub}", (), module.file, node.lineno, local)
                    )
                if others or not submodules:
                    edges.append(
                        Import(module.name, target, others, module.file, node.lineno, local)
                    )
    return tuple(edges)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of `graph` with more than one node or a self-edge."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def import_cycles(typing: bool = False) -> list[Violation]:
    graph: dict[str, set[str]] = {}
    for edge in imports(typing):
        if edge.target in modules() and edge.target != edge.module:
            graph.setdefault(edge.module, set()).add(edge.target)
    found = []
    for component in _strongly_connected(graph):
        members = " <-> ".join(sorted(component))
        for edge in imports(typing):
            if edge.module in component and edge.target in component:
                kind = "local import" if edge.local else "import"
                kind = f"{kind} (with the types')" if typing else kind
                found.append(
                    Violation(
                        edge.file,
                        edge.line,
                        f"{kind} of {edge.target} closes the cycle {members}",
                    )
                )
    return found


def private_imports() -> list[Violation]:
    return [
        Violation(edge.file, edge.line, f"imports private {name} from {edge.target}")
        for edge in imports()
        for name in edge.names
        if name.startswith("_") and not name.startswith("__")
    ]


def _class_bases(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


@cache
def concrete_solvers() -> dict[str, str]:
    """Concrete solver class name -> the module or folder where it may be type-tested."""
    classes = {
        node.name: (module, _class_bases(node))
        for module in modules().values()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ClassDef)
    }

    def is_solver(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in SOLVER_BASES:
            return True
        if name not in classes or name in seen:
            return False
        return any(is_solver(base, seen | {name}) for base in classes[name][1])

    solvers = {}
    for name, (module, _) in classes.items():
        if name.startswith("Abstract") or name in SOLVER_BASES or not is_solver(name):
            continue
        # A solver family in its own folder under _solve/ owns the whole folder.
        parts = module.file.split("/")
        solvers[name] = (
            "/".join(parts[:3]) + "/" if len(parts) > 3 and parts[1] == "_solve" else module.file
        )
    return solvers


def _named_classes(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Tuple):
        for element in node.elts:
            yield from _named_classes(element)
    elif isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr


def concrete_solver_type_tests() -> list[Violation]:
    solvers = concrete_solvers()
    found = []
    for module in modules().values():
        for node, _ in _runtime_nodes(module.tree):
            tested: list[str] = []
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"isinstance", "issubclass"}
                and len(node.args) == 2
            ):
                tested = list(_named_classes(node.args[1]))
            elif isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Is | ast.IsNot | ast.Eq | ast.NotEq) for op in node.ops
            ):
                sides = [node.left, *node.comparators]
                if any(
                    isinstance(side, ast.Call)
                    and isinstance(side.func, ast.Name)
                    and side.func.id == "type"
                    for side in sides
                ):
                    tested = [name for side in sides for name in _named_classes(side)]
            elif isinstance(node, ast.MatchClass):
                tested = list(_named_classes(node.cls))
            for name in tested:
                home = solvers.get(name)
                if (
                    home is None
                    or module.file == home
                    or (home.endswith("/") and module.file.startswith(home))
                ):
                    continue
                found.append(
                    Violation(
                        module.file,
                        node.lineno,
                        f"type test against the concrete solver {name} (defined in {home})",
                    )
                )
    return found


def foreign_private_calls() -> list[Violation]:
    found = []
    for module in modules().values():
        for node, _ in _runtime_nodes(module.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method, owner = node.func.attr, node.func.value
            if (
                not method.startswith("_")
                or method.startswith("__")
                or method in PUBLIC_UNDERSCORE_METHODS
            ):
                continue
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
                continue
            if (
                isinstance(owner, ast.Call)
                and isinstance(owner.func, ast.Name)
                and owner.func.id in {"super", "type"}
            ):
                continue
            called = ast.unparse(node.func)
            if (module.file, called) not in PRIVATE_CALLS_ALLOWED:
                found.append(Violation(module.file, node.lineno, f"calls {called}(...)"))
    return found


def init_noqa_e402() -> list[Violation]:
    return [
        Violation(module.file, number, "noqa: E402 (configure JAX by importing a module)")
        for module in modules().values()
        if module.is_package
        for number, text in enumerate(module.source.splitlines(), start=1)
        if "noqa: E402" in text
    ]


def local_imports() -> list[Violation]:
    return [
        Violation(edge.file, edge.line, f"function-local import of {edge.target}")
        for edge in imports()
        if edge.local and (edge.module, edge.target) not in LOCAL_IMPORTS_ALLOWED
    ]


def solver_folder_imports() -> list[Violation]:
    folders = {home for home in concrete_solvers().values() if home.endswith("/")}
    found = []
    for edge in imports():
        target = modules().get(edge.target)
        if target is None or edge.file == f"{PACKAGE}/__init__.py":
            continue
        for folder in folders:
            if target.file.startswith(folder) and not edge.file.startswith(folder):
                found.append(
                    Violation(edge.file, edge.line, f"imports {edge.target} from {folder}")
                )
    return found


MAX_LINES = 800

# Modules allowed over `MAX_LINES`, with their length when recorded (a module may shrink,
# never grow, and leaves the list once it fits). Empty since issue 64's splits: the last
# two were `RegimeProblem` (its prepared continuations to `_solve/_prepared.py`) and
# DC-EGM's solver class (one choice's step to `_egm.py`, its passes to `_passes.py`).
LONG_MODULES_LEFT: dict[str, int] = {}


def long_modules() -> list[Violation]:
    found = []
    for module in modules().values():
        n = module.source.count("\n")
        allowed = LONG_MODULES_LEFT.get(module.file, MAX_LINES)
        if n > allowed:
            found.append(Violation(module.file, n, f"{n} lines, over {allowed}"))
    for file in LONG_MODULES_LEFT:
        n = next((m.source.count("\n") for m in modules().values() if m.file == file), 0)
        if n <= MAX_LINES:
            found.append(Violation(file, n, f"{n} lines: take it off LONG_MODULES_LEFT"))
    return found


def type_import_cycles() -> list[Violation]:
    return import_cycles(typing=True)


# The functions that normalise and check a user's parameters, and the modules where
# parameters enter the package (the façade, and `estimate`, which keeps the user's own
# spelling for its result).
NORMALISATION = frozenset({"coerce_params", "arrays_from_series", "check_params"})
NORMALISING_MODULES = frozenset({"lcm_eqx._facade", "lcm_eqx._estimation._estimate"})


def normalisation_imports() -> list[Violation]:
    return [
        Violation(edge.file, edge.line, f"imports {name} (the façade normalises parameters)")
        for edge in imports(typing=True)
        for name in edge.names
        if name in NORMALISATION
        and edge.module not in NORMALISING_MODULES
        and edge.module not in ("lcm_eqx._model._params", "lcm_eqx._pandas")  # their own
    ]


CHECKS = {
    "import_cycles": import_cycles,
    "type_import_cycles": type_import_cycles,
    "private_imports": private_imports,
    "concrete_solver_type_tests": concrete_solver_type_tests,
    "foreign_private_calls": foreign_private_calls,
    "init_noqa_e402": init_noqa_e402,
    "local_imports": local_imports,
    "solver_folder_imports": solver_folder_imports,
    "long_modules": long_modules,
    "normalisation_imports": normalisation_imports,
}


@pytest.mark.parametrize("check", list(CHECKS))
def test_layers(check: str) -> None:
    violations = CHECKS[check]()
    assert not violations, f"{len(violations)} violation(s) of {check}:\n" + "\n".join(
        map(str, sorted(violations, key=lambda v: (v.file, v.line)))
    )


if __name__ == "__main__":
    for check, run in CHECKS.items():
        for violation in sorted(run(), key=lambda v: (v.file, v.line)):
            print(f"[{check}] {violation}")
