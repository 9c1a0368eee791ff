"""Precision is the library's choice, not the device's (issue 59).

- Every contraction in the programs the library builds (solve, its gradient, simulate,
  the distribution) names the highest precision, the library's own (`contract`) and
  those in a user's function alike: a TPU computes an unnamed float32 contraction in one
  bfloat16 pass, which made its Mahler–Yum values 4.5 % off the CPU's.
- The check reductions after the period loop give the same flags and counts whichever
  platform's form is lowered (a variadic reduction on the CPU, plain ones elsewhere).
- float64 on a TPU is said at `Model(...)`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx import _numerics
from lcm_eqx._solve._reduce import _max_and_count_apart, _max_and_count_variadic

jax.config.update("jax_enable_x64", True)

WEIGHTS = np.asarray([1.0, 0.1])


def utility(consumption, income):
    # A contraction in the user's own function.
    return jnp.dot(WEIGHTS, jnp.stack([jnp.log(consumption), income]))


def next_income(income):
    # Depends on the current discrete state only: pre-contracted (`contract`'s einsum).
    return jnp.where(income == 0, jnp.asarray([0.8, 0.2]), jnp.asarray([0.3, 0.7]))


def build():
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


def test_float64_on_a_tpu_is_said_when_the_model_is_built(monkeypatch):
    monkeypatch.setattr(_numerics, "default_platform", lambda: "tpu")
    with pytest.warns(lcm.LcmWarning, match="no native float64"):
        build()
    monkeypatch.setattr(_numerics, "default_platform", lambda: "cpu")
    assert _numerics.float64_on_device_without_it() is None
