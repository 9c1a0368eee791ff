"""Compile time against the number of regimes and the number of user functions.

    python benchmarks/compile_regimes.py            # 1 / 3 / 6 regimes, 1 / 4 / 16 helpers
    python benchmarks/compile_regimes.py --quick    # 1 / 3 regimes, 1 / 4 helpers (smoke)
    python benchmarks/compile_regimes.py --transition deterministic --no-kernels
    python benchmarks/compile_regimes.py --solver dcegm --regimes 1 8 --functions 1

Two families of models that share their structure, each measured in a fresh process with
the persistent compilation cache off (tracing, lowering and XLA compilation timed
separately: `model._solve.trace(...)`, `.lower()`, `.compile()`), the fastest of
`--rounds` processes:

- **regimes**: `k` copies of a working regime (wealth x consumption, log utility, a
  wage) and a terminal regime. `--transition stochastic` (default): a `MarkovTransition`
  to every copy alike and to the terminal regime with probability `1 - survival`;
  `deterministic`: copy `i` moves to copy `i + 1` (the last to the first).
- **functions**: one working regime and the terminal regime, its utility the sum of `k`
  helper functions of consumption and wealth in the DAG (each a separate user function).

`--solver dcegm` solves the working regimes with `DCEGM` (savings on `n_wealth` points
from 0; the helpers then read consumption only, as DC-EGM's utility must). Each child
also times the compiled solve (`steady_s`: the fastest of 5 calls after a first one).

The number of XLA kernels of the solve's program is the number of `*ir-with-opt.ll`
files XLA:CPU writes under `XLA_FLAGS=--xla_dump_to=DIR`, counted in yet another fresh
process (dumping slows the compile, so it is not timed); `--no-kernels` skips it. Prints
a table and writes JSON (`benchmarks/results/compile_regimes.json` by default).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from enum import IntEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks._timing, when run as a script

SIZES = {
    "full": {
        "regimes": (1, 3, 6),
        "functions": (1, 4, 16),
        "n_wealth": 200,
        "n_consumption": 400,
        "n_periods": 5,
        "rounds": 3,
    },
    "quick": {
        "regimes": (1, 3),
        "functions": (1, 4),
        "n_wealth": 20,
        "n_consumption": 40,
        "n_periods": 3,
        "rounds": 1,
    },
}

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
import jax
jax.config.update("jax_enable_compilation_cache", False)
from benchmarks import compile_regimes
model, params = compile_regimes.build(**spec["model"])
jax.block_until_ready(jax.numpy.zeros(1) + 1)  # JAX start-up, not the solve
t0 = time.perf_counter()
traced = model._solve.trace(params, validate=True, progress=None)
t1 = time.perf_counter()
lowered = traced.lower()
t2 = time.perf_counter()
lowered.compile()
t3 = time.perf_counter()
jax.block_until_ready(model.solve(params))
steady = []
for _ in range(5):
    t4 = time.perf_counter()
    jax.block_until_ready(model.solve(params))
    steady.append(time.perf_counter() - t4)
print(json.dumps({"trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2,
                  "total_s": t3 - t0, "steady_s": min(steady)}))
"""


def _function(name: str, args: list[str], body: str):
    """A function with these argument names (the DAG resolves arguments by name)."""
    import jax.numpy as jnp

    namespace = {"jnp": jnp}
    exec(f"def {name}({', '.join(args)}):\n    return {body}\n", namespace)
    return namespace[name]


def build(
    n_regimes: int = 1,
    n_functions: int = 1,
    transition: str = "stochastic",
    n_periods: int = 5,
    n_wealth: int = 200,
    n_consumption: int = 400,
    solver: str = "grid",
):
    """`n_regimes` copies of a working regime (utility from `n_functions` helpers) and a
    terminal regime `dead`; with its params."""
    import jax.numpy as jnp

    import lcm_eqx as lcm

    names = [f"work_{i}" for i in range(n_regimes)]
    ids = IntEnum("RegimeId", {name: i for i, name in enumerate([*names, "dead"])})
    wealth = lcm.LinSpacedGrid(1.0, 100.0, n_wealth)
    consumption = lcm.LinSpacedGrid(1.0, 100.0, n_consumption)
    parts = [f"part_{j}" for j in range(n_functions)]
    # DC-EGM's utility reads the action only.
    wealth_term = "" if solver == "dcegm" else " + {} * wealth"
    functions = {
        part: _function(
            part,
            ["consumption"] if solver == "dcegm" else ["consumption", "wealth"],
            f"jnp.log(consumption + {0.01 * j}) / {n_functions}" + wealth_term.format(1e-4 * j),
        )
        for j, part in enumerate(parts)
    }
    dcegm = lcm.DCEGM(
        state="wealth",
        action="consumption",
        savings=lcm.IrregSpacedGrid(
            points=[100.0 * (i / (n_wealth - 1)) ** 2 for i in range(n_wealth)]
        ),
    )
    functions["utility"] = _function("utility", parts, " + ".join(parts))
    functions["income"] = lambda wage: wage
    regimes = {}
    for i, name in enumerate(names):
        if transition == "stochastic":
            rule = lcm.MarkovTransition(
                lambda survival, k=n_regimes: jnp.concatenate(
                    [jnp.full(k, survival / k), jnp.array([1.0 - survival])]
                )
            )
        else:
            rule = (lambda target: lambda: target)(ids[names[(i + 1) % n_regimes]])
        regimes[name] = lcm.Regime(
            states={"wealth": wealth},
            actions={"consumption": consumption},
            functions=dict(functions),
            state_transitions={
                "wealth": lambda wealth, consumption, income, interest_rate: (
                    (1 + interest_rate) * (wealth - consumption) + income
                )
            },
            transition=rule,
            constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
            solver=dcegm if solver == "dcegm" else None,
        )
    regimes["dead"] = lcm.Regime(functions={"utility": lambda: 0.0})
    params = {"discount_factor": 0.95, "interest_rate": 0.02, "wage": 5.0}
    if transition == "stochastic":
        params["survival"] = 0.97
    return lcm.Model(regimes, n_periods, regime_ids=ids), params


