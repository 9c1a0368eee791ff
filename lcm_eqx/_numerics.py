"""Precision and tolerances: the library's choice, not the device's.

A TPU computes a float32 matrix product or contraction at its default precision in one
pass of bfloat16 (about three significant digits); a CPU computes it in float32. On the
full Mahler–Yum example that made a TPU's period-0 values 1.9 % (median) and 4.5 %
(max) off the CPU's, silently (docs/tuning.md, "Running on an accelerator"). Every
contraction the library emits (the expectations over stochastic states) therefore names
`CONTRACTION_PRECISION`, and every user function runs under `exact_contractions()`, so
that a `jnp.dot` in a utility is computed alike on every device: on that model the TPU's
values then equal the CPU's float32 values to 1.1e-6 relative, at the same speed.

Numerical tolerances scale with the dtype in use (`relative`): a check that compares two
computations of one number allows a number of roundings of that dtype, never a fixed
float64 figure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# What every contraction (einsum, dot) that the library emits computes in: float32 on a
# TPU (six bfloat16 passes), the CPU's default elsewhere.
CONTRACTION_PRECISION = jax.lax.Precision.HIGHEST


def exact_contractions():
    """A context in which contractions written without a `precision` (a `jnp.dot` in a
    user's function) compute at `CONTRACTION_PRECISION`. Entered at trace time."""
    return jax.default_matmul_precision("highest")


def relative(tolerance: float, roundings: float, dtype) -> float:
    """`tolerance`, or `roundings` roundings of `dtype` where that is more (a tolerance
    written for float64 that float32 cannot meet becomes float32's own)."""
    return max(tolerance, roundings * float(jnp.finfo(dtype).eps))


def default_platform() -> str:
    """The platform that a program without placed inputs runs on: `jax.default_device`'s
    where one is set, else the default backend's."""
    device = getattr(jax.config, "jax_default_device", None)
    if device is None:
        return jax.default_backend()
    return device if isinstance(device, str) else device.platform


def float64_on_device_without_it() -> str | None:
    """A warning when float64 is on and the default device computes it in software."""
    platform = default_platform()
    if jnp.zeros(()).dtype != jnp.float64 or platform != "tpu":
        return None
    return (
        "float64 is on (jax_enable_x64), but the default device is a TPU, which has no "
        "native float64: XLA emulates it, and the library's programs then compile for "
        "minutes (the reduced Mahler-Yum solve had not compiled after 140 s) and run far "
        "slower. Use float32 there (leave jax_enable_x64 off: on a TPU the library's "
        "float32 results equal the CPU's to float32 round-off), or run on the CPU with "
        "`with jax.default_device(jax.devices('cpu')[0]): ...`."
    )
