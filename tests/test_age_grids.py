"""Grids whose bounds vary with age (issue 12): a wealth grid that widens with age.

The oracle is a separately written numpy float64 backward induction of a small
deterministic consumption-saving model on per-period grids.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._solve._age_tables import age_varying_points  # noqa: E402
from tests.models import retirement  # noqa: E402

N_PERIODS = 3
N_WEALTH = 7
N_CONSUMPTION = 25
AGES = lcm.AgeGrid(start=20, stop=22)
PARAMS = {"discount_factor": 0.95, "interest_rate": 0.04, "income": 1.5}


def wealth_start(age):
    return 1.0 + 0.0 * age


def wealth_stop(age):
    return 4.0 + 3.0 * (age - 20)  # 4, 7, 10


def next_wealth(wealth, consumption, interest_rate, income):
    return (1 + interest_rate) * (wealth - consumption) + income


def build(wealth, consumption=None, *, n_periods=N_PERIODS, utility=None, ages=AGES):
    consumption = (
        lcm.LinSpacedGrid(0.5, 10.0, N_CONSUMPTION) if consumption is None else consumption
    )
    alive = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": utility or (lambda consumption: jnp.log(consumption))},
        state_transitions={"wealth": next_wealth},
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    return lcm.Model({"alive": alive}, n_periods=n_periods, ages=ages)


def widening(kind="lin", **knobs):
    grid = lcm.LinSpacedGrid if kind == "lin" else lcm.LogSpacedGrid
    return grid(start=wealth_start, stop=wealth_stop, n_points=N_WEALTH, **knobs)


# ----------------------------------------------------------------------------- oracle
def oracle_points(kind):
    ages = 20 + np.arange(N_PERIODS)
    starts, stops = 1.0 + 0.0 * ages, 4.0 + 3.0 * (ages - 20)
    if kind == "lin":
        return [np.linspace(a, b, N_WEALTH) for a, b in zip(starts, stops, strict=True)]
    return [
        np.exp(np.linspace(np.log(a), np.log(b), N_WEALTH))
        for a, b in zip(starts, stops, strict=True)
    ]


def oracle_interp(points, values, x):
    """Piecewise-linear interpolation with linear extrapolation from the end intervals."""
    i = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 1 - 1)
    weight = (x - points[i]) / (points[i + 1] - points[i])
    return (1 - weight) * values[i] + weight * values[i + 1]


def oracle_value_at(w, next_points, next_values, params):
    """max over the consumption grid of log(c) + beta * V'(w') at one wealth `w`."""
    beta, r, y = params["discount_factor"], params["interest_rate"], params["income"]
    c = np.linspace(0.5, 10.0, N_CONSUMPTION)
    feasible = c <= w
    if next_points is None:
        continuation = np.zeros_like(c)
    else:
        continuation = oracle_interp(next_points, next_values, (1 + r) * (w - c) + y)
    q = np.where(feasible, np.log(c) + beta * continuation, -np.inf)
    return q.max()


def oracle_solve(points, params):
    values = [None] * N_PERIODS
    for t in reversed(range(N_PERIODS)):
        last = t == N_PERIODS - 1
        values[t] = np.array(
            [
                oracle_value_at(
                    w, None if last else points[t + 1], None if last else values[t + 1], params
                )
                for w in points[t]
            ]
        )
    return values


# ------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("kind", ["lin", "log"])
def test_solve_matches_numpy_oracle(kind):
    model = build(widening(kind))
    solution = model.solve(PARAMS)
    points = oracle_points(kind)
    expected = oracle_solve(points, PARAMS)
    for t in range(N_PERIODS):
        np.testing.assert_allclose(solution.grids["alive"]["wealth"][t], points[t], rtol=1e-12)
        np.testing.assert_allclose(solution.value("alive", t), expected[t], rtol=1e-8, atol=1e-8)


def test_bounds_as_arrays_by_period_equal_functions_of_age():
    by_age = build(widening()).solve(PARAMS)
    by_array = build(
        lcm.LinSpacedGrid(start=1.0, stop=np.array([4.0, 7.0, 10.0]), n_points=N_WEALTH)
    ).solve(PARAMS)
    by_period = build(
        lcm.LinSpacedGrid(start=1.0, stop=lambda period: 4.0 + 3.0 * period, n_points=N_WEALTH),
        ages=None,
    ).solve(PARAMS)
    for other in (by_array, by_period):
        np.testing.assert_array_equal(other.values["alive"], by_age.values["alive"])
        np.testing.assert_array_equal(
            other.grids["alive"]["wealth"], by_age.grids["alive"]["wealth"]
        )


@pytest.mark.parametrize("kind", ["lin", "log"])
def test_constant_bounds_equal_the_ordinary_grid(kind):
    """To the last bit but one: XLA may fuse the grid arithmetic differently when the
    points are a scanned input instead of constants."""
    grid = lcm.LinSpacedGrid if kind == "lin" else lcm.LogSpacedGrid
    ordinary = build(grid(1.0, 10.0, N_WEALTH))
    constant = build(grid(np.full(N_PERIODS, 1.0), lambda age: 10.0, N_WEALTH))
    assert not age_varying_points(ordinary.plan)
    assert age_varying_points(constant.plan)
    a, b = ordinary.solve(PARAMS), constant.solve(PARAMS)
    np.testing.assert_array_max_ulp(a.values["alive"], b.values["alive"], maxulp=2)
    assert a.grids == {}
    conditions = {"regime": jnp.zeros(5, int), "wealth": jnp.linspace(1.0, 9.0, 5)}
    sa = ordinary.simulate(PARAMS, conditions, a, key=jax.random.key(1)).to_dataframe()
    sb = constant.simulate(PARAMS, conditions, b, key=jax.random.key(1)).to_dataframe()
    pd.testing.assert_frame_equal(sa, sb, check_exact=False, rtol=1e-14)


def test_simulation_reads_each_periods_grid():
    """The simulated value at an off-grid state is the oracle's maximum against next
    period's values on next period's grid."""
    model = build(widening())
    solution = model.solve(PARAMS)
    conditions = {"regime": jnp.zeros(4, int), "wealth": jnp.array([1.3, 2.2, 3.1, 3.9])}
    df = model.simulate(PARAMS, conditions, solution, key=jax.random.key(0)).to_dataframe()
    points = oracle_points("lin")
    expected = oracle_solve(points, PARAMS)
    assert list(df.columns[:3]) == ["subject_id", "period", "age"]
    assert sorted(df["age"].unique()) == [20, 21, 22]
    for row in df.itertuples():
        t = row.period
        last = t == N_PERIODS - 1
        value = oracle_value_at(
            row.wealth,
            None if last else points[t + 1],
            None if last else expected[t + 1],
            PARAMS,
        )
        np.testing.assert_allclose(row.value, value, rtol=1e-8, atol=1e-8)
    # States beyond period 0's grid top (4) are reached and read on the wider grids.
    r, y = PARAMS["interest_rate"], PARAMS["income"]
    first = df[df.period == 0].set_index("subject_id")
    second = df[df.period == 1].set_index("subject_id")
    np.testing.assert_allclose(
        second.wealth, (1 + r) * (first.wealth - first.consumption) + y, rtol=1e-12
    )


def test_compute_policy_reads_the_periods_grids_like_the_simulation():
    """Callers outside the scans (policy plots, choice probabilities) get the period's
    points from the model: the policy at the simulated states is the simulated one."""
    model = build(widening(), lcm.LinSpacedGrid(0.5, lambda age: 6.0 + 2.0 * (age - 20), 25))
    solution = model.solve(PARAMS)
    conditions = {"regime": jnp.zeros(4, int), "wealth": jnp.array([1.3, 2.2, 3.1, 3.9])}
    df = model.simulate(PARAMS, conditions, solution, key=jax.random.key(0)).to_dataframe()
    for t in range(N_PERIODS):
        rows = df[df.period == t]
        chosen, value = lcm.compute_policy(
            model, PARAMS, solution, "alive", t, {"wealth": rows.wealth.to_numpy()}
        )
        np.testing.assert_array_equal(chosen["consumption"], rows.consumption.to_numpy())
        # Two separately compiled programs: the same value up to rounding.
        np.testing.assert_allclose(value, rows.value.to_numpy(), rtol=1e-14, atol=0)


def test_jit_vmap_and_grad():
    model = build(widening())
    eager = model.solve(PARAMS)
    jitted = jax.jit(model.solve)(PARAMS)
    np.testing.assert_array_equal(jitted.values["alive"], eager.values["alive"])
    np.testing.assert_array_equal(jitted.grids["alive"]["wealth"], eager.grids["alive"]["wealth"])

    betas = jnp.array([0.9, 0.95])
    batched = jax.vmap(lambda b: model.solve({**PARAMS, "discount_factor": b}).values["alive"])(
        betas
    )
    for i, b in enumerate(betas):
        one = model.solve({**PARAMS, "discount_factor": float(b)}).values["alive"]
        np.testing.assert_allclose(batched[i], one, rtol=1e-12)

    def total(beta, rate):
        params = {**PARAMS, "discount_factor": beta, "interest_rate": rate}
        return jnp.sum(model.solve(params, validate="off").values["alive"])

    grads = jax.grad(total, argnums=(0, 1))(0.95, 0.04)
    h = 1e-6
    fd_beta = (total(0.95 + h, 0.04) - total(0.95 - h, 0.04)) / (2 * h)
    fd_rate = (total(0.95, 0.04 + h) - total(0.95, 0.04 - h)) / (2 * h)
    np.testing.assert_allclose(grads[0], fd_beta, rtol=1e-6)
    np.testing.assert_allclose(grads[1], fd_rate, rtol=1e-6)
    assert abs(float(grads[1])) > 0


def test_splay_on_the_age_varying_axis_gives_the_same_values():
    plain = build(widening()).solve(PARAMS)
    splayed = build(
        widening(batch_size=3), lcm.LinSpacedGrid(0.5, 10.0, N_CONSUMPTION, batch_size=4)
    )
    np.testing.assert_allclose(
        splayed.solve(PARAMS).values["alive"], plain.values["alive"], rtol=1e-14, atol=0
    )


def test_age_varying_action_grid():
    """An action grid may widen with age too: period t searches period t's points."""
    consumption = lcm.LinSpacedGrid(0.5, lambda age: 6.0 + 2.0 * (age - 20), N_CONSUMPTION)
    model = build(lcm.LinSpacedGrid(1.0, 10.0, N_WEALTH), consumption)
    values = model.solve(PARAMS).values["alive"]
    # The last period has no continuation: the best feasible consumption of that period.
    c_last = np.linspace(0.5, 10.0, N_CONSUMPTION)
    w = np.linspace(1.0, 10.0, N_WEALTH)
    expected = [np.log(c_last[c_last <= x].max()) for x in w]
    np.testing.assert_allclose(values[-1], expected, rtol=1e-12)
    assert model.solve(PARAMS).grids == {}  # only states are recorded


