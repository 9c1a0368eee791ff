"""Structure-aware grid search (`GridSearch(factored=True)`, the default): the pieces of
the objective evaluated on their own axes and the actions eliminated inside them give
the plain product's values, checks and derivatives; a model without structure keeps the
plain product; `describe` reports both counts."""

import json
import subprocess
import sys
from enum import IntEnum
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._describe import _work
from lcm_eqx._solve import _factored
from lcm_eqx._solve._solver import AbstractSolver
from tests.models import retirement

jax.config.update("jax_enable_x64", True)


class Health(IntEnum):
    bad = 0
    good = 1


class Patience(IntEnum):
    low = 0
    high = 1


class Work(IntEnum):
    none = 0
    part = 1
    full = 2


N_PERIODS = 4


def utility(consumption, labor, effort_cost, disutility):
    # NaN where consumption <= 0: the constraint drops those points.
    return jnp.log(consumption) - disutility * (labor / 2) ** 2 - effort_cost


def effort_cost(effort, health, cost):
    return cost * effort**2 * (1.5 - 0.5 * health)


def consumption(wealth, labor, saving, wage, health):
    return wealth + wage * (labor / 2) * (0.7 + 0.3 * health) - saving


def budget(consumption):
    return consumption > 0


def next_health(health, effort, effect):
    good = jax.nn.sigmoid(-0.5 + 1.5 * health + effect * effort)
    return jnp.stack([1 - good, good])


def discount_factor(patience, betas):
    return betas[patience]


def next_regime(period, survival):
    alive = jnp.where(period < N_PERIODS - 2, survival, 0.0)
    return jnp.stack([alive, 1 - alive])


PARAMS = {
    "alive": {
        "utility": {"disutility": 0.6},
        "effort_cost": {"cost": 0.05},
        "consumption": {"wage": 1.5},
        "next_health": {"effect": 2.0},
        "discount_factor": {"betas": jnp.asarray([0.9, 0.96])},
        "next_regime": {"survival": 0.95},
    },
    "dead": {},
}


def build(
    solver,
    *,
    taste_shocks=False,
    wealth_batch_size=0,
    n_wealth=10,
    health=next_health,
    distributed=False,
    idle_action=False,
    constraints=None,
):
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(0.5, 6.0, n_wealth, batch_size=wealth_batch_size),
            "health": lcm.DiscreteGrid(Health),
            "patience": lcm.DiscreteGrid(Patience, distributed=distributed),
        },
        actions={
            "labor": lcm.DiscreteGrid(Work),
            "saving": lcm.LinSpacedGrid(0.0, 5.0, 10),
            "effort": lcm.LinSpacedGrid(0.0, 1.0, 8),
            **({"idle": lcm.DiscreteGrid(Work)} if idle_action else {}),
        },
        functions={
            "utility": utility,
            "effort_cost": effort_cost,
            "consumption": consumption,
            "discount_factor": discount_factor,
        },
        state_transitions={
            "wealth": lambda saving: saving,
            "health": lcm.MarkovTransition(health),
            "patience": lambda patience: patience,
        },
        constraints={"budget": budget, **(constraints or {})},
        transition=lcm.MarkovTransition(next_regime),
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
        active=lambda period: period < N_PERIODS - 1,
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0}, active=lambda period: period >= 1)
    return lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=N_PERIODS, solver=solver)


def params(taste_shocks=False):
    p = {k: dict(v) for k, v in PARAMS.items()}
    if taste_shocks:
        p["alive"]["taste_shock_scale"] = 0.3
    return p


def _values(model, p, **kwargs):
    solution = model.solve(p, **kwargs)
    return {name: np.asarray(v) for name, v in solution.values.items()}


def _assert_same(a, b):
    for name in b:
        np.testing.assert_array_equal(np.isfinite(a[name]), np.isfinite(b[name]))
        finite = np.isfinite(b[name])
        np.testing.assert_allclose(a[name][finite], b[name][finite], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("taste_shocks", [False, True], ids=["max", "taste-shocks"])
def test_factored_values_equal_the_plain_product(taste_shocks):
    p = params(taste_shocks)
    factored = build(lcm.GridSearch(), taste_shocks=taste_shocks)
    plain = build(lcm.GridSearch(factored=False), taste_shocks=taste_shocks)
    a, b = _values(factored, p), _values(plain, p)
    _assert_same(a, b)


def test_the_model_has_structure_and_the_retirement_model_has_none():
    p = params()
    summary = build(lcm.GridSearch()).describe(p)
    alive = next(r for r in summary.regimes if r.name == "alive")
    assert alive.work is not None
    assert alive.evaluated_points < alive.state_action_points / 2
    assert "evaluated by piece" in str(summary)
    # API.md's retirement model: the continuation depends on every axis.
    model = retirement.build(3, n_wealth=8, n_consumption=10, solver=lcm.GridSearch())
    summary = model.describe(dict(retirement.PARAMS))
    assert all(r.work is None for r in summary.regimes)
    # The switch: the plain product, reported as such.
    summary = build(lcm.GridSearch(factored=False)).describe(p)
    assert all(r.work is None for r in summary.regimes)


def test_factored_splay_gives_the_same_values():
    p = params()
    a = _values(build(lcm.GridSearch(), wealth_batch_size=4), p)
    b = _values(build(lcm.GridSearch(factored=False)), p)
    _assert_same(a, b)


def test_factored_gradient_equals_the_plain_products():
    base = params(taste_shocks=True)

    def value(model):
        def f(x):
            p = {k: dict(v) for k, v in base.items()}
            p["alive"]["utility"] = {"disutility": x[0]}
            p["alive"]["next_health"] = {"effect": x[1]}
            values = model.solve(p, validate="off").values["alive"]
            return jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))

        return jax.grad(f)(jnp.asarray([0.6, 2.0]))

    factored = value(build(lcm.GridSearch(), taste_shocks=True))
    plain = value(build(lcm.GridSearch(factored=False), taste_shocks=True))
    assert np.all(np.abs(np.asarray(plain)) > 0)
    np.testing.assert_allclose(factored, plain, rtol=1e-10)


