"""NEGM against grid search on the durable-goods model of `examples/durables.py`: a
convergence study on nested state grids.

At level `k` the state grid is `(40k + 1) × (20k + 1) × 3` (liquid wealth × durable
stock × income), spaced as `u ** 3` of evenly spaced `u`, so that the nodes of level 1
are nodes of every level. Each level is solved by

- `lcm.NEGM` (`60k + 1` savings points, `80k + 1` points of total resources, 64
  candidates of the new stock),
- `lcm.GridSearch` on grids of shares (`solver="grid-shares"`: `20k` consumption shares
  × `10k` shares of the new stock), and with `--refine` the same grid search with both
  shares refined off the grid (`lcm.GridSearch(refine=True)`),

and compared at the period-0 values of the level-1 nodes inside `1 <= m <= 10`,
`0.2 <= n <= 3` (largest |difference|): each NEGM level against the one before and
against the finest, each grid search against the finest NEGM. The steady solve times
(compiled apart, then timed in interleaved rounds within the level, medians), the
compile times, and NEGM's liquid-margin Euler errors (`lcm.euler_errors` at the state
nodes, both choices; `durables.euler_errors` at random states between the nodes, the
agent's choice) complete each row.

    python benchmarks/negm.py --quick            # 6 periods, levels 1 and 2 (CPU minutes)
    python benchmarks/negm.py                    # 20 periods, levels 1, 2, 4
    python benchmarks/negm.py --budget 1800      # add no level after 30 minutes
    python benchmarks/negm.py --refine 2         # and the refined grid search, levels 1-2
    python benchmarks/negm.py --stock 8,16,32 --levels 8   # NEGM alone, the stock refined
    python benchmarks/negm.py --levels 4,8 --refine 8 --shares 40x20 --rounds 1
                                                 # one share grid at every level

With `--stock`, only NEGM is solved, at the one level of `--levels` with the durable
stock at each of the given levels (`20D + 1` nodes; the other grids at the level), and
the distances between consecutive stock levels are printed: how far NEGM is from its
limit along the stock, the grid that carries its first-order error (docs/negm.md;
the study in full: docs/development_notes.md).

Prints one line per solve and a summary, and writes `benchmarks/results/negm.json`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import durables  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import interleaved, write_results  # noqa: E402


def states(level: int) -> dict:
    return {"n_wealth": 40 * level + 1, "n_durable": 20 * level + 1, "n_income": 3}


def variants(
    level: int, n_periods: int, refine: bool, shares: tuple[int, int] | None = None
) -> dict:
    """The solves of one level: name -> (model, params). `shares`: the grid search's
    consumption × new-stock shares at every level (default `20k × 10k`)."""
    grids = states(level)
    n_c, n_d = (20 * level, 10 * level) if shares is None else shares
    shares_of = {"n_consumption": n_c, "n_new_durable": n_d}
    # Bounded memory: from level 4 on, the grid search's default consumption shares in
    # chunks (the scan over chunks costs time: at level 2 it took 6x the unchunked
    # solve; splayed, XLA cannot hoist the next states' interpolation weights out of
    # the period loop, docs/performance.md). A fixed share grid is not chunked.
    batch = {"action_batch_size": 20} if level >= 4 and shares is None else {}
    out = {
        f"negm L{level}": durables.build(
            n_periods,
            solver="negm",
            n_savings=60 * level + 1,
            n_resources=80 * level + 1,
            **grids,
        ),
        f"grid-shares L{level}": durables.build(
            n_periods, solver="grid-shares", **grids, **shares_of, **batch
        ),
    }
    if refine:
        out[f"grid-shares-refined L{level}"] = durables.build(
            n_periods, solver="grid-shares", refine=True, **grids, **shares_of, **batch
        )
    return out


def stock_study(level: int, stocks: list[int], n_periods: int) -> None:
    """NEGM at `level` with the durable stock at each level of `stocks`, compared at
    the level-1 nodes (largest and median |difference| of period 0's values)."""
    values = {}
    for stock in stocks:
        model, params = durables.build(
            n_periods,
            solver="negm",
            n_savings=60 * level + 1,
            n_resources=80 * level + 1,
            **{**states(level), "n_durable": 20 * stock + 1},
        )
        program, compile_s = compiled(model, params)
        start = time.perf_counter()
        solution = jax.block_until_ready(program(params))
        solve_s = time.perf_counter() - start
        region = common_nodes(model, level, stock)
        values[stock] = np.asarray(solution.values["alive"][0])[region]
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(
            f"  NEGM L{level}, stock L{stock}: compile {compile_s:.1f} s, first solve"
            f" {solve_s:.1f} s  load {load}",
            flush=True,
        )
        del program, solution
    for a, b in itertools.pairwise(stocks):
        diff = np.abs(values[b] - values[a])
        print(f"  stock L{a} -> L{b}: max {diff.max():.2e}, median {np.median(diff):.1e}")


def compiled(model, params):
    """The solve as one compiled program, and its compile time."""
    start = time.perf_counter()
    program = jax.jit(model.solve).lower(params).compile()
    return program, time.perf_counter() - start


def common_nodes(model, level: int, stock: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The level-1 nodes inside `1 <= m <= 10`, `0.2 <= n <= 3`, as indices of this
    level's grid (the durable stock's at level `stock`, default `level`)."""
    stock = level if stock is None else stock
    regime = model.regimes["alive"]
    wealth = np.asarray(regime.states["wealth"].to_jax())[::level]
    durable = np.asarray(regime.states["durable"].to_jax())[::stock]
    i = np.flatnonzero((wealth >= 1.0) & (wealth <= 10.0)) * level
    j = np.flatnonzero((durable >= 0.2) & (durable <= 3.0)) * stock
    return np.ix_(i, j)


def euler(model, params, solution, n_periods: int) -> dict:
    nodes = np.asarray(lcm.euler_errors(model, params, solution, regime="alive"))
    between = np.concatenate(
        [durables.euler_errors(model, params, solution, t) for t in range(n_periods - 1)]
    )
    return {
        "nodes_mean": float(np.nanmean(nodes)),
        "between_mean": float(between.mean()),
        "between_median": float(np.median(between)),
        "between_p90": float(np.percentile(between, 90)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="6 periods, levels 1 and 2")
    parser.add_argument("--periods", type=int, default=None)
    parser.add_argument("--levels", default=None, help="comma-separated, e.g. 1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=float("inf"), help="seconds")
    parser.add_argument(
        "--refine", type=int, default=0, help="add the refined grid search up to this level"
    )
    parser.add_argument(
        "--stock", default=None, help="NEGM alone with the stock at these levels, e.g. 8,16,32"
    )
    parser.add_argument(
        "--shares",
        default=None,
        help="the grid search's shares at every level, e.g. 40x20 (default 20k x 10k)",
    )
    args = parser.parse_args()
    n_periods = args.periods or (6 if args.quick else 20)
    default_levels = "1,2" if args.quick else "1,2,4"
    levels = [int(k) for k in (args.levels or default_levels).split(",")]
    if args.stock:
        print(f"durables, {n_periods} periods, NEGM at level {levels[-1]}, stock refined")
        stock_study(levels[-1], [int(k) for k in args.stock.split(",")], n_periods)
        return

    start = time.perf_counter()
    rows: dict[str, dict] = {}
    values: dict[str, np.ndarray] = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"durables, {n_periods} periods, levels {levels}; load average at start {load}")
    for level in levels:
        if time.perf_counter() - start > args.budget:
            print(f"  budget of {args.budget:.0f} s spent: no level {level}")
            break
        shares = None if args.shares is None else tuple(map(int, args.shares.split("x")))
        solves = variants(level, n_periods, level <= args.refine, shares)
        programs, solutions = {}, {}
        for name, (model, params) in solves.items():
            programs[name], compile_s = compiled(model, params)
            solutions[name] = jax.block_until_ready(programs[name](params))
            region = common_nodes(model, level)
            values[name] = np.asarray(solutions[name].values["alive"][0])[region]
            rows[name] = {"level": level, "compile_s": compile_s}
            # Kept as they come, so that a run stopped at a large level still has them.
            np.save(
                Path(tempfile.gettempdir()) / f"negm-{name.replace(' ', '-')}.npy", values[name]
            )
        times = interleaved(
            {name: (lambda p=programs[name], q=solves[name][1]: p(q)) for name in solves},
            args.rounds,
        )
        load = Path("/proc/loadavg").read_text().split()[:3]
        for name in solves:
            rows[name]["steady_s"] = statistics.median(times[name])
            rows[name]["load"] = load
            if name.startswith("negm"):
                rows[name]["euler"] = euler(*solves[name], solutions[name], n_periods)
            r = rows[name]
            print(
                f"  {name:<24} compile {r['compile_s']:7.1f} s  steady {r['steady_s']:8.2f} s"
                f"  load {' '.join(load)}"
                + (
                    f"  Euler: nodes {r['euler']['nodes_mean']:.2f}, between"
                    f" {r['euler']['between_mean']:.2f}"
                    if "euler" in r
                    else ""
                ),
                flush=True,
            )
        del programs, solutions

    done = [k for k in levels if f"negm L{k}" in rows]
    finest = values[f"negm L{done[-1]}"]
    print(f"\nmax |difference| at level-1 interior nodes, period 0 (finest: NEGM L{done[-1]})")
    for a, b in itertools.pairwise(done):
        diff = float(np.max(np.abs(values[f"negm L{b}"] - values[f"negm L{a}"])))
        rows[f"negm L{b}"]["diff_previous_level"] = diff
        print(f"  NEGM L{a} -> L{b}: {diff:.2e}")
    for name in rows:
        diff = float(np.max(np.abs(values[name] - finest)))
        rows[name]["diff_finest_negm"] = diff
        if not name.startswith("negm"):
            same = values[f"negm L{rows[name]['level']}"]
            rows[name]["diff_negm_same_level"] = float(np.max(np.abs(values[name] - same)))
            print(
                f"  {name:<24} vs finest NEGM {diff:.2e}, vs NEGM of its level "
                f"{rows[name]['diff_negm_same_level']:.2e}"
            )
    for family in ("grid-shares", "grid-shares-refined"):
        chain = [f"{family} L{k}" for k in done if f"{family} L{k}" in rows]
        if len(chain) >= 3:
            # Richardson: the order from the last three levels, the limit from the last two.
            v0, v1, v2 = (values[name] for name in chain[-3:])
            ratio = np.max(np.abs(v1 - v0)) / np.max(np.abs(v2 - v1))
            order = np.log2(ratio)
            limit = v2 + (v2 - v1) / (ratio - 1.0)
            diff = float(np.max(np.abs(limit - finest)))
            rows[chain[-1]]["richardson_diff_finest_negm"] = diff
            print(f"  {family} Richardson limit (order {order:.2f}) vs finest NEGM {diff:.2e}")
    write_results(
        ROOT / "benchmarks" / "results" / "negm.json",
        ("quick" if args.quick else "full")
        + ("" if args.shares is None else f" shares {args.shares}"),
        args.rounds,
        {"periods": n_periods, "levels": done, "rows": rows},
    )


if __name__ == "__main__":
    main()
