"""Discrete alternatives ruled out under taste shocks (issue 62): a mandatory-retirement
constraint on the work/retire choice, or the same rule spelled with `active`.

The model: working, retired and dead regimes over ages 65-68, Gompertz mortality as a
stochastic regime transition, taste shocks on the work/retire choice. From age 67 working
is ruled out, either by the constraint `labor == retire | age < 67` or by the working
regime being inactive from age 68 (`active=lambda age: age <= 67`: working at 67 would
move into it). The ruled-out alternative has value `-inf`; `-inf / λ` has the derivative
`inf` in the taste-shock scale λ, which met the alternative's zero weight in the
derivatives of log-sum-exp and of the choice probabilities as `0 · inf = NaN`: the
gradient of the solve (grid search) and of the log-likelihood (every solver) in λ was
NaN. References: central differences in float64, and the retired regime, whose value
the working regime's must equal exactly where work is ruled out (the same utility and
budget once retired).
"""

from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._solve._reduce import choice_weights, log_choice_weights, smooth_max  # noqa: E402


class RegimeId(IntEnum):
    working = 0
    retired = 1
    dead = 2


class Labor(IntEnum):
    work = 0
    retire = 1


def utility(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)


def next_wealth(wealth, consumption, labor, interest_rate, wage):
    return (1 + interest_rate) * (wealth - consumption) + wage * (labor == Labor.work)


def next_wealth_retired(wealth, consumption, interest_rate):
    return (1 + interest_rate) * (wealth - consumption)


def survival(age):
    return jnp.exp(-0.02 * jnp.exp(0.1 * (age - 65)))


def next_regime_working(labor, age):
    p = survival(age)
    work = labor == Labor.work
    return jnp.stack([p * work, p * (1 - work), 1 - p])


def next_regime_retired(age):
    p = survival(age)
    return jnp.stack([0.0, p, 1 - p])


def borrowing(consumption, wealth):
    return consumption <= wealth


def mandatory_retirement(labor, age):
    return (labor == Labor.retire) | (age < 67)


PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "disutility_of_work": 0.4,
    "wage": 3.0,
    "taste_shock_scale": 0.3,
}
WEALTH = lcm.LinSpacedGrid(1.0, 20.0, 12)
CONSUMPTION = lcm.LinSpacedGrid(0.5, 20.0, 40)


def dcegm():
    savings = lcm.IrregSpacedGrid(points=[20.0 * (i / 39) ** 2 for i in range(40)])
    return lcm.DCEGM(state="wealth", action="consumption", savings=savings)


def build(solver=None, spelling="constraint", constraints=None):
    """The model with retirement from 67 mandatory, spelled as a constraint, as the
    working regime's `active` periods, or both (and the working regime's further
    `constraints`)."""
    constraints = {"borrowing": borrowing, **(constraints or {})}
    if spelling in ("constraint", "both"):
        constraints["mandatory_retirement"] = mandatory_retirement
    active = {"active": lambda age: age <= 67} if spelling in ("active", "both") else {}
    working = lcm.Regime(
        states={"wealth": WEALTH},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": CONSUMPTION},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth},
        transition=lcm.MarkovTransition(next_regime_working),
        constraints=constraints,
        taste_shocks=lcm.ExtremeValueShocks(),
        **active,
    )
    retired = lcm.Regime(
        states={"wealth": WEALTH},
        actions={"consumption": CONSUMPTION},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": next_wealth_retired},
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": borrowing},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model(
        regimes={"working": working, "retired": retired, "dead": dead},
        ages=lcm.AgeGrid(start=65, stop=68),
        regime_ids=RegimeId,
        solver=solver,
    )


def params():
    return {k: jnp.asarray(v, jnp.float64) for k, v in PARAMS.items()}


def panel(model, n=120):
    rng = np.random.default_rng(0)
    initial = {"regime": np.zeros(n, dtype=int), "wealth": rng.uniform(2.0, 15.0, n)}
    return model.simulate(params(), initial, key=jax.random.key(3)).to_dataframe()


def assert_gradient_matches_central_differences(f, p, h=1e-6, rtol=1e-5):
    gradient = jax.jit(jax.grad(f))(p)
    value = jax.jit(f)
    for name in p:
        up = value({**p, name: p[name] + h})
        down = value({**p, name: p[name] - h})
        central = float((up - down) / (2 * h))
        assert np.isfinite(gradient[name]), name
        assert abs(central) > 1e-3, name  # every parameter matters here
        np.testing.assert_allclose(float(gradient[name]), central, rtol=rtol, err_msg=name)


# --------------------------------------------------------------------------------------
# The reductions over discrete actions
# --------------------------------------------------------------------------------------

ROWS = jnp.asarray([[1.0, -jnp.inf, 0.5], [-jnp.inf, -jnp.inf, -jnp.inf], [2.0, 0.0, -1.0]])


