"""Cold start of `model.solve`: what a fresh process compiles and how long the first call takes.

Runs in fresh processes with the persistent compilation cache off, so every program is
compiled. Prints, for the default (`validate="raise"`) solve and for `validate="off"`:
the first-call wall time, the number of XLA programs compiled during that call and the
seconds spent compiling each, then the second-call time. A validated solve should
compile exactly one program, the same count as the unvalidated one: the checks are
reduced inside the solve's program, so nothing is compiled after it.

    python benchmarks/cold_start.py [--compare OTHER_CHECKOUT]

`--compare` runs the same children on another checkout of lcm_eqx too (e.g. the main
branch), interleaved, so that the two are measured under the same machine load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
validate = sys.argv[2]
import jax
jax.config.update("jax_enable_compilation_cache", False)
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiles.append(seconds)
    if event == "/jax/core/compile/backend_compile_duration" else None
)
from benchmarks import _models
model = _models._retirement(10, n_wealth=200, n_consumption=1000)
params = _models.RETIREMENT_PARAMS
jax.block_until_ready(jax.numpy.zeros(1) + 1)  # JAX start-up, not the solve
compiles.clear()
start = time.perf_counter()
jax.block_until_ready(model.solve(params, validate=validate).values)
first = time.perf_counter() - start
first_compiles = list(compiles)
start = time.perf_counter()
jax.block_until_ready(model.solve(params, validate=validate).values)
second = time.perf_counter() - start
print(json.dumps({"first_s": first, "second_s": second, "compiles": first_compiles,
                  "later_compiles": len(compiles) - len(first_compiles)}))
"""


def measure(validate: str, root: Path = ROOT) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), validate],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    roots = [ROOT] if args.compare is None else [ROOT, args.compare]
    for validate in ("raise", "off"):
        for root in roots:
            report(validate, root)


def report(validate: str, root: Path) -> None:
    row = measure(validate, root)
    compiles = ", ".join(f"{s:.3f}" for s in row["compiles"])
    print(
        f"{root.name}: validate={validate!r:8} first call {row['first_s']:.2f} s, "
        f"{len(row['compiles'])} program(s) compiled ({compiles} s), "
        f"second call {1e3 * row['second_s']:.1f} ms, "
        f"{row['later_compiles']} compiled on the second call"
    )


if __name__ == "__main__":
    main()
