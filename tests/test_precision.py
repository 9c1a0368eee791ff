"""Precision is the library's choice, not the device's (issue 59).

- Every contraction in the programs the library builds (solve, its gradient, simulate,
  the distribution) names the highest precision, the library's own (`contract`) and
  those in a user's function alike: a TPU computes an unnamed float32 contraction in one
  bfloat16 pass, which made its Mahler–Yum values 4.5 % off the CPU's.
- The check reductions after the period loop give the same flags and counts whichever
  platform's form is traced (a variadic reduction on the CPU, plain ones elsewhere), and
  only the form of the program's default device is traced.
- float64 on a TPU is said at `Model(...)`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx import _numerics
from lcm_eqx._solve import _reduce
from lcm_eqx._solve._check_arrays import _max_each_merged, max_each
from lcm_eqx._solve._reduce import (
    _max_and_count_apart,
    _max_and_count_variadic,
    _tangent_at_argmax,
    _tangent_at_first_maximum,
)
from tests.helpers import force_accelerator_forms

jax.config.update("jax_enable_x64", True)

WEIGHTS = np.asarray([1.0, 0.1])


def utility(consumption, income):
    # A contraction in the user's own function.
    return jnp.dot(WEIGHTS, jnp.stack([jnp.log(consumption), income]))


def next_income(income):
    # Depends on the current discrete state only: pre-contracted (`contract`'s einsum).
    return jnp.where(income == 0, jnp.asarray([0.8, 0.2]), jnp.asarray([0.3, 0.7]))


def build():
    return build_with(utility)


def build_with(utility):
    alive = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 10.0, 12), "income": lcm.DiscreteGrid([0, 1])},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 10.0, 20)},
        functions={"utility": utility},
        state_transitions={
            "wealth": lambda wealth, consumption, income: (
                1.02 * (wealth - consumption) + 1.0 + income
            ),
            "income": lcm.MarkovTransition(next_income),
        },
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
        transition=lambda: 0,
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=3)


PARAMS = {"discount_factor": 0.95}


def _contractions(jaxpr) -> list:
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _contractions(sub)
    return found


def test_every_contraction_of_the_programs_names_the_highest_precision():
    model = build()
    initial = {"regime": jnp.zeros(3, dtype=int), "wealth": jnp.asarray([2.0, 5.0, 9.0])}
    initial["income"] = jnp.asarray([0, 1, 0])
    solution = model.solve(PARAMS)
    programs = {
        "solve": lambda beta: model.solve({"discount_factor": beta}).values["alive"],
        "gradient": jax.grad(
            lambda beta: jnp.sum(model.solve({"discount_factor": beta}).value("alive", 0))
        ),
        "simulate": lambda beta: (
            model.simulate(
                {"discount_factor": beta}, initial, solution=solution, key=jax.random.key(0)
            ).value
        ),
        "distribution": lambda beta: model.distribution(
            {"discount_factor": beta}, initial, solution=solution
        ).mass["alive"],
    }
    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    for name, program in programs.items():
        found = _contractions(jax.make_jaxpr(program)(0.95).jaxpr)
        assert found, name  # the model has contractions in every program
        assert all(p == highest for p in found), (name, found)


def test_the_check_reductions_agree_on_every_platform():
    values = np.array(
        [[[1.0, -np.inf, 3.0], [np.nan, 0.0, -np.inf]], [[-np.inf] * 3, [2.0, 5.0, -1.0]]]
    )
    arrays = (jnp.asarray(values), jnp.asarray(values[::-1]))
    for axes in ((1, 2), (2,), (0, 2)):
        variadic = _max_and_count_variadic(arrays, axes)
        apart = _max_and_count_apart(arrays, axes)
        for a, b in zip(jax.tree.leaves(variadic), jax.tree.leaves(apart), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            assert a.dtype == b.dtype


def test_one_form_is_traced_chosen_by_the_default_device(monkeypatch):
    """`by_platform` traces the CPU's form or the accelerator's, never both (a
    `platform_dependent` lowered both into every program), chosen by the default device
    when the program is traced."""
    traced = []

    def form(name):
        def fn(x):
            traced.append(name)
            return x + (1.0 if name == "cpu" else 2.0)

        return fn

    def program(x):
        return _numerics.by_platform(x, cpu=form("cpu"), default=form("accelerator"))

    assert float(jax.jit(program)(1.0)) == 2.0 and traced == ["cpu"]
    text = jax.jit(program).lower(1.0).as_text()
    assert "case" not in text and "platform_index" not in text
    traced.clear()
    monkeypatch.setattr(_numerics, "default_platform", lambda: "tpu")
    jax.clear_caches()
    assert float(jax.jit(program)(1.0)) == 3.0 and traced == ["accelerator"]
    traced.clear()
    monkeypatch.setattr(_numerics, "default_platform", lambda: "cpu")
    jax.clear_caches()
    assert float(jax.jit(program)(1.0)) == 2.0 and traced == ["cpu"]


def test_the_check_maxima_agree_on_every_platform(monkeypatch):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 4, 5, 2))
    values[0, 1, 2, 0] = np.nan
    values[2, :, :, 1] = -np.inf
    arrays = (jnp.asarray(values), jnp.asarray(values[::-1]))
    force_accelerator_forms(monkeypatch)
    for axes in ((0, 1, 2), (1, 2), (3,), (0, 3), (1,)):
        merged = _max_each_merged(arrays, axes)
        apart = max_each(arrays, axes)
        for a, b in zip(merged, apart, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            assert a.shape == b.shape


def test_the_tangent_at_the_first_maximum_agrees_on_every_platform(monkeypatch):
    """The accelerator's first maximiser (slice by slice, or `argmax` and a select-sum)
    picks the tangent that `argmax` and its gather pick: ties (the first), a NaN (the
    first NaN), a row of `-inf` (the first); infinite tangents elsewhere stay out."""
    values = np.array(
        [
            [1.0, 3.0, 3.0, 0.0],
            [np.nan, 2.0, np.nan, 5.0],
            [-np.inf, -np.inf, -np.inf, -np.inf],
            [2.0, -np.inf, 7.0, 7.0],
            [1.0, np.nan, 9.0, np.nan],
        ]
    )
    tangent = np.array(
        [
            [np.inf, 10.0, 20.0, np.nan],
            [30.0, 1.0, 2.0, 3.0],
            [40.0, np.inf, 1.0, 2.0],
            [np.nan, 5.0, 50.0, 6.0],
            [1.0, 60.0, 2.0, 3.0],
        ]
    )
    for slices in (16, 0):  # slice by slice, and by `argmax` (longer axes)
        monkeypatch.setattr(_reduce, "FIRST_MAXIMUM_SLICES", slices)
        for axis, v, t in ((1, values, tangent), (0, values.T, tangent.T)):
            expected = _tangent_at_argmax(jnp.asarray(v), jnp.asarray(t), axis)
            got = _tangent_at_first_maximum(jnp.asarray(v), jnp.asarray(t), axis)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
            np.testing.assert_array_equal(np.asarray(got), [10.0, 30.0, 40.0, 50.0, 60.0])


def _transcendentals(jaxpr) -> list[tuple[str, object]]:
    """(operation, accuracy) of every exp/log/log1p/expm1 in `jaxpr`."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("exp", "log", "log1p", "expm1"):
            found.append((eqn.primitive.name, eqn.params.get("accuracy")))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _transcendentals(sub)
    return found


