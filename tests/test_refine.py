"""`GridSearch(refine=...)`: continuous actions refined off their grids.

Checked against independent references: a numpy/scipy oracle of the hours model
(`tests/models/hours.py`), closed-form policies with one and two continuous actions, and
central finite differences for the implicit-function derivatives.
"""

from __future__ import annotations

import warnings
from enum import IntEnum

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from tests.models import hours, retirement

jax.config.update("jax_enable_x64", True)

REFINED = lcm.GridSearch(refine=True)
UNIFORM = {"working": jnp.full((3, hours.WEALTH[2]), 1.0 / (3 * hours.WEALTH[2]))}


@pytest.fixture(scope="module")
def oracle():
    return hours.oracle(hours.PARAMS)


def test_the_default_is_the_grid_search():
    assert lcm.GridSearch(refine=False) == lcm.GridSearch()
    assert lcm.GridSearch().refine is None
    assert lcm.GridSearch(refine=True).refine == lcm.Refine()
    assert lcm.GridSearch(refine="hours").refine == lcm.Refine(actions=("hours",))
    with pytest.raises(lcm.ModelInitializationError, match="refine"):
        lcm.GridSearch(refine=3)
    with pytest.raises(lcm.ModelInitializationError, match="newton_steps"):
        lcm.Refine(newton_steps=0)
    with pytest.raises(lcm.ModelInitializationError, match="not continuous actions"):
        hours.build(solver=lcm.GridSearch(refine="effort"))


def test_refined_hours_equal_the_oracle_at_every_state_and_period(oracle):
    values, policy = oracle
    model = hours.build(40, solver=REFINED)
    solution = model.solve(hours.PARAMS)
    np.testing.assert_allclose(solution.values["working"], values, rtol=1e-12)
    refined = model.distribution(hours.PARAMS, UNIFORM, solution).actions["working"]["hours"]
    np.testing.assert_allclose(refined, policy, rtol=1e-10)
    codes = lcm.refine_codes(model, hours.PARAMS, solution, "working", 0)["hours"]
    assert codes.shape == (3, hours.WEALTH[2])
    assert np.all(codes == lcm.RefineCode.interior)
    # The grid search alone is as far off as its grid spacing (1.15 / 39 in hours).
    grid = hours.build(40).distribution(hours.PARAMS, UNIFORM).actions["working"]["hours"]
    assert 1e-3 < np.max(np.abs(grid - policy)) < 1.15 / 39


def test_simulation_uses_the_refined_policy(oracle):
    _, policy = oracle
    model = hours.build(40, solver=REFINED)
    initial = {
        "regime": jnp.zeros(3, dtype=int),
        "productivity": jnp.arange(3),
        "wealth": jnp.full(3, hours.WEALTH[0]),
    }
    df = model.simulate(hours.PARAMS, initial, key=jax.random.key(0)).to_dataframe()
    first = df[df["period"] == 0].sort_values("subject_id")
    np.testing.assert_allclose(first["hours"], policy[0, :, 0], rtol=1e-10)


def test_splayed_axes_give_the_same_refinement():
    plain = hours.build(40, solver=REFINED).solve(hours.PARAMS).values["working"]
    splayed = hours.build(40, solver=REFINED, hours_batch_size=7, wealth_batch_size=4)
    np.testing.assert_array_equal(splayed.solve(hours.PARAMS).values["working"], plain)


def _mean_hours(model, period):
    def moment(theta):
        params = {**hours.PARAMS, "disutility": theta[0], "risk_aversion": theta[1]}
        return model.distribution(params, UNIFORM).mean("hours")[period]

    return moment


@pytest.mark.slow
def test_the_gradient_of_a_distribution_moment_is_the_finite_difference():
    theta = jnp.array([hours.PARAMS["disutility"], hours.PARAMS["risk_aversion"]])
    moment = _mean_hours(hours.build(40, solver=REFINED), period=2)
    gradient = jax.grad(moment)(theta)
    step = 1e-5
    central = [
        (moment(theta.at[i].add(step)) - moment(theta.at[i].add(-step))) / (2 * step)
        for i in range(2)
    ]
    np.testing.assert_allclose(gradient, central, rtol=1e-5)
    assert np.all(np.abs(gradient) > 1e-2)
    # On the grid the moment is piecewise constant in the parameters.
    grid_moment = _mean_hours(hours.build(40), period=2)
    np.testing.assert_array_equal(jax.grad(grid_moment)(theta), 0.0)


