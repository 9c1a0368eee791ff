"""i.i.d. shocks by Gauss–Hermite quadrature (`NormalIIDGrid`, `LogNormalIIDGrid`).

The reference is the same model written the long way: a `DiscreteGrid` of codes, node
values computed here with numpy's `hermgauss`, and a `MarkovTransition` whose rows are
the quadrature weights.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

N_NODES = 5
PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "alive": {"next_shock": {"mean": 0.1, "sigma": 0.3}},
}


def utility(consumption):
    return jnp.log(consumption)


def borrowing(consumption, wealth):
    return consumption <= wealth


def next_wealth(wealth, consumption, shock, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + jnp.exp(shock)


def regime(shock_grid, state_transitions, functions=None, solver=None):
    return lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(0.5, 20.0, 40), "shock": shock_grid},
        actions={"consumption": lcm.LinSpacedGrid(0.05, 20.0, 150)},
        functions={"utility": utility, **(functions or {})},
        state_transitions=state_transitions,
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        solver=solver,
    )


def iid_model(solver=None):
    alive = regime(lcm.NormalIIDGrid(N_NODES), {"wealth": next_wealth}, solver=solver)
    return lcm.Model(regimes={"alive": alive}, n_periods=3)


def long_way_model(mean, sigma, solver=None):
    x, w = np.polynomial.hermite.hermgauss(N_NODES)
    # Host (NumPy) constants, as the library advises for closed-over arrays.
    nodes = np.asarray(mean + np.sqrt(2.0) * sigma * x)
    weights = np.asarray(w / np.sqrt(np.pi))

    def shock_value(shock):
        return jnp.asarray(nodes)[shock]

    def next_wealth_coded(wealth, consumption, shock_value, interest_rate):
        return (1 + interest_rate) * (wealth - consumption) + jnp.exp(shock_value)

    alive = regime(
        lcm.DiscreteGrid([f"node{i}" for i in range(N_NODES)]),
        {
            "wealth": next_wealth_coded,
            "shock": lcm.MarkovTransition(lambda shock: jnp.asarray(weights)),
        },
        functions={"shock_value": shock_value},
        solver=solver,
    )
    return lcm.Model(regimes={"alive": alive}, n_periods=3)


def test_nodes_and_weights_are_the_gauss_hermite_rule():
    grid = lcm.NormalIIDGrid(N_NODES, mean=0.1, sigma=0.3)
    points, matrix = grid.discretize({})
    x, w = np.polynomial.hermite.hermgauss(N_NODES)
    np.testing.assert_allclose(points, 0.1 + np.sqrt(2) * 0.3 * x, rtol=1e-14)
    np.testing.assert_allclose(matrix, np.tile(w / np.sqrt(np.pi), (N_NODES, 1)), rtol=1e-14)
    # The rule integrates the normal's first two moments exactly.
    p = matrix[0]
    assert float(jnp.sum(p * points)) == pytest.approx(0.1, abs=1e-14)
    assert float(jnp.sum(p * (points - 0.1) ** 2)) == pytest.approx(0.09, abs=1e-14)
    log_points, _ = lcm.LogNormalIIDGrid(N_NODES, mean=0.1, sigma=0.3).discretize({})
    np.testing.assert_allclose(log_points, np.exp(points), rtol=1e-14)
    assert lcm.NormalIIDGrid(3).free_parameters() == ("sigma", "mean")


@pytest.mark.parametrize("solver", ["grid", "dcegm"])
def test_solution_equals_the_model_written_the_long_way(solver):
    def make():
        if solver == "grid":
            return None
        savings = lcm.IrregSpacedGrid(points=[25.0 * (i / 59) ** 2 for i in range(60)])
        return lcm.DCEGM(state="wealth", action="consumption", savings=savings)

    values = iid_model(make()).solve(PARAMS).values["alive"]
    long_way_params = {k: v for k, v in PARAMS.items() if k != "alive"}
    expected = long_way_model(0.1, 0.3, make()).solve(long_way_params).values["alive"]
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_gradient_with_respect_to_sigma_and_mean_matches_finite_differences():
    savings = lcm.IrregSpacedGrid(points=[25.0 * (i / 59) ** 2 for i in range(60)])
    model = iid_model(lcm.DCEGM(state="wealth", action="consumption", savings=savings))

    def mean_value(mean, sigma):
        params = {**PARAMS, "alive": {"next_shock": {"mean": mean, "sigma": sigma}}}
        return jnp.mean(model.solve(params, validate="off").values["alive"][0])

    gradient = jax.grad(mean_value, argnums=(0, 1))(0.1, 0.3)
    h = 1e-6
    finite = (
        (mean_value(0.1 + h, 0.3) - mean_value(0.1 - h, 0.3)) / (2 * h),
        (mean_value(0.1, 0.3 + h) - mean_value(0.1, 0.3 - h)) / (2 * h),
    )
    for analytic, numeric in zip(gradient, finite, strict=True):
        assert abs(float(analytic) - float(numeric)) <= 1e-6 * abs(float(numeric))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: lcm.NormalIIDGrid(0), "n_points must be an int >= 1"),
        (lambda: lcm.LogNormalIIDGrid(3, sigma=0.0), "sigma must be > 0"),
        (lambda: lcm.NormalIIDGrid(3, sigma=-1.0), "sigma must be > 0"),
    ],
)
def test_bad_iid_grids_are_rejected_at_construction(make, match):
    with pytest.raises(lcm.GridInitializationError, match=match):
        make()
