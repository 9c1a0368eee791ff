"""NEGM against independent references, on small grids.

- The two-period durable-goods model of `examples/durables.py` against its exact
  reference (`tests/oracles/durables_two_period.py`, numpy float64): the last period's
  closed form, and the first period maximised numerically against it.
- jit, vmap over parameters, grad against central differences, simulation from the
  continuous policies, and a named `ModelInitializationError` for each model outside
  NEGM's class.

The convergence study against a very fine grid search, the 20-period model's Euler
errors and the timings are in `benchmarks/negm.py`.
"""

import dataclasses
import functools
import json
import subprocess
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.oracles import durables_euler  # noqa: E402
from tests.oracles import durables_two_period as oracle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import durables  # noqa: E402

GRIDS = {"n_wealth": 40, "n_durable": 20, "n_savings": 40, "n_resources": 40, "adjuster_points": 24}


@functools.cache
def solved(n_periods=2):
    model, params = durables.build(n_periods=n_periods, **GRIDS)
    return model, params, model.solve(params)


def state_points(model):
    regime = model.regimes["alive"]
    wealth = np.asarray(regime.states["wealth"].to_jax())
    durable = np.asarray(regime.states["durable"].to_jax())
    nodes, matrix = (np.asarray(a) for a in regime.states["log_income"].discretize({}))
    return wealth, durable, nodes, matrix


def test_last_period_is_the_closed_form():
    model, params, solution = solved()
    wealth, durable, _, _ = state_points(model)
    m, n = np.meshgrid(wealth, durable, indexing="ij")
    exact = oracle.last_value(m, n, params, durable[-1])
    values = np.asarray(solution.values["alive"][1])
    # Away from the corner m ≈ 0.1 (where NEGM's adjuster keeps at least the grid's
    # lowest liquid wealth) and within the adjuster's grid of resources (x ≤ 20): the
    # keeper exactly; the adjuster, whose last-period search evaluates `u(x − d − a̲, d)`
    # itself, to the error of reading its value between nodes of resources (quadrature
    # of marginal utility: 5.0e-9, 1.5e-10 above m = 2). Reading the keeper's grid
    # instead, as before 2026-12-05, erred by 5.2e-4 (6.1e-5 above m = 2).
    x = m + 0.9 * n
    inside = (m >= 0.5) & (x <= 20.0)
    for z in range(values.shape[-1]):
        err = np.abs(values[..., z] - exact)
        keeps = np.isclose(exact, oracle.utility(m, n, params), rtol=0, atol=0)
        assert np.max(err[keeps & inside]) < 1e-12
        assert np.max(err[inside]) < 2e-8
        assert np.max(err[inside & (m >= 2.0)]) < 1e-9


def test_first_period_against_numerical_maximisation():
    model, params, solution = solved()
    wealth, durable, nodes, matrix = state_points(model)
    values = np.asarray(solution.values["alive"][0])
    rng = np.random.default_rng(0)
    i = rng.integers(np.searchsorted(wealth, 0.5), np.searchsorted(wealth, 10.0), 25)
    j = rng.integers(0, len(durable), 25)
    z = rng.integers(0, len(nodes), 25)
    exact = oracle.first_value(wealth[i], durable[j], z, params, nodes, matrix, durable[-1])
    err = np.abs(values[i, j, z] - exact)
    # Small grids: the error of reading next period's value between 40 x 20 nodes.
    assert np.max(err) < 3e-3
    assert np.mean(err) < 5e-4


def test_values_decrease_in_neither_state():
    _, _, solution = solved()
    values = np.asarray(solution.values["alive"][0])
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values, axis=0) > 0)
    assert np.all(np.diff(values, axis=1) >= -1e-10)