def precise_utility(consumption, income, wealth):
    # exp and log directly, inside a jitted JAX function (`jnp.where`), and in a
    # library function (`logsumexp`), with a constant argument.
    smooth = jax.scipy.special.logsumexp(jnp.stack([jnp.log(consumption), 0.1 * income]))
    return smooth - jnp.where(wealth > 5.0, jnp.expm1(-wealth), jnp.log1p(wealth))


def test_a_tpu_runs_user_functions_with_exp_and_log_to_round_off(monkeypatch):
    """Where the default device is a TPU, the exp, log, log1p and expm1 in every user
    function (and in the JAX functions it calls) ask for the highest accuracy, and the
    values (a CPU computes either to round-off) are the same to the last bit, as is a
    gradient."""
    from lcm_eqx._model import _dag

    def solve_and_gradient():
        model = build_with(precise_utility)
        jaxpr = jax.make_jaxpr(lambda beta: model.solve({"discount_factor": beta}))(0.95)
        values = np.asarray(model.solve(PARAMS).values["alive"])
        gradient = jax.grad(
            lambda beta: model.solve({"discount_factor": beta}).value("alive", 0).sum()
        )(0.95)
        return _transcendentals(jaxpr.jaxpr), values, float(gradient)

    plain, values, gradient = solve_and_gradient()
    # The library's solve of this model has none of its own: each is the utility's.
    assert sorted(plain) == sorted(
        [("log", None), ("exp", None), ("log", None), ("expm1", None), ("log1p", None)]
    )
    jax.clear_caches()
    monkeypatch.setattr(_dag, "precise_transcendentals_needed", lambda: True)
    precise, precise_values, precise_gradient = solve_and_gradient()
    assert sorted(precise) == sorted((op, jax.lax.AccuracyMode.HIGHEST) for op, _ in plain)
    np.testing.assert_array_equal(precise_values, values)
    assert precise_gradient == gradient
    jax.clear_caches()


def test_float64_on_a_tpu_is_said_when_the_model_is_built(monkeypatch):
    monkeypatch.setattr(_numerics, "default_platform", lambda: "tpu")
    with pytest.warns(lcm.LcmWarning, match="no native float64"):
        build()
    monkeypatch.setattr(_numerics, "default_platform", lambda: "cpu")
    assert _numerics.float64_on_device_without_it() is None