@pytest.mark.slow
def test_jit_and_vmap_of_a_refined_solve():
    model = hours.build(40, solver=REFINED)
    expected = model.solve(hours.PARAMS).values["working"]
    jitted = jax.jit(model.solve)(hours.PARAMS).values["working"]
    np.testing.assert_allclose(jitted, expected, rtol=1e-14)
    scales = jnp.array([1.0, hours.PARAMS["disutility"]])
    batched = jax.vmap(lambda psi: model.solve({**hours.PARAMS, "disutility": psi}))(scales)
    np.testing.assert_allclose(batched.values["working"][1], expected, rtol=1e-14)


# ----------------------------------------------------------------------------- closed forms
def _labour_supply(n_hours, solver, actions=None, functions=None):
    """One period of labour supply at wage `wage` (a state): CRRA consumption `w·h`
    and disutility `ψ·h^(1+1/η)/(1+1/η)`, so `h = (w^(1−γ)/ψ)^(1/(γ+1/η))`."""

    def utility(hours, wage, risk_aversion, disutility, frisch):
        consumption = wage * hours
        crra = consumption ** (1 - risk_aversion) / (1 - risk_aversion)
        return crra - disutility * hours ** (1 + 1 / frisch) / (1 + 1 / frisch)

    regime = lcm.Regime(
        states={"wage": lcm.LinSpacedGrid(0.5, 3.0, 7)},
        actions=actions or {"hours": lcm.LinSpacedGrid(0.05, 2.0, n_hours)},
        functions=functions or {"utility": utility},
        solver=solver,
    )
    return lcm.Model(regimes={"only": regime}, n_periods=1)


LABOUR = {"risk_aversion": 2.0, "disutility": 1.5, "frisch": 0.5}


@pytest.mark.slow
def test_a_closed_form_policy_is_exact():
    model = _labour_supply(40, REFINED)
    wage = np.linspace(0.5, 3.0, 7)
    gamma, psi, frisch = LABOUR["risk_aversion"], LABOUR["disutility"], LABOUR["frisch"]
    exact = (wage ** (1 - gamma) / psi) ** (1 / (gamma + 1 / frisch))
    mass = {"only": jnp.full(7, 1 / 7)}
    policy = model.distribution(LABOUR, mass).actions["only"]["hours"][0]
    np.testing.assert_allclose(policy, exact, rtol=1e-8)
    # The derivative with respect to ψ: dh/dψ = −h / (ψ (γ + 1/η)).
    derivative = jax.jacfwd(
        lambda psi: model.distribution({**LABOUR, "disutility": psi}, mass).actions["only"][
            "hours"
        ][0]
    )(psi)
    np.testing.assert_allclose(derivative, -exact / (psi * (gamma + 1 / frisch)), rtol=1e-8)


def _two_actions(refine):
    """`log(w h) + α log(e) − ψ h²/2 − κ e h`: `h = √((1−α)/ψ)`, `e = α/(κ h)`."""

    def utility(hours, effort, wage, share, disutility, cost):
        return (
            jnp.log(wage * hours)
            + share * jnp.log(effort)
            - disutility * hours**2 / 2
            - cost * effort * hours
        )

    return _labour_supply(
        40,
        lcm.GridSearch(refine=refine),
        actions={
            "hours": lcm.LinSpacedGrid(0.05, 2.0, 40),
            "effort": lcm.LinSpacedGrid(0.05, 2.0, 40),
        },
        functions={"utility": utility},
    )


TWO = {"share": 0.3, "disutility": 1.4, "cost": 0.6}


@pytest.mark.slow
def test_two_coupled_actions_are_refined_jointly():
    # One turn each, then joint Newton steps: the turns alone converge linearly here
    # (by 0.18 per turn: Q_he² / (Q_hh·Q_ee)), the joint steps quadratically.
    model = _two_actions(lcm.Refine(rounds=1))
    h = np.sqrt((1 - TWO["share"]) / TWO["disutility"])
    e = TWO["share"] / (TWO["cost"] * h)
    solution = model.solve(TWO)
    best = np.log(np.linspace(0.5, 3.0, 7) * h) + TWO["share"] * np.log(e)
    best = best - TWO["disutility"] * h**2 / 2 - TWO["cost"] * e * h
    mass = {"only": jnp.full(7, 1 / 7)}
    actions = model.distribution(TWO, mass, solution).actions["only"]
    codes = lcm.refine_codes(model, TWO, solution, "only", 0)
    np.testing.assert_allclose(solution.values["only"][0], best, rtol=1e-12)
    np.testing.assert_allclose(actions["hours"][0], h, rtol=1e-8)
    np.testing.assert_allclose(actions["effort"][0], e, rtol=1e-8)
    assert all(np.all(c == lcm.RefineCode.interior) for c in codes.values())