@pytest.mark.slow
def test_jit_and_vmap_over_params_match_the_eager_solve():
    model, params, solution = solved()

    def value(beta):
        return model.solve({**params, "discount_factor": beta}).values["alive"][0]

    jitted = jax.jit(value)(params["discount_factor"])
    # (The eager solve compiles with the solver's XLA options, a nested jit without.)
    np.testing.assert_allclose(jitted, solution.values["alive"][0], rtol=1e-8, atol=1e-10)
    betas = jnp.asarray([0.95, params["discount_factor"]])
    mapped = jax.vmap(value)(betas)
    np.testing.assert_allclose(mapped[1], solution.values["alive"][0], rtol=1e-8, atol=1e-10)
    # Utility is negative (CRRA, risk aversion 2): a lower discount factor weighs the
    # negative future less, so every value rises.
    assert np.all(np.asarray(mapped[0]) > np.asarray(mapped[1]))


@pytest.mark.slow
def test_grad_matches_central_differences():
    model, params, _ = solved()

    def value(beta, cost):
        solved = model.solve({**params, "discount_factor": beta, "adjustment_cost": cost})
        return solved.values["alive"][0][20, 10, 1]

    beta, cost = params["discount_factor"], params["adjustment_cost"]
    grad = jax.grad(value, argnums=(0, 1))(beta, cost)
    h = 1e-5
    central = (
        (value(beta + h, cost) - value(beta - h, cost)) / (2 * h),
        (value(beta, cost + h) - value(beta, cost - h)) / (2 * h),
    )
    np.testing.assert_allclose(np.asarray(grad), np.asarray(central), rtol=1e-4, atol=1e-8)


@pytest.mark.slow
def test_simulation_follows_the_continuous_policies():
    model, params, solution = solved(3)
    n = 40
    rng = np.random.default_rng(1)
    initial = {
        "regime": jnp.zeros(n, dtype=int),
        "wealth": jnp.asarray(rng.uniform(0.5, 8.0, n)),
        "durable": jnp.asarray(rng.uniform(0.0, 3.0, n)),
        "log_income": jnp.zeros(n),
    }
    result = model.simulate(params, initial, solution, key=jax.random.key(0))
    df = result.to_dataframe()
    assert len(df) == 3 * n
    assert np.all(np.isfinite(df["consumption"])) and np.all(df["consumption"] > 0)
    keep = df["adjust"] == "keep"
    saved_keep = df["wealth"][keep] - df["consumption"][keep]
    assert np.all(saved_keep > -1e-9)
    resources = df["wealth"] + 0.9 * df["durable"]
    saved_adjust = (resources - df["new_durable"] - df["consumption"])[~keep]
    assert np.all(saved_adjust > -1e-9)
    # Consumption is off the consumption grid: it comes from the Euler equation.
    grid = np.asarray(model.regimes["alive"].actions["consumption"].to_jax())
    assert np.mean(np.isin(np.asarray(df["consumption"]), grid)) < 0.1
    # The last period consumes everything that is not the durable.
    last = df[df["period"] == 2]
    np.testing.assert_allclose(
        np.where(
            last["adjust"] == "keep", last["wealth"], resources[last.index] - last["new_durable"]
        ),
        last["consumption"],
        rtol=1e-6,
        atol=1e-6,
    )


# ---------------------------------------------------------------------- Euler errors
FIELDS = tuple(f.name for f in dataclasses.fields(lcm.NEGMPolicy))


