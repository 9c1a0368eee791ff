"""Gradients of the solution with respect to every kind of parameter, against finite differences.

One small stochastic model holds every parameter kind: a utility parameter
(`disutility_of_work`), budget parameters (`wage`, `interest_rate`, `pension`), the
discount factor, survival probabilities given as an array indexed by period (mortality:
a Markov regime transition to a terminal `dead` regime), the persistence `rho` and shock
sd `sigma` of a `RouwenhorstGrid` income process whose parameters are looked up as
parameters of `next_income`, and the taste-shock scale.

Grid search makes values piecewise smooth in parameters: the argmax over the consumption
grid switches, and next-period wealth crosses interpolation nodes, at isolated parameter
values, where the value has a kink. Away from those, `jax.grad` must agree with central
finite differences (h = 1e-6) to a relative error below 1e-5; the scalar functions below
(weighted sums of value arrays and of choice probabilities) sum over many states, and a
kink within h of the evaluation point is very unlikely (the test would show it as one
large error, not a small drift).

What is differentiable in simulation: draws (taste shocks, regime and income draws) and
grid actions are piecewise constant in parameters, so gradients flow through values and
choice probabilities *at* simulated states, never through simulated choices. The third
objective below differentiates choice-probability moments over a simulated panel (states
held fixed).
"""

import warnings
from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation import choice_moments, choice_probabilities, prepare_data  # noqa: E402

N_PERIODS = 4
H = 1e-6
RTOL = 1e-5


class RegimeId(IntEnum):
    working = 0
    retired = 1
    dead = 2


class Labor(IntEnum):
    work = 0
    retire = 1


def utility_working(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)


def labor_income(labor, income, wage):
    return jnp.where(labor == Labor.work, wage * jnp.exp(income), 0.0)


def next_wealth_working(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_regime_working(labor, period, survival_probability):
    alive = survival_probability[period]
    works = labor == Labor.work
    return jnp.stack([jnp.where(works, alive, 0.0), jnp.where(works, 0.0, alive), 1.0 - alive])


def utility_retired(consumption):
    return jnp.log(consumption)


def next_wealth_retired(wealth, consumption, interest_rate, pension):
    return (1 + interest_rate) * (wealth - consumption) + pension


def next_regime_retired(period, survival_probability):
    alive = survival_probability[period]
    return jnp.stack([0.0 * alive, alive, 1.0 - alive])


def borrowing(consumption, wealth):
    return consumption <= wealth


def build_model():
    wealth = lcm.LinSpacedGrid(start=1.0, stop=30.0, n_points=15)
    consumption = lcm.LinSpacedGrid(start=1.0, stop=30.0, n_points=25)
    working = lcm.Regime(
        states={"wealth": wealth, "income": lcm.RouwenhorstGrid(n_points=5)},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility_working, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth_working},
        transition=lcm.MarkovTransition(next_regime_working),
        constraints={"borrowing": borrowing},
        taste_shocks=lcm.ExtremeValueShocks(),
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": utility_retired},
        state_transitions={"wealth": next_wealth_retired},
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": borrowing},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        regimes={"working": working, "retired": retired, "dead": dead},
        n_periods=N_PERIODS,
        regime_ids=RegimeId,
    )


# Strongly typed float64 leaves: shifted copies then share one compiled program.
PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "pension": 1.5,
    "survival_probability": jnp.array([0.98, 0.95, 0.9, 0.85]),
    "working": {
        "taste_shock_scale": 0.5,
        "utility": {"disutility_of_work": 0.5},
        "labor_income": {"wage": 3.0},
        "next_income": {"rho": 0.8, "sigma": 0.3},
    },
}
PARAMS = jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.float64), PARAMS)