# ----------------------------------------------------------------------------- result codes
CASES = ("smooth", "above", "below", "kink", "tie", "capped", "flat")


def _cases_model():
    """One action `h` on [0, 1] (41 points) and a state `case` choosing the objective."""

    def utility(hours, case, curvature):
        shapes = [
            -curvature * (hours - 0.4321) ** 2,  # an interior optimum
            -curvature * (hours - 2.0) ** 2,  # beyond the grid's last point
            -curvature * (hours + 1.0) ** 2,  # before its first
            -curvature * jnp.abs(hours - 0.4123),  # a kink
            -curvature * (hours - 0.3) ** 2 * (hours - 0.7) ** 2,  # two equal peaks
            curvature * hours,  # increasing, against the cap below
            0.0 * hours,  # flat
        ]
        return jnp.select([case == i for i in range(len(shapes))], shapes)

    def cap(hours, case):
        return (case != CASES.index("capped")) | (hours <= 0.4137)

    regime = lcm.Regime(
        states={"case": lcm.DiscreteGrid(list(CASES))},
        actions={"hours": lcm.LinSpacedGrid(0.0, 1.0, 41)},
        functions={"utility": utility},
        constraints={"cap": cap},
        solver=lcm.GridSearch(refine=lcm.Refine(newton_steps=8)),
    )
    return lcm.Model(regimes={"only": regime}, n_periods=1)


@pytest.mark.slow
def test_bounds_kinks_ties_and_constraints_are_flagged_with_finite_gradients():
    model = _cases_model()
    params = {"curvature": 2.0}
    solution = model.solve(params)
    codes = np.asarray(lcm.refine_codes(model, params, solution, "only", 0)["hours"])
    code = lcm.RefineCode
    expected = [
        code.interior,
        code.upper_bound,
        code.lower_bound,
        code.kink,
        code.tie,
        code.constraint,
        code.flat,
    ]
    assert codes.tolist() == [int(c) for c in expected]
    mass = {"only": jnp.full(len(CASES), 1 / len(CASES))}
    actions = np.asarray(model.distribution(params, mass, solution).actions["only"]["hours"][0])
    np.testing.assert_allclose(actions[[0, 1, 2, 3]], [0.4321, 1.0, 0.0, 0.4123], rtol=1e-9)
    assert actions[4] == pytest.approx(0.3)
    assert 0.4137 - 0.025 / 2**8 <= actions[5] <= 0.4137

    def policy(curvature):
        return model.distribution({"curvature": curvature}, mass).actions["only"]["hours"][0]

    derivative = jax.jacfwd(policy)(2.0)
    assert np.all(np.isfinite(derivative))
    # The optima do not move with the curvature: interior (−Q_aθ/Q_aa = 0 here) and
    # every flagged cell alike.
    np.testing.assert_allclose(derivative, 0.0, atol=1e-12)
    gradient = jax.grad(lambda c: jnp.sum(model.solve({"curvature": c}).values["only"]))(2.0)
    assert np.isfinite(gradient)


# ----------------------------------------------------------------------------- kinks
SAVING_WEALTH = np.linspace(1.0, 20.0, 12)


def _saving_model() -> lcm.Model:
    """Two periods of consumption and saving: next period's value is interpolated
    linearly over the wealth nodes, so `q` has a kink where next wealth crosses one,
    at `c = w − node / (1 + r)`, and the maximum often sits there (between the nodes
    the interpolated value is linear, and `log c` is concave)."""

    def next_wealth(wealth, consumption, interest_rate):
        return (1 + interest_rate) * (wealth - consumption)

    regime = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(1.0, 20.0, 12)},
        actions={"consumption": lcm.LinSpacedGrid(0.5, 20.0, 40)},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": next_wealth},
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        transition=lambda: 0,
        solver=REFINED,
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=2)


SAVING = {"discount_factor": 0.95, "interest_rate": 0.03}