def run_child(model_spec: dict, dump: str | None = None) -> dict:
    """Trace / lower / compile times in a fresh interpreter with an empty cache; with
    `dump`, XLA writes its dumps there."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        if dump is not None:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip()
        completed = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), json.dumps({"model": model_spec})],
            capture_output=True,
            text=True,
            env=env,
        )
    if completed.returncode != 0:
        raise RuntimeError(f"child {model_spec} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def count_kernels(model_spec: dict) -> int:
    """XLA:CPU kernels of the solve's program: its `*ir-with-opt.ll` dump files."""
    with tempfile.TemporaryDirectory() as dump:
        run_child(model_spec, dump)
        return sum(
            1 for f in os.listdir(dump) if "solve_model" in f and f.endswith("ir-with-opt.ll")
        )


def measure(configs: list[dict], rounds: int, kernels: bool) -> list[dict]:
    """Each config's fastest round (by total), rounds interleaved over the configs."""
    runs: list[list[dict]] = [[] for _ in configs]
    for _ in range(rounds):
        for i, config in enumerate(configs):
            runs[i].append(run_child(config))
    rows = []
    for config, results in zip(configs, runs, strict=True):
        row = {**config, **min(results, key=lambda r: r["total_s"])}
        row["kernels"] = count_kernels(config) if kernels else None
        rows.append(row)
    return rows


def print_table(title: str, key: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(
        f"{key:>12}{'trace s':>9}{'lower s':>9}{'compile s':>11}{'total s':>9}"
        f"{'steady ms':>11}{'kernels':>9}"
    )
    for row in rows:
        kernels = "-" if row["kernels"] is None else str(row["kernels"])
        print(
            f"{row[key]:>12}{row['trace_s']:>9.2f}{row['lower_s']:>9.2f}"
            f"{row['compile_s']:>11.2f}{row['total_s']:>9.2f}{1e3 * row['steady_s']:>11.2f}"
            f"{kernels:>9}",
            flush=True,
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 / 3 regimes, 1 / 4 helpers")
    parser.add_argument("--regimes", type=int, nargs="+", default=None)
    parser.add_argument("--functions", type=int, nargs="+", default=None)
    parser.add_argument(
        "--transition", choices=("stochastic", "deterministic"), default="stochastic"
    )
    parser.add_argument("--solver", choices=("grid", "dcegm"), default="grid")
    parser.add_argument("--rounds", type=int, default=None, help="fresh processes per point")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel counts")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benchmarks/results/compile_regimes.json"
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    config = SIZES[mode]
    shape = {k: config[k] for k in ("n_periods", "n_wealth", "n_consumption")}
    regimes = args.regimes or config["regimes"]
    functions = args.functions or config["functions"]
    rounds = args.rounds or config["rounds"]
    common = {"transition": args.transition, "solver": args.solver, **shape}
    by_regimes = [{"n_regimes": k, "n_functions": 1, **common} for k in regimes]
    by_functions = [{"n_regimes": 1, "n_functions": k, **common} for k in functions]
    # The base model (1 regime, 1 helper) is in both families: measure it once.
    unique = {json.dumps(c, sort_keys=True): c for c in [*by_regimes, *by_functions]}
    measured = measure(list(unique.values()), rounds, not args.no_kernels)
    found = {json.dumps({k: r[k] for k in by_regimes[0]}, sort_keys=True): r for r in measured}
    rows_regimes = [found[json.dumps(c, sort_keys=True)] for c in by_regimes]
    rows_functions = [found[json.dumps(c, sort_keys=True)] for c in by_functions]
    print_table(
        f"{args.solver}: working regimes (+ a terminal one), {args.transition} transition, "
        "1 helper",
        "n_regimes",
        rows_regimes,
    )
    print_table("helper functions in the utility, 1 working regime", "n_functions", rows_functions)
    from benchmarks._timing import write_results

    write_results(
        args.json,
        mode,
        rounds,
        {
            **shape,
            "transition": args.transition,
            "solver": args.solver,
            "by_regimes": rows_regimes,
            "by_functions": rows_functions,
        },
    )


if __name__ == "__main__":
    main()