# (path in PARAMS, index into an array parameter or None)
SCALARS = [
    (("discount_factor",), None),
    (("interest_rate",), None),
    (("pension",), None),
    (("working", "taste_shock_scale"), None),
    (("working", "utility", "disutility_of_work"), None),
    (("working", "labor_income", "wage"), None),
    (("working", "next_income", "rho"), None),
    (("working", "next_income", "sigma"), None),
    *[(("survival_probability",), t) for t in range(N_PERIODS - 1)],
]


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _shifted(params, path, index, h):
    """A copy of params with the parameter at path (element index) moved by h."""
    out = jax.tree.map(lambda x: x, params)
    parent = _get(out, path[:-1])
    value = jnp.asarray(parent[path[-1]], dtype=jnp.float64)
    parent[path[-1]] = value + h if index is None else value.at[index].add(h)
    return out


@pytest.fixture(scope="module")
def model():
    return build_model()


def _simulated_panel(model):
    n = 200
    rng = np.random.default_rng(2)
    initial = {
        "regime": np.zeros(n, dtype=int),
        "wealth": rng.uniform(2.0, 25.0, n),
        "income:index": rng.integers(0, 5, n),
    }
    # A few subjects reach a state with no feasible action (the retirees' consumption
    # grid starts above their lowest wealth): flagged rows (validate="warn"), left out.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)
        result = model.simulate(PARAMS, initial, key=jax.random.key(3), validate="warn")
    df = result.to_dataframe()
    return prepare_data(model, df[np.isfinite(df["value"])])


def _objectives(model, panel):
    """Three scalar functions of the solution: weighted sums of values, of choice
    probabilities on the grid, and of choice-probability moments over a simulated panel
    (states held fixed)."""
    rng = np.random.default_rng(0)
    weights = {
        "working": jnp.asarray(rng.uniform(0.5, 1.5, (N_PERIODS, 15, 5))),
        "retired": jnp.asarray(rng.uniform(0.5, 1.5, (N_PERIODS, 15))),
        "moments": jnp.asarray(rng.uniform(0.5, 1.5, (N_PERIODS, 2))),
    }

    def objectives(params):
        solution = model.solve(params)
        values = sum(jnp.sum(weights[r] * solution.values[r]) for r in ("working", "retired"))
        probabilities = sum(
            jnp.sum(
                weights["working"][t]
                * choice_probabilities(model, params, solution, "working", t)[..., 0]
            )
            for t in (0, 2)
        )
        m = choice_moments(model, params, panel, solution=solution)["working"]
        moments = jnp.sum(jnp.where(jnp.isnan(m), 0.0, weights["moments"] * m))
        return jnp.stack([values, probabilities, moments])

    return objectives


@pytest.fixture(scope="module")
def gradients(model):
    objectives = _objectives(model, _simulated_panel(model))
    forward = jax.jit(objectives)
    jacobian = jax.jit(jax.jacrev(objectives))(PARAMS)
    return forward, jacobian


@pytest.mark.slow
def test_model_has_every_parameter_kind(model, gradients):
    template = model.params_template()
    assert set(template["working"]["next_income"]) == {"rho", "sigma"}
    assert "taste_shock_scale" in template["working"]
    forward, _ = gradients
    assert np.all(np.isfinite(forward(PARAMS)))


@pytest.mark.parametrize(("path", "index"), SCALARS, ids=lambda x: str(x))
def test_gradient_matches_central_differences(gradients, path, index):
    forward, jacobian = gradients
    up = np.asarray(forward(_shifted(PARAMS, path, index, H)))
    down = np.asarray(forward(_shifted(PARAMS, path, index, -H)))
    fd = (up - down) / (2 * H)
    ad = np.asarray(_get(jacobian, path))
    ad = ad if index is None else ad[:, index]
    assert np.all(np.abs(ad) > 1e-8), ad  # a zero gradient would make the check vacuous
    np.testing.assert_allclose(ad, fd, rtol=RTOL)


def test_survival_in_last_period_has_no_effect(gradients):
    """The continuation after the last period is 0: its survival probability is irrelevant."""
    _, jacobian = gradients
    np.testing.assert_array_equal(np.asarray(jacobian["survival_probability"])[:, -1], 0.0)


