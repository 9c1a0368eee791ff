"""The upper envelope: lcm_eqx's `ExactEnvelope` against FUES from the `upper-envelope`
package (Dobrescu & Shanker's fast upper-envelope scan in JAX, the one `dcegm` uses).

The input is real: the raw Euler-equation points `(m, c, v, u'(c))` of the "work" choice
in period 0 of the 5-period retirement model (`tests/models/retirement.py`), recorded
from lcm_eqx's own DC-EGM solve by an envelope that copies its inputs out with
`jax.debug.callback` and then delegates to `ExactEnvelope`. That choice's continuation is
not concave (retirement in periods 1-3), so its endogenous grid folds back. For the
vmap batch, the same points for 8 values of the disutility of work (0.6-1.4), whose
kinks sit at different wealth.

For each savings grid size n and each envelope it measures, within one run:

- agreement: both refined functions read on a fine grid of cash on hand `m` (ours with
  `lcm_eqx._solve._dcegm._envelope.read`: cubic Hermite value, linear consumption; FUES's
  output by linear interpolation, as `dcegm` reads it; both with the exact
  credit-constrained segment below the first point), the max |Δ value| and
  |Δ consumption|; and, to separate the envelope from the interpolation, the same with
  ours also read linearly. Consumption jumps where the optimal branch switches, so a
  jump placed a little apart gives a large |Δc| on a short interval: that interval's
  length is reported too;
- compile time (`lower().compile()` after `jax.clear_caches()`, median of 3) and
  steady run time (jit, float64, median of `--repeats` calls, the two envelopes
  interleaved call by call), also under `jax.vmap` over the batch of 8;
- XLA's compiled temp memory (`memory_analysis().temp_size_in_bytes`), single and vmap;
- differentiability: the derivative of `S(θ) = Σ_k V(x_k)` (refined value read at 5
  points) when the inputs move with `θ` (`m, c, v` scaled by `1 + θ`, `u'(c)` by
  `1 / (1 + θ)`), by `jax.grad` (reverse mode) and by `jax.jacfwd` (forward mode),
  against a central finite difference (h = 1e-6); a failure is reported with its error.

    PYTHONPATH=. python benchmarks/upper_envelope.py            # n = 200, 500, 1000, 5000
    PYTHONPATH=. python benchmarks/upper_envelope.py --quick    # n = 200, 3 repeats
    PYTHONPATH=. python benchmarks/upper_envelope.py --json out.json

`upper_envelope` is not a dependency of lcm_eqx: without it, ours is measured alone.
Install it in a separate environment to compare (`pip install upper-envelope`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
# The persistent cache would make compiles after the first look free.
jax.config.update("jax_enable_compilation_cache", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lcm_eqx as lcm  # noqa: E402
from benchmarks._timing import interleaved  # noqa: E402
from lcm_eqx._solve._dcegm._envelope import ExactEnvelope, read  # noqa: E402
from tests.models import retirement  # noqa: E402

# This script's own folder comes first on sys.path and holds a module of the same name as
# the package: look the package up without it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
try:
    from upper_envelope.jax import fues_jax, fues_jax_unconstrained
except ImportError:  # not a dependency of lcm_eqx
    fues_jax = fues_jax_unconstrained = None

BETA = retirement.PARAMS["discount_factor"]
DELTAS = (1.0, 0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3)  # the first is retirement.PARAMS's
MEMORY_LIMIT = 6 * 2**30  # skip running a variant whose compiled temp exceeds this
OURS, FUES = "ExactEnvelope", "FUES (upper-envelope)"
FUES_SCAN = "FUES inner scan"  # fues_jax_unconstrained: FUES without its constrained-region step


# ---------------------------------------------------------------------------------------
# The input: raw Euler-equation points recorded from lcm_eqx's DC-EGM solve
# ---------------------------------------------------------------------------------------


class _Recorder(lcm.AbstractUpperEnvelope):
    """`ExactEnvelope`, copying each call's inputs out (in call order)."""

    def __call__(self, m, c, v, mu, constrained_value, marginal, utility=None):
        probe = constrained_value(jnp.asarray(1.0, m.dtype))  # u(1) + continuation0
        jax.debug.callback(_record, m, c, v, mu, probe, ordered=True)
        return ExactEnvelope()(m, c, v, mu, constrained_value, marginal, utility=utility)


_RECORDS: list[tuple[np.ndarray, ...]] = []


