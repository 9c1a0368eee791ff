"""Import-time JAX defaults (lcm_eqx._config), each checked in a fresh interpreter.

Every check runs ``sys.executable`` in a subprocess whose working directory is a temporary
project folder (it holds a ``pyproject.toml``) and whose HOME is a temporary folder, so
the checks never touch the real ``~/.cache/jax`` and do not depend on this process's JAX
state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT_NAME = "toyproject"

# Environment variables that would change what is being tested.
_SCRUBBED_ENV = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    "JAX_ENABLE_COMPILATION_CACHE",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "LCM_COMPILATION_CACHE_NAME",
    "PYTHONSTARTUP",
)


# The package __init__ calls configure_jax() before importing anything else.
IMPORT_LCM_EQX = "import lcm_eqx"


# Prints the settings the subprocess ended up with, as one JSON line.
_REPORT = """
import json, os
import jax
print(json.dumps({
    "cache_dir": jax.config.jax_compilation_cache_dir,
    "min_compile_time": jax.config.jax_persistent_cache_min_compile_time_secs,
    "min_entry_size": getattr(jax.config, "jax_persistent_cache_min_entry_size_bytes", 0),
    "env_cache_dir": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
    "env_min_compile_time": os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"),
    "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
}))
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "work" / PROJECT_NAME
    (path / "sub" / "dir").mkdir(parents=True)
    (path / "pyproject.toml").write_text('[project]\nname = "toyproject"\n')
    return path


def _run(code: str, *, cwd: Path, home: Path, **extra_env: str) -> str:
    """Run `code` in a fresh interpreter; return its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    pythonpath = [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env.update(
        HOME=str(home),
        PYTHONPATH=os.pathsep.join(pythonpath),
        JAX_PLATFORMS="cpu",
        **extra_env,
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _report(code: str, *, cwd: Path, home: Path, **extra_env: str) -> dict:
    out = _run(textwrap.dedent(code) + _REPORT, cwd=cwd, home=home, **extra_env)
    return json.loads(out.strip().splitlines()[-1])


def _assert_lcm_defaults(got: dict, home: Path, leaf: str = PROJECT_NAME) -> None:
    expected = str(home / ".cache" / "jax" / leaf)
    assert got["cache_dir"] == expected
    assert got["env_cache_dir"] == expected
    assert got["min_compile_time"] == 0
    assert float(got["env_min_compile_time"]) == 0
    assert got["min_entry_size"] == -1
    assert got["preallocate"] == "false"


def test_import_jax_first_then_lcm_eqx(project: Path, home: Path) -> None:
    got = _report(f"import jax\n{IMPORT_LCM_EQX}\n", cwd=project, home=home)
    _assert_lcm_defaults(got, home)


def test_import_lcm_eqx_first(project: Path, home: Path) -> None:
    got = _report(f"{IMPORT_LCM_EQX}\nimport jax\n", cwd=project, home=home)
    _assert_lcm_defaults(got, home)


def test_cache_name_env_overrides_leaf(project: Path, home: Path) -> None:
    got = _report(
        f"{IMPORT_LCM_EQX}\n", cwd=project, home=home, LCM_COMPILATION_CACHE_NAME="mycache"
    )
    _assert_lcm_defaults(got, home, leaf="mycache")


def test_user_preallocate_is_not_overridden(project: Path, home: Path) -> None:
    got = _report(
        f"{IMPORT_LCM_EQX}\n", cwd=project, home=home, XLA_PYTHON_CLIENT_PREALLOCATE="true"
    )
    assert got["preallocate"] == "true"


def test_user_env_settings_are_respected(project: Path, home: Path, tmp_path: Path) -> None:
    mine = str(tmp_path / "my-cache")
    got = _report(
        f"import jax\n{IMPORT_LCM_EQX}\n",
        cwd=project,
        home=home,
        JAX_COMPILATION_CACHE_DIR=mine,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="2.5",
    )
    assert got["cache_dir"] == mine
    assert got["env_cache_dir"] == mine
    assert got["min_compile_time"] == 2.5
    assert got["env_min_compile_time"] == "2.5"


def test_user_cache_dir_in_jax_config_is_respected(
    project: Path, home: Path, tmp_path: Path
) -> None:
    mine = str(tmp_path / "my-cache")
    code = f"import jax\njax.config.update('jax_compilation_cache_dir', {mine!r})\n"
    got = _report(code + f"{IMPORT_LCM_EQX}\n", cwd=project, home=home)
    assert got["cache_dir"] == mine


# The cache folder name, checked in this process (pure functions of cwd and environment).


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    # Importing the package configures JAX and sets JAX_COMPILATION_CACHE_DIR; do that
    # first, then hide the variables from the checks.
    import lcm_eqx._config  # noqa: F401

    for name in _SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))


@pytest.mark.usefixtures("clean_env")
def test_project_is_found_from_a_subfolder(project: Path, home: Path) -> None:
    from lcm_eqx._config import compilation_cache_dir, find_project_name

    assert find_project_name(project / "sub" / "dir") == PROJECT_NAME
    assert compilation_cache_dir(project / "sub") == home / ".cache" / "jax" / PROJECT_NAME


@pytest.mark.usefixtures("clean_env")
def test_git_folder_marks_a_project(tmp_path: Path, home: Path) -> None:
    from lcm_eqx._config import compilation_cache_dir

    repo = tmp_path / "gitrepo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    assert compilation_cache_dir(repo / "src") == home / ".cache" / "jax" / "gitrepo"


@pytest.mark.usefixtures("clean_env")
def test_fallback_name_without_project(tmp_path: Path, home: Path) -> None:
    from lcm_eqx._config import FALLBACK_CACHE_NAME, compilation_cache_dir, find_project_name

    bare = tmp_path / "bare"
    bare.mkdir()
    if find_project_name(bare) is not None:
        pytest.skip("the temporary folder lies inside a project folder")
    assert compilation_cache_dir(bare) == home / ".cache" / "jax" / FALLBACK_CACHE_NAME


@pytest.mark.usefixtures("clean_env")
def test_cache_name_env_and_user_dir_in_process(
    project: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lcm_eqx._config import compilation_cache_dir

    monkeypatch.setenv("LCM_COMPILATION_CACHE_NAME", "named")
    assert compilation_cache_dir(project) == home / ".cache" / "jax" / "named"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    assert compilation_cache_dir(project) == tmp_path / "mine"


def test_configure_jax_is_idempotent(project: Path, home: Path) -> None:
    # Importing the package may already have configured JAX; any later call changes nothing,
    # even from another working directory.
    code = f"""
    import os
    {IMPORT_LCM_EQX}
    import lcm_eqx._config as c
    c.configure_jax()
    os.chdir({str(home)!r})
    assert c.configure_jax() is None
    assert c.compilation_cache_dir() == c.Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    """
    got = _report(code, cwd=project, home=home)
    assert got["cache_dir"] == str(home / ".cache" / "jax" / PROJECT_NAME)


def test_config_module_imports_nothing_else_from_the_package(project: Path, home: Path) -> None:
    # A bare stand-in for the package, so that its __init__ (which imports the whole
    # library) does not run and only what _config itself imports gets loaded.
    code = f"""
    import sys, types
    pkg = types.ModuleType("lcm_eqx")
    pkg.__path__ = [{str(REPO_ROOT / "lcm_eqx")!r}]
    sys.modules["lcm_eqx"] = pkg
    import lcm_eqx._config as c
    c.configure_jax()
    others = sorted(m for m in sys.modules if m.startswith("lcm_eqx.") and m != "lcm_eqx._config")
    assert not others, others
    """
    _run(code, cwd=project, home=home)


# Jits a small function and reports persistent-cache hits and misses (public jax.monitoring).
_JIT_SCRIPT = """
{import_lcm_eqx}
import json
import jax
import jax.numpy as jnp