def _counting_utility():
    traces = []

    def utility(consumption):
        traces.append(1)
        return jnp.log(consumption)

    return utility, traces


def test_periods_share_one_compiled_step():
    counts = []
    for n_periods in (3, 12):
        utility, traces = _counting_utility()
        grid = lcm.LinSpacedGrid(1.0, lambda age: 4.0 + age - 20, N_WEALTH)
        model = build(grid, n_periods=n_periods, utility=utility, ages=lcm.AgeGrid(start=20))
        model.solve(PARAMS)
        counts.append(len(traces))
        model.solve({**PARAMS, "discount_factor": 0.9})
        assert len(traces) == counts[-1]  # new parameter values do not retrace
    assert counts[0] == counts[1]


def _period_scans(jaxpr):
    """The scans over periods (`reverse=True`) in a closed jaxpr, recursively."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan" and eqn.params["reverse"]:
            found.append(eqn)
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                found += _period_scans(inner)
    return found


def test_models_without_age_varying_grids_trace_nothing_extra():
    """The period scan of an ordinary model has one scanned input (the periods); an
    age-varying grid adds this and next period's points."""

    def scanned_inputs(model):
        jaxpr = jax.make_jaxpr(lambda p: model._solve(p, validate=False, progress=None))(PARAMS)
        scans = _period_scans(jaxpr.jaxpr)
        assert len(scans) == 1
        params = scans[0].params
        return len(scans[0].invars) - params["num_consts"] - params["num_carry"]

    assert scanned_inputs(build(lcm.LinSpacedGrid(1.0, 10.0, N_WEALTH))) == 1
    assert scanned_inputs(build(widening())) == 3