def _record(*arrays):
    _RECORDS.append(tuple(np.array(a) for a in arrays))


def record_inputs(n: int) -> dict[str, np.ndarray]:
    """The work choice's raw points in period 0, one row per value of `DELTAS`.

    Per period the solve calls the envelope for (working, work), (working, retire),
    (retired) in that order, periods last to first: period 0's work choice is the third
    call from the end.
    """
    savings = retirement.savings_grid(n)
    solver = lcm.DCEGM(
        state="wealth", action="consumption", savings=savings, upper_envelope=_Recorder()
    )
    model = retirement.build(5, solver=solver)
    rows = []
    for delta in DELTAS:
        _RECORDS.clear()
        jax.block_until_ready(model.solve({**retirement.PARAMS, "disutility_of_work": delta}))
        jax.effects_barrier()
        m, c, v, mu, probe = _RECORDS[-3]
        continuation0 = float(probe) + delta  # u(1) = log 1 - delta
        assert np.all(np.isfinite(m)) and np.all(np.isfinite(v)), "expected finite points"
        assert np.allclose(mu, 1.0 / c), "expected u'(c) = 1/c (log utility)"
        rows.append((m, c, v, mu, continuation0, delta))
    m, c, v, mu, continuation0, delta = (np.stack([r[i] for r in rows]) for i in range(6))
    return {
        "m": m, "c": c, "v": v, "mu": mu, "continuation0": continuation0, "delta": delta,
        "a0": float(savings.to_jax()[0]),
    }  # fmt: skip


# ---------------------------------------------------------------------------------------
# The two envelopes on one signature, and their readers
# ---------------------------------------------------------------------------------------


def _utility(c, delta):
    return jnp.log(c) - delta


def _fues_value(consumption, continuation0, delta):
    """FUES's value of consuming down to the borrowing limit (a0 = 0)."""
    return _utility(consumption, delta) + continuation0


def ours(m, c, v, mu, continuation0, delta, a0):
    def constrained_value(x):
        ok = x > a0
        return jnp.where(ok, _utility(jnp.where(ok, x - a0, 1.0), delta) + continuation0, -jnp.inf)

    return ExactEnvelope()(m, c, v, mu, constrained_value, lambda c: 1.0 / c)


def fues(m, c, v, mu, continuation0, delta, a0):
    del mu, a0  # FUES interpolates linearly; the borrowing limit is 0 here
    assert fues_jax is not None
    grid, policy, value = fues_jax(
        endog_grid=m,
        policy=c,
        value=v,
        # `dcegm`'s convention: undiscounted E[V'] at zero savings, value function u + β·it.
        expected_value_zero_savings=continuation0 / BETA,
        value_function=_fues_value,
        value_function_args=(continuation0, delta),
    )
    return grid, policy, value


def fues_scan(m, c, v, mu, continuation0, delta, a0):
    """FUES's scan alone (`fues_jax_unconstrained`), as `fues_jax` calls it when no raw
    point lies below the first one (true of these inputs): for the derivative check."""
    del mu, delta, a0
    assert fues_jax_unconstrained is not None
    grid, value, policy = fues_jax_unconstrained(
        m, v, c, continuation0 / BETA, n_final_wealth_grid=int(1.2 * m.shape[0])
    )
    return grid, policy, value


def read_ours(out, x, continuation0, delta, a0):
    nodes, count = out
    c, v, _ = read(
        nodes, count, continuation0, a0, x, lambda c: _utility(c, delta), lambda c: 1.0 / c
    )
    return c, v


def _read_linear(m_ref, c_ref, v_ref, first, x, continuation0, delta, a0):
    """Linear interpolation of `(m_ref, c_ref, v_ref)` (sorted, padded with +inf), the
    exact constrained segment below `m_ref[first]`, linear extrapolation past the end."""
    n_valid = jnp.sum(jnp.isfinite(m_ref))
    k = jnp.clip(jnp.searchsorted(m_ref, x, side="right") - 1, first, n_valid - 2)
    m0, m1 = m_ref[k], m_ref[k + 1]
    h = m1 - m0
    t = jnp.where(h > 0, (x - m0) / jnp.where(h > 0, h, 1.0), 1.0)
    c = c_ref[k] + t * (c_ref[k + 1] - c_ref[k])
    v = v_ref[k] + t * (v_ref[k + 1] - v_ref[k])
    constrained = x < m_ref[first]
    c_constrained = jnp.where(x > a0, x - a0, 1.0)
    c = jnp.where(constrained, c_constrained, c)
    v = jnp.where(constrained, _utility(c_constrained, delta) + continuation0, v)
    return c, v


