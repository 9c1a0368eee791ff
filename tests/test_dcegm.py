"""DC-EGM against independent references.

- The API.md retirement model (IJRS 2017) against its exact solution
  (`tests/oracles/retirement_analytical.py`): values at every wealth node and period,
  simulated decisions and consumption.
- A stochastic model (Rouwenhorst income, mortality, CRRA utility) against a very fine
  grid search.
- jit, vmap, grad (against central finite differences), recompilation, mixing with
  GridSearch regimes, likelihoods.
"""

import functools
import itertools
from enum import IntEnum

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.models import retirement  # noqa: E402
from tests.oracles import retirement_analytical as oracle  # noqa: E402

WEALTH = np.linspace(1.0, 400.0, 100)
CASES = {"T5-delta1": (5, 1.0), "T3-delta0.1": (3, 0.1)}


def params_for(delta, **extra):
    return {**retirement.PARAMS, "disutility_of_work": delta, **extra}


@functools.cache
def solved(n_periods, delta):
    model = retirement.build(n_periods, solver=retirement.dcegm())
    params = params_for(delta)
    return model, params, model.solve(params)


def exact(n_periods, delta, period):
    kwargs = {"T": n_periods, "beta": 0.98, "delta": delta, "wage": 20.0}
    return (
        oracle.value_working(period, WEALTH, **kwargs),
        oracle.value_retired(period, WEALTH, **kwargs),
    )


# ---------------------------------------------------------------------------------------
# Accuracy against the analytical solution
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_values_match_the_analytical_solution_at_every_node(case):
    # Measured: max error 7e-15 (T=5, δ=1: working, with each switch of branch where
    # the two branches' values are equal; 8.6e-5 at the crossing of their tangents) and
    # 7e-15 (retired: consumption linear in wealth, where the read between points is
    # exact); 5e-15 / 5e-15 for T=3,
    # δ=0.1 (before the value between points integrated u'(c): 9.5e-5 / 4.6e-5 and
    # 1.0e-8 / 1.6e-5). Grid search on the same wealth grid: 0.022 (working) and 0.43
    # (retired, wealth >= 10).
    n_periods, delta = CASES[case]
    _, _, solution = solved(n_periods, delta)
    for period in range(n_periods):
        working, retired = exact(n_periods, delta, period)
        np.testing.assert_allclose(solution.value("working", period), working, rtol=0, atol=1e-12)
        np.testing.assert_allclose(solution.value("retired", period), retired, rtol=0, atol=1e-12)


def test_last_period_consumes_everything():
    _model, _params, solution = solved(3, 0.1)
    np.testing.assert_allclose(solution.value("retired", 2), np.log(WEALTH), rtol=1e-12)


def test_last_period_is_solved_apart_with_no_endogenous_point():
    """Nothing follows the last period: its grids hold no point (count 0, every cash on
    hand credit-constrained), the earlier periods' do, and a one-period model (no
    period loop at all) and a two-period one solve to the analytical values."""
    _model, _params, solution = solved(3, 0.1)
    for regime in ("working", "retired"):
        grid = solution.policies[regime]
        assert np.all(np.asarray(grid.count[-1]) == 0)
        assert np.all(np.isposinf(np.asarray(grid.nodes[-1])[..., 0]))
        assert np.all(np.asarray(grid.count[:-1]) > 0)
    for n_periods in (1, 2):
        model = retirement.build(n_periods, solver=retirement.dcegm())
        values = model.solve(params_for(1.0))
        for period in range(n_periods):
            working, retired = exact(n_periods, 1.0, period)
            np.testing.assert_allclose(values.value("working", period), working, atol=2e-4)
            np.testing.assert_allclose(values.value("retired", period), retired, atol=2e-4)


def test_the_last_period_is_apart_only_beside_single_point_regimes():
    """The last period is solved apart from the period loop (a second trace of the
    step) where a regime is solved by DC-EGM and every other one is a single point (no
    state, no action: death); never in a grid-search model, whose program is unchanged."""
    from lcm_eqx._solve._backward import _last_period_apart

    def apart(model):
        segment = model.plan.segments[-1]
        return _last_period_apart(model.plan, model.solvers, segment.regimes)

    assert apart(retirement.build(3, solver=retirement.dcegm(40)))
    savings = lcm.IrregSpacedGrid(points=[40.0 * (i / 39) ** 2 for i in range(40)])
    assert apart(stochastic_model(lcm.DCEGM(state="wealth", action="consumption", savings=savings)))
    assert not apart(retirement.build(3))
    assert not apart(
        retirement.build(3, solver=retirement.dcegm(40), retired_solver=lcm.GridSearch())
    )


def test_utility_is_traced_as_often_for_3_as_for_12_periods():
    """One period step for the loop, one for the last period apart: the tracing (and
    the compiled program) does not grow with the number of periods."""
    counts = []
    for n_periods in (3, 12):
        traces = []

        def utility(consumption, labor, disutility_of_work, traces=traces):
            traces.append(1)
            return retirement.utility(consumption, labor, disutility_of_work)

        model = retirement.build(n_periods, solver=retirement.dcegm(40), utility_fn=utility)
        model.solve(retirement.PARAMS)
        counts.append(len(traces))
    assert counts[0] == counts[1] > 0


def test_simulated_agents_make_the_analytical_decisions():
    n_periods, delta = CASES["T5-delta1"]
    model, params, solution = solved(n_periods, delta)
    initial = np.linspace(1.0, 100.0, 20)
    result = model.simulate(
        params,
        initial_conditions={"regime": jnp.zeros(20, dtype=int), "wealth": jnp.asarray(initial)},
        solution=solution,
        key=jax.random.key(0),
    )
    df = result.to_dataframe(use_labels=False) if _has_use_labels(result) else result.to_dataframe()
    kwargs = {"T": n_periods, "beta": 0.98, "delta": delta, "wage": 20.0}
    agree, total, consumption_errors = 0, 0, []
    for row in df.itertuples():
        wealth = np.array([row.wealth])
        if row.regime == "working":
            labor = 0 if str(row.labor) in ("0", "work") else 1
            work, retire = oracle.value_working_by_labor(row.period, wealth, **kwargs)
            total += 1
            agree += int(labor == (0 if work[0] >= retire[0] else 1))
            exact_c = oracle.consumption_working(row.period, wealth, **kwargs)[0]
        else:
            exact_c = oracle.consumption_retired(row.period, wealth, **kwargs)[0]
        consumption_errors.append(abs(row.consumption - exact_c) / exact_c)
    assert total > 40
    assert agree / total >= 0.95
    assert max(consumption_errors) < 1e-2


