"""i.i.d. states with given nodes: `UniformIIDGrid`, `IIDGrid` and its equiprobable
normal / log-normal discretisations.

The references are written apart from the library: the equiprobable atoms by numerical
integration (`scipy.integrate.quad`) of the conditional mean over each bin, and the
solution by the same model written the long way (a `DiscreteGrid` of node codes, the
node values in a helper function and a `MarkovTransition` whose rows are the
probabilities).
"""

import itertools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import integrate, stats  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

BASE = {"discount_factor": 0.95, "interest_rate": 0.03}
SAVINGS = lcm.IrregSpacedGrid(points=[25.0 * (i / 39) ** 2 for i in range(40)])


def utility(consumption):
    return jnp.log(consumption)


def borrowing(consumption, wealth):
    return consumption <= wealth


def next_wealth(wealth, consumption, shock, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + shock


def regime(shock_grid, state_transitions, functions=None, solver=None):
    return lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(0.5, 20.0, 25), "shock": shock_grid},
        actions={"consumption": lcm.LinSpacedGrid(0.05, 20.0, 80)},
        functions={"utility": utility, **(functions or {})},
        state_transitions=state_transitions,
        transition=lambda: 0,
        constraints={"borrowing": borrowing},
        solver=solver,
    )


def iid_model(grid, solver=None):
    return lcm.Model(
        regimes={"alive": regime(grid, {"wealth": next_wealth}, solver=solver)}, n_periods=3
    )


def long_way_values(nodes, probabilities, solver=None):
    nodes, probabilities = np.asarray(nodes), np.asarray(probabilities)

    def shock_value(shock):
        return jnp.asarray(nodes)[shock]

    def next_wealth_coded(wealth, consumption, shock_value, interest_rate):
        return (1 + interest_rate) * (wealth - consumption) + shock_value

    alive = regime(
        lcm.DiscreteGrid([f"node{i}" for i in range(len(nodes))]),
        {
            "wealth": next_wealth_coded,
            "shock": lcm.MarkovTransition(lambda shock: jnp.asarray(probabilities)),
        },
        functions={"shock_value": shock_value},
        solver=solver,
    )
    model = lcm.Model(regimes={"alive": alive}, n_periods=3)
    return model.solve(BASE).values["alive"]


def dcegm():
    return lcm.DCEGM(state="wealth", action="consumption", savings=SAVINGS)


# ----------------------------------------------------------------------- the nodes
def test_uniform_nodes_are_bin_midpoints_with_equal_probabilities():
    points, matrix = lcm.UniformIIDGrid(4, start=1.0, stop=3.0).discretize({})
    np.testing.assert_allclose(points, [1.25, 1.75, 2.25, 2.75], rtol=1e-15)
    np.testing.assert_allclose(matrix, np.full((4, 4), 0.25), rtol=1e-15)
    free = lcm.UniformIIDGrid(4)
    assert free.free_parameters() == ("start", "stop")
    np.testing.assert_allclose(free.discretize({"start": 1.0, "stop": 3.0})[0], points)


def _bin_means(distribution, n):
    """Conditional means of `n` equal-probability bins, by quadrature."""
    edges = distribution.ppf(np.linspace(0.0, 1.0, n + 1))
    return np.array(
        [
            n * integrate.quad(lambda x: x * distribution.pdf(x), lo, hi, epsabs=1e-13)[0]
            for lo, hi in itertools.pairwise(edges)
        ]
    )


def test_equiprobable_atoms_are_the_conditional_means_of_equal_bins():
    normal = lcm.IIDGrid.equiprobable_normal(5, mean=0.4, sigma=1.3)
    np.testing.assert_allclose(normal.points, _bin_means(stats.norm(0.4, 1.3), 5), rtol=1e-9)
    lognormal = lcm.IIDGrid.equiprobable_lognormal(7, mean=-0.1, sigma=0.25)
    expected = _bin_means(stats.lognorm(s=0.25, scale=np.exp(-0.1)), 7)
    np.testing.assert_allclose(lognormal.points, expected, rtol=1e-9)
    np.testing.assert_allclose(lognormal.probabilities, np.full(7, 1 / 7), rtol=1e-15)
    # The unemployment atom: one more node, the others scaled by 1 - p.
    income = lognormal.with_atom(0.3, 0.05)
    np.testing.assert_allclose(income.points, [0.3, *expected], rtol=1e-9)
    np.testing.assert_allclose(income.probabilities, [0.05, *(np.full(7, 0.95 / 7))], rtol=1e-15)
    assert income.n_points == 8


