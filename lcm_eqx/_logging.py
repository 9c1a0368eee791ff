"""The `"lcm_eqx"` logger and `set_log_level`.

Records go to the standard `logging` logger named `"lcm_eqx"`; route them with ordinary
handlers. Levels: `"off"`, `"warning"` (the default), `"progress"` (INFO: wall time of
model construction, solve and simulate, and whether a call compiled) and `"debug"` (also
the compile time of each jitted call, measured separately by lowering and compiling
it; JAX caches the result, so the call itself does not compile again).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time

import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare

from ._errors import LcmError

logger = logging.getLogger("lcm_eqx")
logger.addHandler(logging.NullHandler())

LOG_LEVELS = {
    "off": logging.CRITICAL + 10,
    "warning": logging.WARNING,
    "progress": logging.INFO,
    "debug": logging.DEBUG,
}

_handler: logging.Handler | None = None


def set_log_level(level: str) -> None:
    """Set the level of the `"lcm_eqx"` logger: `"off"`, `"warning"`, `"progress"` or `"debug"`.

    If logging is not configured at all (no handler on the root logger), a stderr
    handler is attached to the `"lcm_eqx"` logger so that the records are visible.
    """
    global _handler
    if level not in LOG_LEVELS:
        raise LcmError(f"log level must be one of {tuple(LOG_LEVELS)}, got {level!r}.")
    logger.setLevel(LOG_LEVELS[level])
    if _handler is None and not logging.getLogger().handlers and level != "off":
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("lcm_eqx %(levelname)s: %(message)s"))
        logger.addHandler(_handler)


def _traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


class _Timer:
    def __init__(self, jitted, phase: str, args, kwargs, level: int):
        self.active = logger.isEnabledFor(level) and not _traced(args)
        if not self.active:
            return
        self.phase = phase
        self.level = level
        if logger.isEnabledFor(logging.DEBUG) and hasattr(jitted, "lower"):
            start = time.perf_counter()
            jitted.lower(*args, **kwargs).compile()
            logger.debug(
                "%s: compiled (or fetched from cache) in %.3f s", phase, time.perf_counter() - start
            )
        self.cache = _cache_size(jitted)
        self.jitted = jitted
        self.start = time.perf_counter()

    def done(self, output, detail: str = "") -> None:
        if not self.active:
            return
        jax.block_until_ready(output)
        elapsed = time.perf_counter() - self.start
        compiled = _cache_size(self.jitted) > self.cache
        logger.log(
            self.level,
            "%s%s: %.3f s%s",
            self.phase,
            detail,
            elapsed,
            " (compiled a new program)" if compiled else "",
        )


def _cache_size(jitted) -> int:
    try:
        return jitted._cache_size()
    except AttributeError:  # pragma: no cover
        return 0


@contextlib.contextmanager
def timed(jitted, phase: str, *args, level: int = logging.INFO, **kwargs):
    """Time a call of `jitted(*args, **kwargs)`; call `.done(output)` on the yielded timer.

    Inactive (no blocking, no extra work) below `level` or when `args` are traced.
    """
    yield _Timer(jitted, phase, args, kwargs, level)


@contextlib.contextmanager
def log_time(phase: str, level: int = logging.INFO):
    """Log the wall time of a block (e.g. model construction)."""
    if not logger.isEnabledFor(level):
        yield
        return
    start = time.perf_counter()
    yield
    logger.log(level, "%s: %.3f s", phase, time.perf_counter() - start)