events = []
jax.monitoring.register_event_listener(lambda event, **kwargs: events.append(event))

@jax.jit
def f(x):
    return jnp.cumsum(jnp.sin(x) ** 2 + jnp.cos(x)).sum()

f(jnp.linspace(0.0, 1.0, 37)).block_until_ready()
print(json.dumps({{
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "misses": events.count("/jax/compilation_cache/cache_misses"),
}}))
"""


def _cache_files(cache_dir: Path) -> set[str]:
    if not cache_dir.exists():
        return set()
    return {str(p.relative_to(cache_dir)) for p in cache_dir.rglob("*") if p.is_file()}


def _run_jit(
    *, cwd: Path, home: Path, prelude: str = "", postlude: str = "", **extra_env: str
) -> dict:
    script = prelude + _JIT_SCRIPT.format(import_lcm_eqx=IMPORT_LCM_EQX + "\n" + postlude)
    out = _run(script, cwd=cwd, home=home, **extra_env)
    return json.loads(out.strip().splitlines()[-1])


def test_second_process_hits_persistent_cache(project: Path, home: Path) -> None:
    cache_dir = home / ".cache" / "jax" / PROJECT_NAME
    assert not _cache_files(cache_dir)

    first = _run_jit(cwd=project, home=home)
    files_after_first = _cache_files(cache_dir)
    assert files_after_first, "the first run wrote nothing to the persistent cache"
    assert first["misses"] >= 1
    assert first["hits"] == 0

    second = _run_jit(cwd=project, home=home)
    assert second["hits"] >= 1, second
    assert second["misses"] == 0, second
    assert _cache_files(cache_dir) == files_after_first

    # JAX may decide once per process whether to use the cache; a process that compiled
    # something before lcm_eqx set the cache dir must still read from it.
    prelude = "import jax, jax.numpy as jnp\njax.jit(lambda x: x + 1)(jnp.ones(3))\n"
    third = _run_jit(cwd=project, home=home, prelude=prelude)
    assert third["hits"] >= 1, third


# The opt-outs docs/tuning.md gives ("Environment flags"): the persistent cache can be
# switched off before or after the import, and then nothing is written.


@pytest.mark.parametrize(
    ("postlude", "env"),
    [
        ("", {"JAX_ENABLE_COMPILATION_CACHE": "false"}),
        ("import jax\njax.config.update('jax_enable_compilation_cache', False)\n", {}),
    ],
    ids=["environment", "jax.config"],
)
def test_persistent_cache_can_be_switched_off(
    project: Path, home: Path, postlude: str, env: dict[str, str]
) -> None:
    got = _run_jit(cwd=project, home=home, postlude=postlude, **env)
    assert got == {"hits": 0, "misses": 0}
    assert not _cache_files(home / ".cache" / "jax" / PROJECT_NAME)


def test_tuning_docs_name_every_import_default() -> None:
    """docs/tuning.md lists what importing lcm_eqx sets, with the values it uses."""
    from lcm_eqx import _config

    section = (REPO_ROOT / "docs" / "tuning.md").read_text().split("## Environment flags")[1]
    section = section.split("\n## ")[0]
    for env_name, (option, value) in _config._ENV_DEFAULTS.items():
        assert f"{env_name}={value}" in section.replace("`", ""), env_name
        if option is not None:
            assert f"jax.config.{option}" in section, option
    for name in ("JAX_COMPILATION_CACHE_DIR", "jax.config.jax_compilation_cache_dir"):
        assert name in section
    assert _config.CACHE_NAME_ENV in section and "~/.cache/jax/" in section