def _bad_probabilities(health, effort, effect):
    # Not a distribution where effort is high (a modelling error the checks report).
    good = jax.nn.sigmoid(-0.5 + 1.5 * health + effect * effort)
    return jnp.stack([1 - good, good + 0.5 * (effort > 0.9)])


@pytest.mark.parametrize("factored", [True, False], ids=["factored", "plain"])
def test_factored_checks_report_what_the_plain_checks_report(factored):
    bad = build(lcm.GridSearch(factored=factored), health=_bad_probabilities)
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="next_health"):
        bad.solve(params())
    solution = bad.solve(params(), validate="off")
    assert np.isfinite(np.asarray(solution.values["alive"])).any()


@pytest.mark.parametrize("taste_shocks", [False, True], ids=["max", "taste-shocks"])
def test_factored_simulation_equals_the_plain_products(taste_shocks):
    # At a subject's state the actions are eliminated too, the argmax decoded back; the
    # same taste-shock draws give the same panel.
    p = params(taste_shocks)
    initial = {
        "regime": jnp.zeros(6, dtype=int),
        "wealth": jnp.linspace(0.7, 5.5, 6),
        "health": jnp.asarray([0, 1, 0, 1, 0, 1]),
        "patience": jnp.asarray([0, 0, 1, 1, 0, 1]),
    }
    frames = []
    for factored in (True, False):
        model = build(lcm.GridSearch(factored=factored), taste_shocks=taste_shocks)
        result = model.simulate(p, initial, key=jax.random.key(3))
        frames.append(result.to_dataframe())
    a, b = frames
    assert len(a) == len(b) and len(a) > 0
    for column in ("saving", "effort", "wealth", "value"):
        np.testing.assert_allclose(
            a[column].to_numpy(float), b[column].to_numpy(float), rtol=1e-12, equal_nan=True
        )
    for column in ("labor", "regime", "health"):
        np.testing.assert_array_equal(
            a[column].astype(object).fillna("-").to_numpy(),
            b[column].astype(object).fillna("-").to_numpy(),
        )


@pytest.mark.parametrize("taste_shocks", [False, True], ids=["max", "taste-shocks"])
def test_simulation_tabulates_what_subjects_share_and_chooses_as_at_each_state(
    monkeypatch, taste_shocks
):
    # The continuation piece (health, patience, saving, effort) has no continuous state:
    # tabulated once per period and read at each subject's codes. The panel is the one
    # of `choose` at each subject's own state (the solver interface's default).
    p = params(taste_shocks)
    initial = {
        "regime": jnp.zeros(40, dtype=int),
        "wealth": jnp.linspace(0.7, 5.5, 40),
        "health": jnp.arange(40) % 2,
        "patience": (jnp.arange(40) // 2) % 2,
    }
    tabulated = []

    def counting(*args):
        tables = original(*args)
        tabulated.append(sorted(tables))
        return tables

    original = _factored.tabulate_shared_pieces
    monkeypatch.setattr(_factored, "tabulate_shared_pieces", counting)
    frames = [
        build(lcm.GridSearch(), taste_shocks=taste_shocks)
        .simulate(p, initial, key=jax.random.key(3))
        .to_dataframe()
    ]
    assert tabulated and all(tabulated), tabulated
    monkeypatch.setattr(lcm.GridSearch, "subject_chooser", AbstractSolver.subject_chooser)
    frames.append(
        build(lcm.GridSearch(), taste_shocks=taste_shocks)
        .simulate(p, initial, key=jax.random.key(3))
        .to_dataframe()
    )
    a, b = frames
    for column in ("saving", "effort", "wealth", "value"):
        np.testing.assert_allclose(
            a[column].to_numpy(float), b[column].to_numpy(float), rtol=1e-12, equal_nan=True
        )
    for column in ("labor", "regime", "health"):
        np.testing.assert_array_equal(
            a[column].astype(object).fillna("-").to_numpy(),
            b[column].astype(object).fillna("-").to_numpy(),
        )


def test_factored_with_a_sharded_type_equals_the_plain_product_without_collectives():
    # 2 host devices in a subprocess: the sharded permanent type is mapped outermost with
    # its continuation slices, each of its points factored over the other axes.
    script = Path(__file__).with_name("factored_devices.py")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=script.parents[1]
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["devices"] == 2
    assert report["max_difference"] < 1e-12
    assert report["factored_collectives"] == []
    assert report["sharded"] == ["patience"]


def test_factored_solve_compiles_once_for_new_parameter_values():
    import equinox as eqx

    model = build(lcm.GridSearch())
    totals = []

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def solve(p):
        return model.solve(p).values

    base = params()
    for disutility in (0.6, 0.7, 0.8):
        p = {k: dict(v) for k, v in base.items()}
        p["alive"]["utility"] = {"disutility": disutility}
        values = solve(p)["alive"]
        totals.append(float(jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))))
    assert len(set(totals)) == 3  # the values moved; the program did not recompile


