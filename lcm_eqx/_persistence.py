"""Saving solutions and simulated panels to disk, and loading them back into a model.

One object, one file::

    MAGIC (8 bytes) | header length (uint64, little endian) | sha256 of the header (32 bytes)
    | header (UTF-8 JSON) | leaves (`equinox.tree_serialise_leaves`)

The header records the library version, the kind of object, the shape and dtype of every
array leaf, the object's static fields, a description of the structure of the model the
object came from (regimes, states and actions with their grids, active periods, taste
shocks, function names, the values of `fixed_params`; never code) with its sha256
fingerprint, and the size and sha256 of the leaves. Loading checks the header, checks
that the model it is loaded into has the same structure (a clear `SavedFileError` says
what differs), then verifies the leaves' checksum and reads them with
`equinox.tree_deserialise_leaves` against a skeleton of `jax.ShapeDtypeStruct`s (or
NumPy arrays) built from the header. Leaves round-trip
bit-exactly. Writes are atomic: a temporary file in the target's folder is written,
flushed, fsync'ed and then renamed onto the target, so a crash mid-write leaves the
previous file intact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import secrets
import struct
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np

from ._errors import LcmError, LcmWarning, SavedFileError
from ._model._plan import ModelPlan
from ._version import __version__

MAGIC = b"\x89LCMEQX\n"  # a non-ASCII first byte, like PNG's, catches text-mode mangling
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sQ32s")
_CHUNK_BYTES = 1 << 20
# Grid values enter the fingerprint with this many significant digits, so that a grid
# built in float32 and the same grid built in float64 match.
_SIGNIFICANT_DIGITS = 7
_KINDS = {"Solution": "a solution", "SimulationResult": "a simulation result"}
_LOADERS = {"Solution": "lcm.load_solution", "SimulationResult": "lcm.load_simulation_result"}


# ---------------------------------------------------------------------------------------
# The model's structure
# ---------------------------------------------------------------------------------------

_structure_cache: dict[int, str] = {}


def model_structure(model) -> str:
    """Canonical JSON description of `model`'s structure and grids (cached per model).

    Built from the static plan only, so it works while `model.solve` is being traced.
    """
    return plan_structure(model.plan, model.ages)


def plan_structure(plan, ages) -> str:
    """`model_structure` from the model's plan and ages (what the solve is built from)."""
    key = id(plan)
    if key not in _structure_cache:
        _structure_cache[key] = _canonical(_describe_model(plan, ages))
        weakref.finalize(plan, _structure_cache.pop, key, None)
    return _structure_cache[key]


def _canonical(description) -> str:
    return json.dumps(description, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _fingerprint(structure: str) -> str:
    return hashlib.sha256(structure.encode()).hexdigest()


def _describe_model(plan, ages) -> dict:
    description = {
        "n_periods": plan.n_periods,
        "ages": None
        if ages is None
        else {"start": _number(ages.start), "step": _number(ages.step)},
        "regimes": {name: _describe_regime(regime) for name, regime in plan.regimes.items()},
    }
    if plan.fixed.values:  # recorded only when there are some: older files still match
        description["fixed_params"] = _describe_fixed(plan.fixed.values)
    return description


def _describe_fixed(tree) -> dict:
    """The values of `Model(fixed_params=...)`: a solution depends on them like on a grid."""
    return {
        key: _describe_fixed(value)
        if isinstance(value, dict)
        else _grid_value(value, integer=False)
        for key, value in tree.items()
    }


def _describe_regime(regime) -> dict:
    def transition_kind(transition):
        if transition.per_target:
            return {
                target: "markov" if target in transition.per_target_markov else "deterministic"
                for target in sorted(transition.per_target)
            }
        if transition.function is None:
            return "process"
        if transition.draws:
            # Read after the draw of these states (a different model from reading them now).
            return f"deterministic after {', '.join(transition.draws)}"
        return "markov" if transition.is_markov else "deterministic"

    next_regime = None
    if regime.next_regime is not None:
        next_regime = "markov" if regime.next_regime_is_markov else "deterministic"
    described = {
        "id": regime.id,
        "states": list(regime.states),
        "actions": list(regime.actions),
        "grids": {name: _describe_grid(grid) for name, grid in regime.grids.items()},
        "active periods": sorted(regime.active),
        "taste shocks": bool(regime.taste_shocks),
        "functions": sorted(["utility", *regime.helpers]),
        "constraints": sorted(regime.constraints),
        "state transitions": {
            state: transition_kind(t) for state, t in sorted(regime.state_transitions.items())
        },
        "next_regime": next_regime,
    }
    if regime.aggregator is not None:  # only then, so that older files keep their match
        described["aggregator"] = repr(regime.aggregator)
    return described


def _describe_grid(grid) -> dict:
    description: dict[str, Any] = {"type": type(grid).__name__, "n_points": int(grid.n_points)}
    for field in dataclasses.fields(grid):
        if field.name in ("batch_size", "distributed", "n_points_"):
            continue  # the knobs never change results; n_points is recorded above
        value = getattr(grid, field.name)
        static = field.metadata.get("static", False)
        description[field.name] = _grid_value(value, integer=static)
    return description


def _grid_value(value, *, integer: bool):
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, jax.core.Tracer):
        return "<traced>"
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    array = np.asarray(value)
    if integer and array.dtype.kind in "iu":
        return array.tolist()
    if array.dtype.kind not in "fiub":
        return repr(value)
    rounded = [_number(v) for v in array.astype(np.float64).ravel()]
    return rounded[0] if array.ndim == 0 else rounded