def read_fues(out, x, continuation0, delta, a0):
    grid, policy, value = out
    # NaN padding -> +inf; the first output point is the (m=0, c=0) anchor FUES always
    # emits (dcegm reads the constrained segment below the next one in closed form).
    m_ref = jnp.where(jnp.isnan(grid), jnp.inf, grid)
    return _read_linear(m_ref, policy, value, 1, x, continuation0, delta, a0)


def read_ours_linear(out, x, continuation0, delta, a0):
    nodes, _ = out
    return _read_linear(nodes[:, 0], nodes[:, 1], nodes[:, 2], 0, x, continuation0, delta, a0)


ENVELOPES = {OURS: (ours, read_ours), FUES: (fues, read_fues), FUES_SCAN: (fues_scan, read_fues)}


# ---------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------


def _args(inputs, i=None):
    take = (lambda a: jnp.asarray(a[i])) if i is not None else jnp.asarray
    names = ("m", "c", "v", "mu", "continuation0", "delta")
    return (*(take(inputs[k]) for k in names), inputs["a0"])


def crossings(name, out) -> np.ndarray:
    """Where the refined policy jumps (a crossing of two branches, inserted twice)."""
    if name == OURS:
        nodes, count = out
        m, c = np.asarray(nodes[: int(count), 0]), np.asarray(nodes[: int(count), 1])
    else:
        grid, policy, _ = out
        keep = ~np.isnan(np.asarray(grid))
        m, c = np.asarray(grid)[keep], np.asarray(policy)[keep]
    twice = (m[1:] == m[:-1]) & (np.abs(c[1:] - c[:-1]) > 1e-9 * (1 + np.abs(c[1:])))
    return m[:-1][twice]


def agreement(inputs, names, n_fine=20_000) -> dict:
    """Differences of each envelope to ours, read on a fine grid of m; the crossings.

    The fine grid also holds the mid-points between ours and the other's crossing of the
    same two branches, so a jump placed apart always shows in max |Δ consumption|; the
    policy is then also compared off those intervals.
    """
    args = _args(inputs, 0)
    m = np.asarray(args[0])
    outs, found = {}, {}
    for name in names:
        outs[name] = jax.jit(ENVELOPES[name][0], static_argnums=6)(*args)
        found[name] = crossings(name, outs[name])
    paired = [name for name in names if len(found[name]) == len(found[OURS])]
    between = [0.5 * (found[name] + found[OURS]) for name in paired]
    x = jnp.asarray(
        np.sort(np.concatenate([np.linspace(0.9 * m.min(), m.max(), n_fine), *between]))
    )
    reads = {}
    for name in names:
        out, reader = outs[name], ENVELOPES[name][1]
        reads[name] = jax.vmap(lambda x, out=out, reader=reader: reader(out, x, *args[4:]))(x)
        if name == OURS:
            reads["ours, linear"] = jax.vmap(lambda x: read_ours_linear(out, x, *args[4:]))(x)
    result = {"crossings": {name: found[name].tolist() for name in names}}
    native = tuple(np.asarray(a) for a in reads[OURS])
    xs = np.asarray(x)
    for name in names:
        if name == OURS:
            continue
        off = np.ones(xs.shape, bool)
        if name in paired:  # away from the intervals between the two crossings
            for a, b in zip(found[name], found[OURS], strict=True):
                off &= (xs < min(a, b) - 1e-9) | (xs > max(a, b) + 1e-9)
        for against, (c0, v0) in (("native", native), ("linear", reads["ours, linear"])):
            c1, v1 = (np.asarray(a) for a in reads[name])
            dc, dv = np.abs(c1 - np.asarray(c0)), np.abs(v1 - np.asarray(v0))
            result[f"{name} vs ours ({against})"] = {
                "max_dvalue": float(dv.max()),
                "max_dpolicy": float(dc.max()),
                "max_dpolicy_off_crossings": float(dc[off].max()),
                "max_dcrossing": (
                    float(np.max(np.abs(found[name] - found[OURS]), initial=0.0))
                    if name in paired
                    else None
                ),
                "m_range": [float(x[0]), float(x[-1])],
            }
    return result


