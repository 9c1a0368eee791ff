"""Which of the library's functions each XLA kernel of a first solve comes from.

XLA:CPU compiles each kernel of a program on its own, at a roughly fixed cost (see
docs/performance.md, "Where DC-EGM's XLA compile goes"), so a first solve's compile time
follows its kernel count. This script compiles the quick start's retirement model (5
periods, wealth 100 × consumption 500, float64; `--solver dcegm`: 200 savings points;
`--solver negm`: the durable-goods model of `examples/durables.py` instead, 3 periods
at its default grids, whose program is the same at any number of periods),
with every kernel named by the functions of the solver and of the backward induction
it was traced in, and prints how many kernels each function owns, by XLA computation
(`ENTRY`: outside every loop; "loop body": the loop with the most kernels, for the
retirement model the period loop's body; the others by XLA's name, e.g. the nested
loops of Newton's method and of the upper envelope). `--list` prints every kernel.

    python benchmarks/kernel_map.py [--solver dcegm|grid|negm] [--validate raise|off] [--list]

How the names are kept (diagnostic only, not the library's behaviour): each function
below is wrapped in a `jax.named_scope`, and the library's replay of traced equations
(`_axes.bind_equation`, used by every `map_axis`) is made to carry each equation's
name stack as `jax.core.eval_jaxpr` does. The library's own replay drops them: keeping
them cost 0.03-0.05 s of the quick start's 0.22-0.24 s trace with `GridSearch` (three fresh
processes each, 2026-12-05), for names that only a profile reads. The compilation
cache is a fresh temporary folder: a cached executable keeps the names of the
program that was compiled first (the cache key ignores them).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="kernel_map_")

import jax

jax.config.update("jax_enable_x64", True)

from jax._src import source_info_util  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from lcm_eqx._solve import _axes, _backward  # noqa: E402
from lcm_eqx._solve._dcegm import _period, _solver  # noqa: E402
from lcm_eqx._solve._grid_search import GridSearch  # noqa: E402
from lcm_eqx._solve._negm import _solver as _negm  # noqa: E402
from tests.models import retirement  # noqa: E402

PREFIX = "fn_"

# The functions that name kernels, by owner: methods of DCEGM and GridSearch, and
# functions of DC-EGM's period module and of the backward induction.
NAMED = {
    _solver.DCEGM: (
        "_continuation_rows",
        "_continuation",
        "_euler_targets",
        "_inverted_rows",
        "_refine_rows",
        "_choice_values_rows",
        "_values_together",
        "_last_period_grid",
        "_with_euler_check",
        "_period_solution",
    ),
    GridSearch: ("solve_period", "value"),
    _negm.NEGM: (
        "solve",
        "_solve_rest",
        "_keeper",
        "_adjuster",
        "_next_reader",
        "_next_weights",
        "_policy_at",
        "postprocess",
    ),
    _solver: ("invert_marginals",),
    _period: ("step", "postprocess", "ungrouped", "stacked_readers", "_read_values"),
    _backward: ("_merge_checks", "_value_checks", "_collect", "_solution", "state_points"),
}


def _scoped(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.named_scope(PREFIX + name):
            return fn(*args, **kwargs)

    return wrapper


def _bind_with_names(eqn, invals: list) -> list:
    """`_axes.bind_equation` with the equation's name stack, as `eval_jaxpr` binds."""
    names = source_info_util.current_name_stack() + eqn.source_info.name_stack
    with source_info_util.user_context(eqn.source_info.traceback, name_stack=names):
        return _ORIGINAL_BIND(eqn, invals)


_ORIGINAL_BIND = _axes.bind_equation


def install_names() -> None:
    for owner, names in NAMED.items():
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, _scoped(name, getattr(owner, name)))
    _axes.bind_equation = _bind_with_names


def kernels(text: str) -> list[tuple[str, str, str]]:
    """(computation, kernel, the functions it was traced in, outermost first) of every
    kernel of a compiled program's text."""
    out, computation = [], ""
    for line in text.splitlines():
        header = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header and not line.startswith(" "):
            computation = "ENTRY" if header.group(1) else header.group(2)
            continue
        if "calls=%" not in line:
            continue
        kernel = line.split("=")[0].strip().lstrip("%").removeprefix("ROOT ").strip()
        op_name = re.search(r'op_name="([^"]+)"', line)
        scopes = re.findall(PREFIX + r"(\w+)", op_name.group(1)) if op_name else []
        out.append((computation, kernel, "/".join(scopes) or "-"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solver", choices=("dcegm", "grid", "negm"), default="dcegm")
    parser.add_argument("--validate", choices=("raise", "off"), default="raise")
    parser.add_argument("--list", action="store_true", help="every kernel, one per line")
    args = parser.parse_args()
    install_names()
    if args.solver == "negm":
        import durables

        model, params = durables.build(3, solver="negm")
    else:
        model = retirement.build(
            5, solver=retirement.dcegm(200) if args.solver == "dcegm" else None
        )
        params = retirement.PARAMS
    text = (
        model._solve.lower(params, validate=args.validate != "off", progress=None)
        .compile()
        .as_text()
    )
    rows = kernels(text)
    # The period loop's body: the computation with the most kernels besides ENTRY.
    counts = collections.Counter(c for c, _, _ in rows)
    body = max((c for c in counts if c != "ENTRY"), key=counts.__getitem__, default=None)
    label = {"ENTRY": "outside the loop", body: "loop body"}
    print(f"{args.solver}, validate={args.validate}: {len(rows)} kernels")
    for computation in counts:
        where = label.get(computation, f"nested loop {computation}")
        print(f"  {where}: {counts[computation]}")
        by_scope = collections.Counter(s for c, _, s in rows if c == computation)
        for scope, n in sorted(by_scope.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"    {n:4d}  {scope}")
    if args.list:
        for computation, kernel, scope in rows:
            print(f"{label.get(computation, computation):<20} {kernel:<44} {scope}")


if __name__ == "__main__":
    main()