def _has_use_labels(result):
    import inspect

    return "use_labels" in inspect.signature(result.to_dataframe).parameters


def test_simulation_reads_the_policy_without_an_action_grid():
    # The consumption column is the continuous policy, not a point of the action grid.
    model, params, solution = solved(3, 0.1)
    result = model.simulate(
        params,
        initial_conditions={"regime": jnp.zeros(5, dtype=int), "wealth": jnp.linspace(3, 90, 5)},
        solution=solution,
        key=jax.random.key(1),
    )
    consumption = result.to_dataframe()["consumption"].to_numpy()
    grid = np.linspace(1.0, 400.0, 500)
    distance = np.min(np.abs(consumption[:, None] - grid[None, :]), axis=1)
    assert np.max(distance) > 1e-3


# ---------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------


def test_jit_vmap_and_no_retrace():
    model, params, solution = solved(3, 0.1)
    jitted = jax.jit(lambda p: model.solve(p, validate="off"))(params)
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(jitted.values[regime], solution.values[regime])
    batch = {k: jnp.asarray([v, v]) for k, v in params.items()}
    batch["disutility_of_work"] = jnp.asarray([0.1, 0.3])
    vmapped = jax.vmap(lambda p: model.solve(p, validate="off"))(batch)
    other = model.solve({**params, "disutility_of_work": 0.3})
    np.testing.assert_allclose(vmapped.values["working"][0], solution.values["working"], atol=1e-12)
    np.testing.assert_allclose(vmapped.values["working"][1], other.values["working"], atol=1e-12)
    before = model._solve._cache_size()
    model.solve({**params, "wage": 19.0})
    assert model._solve._cache_size() == before


def test_a_solve_inside_a_callers_jit_with_parameters_closed_over():
    """Inside a caller's `jax.jit` whose parameters are constants of the function (closed
    over, not traced), the solve is still nested: the solver's `compiler_options` cannot
    be passed there (JAX refuses them below the top level), and the solution equals the
    eager one to the last bit."""
    model, params, solution = solved(3, 0.1)
    assert model._solve is not model._solve_nested  # the eager solve has options
    inside = jax.jit(lambda: model.solve(params, validate="off").values)()
    for regime in ("working", "retired"):
        np.testing.assert_array_equal(inside[regime], solution.values[regime])


def test_the_top_level_solve_compiles_with_the_solvers_options(monkeypatch):
    """`DCEGM` compiles its eager solve with its `compiler_options` (XLA:CPU's loop
    emitters, no loop-invariant code motion); inside a caller's trace the nested program
    has none (a nested `jit` cannot), and `test_jit_vmap_and_no_retrace` checks that the
    two give the same solution to the last bit. An XLA that does not know an option gets
    a program without any, not an error."""
    from lcm_eqx import _facade

    model, params, solution = solved(3, 0.1)
    assert model._solve is not model._solve_nested
    grid = retirement.build(3)
    assert grid._solve is grid._solve_nested  # grid search keeps XLA's defaults
    # Solvers that ask for different options: the model compiles with those they share.
    mixed = retirement.build(3, solver=retirement.dcegm(), retired_solver=lcm.GridSearch())
    assert mixed._solve is mixed._solve_nested
    # The same options for a program of the user's own (`model.compiler_options()`).
    assert model.compiler_options() == model.solvers["working"].compiler_options() != {}
    assert grid.compiler_options() == mixed.compiler_options() == {}
    monkeypatch.setattr(_facade, "_OPTIONS_REFUSED", [])
    monkeypatch.setattr(lcm.DCEGM, "compiler_options", lambda self: {"xla_no_such_option": 1})
    refusing = retirement.build(3, solver=retirement.dcegm())
    for _ in range(2):  # the second call goes straight to the plain program
        fallback = refusing.solve(params)
        for regime in ("working", "retired"):
            np.testing.assert_array_equal(fallback.values[regime], solution.values[regime])
    assert len(_facade._OPTIONS_REFUSED) == 1
    assert "xla_no_such_option" in _facade._OPTIONS_REFUSED[0]
    assert refusing.compiler_options() == {}


def _taste_shock_model():
    return retirement.build(3, taste_shocks=True, solver=retirement.dcegm(n_savings=120))


def test_gradients_match_finite_differences():
    model = _taste_shock_model()
    base = params_for(0.5, taste_shock_scale=0.3)

    def objective(p):
        solution = model.solve(p, validate="off")
        return sum(jnp.mean(solution.values[r][:2]) for r in ("working", "retired"))

    # The model's compiler options (DC-EGM's: XLA:CPU's loop emitters) compile this
    # gradient in about 40 % less time (`benchmarks/gradient_compile.py`).
    value_and_grad = jax.jit(
        jax.value_and_grad(objective), compiler_options=model.compiler_options()
    )
    f = jax.jit(objective)
    _, gradient = value_and_grad(base)
    for name in ("discount_factor", "disutility_of_work", "wage", "taste_shock_scale"):
        h = 1e-6 * max(1.0, abs(base[name]))
        up = f({**base, name: base[name] + h})
        down = f({**base, name: base[name] - h})
        fd = (up - down) / (2 * h)
        assert abs(float(gradient[name]) - float(fd)) <= 1e-4 * abs(float(fd)) + 1e-9, name