def test_describe_and_plot_show_each_periods_grid():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model = build(widening())
    assert "varies with age: [1, 4] in period 0 to [1, 10] in period 2" in str(model.describe())
    solution = model.solve(PARAMS)
    ax = lcm.plot_values(model, solution, "alive", periods=[0, 2])
    tops = [line.get_xdata()[-1] for line in ax.get_lines()]
    assert tops == [4.0, 10.0]


def test_saved_solution_keeps_the_grids(tmp_path):
    model = build(widening())
    solution = model.solve(PARAMS)
    solution.save(tmp_path / "s.lcm")
    loaded = lcm.load_solution(tmp_path / "s.lcm", model)
    np.testing.assert_array_equal(
        loaded.grids["alive"]["wealth"], solution.grids["alive"]["wealth"]
    )


def test_distribution_and_euler_errors_reject_age_varying_grids():
    model = build(widening())
    with pytest.raises(lcm.LcmError, match=r"euler_errors does not support .*'wealth'"):
        lcm.euler_errors(model, PARAMS, regime="alive", state="wealth", action="consumption")
    with pytest.raises(lcm.LcmError, match=r"distribution does not support .*'alive'.*'wealth'"):
        model.distribution(PARAMS, {"regime": jnp.zeros(2, int), "wealth": jnp.ones(2)})


