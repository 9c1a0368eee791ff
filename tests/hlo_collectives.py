"""The cross-device collectives of a compiled program, read from its HLO text: shared by
the device-test scripts (`*_devices.py`, run in subprocesses with several host devices)."""

import re

import numpy as np

# A collective's HLO line: `%name = <result shape(s)> all-reduce(...)` (or `-start(`),
# also with several operands: `%name = (f64[12], s32[12]) all-reduce(...)`.
COLLECTIVE_LINES = re.compile(
    r"= (.*?) \b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)"
    r"(?:-start)?\("
)


def collectives_in(text: str) -> list:
    """`[kind, number of elements of its largest operand]` per collective in `text`."""
    found = []
    for shapes, kind in COLLECTIVE_LINES.findall(text):
        sizes = [
            int(np.prod([int(d) for d in dims.split(",") if d]))
            for dims in re.findall(r"\w+\[([\d,]*)\]", shapes)
        ]
        found.append([kind, max(sizes, default=0)])
    return found
