"""The forward distribution reads a grid-search regime's choices on the whole state grid
by the period's structure-aware plan (`GridSearch.choices_on_grid`,
`_factored_policy.choices_factored`) instead of node by node on the plain product: the
same choice probabilities, actions and masses, and the same derivatives, with and
without taste shocks and refinement. The plain product's node-by-node reading
(`GridSearch(factored=False)`) is the reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._estimation._choice import regime_problem
from lcm_eqx._model._params import resolve_params
from tests.helpers import force_accelerator_forms
from tests.test_factored import build, params

jax.config.update("jax_enable_x64", True)

CASES = {
    "max": dict(taste_shocks=False, refine=None),
    "taste-shocks": dict(taste_shocks=True, refine=None),
    "refined": dict(taste_shocks=False, refine=["effort"]),
    "refined-taste-shocks": dict(taste_shocks=True, refine=["effort"]),
}
INITIAL = {
    "regime": np.zeros(6, dtype=int),
    "wealth": np.array([0.5, 1.2, 2.0, 3.1, 4.4, 5.9]),
    "health": np.array([0, 1, 0, 1, 1, 0]),
    "patience": np.array([0, 0, 1, 1, 0, 1]),
}


def _model(case: str, factored: bool):
    spec = CASES[case]
    solver = lcm.GridSearch(refine=spec["refine"], factored=factored)
    return build(solver, taste_shocks=spec["taste_shocks"], n_wealth=6)


def _distribution(model, p):
    return model.distribution(p, INITIAL, validate="off")


@pytest.mark.parametrize("case", list(CASES))
def test_the_distribution_by_the_plan_equals_the_plain_node_by_node_reading(case):
    p = params(CASES[case]["taste_shocks"])
    factored, plain = _model(case, True), _model(case, False)

    # The plan is used: the whole grid's choices come from it.
    resolved = resolve_params(factored.plan, p)
    solution = factored.solve(p, validate="off")
    problem = regime_problem(factored, resolved, "alive", 1, solution.values, solution.policies)
    assert factored.solvers["alive"].choices_on_grid(problem) is not None
    assert plain.solvers["alive"].choices_on_grid(problem) is None

    a, b = _distribution(factored, p), _distribution(plain, p)
    # Measured: the plan's `v_d` equals `problem.q` at the chosen point and the sum of
    # the pieces there to round-off; the node-by-node reading (`q` vmapped over the
    # discrete codes) differs from both by up to 5e-8 here, which taste shocks pass on
    # to the choice probabilities. Without them the choices are identical.
    tolerance = 1e-6 if CASES[case]["taste_shocks"] else 1e-11
    for field in ("mass", "choice"):
        np.testing.assert_allclose(
            getattr(a, field)["alive"], getattr(b, field)["alive"], rtol=tolerance, atol=1e-13
        )
    for name, actions in b.actions["alive"].items():
        finite = np.isfinite(actions)
        np.testing.assert_array_equal(np.isfinite(a.actions["alive"][name]), finite)
        np.testing.assert_allclose(a.actions["alive"][name][finite], actions[finite], atol=1e-11)
    np.testing.assert_allclose(a.exited, b.exited, atol=1e-13)


@pytest.mark.parametrize("case", ["taste-shocks", "refined-taste-shocks"])
def test_the_moments_derivatives_by_the_plan_equal_the_plain_readings(case):
    """Forward and reverse mode through the plan's choices (the refined action's implicit
    derivative from the pieces that contain it alone) equal the plain reading's."""
    names = (("effort_cost", "cost"), ("next_health", "effect"), ("utility", "disutility"))

    def moments(model):
        def of(theta):
            p = params(taste_shocks=True)
            for (function, name), x in zip(names, theta, strict=True):
                p["alive"][function] = {**p["alive"][function], name: x}
            dist = _distribution(model, p)
            return jnp.concatenate(
                [dist.mean("effort", "alive")[:3], dist.share("health", 1, "alive")[1:3]]
            )

        return of

    theta = jnp.asarray([0.05, 2.0, 0.6])
    factored, plain = moments(_model(case, True)), moments(_model(case, False))
    reference = np.asarray(jax.jacfwd(plain)(theta))
    assert np.sum(np.abs(reference) > 1e-4) >= 6  # the moments move
    np.testing.assert_allclose(jax.jacfwd(factored)(theta), reference, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(jax.jacrev(factored)(theta), reference, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("case", ["max", "refined-taste-shocks"])
def test_the_accelerators_forms_give_the_same_distribution_and_derivatives(case, monkeypatch):
    """On an accelerator the plan's maximisers are found by selects, not `argmax` (a
    TPU's compiler emits that very slowly): the same masses and choices, and the same
    forward-mode derivatives, as the CPU's forms."""
    p = params(CASES[case]["taste_shocks"])

    def moments(model):
        def of(cost):
            q = {**p, "alive": {**p["alive"], "effort_cost": {**p["alive"]["effort_cost"]}}}
            q["alive"]["effort_cost"]["cost"] = cost
            dist = _distribution(model, q)
            return dist.mass["alive"], dist.choice["alive"], dist.mean("effort", "alive")

        return of

    cost = jnp.asarray(0.05)
    cpu = jax.jvp(moments(_model(case, True)), (cost,), (jnp.ones(()),))
    force_accelerator_forms(monkeypatch)
    accelerated = jax.jvp(moments(_model(case, True)), (cost,), (jnp.ones(()),))
    jax.clear_caches()
    if CASES[case]["refine"]:  # the refined mean effort moves (on a grid it cannot)
        assert np.any(np.abs(cpu[1][2]) > 1e-4)
    for a, b in zip(jax.tree.leaves(accelerated), jax.tree.leaves(cpu), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