@pytest.mark.slow
def test_log_likelihood_gradient_with_dcegm_regimes():
    model = _taste_shock_model()
    params = params_for(0.5, taste_shock_scale=0.3)
    solution = model.solve(params)
    data = model.simulate(
        params,
        initial_conditions={"regime": jnp.zeros(30, dtype=int), "wealth": jnp.linspace(5, 150, 30)},
        solution=solution,
        key=jax.random.key(3),
    ).to_dataframe()
    choice_data = lcm.prepare_data(model, data.drop(columns=["consumption"]))

    def loglike(p):
        return jnp.sum(lcm.log_likelihood(model, p, choice_data, validate="off"))

    value, gradient = jax.value_and_grad(loglike)(params)
    assert np.isfinite(value)
    h = 1e-6
    for name in ("disutility_of_work", "taste_shock_scale"):
        fd = (
            loglike({**params, name: params[name] + h})
            - loglike({**params, name: params[name] - h})
        ) / (2 * h)
        assert abs(float(gradient[name]) - float(fd)) <= 1e-4 * abs(float(fd)) + 1e-7, name


# ---------------------------------------------------------------------------------------
# Mixing solvers, defaults
# ---------------------------------------------------------------------------------------


def test_dcegm_and_grid_search_regimes_in_one_model():
    model = retirement.build(3, solver=retirement.dcegm(), retired_solver=lcm.GridSearch())
    assert isinstance(model.solvers["working"], lcm.DCEGM)
    assert isinstance(model.solvers["retired"], lcm.GridSearch)
    solution = model.solve(params_for(0.1))
    working, _ = exact(3, 0.1, 0)
    # The retirees' grid-search values bound the accuracy of the workers that read them.
    high = WEALTH >= 50
    np.testing.assert_allclose(solution.value("working", 0)[high], working[high], atol=0.05)


def _spy_with_values(monkeypatch) -> list[bool]:
    """Record `with_values` of every batched DC-EGM pass (whether the period step reads
    the values on the state grid itself)."""
    from lcm_eqx._solve import _dcegm

    calls: list[bool] = []
    batched = _dcegm.DCEGM.solve_batched

    def spy(self, problems, with_values=True):
        calls.append(with_values)
        return batched(self, problems, with_values=with_values)

    monkeypatch.setattr(_dcegm.DCEGM, "solve_batched", spy)
    return calls


def test_values_are_read_after_the_period_loop_unless_grid_search_reads_them(monkeypatch):
    """A DC-EGM regime's value array on its state grid is output only where every regime
    that can move to it reads its refined grids: it is then read after the period loop,
    for all periods at once. A grid-search regime that moves to it reads the value array
    next period, so there it is read in the period."""
    calls = _spy_with_values(monkeypatch)
    params = params_for(0.1)
    egm = retirement.build(3, solver=retirement.dcegm(60)).solve(params)
    assert calls and not any(calls)
    calls.clear()
    mixed = retirement.build(3, solver=lcm.GridSearch(), retired_solver=retirement.dcegm(60))
    solution = mixed.solve(params)
    assert calls and all(calls)
    # The retirees solve the same problem either way (they only move among themselves).
    np.testing.assert_allclose(
        solution.values["retired"], egm.values["retired"], rtol=0, atol=1e-12
    )
    assert np.isfinite(np.asarray(solution.values["working"])).all()


def test_values_read_after_the_loop_in_chunks_of_periods_or_in_the_splayed_period(
    monkeypatch,
):
    """Where the refined grids of all periods would take more than `READ_VALUES_BYTES`,
    the values are read in chunks of periods; a regime with a splayed state axis reads
    them in its period step (which bounds its memory). The same values either way."""
    from lcm_eqx._solve._dcegm import _period

    params = params_for(1.0)
    reference = retirement.build(4, solver=retirement.dcegm(60)).solve(params)
    monkeypatch.setattr(_period, "READ_VALUES_BYTES", 1)  # one period per chunk
    chunked = retirement.build(4, solver=retirement.dcegm(60)).solve(params)
    monkeypatch.undo()
    calls = _spy_with_values(monkeypatch)
    splayed = retirement.build(4, solver=retirement.dcegm(60), wealth_batch_size=25)
    splayed_solution = splayed.solve(params)
    assert calls and all(calls)
    for name in ("working", "retired"):
        np.testing.assert_array_equal(chunked.values[name], reference.values[name])
        np.testing.assert_allclose(
            splayed_solution.values[name], reference.values[name], rtol=0, atol=1e-12
        )


def test_a_splayed_savings_grid_gives_the_values_of_the_unsplayed_read(monkeypatch):
    """The reads of next period map over each choice's savings points, in chunks of them
    where the savings grid is splayed (`batch_size`): the same values both ways, on a
    model whose choices share one group (income states times labour: a map over the
    group's choices around the map over the points) and on one whose groups have one
    choice each (read without a map over the choices, its codes constants)."""
    from lcm_eqx._solve import _axes
    from tests.models import life_cycle

    chunked = []
    chunked_map = _axes._chunked_map
    monkeypatch.setattr(_axes, "_chunked_map", lambda *a: chunked.append(a[2]) or chunked_map(*a))

    def splayed(solver: lcm.DCEGM) -> lcm.DCEGM:
        points = np.asarray(solver.savings.points)
        return lcm.DCEGM(
            state=solver.state,
            action=solver.action,
            savings=lcm.IrregSpacedGrid(points=points.tolist(), batch_size=7),
        )

    life = life_cycle.build(n_periods=3, n_wealth=20, n_savings=30)
    flat = life.solve(life_cycle.PARAMS)
    assert not chunked
    regimes = dict(life.regimes)
    for name in ("working", "retired"):
        regimes[name] = regimes[name].replace(solver=splayed(regimes[name].solver))
    chunks = lcm.Model(regimes=regimes, n_periods=3, regime_ids=life_cycle.RegimeId)
    by_chunks = chunks.solve(life_cycle.PARAMS)
    assert chunked and set(chunked) == {7}
    for name in ("working", "retired"):
        np.testing.assert_allclose(by_chunks.values[name], flat.values[name], rtol=0, atol=1e-12)

    params = params_for(1.0)
    one = retirement.build(3, solver=retirement.dcegm(30)).solve(params)
    chunked.clear()
    both = retirement.build(3, solver=retirement.dcegm(30, batch_size=7)).solve(params)
    assert set(chunked) == {7}
    for name in ("working", "retired"):
        np.testing.assert_allclose(both.values[name], one.values[name], rtol=0, atol=1e-12)


