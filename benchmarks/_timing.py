"""Timing helpers shared by the benchmark scripts: wall time of compiled calls, each
waited for with `block_until_ready`, after a warm-up call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

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