def test_euler_errors_match_a_numpy_reference():
    model, params, solution = solved(3)
    wealth, durable, nodes, matrix = state_points(model)
    points = np.linspace(0.6, 12.0, 7)
    errors = np.asarray(lcm.euler_errors(model, params, solution, regime="alive", points=points))
    # (period, durable, income, adjust, points); nothing follows the last period.
    assert errors.shape == (3, len(durable), len(nodes), 2, len(points))
    assert np.all(np.isnan(errors[-1]))
    solver = model.regimes["alive"].solver
    grids = (wealth, durable, np.asarray(solver.resources.to_jax()))
    policies = solution.policies["alive"]
    n, z, code, m = (
        a.reshape(-1)
        for a in np.meshgrid(durable, np.arange(len(nodes)), np.arange(2), points, indexing="ij")
    )
    for period in (0, 1):
        now, later = (
            {k: np.asarray(getattr(policies, k)[t]) for k in FIELDS} for t in (period, period + 1)
        )
        reference = durables_euler.euler_errors(
            now, later, z, m, n, code, grids, params, nodes, matrix
        )
        got = errors[period].reshape(-1)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(reference))
        # Relative consumption errors agree to rounding.
        np.testing.assert_allclose(10.0**got, 10.0**reference, rtol=1e-7, atol=1e-13)
        assert np.isfinite(got).mean() > 0.5
        # The example's own numpy measure, at the agent's choice.
        example, adjusts = durables.euler_errors_at(model, params, solution, period, z, m, n)
        chosen = (code == adjusts.astype(int)) & np.isfinite(example) & np.isfinite(got)
        assert chosen.sum() > 20
        np.testing.assert_allclose(
            10.0 ** got[chosen], 10.0 ** example[chosen], rtol=1e-7, atol=1e-13
        )


def test_the_adjusters_consumption_meets_its_euler_equation():
    """At the nodes of total resources (liquid wealth `x`, no stock), the adjuster's
    consumption is polished on its own Euler equation, next period's marginal value read
    at the point: the numpy reference finds it met to 1e-8 wherever the agent saves (the
    keeper's consumption read between its nodes, as before, was 1e-3.7 off on average)."""
    model, params, solution = solved(3)
    wealth, durable, nodes, matrix = state_points(model)
    total = np.asarray(model.regimes["alive"].solver.resources.to_jax())
    grids = (wealth, durable, total)
    policies = solution.policies["alive"]
    z, x = (a.reshape(-1) for a in np.meshgrid(np.arange(len(nodes)), total, indexing="ij"))
    for period in (0, 1):
        now, later = (
            {k: np.asarray(getattr(policies, k)[t]) for k in FIELDS} for t in (period, period + 1)
        )
        errors = durables_euler.euler_errors(
            now, later, z, x, np.zeros_like(x), np.ones_like(z), grids, params, nodes, matrix
        )
        saves = np.isfinite(errors)
        assert saves.mean() > 0.5
        assert np.max(errors[saves]) < -8.0


def test_the_keepers_borrowing_kink_is_kept_between_nodes():
    """In the liquid interval where the limit starts to bind, the keeper consumes all
    its wealth below the crossing of its desired consumption (stored at the nodes) with
    `c = m`, and meets its Euler equation above it. A bilinear read of the consumption
    itself (a chord across the kink) would save a little, off the Euler equation, on
    the whole interval."""
    model, params, solution = solved(3)
    wealth, _, nodes, _ = state_points(model)
    policies = solution.policies["alive"]
    above_errors = []
    for period in (0, 1):
        for k in (0, 5, 10, 15):
            for z in range(len(nodes)):
                desired = np.asarray(policies.keep_consumption[period, z, :, k])
                i = np.flatnonzero(desired >= wealth)[-1]
                above = desired - wealth
                cross = wealth[i] + above[i] / (above[i] - above[i + 1]) * (
                    wealth[i + 1] - wealth[i]
                )
                below_points = np.linspace(wealth[i], cross, 5)[1:-1]
                above_points = np.linspace(cross, wealth[i + 1], 5)[1:-1]
                errors = np.asarray(
                    lcm.euler_errors(
                        model,
                        params,
                        solution,
                        regime="alive",
                        points=np.concatenate([below_points, above_points]),
                    )
                )[period, k, z, 0]
                # NaN: saves nothing (consumes m exactly).
                assert np.all(np.isnan(errors[:3]))
                above_errors.append(errors[3:])
    # The desired consumption is read linearly across the crossing: close to it, within
    # 1 % (a chord through the kink is off by far more, and saves below the crossing).
    assert np.max(above_errors) < -2.0
    assert np.mean(above_errors) < -3.5


