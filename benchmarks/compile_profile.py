"""Where a program's compile time goes, on the default device: the compiler's passes and
the emission of each fusion, read from a `jax.profiler.trace` around
`jax.jit(f).lower(...).compile()`.

XLA records each pass and, on a TPU, the emission of each fusion ("XLA::TPU emitting for
fusion.57") as profiler events; summed by name they say which pass or which kernel the
compile spends its time on, and the compiled HLO names the operation behind a kernel
(its `op_name` metadata). This is how the two slow forms of issue 59 were found (a
relayout reshape of the validated solve's checks, 12 of its 17.6 s; an `argmax` along
the gradient's savings, emitted seven times, 59 of 64 s: docs/tuning.md, "Running on an
accelerator").

    python benchmarks/compile_profile.py                        # full Mahler-Yum solve
    python benchmarks/compile_profile.py --program gradient --size reduced
    python benchmarks/compile_profile.py --program solve --validate off --hlo solve.txt
    python benchmarks/compile_profile.py --program jacobian --size tiny --float32 --run 3

Programs: `solve` (`model.solve`'s program), `gradient` (`jax.grad` of the mean period-0
value in the effort elasticity, as `benchmarks/device_check.py` has it), `distribution`
(`examples/mahler_yum_estimate.py`'s exact moments) and `jacobian` (their Jacobian, a
Gauss–Newton step's work; `--float32` on a TPU); `--run N` then calls the compiled
program N times and prints XLA's temporaries. The
persistent compilation cache is off while it compiles, so that the compile is one.
"""

from __future__ import annotations

import argparse
import collections
import glob
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]


def compile_events(lower, top: int = 30) -> dict:
    """Lower and compile (`lower()` returns a `jax.stages.Lowered`) under the profiler:
    the lower and compile seconds, the compiled HLO, and the `top` profiler events by
    total duration (name, count, milliseconds; the Python tracer off, so that the events
    are the compiler's)."""
    import jax

    # A compile read from the persistent cache has no compiler events. JAX decides once
    # per process whether it uses the cache (at the first compile): its memo is reset
    # around the profiled compile so that the switch takes effect (a private module,
    # where this JAX has it).
    cached = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    _reset_cache_memo()
    try:
        return _profiled(lower, top)
    finally:
        jax.config.update("jax_enable_compilation_cache", cached)
        _reset_cache_memo()


def _reset_cache_memo() -> None:
    try:
        from jax._src import compilation_cache
    except ImportError:
        return
    reset = getattr(compilation_cache, "reset_cache", None)
    if reset is not None:
        reset()


def _profiled(lower, top: int) -> dict:
    import jax

    with tempfile.TemporaryDirectory() as directory:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        options.host_tracer_level = 2
        with jax.profiler.trace(directory, profiler_options=options):
            start = time.perf_counter()
            lowered = lower()
            lowered_at = time.perf_counter()
            compiled = lowered.compile()
            compiled_at = time.perf_counter()
        files = sorted(glob.glob(f"{directory}/**/*.xplane.pb", recursive=True))
        profile = jax.profiler.ProfileData.from_file(files[-1])
        totals: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
        for plane in profile.planes:
            for line in plane.lines:
                for event in line.events:
                    entry = totals[event.name[:100]]
                    entry[0] += 1
                    entry[1] += event.duration_ns / 1e6
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
    return {
        "lower_s": lowered_at - start,
        "compile_s": compiled_at - lowered_at,
        "hlo": compiled.as_text() or "",
        "events": [(name, count, ms) for name, (count, ms) in ranked],
        "compiled": compiled,
    }


