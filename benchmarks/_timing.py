"""Timing helpers shared by the benchmark scripts: wall time of compiled calls, each
waited for with `block_until_ready`, after a warm-up call; and the check that two
variants of a solve agree."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import jax


def call_seconds(fn: Callable[[], object]) -> float:
    """Wall time of one call, waiting for its results."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def steady_time(fn: Callable[[], object], repeats: int, statistic=statistics.median) -> float:
    """`statistic` (median by default) of `repeats` timed calls after a warm-up call."""
    jax.block_until_ready(fn())
    return statistic([call_seconds(fn) for _ in range(repeats)])


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Times of each function over `repeats` rounds, one call of each per round, so that
    a drift in machine load affects every variant alike (no warm-up: call it first)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(call_seconds(fn))
    return times


def max_abs_diff(values: dict, reference: dict) -> float:
    """Largest |difference| between two solutions' value arrays (by regime), where the
    reference is finite (both are `-inf` at the same infeasible points)."""
    import jax.numpy as jnp

    return max(
        float(jnp.max(jnp.abs(jnp.where(jnp.isfinite(r), v - r, 0.0))))
        for v, r in ((values[name], reference[name]) for name in reference)
    )


def write_results(path: Path, mode: str, rounds: int, result: dict) -> None:
    """Write `result` as JSON to `path`, headed by the JAX version, the devices, the mode
    (quick or full) and the number of rounds, and say where."""
    result = {
        "jax": jax.__version__,
        "devices": str(jax.devices()),
        "mode": mode,
        "rounds": rounds,
        **result,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {path}")