def test_the_quadrature_read_is_exact_for_a_quintic_value():
    """`integrated` reads a value from its two ends by three-point Gauss–Legendre
    integration of the slope from each: exact for a value of degree five (slope of
    degree four), inside the interval and beyond it, against the closed form."""
    from lcm_eqx._solve._negm._interpolate import integrated

    def value(x):
        return x**5 - 2.0 * x**3 + x

    def slope(x):
        return 5.0 * x**4 - 6.0 * x**2 + 1.0

    low, high = 0.3, 1.7
    x = np.array([0.3, 0.31, 0.9, 1.69, 1.7, 0.1, 2.2])
    got = jax.jit(integrated, static_argnums=4)(low, high, value(low), value(high), slope, x)
    np.testing.assert_allclose(np.asarray(got), value(x), rtol=0, atol=1e-13)


def test_the_prepared_read_is_exact_across_the_borrowing_kink():
    """The keeper's value read from `prepare`'s tables integrates marginal utility in
    closed form along consumption `min(desired, m − a̲)`, split where the limit starts
    to bind inside the interval: against a fine trapezoid, at points on both sides of
    the kink (three-point Gauss–Legendre quadrature across it erred by ~1e-5)."""
    from lcm_eqx._solve._negm._policy import NEGMPolicy, keep_value_prepared, prepare

    def utility(c, h):
        return -1.0 / (c**0.9 * (h + 0.01) ** 0.1)

    marginal = jax.grad(utility, 0)
    liquid, durable, total = jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0]), jnp.array([1.0, 2.0])
    desired = jnp.array([[1.2, 1.2], [1.5, 1.5]])  # binds at m = 1 (budget 1), not at 2

    def path(s):  # consumption along liquid wealth, and its marginal utility
        c = np.minimum(1.2 + 0.3 * (s - 1.0), s)
        return np.asarray(jax.vmap(marginal, (0, None))(jnp.asarray(c), 0.5))

    fine = np.linspace(1.0, 2.0, 400_001)
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (path(fine)[1:] + path(fine)[:-1]))])
    integral *= fine[1] - fine[0]
    v_low = -3.0
    keep = jnp.array([[v_low, v_low], [v_low + integral[-1], v_low + integral[-1]]])
    zeros = jnp.zeros((2, 2))
    policy = NEGMPolicy(keep, desired, zeros, zeros, *(jnp.ones(2),) * 4)
    prepared = prepare(policy, (liquid, durable, total), 0.0, utility, marginal)
    m = np.array([1.1, 1.2857, 1.5, 1.9])  # the kink: 1.2 + 0.3 (s - 1) = s at s = 9/7
    got = jax.vmap(
        lambda m: keep_value_prepared(policy, prepared, liquid, durable, 0.0, m, 0.5, utility)
    )(jnp.asarray(m))
    expected = v_low + np.interp(m, fine, integral)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=0, atol=1e-9)


def test_a_read_of_next_period_traces_marginal_utility_once_per_interpolant():
    """The read of an NEGM period (`_policy.read`) evaluates the user's marginal
    utility in four places (the keeper's value integral, over both durable columns and
    six quadrature points at once; the keeper's and the adjuster's marginal value; the
    adjuster's value integral): each a single traced copy, batched, not one per point.
    Every copy is XLA code of its own, and unrolled copies were most of NEGM's compile
    time (docs/development_notes.md, NEGM)."""
    from lcm_eqx._solve._negm._policy import NEGMPolicy, read

    liquid, durable, total = (
        jnp.linspace(0.1, 5.0, 6),
        jnp.linspace(0.0, 2.0, 4),
        jnp.linspace(0.1, 7.0, 8),
    )
    keep = jnp.ones((6, 4))
    adjust = jnp.ones(8)
    policy = NEGMPolicy(keep, keep, keep, keep, adjust, adjust, adjust, adjust)
    calls = []

    def marginal(c, h):
        calls.append(jnp.shape(c))
        return 1.0 / (c * (1.0 + h))

    def resources(m, n):
        return m + n, jnp.ones_like(m), jnp.ones_like(n)

    jax.make_jaxpr(
        lambda m, n: read(policy, (liquid, durable, total), 0.0, m, n, resources, marginal)
    )(1.3, 0.7)
    assert len(calls) == 4, calls