def _compile(fn, args, static):
    jax.clear_caches()
    start = time.perf_counter()
    compiled = jax.jit(fn, static_argnums=static).lower(*args).compile()
    return compiled, time.perf_counter() - start


def _temp_mib(compiled) -> float:
    analysis = compiled.memory_analysis()
    return analysis.temp_size_in_bytes / 2**20 if analysis is not None else float("nan")


def performance(inputs, names, repeats) -> dict:
    single = _args(inputs, 0)
    batch = _args(inputs)

    def batched(envelope):
        return lambda m, c, v, mu, k, d, a0: jax.vmap(
            lambda *row: envelope(*row, a0)
        )(m, c, v, mu, k, d)  # fmt: skip

    variants = {}
    for name in names:
        envelope = ENVELOPES[name][0]
        variants[(name, "single")] = (envelope, single)
        variants[(name, "vmap")] = (batched(envelope), batch)
    compiled, compile_s, temp = {}, {key: [] for key in variants}, {}
    for _ in range(3):  # interleaved compiles
        for key, (fn, args) in variants.items():
            compiled[key], seconds = _compile(fn, args, 6)
            compile_s[key].append(seconds)
    run = {}
    for key, (_, args) in variants.items():
        temp[key] = _temp_mib(compiled[key])
        if temp[key] * 2**20 > MEMORY_LIMIT:
            print(f"  skipping the run of {key}: temp {temp[key]:.0f} MiB", flush=True)
            continue
        run[key] = (lambda c, a: lambda: c(*a))(compiled[key], args[:6])  # a0 is static
    for fn in run.values():
        jax.block_until_ready(fn())  # warm-up
    times = interleaved(run, repeats)
    result = {}
    for key in variants:
        name, kind = key
        row = result.setdefault(name, {})
        row[f"{kind}_compile_s"] = statistics.median(compile_s[key])
        row[f"{kind}_run_ms"] = 1e3 * statistics.median(times[key]) if key in times else None
        row[f"{kind}_temp_mib"] = temp[key]
    return result


def differentiability(inputs, names) -> dict:
    args = _args(inputs, 0)
    m, c, v, mu, continuation0, delta, a0 = args
    points = jnp.quantile(m, jnp.asarray([0.1, 0.3, 0.5, 0.7, 0.9]))
    # Keep the points off the kinks and jumps: nudge them to mid-way between raw points.
    index = jnp.searchsorted(jnp.sort(m), points)
    sorted_m = jnp.sort(m)
    points = 0.5 * (sorted_m[index - 1] + sorted_m[index])
    result = {}
    for name in [*names, FUES_SCAN] if FUES in names else names:
        envelope, reader = ENVELOPES[name]

        def objective(theta, envelope=envelope, reader=reader):
            s = 1.0 + theta
            out = envelope(m * s, c * s, v * s, mu / s, continuation0, delta, a0)
            return jnp.sum(jax.vmap(lambda x: reader(out, x, continuation0, delta, a0)[1])(points))

        h = 1e-6
        f = jax.jit(objective)
        fd = float((f(h) - f(-h)) / (2 * h))
        row = {"finite_difference": fd}
        for mode, transform in (("grad", jax.grad), ("jacfwd", jax.jacfwd)):
            try:
                derivative = float(jax.jit(transform(objective))(0.0))
                row[mode] = derivative
                row[f"{mode}_rel_error"] = abs(derivative - fd) / max(abs(fd), 1e-12)
            except Exception as error:  # the report says which transform fails and why
                message = str(error).strip().splitlines()[0][:160]
                row[mode] = None
                row[f"{mode}_error"] = f"{type(error).__name__}: {message}"
        result[name] = row
    return result


# ---------------------------------------------------------------------------------------