def _number(value) -> float:
    value = float(value)
    return value if not math.isfinite(value) else float(f"{value:.{_SIGNIFICANT_DIGITS}g}")


def _differences(saved: dict, current: dict) -> list[str]:
    """What differs between two model descriptions, in words."""
    found = []
    if saved["n_periods"] != current["n_periods"]:
        found.append(
            f"n_periods is {saved['n_periods']} in the file, {current['n_periods']} in the model"
        )
    if saved["ages"] != current["ages"]:
        found.append(
            f"ages are {_short(saved['ages'])} in the file, {_short(current['ages'])} in the model"
        )
    if saved.get("fixed_params") != current.get("fixed_params"):
        found.append(
            f"fixed_params are {_short(saved.get('fixed_params'))} in the file, "
            f"{_short(current.get('fixed_params'))} in the model"
        )
    for name in saved["regimes"]:
        if name not in current["regimes"]:
            found.append(f"regime {name!r} is in the file but not in the model")
    by_id = sorted(current["regimes"].items(), key=lambda item: item[1]["id"])
    for name, model_regime in by_id:
        if name not in saved["regimes"]:
            found.append(f"regime {name!r} is in the model but not in the file")
            continue
        file_regime = saved["regimes"][name]
        for key in model_regime:
            if key == "grids" or file_regime.get(key) == model_regime[key]:
                continue
            found.append(
                f"regime {name!r}: {key} {_short(file_regime.get(key))} in the file, "
                f"{_short(model_regime[key])} in the model"
            )
        for variable, model_grid in model_regime["grids"].items():
            file_grid = file_regime.get("grids", {}).get(variable)
            if file_grid is None or file_grid == model_grid:
                continue
            kind = "state" if variable in model_regime["states"] else "action"
            found.append(
                f"regime {name!r}: {kind} {variable!r} " + _grid_difference(file_grid, model_grid)
            )
    return found


def _grid_difference(file_grid: dict, model_grid: dict) -> str:
    if file_grid["type"] != model_grid["type"]:
        return f"is a {file_grid['type']} in the file, a {model_grid['type']} in the model"
    if file_grid["n_points"] != model_grid["n_points"]:
        return (
            f"has {file_grid['n_points']} points in the file, {model_grid['n_points']} in the model"
        )
    parts = [
        f"{key} {_short(file_grid.get(key))} in the file, {_short(value)} in the model"
        for key, value in model_grid.items()
        if file_grid.get(key) != value
    ]
    return "has " + "; ".join(parts)


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------