def test_a_regime_active_from_a_later_period_changes_nothing_else():
    """The period loop derives the status of next period's grids from the period and the
    segments (active regimes) rather than carrying it: with the retired regime active
    only from period 1, period 0 reads its period-1 grids as before, its own period 0 is
    inactive (-inf), and every other value is that of the model where it is always
    active."""
    from lcm_eqx._solve._dcegm._envelope import INACTIVE, ORDINARY

    params = params_for(1.0)
    full = retirement.build(4, solver=retirement.dcegm(80))
    later = lcm.Model(
        regimes={
            "working": full.regimes["working"],
            "retired": full.regimes["retired"].replace(active=range(1, 4)),
        },
        n_periods=4,
        regime_ids=retirement.RegimeId,
        solver=retirement.dcegm(80),
    )
    expected, solution = full.solve(params), later.solve(params)
    np.testing.assert_array_equal(solution.values["working"], expected.values["working"])
    np.testing.assert_array_equal(solution.values["retired"][1:], expected.values["retired"][1:])
    assert np.all(np.asarray(solution.values["retired"][0]) == -np.inf)
    np.testing.assert_array_equal(
        solution.policies["retired"].status, [INACTIVE, ORDINARY, ORDINARY, ORDINARY]
    )


def test_model_default_leaves_terminal_regimes_to_grid_search():
    alive, dead = _mortality_regimes()
    model = lcm.Model(
        regimes={"alive": alive, "dead": dead},
        n_periods=3,
        solver=lcm.DCEGM(state="wealth", action="consumption", savings=retirement.savings_grid(50)),
    )
    assert isinstance(model.solvers["alive"], lcm.DCEGM)
    assert isinstance(model.solvers["dead"], lcm.GridSearch)
    # The terminal regime's grid search does not veto DC-EGM's compiler options.
    assert model._solve is not model._solve_nested


# ---------------------------------------------------------------------------------------
# A stochastic model: Rouwenhorst income, mortality, CRRA utility
# ---------------------------------------------------------------------------------------


class Alive(IntEnum):
    alive = 0
    dead = 1


def crra(consumption, risk_aversion):
    return consumption ** (1 - risk_aversion) / (1 - risk_aversion)


def next_wealth_with_income(wealth, consumption, income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + jnp.exp(income)


def survival(period, survival_probability):
    return jnp.array([survival_probability[period], 1 - survival_probability[period]])


def _mortality_regimes(n_wealth=60, n_consumption=200, solver=None):
    wealth = lcm.LinSpacedGrid(0.5, 30.0, n_wealth)
    alive = lcm.Regime(
        states={"wealth": wealth, "income": lcm.RouwenhorstGrid(n_points=5)},
        actions={"consumption": lcm.LinSpacedGrid(0.05, 30.0, n_consumption)},
        functions={"utility": crra},
        state_transitions={"wealth": next_wealth_with_income},
        transition=lcm.MarkovTransition(survival),
        constraints={"borrowing": retirement.borrowing},
        solver=solver,
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return alive, dead


STOCHASTIC_PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "risk_aversion": 2.0,
    "survival_probability": jnp.array([0.99, 0.97, 0.9, 0.8]),
    "alive": {"next_income": {"rho": 0.9, "sigma": 0.2}},
}


def stochastic_model(solver=None, n_wealth=60, n_consumption=200):
    alive, dead = _mortality_regimes(n_wealth, n_consumption, solver)
    return lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=4, regime_ids=Alive)


@functools.cache
def stochastic_dcegm():
    savings = lcm.IrregSpacedGrid(points=[40.0 * (i / 149) ** 2 for i in range(150)])
    model = stochastic_model(lcm.DCEGM(state="wealth", action="consumption", savings=savings))
    return model, model.solve(STOCHASTIC_PARAMS)


def test_stochastic_model_agrees_with_a_fine_grid_search():
    _, dcegm_solution = stochastic_dcegm()
    # Ten times the wealth points (the DC-EGM wealth nodes are every tenth of them) and
    # a consumption step of 0.0075.
    fine = stochastic_model(n_wealth=591, n_consumption=4000)
    v_dcegm = np.asarray(dcegm_solution.values["alive"])
    v_fine = np.asarray(fine.solve(STOCHASTIC_PARAMS).values["alive"])[:, ::10]
    wealth = np.linspace(0.5, 30.0, 60)
    difference = np.abs(v_dcegm - v_fine)
    # Measured: 0.0051 on wealth >= 2 and 0.0017 on wealth >= 5 (0.12 and 0.015 against
    # a grid search on DC-EGM's own 60 wealth points): the gap is grid search's error,
    # which shrinks as its grid is refined. Below wealth 2 the curvature of the CRRA
    # value makes the grid search's interpolation error large (0.26 at wealth 0.5).
    assert np.max(difference[:, wealth >= 2.0]) < 1e-2
    assert np.max(difference[:, wealth >= 5.0]) < 3e-3
    assert np.all(np.isfinite(v_dcegm))


def test_euler_errors_are_far_below_grid_search():
    model, solution = stochastic_dcegm()
    errors = np.asarray(lcm.euler_errors(model, STOCHASTIC_PARAMS, solution, regime="alive"))
    assert errors.shape == (4, 5, 60)
    assert np.all(np.isnan(errors[-1]))
    grid = stochastic_model()
    grid_errors = lcm.euler_errors(
        grid, STOCHASTIC_PARAMS, regime="alive", state="wealth", action="consumption"
    )
    # Measured: mean -9.5 (DC-EGM, 150 savings points) vs -1.8 (200 consumption points).
    assert np.nanmean(errors) < np.nanmean(np.asarray(grid_errors)) - 2.0
    assert np.sum(np.isfinite(errors)) > 200


