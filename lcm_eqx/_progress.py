"""Opt-in progress meters for `solve` and `simulate`.

The period steps emit a `jax.debug.callback` with the traced `period`, so the meter
survives `jax.jit`; `progress` is a static argument of the internal jitted functions,
so the default (`progress=False`) program contains no callbacks at all.

The solve's callback sits outside the `jax.checkpoint` of the period step, so the
rematerialised backward pass of `jax.grad` does not replay it; under `jax.vmap` the
traced `period` is unbatched, so each period ticks once. The host also drops a tick
identical to the previous one, in case a callback is ever batched.
"""

from __future__ import annotations

import sys
import warnings

import jax
import numpy as np

from ._errors import LcmError, LcmWarning

PROGRESS_OPTIONS = (False, True, "text", "tqdm")


def progress_mode(progress) -> str | None:
    """`None` (off), `"text"` or `"tqdm"`; `True` means `"text"`.

    `"tqdm"` falls back to `"text"` with a warning when tqdm is not installed.
    """
    if progress is None or progress is False:
        return None
    if progress is True or progress == "text":
        return "text"
    if progress == "tqdm":
        try:
            import tqdm  # noqa: F401
        except ImportError:
            warnings.warn(
                "progress='tqdm' needs the tqdm package; using the text meter.",
                LcmWarning,
                stacklevel=4,
            )
            return "text"
        return "tqdm"
    raise LcmError(f"progress must be one of {PROGRESS_OPTIONS}, got {progress!r}.")


class _Meter:
    """Host-side state shared by all ticks (one meter per process)."""

    def __init__(self):
        self.last = None
        self.bar = None

    def tick(self, mode: str, phase: str, position: int, total: int, detail: str) -> None:
        key = (mode, phase, position, total, detail)
        if key == self.last and position != 1:
            return  # the same tick again (a batched callback under jax.vmap)
        self.last = key
        if mode == "tqdm":
            self._tqdm(phase, position, total, detail)
        else:
            print(f"{phase}: {detail} ({position}/{total})", file=sys.stderr, flush=True)

    def _tqdm(self, phase, position, total, detail):
        from tqdm.auto import tqdm

        if self.bar is None or position == 1:
            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, desc=phase, file=sys.stderr)
        self.bar.set_postfix_str(detail, refresh=False)
        self.bar.update(position - self.bar.n)
        if position >= total:
            self.bar.close()
            self.bar = None


METER = _Meter()


def solve_tick(mode: str | None, n_periods: int, period) -> None:
    """Emit a solve tick for `period` (traced) from inside the backward step."""
    if mode is None:
        return

    def callback(period):
        period = int(np.asarray(period).reshape(-1)[0])
        METER.tick(mode, "solve", n_periods - period, n_periods, f"period {period}")

    jax.debug.callback(callback, period)


def simulate_tick(mode: str | None, n_periods: int, period, chunk) -> None:
    """Emit a simulate tick for `period` and `chunk = (index, n_chunks)` (traced)."""
    if mode is None:
        return

    def callback(period, chunk):
        period = int(np.asarray(period).reshape(-1)[0])
        index, n_chunks = (int(x) for x in np.asarray(chunk).reshape(-1, 2)[0])
        detail = (
            f"period {period}"
            if n_chunks == 1
            else (f"chunk {index + 1}/{n_chunks}, period {period}")
        )
        METER.tick(mode, "simulate", index * n_periods + period + 1, n_chunks * n_periods, detail)

    jax.debug.callback(callback, period, chunk)
