"""What flattening an array of many short axes costs a device's compiler, by form.

The exact distribution (`model.distribution`) works on arrays with one axis per state and
discrete choice, most of them short (2–10 entries), and flattens them to scatter mass
(`_estimation/_flows.py`). A TPU stores an array in tiles over its last two axes (8 × 128
in float32, 2 × 128 for short ones), so an array whose last axes hold 2 entries each is
mostly padding, and a reshape that merges those axes is a relayout whose code the
compiler emits per tile: its compile time grows with the array's size. Profiled on
tiny Mahler–Yum's Jacobian (`benchmarks/compile_profile.py --program jacobian --size
tiny --float32`), five such reshapes of 69,120 elements took most of its 64 s compile.

This times, on the default device, one multiply and flatten of a `(*lead, 2, 2)` array
written in several forms, at the shape of tiny Mahler–Yum's flows and at one 5.6 times
larger:

- `direct`: the product reshaped to one axis (the library's form today);
- `barrier`: the leading axes merged first, behind an optimisation barrier;
- `flatfirst`: the leading factor flattened before the product (a 2-D product then
  flattened);
- `iota`: every element gathered by its flat index (no reshape of the product);
- `stack_index` / `stack_index_T`: two integer indices stacked on a last axis and
  flattened to `(n, 2)`, or stacked first on a leading one (a scatter's index).

Measured on one TPU v5e (float32, jax 0.10.2, 2026-12-07), compile / steady run:

| form | 69,120 elements | 384,000 elements |
|---|---:|---:|
| direct | 10.3 s / 0.62 ms | 66.2 s / 0.99 ms |
| barrier | 10.6 s / 0.73 ms | 67.0 s / 1.23 ms |
| flatfirst | 2.9 s / 0.65 ms | 17.3 s / 0.81 ms |
| iota | 1.0 s / 1.22 ms | 3.5 s / 3.49 ms |
| stack_index | 8.3 s / 0.79 ms | 62.5 s / 2.49 ms |
| stack_index_T | 8.8 s / 0.74 ms | 68.8 s / 1.55 ms |

On the 2-core CPU every form compiles in 0.03–0.10 s. So on a TPU the distribution's
arrays want their states on one long axis (flat nodes), not one short axis each; see
docs/tuning.md, "The exact distribution and its Jacobian are not yet an accelerator's
programs".

    python benchmarks/accelerator_layout.py
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
from jax import lax

SHAPES = ((5, 2, 3, 3, 2, 2, 2, 2, 2, 6, 2, 2), (10, 2, 5, 5, 2, 2, 2, 2, 2, 6, 2, 2))


def forms(shape: tuple[int, ...]) -> dict:
    lead, minor = shape[:-2], shape[-2:]
    n_lead, n = math.prod(lead), math.prod(shape)

    def direct(a, b):
        return (a[..., None, None] * b).reshape(-1)

    def barrier(a, b):
        y = lax.optimization_barrier((a[..., None, None] * b).reshape(n_lead, *minor))
        return y.reshape(-1)

    def flatfirst(a, b):
        return (a.reshape(n_lead)[:, None] * b.reshape(-1)[None, :]).reshape(-1)

    def iota(a, b):
        i = lax.iota(jnp.int32, n)
        m = math.prod(minor)
        return a.reshape(-1)[i // m] * b.reshape(-1)[i % m]

    def stack_index(a, b):
        y = a[..., None, None] * b
        return jnp.stack([y.astype(jnp.int32), (2 * y).astype(jnp.int32)], -1).reshape(-1, 2)

    def stack_index_T(a, b):
        y = (a[..., None, None] * b).reshape(-1)
        return jnp.stack([y.astype(jnp.int32), (2 * y).astype(jnp.int32)], 0)

    return {
        "direct": direct,
        "barrier": barrier,
        "flatfirst": flatfirst,
        "iota": iota,
        "stack_index": stack_index,
        "stack_index_T": stack_index_T,
    }


# A flow's scatter at tiny Mahler–Yum's shapes: nodes, discrete choices, `K` target
# combinations, the target's sparse states (its grid) and one dense block.
FLOWS = {
    "tiny": ((5, 2, 3, 3, 2, 2, 2, 2, 2), (3, 2), 4, (5, 3, 3, 2, 2, 2, 2, 2), 2),
    "reduced": ((10, 2, 5, 5, 5, 2, 2, 2, 2), (3, 2), 4, (10, 5, 5, 5, 2, 2, 2, 2), 2),
}


def flow_inputs(nodes, choices, k, target, block, seed=0):
    """Random mass `(*nodes)`, choice probabilities `(*nodes, *choices)`, weights
    `(*nodes, *choices, k)`, target codes `(*nodes, *choices, k, len(target))` and a
    dense block `(*nodes, *choices, block)`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lead = (*nodes, *choices)
    codes = np.stack([rng.integers(0, n, (*lead, k)) for n in target], -1).astype(np.int32)
    return (
        jnp.asarray(rng.uniform(size=nodes), jnp.float32),
        jnp.asarray(rng.uniform(size=lead), jnp.float32),
        jnp.asarray(rng.uniform(size=(*lead, k)), jnp.float32),
        jnp.asarray(codes),
        jnp.asarray(rng.uniform(size=(*lead, block)), jnp.float32),
    )


