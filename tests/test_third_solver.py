"""A third solver written only against the solver interface (`lcm.AbstractPointwiseSolver`
and the problem it is handed), kept here as the proof that a new solver needs no change
outside its own file: it runs through solve, simulate, the likelihood and the Euler
errors.

`OtherActionGrid` searches one continuous action on a grid of its own instead of the
regime's (e.g. a finer one for a sensitivity check). Solving the model with it must give
exactly what `GridSearch` gives on a model whose action grid *is* that grid.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

import lcm_eqx as lcm
from tests.models import retirement


class OtherActionGrid(lcm.AbstractPointwiseSolver):
    """Grid search with `action` searched on `points` rather than the regime's grid."""

    action: str = eqx.field(static=True)
    points: Array

    def _on_own_grid(self, problem):
        axes = tuple(
            dataclasses.replace(axis, points=self.points) if axis.name == self.action else axis
            for axis in problem.action_axes
        )
        return problem.replace(action_axes=axes)

    def value(self, problem, state):
        return lcm.GridSearch().value(self._on_own_grid(problem), state)

    def choose(self, problem, state, key):
        return lcm.GridSearch().choose(self._on_own_grid(problem), state, key)

    def discrete_values(self, problem, state):
        return lcm.GridSearch().discrete_values(self._on_own_grid(problem), state)

    def continuous_policy(self, problem, state):
        return super().continuous_policy(self._on_own_grid(problem), state)

    def best_continuous_actions(self, problem, state, discrete_action):
        return super().best_continuous_actions(self._on_own_grid(problem), state, discrete_action)

    def choices_at(self, problem, state):
        return super().choices_at(self._on_own_grid(problem), state)

    def action_step(self, problem, action):
        return super().action_step(self._on_own_grid(problem), action)


FINE = 90


def _models():
    fine = lcm.LinSpacedGrid(1.0, 400.0, FINE).to_jax()
    toy = retirement.build(
        3, 30, 40, taste_shocks=True, solver=OtherActionGrid("consumption", fine)
    )
    reference = retirement.build(3, 30, FINE, taste_shocks=True)
    return toy, reference


def test_a_solver_written_against_the_interface_solves_simulates_and_estimates():
    params = {**retirement.PARAMS, "taste_shock_scale": 0.5}
    toy, reference = _models()
    assert not isinstance(toy.solvers["working"], lcm.GridSearch)
    solution = toy.solve(params)
    expected = reference.solve(params)
    for name in ("working", "retired"):
        np.testing.assert_allclose(solution.values[name], expected.values[name], rtol=1e-12)

    initial = {"regime": jnp.zeros(6, dtype=int), "wealth": jnp.linspace(5.0, 60.0, 6)}
    key = jax.random.key(3)
    ours = toy.simulate(params, initial, solution, key=key).to_dataframe()
    theirs = reference.simulate(params, initial, expected, key=key).to_dataframe()
    np.testing.assert_allclose(ours["consumption"], theirs["consumption"], rtol=1e-12)
    np.testing.assert_allclose(ours["value"], theirs["value"], rtol=1e-12)
    # The simulated consumption lies on the solver's own grid, which the regime's
    # 40-point grid does not contain.
    fine = np.linspace(1.0, 400.0, FINE)
    consumed = ours["consumption"].dropna().to_numpy()
    assert np.all(np.min(np.abs(consumed[:, None] - fine[None]), axis=1) < 1e-5 * consumed)
    coarse = np.linspace(1.0, 400.0, 40)
    assert np.any(np.min(np.abs(consumed[:, None] - coarse[None]), axis=1) > 1e-3)

    likelihood = lcm.log_likelihood(toy, params, ours, solution=solution)
    np.testing.assert_allclose(
        likelihood, lcm.log_likelihood(reference, params, ours, solution=expected), rtol=1e-12
    )
    errors = lcm.euler_errors(
        toy, params, solution, regime="retired", state="wealth", action="consumption"
    )
    reference_errors = lcm.euler_errors(
        reference, params, expected, regime="retired", state="wealth", action="consumption"
    )
    np.testing.assert_allclose(errors, reference_errors, rtol=1e-9, equal_nan=True)
    assert np.isfinite(errors).any()