def test_a_maximum_on_a_kink_moves_along_it():
    """At a kink `q`'s slope jumps from `Q⁻_c > 0` to `Q⁺_c < 0`, so neither side's
    `q_θ` is the value's derivative (the envelope theorem needs `q_c = 0`); the maximum
    moves with the kink, `c* = w − node / (1 + r)`. Closed forms at each kink cell:
    `dc*/dr = node / (1 + r)²`, `dV/dr = (dc*/dr) / c*` and `dV/dβ = V₁(node)` (next
    period's value at the node does not depend on `r`). The envelope value read `q_r`
    on one side, and a third of these cells were `unconverged`, short of the kink."""
    model = _saving_model()
    solution = model.solve(SAVING)
    codes = np.asarray(lcm.refine_codes(model, SAVING, solution, "alive", 0)["consumption"])
    assert not np.any(codes == lcm.RefineCode.unconverged)
    kinks = np.flatnonzero(codes == lcm.RefineCode.kink)
    assert len(kinks) >= 4
    rate = SAVING["interest_rate"]
    everyone = {"alive": jnp.full(12, 1 / 12)}

    def consumption(params):
        return model.distribution(params, everyone).actions["alive"]["consumption"][0]

    chosen = np.asarray(consumption(SAVING))[kinks]
    wealth = SAVING_WEALTH[kinks]
    nodes = SAVING_WEALTH[
        np.argmin(np.abs((1 + rate) * (wealth - chosen)[:, None] - SAVING_WEALTH), axis=1)
    ]
    np.testing.assert_allclose(chosen, wealth - nodes / (1 + rate), rtol=1e-12)
    moves = jax.jacfwd(consumption)(SAVING)
    np.testing.assert_allclose(moves["interest_rate"][kinks], nodes / (1 + rate) ** 2, rtol=1e-8)
    np.testing.assert_allclose(moves["discount_factor"][kinks], 0.0, atol=1e-10)

    def values(params):
        return model.solve(params).value("alive", 0)

    derivatives = jax.jacrev(values)(SAVING)
    next_values = np.asarray(solution.value("alive", 1))[np.searchsorted(SAVING_WEALTH, nodes)]
    np.testing.assert_allclose(
        derivatives["interest_rate"][kinks], nodes / (1 + rate) ** 2 / chosen, rtol=1e-8
    )
    np.testing.assert_allclose(derivatives["discount_factor"][kinks], next_values, rtol=1e-8)


# ----------------------------------------------------------------------------- composition
@pytest.mark.slow
def test_taste_shocks_on_a_discrete_action_with_refined_consumption():
    params = {**retirement.PARAMS, "taste_shock_scale": 0.5}
    grid = retirement.build(3, 12, 40, taste_shocks=True)
    refined = retirement.build(3, 12, 40, taste_shocks=True, solver=REFINED)
    on_grid, off_grid = grid.solve(params), refined.solve(params)
    # Against the same continuation, the refined maximum of each discrete choice is at
    # least the grid's. (Not so across solutions: below the wealth grid the next value is
    # extrapolated linearly, with a negative weight on a node's value.)
    v_grid = lcm.discrete_values(grid, params, on_grid, "working", 0)
    v_refined = lcm.discrete_values(refined, params, on_grid, "working", 0)
    assert np.all(v_refined >= v_grid - 1e-12)
    assert np.any(v_refined > v_grid + 1e-6)
    probabilities = lcm.choice_probabilities(refined, params, off_grid, "working", 0)
    np.testing.assert_allclose(np.sum(probabilities, axis=-1), 1.0, rtol=1e-12)
    initial = {"regime": jnp.zeros(4, dtype=int), "wealth": jnp.linspace(20.0, 200.0, 4)}
    df = refined.simulate(params, initial, off_grid, key=jax.random.key(1)).to_dataframe()
    consumed = df["consumption"].dropna().to_numpy()
    coarse = np.linspace(1.0, 400.0, 40)
    assert np.any(np.min(np.abs(consumed[:, None] - coarse[None]), axis=1) > 1e-6)
    likelihood = lcm.log_likelihood(refined, params, df, solution=off_grid)
    assert np.isfinite(likelihood)
    codes = lcm.refine_codes(refined, params, off_grid, "working", 0)["consumption"]
    assert codes.shape == (12, 2)


class Adjustment(IntEnum):
    stay = 0
    adjust = 1


def habit_effort_value(effort, lagged_effort, adjustment):
    return jnp.where(adjustment == Adjustment.adjust, effort, lagged_effort)


