"""Cold start of `model.solve`: the first call in a fresh process with an empty cache.

The quick start's retirement model (5 periods, wealth 100 x consumption 500, float64)
with `GridSearch`, and the same model with `DCEGM` (200 savings points), each with
validation (`validate="raise"`, the default) and without (`validate="off"`). Every
measurement is a fresh process whose persistent compilation cache is an empty
temporary folder (what a new user's first call meets). Prints, per case, the fastest
and the median first call (wall seconds, from the call to its result), the process's
CPU seconds during it (less sensitive to other jobs on the machine than the wall
time), the XLA programs it compiled and their compile seconds, and the kernels of the
solve's program (`compiled.as_text()`: each fusion, and each instruction outside one,
is compiled on its own, and XLA:CPU's compile time is close to a fixed cost per kernel).

    python benchmarks/cold_start.py [--rounds 5] [--compare OTHER_CHECKOUT] [--cpus 1 2]

`--compare` runs the same children on another checkout of lcm_eqx too (e.g. main
before a change), interleaved round by round, so that both meet the same machine load.
`--cpus N ...` runs each child on its first N CPUs only (`os.sched_setaffinity`, Linux),
one row per count, interleaved too: XLA compiles a program's kernels on a thread per
core, so a first solve depends on the machine's core count as well as on its speed,
and first solves measured on different machines compare only at the same count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = (("grid", "raise"), ("grid", "off"), ("dcegm", "raise"), ("dcegm", "off"))

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
solver_name, validate, count_kernels = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
if sys.argv[5] != "all":  # before JAX starts: its threads then run on these CPUs only
    import os
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: int(sys.argv[5])])
import jax
jax.config.update("jax_enable_x64", True)
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiles.append(seconds)
    if event == "/jax/core/compile/backend_compile_duration" else None
)
import lcm_eqx as lcm
from tests.models import retirement
model = retirement.build(5, solver=retirement.dcegm(200) if solver_name == "dcegm" else None)
jax.block_until_ready(jax.numpy.zeros(1) + 1)  # JAX start-up, not the solve
compiles.clear()
cpu, wall = time.process_time(), time.perf_counter()
jax.block_until_ready(model.solve(retirement.PARAMS, validate=validate).values)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
row = {"first_s": wall, "cpu_s": cpu, "compiles": list(compiles)}
if count_kernels:  # after the timed call: its compile is not in the numbers above
    text = model._solve.lower(
        retirement.PARAMS, validate=validate != "off", progress=None
    ).compile().as_text()
    row["kernels"] = text.count("calls=%")
print(json.dumps(row))
"""


def measure(
    root: Path, solver: str, validate: str, count_kernels: bool, cpus: int | None = None
) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        argv = [str(root), solver, validate, str(int(count_kernels)), str(cpus or "all")]
        out = subprocess.run(
            [sys.executable, "-c", CHILD, *argv],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per case")
    parser.add_argument("--compare", type=Path, default=None)
    parser.add_argument(
        "--cpus", type=int, nargs="+", default=None, help="run the children on N CPUs (each N)"
    )
    args = parser.parse_args()
    roots = [ROOT] if args.compare is None else [ROOT, args.compare.resolve()]
    if args.cpus:
        if not hasattr(os, "sched_setaffinity"):
            parser.error("--cpus needs os.sched_setaffinity (Linux)")
        available = len(os.sched_getaffinity(0))
        if not all(1 <= n <= available for n in args.cpus):
            parser.error(f"--cpus: each count between 1 and {available} (this process's CPUs)")
    counts = args.cpus or [None]
    rows: dict = {}
    for round_ in range(args.rounds):
        for cpus in counts:
            for root in roots:
                for solver, validate in CASES:
                    row = measure(root, solver, validate, round_ == 0, cpus)
                    rows.setdefault((cpus, root, solver, validate), []).append(row)
    print(
        f"{'cpus':<6}{'checkout':<16}{'solver':<8}{'validate':<10}{'first (min / median)':>22}"
        f"{'cpu min':>9}{'programs':>10}{'xla compile':>13}{'kernels':>9}"
    )
    for (cpus, root, solver, validate), runs in rows.items():
        first = [r["first_s"] for r in runs]
        print(
            f"{cpus or 'all'!s:<6}{root.name:<16}{solver:<8}{validate:<10}"
            f"{min(first):>11.3f} / {statistics.median(first):.3f} s"
            f"{min(r['cpu_s'] for r in runs):>8.3f}s{len(runs[0]['compiles']):>10}"
            f"{min(sum(r['compiles']) for r in runs):>12.3f}s{runs[0]['kernels']:>9}"
        )


if __name__ == "__main__":
    main()
