"""The asv (airspeed velocity) suite: the benchmark models of `benchmarks/_models.py`,
timed commit by commit. Run it with `nox -s asv`; see docs/benchmarking.md."""

import sys
from pathlib import Path

# asv imports this folder as a top-level package; the shared model definitions live one
# level up, in the `benchmarks` package at the repository root.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
