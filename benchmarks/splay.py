"""Splay (`batch_size`) on the three models of the knobs issue: time and memory ratios.

For each model, solves with `batch_size=0` and with the state axis splayed into 2 and
into many chunks, and prints XLA's compiled temp memory, the steady solve time (median of
interleaved rounds, so that a drift in machine load affects every variant alike) and
their ratios to the unsplayed solve, and the largest difference of the value arrays.

- `alive`: an alive/dead model, wealth 300 x consumption 1,000, a 3-state Markov income
  and mortality, 6 periods, float64; wealth splayed in 2 and 10 chunks;
- `alive_actions`: the same model with the consumption (action) axis splayed instead;
- `retirement`: the benchmark's retirement model (`benchmarks/_models.py`), wealth
  splayed in 2 and 10 chunks;
- `large`: the benchmark's large model, wealth splayed in 2 and 8 chunks.

    python benchmarks/splay.py [--models alive,alive_actions,retirement,large] [--rounds 7]
                               [--quick] [--json PATH]

`--quick` uses small sizes (a smoke run). The retirement and large models run in the
dtype of the process: pass `--x64` for float64 (the alive model is always float64, as in
the issue, and runs in a child process when `--x64` is not given).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from enum import IntEnum
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class AliveDead(IntEnum):
    alive = 0
    dead = 1


def alive_model(n_wealth: int, n_consumption: int, n_periods: int, batch_size: int):
    import jax.numpy as jnp

    import lcm_eqx as lcm

    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(0.1, 50.0, n_wealth, batch_size=batch_size),
            "income": lcm.DiscreteGrid(["low", "mid", "high"]),
        },
        actions={"consumption": lcm.LinSpacedGrid(0.1, 50.0, n_consumption)},
        functions={
            "utility": lambda consumption: jnp.log(consumption),
            "earnings": lambda income: jnp.asarray([0.5, 1.0, 1.5])[income],
        },
        state_transitions={
            "wealth": lambda wealth, consumption, earnings: (
                1.03 * (wealth - consumption) + earnings
            ),
            "income": lcm.MarkovTransition(
                lambda income, income_transition: income_transition[income]
            ),
        },
        transition=lcm.MarkovTransition(lambda survival: jnp.stack([survival, 1 - survival])),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: jnp.asarray(0.0)})
    return lcm.Model({"alive": alive, "dead": dead}, n_periods, regime_ids=AliveDead)


ALIVE_PARAMS = {
    "discount_factor": 0.95,
    "income_transition": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]],
    "survival": 0.97,
}


def variants(name: str, quick: bool):
    """`(params, {label: model})` of one case: unsplayed, 2 chunks, many chunks."""
    from benchmarks import _models

    if name in ("alive", "alive_actions"):
        n_wealth, n_consumption, n_periods = (30, 100, 3) if quick else (300, 1000, 6)
        chunks = (2, 10)
        if name == "alive_actions":  # the consumption (action) axis splayed instead
            base = alive_model(n_wealth, n_consumption, n_periods, 0)
            models = {"unsplayed": base}
            for c in chunks:
                models[f"{c} chunks"] = base.with_batch_size("consumption", n_consumption // c)
            return ALIVE_PARAMS, models
        models = {
            f"{c} chunks" if c else "unsplayed": alive_model(
                n_wealth, n_consumption, n_periods, n_wealth // c if c else 0
            )
            for c in (0, *chunks)
        }
        return ALIVE_PARAMS, models
    if name == "retirement":
        sizes = (
            {"n_periods": 3, "n_wealth": 40, "n_consumption": 100}
            if quick
            else {"n_periods": 10, "n_wealth": 1000, "n_consumption": 5000}
        )
        base, params, chunks = _models._retirement(**sizes), _models.RETIREMENT_PARAMS, (2, 10)
    else:
        sizes = (
            {"n_periods": 2, "n_wealth": 40, "n_consumption": 40}
            if quick
            else {"n_periods": 3, "n_wealth": 1000, "n_consumption": 1000}
        )
        base, params, chunks = _models._large(**sizes), _models.LARGE_PARAMS, (2, 8)
    n_wealth = sizes["n_wealth"]
    models = {"unsplayed": base}
    for c in chunks:
        models[f"{c} chunks"] = base.with_batch_size("wealth", n_wealth // c)
    return params, models


def measure(name: str, quick: bool, rounds: int) -> dict:
    from benchmarks._timing import interleaved, max_abs_diff

    params, models = variants(name, quick)
    compiled = {
        label: m._solve.lower(params, validate=True, progress=None).compile()
        for label, m in models.items()
    }
    outputs = {label: jax.block_until_ready(c(params)) for label, c in compiled.items()}
    times = interleaved({label: (lambda c=c: c(params)) for label, c in compiled.items()}, rounds)
    base_values = outputs["unsplayed"].values
    rows = []
    for label, c in compiled.items():
        memory = c.memory_analysis()
        diff = max_abs_diff(outputs[label].values, base_values)
        rows.append(
            {
                "variant": label,
                "temp_bytes": memory.temp_size_in_bytes if memory else None,
                "solve_s": statistics.median(times[label]),
                "max_abs_diff": diff,
            }
        )
    base = rows[0]
    for row in rows:
        row["time_ratio"] = row["solve_s"] / base["solve_s"]
        row["temp_ratio"] = (
            row["temp_bytes"] / base["temp_bytes"]
            if row["temp_bytes"] and base["temp_bytes"]
            else None
        )
    dtype = "float64" if jax.config.jax_enable_x64 else "float32"
    return {"model": name, "dtype": dtype, "rounds": rounds, "rows": rows}


def print_case(case: dict) -> None:
    print(f"\n{case['model']} ({case['dtype']}, median of {case['rounds']} interleaved rounds)")
    print(f"{'variant':>10} {'temp MiB':>9} {'x':>6} {'solve ms':>9} {'x':>6} {'max|dv|':>9}")
    for row in case["rows"]:
        temp = (row["temp_bytes"] or 0) / 2**20
        ratio = row["temp_ratio"] if row["temp_ratio"] is not None else float("nan")
        print(
            f"{row['variant']:>10} {temp:>9.1f} {ratio:>6.3f} {row['solve_s'] * 1e3:>9.1f} "
            f"{row['time_ratio']:>6.2f} {row['max_abs_diff']:>9.1e}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="alive,alive_actions,retirement,large")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    cases = []
    for name in args.models.split(","):
        if name.startswith("alive") and not args.x64:
            # float64 needs a process of its own (x64 is set before any array exists).
            command = [sys.executable, __file__, "--x64", "--models", name, "--json", "-"]
            command += ["--rounds", str(args.rounds)] + (["--quick"] if args.quick else [])
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            case = json.loads(out.strip().splitlines()[-1])[0]
        else:
            case = measure(name, args.quick, args.rounds)
        cases.append(case)
        if args.json != Path("-"):
            print_case(case)
    if args.json == Path("-"):
        print(json.dumps(cases))
    elif args.json is not None:
        args.json.write_text(json.dumps(cases, indent=2))


if __name__ == "__main__":
    main()