def save(obj, path) -> None:
    """Write a `Solution` or `SimulationResult` to `path`, atomically."""
    kind = type(obj).__name__
    arrays = _arrays(obj)
    for leaf in jax.tree.leaves(arrays):
        if isinstance(leaf, jax.core.Tracer):
            raise LcmError(
                f"{kind}.save: cannot save while being traced (inside jax.jit, vmap or grad); "
                "save the concrete result outside the transformation."
            )
    leaves = io.BytesIO()
    eqx.tree_serialise_leaves(leaves, arrays)
    blob = leaves.getbuffer()
    structure = obj.model_structure
    header = {
        "format": "lcm_eqx",
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "lcm_eqx_version": __version__,
        "model_fingerprint": None if structure is None else _fingerprint(structure),
        "model": None if structure is None else json.loads(structure),
        "arrays": _specs(arrays),
        "static": _static(obj),
        "leaves": {"nbytes": blob.nbytes, "sha256": hashlib.sha256(blob).hexdigest()},
    }
    header_bytes = json.dumps(header, allow_nan=True).encode()
    preamble = _PREAMBLE.pack(MAGIC, len(header_bytes), hashlib.sha256(header_bytes).digest())
    _atomic_write(Path(path), [preamble, header_bytes, blob])


def _arrays(obj) -> dict:
    if type(obj).__name__ == "Solution":
        arrays = {"values": dict(obj.values), "violations": dict(obj.violations)}
        if obj.exponential_values:  # present-biased regimes only: older files lack it
            arrays["exponential_values"] = dict(obj.exponential_values)
        return arrays
    return {
        "regime": obj.regime,
        "present": obj.present,
        "value": obj.value,
        "states": dict(obj.states),
        "actions": dict(obj.actions),
    }


def _specs(tree):
    """Shape and dtype of every array, nested like `tree` and in its key order."""
    if isinstance(tree, dict):
        return {key: _specs(value) for key, value in tree.items()}
    return {"shape": list(np.shape(tree)), "dtype": np.dtype(tree.dtype).name}


def _in_order(tree, template):
    """`tree` with its dicts in `template`'s key order (pytrees sort dict keys)."""
    if isinstance(template, dict):
        return {key: _in_order(tree[key], value) for key, value in template.items()}
    return tree


def _static(obj) -> dict:
    if type(obj).__name__ == "Solution":
        return {"checks": obj.checks, "active": obj.active, "state_names": obj.state_names}
    return {
        "regime_names": obj.regime_names,
        "has_variable": obj.has_variable,
        "labels": obj.labels,
        "ages": obj.ages,
    }


def _atomic_write(path: Path, parts) -> None:
    """Write `parts` to `path` so that readers see the old file or the whole new one."""
    directory = path.parent
    temporary = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    # os.open with mode 0o666 honours the umask, as open() would for the target.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    descriptor = os.open(temporary, flags, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            for part in parts:
                for chunk in _chunks(part):
                    file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _chunks(data) -> Iterator[memoryview]:
    view = memoryview(data)
    for start in range(0, view.nbytes, _CHUNK_BYTES):
        yield view[start : start + _CHUNK_BYTES]


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (POSIX); not possible, nor needed, on Windows."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def load(path, model, kind: str, build: Callable[[dict, dict, str], Any]) -> Any:
    """Read the `kind` object saved at `path`, checking it against `model`.

    The format knows no result class: `build(arrays, static, model_structure)` turns
    the arrays, the static fields and the model's structure into the `kind` object (the
    loaders above this layer pass the class's constructor).
    """
    if not isinstance(getattr(model, "plan", None), ModelPlan):
        raise LcmError(
            f"{_LOADERS[kind]}: model must be the lcm_eqx Model the file was saved from, got "
            f"{type(model).__name__}."
        )
    path = Path(path)
    with open(path, "rb") as file:
        header, leaves_start = _read_header(file, path)
        _check_kind(header, path, kind)
        _check_structure(header, path, model)
        arrays = _skeleton(header, path, kind)
        _check_leaves(file, header, path, leaves_start)
        file.seek(leaves_start)
        try:
            arrays = _in_order(eqx.tree_deserialise_leaves(file, arrays), arrays)
        except Exception as error:  # a header/leaves mismatch that passed the checksums
            raise SavedFileError(f"{path}: the arrays could not be read ({error}).") from error
    try:
        obj = build(arrays, header["static"], model_structure(model))
    except (KeyError, TypeError, ValueError) as error:
        raise SavedFileError(
            f"{path} is corrupt: its header does not describe a {kind} ({error!r})."
        ) from error
    _check_against_model(obj, kind, model, path)
    _warn_version(header, path)
    return obj