# ----------------------------------------------------------------------- solutions
def test_uniform_grid_with_parameter_bounds_equals_the_long_way():
    params = {**BASE, "alive": {"next_shock": {"start": 0.5, "stop": 2.5}}}
    values = iid_model(lcm.UniformIIDGrid(5)).solve(params).values["alive"]
    expected = long_way_values(0.5 + 2.0 * (np.arange(5) + 0.5) / 5, np.full(5, 0.2))
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("solver", [None, "dcegm"])
def test_iid_grid_given_and_as_parameters_equals_the_long_way(solver):
    nodes, probabilities = np.array([0.4, 1.0, 1.9, 0.2]), np.array([0.2, 0.5, 0.25, 0.05])
    make = dcegm if solver else (lambda: None)
    expected = long_way_values(nodes, probabilities, make())
    given = iid_model(lcm.IIDGrid(points=nodes, probabilities=probabilities), make())
    np.testing.assert_allclose(given.solve(BASE).values["alive"], expected, rtol=1e-12, atol=1e-12)
    free = iid_model(lcm.IIDGrid(n_points=4), make())
    params = {**BASE, "alive": {"next_shock": {"points": nodes, "probabilities": probabilities}}}
    np.testing.assert_allclose(free.solve(params).values["alive"], expected, rtol=1e-12, atol=1e-12)


def test_gradient_with_respect_to_estimated_probabilities():
    model = iid_model(lcm.IIDGrid(points=np.array([0.4, 1.0, 1.9]), n_points=3))

    def mean_value(p):
        params = {**BASE, "alive": {"next_shock": {"probabilities": p}}}
        return jnp.mean(model.solve(params, validate="off").values["alive"][0])

    p = jnp.array([0.3, 0.5, 0.2])
    direction = jnp.array([1.0, -1.0, 0.0])  # stays on the simplex
    analytic = jnp.dot(jax.grad(mean_value)(p), direction)
    h = 1e-6
    numeric = (mean_value(p + h * direction) - mean_value(p - h * direction)) / (2 * h)
    assert abs(float(analytic) - float(numeric)) <= 1e-6 * abs(float(numeric))


def test_parameter_probabilities_are_validated_never_renormalised():
    model = iid_model(lcm.IIDGrid(points=np.array([0.4, 1.0, 1.9]), n_points=3))
    bad = {**BASE, "alive": {"next_shock": {"probabilities": np.array([0.3, 0.5, 0.1])}}}
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="'next_shock'"):
        model.solve(bad)
    negative = {**BASE, "alive": {"next_shock": {"probabilities": np.array([-0.1, 0.6, 0.5])}}}
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="'alive'"):
        model.solve(negative)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: lcm.UniformIIDGrid(0), "n_points must be an int >= 1"),
        (lambda: lcm.UniformIIDGrid(3, start=1.0, stop=1.0), "start must be < stop"),
        (lambda: lcm.IIDGrid(points=[0.0, 1.0], probabilities=[0.5, 0.6]), "sum to 1"),
        (lambda: lcm.IIDGrid(points=[0.0, 1.0], probabilities=[1.5, -0.5]), ">= 0"),
        (lambda: lcm.IIDGrid(points=[0.0, 1.0], probabilities=[1.0]), "disagree"),
        (lambda: lcm.IIDGrid(), "give n_points"),
        (lambda: lcm.IIDGrid(points=[0.0, np.nan], n_points=2), "finite"),
        (lambda: lcm.IIDGrid.equiprobable_lognormal(3, 0.0, 0.0), "sigma must be > 0"),
        (lambda: lcm.IIDGrid(n_points=2).with_atom(0.0, 0.1), "must be arrays"),
    ],
)
def test_bad_grids_are_rejected_at_construction(make, match):
    with pytest.raises(lcm.GridInitializationError, match=match):
        make()