def test_euler_errors_name_the_liquid_margin():
    model, params, solution = solved(3)
    with pytest.raises(lcm.LcmError, match="NEGM"):
        lcm.euler_errors(model, params, solution, regime="alive", state="durable")


BEYOND = "resources:beyond:wealth:new_durable"


def test_resources_within_the_liquid_grid_pass_the_check():
    """The example's resources grid ends at the liquid grid's top: every adjuster's
    remaining liquid wealth `x − d` lies on the keeper's grid (the check is computed,
    and 0 in every period)."""
    _, _, solution = solved(3)
    column = solution.checks["alive"].index(BEYOND)
    assert np.all(np.asarray(solution.violations["alive"])[:, column] == 0.0)


@pytest.mark.slow
def test_resources_beyond_the_liquid_grid_are_named_not_silent():
    """Issue 61: with total resources above the liquid grid's top (here to 26, the
    liquid grid to 20, the stock to 5), an adjuster at the top keeps more than 20 of
    liquid wealth, where the keeper is extrapolated linearly and its choice of stock can
    be far off. A `ModelInitializationError` with `validate="raise"` (a warning with
    `"warn"`) that names the regime, the function, the liquid grid, the stock and how
    far beyond (measured 1.29 in period 0; not in the last period, whose adjuster
    evaluates utility itself)."""
    model, params = durables.build(n_periods=2, **GRIDS)
    regime = model.regimes["alive"]
    points = list(0.1 + 25.9 * np.linspace(0.0, 1.0, GRIDS["n_resources"]) ** 3)
    solver = dataclasses.replace(regime.solver, resources=lcm.IrregSpacedGrid(points=points))
    wide = lcm.Model(regimes={"alive": regime.replace(solver=solver)}, n_periods=2)
    expected = (
        r"Regime 'alive', function 'resources', period 0: NEGM's adjuster reads the keeper's "
        r"solution beyond the top of the liquid grid 'wealth'.*'new_durable'.*by up to \d"
    )
    with pytest.warns(lcm.LcmWarning, match=expected):
        solution = wide.solve(params, validate="warn")
    column = solution.checks["alive"].index(BEYOND)
    beyond = np.asarray(solution.violations["alive"])[:, column]
    assert beyond[0] > 0.5 and beyond[1] == 0.0
    with pytest.raises(lcm.ModelInitializationError, match=expected):
        wide.solve(params)


# ---------------------------------------------------------------------- types and knobs
SMALL = {"n_wealth": 16, "n_durable": 8, "n_income": 2, "n_savings": 16, "n_resources": 16}


def _with_skill(n_types: int):
    """The durable-goods model with a permanent skill that scales income."""
    model, params = durables.build(n_periods=3, adjuster_points=8, **SMALL)
    regime = model.regimes["alive"]
    regime = regime.replace(
        states={**regime.states, "skill": lcm.DiscreteGrid([f"s{k}" for k in range(n_types)])},
        functions={
            **regime.functions,
            "income": lambda log_income, skill: jnp.exp(log_income) * (1.0 + 0.2 * skill),
        },
        state_transitions={**regime.state_transitions, "skill": lambda skill: skill},
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=3), params


@functools.cache
def solved_with_skill():
    model, params = _with_skill(2)
    return model, params, np.asarray(model.solve(params).values["alive"])


