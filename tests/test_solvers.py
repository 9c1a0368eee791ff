"""Every solver × every model it fits (`tests/helpers.py`): the transforms a solve must
survive. A solver added to `helpers.SOLVERS` inherits all of these.

Sharding is not in this harness: it needs a process with several host devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=4`), which tests/test_mesh.py runs in
subprocesses.
"""

import functools

import equinox as eqx
import jax

jax.config.update("jax_enable_x64", True)  # central finite differences need float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests.helpers import CASE_IDS, CASES  # noqa: E402

cases = pytest.mark.parametrize("solver, model", CASES, ids=CASE_IDS)


@functools.cache
def _built(solver, model):
    """The `lcm.Model` and its solution (cached: the cases share them across tests)."""
    built = model.build(solver.make())
    return built, built.solve(model.params)


def _values(solution) -> dict[str, np.ndarray]:
    return {regime: np.asarray(values) for regime, values in solution.values.items()}


def _assert_same(got, expected, **tolerance):
    assert got.keys() == expected.keys()
    for regime in expected:
        if tolerance:
            np.testing.assert_allclose(got[regime], expected[regime], **tolerance)
        else:
            np.testing.assert_array_equal(got[regime], expected[regime], err_msg=regime)


@cases
def test_jit_matches_eager(solver, model):
    built, solution = _built(solver, model)
    jitted = jax.jit(built.solve)(model.params)
    _assert_same(_values(jitted), _values(solution))


@cases
def test_grad_matches_central_differences(solver, model):
    built, _ = _built(solver, model)

    def mean_value(x):
        params = {**model.params, model.scalar: x}
        return jnp.mean(built.solve(params).value("working", 0))

    x, step = model.params[model.scalar], 1e-5
    grad = jax.grad(mean_value)(x)
    differences = (mean_value(x + step) - mean_value(x - step)) / (2 * step)
    np.testing.assert_allclose(grad, differences, rtol=1e-4, atol=1e-6)


@cases
def test_vmap_over_a_parameter_matches_a_loop(solver, model):
    built, _ = _built(solver, model)
    xs = model.params[model.scalar] * jnp.array([0.8, 1.0, 1.2])
    batched = jax.vmap(lambda x: built.solve({**model.params, model.scalar: x}).values)(xs)
    for i, x in enumerate(xs):
        one = _values(built.solve({**model.params, model.scalar: x}))
        _assert_same({r: np.asarray(v[i]) for r, v in batched.items()}, one, rtol=1e-12)


@cases
def test_splayed_state_grid_gives_identical_values(solver, model):
    built, solution = _built(solver, model)
    splayed = built.with_batch_size("wealth", 5)  # 12 points: chunks of 5, 5 and 2
    # Equal to round-off: XLA fuses a chunk's arithmetic differently from the whole
    # grid's (grid search's retired values differ in the last bit at 3 of 36 points).
    _assert_same(_values(splayed.solve(model.params)), _values(solution), rtol=1e-14)


@cases
def test_simulation_starts_at_the_solution_value(solver, model):
    built, solution = _built(solver, model)
    result = built.simulate(model.params, model.initial_conditions, solution, key=jax.random.key(0))
    assert result.n_periods == built.n_periods
    assert result.n_subjects == len(model.initial_conditions["wealth"])
    assert np.all(np.asarray(result.present[0]))
    # Subjects start on wealth grid points: the value they get is the solution's there.
    grid = np.linspace(1.0, 400.0, solution.values["working"].shape[1])
    wealth = np.asarray(model.initial_conditions["wealth"])
    indices = np.argmin(np.abs(grid[:, None] - wealth), axis=0)
    expected = np.asarray(solution.value("working", 0))[indices]
    np.testing.assert_allclose(np.asarray(result.value[0]), expected, rtol=1e-6)


@cases
def test_new_parameter_values_do_not_recompile(solver, model):
    built, _ = _built(solver, model)

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def solve(params):
        return built.solve(params).values

    solve(model.params)
    solve({**model.params, model.scalar: model.params[model.scalar] * 1.1})


def test_a_copy_of_the_library_under_another_name_takes_its_own_solvers(tmp_path):
    """`Regime(solver=...)` recognises the solvers of the copy it belongs to
    (benchmarks/versus.py imports a second copy as `lcm_eqx_base`); the check once
    looked for the interface under the name `lcm_eqx` only."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import lcm_eqx

    shutil.copytree(
        Path(lcm_eqx.__file__).parent,
        tmp_path / "lcm_eqx_copy",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    script = (
        "import lcm_eqx_copy as lcm\n"
        "savings = lcm.LinSpacedGrid(0.0, 10.0, 5)\n"
        "for solver in (lcm.GridSearch(), lcm.DCEGM('wealth', 'consumption', savings)):\n"
        "    lcm.Regime(functions={'utility': lambda: 0.0}, solver=solver)\n"
        "try:\n"
        "    lcm.Regime(functions={'utility': lambda: 0.0}, solver='dcegm')\n"
        "except lcm.ModelInitializationError:\n"
        "    print('rejected')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "rejected"