def test_reductions_leave_ruled_out_entries_out_with_zero_derivatives():
    scale = 0.3
    # Closed forms, each row over its feasible entries only.
    kept = [np.array([1.0, 0.5]), None, np.array([2.0, 0.0, -1.0])]
    value = np.asarray(smooth_max(ROWS, scale))
    weights = np.asarray(choice_weights(ROWS, scale))
    logs = np.asarray(log_choice_weights(ROWS, scale))
    for row, v in enumerate(kept):
        if v is None:
            assert value[row] == -np.inf
            assert np.all(weights[row] == 0.0) and np.all(logs[row] == -np.inf)
            continue
        expected = scale * np.log(np.sum(np.exp(v / scale)))
        np.testing.assert_allclose(value[row], expected, rtol=1e-14)
        p = np.exp(v / scale - expected / scale)
        np.testing.assert_allclose(weights[row][np.isfinite(ROWS[row])], p, rtol=1e-14)
        np.testing.assert_allclose(
            logs[row][np.isfinite(ROWS[row])], np.log(p), rtol=1e-14, atol=1e-14
        )
    assert weights[0, 1] == 0.0 and logs[0, 1] == -np.inf
    # Derivatives in the scale and in the values: finite, 0 where ruled out, and equal
    # to the closed forms'.
    for f in (smooth_max, choice_weights, log_choice_weights):
        for mode in (jax.jacfwd, jax.jacrev):
            d_scale = np.asarray(mode(lambda s, f=f: f(ROWS, s))(scale))
            d_values = np.asarray(mode(lambda v, f=f: f(v, scale))(ROWS))
            assert np.all(np.isfinite(d_scale)) and np.all(np.isfinite(d_values)), f.__name__
            assert np.all(d_values[..., ~np.isfinite(np.asarray(ROWS))] == 0.0), f.__name__
    row = jnp.asarray([1.0, 0.5])
    np.testing.assert_allclose(
        jax.grad(lambda s: smooth_max(ROWS[0], s))(scale),
        jax.grad(lambda s: s * jax.nn.logsumexp(row / s))(scale),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        jax.jacfwd(lambda s: log_choice_weights(ROWS[0], s)[jnp.asarray([0, 2])])(scale),
        jax.jacfwd(lambda s: jax.nn.log_softmax(row / s))(scale),
        rtol=1e-12,
    )


def test_reductions_along_an_axis_and_nan_propagates():
    np.testing.assert_array_equal(smooth_max(ROWS.T, 0.3, 0), smooth_max(ROWS, 0.3))
    np.testing.assert_array_equal(choice_weights(ROWS.T, 0.3, 0), choice_weights(ROWS, 0.3).T)
    # NaN is an error somewhere, not a ruled-out action: it is not silently dropped.
    with_nan = jnp.asarray([1.0, jnp.nan, -jnp.inf])
    assert np.isnan(smooth_max(with_nan, 0.3))
    assert np.all(np.isnan(choice_weights(with_nan, 0.3)[:2]))


# --------------------------------------------------------------------------------------
# A constraint on the discrete choice: solve and likelihood
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "solver",
    [
        pytest.param(None, id="grid-search"),
        pytest.param(lcm.GridSearch(refine=True), id="grid-search-refined"),
        pytest.param(dcegm(), id="dcegm"),
    ],
)
def test_where_work_is_ruled_out_the_value_is_the_retired_value(solver):
    # At 67 and 68 working means retiring now: the working regime's value is the retired
    # regime's, whose choice probabilities are 1 and 0, and the taste-shock scale does
    # not enter it.
    model = build(solver)
    solution = model.solve(params())
    for period in (2, 3):
        np.testing.assert_allclose(
            solution.value("working", period), solution.value("retired", period), rtol=1e-12
        )
    probabilities = lcm.choice_probabilities(model, params(), solution, "working", 2)
    np.testing.assert_array_equal(probabilities[:, Labor.work], 0.0)
    np.testing.assert_array_equal(probabilities[:, Labor.retire], 1.0)
    if isinstance(solver, lcm.DCEGM):
        return  # its gradients: the (slow) likelihood test below

    def values(p):
        solution = model.solve(p)
        return jnp.sum(solution.value("working", 0)), jnp.sum(solution.value("working", 2))

    early, late = jax.jit(jax.jacrev(values))(params())
    assert all(np.isfinite(early[name]) for name in PARAMS), early
    # (`λ · (v / λ)`: zero up to rounding.)
    np.testing.assert_allclose(late["taste_shock_scale"], 0.0, atol=1e-12)


@pytest.mark.parametrize(
    ("solver", "splayed"),
    [
        pytest.param(None, False, id="plain"),
        pytest.param(None, True, id="labor-splayed"),
        pytest.param(lcm.GridSearch(refine=True), False, id="refined"),
    ],
)
def test_solve_gradient_matches_central_differences(solver, splayed):
    # Splayed: the labour axis in chunks of one, combined by a running log-sum-exp
    # (whose first chunk, work, is ruled out from 67 on). Refined: consumption off its
    # grid, where a third of the optima sit on kinks of the interpolated continuation
    # (next wealth on a node), whose derivatives follow the kink (interest rate and
    # wage were 7e-4 and 9e-3 off).
    model = build(solver).with_batch_size("labor", 1) if splayed else build(solver)

    def total(p):
        return jnp.sum(model.solve(p).value("working", 0))

    assert_gradient_matches_central_differences(total, params())