def _read_header(file, path: Path) -> tuple[dict, int]:
    preamble = file.read(_PREAMBLE.size)
    if not preamble:
        raise SavedFileError(f"{path} is empty; it is not a saved lcm_eqx file.")
    if preamble[: len(MAGIC)] != MAGIC[: len(preamble)]:
        raise SavedFileError(
            f"{path} is not an lcm_eqx file (it does not start with lcm_eqx's marker); save "
            "one with solution.save(path) or result.save(path)."
        )
    if len(preamble) < _PREAMBLE.size:
        raise SavedFileError(f"{path} is truncated: it ends inside the file preamble.")
    _, header_size, header_sha256 = _PREAMBLE.unpack(preamble)
    header_bytes = file.read(header_size) if header_size < (1 << 32) else b""
    if len(header_bytes) != header_size:
        raise SavedFileError(f"{path} is truncated: it ends inside the header.")
    if hashlib.sha256(header_bytes).digest() != header_sha256:
        raise SavedFileError(f"{path} is corrupt: the header's checksum does not match.")
    try:
        header = json.loads(header_bytes)
        version = header["format_version"]
        missing = [key for key in ("kind", "arrays", "static", "leaves") if key not in header]
        if missing:
            raise KeyError(", ".join(missing))
    except (ValueError, KeyError, TypeError) as error:
        raise SavedFileError(f"{path} is corrupt: its header is not valid ({error}).") from error
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise SavedFileError(
            f"{path} was written in file format {version!r} by lcm_eqx "
            f"{header.get('lcm_eqx_version')}; this lcm_eqx ({__version__}) reads "
            f"format {FORMAT_VERSION} and older. Upgrade lcm_eqx to load it."
        )
    return header, _PREAMBLE.size + header_size


def _check_kind(header: dict, path: Path, kind: str) -> None:
    saved = header["kind"]
    if saved != kind:
        what = _KINDS.get(saved, repr(saved))
        hint = f"; load it with {_LOADERS[saved]}(path, model)" if saved in _LOADERS else ""
        raise SavedFileError(f"{path} holds {what}, not {_KINDS[kind]}{hint}.")


def _version_note(header: dict) -> str:
    saved_version = header.get("lcm_eqx_version")
    if saved_version == __version__:
        return ""
    return f" (the file was written by lcm_eqx {saved_version}, this is {__version__})"


def _warn_version(header: dict, path: Path) -> None:
    if _version_note(header):
        warnings.warn(
            f"{path} was written by lcm_eqx {header.get('lcm_eqx_version')}; this is lcm_eqx "
            f"{__version__}. The model structure matches, so it is loaded as is.",
            LcmWarning,
            stacklevel=4,
        )


def _check_structure(header: dict, path: Path, model) -> None:
    if header.get("model") is None:
        return  # an object built by hand records no model; _check_against_model still runs
    current = model_structure(model)
    if header.get("model_fingerprint") == _fingerprint(current):
        return
    try:
        differences = _differences(header["model"], json.loads(current))
    except (KeyError, TypeError, AttributeError):
        differences = ["the file's model description is in an unknown layout"]
    if differences:
        raise SavedFileError(
            f"{path} was saved from a model with a different structure{_version_note(header)}: "
            + "; ".join(differences)
            + ". Load it into the model it was saved from, or solve this model anew."
        )


