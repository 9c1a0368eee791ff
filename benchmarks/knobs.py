"""The tuning knobs: splay (`batch_size`) and shard (`distributed`) on a large model.

The model has a `working` regime with wealth (continuous), a permanent 4-type skill
axis, labor (2) and consumption actions, and an absorbing `retired` regime. With the
defaults (1000 wealth x 4 types x 2 labor x 2000 consumption) `working` evaluates 1.6e7
state-action points per period.

Splay: for `batch_size` in {0, n/2, n/4, n/8, n/32} on the wealth axis, prints XLA's
compiled temporary memory (`compiled.memory_analysis().temp_size_in_bytes`), compile time
and steady-state solve time (median of `--repeats` runs, `block_until_ready`, the
configurations interleaved round by round), and their
ratios to `batch_size=0`.

Shard: with `--devices N` (on CPU this sets XLA_FLAGS to N host devices before jax is
imported; on GPU it uses the first N real devices), also solves with the skill axis
sharded over the devices and prints the speedup over the unsharded solve.

    python benchmarks/knobs.py [--n-wealth 1000] [--n-consumption 2000] [--devices 4]
                               [--x64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-wealth", type=int, default=1000)
    parser.add_argument("--n-consumption", type=int, default=2000)
    parser.add_argument("--n-types", type=int, default=4)
    parser.add_argument("--n-periods", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--devices", type=int, default=0, help="also shard the skill axis over this many devices"
    )
    parser.add_argument(
        "--divisors",
        type=str,
        default="2,4,8,32",
        help="batch sizes n_wealth // d for these d (plus batch_size=0)",
    )
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


ARGS = parse()
if ARGS.devices > 1 and "--xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
    # Only affects the CPU platform; must be set before jax is imported.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.devices}"
    ).strip()

import jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax.numpy as jnp  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import interleaved, max_abs_diff  # noqa: E402

if ARGS.x64:
    jax.config.update("jax_enable_x64", True)
# The persistent cache would make later compiles look free.
jax.config.update("jax_enable_compilation_cache", False)


def build(
    n_wealth: int,
    n_consumption: int,
    n_types: int,
    n_periods: int,
    *,
    wealth_batch: int = 0,
    distributed: bool = False,
) -> lcm.Model:
    wealth = lcm.LinSpacedGrid(1.0, 400.0, n_wealth, batch_size=wealth_batch)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, n_consumption)
    skill = lcm.DiscreteGrid([f"type{i}" for i in range(n_types)], distributed=distributed)

    def utility(consumption, labor, disutility_of_work):
        return jnp.log(consumption) - disutility_of_work * (labor == 0)

    def next_wealth(wealth, consumption, labor, skill, wage, interest_rate):
        income = jnp.where(labor == 0, wage[skill], 0.0)
        return (1 + interest_rate) * (wealth - consumption) + income

    working = lcm.Regime(
        states={"wealth": wealth, "skill": skill},
        actions={"labor": lcm.DiscreteGrid(["work", "retire"]), "consumption": consumption},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth, "skill": lambda skill: skill},
        transition=lambda labor: jnp.where(labor == 0, 0, 1),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    retired = lcm.Regime(
        states={"wealth": wealth, "skill": skill},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption, interest_rate: (
                (1 + interest_rate) * (wealth - consumption)
            ),
            "skill": lambda skill: skill,
        },
        transition=lambda: 1,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model(regimes={"working": working, "retired": retired}, n_periods=n_periods)


def params(n_types: int) -> dict:
    return {
        "discount_factor": 0.98,
        "interest_rate": 0.02,
        "disutility_of_work": 1.0,
        "wage": jnp.linspace(10.0, 30.0, n_types),
    }


def compile_model(model: lcm.Model, p: dict) -> dict:
    start = time.perf_counter()
    compiled = model._solve.lower(p, validate=True).compile()
    compile_s = time.perf_counter() - start
    memory = compiled.memory_analysis()
    temp = getattr(memory, "temp_size_in_bytes", None) if memory is not None else None
    solution = jax.block_until_ready(compiled(p))  # warm-up
    return {"compiled": compiled, "compile_s": compile_s, "temp_bytes": temp, "solution": solution}


def time_runs(rows: list[dict], p: dict, repeats: int) -> None:
    """Median solve time of each row, interleaving the rows round by round so that a
    drift in machine load affects every configuration alike."""
    runs = interleaved(
        {i: (lambda row=row: row["compiled"](p)) for i, row in enumerate(rows)}, repeats
    ).values()
    for row, times in zip(rows, runs, strict=True):
        row["run_s"] = statistics.median(times)
        row["runs_s"] = times
        del row["compiled"]


def main() -> None:
    a = ARGS
    p = params(a.n_types)
    points = a.n_wealth * a.n_types * 2 * a.n_consumption
    print(
        f"backend {jax.default_backend()}, {jax.device_count()} device(s), "
        f"{'float64' if a.x64 else 'float32'}; working: {a.n_wealth} wealth x {a.n_types} "
        f"types x 2 labor x {a.n_consumption} consumption = {points:.2e} state-action "
        f"points per period, {a.n_periods} periods, median of {a.repeats} runs"
    )

    batches = [0] + [max(1, a.n_wealth // int(d)) for d in a.divisors.split(",")]
    rows = []
    for batch in batches:
        model = build(a.n_wealth, a.n_consumption, a.n_types, a.n_periods, wealth_batch=batch)
        row = compile_model(model, p)
        row["batch_size"] = batch
        rows.append(row)
    time_runs(rows, p, a.repeats)
    reference = rows[0]["solution"]
    for row in rows:
        row["max_abs_diff"] = max_abs_diff(row.pop("solution").values, reference.values)
    base = rows[0]
    print("\nsplay: batch_size on the wealth axis")
    print(
        f"{'batch':>6} {'temp MiB':>9} {'x':>6} {'compile s':>10} {'x':>6} {'run s':>8} "
        f"{'x':>6} {'max|dv|':>9}"
    )
    for row in rows:
        temp = row["temp_bytes"]
        temp_ratio = temp / base["temp_bytes"] if temp and base["temp_bytes"] else float("nan")
        row["temp_ratio"] = temp_ratio
        row["compile_ratio"] = row["compile_s"] / base["compile_s"]
        row["run_ratio"] = row["run_s"] / base["run_s"]
        print(
            f"{row['batch_size']:>6} {(temp or 0) / 2**20:>9.1f} {temp_ratio:>6.3f} "
            f"{row['compile_s']:>10.2f} {row['compile_ratio']:>6.2f} {row['run_s']:>8.3f} "
            f"{row['run_ratio']:>6.2f} {row['max_abs_diff']:>9.1e}"
        )
    results = {
        "config": vars(a)
        | {
            "json": None,
            "points_per_period": points,
            "backend": jax.default_backend(),
            "device_count": jax.device_count(),
        },
        "splay": rows,
    }

    if a.devices > 1:
        if jax.device_count() < a.devices:
            print(f"\nshard: only {jax.device_count()} device(s) available, skipped")
        else:
            unsharded = build(a.n_wealth, a.n_consumption, a.n_types, a.n_periods)
            sharded = build(a.n_wealth, a.n_consumption, a.n_types, a.n_periods, distributed=True)
            plain = compile_model(unsharded, p)
            shard = compile_model(sharded, p)
            time_runs([plain, shard], p, a.repeats)
            diff = max_abs_diff(shard["solution"].values, plain["solution"].values)
            spans = len(shard["solution"].values["working"].sharding.device_set)
            speedup = plain["run_s"] / shard["run_s"]
            print(f"\nshard: skill axis ({a.n_types} types) over {jax.device_count()} devices")
            print(f"{'':>10} {'temp MiB/dev':>13} {'compile s':>10} {'run s':>8}")
            for name, row in (("unsharded", plain), ("sharded", shard)):
                print(
                    f"{name:>10} {(row['temp_bytes'] or 0) / 2**20:>13.1f} "
                    f"{row['compile_s']:>10.2f} {row['run_s']:>8.3f}"
                )
            print(f"speedup {speedup:.2f}x; values span {spans} devices; max|dv| {diff:.1e}")
            results["shard"] = {
                "unsharded": {k: v for k, v in plain.items() if k != "solution"},
                "sharded": {k: v for k, v in shard.items() if k != "solution"},
                "speedup": speedup,
                "devices_spanned": spans,
                "max_abs_diff": diff,
            }
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