def test_an_action_that_enters_nothing_is_eliminated_as_in_the_plain_product():
    # Its maximum adds 0; under taste shocks its log-sum-exp adds scale * log(3).
    p = params(taste_shocks=True)
    a = _values(build(lcm.GridSearch(), taste_shocks=True, idle_action=True), p)
    b = _values(build(lcm.GridSearch(factored=False), taste_shocks=True, idle_action=True), p)
    _assert_same(a, b)


def test_a_ruled_out_discrete_action_has_finite_derivatives_in_the_taste_shock_scale():
    # Full-time work ruled out in period 2: its `-inf` in the log-sum-exp over labour
    # had derivative `inf / 0` in the scale, and the gradient was NaN (issue 62).
    rule = {"no_full_time": lambda labor, period: (labor != Work.full) | (period < 2)}
    factored = build(lcm.GridSearch(), taste_shocks=True, constraints=rule)
    plain = build(lcm.GridSearch(factored=False), taste_shocks=True, constraints=rule)
    summary = factored.describe(params(taste_shocks=True))
    assert next(r for r in summary.regimes if r.name == "alive").work  # factored indeed

    def value(model, scale):
        p = params(taste_shocks=True)
        p["alive"]["taste_shock_scale"] = scale
        values = model.solve(p, validate="off").values["alive"]
        return jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))

    h = 1e-6
    central = (value(plain, 0.3 + h) - value(plain, 0.3 - h)) / (2 * h)
    for model in (factored, plain):
        derivative = jax.grad(lambda s, model=model: value(model, s))(jnp.asarray(0.3))
        assert np.isfinite(derivative)
        np.testing.assert_allclose(derivative, central, rtol=1e-6)


# Refinement inside the elimination (`GridSearch(refine=["effort"])`, issue 60): effort
# enters its cost and the health transition, so it is refined in the step that
# eliminates it, over (health, patience, saving), not at every state.


def _refined(taste_shocks=True, factored=True, **kwargs):
    return build(
        lcm.GridSearch(refine=["effort"], factored=factored), taste_shocks=taste_shocks, **kwargs
    )


def test_refinement_inside_the_elimination_equals_the_plain_products():
    p = params(taste_shocks=True)
    model = _refined(n_wealth=6)
    work, obstacles = _work(model, p, "alive")
    assert obstacles == ()
    assert any(label == "refine 'effort' on (health, patience, saving)" for label, _ in work)
    a = _values(model, p, validate="off")
    b = _values(_refined(factored=False, n_wealth=6), p, validate="off")
    _assert_same(a, b)
    # Off the grid search's values.
    grid = _values(build(lcm.GridSearch(), taste_shocks=True, n_wealth=6), p, validate="off")
    finite = np.isfinite(grid["alive"])
    assert np.max(np.abs(np.where(finite, a["alive"] - grid["alive"], 0.0))) > 1e-4


def test_refined_values_inside_the_elimination_have_the_central_differences_derivatives():
    model = _refined(taste_shocks=False, n_wealth=6)
    names = (("effort_cost", "cost"), ("next_health", "effect"), ("utility", "disutility"))

    def total(theta):
        p = params()
        for (function, name), x in zip(names, theta, strict=True):
            p["alive"][function] = {**p["alive"][function], name: x}
        values = model.solve(p, validate="off").values["alive"]
        return jnp.stack([jnp.sum(jnp.where(jnp.isfinite(v), v, 0.0)) for v in values])

    theta = jnp.asarray([0.05, 2.0, 0.6])
    jacobian = np.asarray(jax.jacrev(total)(theta))
    step = 1e-6
    central = np.stack(
        [
            (total(theta.at[i].add(step)) - total(theta.at[i].add(-step))) / (2 * step)
            for i in range(len(names))
        ],
        axis=1,
    )
    assert np.all(np.abs(central[:2]) > 1e-3)  # the last period has no continuation
    np.testing.assert_allclose(jacobian, central, rtol=1e-6, atol=1e-8)


def test_several_refined_actions_keep_the_plain_products_refinement():
    work, obstacles = _work(build(lcm.GridSearch(refine=True)), params(), "alive")
    assert work is None
    assert obstacles[0].startswith(
        "refinement (GridSearch(refine=...)) evaluates the plain product: several refined"
    )
