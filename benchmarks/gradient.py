"""Cost of differentiating through the solve: time and memory of the likelihood gradient.

For the retirement model with taste shocks (the retirement example's grids by default):

- time of `jax.value_and_grad` of the log-likelihood of a simulated panel, relative to
  one solve (both jitted, best of repeats after a warm-up; compile time reported
  apart), with the time of the likelihood alone and of the gradient of a scalar of the
  solution (sum of all values) for the breakdown;
- XLA's compiled temp memory (`memory_analysis().temp_size_in_bytes`) of the gradient
  with the per-period `jax.checkpoint` of the backward induction, and without it. The
  "without" variant is measured by replacing `jax.checkpoint` with the identity in the
  backward-induction module only (a monkeypatch local to this script, applied to a fresh
  model so no cached trace is reused). The likelihood's own per-period checkpoint is left
  in place in both variants. The same comparison is printed for the gradient of a
  scalar of the solution alone.

    python benchmarks/gradient.py                 # n_periods 5 and 20, 100 x 500 grids
    python benchmarks/gradient.py --quick         # small grids, smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _models  # noqa: E402
from benchmarks._timing import steady_time  # noqa: E402
from lcm_eqx._estimation import log_likelihood, prepare_data  # noqa: E402
from lcm_eqx._solve import _backward  # noqa: E402

PARAMS = {
    "discount_factor": 0.98,
    "interest_rate": 0.0,
    "disutility_of_work": 1.0,
    "wage": 20.0,
    "taste_shock_scale": 0.5,
}


class _NoCheckpoint(types.ModuleType):
    """`jax` as seen by the backward-induction module, with `checkpoint` as the identity."""

    def __init__(self):
        super().__init__("jax_without_checkpoint")

    def __getattr__(self, name):
        if name == "checkpoint":
            return lambda fn, *args, **kwargs: fn
        return getattr(jax, name)


def _solve_gradient_program(model):
    """Gradient of a scalar of the solution alone: the sum of every value array."""

    def total(params):
        return sum(jnp.sum(v) for v in model.solve(params, validate="off").values.values())

    return jax.jit(jax.grad(total))


def _gradient_program(model, data):
    def loss(params):
        return log_likelihood(model, params, data, validate="off")

    return jax.jit(jax.value_and_grad(loss))


def measure(
    n_periods: int, n_wealth: int, n_consumption: int, n_subjects: int, repeats: int
) -> dict:
    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    model = _models._retirement(n_periods, n_wealth, n_consumption, taste_shocks=True)
    rng = np.random.default_rng(0)
    initial = {
        "regime": np.zeros(n_subjects, dtype=int),
        "wealth": rng.uniform(1.0, 200.0, n_subjects),
    }
    panel = model.simulate(params, initial, key=jax.random.key(0)).to_dataframe()
    data = prepare_data(model, panel)

    solve = jax.jit(lambda p: model.solve(p, validate="off").values)
    start = time.perf_counter()
    solve_compiled = solve.lower(params).compile()
    solve_compile = time.perf_counter() - start
    solve_time = steady_time(lambda: solve_compiled(params), repeats, min)

    solve_grad = _solve_gradient_program(model).lower(params).compile()
    solve_grad_time = steady_time(lambda: solve_grad(params), repeats, min)
    solve_grad_memory = solve_grad.memory_analysis().temp_size_in_bytes
    likelihood = jax.jit(lambda p: log_likelihood(model, p, data, validate="off"))
    likelihood_time = steady_time(lambda: likelihood(params), repeats, min)

    gradient = _gradient_program(model, data)
    start = time.perf_counter()
    compiled = gradient.lower(params).compile()
    grad_compile = time.perf_counter() - start
    grad_time = steady_time(lambda: compiled(params), repeats, min)
    memory = compiled.memory_analysis().temp_size_in_bytes
    value, grads = compiled(params)

    original = _backward.jax
    _backward.jax = _NoCheckpoint()
    try:
        fresh = _models._retirement(n_periods, n_wealth, n_consumption, taste_shocks=True)
        plain = _gradient_program(fresh, prepare_data(fresh, panel)).lower(params).compile()
        memory_plain = plain.memory_analysis().temp_size_in_bytes
        solve_plain = _solve_gradient_program(fresh).lower(params).compile()
        solve_grad_memory_plain = solve_plain.memory_analysis().temp_size_in_bytes
        value_plain, grads_plain = plain(params)
        grad_time_plain = steady_time(lambda: plain(params), repeats, min)
    finally:
        _backward.jax = original
    assert np.allclose(value, value_plain, rtol=1e-12)
    for key in grads:
        assert np.allclose(grads[key], grads_plain[key], rtol=1e-9), key

    return {
        "n_periods": n_periods,
        "n_wealth": n_wealth,
        "n_consumption": n_consumption,
        "likelihood_rows": int(data.n_rows),
        "solve_s": solve_time,
        "value_and_grad_s": grad_time,
        "grad_over_solve": grad_time / solve_time,
        "likelihood_s": likelihood_time,
        "solve_grad_s": solve_grad_time,
        "solve_grad_over_solve": solve_grad_time / solve_time,
        "solve_compile_s": solve_compile,
        "grad_compile_s": grad_compile,
        "grad_temp_bytes_checkpoint": int(memory),
        "grad_temp_bytes_no_checkpoint": int(memory_plain),
        "value_and_grad_s_no_checkpoint": grad_time_plain,
        "solve_grad_temp_bytes_checkpoint": int(solve_grad_memory),
        "solve_grad_temp_bytes_no_checkpoint": int(solve_grad_memory_plain),
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids (smoke run)")
    parser.add_argument("--periods", type=int, nargs="*", default=None)
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = {"n_wealth": 50, "n_consumption": 100, "n_subjects": 200, "repeats": 2}
        periods = args.periods or [4, 12]
    else:
        sizes = {"n_wealth": 100, "n_consumption": 500, "n_subjects": 1000, "repeats": 5}
        periods = args.periods or [5, 20]
    results = [measure(t, **sizes) for t in periods]
    header = (
        f"{'T':>3} {'grid':>9} {'rows':>6} {'solve':>9} {'grad(solve)':>11} "
        f"{'loglik':>9} {'v&g loglik':>10} {'ratio':>6} "
        f"{'v&g no-ckpt':>11} {'temp ckpt':>11} {'temp no-ckpt':>12} {'compile v&g':>11}"
    )
    print(header)
    for r in results:
        print(
            f"{r['n_periods']:>3} {r['n_wealth']:>4}x{r['n_consumption']:<4} "
            f"{r['likelihood_rows']:>6} {r['solve_s'] * 1e3:>7.1f}ms "
            f"{r['solve_grad_s'] * 1e3:>9.1f}ms {r['likelihood_s'] * 1e3:>7.1f}ms "
            f"{r['value_and_grad_s'] * 1e3:>8.1f}ms {r['grad_over_solve']:>6.1f} "
            f"{r['value_and_grad_s_no_checkpoint'] * 1e3:>9.1f}ms "
            f"{r['grad_temp_bytes_checkpoint'] / 2**20:>9.2f}MB "
            f"{r['grad_temp_bytes_no_checkpoint'] / 2**20:>10.2f}MB "
            f"{r['grad_compile_s']:>10.1f}s"
        )
    print("\ngrad(solve) alone, XLA temp memory with / without the period checkpoint:")
    for r in results:
        print(
            f"  T={r['n_periods']:>3}: {r['solve_grad_temp_bytes_checkpoint'] / 2**20:8.2f} MB"
            f" / {r['solve_grad_temp_bytes_no_checkpoint'] / 2**20:8.2f} MB"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