def _skeleton(header: dict, path: Path, kind: str):
    """Shapes and dtypes from the header, as the `like` tree for deserialisation."""

    def is_spec(x):
        return isinstance(x, dict) and set(x) == {"shape", "dtype"}

    def leaf(spec):
        shape, dtype = tuple(int(n) for n in spec["shape"]), jnp.dtype(spec["dtype"])
        if (
            dtype.itemsize == 8
            and dtype.kind in "fic"
            and kind == "Solution"
            and not jax.config.jax_enable_x64  # pyright: ignore[reportAttributeAccessIssue]
        ):
            raise SavedFileError(
                f"{path} holds {dtype.name} arrays, but 64-bit JAX is off, so they would "
                "load as 32-bit; call jax.config.update('jax_enable_x64', True) before "
                "loading."
            )
        if kind == "Solution":
            return jax.ShapeDtypeStruct(shape, dtype)
        return np.empty(shape, dtype)

    def skeleton(specs):
        if is_spec(specs):
            return leaf(specs)
        if not isinstance(specs, dict):
            raise TypeError(f"expected a mapping of arrays, got {type(specs).__name__}")
        return {key: skeleton(value) for key, value in specs.items()}

    try:
        return skeleton(header["arrays"])
    except (KeyError, TypeError, ValueError) as error:
        raise SavedFileError(
            f"{path} is corrupt: its array list is malformed ({error})."
        ) from error


def _check_leaves(file, header: dict, path: Path, start: int) -> None:
    try:
        expected_size = int(header["leaves"]["nbytes"])
        expected_sha256 = str(header["leaves"]["sha256"])
    except (KeyError, TypeError, ValueError) as error:
        raise SavedFileError(f"{path} is corrupt: its header is not valid ({error}).") from error
    size = os.fstat(file.fileno()).st_size - start
    if size < expected_size:
        raise SavedFileError(
            f"{path} is truncated: it holds {size} of the {expected_size} bytes of arrays."
        )
    if size > expected_size:
        raise SavedFileError(
            f"{path} is corrupt: {size - expected_size} unexpected bytes follow the arrays."
        )
    digest = hashlib.sha256()
    file.seek(start)
    while chunk := file.read(_CHUNK_BYTES):
        digest.update(chunk)
    if digest.hexdigest() != expected_sha256:
        raise SavedFileError(f"{path} is corrupt: the arrays' checksum does not match.")


def _check_against_model(obj, kind: str, model, path: Path) -> None:
    """The object's own structure against the model (files without a model record too)."""
    plan = model.plan
    found = []
    if kind == "Solution":
        for name in obj.values:
            if name not in plan.regimes:
                found.append(f"regime {name!r} is in the file but not in the model")
        for name, regime in plan.regimes.items():
            if name not in obj.values:
                found.append(f"regime {name!r} is in the model but not in the file")
                continue
            if obj.state_names.get(name) != regime.states:
                found.append(
                    f"regime {name!r}: states {list(obj.state_names.get(name, ()))} "
                    f"in the file, {list(regime.states)} in the model"
                )
                continue
            shape = obj.values[name].shape
            if shape[:1] != (plan.n_periods,):
                found.append(
                    f"regime {name!r}: {shape[0] if shape else 0} periods in the file, "
                    f"{plan.n_periods} in the model"
                )
            for state, n_file in zip(regime.states, shape[1:], strict=False):
                n_model = regime.grids[state].n_points
                if n_file != n_model:
                    found.append(
                        f"regime {name!r}: state {state!r} has {n_file} points in the "
                        f"file, {n_model} in the model"
                    )
            if len(shape) != 1 + len(regime.states):
                found.append(
                    f"regime {name!r}: value arrays of shape {shape} in the file do "
                    f"not fit the model's {len(regime.states)} states"
                )
            if obj.active.get(name) != tuple(sorted(regime.active)):
                found.append(
                    f"regime {name!r}: active periods {list(obj.active.get(name, ()))} "
                    f"in the file, {sorted(regime.active)} in the model"
                )
    else:
        if obj.regime_names != plan.names:
            found.append(
                f"regimes {list(obj.regime_names)} in the file, {list(plan.names)} in the model"
            )
        if obj.regime.ndim != 2 or obj.regime.shape[0] != plan.n_periods:
            found.append(
                f"{obj.regime.shape[0] if obj.regime.ndim else 0} periods in the file, "
                f"{plan.n_periods} in the model"
            )
    if found:
        raise SavedFileError(
            f"{path} was saved from a model with a different structure: "
            + "; ".join(found)
            + ". Load it into the model it was saved from, or solve this model anew."
        )