def test_vmap_solve_equals_separate_solves(model):
    rng = np.random.default_rng(1)
    batch = []
    for _ in range(16):
        params = _shifted(
            PARAMS, ("working", "utility", "disutility_of_work"), None, rng.uniform(-0.3, 0.3)
        )
        params = _shifted(params, ("working", "labor_income", "wage"), None, rng.uniform(-1, 1))
        params = _shifted(params, ("discount_factor",), None, rng.uniform(-0.05, 0.03))
        params = _shifted(params, ("working", "next_income", "rho"), None, rng.uniform(-0.2, 0.1))
        batch.append(params)
    stacked = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *batch)
    solved = jax.vmap(model.solve)(stacked)
    for i, params in enumerate(batch):
        single = model.solve(params)
        for regime in ("working", "retired", "dead"):
            np.testing.assert_allclose(
                solved.values[regime][i], single.values[regime], rtol=1e-12, atol=1e-12
            )


def test_gradient_is_finite_next_to_infeasible_states():
    """Next period's values hold -inf (states with no feasible action), and next-period
    wealth lands between such a node and a finite one, or exactly on a finite node next
    to one: the value there is -inf or ignores the -inf node, and its gradient must be
    the finite one of the feasible choices (0 * inf must not leak NaN into reverse mode)."""
    wealth = lcm.LinSpacedGrid(0.5, 10.0, 20)
    regime = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": lcm.LinSpacedGrid(1.0, 10.0, 37)},
        functions={"utility": lambda consumption, taste: taste * jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption, interest_rate, income: (
                (1 + interest_rate) * (wealth - consumption) + income
            )
        },
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model({"alive": regime}, 3)
    # (income 0.93: next-period wealth never lands exactly on a grid point, where the
    # interpolated value has a kink that central differences would average over)
    params = {"discount_factor": 0.9, "interest_rate": 0.05, "income": 0.93, "taste": 1.3}

    def objective(params):
        values = model.solve(params, validate="off").values["alive"]
        return jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))

    with pytest.warns(lcm.LcmWarning, match="no feasible action"):
        values = model.solve(params).values["alive"]
    # wealth 0.5: no feasible consumption; at wealth 1.0 (1.5 in period 0) before the
    # last period, every choice lands next to a -inf node (blocked interpolation)
    assert np.isneginf(values[:, 0]).all() and np.isneginf(values[:-1, 1]).all()
    assert np.isneginf(values[0, 2]) and np.isfinite(values[1:, 2:]).all()
    grad = jax.grad(objective)(params)
    for name in ("discount_factor", "interest_rate", "income", "taste"):
        assert np.isfinite(grad[name]), (name, grad[name])
        up, down = dict(params), dict(params)
        up[name] += H
        down[name] -= H
        fd = (objective(up) - objective(down)) / (2 * H)
        np.testing.assert_allclose(grad[name], fd, rtol=RTOL)


def test_max_along_equals_max_with_the_argmax_elements_derivative():
    # The maximum over actions of a differentiated value (`max_along`): jnp.max's values,
    # NaN and -inf included, and the derivative of the first maximising element, in both
    # modes (jnp.max's derivative splits ties and depends on exact equality).
    from lcm_eqx._solve._reduce import max_along

    values = jnp.asarray([[1.0, -jnp.inf, 3.0, jnp.nan], [2.0, -jnp.inf, 3.0, 1.0]])
    np.testing.assert_array_equal(max_along(values, 0), jnp.max(values, axis=0))
    np.testing.assert_array_equal(max_along(values, 1), jnp.max(values, axis=1))
    scale = jnp.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 3.0]])

    def f(x):  # values `scale * x`; the maximum of column 2 is a tie of rows 0 and 1
        return jnp.sum(max_along(scale * x, 0) * jnp.asarray([1.0, 10.0, 100.0]))

    x = jnp.asarray(1.0)
    expected = 4.0 + 10 * 5.0 + 100 * 3.0  # the first maximiser of each column
    assert float(jax.grad(f)(x)) == expected
    assert float(jax.jacfwd(f)(x)) == expected
