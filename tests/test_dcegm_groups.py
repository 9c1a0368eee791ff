"""DC-EGM and grid-search regimes of equal structure traced once (`_solve/_groups.py`):
the same values, refined grids, gradients and simulations as each regime traced on its
own.

The models: `K` copies of a working regime (wealth, a discrete labor choice, log utility)
that differ in their parameter values (wage, disutility of work) and in where they move
(each has its own weights over the working regimes, a parameter: one moves to the
next copy, another to itself or to the first), and a terminal regime. The reference is
the same model with the grouping switched off (every regime its own group), the path
that the rest of the DC-EGM tests check against closed forms.
"""

from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._solve import _groups  # noqa: E402
from lcm_eqx._solve._dcegm import _period  # noqa: E402

K = 3


class Labor(IntEnum):
    rest = 0
    work = 1


def utility(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * labor


def next_wealth(wealth, consumption, labor, wage, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + wage * labor


def moves(survival, weights):
    return jnp.concatenate([survival * weights, jnp.array([1.0 - survival])])


def borrowing(consumption, wealth):
    return consumption <= wealth


def build(taste_shocks=False, wealth_batch_size=0, n_periods=3, retired=False, solver=None):
    """With `retired`, a regime of another structure (no labor choice) between the
    first and the second working regime, solved by the same solver (`solver`, default
    a `DCEGM`)."""
    names = [f"work_{i}" for i in range(K)]
    order = [names[0], "retired", *names[1:]] if retired else names
    ids = IntEnum("RegimeId", {name: i for i, name in enumerate([*order, "dead"])})
    savings = lcm.IrregSpacedGrid(points=[60.0 * (i / 29) ** 2 for i in range(30)])
    if solver is None:
        solver = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
    regimes = {
        name: lcm.Regime(
            states={"wealth": lcm.LinSpacedGrid(1.0, 60.0, 20, batch_size=wealth_batch_size)},
            actions={
                "labor": lcm.DiscreteGrid(Labor),
                "consumption": lcm.LinSpacedGrid(0.5, 60.0, 20),
            },
            # Separate function objects of the same code, as a loop that builds the
            # regimes makes them.
            functions={
                "utility": lambda consumption, labor, disutility_of_work: utility(
                    consumption, labor, disutility_of_work
                )
            },
            state_transitions={"wealth": next_wealth},
            transition=lcm.MarkovTransition(lambda survival, weights: moves(survival, weights)),
            constraints={"borrowing": borrowing},
            taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
            solver=solver,
        )
        for name in names
    }
    if retired:
        regimes["retired"] = lcm.Regime(
            states={"wealth": lcm.LinSpacedGrid(1.0, 60.0, 20)},
            actions={"consumption": lcm.LinSpacedGrid(0.5, 60.0, 20)},
            functions={"utility": lambda consumption: jnp.log(consumption)},
            state_transitions={
                "wealth": lambda wealth, consumption, interest_rate, pension: (
                    (1 + interest_rate) * (wealth - consumption) + pension
                )
            },
            transition=lcm.MarkovTransition(
                lambda survival: jnp.array([0.0, survival, 0.0, 0.0, 1.0 - survival])
            ),
            constraints={"borrowing": borrowing},
            solver=solver,
        )
    regimes["dead"] = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model({name: regimes[name] for name in [*order, "dead"]}, n_periods, regime_ids=ids)


def params_for(taste_shocks=False, retired=False):
    weights = [[0.0, 1.0, 0.0], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]  # different targets
    if retired:  # weights over work_0, retired, work_1, work_2
        weights = [[0.0, 0.5, 0.5, 0.0], [0.2, 0.3, 0.0, 0.5], [0.5, 0.0, 0.0, 0.5]]
    params = {
        "discount_factor": 0.95,
        "interest_rate": 0.03,
        "survival": 0.9,
        **{
            f"work_{i}": {
                "wage": 4.0 + i,
                "disutility_of_work": 0.3 + 0.2 * i,
                "weights": jnp.asarray(weights[i]),
            }
            for i in range(K)
        },
    }
    if taste_shocks:
        params["taste_shock_scale"] = 0.2
    if retired:
        params["pension"] = 2.0
    return params


def ungrouped(monkeypatch):
    """Every regime its own group: the path without the grouping."""

    def alone(regimes):
        return [[i] for i in range(len(regimes))]

    monkeypatch.setattr(_groups, "structure_groups", alone)
    monkeypatch.setattr(_period, "structure_groups", alone)


def traced_passes(monkeypatch) -> list[int]:
    """The number of regimes in each pass over rows traced (`_passes.solve_together`)."""
    from lcm_eqx._solve._dcegm import _passes

    passes: list[int] = []
    together = _passes.solve_together

    def spy(solver, problems, *args, **kwargs):
        passes.append(len(problems))
        return together(solver, problems, *args, **kwargs)

    monkeypatch.setattr(_passes, "solve_together", spy)
    return passes


def assert_same(a, b):
    for name in a.values:
        np.testing.assert_allclose(a.values[name], b.values[name], rtol=0, atol=1e-12)
    for name in a.policies:
        np.testing.assert_array_equal(a.policies[name].count, b.policies[name].count)
        for field in ("nodes", "continuation0"):
            np.testing.assert_allclose(
                getattr(a.policies[name], field),
                getattr(b.policies[name], field),
                rtol=0,
                atol=1e-12,
            )
    for name in a.violations:
        np.testing.assert_array_equal(a.violations[name], b.violations[name])


@pytest.mark.parametrize("taste_shocks", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_equal_regimes_are_traced_once_with_the_values_of_each_alone(monkeypatch, taste_shocks):
    model = build(taste_shocks)
    plan = model.plan
    assert _groups.structure_groups([plan.regimes[f"work_{i}"] for i in range(K)]) == [[0, 1, 2]]
    params = params_for(taste_shocks)
    passes = traced_passes(monkeypatch)
    grouped = model.solve(params)
    # One member's pass for the group (the loop's period and the last period apart).
    assert passes and set(passes) == {1} and len(passes) <= 4
    values = [np.asarray(grouped.values[f"work_{i}"]) for i in range(K)]
    assert not np.array_equal(values[0], values[1])  # the parameters differ
    passes.clear()
    ungrouped(monkeypatch)
    alone = build(taste_shocks).solve(params)
    assert set(passes) == {K}  # the regimes as rows of one pass, each traced
    assert_same(grouped, alone)


@pytest.mark.slow
def test_a_regime_of_another_structure_between_the_members(monkeypatch):
    """The group's rows are not consecutive in the pass (a retired regime between its
    members): put back in the regimes' order, and read from the carried rows."""
    params = params_for(retired=True)
    passes = traced_passes(monkeypatch)
    grouped = build(retired=True).solve(params)
    assert sorted(set(passes)) == [1]  # the retired regime alone, the group's member
    ungrouped(monkeypatch)
    assert_same(grouped, build(retired=True).solve(params))


@pytest.mark.slow  # compiles the derivative of the solve twice (grouped and not)
def test_gradient_through_the_grouped_solve(monkeypatch):
    params = params_for(True)

    def objective(model, p):
        solution = model.solve(p)
        return sum(jnp.sum(solution.values[f"work_{i}"][0]) for i in range(K))

    keys = [("work_1", "wage"), ("work_2", "disutility_of_work"), ("survival",)]

    def grads(model):
        gradient = jax.grad(lambda p: objective(model, p))(params)
        return [gradient[k[0]][k[1]] if len(k) == 2 else gradient[k[0]] for k in keys]

    grouped = grads(build(True, n_periods=2))
    ungrouped(monkeypatch)
    alone = grads(build(True, n_periods=2))
    for g, a in zip(grouped, alone, strict=True):
        assert np.isfinite(g) and abs(g) > 0
        np.testing.assert_allclose(g, a, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_vmap_over_parameters_and_a_splayed_state(monkeypatch):
    """`jax.vmap` of the grouped solve over two parameter sets equals each solve; a
    splayed wealth grid (the values read in the period) gives the same values."""
    model = build()
    base = params_for()
    other = {**base, "work_0": {**base["work_0"], "wage": 6.5}}
    stacked = jax.tree.map(lambda a, b: jnp.stack([jnp.asarray(a), jnp.asarray(b)]), base, other)
    batched = jax.vmap(model.solve)(stacked)
    for i, p in enumerate((base, other)):
        one = model.solve(p)
        for name in one.values:
            np.testing.assert_allclose(batched.values[name][i], one.values[name], atol=1e-12)
    splayed = build(wealth_batch_size=8).solve(base)
    plain = model.solve(base)
    for name in plain.values:
        np.testing.assert_allclose(splayed.values[name], plain.values[name], rtol=0, atol=1e-12)


@pytest.mark.slow
def test_simulation_of_a_grouped_solution_equals_the_ungrouped_one(monkeypatch):
    params = params_for(True)
    initial = {
        "regime": jnp.asarray([0, 1, 2, 1]),
        "wealth": jnp.asarray([2.0, 10.0, 30.0, 5.0]),
    }
    key = jax.random.key(0)
    grouped = build(True).simulate(params, initial, key=key).to_dataframe()
    ungrouped(monkeypatch)
    alone = build(True).simulate(params, initial, key=key).to_dataframe()
    assert grouped.equals(alone)


def test_structure_key_compares_code_closures_and_grids():
    def make(value, grid_stop=60.0, body=None):
        offset = value

        def fn(consumption):
            return jnp.log(consumption) + offset

        return lcm.Regime(
            states={"wealth": lcm.LinSpacedGrid(1.0, grid_stop, 10)},
            actions={"consumption": lcm.LinSpacedGrid(0.5, 60.0, 20)},
            functions={"utility": body or fn},
            state_transitions={"wealth": lambda wealth, consumption: wealth - consumption},
            transition=lambda: 0,
            constraints={"borrowing": borrowing},
        )

    def keys(*regimes):
        ids = IntEnum("RegimeId", {f"r{i}": i for i in range(len(regimes))})
        model = lcm.Model({f"r{i}": r for i, r in enumerate(regimes)}, 2, regime_ids=ids)
        return _groups.structure_groups(list(model.plan.regimes.values()))

    assert keys(make(1.0), make(1.0)) == [[0, 1]]  # same code, equal closure
    assert keys(make(1.0), make(2.0)) == [[0], [1]]  # a constant in the closure differs
    assert keys(make(1.0), make(1.0, grid_stop=50.0)) == [[0], [1]]  # the grids differ
    assert keys(make(1.0), make(1.0, body=lambda consumption: jnp.log(consumption))) == [
        [0],
        [1],
    ]  # other code


def test_parameters_that_do_not_stack_keep_regimes_apart():
    a = {"": {"x": jnp.ones(2)}, "utility": {"y": 1.0}}
    b = {"": {"x": jnp.ones(3)}, "utility": {"y": 1.0}}
    assert _groups.stacked_params([a, b]) is None
    shared = jnp.ones(2)
    c = {"": {"x": shared}, "utility": {"y": 2.0}}
    d = {"": {"x": shared}, "utility": {"y": 3.0}}
    stacked, axes = _groups.stacked_params([c, d])
    assert axes == {"": {"x": None}, "utility": {"y": 0}}
    np.testing.assert_array_equal(stacked["utility"]["y"], [2.0, 3.0])


def test_infeasible_states_of_regimes_of_one_shape_are_counted_together():
    """The value checks of regimes of one shape are one reduction; the counts of -inf
    states per period and the first of them (computed apart, only for the warning)
    are each regime's own."""
    from lcm_eqx._diagnostics import first_infeasible
    from lcm_eqx._solve._backward import _value_checks

    a = np.zeros((3, 4, 5))
    a[1, 2, 3] = a[1, 3, 0] = a[2, 0, 1] = -np.inf
    b = np.zeros((3, 4, 5))
    b[0, 1, 1] = -np.inf
    b[2, 0, 0] = np.nan
    values = {"a": jnp.asarray(a), "b": jnp.asarray(b), "dead": jnp.zeros(3)}
    violations = {name: jnp.zeros((3, 0)) for name in values}
    checks = {name: () for name in values}
    axes = {"a": (0, 1), "b": (0, 1), "dead": ()}
    _, names, _ = _value_checks(values, violations, checks, axes.__getitem__)
    assert names["a"] == ("value:nan",)
    extended, counts = jax.jit(
        lambda v: _value_checks(v, violations, checks, axes.__getitem__)[::2]
    )(values)
    np.testing.assert_array_equal(counts["a"], [0, 2, 1])
    np.testing.assert_array_equal(counts["b"], [1, 0, 0])
    np.testing.assert_array_equal(counts["dead"], [0, 0, 0])
    np.testing.assert_array_equal(extended["a"][:, 0], [0, 0, 0])
    np.testing.assert_array_equal(extended["b"][:, 0], [0, 0, 1])
    np.testing.assert_array_equal(first_infeasible(values["a"]), [0, 13, 1])
    np.testing.assert_array_equal(first_infeasible(values["b"]), [6, 0, 0])


# ----------------------------------------------------------------------------- grid search
def traced_grid_periods(monkeypatch) -> list[str]:
    """The regimes whose period problem grid search traced (`solve_period`), in order."""
    traced: list[str] = []
    solve_period = lcm.GridSearch.solve_period

    def spy(self, problem):
        traced.append(problem.regime.name)
        return solve_period(self, problem)

    monkeypatch.setattr(lcm.GridSearch, "solve_period", spy)
    return traced


@pytest.mark.parametrize(
    ("taste_shocks", "retired", "wealth_batch_size"),
    [(False, False, 0), (True, True, 0), (False, False, 8)],
    ids=["plain", "taste-shocks-retired-between", "splayed"],
)
def test_grid_search_traces_a_group_once_with_the_values_of_each_alone(
    monkeypatch, taste_shocks, retired, wealth_batch_size
):
    """One member's period problem mapped over the members' parameters (one after the
    other, `lax.map`): values, check violations and simulated choices as each regime
    solved on its own (the models' regimes differ in wage, disutility and targets)."""
    params = params_for(taste_shocks, retired)

    def model():
        return build(
            taste_shocks,
            wealth_batch_size,
            retired=retired,
            solver=lcm.GridSearch(),
        )

    traced = traced_grid_periods(monkeypatch)
    grouped = model().solve(params)
    assert "work_0" in traced and "work_1" not in traced and "work_2" not in traced
    values = [np.asarray(grouped.values[f"work_{i}"]) for i in range(K)]
    assert not np.array_equal(values[0], values[1])  # the parameters differ
    initial = {"regime": jnp.asarray([0, 1, 2, 1]), "wealth": jnp.asarray([2.0, 10.0, 30.0, 5.0])}
    key = jax.random.key(0)
    simulated = model().simulate(params, initial, grouped, key=key).to_dataframe()
    traced.clear()
    ungrouped(monkeypatch)
    alone = model().solve(params)
    assert {f"work_{i}" for i in range(K)} <= set(traced)
    for name in alone.values:
        np.testing.assert_allclose(grouped.values[name], alone.values[name], rtol=0, atol=1e-12)
    for name in alone.violations:
        np.testing.assert_array_equal(grouped.violations[name], alone.violations[name])
    again = model().simulate(params, initial, alone, key=key).to_dataframe()
    assert simulated.equals(again)


def test_grid_search_gradient_through_a_group(monkeypatch):
    params = params_for()
    keys = [("work_1", "wage"), ("work_2", "disutility_of_work"), ("survival",)]

    def grads(model):
        def objective(p):
            solution = model.solve(p)
            return sum(jnp.sum(solution.values[f"work_{i}"][0]) for i in range(K))

        gradient = jax.grad(objective)(params)
        return [gradient[k[0]][k[1]] if len(k) == 2 else gradient[k[0]] for k in keys]

    grouped = grads(build(n_periods=2, solver=lcm.GridSearch()))
    ungrouped(monkeypatch)
    alone = grads(build(n_periods=2, solver=lcm.GridSearch()))
    for g, a in zip(grouped, alone, strict=True):
        assert np.isfinite(g) and abs(g) > 0
        np.testing.assert_allclose(g, a, rtol=1e-10, atol=1e-12)
