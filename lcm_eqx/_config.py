"""Import-time JAX defaults for lcm_eqx.

Importing this module calls `configure_jax`; the package ``__init__`` imports it before
anything else, so the defaults are in place before any other module imports ``jax``.
It applies three defaults, each only where the user has not chosen otherwise:

* ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: do not grab most of the GPU memory up front.
* A persistent compilation cache at ``~/.cache/jax/<project>``, where ``<project>`` is
  the name of the nearest folder, from the current working directory upwards, that holds
  a ``.git`` or a ``pyproject.toml`` (``"default"`` when there is none). The environment
  variable ``LCM_COMPILATION_CACHE_NAME`` names the leaf instead. A user-set
  ``JAX_COMPILATION_CACHE_DIR`` (or a cache dir already set through ``jax.config``) wins.
* Cache every compiled program: minimum compile time 0 s and no minimum entry size
  (``jax_persistent_cache_min_entry_size_bytes=-1``).

Each default is written to ``os.environ`` (with ``setdefault``, so it reaches subprocesses
and a ``jax`` that is imported later) and to ``jax.config`` (so it also takes effect when
``jax`` was imported before ``lcm_eqx``).

This module must import nothing from the rest of the package.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

CACHE_NAME_ENV = "LCM_COMPILATION_CACHE_NAME"
FALLBACK_CACHE_NAME = "default"
PROJECT_MARKERS = (".git", "pyproject.toml")

# environment variable -> (jax.config option or None, value lcm_eqx uses if the user set none)
_ENV_DEFAULTS: dict[str, tuple[str | None, float | int | str]] = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": (None, "false"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": (
        "jax_persistent_cache_min_compile_time_secs",
        0.0,
    ),
    # -1: no size restriction, and JAX may not raise it when the cache starts (with 0 it
    # may replace the value by a filesystem-dependent default).
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": (
        "jax_persistent_cache_min_entry_size_bytes",
        -1,
    ),
}
_CACHE_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
_CACHE_DIR_OPTION = "jax_compilation_cache_dir"

_lock = threading.Lock()
_configured = False


def find_project_name(start: Path | str | None = None) -> str | None:
    """Name of the nearest folder at or above `start` (default: cwd) with a project marker."""
    try:
        here = Path.cwd() if start is None else Path(start)
        here = here.resolve()
    except OSError:  # e.g. the working directory was deleted
        return None
    for folder in (here, *here.parents):
        if folder.name and any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder.name
    return None


def compilation_cache_dir(start: Path | str | None = None) -> Path:
    """The persistent compilation cache folder lcm_eqx uses.

    A user-set ``JAX_COMPILATION_CACHE_DIR`` is returned as is. Otherwise the folder is
    ``~/.cache/jax/<leaf>``, where ``<leaf>`` is ``$LCM_COMPILATION_CACHE_NAME`` if set,
    else the project folder name found from `start` (default: the current working
    directory) upwards, else ``"default"``.
    """
    user_dir = os.environ.get(_CACHE_DIR_ENV)
    if user_dir:
        return Path(user_dir).expanduser()
    leaf = os.environ.get(CACHE_NAME_ENV) or find_project_name(start) or FALLBACK_CACHE_NAME
    return Path.home() / ".cache" / "jax" / leaf


def _update_jax_config(option: str, value: object) -> bool:
    """Set a jax.config option if this JAX version has it; report whether it was set."""
    import jax

    if not hasattr(jax.config, option):
        return False
    try:
        jax.config.update(option, value)
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    return True


def _reset_jax_cache() -> None:
    """Let a JAX that already decided 'no cache' (it compiled before) pick up the new dir."""
    try:
        from jax.experimental.compilation_cache import compilation_cache as cc

        cc.reset_cache()
    except Exception:  # pragma: no cover - API moved in some JAX version; cache is optional
        pass


def configure_jax() -> Path | None:
    """Apply lcm_eqx's JAX defaults once per process (later calls do nothing).

    Returns the persistent compilation cache folder lcm_eqx set, or None if the user had
    already chosen one (through ``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``) or if it
    was already configured.
    """
    global _configured
    with _lock:
        if _configured:
            return None
        _configured = True

        # Decide what the user set *before* writing anything to os.environ.
        config_updates: dict[str, float | int | str] = {}
        for env_name, (option, value) in _ENV_DEFAULTS.items():
            if env_name in os.environ:
                continue
            os.environ[env_name] = str(value)
            if option is not None:
                config_updates[option] = value

        cache_dir: Path | None = None
        if _CACHE_DIR_ENV not in os.environ and not _cache_dir_set_in_jax_config():
            cache_dir = compilation_cache_dir()
            os.environ[_CACHE_DIR_ENV] = str(cache_dir)
            config_updates[_CACHE_DIR_OPTION] = str(cache_dir)

        for option, value in config_updates.items():
            _update_jax_config(option, value)
        if cache_dir is not None:
            # A JAX that compiled something before we set the dir has already decided
            # "no persistent cache"; make it look again.
            _reset_jax_cache()
        return cache_dir


def _cache_dir_set_in_jax_config() -> bool:
    """Whether an already-imported jax has a cache dir set (e.g. by jax.config.update)."""
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    return bool(getattr(config, _CACHE_DIR_OPTION, None))


# On import, so that `from . import _config` at the top of the package's __init__ is all
# it takes: no call between imports (which would need `noqa: E402` on every later one).
configure_jax()

__all__ = [
    "CACHE_NAME_ENV",
    "FALLBACK_CACHE_NAME",
    "compilation_cache_dir",
    "configure_jax",
    "find_project_name",
]