# --------------------------------------------------------------------------- DC-EGM
RegimeId, Labor = retirement.RegimeId, retirement.Labor


def build_retirement(wealth, *, retired_solver=None, n_periods=4):
    consumption = lcm.LinSpacedGrid(1.0, 100.0, 50)
    savings = lcm.IrregSpacedGrid(points=[100.0 * (i / 59) ** 2 for i in range(60)])
    solver = lcm.DCEGM(state="wealth", action="consumption", savings=savings)

    def utility(consumption, labor, disutility_of_work):
        return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)

    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility},
        state_transitions={
            "wealth": lambda wealth, consumption, labor, wage: (
                wealth - consumption + wage * (labor == Labor.work)
            )
        },
        transition=lambda labor: jnp.where(labor == Labor.work, RegimeId.working, RegimeId.retired),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        solver=solver,
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
        solver=solver if retired_solver is None else retired_solver,
    )
    return lcm.Model(
        {"working": working, "retired": retired},
        n_periods=n_periods,
        regime_ids=RegimeId,
        ages=lcm.AgeGrid(start=60),
    )


RETIREMENT = {"discount_factor": 0.95, "disutility_of_work": 0.5, "wage": 10.0}
STOPS = np.array([20.0, 40.0, 60.0, 80.0])


def test_dcegm_reads_the_endogenous_policy_onto_each_periods_grid():
    """With DC-EGM everywhere the endogenous grids do not depend on the state grid, so
    period t's values on the widening grid equal those of a model whose fixed grid is
    period t's."""
    widening_model = build_retirement(lcm.LinSpacedGrid(1.0, STOPS, 12))
    solution = widening_model.solve(RETIREMENT)
    for t, stop in enumerate(STOPS):
        fixed = build_retirement(lcm.LinSpacedGrid(1.0, float(stop), 12)).solve(RETIREMENT)
        for regime in ("working", "retired"):
            np.testing.assert_allclose(
                solution.value(regime, t), fixed.value(regime, t), rtol=1e-12, atol=1e-12
            )


@pytest.mark.slow
def test_dcegm_reads_a_grid_search_target_on_next_periods_grid():
    """A DC-EGM regime moving to a grid-search regime interpolates the latter's values on
    next period's grid. Over two periods, the retired values of period 1 depend only on
    period 1's grid, so the working regime's endogenous policy of period 0 equals that of
    the model whose fixed grid is period 1's (and not period 0's)."""
    stops = [20.0, 60.0]
    widening_model = build_retirement(
        lcm.LinSpacedGrid(1.0, np.array(stops), 12), retired_solver=lcm.GridSearch(), n_periods=2
    )
    policy = widening_model.solve(RETIREMENT).policies["working"]
    for stop, same in ((stops[1], True), (stops[0], False)):
        fixed = build_retirement(
            lcm.LinSpacedGrid(1.0, stop, 12), retired_solver=lcm.GridSearch(), n_periods=2
        ).solve(RETIREMENT)
        other = fixed.policies["working"]
        agree = np.array_equal(policy.count[0], other.count[0]) and np.allclose(
            policy.nodes[0], other.nodes[0], rtol=1e-9, atol=1e-9
        )
        assert agree == same

    by_age = build_retirement(
        lcm.LinSpacedGrid(1.0, lambda age: 20.0 + 20.0 * (age - 60), 12),
        retired_solver=lcm.GridSearch(),
    ).solve(RETIREMENT)
    by_array = build_retirement(
        lcm.LinSpacedGrid(1.0, STOPS, 12), retired_solver=lcm.GridSearch()
    ).solve(RETIREMENT)
    np.testing.assert_array_equal(by_age.values["working"], by_array.values["working"])
    # Constant bounds by period agree with the ordinary grid to rounding (XLA may fuse
    # the interpolation of constant points differently from scanned ones).
    constant = build_retirement(
        lcm.LinSpacedGrid(np.ones(4), np.full(4, 40.0), 12), retired_solver=lcm.GridSearch()
    ).solve(RETIREMENT)
    ordinary = build_retirement(
        lcm.LinSpacedGrid(1.0, 40.0, 12), retired_solver=lcm.GridSearch()
    ).solve(RETIREMENT)
    np.testing.assert_allclose(
        constant.values["working"], ordinary.values["working"], rtol=1e-14, atol=0
    )


def test_dcegm_savings_grid_must_not_vary_with_age():
    with pytest.raises(lcm.ModelInitializationError, match="savings grid must be the same"):
        lcm.DCEGM(
            state="wealth",
            action="consumption",
            savings=lcm.LinSpacedGrid(0.0, lambda age: 10.0 + age, 5),
        )