def scatter_forms(nodes, choices, k, target, block) -> dict:
    """The mass a flow moves, `mass · p · weight · dense`, added at its target codes:
    an array `(*target, block)`, in several forms (the arguments as `flow_inputs`)."""
    n_nodes, n_choices, n_target = math.prod(nodes), math.prod(choices), math.prod(target)
    strides = [math.prod(target[i + 1 :]) for i in range(len(target))]
    s, d = len(nodes), len(choices)

    def moved(mass, p, w, dense):
        node = lax.broadcast_in_dim(mass, (*p.shape, k, block), tuple(range(s)))
        choice = lax.broadcast_in_dim(p, (*p.shape, k, block), tuple(range(s + d)))
        weight = lax.broadcast_in_dim(w, (*p.shape, k, block), tuple(range(s + d + 1)))
        blocks = lax.broadcast_in_dim(dense, (*p.shape, k, block), (*range(s + d), s + d + 1))
        return node * choice * weight * blocks

    def flatten(mass, p, w, codes, dense):
        """The library's form today: the product and codes flattened, then scattered."""
        flat = codes.reshape(-1, len(target))
        return (
            jnp.zeros((*target, block), jnp.float32)
            .at[tuple(flat[:, i] for i in range(len(target)))]
            .add(moved(mass, p, w, dense).reshape(-1, block))
        )

    def batched(mass, p, w, codes, dense):
        """Scattered from the many-axis arrays (the index's batch axes kept)."""
        return (
            jnp.zeros((*target, block), jnp.float32)
            .at[tuple(codes[..., i] for i in range(len(target)))]
            .add(moved(mass, p, w, dense))
        )

    def linear(mass, p, w, codes, dense):
        """One flat code per entry (a strided sum), scattered on the target's flat grid."""
        code = sum(codes[..., i] * strides[i] for i in range(len(target)))
        arrived = jnp.zeros((n_target, block), jnp.float32).at[code].add(moved(mass, p, w, dense))
        return arrived.reshape(*target, block)

    def flat_nodes(mass, p, w, codes, dense):
        """Nodes and choices on one axis each from the start (as a flat map over nodes
        would give them), then `linear`."""
        mass, p = mass.reshape(n_nodes), p.reshape(n_nodes, n_choices)
        w, dense = w.reshape(n_nodes, n_choices, k), dense.reshape(n_nodes, n_choices, block)
        code = sum(
            codes[..., i].reshape(n_nodes, n_choices, k) * strides[i] for i in range(len(target))
        )
        mass, p, w, dense, code = lax.optimization_barrier((mass, p, w, dense, code))
        m = mass[:, None, None, None] * p[:, :, None, None] * w[..., None] * dense[:, :, None, :]
        arrived = jnp.zeros((n_target, block), jnp.float32).at[code].add(m)
        return arrived.reshape(*target, block)

    return {"flatten": flatten, "batched": batched, "linear": linear, "flat_nodes": flat_nodes}


def main() -> None:
    print(f"device: {jax.devices()[0]}")
    for size, spec in FLOWS.items():
        args = flow_inputs(*spec)
        for name, f in scatter_forms(*spec).items():
            clock = time.perf_counter()
            compiled = jax.jit(f).lower(*args).compile()
            compile_s = time.perf_counter() - clock
            jax.block_until_ready(compiled(*args))
            clock = time.perf_counter()
            for _ in range(5):
                jax.block_until_ready(compiled(*args))
            run_ms = (time.perf_counter() - clock) / 5 * 1e3
            memory = compiled.memory_analysis()
            temp = memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")
            print(
                f"flow scatter {size:<8} {name:<11} compile {compile_s:7.2f} s, "
                f"run {run_ms:7.3f} ms, temporaries {temp:8.1f} MiB",
                flush=True,
            )
    for shape in SHAPES:
        a = jnp.full(shape[:-2], 1.5, jnp.float32)
        b = jnp.full(shape[-2:], 0.5, jnp.float32)
        for name, f in forms(shape).items():
            clock = time.perf_counter()
            compiled = jax.jit(f).lower(a, b).compile()
            compile_s = time.perf_counter() - clock
            jax.block_until_ready(compiled(a, b))
            clock = time.perf_counter()
            for _ in range(5):
                jax.block_until_ready(compiled(a, b))
            run_ms = (time.perf_counter() - clock) / 5 * 1e3
            print(
                f"{math.prod(shape):>8} elements {name:<14} compile {compile_s:7.2f} s, "
                f"run {run_ms:7.3f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
