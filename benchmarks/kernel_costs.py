"""What one XLA:CPU kernel of each kind costs to compile, and what LLVM's optimisation
level would give the DC-EGM first solve.

A first solve's XLA compile is a cost per kernel (docs/performance.md, "Where DC-EGM's
XLA compile goes"), but not the same cost for every kernel. `kinds` compiles programs of
1 and of `--copies` independent kernels of one kind (each copy a different constant, so
that XLA cannot merge them) and prints the difference per copy: the compile time one
more such kernel adds. The kinds are those of the DC-EGM program: elementwise fusions,
a lone broadcast of a constant (what XLA leaves of a constant output or a loop's
initial value), plain reductions of a few lengths, and the variadic reductions that
the solvers use to end a kernel (`one_kernel_reduce`, `materialize`), under DC-EGM's
compiler options and, for comparison, with XLA:CPU's MLIR fusion emitters. (A lone
broadcast is an instruction outside any fusion: compiled on its own, but not among the
fusions counted; a plain reduction over more than 32 entries is split by XLA:CPU into
a reduce-window and a reduce, two more such instructions.)

`reuse` compiles copies of one kernel that differ (a constant, as in `kinds`) and
copies that are identical but read different inputs (not merged: one fusion each), under
both emitters: whether XLA:CPU compiles a fused computation that appears several times
once. (It does with the MLIR fusion emitters, not with the loop emitters that DC-EGM's
options choose: making DC-EGM's kernels alike would not shorten its compile.)

`levels` compiles the quick start's model with `DCEGM` (the program of
`benchmarks/cold_start.py`) at LLVM optimisation levels 0-3
(`xla_backend_optimization_level`; 3 is the default), and prints the compile time,
the fastest of 20 solves, and how far each level's results are from the default's.

    python benchmarks/kernel_costs.py [kinds|reuse|levels] [--copies 11] [--rounds 3]

Fresh compiles (the persistent cache off); the fastest of `--rounds`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp
import numpy as np

from lcm_eqx._numerics import one_kernel_reduce
from lcm_eqx._solve._dcegm._envelope import materialize
from tests.models import retirement

# The options DC-EGM's solve is compiled with (`DCEGM.compiler_options`).
DCEGM_OPTIONS = retirement.dcegm().compiler_options()

# name: (the i-th copy of the kernel, the input's shape)
KINDS = {
    "elementwise": (lambda x, i: x * (i + 2.0) + i, (3, 200)),
    "broadcast of a constant": (lambda x, i: jnp.full((5 + i,), i, jnp.int32), (3, 200)),
    "max over 2 (plain)": (lambda x, i: jnp.max(x * (i + 2.0), axis=1), (300, 2)),
    "max over 16 (plain)": (lambda x, i: jnp.max(x * (i + 2.0), axis=1), (40, 16)),
    "max over 20 (plain)": (lambda x, i: jnp.max(x * (i + 2.0), axis=1), (30, 20)),
    "max over 200 (plain)": (lambda x, i: jnp.max(x * (i + 2.0), axis=1), (3, 200)),
    "max over 2 (one_kernel_reduce)": (
        lambda x, i: one_kernel_reduce(jax.lax.max, -jnp.inf, x * (i + 2.0), 1),
        (300, 2),
    ),
    "max over 20 (one_kernel_reduce)": (
        lambda x, i: one_kernel_reduce(jax.lax.max, -jnp.inf, x * (i + 2.0), 1),
        (30, 20),
    ),
    "max over 200 (one_kernel_reduce)": (
        lambda x, i: one_kernel_reduce(jax.lax.max, -jnp.inf, x * (i + 2.0), 1),
        (3, 200),
    ),
    "two arrays stored (materialize)": (
        lambda x, i: materialize(jnp.log(x + i + 2.0), x * (i + 2.0)),
        (3, 200),
    ),
}


# Each part of `kinds` and `reuse` runs under both emitters.
EMITTERS = (
    ("DC-EGM's options (loop emitters)", DCEGM_OPTIONS),
    ("MLIR fusion emitters", {**DCEGM_OPTIONS, "xla_cpu_use_fusion_emitters": True}),
)


def fastest_compile(fn, args, options, rounds: int) -> tuple[float, int]:
    """The fastest of `rounds` fresh compiles of `fn(*args)`, and its fusions."""
    runs = []
    for _ in range(rounds):
        jax.clear_caches()
        start = time.perf_counter()
        compiled = jax.jit(fn, compiler_options=options).lower(*args).compile()
        runs.append(time.perf_counter() - start)
    return min(runs), compiled.as_text().count("calls=%")


def kinds(copies: int, rounds: int) -> None:
    # JAX's and XLA's start-up, which the first compile of a process would pay.
    fastest_compile(lambda x: [x + 1.0], [jnp.ones(3)], DCEGM_OPTIONS, 1)
    for label, options in EMITTERS:
        print(f"{label}: compile ms per kernel (fusions in the program of {copies} copies)")
        for name, (kernel, shape) in KINDS.items():
            x = jnp.ones(shape)
            one = fastest_compile(lambda x: [kernel(x, 0)], [x], options, rounds)[0]
            many, count = fastest_compile(
                lambda x: [kernel(x, i) for i in range(copies)], [x], options, rounds
            )
            print(f"  {name:34s} {1e3 * (many - one) / (copies - 1):6.1f} ms   ({count} fusions)")


# name: (the i-th of differing copies, an identical copy, the input's shape)
REUSED = {
    "elementwise": (lambda x, i: x * (i + 2.0) + i, lambda x: x * 2.0 + 1.0, (3, 200)),
    "log and exp": (
        lambda x, i: jnp.log(x + i + 2.0) * jnp.exp(-x),
        lambda x: jnp.log(x + 2.0) * jnp.exp(-x),
        (3, 200),
    ),
    "max over 200 (one_kernel_reduce)": (
        lambda x, i: one_kernel_reduce(jax.lax.max, -jnp.inf, x * (i + 2.0), 1),
        lambda x: one_kernel_reduce(jax.lax.max, -jnp.inf, x * 2.0, 1),
        (3, 200),
    ),
}


def reuse(copies: int, rounds: int) -> None:
    fastest_compile(lambda x: [x + 1.0], [jnp.ones(3)], DCEGM_OPTIONS, 1)
    for label, options in EMITTERS:
        print(f"{label}: compile ms per copy of {copies} (fusions in the program)")
        for name, (differing, identical, shape) in REUSED.items():
            # Each copy reads its own input: XLA cannot merge identical copies.
            inputs = [jnp.full(shape, j + 1.0) for j in range(copies)]
            one = fastest_compile(lambda x: [identical(x)], inputs[:1], options, rounds)[0]
            seconds_d, count_d = fastest_compile(
                lambda *xs: [differing(x, i) for i, x in enumerate(xs)], inputs, options, rounds
            )
            seconds_i, count_i = fastest_compile(
                lambda *xs: [identical(x) for x in xs], inputs, options, rounds
            )
            print(
                f"  {name:34s} differing {1e3 * (seconds_d - one) / (copies - 1):6.1f} ms"
                f" ({count_d} fusions)   identical {1e3 * (seconds_i - one) / (copies - 1):6.1f}"
                f" ms ({count_i} fusions)"
            )


def levels(rounds: int) -> None:
    model = retirement.build(5, solver=retirement.dcegm(200))
    traced = model._solve.trace(retirement.PARAMS, validate=True, progress=None)
    reference = None
    print("LLVM level  compile (fastest)  solve (fastest of 20)  max |difference| from level 3")
    for level in (3, 2, 1, 0):
        options = {**DCEGM_OPTIONS, "xla_backend_optimization_level": level}
        seconds = []
        for _ in range(rounds):
            # A fresh lowering each time: the compiled program is kept in memory otherwise.
            jax.clear_caches()
            lowered = traced.lower()
            start = time.perf_counter()
            compiled = lowered.compile(options)
            seconds.append(time.perf_counter() - start)
        jax.block_until_ready(compiled(retirement.PARAMS))
        runs = []
        for _ in range(20):
            start = time.perf_counter()
            out = jax.block_until_ready(compiled(retirement.PARAMS))
            runs.append(time.perf_counter() - start)
        leaves = [np.asarray(x) for x in jax.tree.leaves(out)]
        if reference is None:
            reference = leaves
        worst = max(
            float(
                np.max(np.abs(np.where(np.isfinite(a), a, 0.0) - np.where(np.isfinite(b), b, 0.0)))
            )
            for a, b in zip(leaves, reference, strict=True)
            if a.size and np.issubdtype(a.dtype, np.floating)
        )
        equal = sum(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(leaves, reference, strict=True)
        )
        print(
            f"  {level}         {min(seconds):6.3f} s          {1e3 * min(runs):7.2f} ms"
            f"              {worst:.1e} ({equal} of {len(leaves)} outputs bitwise equal)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", nargs="?", choices=("kinds", "reuse", "levels"), default="kinds")
    parser.add_argument("--copies", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    if args.what == "kinds":
        kinds(args.copies, args.rounds)
    elif args.what == "reuse":
        reuse(args.copies, args.rounds)
    else:
        levels(args.rounds)


if __name__ == "__main__":
    main()