def test_euler_errors_need_a_consumption_saving_regime():
    model, solution = stochastic_dcegm()
    with pytest.raises(lcm.LcmError, match="terminal"):
        lcm.euler_errors(
            model, STOCHASTIC_PARAMS, solution, regime="dead", state="wealth", action="consumption"
        )


@pytest.mark.slow
def test_sharded_permanent_type_needs_no_collective():
    """4 host devices: a sharded skill that never transitions gives the unsharded values,
    and the compiled solve moves nothing between devices but (validated) a few flags;
    simulating against it gives the unsharded panel without gathering the solution."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("dcegm_devices.py")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["difference"] == 0.0
    assert result["spec"][-1] == "skill"
    assert result["unvalidated"] == []
    assert all(kind == "all-reduce" and size <= 64 for kind, size in result["validated"])
    # Simulation reads each device's own types: the panel of the unsharded simulation
    # (one pass and chunked), and only per-subject results (12 subjects) cross devices.
    assert result["simulate_equal"] == [True, True]
    assert result["simulate_collectives"]
    assert all(kind == "all-reduce" and size <= 12 for kind, size in result["simulate_collectives"])


def test_with_batch_size_keeps_the_regime_solvers():
    model, params, solution = solved(3, 0.1)
    splayed = model.with_batch_size("wealth", 30)
    assert isinstance(splayed.solvers["working"], lcm.DCEGM)
    np.testing.assert_allclose(
        splayed.solve(params).values["working"], solution.values["working"], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("case", ["plain", "taste_shocks", "state_grids_differ"])
def test_regimes_solved_together_equal_each_solved_alone(monkeypatch, case):
    """The working and retired regimes share one envelope pass (their choices are rows
    of one array, each with its own utility); solving each regime on its own, as a
    splayed or sharded regime is, gives the same refined grids and values (also where
    their state grids differ in size, and their values are read one regime at a time)."""
    from lcm_eqx._solve import _dcegm

    taste_shocks = case == "taste_shocks"
    params = {**params_for(1.0), "taste_shock_scale": 0.5} if taste_shocks else params_for(1.0)
    options = {
        "solver": retirement.dcegm(60),
        "taste_shocks": taste_shocks,
        "retired_n_wealth": 70 if case == "state_grids_differ" else None,
    }
    model = retirement.build(4, **options)
    passes = []
    batched = _dcegm.DCEGM.solve_batched

    def spy(self, problems, **kwargs):
        passes.append(len(problems))
        return batched(self, problems, **kwargs)

    monkeypatch.setattr(_dcegm.DCEGM, "solve_batched", spy)
    together = model.solve(params)
    assert passes and set(passes) == {2}  # both regimes in one pass
    monkeypatch.setattr(_dcegm.DCEGM, "batchable", lambda self, problem: False)
    alone = retirement.build(4, **options).solve(params)
    for name in ("working", "retired"):
        np.testing.assert_allclose(together.values[name], alone.values[name], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(together.policies[name].count, alone.policies[name].count)
        np.testing.assert_allclose(
            together.policies[name].nodes, alone.policies[name].nodes, rtol=0, atol=1e-12
        )


def test_equal_solvers_share_a_pass_and_different_ones_do_not(monkeypatch):
    from lcm_eqx._solve import _dcegm

    passes = []
    batched = _dcegm.DCEGM.solve_batched

    def spy(self, problems, **kwargs):
        passes.append(sorted(p.regime.name for p in problems))
        return batched(self, problems, **kwargs)

    monkeypatch.setattr(_dcegm.DCEGM, "solve_batched", spy)
    params = params_for(1.0)
    equal = retirement.build(3, solver=retirement.dcegm(40), retired_solver=retirement.dcegm(40))
    equal.solve(params)
    assert passes and all(p == ["retired", "working"] for p in passes)
    passes.clear()
    other = retirement.build(3, solver=retirement.dcegm(40), retired_solver=retirement.dcegm(50))
    other.solve(params)
    assert passes and all(len(p) == 1 for p in passes)
    assert {p[0] for p in passes} == {"retired", "working"}


def test_lower_layers_do_not_import_model():
    """Only `lcm_eqx/__init__.py` imports `Model` (from `_facade.py`) at run time; the layers below
    it (solve, simulate, estimation, persistence, plotting, describe) at most for types. The
    equilibrium layer (`_equilibrium/`) sits above the facade: it composes a `Model`."""
    import ast
    from pathlib import Path

    package = Path(lcm.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if (
            path.name == "__init__.py"
            or relative == "_facade.py"
            or relative.startswith("_equilibrium/")
        ):
            continue
        tree = ast.parse(path.read_text())
        typing_only = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                typing_only |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and id(node) not in typing_only
                and (node.module or "").endswith("_facade")
            ):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []


def test_user_inverse_marginal_utility_matches_newton():
    savings = lcm.IrregSpacedGrid(points=[40.0 * (i / 149) ** 2 for i in range(150)])
    fast = stochastic_model(
        lcm.DCEGM(
            state="wealth",
            action="consumption",
            savings=savings,
            inverse_marginal_utility=lambda marginal_utility, risk_aversion: (
                marginal_utility ** (-1.0 / risk_aversion)
            ),
        )
    )
    _, newton = stochastic_dcegm()
    np.testing.assert_allclose(
        fast.solve(STOCHASTIC_PARAMS).values["alive"], newton.values["alive"], atol=1e-10
    )
    wrong = stochastic_model(
        lcm.DCEGM(
            state="wealth",
            action="consumption",
            savings=savings,
            inverse_marginal_utility=lambda marginal_utility, curvature: marginal_utility,
        )
    )
    with pytest.raises(lcm.InvalidParamsError, match="'curvature'"):
        wrong.solve(STOCHASTIC_PARAMS)


def test_parameter_array_read_out_of_bounds_is_an_error():
    """A survival array shorter than the horizon is not clamped silently (DC-EGM reads it
    in its own expectation step)."""
    savings = lcm.IrregSpacedGrid(points=[40.0 * (i / 49) ** 2 for i in range(50)])
    model = stochastic_model(lcm.DCEGM(state="wealth", action="consumption", savings=savings))
    short = {**STOCHASTIC_PARAMS, "survival_probability": jnp.array([0.99, 0.97])}
    with pytest.raises(lcm.InvalidParamsError, match=r"'next_regime', period 2.*survival"):
        model.solve(short)
    assert np.all(np.isfinite(model.solve(short, validate="off").values["alive"][3]))


def test_borrowing_limit_must_match_the_savings_grid():
    """A savings grid that starts above the constraint's limit would silently solve a
    model with less borrowing than written: an error, as is one that starts below it."""
    for start in (1.0, -1.0):
        points = [start + (40.0 - start) * (i / 29) ** 2 for i in range(30)]
        model = stochastic_model(
            lcm.DCEGM(
                state="wealth", action="consumption", savings=lcm.IrregSpacedGrid(points=points)
            )
        )
        with pytest.raises(lcm.ModelInitializationError, match="constraint 'borrowing'"):
            model.solve(STOCHASTIC_PARAMS)


# ---------------------------------------------------------------------------------------
# The upper envelope on its own, against a loop-by-loop numpy reference
# ---------------------------------------------------------------------------------------


def _envelope_reference(m, v, constrained, tolerance=1e-10):
    """Which points survive: a point is dropped when a segment between two other
    consecutive points that spans its `m` lies above it, or the constrained branch does
    (both by more than a relative `tolerance`)."""
    n = len(m)
    kept = []
    for j in range(n):
        margin = tolerance * (1.0 + abs(v[j]))
        beaten = constrained[j] > v[j] + margin or not np.isfinite(m[j])
        for s in range(n - 1):
            if s in (j, j - 1):
                continue
            lo, hi = m[s], m[s + 1]
            if min(lo, hi) <= m[j] <= max(lo, hi):
                slope = (v[s + 1] - v[s]) / (hi - lo) if hi != lo else v[s + 1] - v[s]
                if v[s] + (m[j] - lo) * slope > v[j] + margin:
                    beaten = True
        if not beaten:
            kept.append(j)
    return kept


def _folded_branches(seed):
    """Raw points of two concave branches (choice-specific values) whose endogenous grid
    folds back where the optimal branch switches, as the Euler equation gives them before
    the upper envelope: branch A on [1, 6], a backward-bending stretch from 6 to 4 below
    both, branch B on [4, 11], which overtakes A inside [4, 6]."""
    rng = np.random.default_rng(seed)
    m = np.concatenate(
        [
            np.sort(rng.uniform(1.0, 6.0, 25)),
            np.sort(rng.uniform(4.0, 6.0, 10))[::-1],
            np.sort(rng.uniform(4.0, 11.0, 25)),
        ]
    )
    v_a, v_b = np.log(m), np.log(m) + 0.05 * (m - 5.0)
    v = np.concatenate([v_a[:25], np.minimum(v_a, v_b)[25:35] - 0.05, v_b[35:]])
    return m, v


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_upper_envelope_keeps_exactly_the_undominated_points(seed):
    m, v = _folded_branches(seed)
    n = len(m)
    t = np.arange(n) / n
    c = 0.5 + t
    mu = np.where(np.arange(n) < 35, 1.0 / m, 1.0 / m + 0.05)  # dv/dm on each branch
    a0 = 0.0
    continuation0 = -1.5

    def constrained_value(x):
        ok = x > a0
        return jnp.where(ok, jnp.log(jnp.where(ok, x - a0, 1.0)) + continuation0, -jnp.inf)

    expected = _envelope_reference(m, v, np.asarray(constrained_value(jnp.asarray(m))))
    assert 0 < len(expected) < n  # the case has dropped points
    nodes, count = lcm.ExactEnvelope()(
        *(jnp.asarray(x) for x in (m, c, v, mu)), constrained_value, lambda c: 1.0 / c
    )
    nodes = np.asarray(nodes)
    n_rows = lcm.ExactEnvelope().n_rows(n)
    assert nodes.shape == (n_rows, 4) and int(count) == n_rows == 2 * n
    assert np.all(np.diff(nodes[:, 0]) >= 0)  # sorted by m
    # Two rows per savings point, in savings order: a kept point twice.
    pairs = nodes.reshape(n, 2, 4)
    np.testing.assert_array_equal(pairs[expected, 0, 0], m[expected])
    np.testing.assert_array_equal(pairs[expected, 1], pairs[expected, 0])
    np.testing.assert_array_equal(pairs[expected, 0, 2], v[expected])
    # Before the first kept point and after the last: copies of it.
    np.testing.assert_array_equal(
        pairs[: expected[0]], np.broadcast_to(pairs[expected[0]], pairs[: expected[0]].shape)
    )
    np.testing.assert_array_equal(
        pairs[expected[-1] :], np.broadcast_to(pairs[expected[-1]], pairs[expected[-1] :].shape)
    )
    # Where savings points were dropped between two kept ones, the optimal branch jumps:
    # the gap's first slot holds the branches' crossing (between the two points, one
    # value) with the left and then the right branch's consumption, its other slots
    # copies of the right one; elsewhere no row other than the kept points.
    gaps = [(i, j) for i, j in itertools.pairwise(expected) if j > i + 1]
    assert gaps
    for i, j in gaps:
        left, right = pairs[i + 1]
        assert m[i] <= left[0] <= m[j]
        assert left[0] == right[0] and left[2] == right[2]
        assert left[1] != right[1]  # the two branches' consumption
        np.testing.assert_array_equal(pairs[i + 2 : j], np.broadcast_to(right, (j - i - 2, 2, 4)))
    distinct = [r for k, r in enumerate(nodes) if k == 0 or not np.array_equal(r, nodes[k - 1])]
    assert len(distinct) == len(expected) + 2 * len(gaps)


def test_upper_envelope_puts_a_jump_where_the_branches_values_are_equal():
    """Two branches with consumption linear in cash on hand (`c = κ·m`, log utility: the
    value `log(m)/κ + A`, which the endogenous grid reads exactly): the optimal branch
    switches where their values are equal, `log m* = (A_l − A_r) / (1/κ_r − 1/κ_l)`.
    With `utility` the envelope puts the jump there to roundings; the crossing of the
    two branches' tangents is 6.9e-4 off."""
    kappa_left, kappa_right, a_left = 0.6, 0.3, 0.0
    jump = 1.75
    a_right = a_left + np.log(jump) * (1 / kappa_left - 1 / kappa_right)
    m = np.concatenate([np.linspace(1.0, 2.0, 11), np.linspace(1.5, 3.0, 11)])
    kappa = np.where(np.arange(22) < 11, kappa_left, kappa_right)
    c = kappa * m
    v = np.log(m) / kappa + np.where(np.arange(22) < 11, a_left, a_right)
    arrays = [jnp.asarray(x) for x in (m, c, v, 1.0 / c)]

    def constrained_value(x):
        return jnp.full_like(x, -jnp.inf)

    def crossing(**utility):
        nodes, _ = lcm.ExactEnvelope()(*arrays, constrained_value, lambda c: 1.0 / c, **utility)
        nodes = np.asarray(nodes)
        same_m = (nodes[1:, 0] == nodes[:-1, 0]) & (nodes[1:, 1] != nodes[:-1, 1])
        (k,) = np.flatnonzero(same_m)
        return nodes[k]

    at, consumption, value, _ = crossing(utility=jnp.log)
    assert abs(at - jump) < 1e-12
    assert abs(consumption - kappa_left * jump) < 1e-12
    assert abs(value - (np.log(jump) / kappa_left + a_left)) < 1e-12
    assert abs(crossing()[0] - jump) > 1e-4