def habit_utility(effort_value, adjustment, health, effort_cost, elasticity, adjustment_cost):
    exponent = 1 + 1 / elasticity
    cost = effort_cost * effort_value**exponent / exponent
    return 1.0 + health - cost - adjustment_cost * (adjustment == Adjustment.adjust)


def habit_next_health(health, effort_value, lagged_effort):
    good = jax.nn.sigmoid(-1.0 + 2.0 * health + 0.7 * effort_value + 0.7 * lagged_effort)
    return jnp.stack([1 - good, good])


def habit_model(refine: lcm.Refine | bool = True, n_periods: int = 4) -> lcm.Model:
    """Mahler–Yum's effort block: effort (refined) is next period's lagged effort, a
    continuous state on the same points (so every grid point is a node of the
    interpolated continuation: a kink), costs `effort^(1+1/η)` (infinite curvature at 0
    for `η > 1`) and raises the chance of good health; keeping the lagged effort or
    paying to adjust is a discrete choice with taste shocks."""
    effort = lcm.LinSpacedGrid(0.0, 1.0, 3)
    regime = lcm.Regime(
        states={"lagged_effort": effort, "health": lcm.DiscreteGrid(["bad", "good"])},
        actions={"adjustment": lcm.DiscreteGrid(Adjustment), "effort": effort},
        functions={"utility": habit_utility, "effort_value": habit_effort_value},
        state_transitions={
            "lagged_effort": lambda effort_value: effort_value,
            "health": lcm.MarkovTransition(habit_next_health),
        },
        transition=lambda: 0,
        taste_shocks=lcm.ExtremeValueShocks(),
        solver=lcm.GridSearch(refine=refine),
    )
    return lcm.Model(regimes={"alive": regime}, n_periods=n_periods)


HABIT = {
    "effort_cost": 0.6,
    "elasticity": 1.115,
    "adjustment_cost": 0.05,
    "discount_factor": 0.95,
    "taste_shock_scale": 0.05,
}


# 40 s in CI; the refined derivatives stay in CI through tests/test_factored.py.
@pytest.mark.slow
def test_refined_effort_under_taste_shocks_has_the_central_differences_derivatives():
    """With taste shocks every discrete choice's refined effort enters the values and
    the moments, the unchosen ones too. Three Newton steps left some of them short of
    the optimum (`unconverged`: a zero derivative, and the value at the point reached):
    the grid point the refinement starts from is a kink of the continuation, or a point
    of infinite curvature (effort 0). Mean effort's derivatives were 20–35 % off."""
    model = habit_model()
    names = ("effort_cost", "elasticity", "discount_factor")
    mass = {"alive": jnp.full((3, 2), 1 / 6)}

    def values_and_moments(theta):
        params = {**HABIT, **dict(zip(names, theta, strict=True))}
        solution = model.solve(params, validate="off")
        dist = model.distribution(params, mass, solution, validate="off")
        values = [jnp.sum(solution.value("alive", t)) for t in range(model.n_periods)]
        return jnp.concatenate([jnp.stack(values), dist.mean("effort_value")])

    theta = jnp.array([HABIT[n] for n in names])
    jacobian = np.asarray(jax.jacfwd(values_and_moments)(theta))
    step = 1e-6
    central = np.stack(
        [
            (values_and_moments(theta.at[i].add(step)) - values_and_moments(theta.at[i].add(-step)))
            / (2 * step)
            for i in range(len(names))
        ],
        axis=1,
    )
    nonzero = np.abs(central) > 1e-8
    assert nonzero.sum() >= 20
    np.testing.assert_allclose(jacobian[nonzero], central[nonzero], rtol=1e-6)
    np.testing.assert_allclose(jacobian[~nonzero], 0.0, atol=1e-8)
    codes = lcm.refine_codes(model, HABIT, None, "alive", 0)["effort"]
    assert not np.any(codes == lcm.RefineCode.unconverged)
    assert np.sum(codes == lcm.RefineCode.interior) >= 4


