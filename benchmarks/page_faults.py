"""Host page faults of a CPU solve, with glibc's default malloc and with huge pages.

XLA on the CPU allocates a compiled program's temp buffers at every call; glibc maps
each large block afresh (`mmap`) and unmaps it when it is freed, so every call pays one
page fault per 4 KiB page of temp memory. With `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`
(glibc >= 2.35, transparent huge pages in `madvise` or `always` mode) malloc asks for
2 MiB pages: 512 times fewer faults, and the memory is still returned to the system.

This script solves the retirement benchmark model in two fresh processes, one per
setting, and reports per-call wall time, system (kernel) time, minor page faults and
resident memory, as a ratio of the two runs.

    python benchmarks/page_faults.py [--calls 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, statistics, sys, time
sys.path.insert(0, {root!r})
import jax
from benchmarks import _models

jax.config.update("jax_enable_compilation_cache", False)
model = _models._retirement(10)
params = _models.RETIREMENT_PARAMS
compiled = model._solve.lower(params, validate=True).compile()
jax.block_until_ready(compiled(params))
rows = []
for _ in range({calls}):
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    jax.block_until_ready(compiled(params))
    after = resource.getrusage(resource.RUSAGE_SELF)
    rss = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
    rows.append((time.perf_counter() - start, after.ru_stime - before.ru_stime,
                 after.ru_minflt - before.ru_minflt, rss))
temp = compiled.memory_analysis().temp_size_in_bytes
print(json.dumps({{
    "wall_s": statistics.median(r[0] for r in rows),
    "sys_s": statistics.median(r[1] for r in rows),
    "faults": statistics.median(r[2] for r in rows),
    "rss_mib_max": max(r[3] for r in rows) / 2**20,
    "rss_mib_last": rows[-1][3] / 2**20,
    "temp_mib": temp / 2**20,
}}))
"""


def run(calls: int, tunables: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT), calls=calls)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    results = {
        "glibc default": run(args.calls, None),
        "glibc.malloc.hugetlb=1": run(args.calls, "glibc.malloc.hugetlb=1"),
    }
    print(f"retirement solve, {args.calls} calls after warm-up (medians)")
    for name, r in results.items():
        print(
            f"  {name:24s} wall {r['wall_s']:.3f} s  sys {r['sys_s']:.3f} s  "
            f"faults {r['faults']:>8,.0f}  RSS max {r['rss_mib_max']:6.0f} MiB, "
            f"last {r['rss_mib_last']:6.0f} MiB  (temp {r['temp_mib']:.0f} MiB)"
        )
    base, huge = results.values()
    print(f"  wall time ratio huge pages / default: {huge['wall_s'] / base['wall_s']:.2f}")


if __name__ == "__main__":
    main()
