"""The structure-aware grid search sees through the spelling of a model (issue 60): the
same model written ten ways (a utility scale of a discrete state and the period times a
sum, helpers, negation and subtraction, division by an action-free value, `jnp.where`
on a state or an action, a stacked sum, one large user function) is evaluated on the
same pieces, and each spelling's values equal the plain state x action product's;
where it cannot split the objective, `describe` says what joins the axes, and the
solve warns above a size."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._solve import _grid_search
from tests.models import retirement
from tests.test_factored import N_PERIODS, Health, Patience, Work

jax.config.update("jax_enable_x64", True)


# The factored tests' model's categories and horizon (this module spells its
# functions in other ways).


def consumption(wealth, labor, saving, wage, health):
    return wealth + wage * (labor / 2) * (0.7 + 0.3 * health) - saving


def budget(consumption):
    return consumption > 0


def next_health(health, effort, effect):
    good = jax.nn.sigmoid(-0.5 + 1.5 * health + effect * effort)
    return jnp.stack([1 - good, good])


def next_regime(period, survival):
    alive = jnp.where(period < N_PERIODS - 2, survival, 0.0)
    return jnp.stack([alive, 1 - alive])


# The parts of the flow utility and its scale: the reference library's way to give each
# patience type its own discount factor (one `discount_factor`, the utility scaled by
# `(β_type / β)^period`).


def consumption_utility(consumption):
    # NaN where consumption <= 0: the budget constraint drops those points.
    return jnp.log(consumption)


def work_disutility(labor, health, disutility):
    return disutility * (labor / 2) ** 2 * (1.2 - 0.2 * health)


def effort_cost(effort, health, cost):
    return cost * effort**2 * (1.5 - 0.5 * health)


def utility_scale(patience, period, impatient, patient):
    return jnp.where(patience == Patience.high, patient, impatient) ** period


PARTS = {
    "consumption_utility": consumption_utility,
    "work_disutility": work_disutility,
    "effort_cost": effort_cost,
    "utility_scale": utility_scale,
}


def one_function(
    wealth,
    labor,
    saving,
    effort,
    health,
    patience,
    period,
    wage,
    disutility,
    cost,
    impatient,
    patient,
):
    # Every part computed here, nothing from helpers.
    c = wealth + wage * (labor / 2) * (0.7 + 0.3 * health) - saving
    return jnp.where(patience == Patience.high, patient, impatient) ** period * (
        jnp.log(c)
        - disutility * (labor / 2) ** 2 * (1.2 - 0.2 * health)
        - cost * effort**2 * (1.5 - 0.5 * health)
    )


def _where_on_patience(
    consumption_utility, work_disutility, effort_cost, patience, period, impatient, patient
):
    flow = consumption_utility - work_disutility - effort_cost
    return jnp.where(patience == Patience.high, patient**period * flow, impatient**period * flow)


def _disutility_where_on_labor(labor, health, disutility):
    # 0 when not working, written as a select on the action.
    paid = disutility * (labor / 2) ** 2 * (1.2 - 0.2 * health)
    return jnp.where(labor == Work.none, 0.0, paid)


SPELLINGS = {
    "helpers": {
        **PARTS,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            utility_scale * (consumption_utility - work_disutility - effort_cost)
        ),
    },
    "factor-last": {
        **PARTS,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            (consumption_utility - work_disutility - effort_cost) * utility_scale
        ),
    },
    "scaled-terms": {
        **PARTS,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            utility_scale * consumption_utility
            - utility_scale * work_disutility
            - utility_scale * effort_cost
        ),
    },
    "negated": {
        **PARTS,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            -(-utility_scale * (work_disutility + effort_cost - consumption_utility)) * -1.0
        ),
    },
    "nested-helpers": {
        **PARTS,
        "costs": lambda work_disutility, effort_cost: work_disutility + effort_cost,
        "flow": lambda consumption_utility, costs: consumption_utility - costs,
        "utility": lambda utility_scale, flow: utility_scale * flow,
    },
    "division": {
        **{k: v for k, v in PARTS.items() if k != "utility_scale"},
        "discounting": lambda patience, period, impatient, patient: (
            (1.0 / jnp.where(patience == Patience.high, patient, impatient)) ** period
        ),
        "utility": lambda discounting, consumption_utility, work_disutility, effort_cost: (
            (consumption_utility - work_disutility - effort_cost) / discounting
        ),
    },
    "where-on-a-state": {
        **{k: v for k, v in PARTS.items() if k != "utility_scale"},
        "utility": _where_on_patience,
    },
    "where-on-an-action": {
        **PARTS,
        "work_disutility": _disutility_where_on_labor,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            utility_scale * (consumption_utility - work_disutility - effort_cost)
        ),
    },
    "stacked-sum": {
        **PARTS,
        "utility": lambda utility_scale, consumption_utility, work_disutility, effort_cost: (
            utility_scale
            * jnp.sum(jnp.stack([consumption_utility, -work_disutility, -effort_cost]))
        ),
    },
    "one-function": {"utility": one_function},
}


def build(functions, solver=None, *, taste_shocks=False):
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(0.5, 6.0, 10),
            "health": lcm.DiscreteGrid(Health),
            "patience": lcm.DiscreteGrid(Patience),
        },
        actions={
            "labor": lcm.DiscreteGrid(Work),
            "saving": lcm.LinSpacedGrid(0.0, 5.0, 10),
            "effort": lcm.LinSpacedGrid(0.0, 1.0, 8),
        },
        functions={"consumption": consumption, **functions},
        state_transitions={
            "wealth": lambda saving: saving,
            "health": lcm.MarkovTransition(next_health),
            "patience": lambda patience: patience,
        },
        constraints={"budget": budget},
        transition=lcm.MarkovTransition(next_regime),
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
        active=lambda period: period < N_PERIODS - 1,
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0}, active=lambda period: period >= 1)
    return lcm.Model(
        regimes={"alive": alive, "dead": dead},
        n_periods=N_PERIODS,
        solver=lcm.GridSearch() if solver is None else solver,
    )


def params(taste_shocks=False):
    alive = {
        "discount_factor": 0.95,
        "wage": 1.5,
        "disutility": 0.6,
        "cost": 0.05,
        "effect": 2.0,
        "survival": 0.95,
        # The types' discount factors relative to `discount_factor`.
        "impatient": 0.96,
        "patient": 1.03,
    }
    if taste_shocks:
        alive["taste_shock_scale"] = 0.3
    return {"alive": alive, "dead": {}}


def _alive(summary):
    return next(r for r in summary.regimes if r.name == "alive")


def _values(model, p):
    return np.asarray(model.solve(p).values["alive"])


def _assert_same(a, b):
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
    finite = np.isfinite(b)
    np.testing.assert_allclose(a[finite], b[finite], rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def reference():
    """The plain product's values (float64) and the factored plan's points of the
    reference spelling."""
    plain = build(SPELLINGS["helpers"], lcm.GridSearch(factored=False))
    summary = _alive(build(SPELLINGS["helpers"]).describe(params()))
    # The reference spelling is factored, well below the plain product.
    assert summary.work is not None
    assert summary.evaluated_points < summary.state_action_points / 2
    return _values(plain, params()), summary.evaluated_points


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_factors_alike_and_equals_the_plain_product(spelling, reference):
    plain_values, points = reference
    model = build(SPELLINGS[spelling])
    summary = _alive(model.describe(params()))
    assert summary.work is not None, summary.obstacles
    assert summary.evaluated_points == points
    _assert_same(_values(model, params()), plain_values)


@pytest.mark.parametrize("spelling", ["helpers", "where-on-a-state", "division"])
def test_scaled_spellings_under_taste_shocks_equal_the_plain_product(spelling):
    # The scale is distributed over the terms, never taken out of the log-sum-exp over
    # labour (`λ·logsumexp(v/λ)` of `s·v` is not `s·λ·logsumexp(v/λ)`).
    p = params(taste_shocks=True)
    factored = build(SPELLINGS[spelling], taste_shocks=True)
    assert _alive(factored.describe(p)).work is not None
    plain = build(SPELLINGS["helpers"], lcm.GridSearch(factored=False), taste_shocks=True)
    _assert_same(_values(factored, p), _values(plain, p))


def _both(spelling, **kwargs):
    return [
        build(SPELLINGS[spelling], solver, **kwargs)
        for solver in (lcm.GridSearch(), lcm.GridSearch(factored=False))
    ]


def test_scaled_spelling_simulates_as_the_plain_product():
    # At a subject's state the factored choice reads the same terms (a select on the
    # patience type, a scale of the period): the same panel.
    initial = {
        "regime": jnp.zeros(6, dtype=int),
        "wealth": jnp.linspace(0.7, 5.5, 6),
        "health": jnp.asarray([0, 1, 0, 1, 0, 1]),
        "patience": jnp.asarray([0, 0, 1, 1, 0, 1]),
    }
    p = params(taste_shocks=True)
    a, b = (
        m.simulate(p, initial, key=jax.random.key(3)).to_dataframe()
        for m in _both("where-on-a-state", taste_shocks=True)
    )
    assert len(a) == len(b) and len(a) > 0
    for column in ("saving", "effort", "wealth", "value"):
        np.testing.assert_allclose(
            a[column].to_numpy(float), b[column].to_numpy(float), rtol=1e-12, equal_nan=True
        )
    np.testing.assert_array_equal(
        a["labor"].astype(object).fillna("-").to_numpy(),
        b["labor"].astype(object).fillna("-").to_numpy(),
    )


def test_scaled_spelling_differentiates_as_the_plain_product():
    # Through the scaled terms (the work disutility) and the continuation. (Not in the
    # scale itself: `s * log(c)` at an infeasible `c <= 0` is NaN, and its derivative in
    # `s` is NaN in the plain product as well.)
    p = params(taste_shocks=True)

    def total(model, x):
        q = {"alive": {**p["alive"], "disutility": x[0], "effect": x[1]}, "dead": {}}
        values = model.solve(q, validate="off").values["alive"]
        return jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))

    x = jnp.asarray([0.6, 2.0])
    factored, plain = (
        jax.grad(lambda x, m=m: total(m, x))(x)
        for m in _both("where-on-a-state", taste_shocks=True)
    )
    assert np.all(np.abs(np.asarray(plain)) > 0)
    np.testing.assert_allclose(factored, plain, rtol=1e-10)


def test_describe_says_what_joins_the_axes_of_the_plain_product():
    # API.md's retirement model: next period's wealth depends on every axis.
    model = retirement.build(3, n_wealth=8, n_consumption=10, solver=lcm.GridSearch())
    summary = model.describe(dict(retirement.PARAMS))
    working = next(r for r in summary.regimes if r.name == "working")
    assert working.work is None
    (reason,) = working.obstacles
    assert "`next_wealth`" in reason and "(wealth, consumption) and (labor)" in reason
    assert "what kept axes from being eliminated early" in str(summary)
    # A factored regime has nothing to say; the switch says it is the switch.
    assert _alive(build(SPELLINGS["helpers"]).describe(params())).obstacles == ()
    plain = build(SPELLINGS["helpers"], lcm.GridSearch(factored=False))
    assert "factored=False" in _alive(plain.describe(params())).obstacles[0]


def _plain_product_warnings(model, p) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.solve(p)
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, lcm.LcmWarning) and "plain state x action" in str(w.message)
    ]


def test_a_large_plain_product_with_structure_it_could_not_use_warns_once(monkeypatch):
    monkeypatch.setattr(_grid_search, "PLAIN_PRODUCT_WARNING_PAIRS", 100)
    model = retirement.build(3, n_wealth=8, n_consumption=10, solver=lcm.GridSearch())
    found = _plain_product_warnings(model, dict(retirement.PARAMS))
    # Once per regime (working: 160 pairs, retired: 80), whatever the number of periods.
    assert len(found) == 1
    assert "'working'" in found[0] and "160 pairs" in found[0] and "`next_wealth`" in found[0]
    # Not where the regime is factored, nor where the plain product was asked for.
    assert _plain_product_warnings(build(SPELLINGS["helpers"]), params()) == []
    plain = build(SPELLINGS["helpers"], lcm.GridSearch(factored=False))
    assert _plain_product_warnings(plain, params()) == []