@pytest.mark.slow
def test_a_refined_regime_beside_a_dcegm_regime():
    params = dict(retirement.PARAMS)
    mixed = retirement.build(3, 12, 40, solver=retirement.dcegm(30), retired_solver=REFINED)
    plain = retirement.build(
        3, 12, 40, solver=retirement.dcegm(30), retired_solver=lcm.GridSearch()
    )
    solution = mixed.solve(params)
    # The retirees' consumption is refined off its grid: against the same continuation
    # their value is at least the grid's.
    reference = plain.solve(params)
    v_plain = lcm.discrete_values(plain, params, reference, "retired", 0)
    v_mixed = lcm.discrete_values(mixed, params, reference, "retired", 0)
    assert np.all(v_mixed >= v_plain - 1e-12)
    initial = {"regime": jnp.ones(3, dtype=int), "wealth": jnp.array([30.0, 120.0, 300.0])}
    df = mixed.simulate(params, initial, solution, key=jax.random.key(2)).to_dataframe()
    consumed = df["consumption"].to_numpy()
    coarse = np.linspace(1.0, 400.0, 40)
    # Most choices are off the grid (one may sit on a grid point: consuming all wealth
    # that happens to equal one).
    off = np.min(np.abs(consumed[:, None] - coarse[None]), axis=1) > 1e-6
    assert np.mean(off) > 0.5
    codes = lcm.refine_codes(mixed, params, solution, "retired", 0)["consumption"]
    assert set(np.unique(codes)) <= {int(c) for c in lcm.RefineCode}


def test_a_sharded_state_gives_the_same_refinement():
    # Productivity sharded over 3 host devices (a subprocess: the device count is fixed when
    # jax is imported): the refined values equal the single-device solve.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("refine_devices.py")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["devices"] == 3 and report["sharded"]
    assert report["max_difference"] <= 1e-12


def test_estimate_reports_refinements_that_ran_out_of_newton_steps(monkeypatch):
    """Three Newton steps leave some of the habit model's refined efforts `unconverged`
    (a zero derivative short of the optimum: the moments' derivatives are off, silently,
    see the test above). `estimate` says so, by regime, action and period, with the
    knob that converges them; with the default steps it says nothing."""
    initial = {
        "regime": jnp.zeros(6, dtype=int),
        "lagged_effort": jnp.array([0.0, 0.5, 1.0, 0.0, 0.5, 1.0]),
        "health": jnp.array([0, 0, 0, 1, 1, 1]),
    }
    moments = [lcm.Profile("effort_value", regime="alive", periods=[0, 1, 2])]
    options = dict(method="msm", moments=moments, free=["effort_cost"], initial=initial)
    options.update(weighting="identity", max_steps=0)

    def reported(refine):
        model = habit_model(refine, n_periods=3)
        codes = [
            np.asarray(lcm.refine_codes(model, HABIT, None, "alive", t)["effort"]) for t in range(3)
        ]
        panel = model.simulate(HABIT, initial, key=jax.random.key(0))
        data = panel.to_dataframe(extra=["effort_value"], model=model, params=HABIT)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", lcm.LcmWarning)
            result = lcm.estimate(model, HABIT, data=data, **options)
        said = [str(w.message) for w in caught if "Newton steps" in str(w.message)]
        stuck = sum(int(np.sum(c == lcm.RefineCode.unconverged)) for c in codes)
        return stuck, said, result.message

    stuck, said, message = reported(lcm.Refine(newton_steps=3))
    assert stuck > 0
    assert len(said) == 1 and "Newton steps" in message
    assert f"at {stuck:,} of " in said[0]
    assert "'effort' in regime 'alive'" in said[0] and "newton_steps" in said[0]
    stuck, said, message = reported(True)
    assert stuck == 0 and not said and "Newton steps" not in message
    model = habit_model(lcm.Refine(newton_steps=3), n_periods=3)
    data = model.simulate(HABIT, initial, key=jax.random.key(0)).to_dataframe(
        extra=["effort_value"], model=model, params=HABIT
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lcm.LcmWarning)
        result = lcm.estimate(model, HABIT, data=data, **options, check_refinement=False)
    assert "Newton steps" not in result.message
    assert not [w for w in caught if "Newton steps" in str(w.message)]
    with pytest.raises(lcm.EstimationError, match="check_refinement"):
        lcm.estimate(model, HABIT, data=data, **options, check_refinement=1)
    # Below the share that warns, the message alone says it.
    monkeypatch.setattr("lcm_eqx._estimation._estimate.UNCONVERGED_SHARE", 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lcm.LcmWarning)
        result = lcm.estimate(model, HABIT, data=data, **options)
    assert "ran out of Newton steps" in result.message
    assert not [w for w in caught if "Newton steps" in str(w.message)]