@pytest.mark.parametrize(
    "solver",
    [
        pytest.param(None, id="grid-search"),
        # Each row's refinement at its own wealth, off the grids: on a kink, at a
        # binding borrowing constraint or interior (the interest rate was 24 % off,
        # the wage 5 %).
        # (About a minute on 2 cores: slow; the refined solve's gradient runs in CI.)
        pytest.param(lcm.GridSearch(refine=True), id="grid-search-refined", marks=pytest.mark.slow),
        # (The same code as grid search's after `discrete_values`; a DC-EGM gradient
        # compiles for about 30 s.)
        pytest.param(dcegm(), id="dcegm", marks=pytest.mark.slow),
    ],
)
def test_log_likelihood_gradient_matches_central_differences(solver):
    model = build(solver)
    data = lcm.prepare_data(model, panel(model))
    assert (data.blocks["working"].periods == 2).any()  # rows where work is ruled out

    def log_likelihood(p):
        return lcm.log_likelihood(model, p, data)

    assert np.isfinite(log_likelihood(params()))
    assert_gradient_matches_central_differences(log_likelihood, params())


# --------------------------------------------------------------------------------------
# The same rule spelled with `active`: an action into an inactive regime is never chosen
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "solver", [pytest.param(None, id="grid-search"), pytest.param(dcegm(), id="dcegm")]
)
def test_moving_into_an_inactive_regime_is_ruled_out_like_the_constraint(solver):
    # Working at 67 would move into the working regime at 68, inactive: the action is
    # infeasible, so the solution, the choice probabilities and the simulated panel are
    # the constraint's (validation on: no mass on an inactive regime is reported).
    constrained, by_activity = build(solver, "constraint"), build(solver, "active")
    reference = constrained.solve(params())
    # (Both spellings at once: the constraint rules out what the regime's end would.)
    spellings = (
        (by_activity,) if isinstance(solver, lcm.DCEGM) else (by_activity, build(None, "both"))
    )
    for model in spellings:
        solution = model.solve(params())
        for period in range(3):
            np.testing.assert_array_equal(
                solution.value("working", period), reference.value("working", period)
            )
        for period in range(4):
            np.testing.assert_array_equal(
                solution.value("retired", period), reference.value("retired", period)
            )
        probabilities = lcm.choice_probabilities(model, params(), solution, "working", 2)
        np.testing.assert_array_equal(probabilities[:, Labor.work], 0.0)
    with pytest.raises(lcm.InvalidPeriodError):
        by_activity.solve(params()).value("working", 3)
    if isinstance(solver, lcm.DCEGM):
        return  # (the simulation reads the same values; 10 s more to compile)
    expected = panel(constrained)
    simulated = panel(by_activity)
    assert (simulated["regime"] == "working").any()
    assert not ((simulated["regime"] == "working") & (simulated["period"] == 3)).any()
    assert simulated["labor"].astype(str).tolist() == expected["labor"].astype(str).tolist()
    np.testing.assert_allclose(simulated["wealth"], expected["wealth"], rtol=1e-12)


def test_an_inactive_regime_no_action_avoids_is_still_an_error():
    # A transition that depends on no action cannot be chosen around: mass on a regime
    # inactive next period is a modelling error, named with its remedy.
    def stay(age):
        p = survival(age)
        return jnp.stack([p, 1 - p])

    working = lcm.Regime(
        states={"wealth": WEALTH},
        actions={"consumption": CONSUMPTION},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": next_wealth_retired},
        transition=lcm.MarkovTransition(stay),
        constraints={"borrowing": borrowing},
        active=lambda age: age <= 67,
    )
    model = lcm.Model(
        regimes={"working": working, "dead": lcm.Regime(functions={"utility": lambda: 0.0})},
        ages=lcm.AgeGrid(start=65, stop=68),
        regime_ids=IntEnum("Ids", {"working": 0, "dead": 1}, start=0),
    )
    p = {"discount_factor": 0.95, "interest_rate": 0.03}
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError) as error:
        model.solve(p)
    message = str(error.value)
    assert "'working'" in message and "period 2" in message and "inactive in period 3" in message
    assert "depends on no action" in message and "probability 0 in period 2" in message


def test_states_left_without_an_action_by_an_inactive_regime_are_reported():
    # Poor workers may not retire; at 67 working leads into the inactive working regime:
    # the poor have no feasible action, and the warning says why.
    rule = {"poor_keep_working": lambda labor, wealth: (labor == Labor.work) | (wealth > 3.0)}
    poor = build(spelling="active", constraints=rule)
    with pytest.warns(
        UserWarning, match=r"or into the regimes \['working'\], inactive in the next"
    ):
        solution = poor.solve(params())
    assert np.isneginf(solution.value("working", 2)[0])
    assert np.isfinite(solution.value("working", 2)[-1])