def _assert_each_type_alone(values, regime, params):
    """`values` (last axis: the two types) equal `regime` solved once per type, its
    income scaled by the type's `skill_scale` (1 + 0.2 * type)."""
    alone = lcm.Model(regimes={"alive": regime}, n_periods=3)
    for skill in (0, 1):
        each = alone.solve({**params, "skill_scale": 1.0 + 0.2 * skill}).values["alive"]
        np.testing.assert_allclose(values[..., skill], each, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_a_permanent_type_equals_each_type_solved_alone():
    """The types are mapped jointly with next period's policy (each reads its own
    slice), not summed over with zero weights: the same values as each type alone."""
    _, params, values = solved_with_skill()
    alone, _ = durables.build(n_periods=3, adjuster_points=8, **SMALL)
    regime = alone.regimes["alive"]
    regime = regime.replace(
        functions={
            **regime.functions,
            "income": lambda log_income, skill_scale: jnp.exp(log_income) * skill_scale,
        }
    )
    _assert_each_type_alone(values, regime, params)


@pytest.mark.slow
def test_a_type_as_the_only_discrete_state_and_none_at_all():
    """A permanent type without another discrete state (nothing left to map one at a
    time), against the model with no discrete state at all, once per type."""
    model, params = durables.build(n_periods=3, adjuster_points=8, **SMALL)
    base = model.regimes["alive"]
    states = {k: g for k, g in base.states.items() if k != "log_income"}
    typed = base.replace(
        states={**states, "skill": lcm.DiscreteGrid(["a", "b"])},
        functions={**base.functions, "income": lambda skill: 1.0 + 0.2 * skill},
        state_transitions={**base.state_transitions, "skill": lambda skill: skill},
    )
    untyped = base.replace(
        states=states,
        functions={**base.functions, "income": lambda skill_scale: skill_scale},
    )
    values = lcm.Model(regimes={"alive": typed}, n_periods=3).solve(params).values["alive"]
    _assert_each_type_alone(values, untyped, params)


@pytest.mark.slow
def test_a_deterministic_state_is_read_at_its_next_code_only():
    """A discrete state whose law of motion is deterministic but moves (not a permanent
    type) is read at its one next code, not summed over every code with one-hot
    weights: the same values as the law written as a Markov transition of one-hot
    probabilities, which reads every next code."""
    model, params = durables.build(n_periods=3, adjuster_points=8, **SMALL)
    base = model.regimes["alive"]

    def income(log_income, level):
        return jnp.exp(log_income) * (1.0 + 0.2 * level)

    def moved(level):
        return jnp.minimum(level + 1, 2)

    def moved_markov(level):
        return jax.nn.one_hot(jnp.minimum(level + 1, 2), 3)

    values = []
    for law in (moved, lcm.MarkovTransition(moved_markov)):
        regime = base.replace(
            states={**base.states, "level": lcm.DiscreteGrid(["a", "b", "c"])},
            functions={**base.functions, "income": income},
            state_transitions={**base.state_transitions, "level": law},
        )
        values.append(lcm.Model(regimes={"alive": regime}, n_periods=3).solve(params))
    np.testing.assert_allclose(
        values[0].values["alive"], values[1].values["alive"], rtol=0, atol=1e-12
    )


@pytest.mark.slow
def test_splayed_state_axes_give_the_same_values():
    """`batch_size` on the liquid, durable and type axes and on the solver's savings and
    resources grids: scanned in chunks, the same values."""
    model, params, values = solved_with_skill()
    regime = model.regimes["alive"]
    solver = dataclasses.replace(
        regime.solver,
        savings=lcm.IrregSpacedGrid(points=regime.solver.savings.points, batch_size=6),
        resources=lcm.IrregSpacedGrid(points=regime.solver.resources.points, batch_size=7),
    )
    splayed = (
        lcm.Model(regimes={"alive": regime.replace(solver=solver)}, n_periods=3)
        .with_batch_size("wealth", 5)
        .with_batch_size("durable", 3)
        .with_batch_size("skill", 1)
    )
    np.testing.assert_allclose(splayed.solve(params).values["alive"], values, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------- sharding
@pytest.mark.slow
def test_sharded_permanent_type_needs_no_collective():
    """4 host devices: a sharded permanent skill (mapped jointly with its axis of next
    period's policy) gives the unsharded values and policies, the compiled solve moves
    nothing between devices but (validated) the check flags, and the simulation against
    the sharded solution gives the unsharded panel."""
    script = Path(__file__).with_name("negm_devices.py")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["values"] < 1e-12
    assert result["policies"] < 1e-12
    assert result["spec"][-1] == "skill"
    # (period, log_income, skill, liquid, durable)
    assert result["policy_spec"][2] == "skill"
    assert result["unvalidated"] == []
    assert all(kind == "all-reduce" and size <= 64 for kind, size in result["validated"])
    assert result["simulate_labels_equal"]
    assert result["simulate_difference"] < 1e-12
    # Each device simulates the subjects of its own types: only per-subject results (12
    # subjects) cross devices.
    assert result["simulate_collectives"]
    assert all(kind == "all-reduce" and size <= 12 for kind, size in result["simulate_collectives"])


# ---------------------------------------------------------------------- the class
def _base():
    model, _ = durables.build(n_periods=2, **GRIDS)
    return model.regimes["alive"]


def _with(**changes):
    return _base().replace(**changes)


def _three_way():
    from enum import IntEnum

    class Three(IntEnum):
        keep = 0
        adjust = 1
        other = 2

    regime = _base()
    return regime.replace(actions={**regime.actions, "adjust": lcm.DiscreteGrid(Three)})


OUTSIDE = {
    "taste shocks": (lambda: _with(taste_shocks=lcm.ExtremeValueShocks()), "taste shocks"),
    "no resources function": (
        lambda: _with(functions={k: f for k, f in _base().functions.items() if k != "resources"}),
        "no function 'resources'",
    ),
    "utility of liquid wealth": (
        lambda: _with(
            functions={
                **_base().functions,
                "utility": lambda consumption, held, wealth: jnp.log(consumption) + 0 * wealth,
            }
        ),
        "depends on the liquid state",
    ),
    "three categories": (_three_way, "needs two"),
    "another discrete action": (
        lambda: _with(actions={**_base().actions, "work": lcm.DiscreteGrid(durables.Adjust)}),
        "another discrete action 'work'",
    ),
    "a splayed action": (
        lambda: _with(
            actions={
                **_base().actions,
                "consumption": lcm.LinSpacedGrid(start=0.01, stop=5.0, n_points=10, batch_size=4),
            }
        ),
        "'consumption' has batch_size=4; NEGM searches no action grid",
    ),
    "no durable state": (
        lambda: _with(
            states={k: g for k, g in _base().states.items() if k != "durable"},
            state_transitions={"wealth": durables.next_wealth},
        ),
        "'durable' is not a continuous state",
    ),
}


@pytest.mark.parametrize("case", list(OUTSIDE))
def test_models_outside_the_class_are_named(case):
    build, message = OUTSIDE[case]
    with pytest.raises(lcm.ModelInitializationError, match=message):
        regime = build()
        lcm.Model(regimes={"alive": regime}, n_periods=2)


def test_a_second_regime_is_named():
    regime = _base()
    dead = lcm.Regime(states={}, actions={}, functions={"utility": lambda: 0.0})
    mortal = regime.replace(transition=lambda: {"alive": 0.9, "dead": 0.1})
    with pytest.raises(lcm.ModelInitializationError, match="can move to"):
        lcm.Model(regimes={"alive": mortal, "dead": dead}, n_periods=2)