def _program(name: str, size: str, validate: str, tangent_batch: int = 0):
    """`(lower, args)`: a function returning the program's `jax.stages.Lowered`, and the
    arguments its compiled form is called with."""
    import jax
    import jax.numpy as jnp
    import mahler_yum

    if name in ("distribution", "jacobian"):
        return _estimation_program(name, size, tangent_batch)

    model, params, _ = mahler_yum.build(size, n_subjects=4)
    if name == "solve":
        checked = model.checked_params(params)
        return (
            lambda: model._solve_nested.lower(checked, validate=validate != "off", progress=None),
            (checked,),
        )

    def mean_value(elasticity):
        p = {**params, "alive": {**params["alive"]}}
        p["alive"]["effort_cost"] = {
            **params["alive"]["effort_cost"],
            "effort_elasticity": elasticity,
        }
        return jnp.mean(model.solve(p, validate=validate).value("alive", 0))

    x = jnp.asarray(params["alive"]["effort_cost"]["effort_elasticity"])
    return lambda: jax.jit(jax.value_and_grad(mean_value)).lower(x), (x,)


def _estimation_program(name: str, size: str, tangent_batch: int = 0):
    """The estimation example's exact moments (`distribution`), or their Jacobian in its
    five free parameters, forward mode vmapped as `lcm.estimate` takes it (`jacobian`;
    `tangent_batch` > 0: that many tangents at a time, as `lcm.estimate`'s
    `tangent_batch_size`)."""
    import jax
    import jax.numpy as jnp
    import mahler_yum_estimate as example

    model, truth, initial = example.build(size, n_subjects=200)
    mass = model.initial_mass(initial, params=truth)
    params = jax.tree.map(jnp.asarray, model.checked_params(truth))
    paths = [path for path, _, _ in example.FREE.values()]
    theta = jnp.asarray([float(example.get(params, path)) for path in paths])

    def moments(theta):
        p = params
        for i, path in enumerate(paths):
            p = example.put(p, path, theta[i])
        d = model.distribution(p, mass, validate="off")
        return jnp.concatenate(
            [
                d.mean("effort_value", "alive"),
                d.share("health", 1, "alive"),
                d.mean("wealth", "alive"),
            ]
        )

    def jacobian(theta):
        tangents = jnp.eye(theta.shape[0], dtype=theta.dtype)
        along = lambda v: jax.jvp(moments, (theta,), (v,))
        if 0 < tangent_batch < theta.shape[0]:
            return jax.lax.map(along, tangents, batch_size=tangent_batch)
        return jax.vmap(along)(tangents)

    return lambda: jax.jit(moments if name == "distribution" else jacobian).lower(theta), (theta,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--program", choices=("solve", "gradient", "distribution", "jacobian"), default="solve"
    )
    parser.add_argument(
        "--float32", action="store_true", help="float64 off (the estimation example reads it)"
    )
    parser.add_argument("--size", default="full")
    parser.add_argument("--validate", choices=("raise", "off"), default="raise")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--tangent-batch",
        type=int,
        default=0,
        help="jacobian: tangents at a time (lcm.estimate's tangent_batch_size; 0: all)",
    )
    parser.add_argument("--hlo", type=Path, help="write the compiled HLO here")
    parser.add_argument(
        "--run",
        type=int,
        default=0,
        help="then call it this many times (steady) and print XLA's temporaries",
    )
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", not args.float32)

    lower, call_args = _program(args.program, args.size, args.validate, args.tangent_batch)
    result = compile_events(lower, args.top)
    print(
        f"{args.program} ({args.size}, validate={args.validate}) on {jax.devices()[0]}: "
        f"lower {result['lower_s']:.2f} s, compile {result['compile_s']:.2f} s"
    )
    width = max(len(name) for name, _, _ in result["events"])
    for name, count, ms in result["events"]:
        print(f"  {name:<{width}} {count:>6} {ms:>10.1f} ms")
    if args.hlo:
        args.hlo.write_text(result["hlo"])
    if args.run:
        memory = result["compiled"].memory_analysis()
        if memory is not None:
            print(f"temporaries {memory.temp_size_in_bytes / 2**30:.3f} GiB")
        for _ in range(args.run):
            start = time.perf_counter()
            jax.block_until_ready(result["compiled"](*call_args))
            print(f"run {time.perf_counter() - start:.4f} s")


if __name__ == "__main__":
    main()
