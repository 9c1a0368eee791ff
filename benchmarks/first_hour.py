"""Compile walls of a new user's first hour: the 30-period, 3-regime model of issue 32.

A model written from the docs alone: work or retire (with taste shocks) and consumption,
Rouwenhorst log income, a health chain whose transition depends on age and on working,
mortality by age and health, CRRA utility; `DCEGM` on both living regimes (or
`GridSearch` with `--solver grid`). Each program is measured in a fresh process with the
persistent compilation cache off, as a user meets it the first time:

- `solve`: the first `model.solve(params)`;
- `distribution`: the first `model.distribution(params, initial, solution)`;
- `gradient`: the first `jax.grad` of a moment of the distribution (mean wealth at
  period 20) with respect to two parameters (the disutility of work and the interest
  rate), under `jax.jit` with `model.compiler_options()` (how an estimation calls it;
  `--plain` without them), and its steady time once compiled;

each with its wall time and the trace / lower / compile split of the same program
(timed apart in another fresh process, so neither warms the other), and the number of
XLA programs compiled during the call (from a `jax.monitoring` listener).

    python benchmarks/first_hour.py [--solver dcegm|grid] [--periods 30] [--rounds 1] [--plain]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from enum import IntEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class RegimeId(IntEnum):
    working = 0
    retired = 1
    dead = 2


class Labor(IntEnum):
    work = 0
    retire = 1


class Health(IntEnum):
    bad = 0
    good = 1


def build(n_periods: int = 30, solver: str = "dcegm"):
    """The model and its parameters."""
    import jax.numpy as jnp

    import lcm_eqx as lcm

    top = 40.0

    def utility(consumption, labor, health, disutility_of_work, risk_aversion):
        crra = consumption ** (1 - risk_aversion) / (1 - risk_aversion)
        return crra - disutility_of_work * (labor == Labor.work) * (1.5 - 0.5 * health)

    def utility_retired(consumption, risk_aversion):
        return consumption ** (1 - risk_aversion) / (1 - risk_aversion)

    def labor_income(labor, income, health, wage):
        return jnp.where(labor == Labor.work, wage * jnp.exp(income) * (0.8 + 0.2 * health), 0.0)

    def next_wealth(wealth, consumption, labor_income, interest_rate):
        return (1 + interest_rate) * (wealth - consumption) + labor_income

    def next_wealth_retired(wealth, consumption, interest_rate, pension):
        return (1 + interest_rate) * (wealth - consumption) + pension

    def next_health(health, labor, period):
        stay_good = 0.97 - 0.004 * period - 0.02 * (labor == Labor.work)
        recover = 0.3 - 0.005 * period
        good = jnp.where(health == Health.good, stay_good, recover)
        return jnp.array([1 - good, good])

    def next_health_retired(health, period):
        good = jnp.where(health == Health.good, 0.96 - 0.004 * period, 0.25 - 0.005 * period)
        return jnp.array([1 - good, good])

    def survival(health, period):
        return 1 - (0.002 + 0.0015 * period) * (2.0 - health)

    def next_regime(labor, health, period):
        alive = survival(health, period)
        works = labor == Labor.work
        return jnp.array([alive * works, alive * (1 - works), 1 - alive])

    def next_regime_retired(health, period):
        alive = survival(health, period)
        return jnp.array([0.0, alive, 1 - alive])

    def borrowing(consumption, wealth):
        return consumption <= wealth

    wealth = lcm.LinSpacedGrid(0.5, top, 100)
    consumption = lcm.LinSpacedGrid(0.05, top, 300)
    income = lcm.RouwenhorstGrid(n_points=5)
    health = lcm.DiscreteGrid(Health)
    if solver == "dcegm":
        savings = lcm.IrregSpacedGrid(points=[top * (i / 119) ** 2 for i in range(120)])
        chosen = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
    else:
        chosen = lcm.GridSearch()
    working = lcm.Regime(
        states={"wealth": wealth, "income": income, "health": health},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth, "health": lcm.MarkovTransition(next_health)},
        transition=lcm.MarkovTransition(next_regime),
        constraints={"borrowing": borrowing},
        taste_shocks=lcm.ExtremeValueShocks(),
        solver=chosen,
    )
    retired = lcm.Regime(
        states={"wealth": wealth, "income": income, "health": health},
        actions={"consumption": consumption},
        functions={"utility": utility_retired},
        state_transitions={
            "wealth": next_wealth_retired,
            "health": lcm.MarkovTransition(next_health_retired),
        },
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": borrowing},
        solver=chosen,
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    model = lcm.Model(
        regimes={"working": working, "retired": retired, "dead": dead},
        n_periods=n_periods,
        regime_ids=RegimeId,
    )
    params = {
        "discount_factor": 0.95,
        "interest_rate": 0.03,
        "risk_aversion": 2.0,
        "disutility_of_work": 0.05,
        "wage": 2.1,
        "pension": 0.8,
        "taste_shock_scale": 0.02,
        "working": {"next_income": {"rho": 0.9, "sigma": 0.2}},
        "retired": {"next_income": {"rho": 0.9, "sigma": 0.2}},
    }
    return model, params


def initial_conditions(n: int = 500):
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "regime": np.zeros(n, dtype=int),
        "wealth": rng.uniform(1.0, 10.0, n),
        # By grid index (the median node): values would need the nodes, which depend on
        # the (traced) parameters of the income process.
        "income:index": np.full(n, 2),
        "health": np.ones(n, dtype=int),
    }


def gradient(model, params, initial, plain: bool = False):
    """The jitted gradient of mean wealth at period 20 (the last period in a shorter
    model) with respect to two parameters, and the point to take it at; compiled with
    the model's XLA options (`model.compiler_options()`, as docs/estimation.md does)
    unless `plain`."""
    import jax

    period = min(20, model.n_periods - 1)

    def moment(free):
        return model.distribution({**params, **free}, initial).mean("wealth")[period]

    options = {} if plain else model.compiler_options()
    return jax.jit(jax.grad(moment), compiler_options=options or None), {
        "disutility_of_work": 0.05,
        "interest_rate": 0.03,
    }


def child(what: str, args) -> None:
    """One fresh process: the wall time of the first call (`call`), or its trace / lower
    / compile split (`split`), printed as JSON."""
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    from jax import monitoring

    compiles = []
    monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: (
            compiles.append(seconds)
            if event == "/jax/core/compile/backend_compile_duration"
            else None
        )
    )
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))  # JAX start-up
    model, params = build(args.periods, args.solver)
    initial = initial_conditions()
    program, mode = what.split(":")
    out: dict = {}
    if program != "solve":
        solution = model.solve(params)  # not timed: the solve's program is compiled
        jax.block_until_ready(solution.values)
    compiles.clear()
    start = time.perf_counter()
    if mode == "call":
        if program == "solve":
            jax.block_until_ready(model.solve(params).values)
        elif program == "distribution":
            jax.block_until_ready(model.distribution(params, initial, solution).mean("wealth"))
        else:
            grad, free = gradient(model, params, initial, args.plain)
            jax.block_until_ready(grad(free))
        out["wall_s"] = time.perf_counter() - start
        if program == "gradient":  # the compiled gradient's steady time
            steady = []
            for _ in range(3):
                begin = time.perf_counter()
                jax.block_until_ready(grad(free))
                steady.append(time.perf_counter() - begin)
            out["steady_s"] = min(steady)
    else:
        if program == "solve":
            fn, arg = jax.jit(lambda p: model.solve(p).values), params
        elif program == "distribution":
            fn, arg = (
                jax.jit(lambda p, s: model.distribution(p, initial, s).mean("wealth")),
                (params, solution),
            )
        else:
            grad, free = gradient(model, params, initial, args.plain)
            fn, arg = grad, free
        arg = arg if isinstance(arg, tuple) else (arg,)
        # CPU time beside wall time: on a loaded machine it moves less (XLA compiles on
        # a thread pool, which process_time counts).
        t0, c0 = time.perf_counter(), time.process_time()
        traced = fn.trace(*arg)
        t1, c1 = time.perf_counter(), time.process_time()
        lowered = traced.lower()
        t2, c2 = time.perf_counter(), time.process_time()
        lowered.compile()
        t3, c3 = time.perf_counter(), time.process_time()
        out.update(trace_s=t1 - t0, lower_s=t2 - t1, compile_s=t3 - t2)
        out.update(trace_cpu_s=c1 - c0, lower_cpu_s=c2 - c1, compile_cpu_s=c3 - c2)
    out["xla_programs"] = len(compiles)
    out["load"] = os.getloadavg()[0]
    out["xla_compile_s"] = sum(compiles)
    print(json.dumps(out))


def run_child(what: str, args) -> dict:
    command = [sys.executable, __file__, "--child", what, "--periods", str(args.periods)]
    command += ["--solver", args.solver] + (["--plain"] if args.plain else [])
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--solver", choices=("dcegm", "grid"), default="dcegm")
    parser.add_argument("--periods", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=1, help="fresh processes per number")
    parser.add_argument("--only", default="solve,distribution,gradient")
    parser.add_argument(
        "--plain", action="store_true", help="the gradient without model.compiler_options()"
    )
    parser.add_argument("--child", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return
    rows = {}
    for program in args.only.split(","):
        calls = [run_child(f"{program}:call", args) for _ in range(args.rounds)]
        splits = [run_child(f"{program}:split", args) for _ in range(args.rounds)]
        call = min(calls, key=lambda r: r["wall_s"])
        split = min(splits, key=lambda r: r["trace_s"] + r["lower_s"] + r["compile_s"])
        rows[program] = {"call": call, "split": split}
        print(
            f"{program:>13}: first call {call['wall_s']:7.1f} s ({call['xla_programs']} XLA "
            f"programs, {call['xla_compile_s']:.1f} s compiling); jit: trace "
            f"{split['trace_s']:.1f} s, lower {split['lower_s']:.1f} s, compile "
            f"{split['compile_s']:.1f} s (CPU {split['trace_cpu_s']:.1f} / "
            f"{split['lower_cpu_s']:.1f} / {split['compile_cpu_s']:.1f} s)"
            + (f"; steady {call['steady_s'] * 1e3:.0f} ms" if "steady_s" in call else "")
            + f"; load {split['load']:.1f}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