def test_the_jumps_derivative_is_the_implicit_functions_at_the_root():
    """Six raw points of the second-hour model (benchmarks/second_hour.py, working at 62,
    log utility) whose third is dropped (the points fold back), so the policy jumps
    between the second and the fourth, where the left branch's consumption rises
    steeply; with their tangents in the disutility of work. Newton's method from the
    tangents' crossing needed six steps there: after four (a fixed count) the jump was
    3e-5 off the root and its derivative 3% off central differences, which left the
    log-likelihood's gradient 2e-5 off."""
    points = np.array(
        [
            [1.921746, 1.261046, -4.913458],
            [2.0627, 1.306355, -4.803949],
            [2.153338, 1.333717, -4.735456],
            [2.148193, 1.303946, -4.739718],
            [2.279135, 1.339243, -4.641018],
            [2.542216, 1.396761, -4.44957],
        ]
    )
    tangents = np.array(
        [
            [4.535683, 2.797496, -0.384288],
            [1.860312, 1.860312, -2.670498],
            [1.943789, 1.943789, -2.698846],
            [4.550879, 2.812693, -0.736688],
            [2.660178, 2.660178, -2.33265],
            [2.123168, 2.123168, -3.05429],
        ]
    )

    def envelope(m, c, v):
        def nowhere(x):
            return jnp.full_like(x, -jnp.inf)

        def marginal(c):
            return 1.0 / c

        nodes, _ = lcm.ExactEnvelope()(m, c, v, marginal(c), nowhere, marginal, utility=jnp.log)
        return nodes[:, :3]

    primal = [jnp.asarray(points[:, i]) for i in range(3)]
    direction = [jnp.asarray(tangents[:, i]) for i in range(3)]
    nodes, derivative = (np.asarray(a) for a in jax.jvp(envelope, primal, direction))
    # The jump: two rows at one m, the left and the right branch's consumption.
    (k,) = np.flatnonzero((nodes[1:, 0] == nodes[:-1, 0]) & (nodes[1:, 1] != nodes[:-1, 1]))
    assert points[1, 0] < nodes[k, 0] < points[4, 0]
    h = 1e-7
    up, down = (
        np.asarray(envelope(*(p + s * h * d for p, d in zip(primal, direction, strict=True))))
        for s in (1, -1)
    )
    np.testing.assert_allclose(derivative, (up - down) / (2 * h), rtol=1e-6, atol=1e-6)