def _versions() -> dict:
    versions = {}
    for package in ("jax", "jaxlib", "equinox", "upper-envelope", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n = 200 only, 3 repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--ours-only", action="store_true", help="skip FUES even if installed")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sizes = args.sizes or ([200] if args.quick else [200, 500, 1000, 5000])
    repeats = args.repeats or (3 if args.quick else 9)
    names = [OURS] if (fues_jax is None or args.ours_only) else [OURS, FUES]
    versions = _versions()
    print("versions:", ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"devices: {jax.devices()}, float64, {repeats} interleaved repeats")
    if fues_jax is None:
        print("upper_envelope is not installed: measuring ExactEnvelope alone")

    results = {"versions": versions, "repeats": repeats, "sizes": {}}
    for n in sizes:
        print(f"\nn = {n}: recording the inputs ...", flush=True)
        inputs = record_inputs(n)
        folds = int(np.sum(np.diff(inputs["m"][0]) < 0))
        print(f"  folds (m decreasing) in the input: {folds}", flush=True)
        row = {
            "folds": folds,
            "agreement": agreement(inputs, names),
            "performance": performance(inputs, names, repeats),
            "gradient": differentiability(inputs, names),
        }
        results["sizes"][n] = row
        print(json.dumps(row, indent=1), flush=True)

    header = (
        f"{'n':>5} {'envelope':<22} {'compile s':>9} {'run ms':>8} {'vmap×8 ms':>9} "
        f"{'temp MiB':>9} {'vmap MiB':>9} {'max|Δv|':>8} {'max|Δc|':>8} {'off-jump':>8} "
        f"{'Δ cross':>8} "
        f"{'grad err':>9} {'jacfwd err':>10}"
    )
    print("\n" + header)
    print("-" * len(header))
    for n, row in results["sizes"].items():
        for name in names:
            p, g = row["performance"][name], row["gradient"][name]
            a = row["agreement"].get(f"{name} vs ours (native)", {})
            grad = _fmt(g.get("grad_rel_error"), ".1e") if g.get("grad") is not None else "fails"
            jf = _fmt(g.get("jacfwd_rel_error"), ".1e") if g.get("jacfwd") is not None else "fails"
            print(
                f"{n:>5} {name:<22} {p['single_compile_s']:>9.2f} "
                f"{_fmt(p['single_run_ms'], '8.2f'):>8} "
                f"{_fmt(p['vmap_run_ms'], '9.2f'):>9} {p['single_temp_mib']:>9.2f} "
                f"{p['vmap_temp_mib']:>9.2f} {_fmt(a.get('max_dvalue'), '.1e'):>8} "
                f"{_fmt(a.get('max_dpolicy'), '.1e'):>8} "
                f"{_fmt(a.get('max_dpolicy_off_crossings'), '.1e'):>8} "
                f"{_fmt(a.get('max_dcrossing'), '.1e'):>8} {grad:>9} {jf:>10}"
            )
        if FUES in names:
            ours_p, fues_p = row["performance"][OURS], row["performance"][FUES]
            ratios = [
                f"{kind} {fues_p[f'{kind}_run_ms'] / ours_p[f'{kind}_run_ms']:.2f}"
                for kind in ("single", "vmap")
                if fues_p[f"{kind}_run_ms"] and ours_p[f"{kind}_run_ms"]
            ]
            print(f"{'':>5} FUES/ours run time: {', '.join(ratios)}")
    print(
        "(Δ: FUES read linearly vs ours read by lcm_eqx, on 20,000 points of m and between the"
        " crossings;\n 'off-jump': max |Δc| away from the crossings; 'Δ cross': max distance"
        " between the two envelopes' crossings)"
    )
    for n, row in results["sizes"].items():
        if FUES_SCAN in row["gradient"]:
            g = row["gradient"][FUES_SCAN]
            print(
                f"n={n} {FUES_SCAN} (fues_jax_unconstrained): grad rel. error "
                f"{_fmt(g.get('grad_rel_error'), '.1e')}, "
                f"jacfwd {_fmt(g.get('jacfwd_rel_error'), '.1e')}"
            )
    # Crossing placement against the largest grid's exact envelope (same model, finer
    # savings grid), where both methods' crossings have converged.
    finest = max(results["sizes"])
    reference = np.asarray(results["sizes"][finest]["agreement"]["crossings"][OURS])
    print(
        f"crossings (m where the policy jumps), n={finest} ExactEnvelope:", np.round(reference, 4)
    )
    for n, row in results["sizes"].items():
        for name in names:
            found = np.asarray(row["agreement"]["crossings"][name])
            same = len(found) == len(reference)
            error = float(np.max(np.abs(found - reference))) if same else None
            row["agreement"][f"{name} crossing error vs n={finest}"] = error
            print(f"  n={n:>5} {name:<22} max |crossing - reference| {_fmt(error, '.2e')}")
    for n, row in results["sizes"].items():
        for name in names:
            for mode in ("grad", "jacfwd"):
                error = row["gradient"][name].get(f"{mode}_error")
                if error:
                    print(f"n={n} {name} {mode}: {error}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