def test_upper_envelope_without_a_kept_point_is_empty():
    n = 6
    m = jnp.linspace(1.0, 2.0, n)
    nodes, count = lcm.ExactEnvelope()(
        m, m, jnp.zeros(n), jnp.ones(n), lambda x: jnp.full_like(x, jnp.inf), lambda c: 1.0 / c
    )
    assert int(count) == 0
    assert np.all(np.isinf(np.asarray(nodes)[:, 0]))


def test_the_pairwise_test_of_many_rows_equals_each_rows_own():
    from lcm_eqx._solve._dcegm._envelope import _folds

    folded_m, folded_v = _folded_branches(3)
    n = len(folded_m)
    rising = np.linspace(1.0, 11.0, n)
    rows = {
        "folded": (folded_m, folded_v),
        "rising": (rising, np.log(rising)),
        # Savings too small to reach a feasible next period: non-finite points first.
        "leading_infinite": (
            np.where(np.arange(n) < 3, np.inf, rising),
            np.where(np.arange(n) < 3, -np.inf, np.log(rising)),
        ),
        # A non-finite point inside the row, and two points at the same m (the second
        # below the segment that ends at the first).
        "infinite_inside": (
            np.where(np.arange(n) == 20, np.inf, rising),
            np.where(np.arange(n) == 20, -np.inf, np.log(rising)),
        ),
        "repeated": (
            np.where(np.arange(n) == 10, rising[9], rising),
            np.where(np.arange(n) == 10, np.log(rising[9]) - 0.1, np.log(rising)),
        ),
    }
    m = np.stack([row[0] for row in rows.values()])
    v = np.stack([row[1] for row in rows.values()])
    # Only the rows that fold are tested; the others cannot have a point on a segment
    # other than the two it ends.
    np.testing.assert_array_equal(
        np.asarray(_folds(jnp.asarray(m))), [True, False, False, True, True]
    )
    envelope = lcm.ExactEnvelope()
    dominated = np.asarray(envelope.dominated_rows(jnp.asarray(m), jnp.asarray(v)))
    own = np.asarray(jax.vmap(envelope._below_a_segment)(jnp.asarray(m), jnp.asarray(v)))
    np.testing.assert_array_equal(dominated, own)
    # Against the loop-by-loop reference (the constrained branch left out), at the
    # finite points (the non-finite ones are dropped by the envelope itself).
    for i, (row_m, row_v) in enumerate(rows.values()):
        with np.errstate(invalid="ignore"):  # segments with a non-finite end
            kept = _envelope_reference(row_m, row_v, np.full(n, -np.inf))
        beaten = ~np.isin(np.arange(n), kept)
        finite = np.isfinite(row_m)
        np.testing.assert_array_equal(dominated[i][finite], beaten[finite])
    assert dominated[0].any() and dominated[4].any()  # the cases drop points


def test_choices_read_only_the_regimes_they_can_move_to(monkeypatch):
    """`next_regime(labor)` sends working to working and retiring to retired with
    certainty, and the retired stay retired: each choice reads only its own next regime
    (found when tracing), with the same solution as reading every regime. A transition
    that depends on a parameter (mortality) is not known when tracing: every regime is
    read."""
    from lcm_eqx._solve._dcegm import _passes

    found = {}
    groups = _passes.target_groups

    def spy(solver, problem, codes):
        result = groups(solver, problem, codes)
        found[problem.regime.name] = (
            None if result is None else [(rows.tolist(), targets) for rows, targets in result]
        )
        return result

    monkeypatch.setattr(_passes, "target_groups", spy)
    params = params_for(1.0)
    restricted = retirement.build(4, solver=retirement.dcegm(60)).solve(params)
    assert found == {
        "working": [([0], ("working",)), ([1], ("retired",))],  # work, retire
        "retired": [([0], ("retired",))],
    }
    stochastic_model(retirement.dcegm(60)).solve(STOCHASTIC_PARAMS)
    assert found["alive"] is None
    monkeypatch.setattr(_passes, "target_groups", lambda solver, problem, codes: None)
    everything = retirement.build(4, solver=retirement.dcegm(60)).solve(params)
    for name in ("working", "retired"):
        np.testing.assert_array_equal(restricted.values[name], everything.values[name])
        np.testing.assert_array_equal(
            restricted.policies[name].nodes, everything.policies[name].nodes
        )


@pytest.mark.parametrize("utility", ["crra", "not_crra"])
def test_newton_inverts_marginal_utility_with_or_without_its_early_exit(utility):
    """Newton's method in logs is exact after one step for CRRA utility, so it stops
    after two; otherwise (`u(c) = log c - 1/(2c²)`, `u'(c) = 1/c + 1/c³`) it runs all
    its steps. Either way `u'(c) = q` to rounding, and the derivative of `c` in `q` is
    `1 / u''(c)` (the final step's implicit function theorem)."""
    from lcm_eqx._solve._reading import invert_marginal

    if utility == "crra":
        marginal, second = (lambda c: c**-2.0), (lambda c: -2.0 * c**-3.0)
    else:
        marginal, second = (lambda c: 1 / c + c**-3.0), (lambda c: -(c**-2.0) - 3.0 * c**-4.0)
    q = jnp.asarray(np.geomspace(1e-3, 1e3, 25))
    c = invert_marginal(marginal, q, 6)
    np.testing.assert_allclose(marginal(c), q, rtol=1e-13)
    slope = jax.vmap(jax.grad(lambda q: invert_marginal(marginal, q, 6)))(q)
    np.testing.assert_allclose(slope, 1 / second(c), rtol=1e-10)
    if utility == "not_crra":
        # Two steps are not enough here: the early exit must not stop it.
        two = invert_marginal(marginal, q, 2)
        assert np.max(np.abs(np.asarray(marginal(two)) / np.asarray(q) - 1)) > 1e-10


def test_newton_inverts_several_marginal_utilities_with_one_early_exit():
    """`invert_marginals` (all the regimes of a period: one branch decides whether the
    steps after the second run) gives each problem's own solution: CRRA alone stops
    after two steps, with a problem that needs more both run them, and each result and
    its derivative in `q` is that of the problem inverted alone."""
    from lcm_eqx._solve._reading import invert_marginal, invert_marginals

    def crra(c):
        return c**-2.0

    def not_crra(c):
        return 1 / c + c**-3.0

    q = jnp.asarray(np.geomspace(1e-3, 1e3, 25))
    q2 = q[:7] * 1.5  # another shape, as another regime's rows
    for pair in ([(crra, q), (crra, q2)], [(crra, q), (not_crra, q2)]):
        together = invert_marginals(pair, 6)
        for (marginal, target), c in zip(pair, together, strict=True):
            alone = invert_marginal(marginal, target, 6)
            assert c.shape == target.shape
            np.testing.assert_allclose(c, alone, rtol=1e-14)
            np.testing.assert_allclose(marginal(c), target, rtol=1e-13)
    slope = jax.vmap(jax.grad(lambda q: invert_marginals([(crra, q), (not_crra, q)], 6)[1]))(q)
    alone = jax.vmap(jax.grad(lambda q: invert_marginal(not_crra, q, 6)))(q)
    np.testing.assert_allclose(slope, alone, rtol=1e-12)
