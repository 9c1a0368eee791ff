"""examples/mahler_yum.py: the tiny size solves and simulates, and its values equal a
separately written numpy backward induction (float64) at every period."""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._estimation import _estimate as estimate_module
from tests.helpers import force_accelerator_forms

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def my():
    spec = importlib.util.spec_from_file_location(
        "mahler_yum_example", ROOT / "examples" / "mahler_yum.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(my):
    # saving on 4 points, wealth on 5: next wealth falls between wealth nodes, so the
    # oracle checks the interpolation too.
    model, params, initial_conditions = my.build("tiny", n_subjects=64, saving=4)
    solution = model.solve(params)
    return model, params, initial_conditions, solution


# ---------------------------------------------------------------------------------------
# The numpy oracle: written from the model's equations, sharing only the example's
# tables (the parameter values) and grid sizes with the library's solve.
# ---------------------------------------------------------------------------------------


def _rouwenhorst(n, rho, sigma):
    p = (1 + rho) / 2
    matrix = np.array([[p, 1 - p], [1 - p, p]])
    for m in range(3, n + 1):
        bigger = np.zeros((m, m))
        bigger[:-1, :-1] += p * matrix
        bigger[:-1, 1:] += (1 - p) * matrix
        bigger[1:, :-1] += (1 - p) * matrix
        bigger[1:, 1:] += p * matrix
        bigger[1:-1] /= 2
        matrix = bigger
    half_width = np.sqrt(n - 1) * sigma / np.sqrt(1 - rho**2)
    return np.linspace(-half_width, half_width, n), matrix


def _table(series, ages):
    """A labelled (age, education, health) Series as array[period, education, health]."""
    out = np.empty((len(ages), 2, 2))
    for p, age in enumerate(ages):
        for e, edu in enumerate(("low", "high")):
            for h, health in enumerate(("bad", "good")):
                out[p, e, h] = series.loc[(age, edu, health)]
    return out


def numpy_solve(my, n, params, fixed):
    """V[t] of the alive regime, axes (wealth, health, shock, lagged effort, adjustment
    cost, education, productivity type, health type, discount type)."""
    T = n["periods"]
    ages = my.START_AGE + my.AGE_STEP * np.arange(T)
    last_alive = T - 2
    a = params["alive"]
    f = fixed["alive"]
    wealth = my.wealth_points(n["wealth"])
    saving = my.wealth_points(n["saving"])
    effort = np.linspace(0, 1, n["effort"])
    z, Pz = _rouwenhorst(n["shock"], my.SHOCK_PERSISTENCE, 1.0)
    adjust = (np.arange(n["adjustment"]) + 0.5) / n["adjustment"]
    work = _table(a["work_disutility"]["work_disutility_grid"], ages)
    ecost = _table(a["effort_cost"]["effort_cost_grid"], ages)
    survival = _table(f["next_regime"]["survival"], ages)
    envelope = a["adjustment_cost_penalty"]["adjustment_cost_envelope"].loc[ages].to_numpy()
    age_effect = f["next_health"]["health_age_effects"].loc[ages].to_numpy()
    ht = f["next_health"]
    beta = a["discount_factor"]["discount_factor_by_type"]
    inc = a["base_income"]
    R = a["gross_interest_rate"]
    avg = a["avg_earnings"]
    sigma = f["consumption_utility"]["sigma"]

    # broadcast axes: 0 w, 1 h, 2 z, 3 lagged effort, 4 adj, 5 edu, 6 prod, 7 htype,
    # 8 dtype | 9 labour, 10 saving, 11 effort
    def ax(values, i):
        shape = [1] * 12
        shape[i] = -1
        return np.asarray(values, dtype=np.float64).reshape(shape)

    W, H, Z, LE, A, E, PT, HT, D = (
        ax(v, i)
        for i, v in enumerate(
            [wealth, [0, 1], z, np.arange(n["effort"]), adjust, [0, 1], [0, 1], [0, 1], [0, 1]]
        )
    )
    L, S, F = ax([0, 1, 2], 9), ax(saving, 10), ax(np.arange(n["effort"]), 11)
    Ei, Hi = (
        np.array([0, 1]).reshape(1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1),
        np.array([0, 1]).reshape(1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
    )
    Fv, LEv = effort[F.astype(int)], effort[LE.astype(int)]
    multiplier = f["productivity_type_multiplier"]
    tax_scale, tax_rate = a["taxed_income"]["tax_scale"], a["taxed_income"]["labor_tax_rate"]

    values = [None] * T
    next_value = None
    for t in range(last_alive, -1, -1):
        # flow utility
        Eint = Ei
        profile = inc["y1"][Eint] * np.exp(inc["yt_s"][Eint] * t + inc["yt_sq"][Eint] * t**2)
        base = profile * (1 - inc["wagep"][Eint] * (1 - H)) / inc["income_normalization"]
        shock = Z * a["scaled_productivity_shock"]["productivity_shock_scale"]
        gross = base * (L / 2) * multiplier[PT.astype(int)] * np.exp(shock)
        taxed = tax_scale * gross ** (1 - tax_rate) * avg**tax_rate
        benefit = np.where(
            (H == 0) & (L == 0) & (t < my.RETIREMENT_PERIOD),
            a["benefits"]["benefit_rate"] * avg,
            0.0,
        )
        pension = np.where(
            t >= my.RETIREMENT_PERIOD,
            a["pension"]["pension_base"][Eint] * a["pension"]["pension_replacement_rate"],
            0.0,
        )
        net = taxed + benefit + pension
        cons = np.maximum(net + W * R - S, a["consumption"]["min_consumption"])
        weight = np.where(H == 1, 1.0, a["consumption_utility"]["health_consumption_penalty"])
        u_cons = weight * (
            cons ** (1 - sigma) / (1 - sigma) + a["consumption_utility"]["utility_constant"]
        )
        u_work = work[t][Ei, Hi] * (L / 2) ** 2 / 2
        expo = 1 + 1 / a["effort_cost"]["effort_elasticity"]
        u_effort = ecost[t][Ei, Hi] * Fv**expo / expo
        u_adjust = np.where(F != LE, A * envelope[t], 0.0)
        u = u_cons - u_work - u_effort - u_adjust
        feasible = ((t < my.RETIREMENT_PERIOD) | (L == 0)) & (net + W * R >= S)

        if t == last_alive or next_value is None:
            continuation = 0.0  # survival is 0: everyone moves to `dead`, value 0
        else:
            ev = next_value.mean(
                axis=4
            )  # adjustment cost i.i.d. uniform: (w', h', z', l', e, pt, ht, d)
            ev = np.einsum("kz,whzl...->whkl...", Pz, ev)  # z' given z
            # wealth' = saving: linear interpolation along the wealth axis
            j = np.clip(np.searchsorted(wealth, saving, side="right") - 1, 0, len(wealth) - 2)
            lam = (saving - wealth[j]) / (wealth[j + 1] - wealth[j])
            ev = (1 - lam)[:, None, None, None, None, None, None, None] * ev[j] + lam[
                :, None, None, None, None, None, None, None
            ] * ev[j + 1]  # (s, h', z, l'=effort, e, pt, ht, d)
            index = (
                ht["health_intercept"]
                + age_effect[t]
                + ht["college_coefficient"] * E
                + ht["good_health_coefficient"] * H
                + ht["health_type_coefficient"] * HT
                + ht["health_effort_coefficient"] * Fv
                + ht["lagged_health_effort_coefficient"] * LEv
            )
            good = 1 / (1 + np.exp(-index))
            # to the broadcast layout: s axis 10, z 2, l'=f 11, e 5, pt 6, ht 7, d 8
            bad_next = np.transpose(ev[:, 0], (1, 3, 4, 5, 6, 0, 2))  # (z, e, pt, ht, d, s, f)
            good_next = np.transpose(ev[:, 1], (1, 3, 4, 5, 6, 0, 2))
            layout = (1, 1, len(z), 1, 1, 2, 2, 2, 2, 1, len(saving), n["effort"])
            bad_next, good_next = bad_next.reshape(layout), good_next.reshape(layout)
            continuation = survival[t][Ei, Hi] * ((1 - good) * bad_next + good * good_next)
        q = u + beta[D.astype(int)] * continuation
        q = np.where(feasible, q, -np.inf)
        full = (
            len(wealth),
            2,
            len(z),
            n["effort"],
            n["adjustment"],
            2,
            2,
            2,
            2,
            3,
            len(saving),
            n["effort"],
        )
        q = np.broadcast_to(q, full)
        values[t] = q.reshape((*q.shape[:9], -1)).max(axis=-1)
        next_value = values[t]
    return values


def test_tiny_values_equal_the_numpy_oracle_at_every_period(my, tiny):
    _, params, _, solution = tiny
    n = {**my.SIZES["tiny"], "saving": 4}
    fixed = my.make_fixed_params(n["periods"], np.linspace(0, 1, n["effort"]))
    oracle = numpy_solve(my, n, params, fixed)
    for t in range(n["periods"] - 1):
        got = np.asarray(solution.value("alive", t))
        assert got.dtype == np.float64
        assert got.shape == oracle[t].shape
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, oracle[t], rtol=1e-12, atol=1e-10, err_msg=f"period {t}")
    for t in range(1, n["periods"]):
        np.testing.assert_array_equal(np.asarray(solution.value("dead", t)), 0.0)


def test_the_discount_types_get_different_values(my, tiny):
    model, params, _, solution = tiny
    v = np.asarray(solution.value("alive", 0))
    assert (v[..., 1] > v[..., 0] + 1e-3).all()  # more patient: higher value (utility > 0)
    beta = params["alive"]["discount_factor"]["discount_factor_by_type"]
    same = {
        **params,
        "alive": {
            **params["alive"],
            "discount_factor": {"discount_factor_by_type": np.full(2, beta[1])},
        },
    }
    w = np.asarray(model.solve(same).value("alive", 0))
    np.testing.assert_allclose(w[..., 0], w[..., 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(w[..., 1], v[..., 1], rtol=1e-13)


@pytest.fixture(scope="module")
def tiny_panel(tiny):
    model, params, initial_conditions, solution = tiny
    return model.simulate(
        params, initial_conditions, solution=solution, key=jax.random.key(0)
    ).to_dataframe()


def test_tiny_simulates(my, tiny, tiny_panel):
    frame = tiny_panel
    assert set(frame["regime"].unique()) <= {"alive", "dead"}
    alive = frame[frame["regime"] == "alive"]
    periods = my.SIZES["tiny"]["periods"]
    assert 0.9 * 64 * (periods - 1) <= len(alive) <= 64 * (periods - 1)  # survival is ~0.999
    assert (frame.groupby("subject_id")["regime"].last() == "dead").all()  # survival 0 at the end
    assert np.isfinite(alive["value"]).all() and (alive["wealth"] >= 0).all()
    table = my.moments(frame, np.linspace(0, 1, my.SIZES["tiny"]["effort"]))
    assert table.notna().all().all()


class StartingMass(Exception):
    """Raised in place of the estimation's first evaluation, with its starting mass."""


def starting_mass(model, params, panel, monkeypatch):
    """The initial mass `estimate(method="msm")` builds from the panel's period-0 rows
    (caught before anything is compiled)."""

    def capture(objective, theta):
        raise StartingMass(objective.mass)

    monkeypatch.setattr(estimate_module.Objective, "evaluate", capture)
    with pytest.raises(StartingMass) as caught:
        lcm.estimate(
            model, params, data=panel, method="msm", weighting="identity",
            moments=[lcm.Profile("health", "good")],
            free=[("alive", "effort_cost", "effort_elasticity")],
        )  # fmt: skip
    return caught.value.args[0]


def test_the_msm_start_from_the_data_is_the_models_own_initial_mass(tiny, tiny_panel, monkeypatch):
    # The period-0 rows give the process states (productivity shock, adjustment cost) as
    # node values, as `to_dataframe` writes them; they were binned as grid codes
    # (truncated to integers): most of the mass fell on wrong nodes or off the grid
    # (mean effort 0.594 instead of 0.873 at the true parameters of the run).
    model, params, initial_conditions, _ = tiny
    expected = model.initial_mass(initial_conditions)
    for panel in (tiny_panel, with_process_indices(model, tiny_panel)):
        got = starting_mass(model, params, panel, monkeypatch)
        assert set(got) == set(expected)
        for regime, mass in expected.items():
            np.testing.assert_allclose(got[regime], mass, rtol=1e-14, atol=1e-17, err_msg=regime)


def with_process_indices(model, panel):
    """The panel with its process states as grid indices (`"<state>:index"` columns)."""
    for state in ("productivity_shock", "adjustment_cost"):
        nodes, _ = model.plan.regimes["alive"].grids[state].discretize({})
        distance = np.abs(panel[state].to_numpy()[:, None] - np.asarray(nodes)[None, :])
        panel = panel.drop(columns=state).assign(**{f"{state}:index": distance.argmin(axis=1)})
    return panel


def test_period_0_process_values_off_the_nodes_are_refused(tiny, tiny_panel, monkeypatch):
    model, params, _, _ = tiny
    panel = tiny_panel.assign(productivity_shock=tiny_panel["productivity_shock"] + 0.01)
    with pytest.raises(lcm.InvalidDataError, match=r"period-0 rows.*not a node of 'productivity"):
        starting_mass(model, params, panel, monkeypatch)


def test_describe_compiles_with_labelled_series_params(tiny):
    # describe(params) once compiled the solve with the raw Series (1-d arrays), not the
    # labelled tables solve reads: an IndexError in the user's function.
    model, params, _, _ = tiny
    summary = model.describe(params)
    assert summary.temp_bytes is not None and summary.temp_bytes > 0
    # The structure the factored grid search finds (issue 37): fewer points than pairs.
    alive = next(r for r in summary.regimes if r.name == "alive")
    assert alive.work is not None
    assert alive.evaluated_points < alive.state_action_points / 2
    assert "evaluated by piece" in str(summary)


def test_the_reference_librarys_scaled_utility_factors_and_scales_the_values(my, tiny):
    # The discount types written as the reference library writes them (issue 60): one
    # discount factor and `utility_scale(discount_type, period) * (utility's terms)`.
    # The same choices, values scaled by `(β_type / β)^period`, and the same structure
    # found: the scale only adds the discount type to the utility's pieces.
    model, params, _, solution = tiny
    scaled, scaled_params, _ = my.build("tiny", n_subjects=64, saving=4, scaled_utility=True)
    example, written = (
        next(r for r in m.describe(p).regimes if r.name == "alive")
        for m, p in ((model, params), (scaled, scaled_params))
    )
    assert written.work is not None
    assert written.evaluated_points <= 1.2 * example.evaluated_points  # reduced: 1.04
    relative = scaled_params["alive"]["utility_scale"]["relative_discount_factor"]
    values = scaled.solve(scaled_params)
    for t in range(my.SIZES["tiny"]["periods"] - 1):
        expected = np.asarray(solution.value("alive", t)) * relative**t
        np.testing.assert_allclose(
            np.asarray(values.value("alive", t)), expected, rtol=1e-12, err_msg=f"period {t}"
        )


def _value_gradients(my, model, params, mode):
    """d sum(V_alive(period 0)) / d(effort_elasticity, utility_constant), by `mode`."""

    def f(x):
        p = {**params, "alive": {**params["alive"]}}
        p["alive"]["effort_cost"] = {**params["alive"]["effort_cost"], "effort_elasticity": x[0]}
        p["alive"]["consumption_utility"] = {
            **params["alive"]["consumption_utility"],
            "utility_constant": x[1],
        }
        return model.solve(p, validate="off").value("alive", 0).sum()

    x = jnp.asarray(
        [
            params["alive"]["effort_cost"]["effort_elasticity"],
            params["alive"]["consumption_utility"]["utility_constant"],
        ]
    )
    return np.asarray(jax.grad(f)(x) if mode == "reverse" else jax.jacfwd(f)(x))


def _assert_alive_values_equal(my, got, expected) -> None:
    for t in range(my.SIZES["tiny"]["periods"] - 1):
        np.testing.assert_allclose(
            np.asarray(got.value("alive", t)),
            np.asarray(expected.value("alive", t)),
            rtol=1e-12,
            atol=0,
            err_msg=f"period {t}",
        )


def test_the_accelerator_forms_solve_validate_and_differentiate_like_the_cpus(
    my, tiny, monkeypatch
):
    """With every `by_platform` choice traced as for a TPU (the dense reads, the
    check maxima over the arrays' own axes, the first maximiser without `argmax`), the
    tiny model's values, checks and reverse-mode gradient equal the CPU forms'."""
    _, params, _, solution = tiny
    cpu_gradient = _value_gradients(my, tiny[0], params, "reverse")
    force_accelerator_forms(monkeypatch)
    model, _, _ = my.build("tiny", n_subjects=4, saving=4)
    accelerated = model.solve(params)
    _assert_alive_values_equal(my, accelerated, solution)
    for name, violations in solution.violations.items():
        np.testing.assert_array_equal(
            np.asarray(accelerated.violations[name]), np.asarray(violations)
        )
    gradient = _value_gradients(my, model, params, "reverse")
    assert np.all(np.abs(gradient) > 0)
    np.testing.assert_allclose(gradient, cpu_gradient, rtol=1e-10)
    # A NaN value is still caught (failing transition checks in these forms:
    # tests/test_validation_cost.py).
    utility = params["alive"]["consumption_utility"]
    bad = {
        **params,
        "alive": {
            **params["alive"],
            "consumption_utility": {**utility, "utility_constant": np.nan},
        },
    }
    with pytest.raises(lcm.NaNError):
        model.solve(bad)
    jax.clear_caches()


@pytest.fixture(scope="module")
def plain_tiny(my):
    import lcm_eqx as lcm

    model, _, _ = my.build("tiny", n_subjects=4, saving=4, solver=lcm.GridSearch(factored=False))
    return model


@pytest.mark.slow
def test_factored_values_and_gradients_equal_the_plain_product(my, tiny, plain_tiny):
    # The default solve of `tiny` is factored (its oracle test above checks it); the
    # plain product's values, and the derivatives of a value with respect to two
    # parameters (forward mode; its reverse mode: see the next test), equal it.
    model, params, _, solution = tiny
    _assert_alive_values_equal(my, solution, plain_tiny.solve(params))
    factored = _value_gradients(my, model, params, "reverse")
    plain = _value_gradients(my, plain_tiny, params, "forward")
    assert np.all(np.abs(plain) > 0)
    np.testing.assert_allclose(factored, plain, rtol=1e-10)
    # And central differences agree (away from kinks).
    h = 1e-4
    x = params["alive"]["consumption_utility"]["utility_constant"]

    def total(c):
        p = {**params, "alive": {**params["alive"]}}
        p["alive"]["consumption_utility"] = {
            **params["alive"]["consumption_utility"],
            "utility_constant": c,
        }
        return float(model.solve(p, validate="off").value("alive", 0).sum())

    central = (total(x + h) - total(x - h)) / (2 * h)
    np.testing.assert_allclose(factored[1], central, rtol=1e-6)


@pytest.mark.slow
def test_plain_product_reverse_mode_equals_its_forward_mode(my, tiny, plain_tiny):
    # It did not: `jnp.max`'s derivative marks the elements equal to the maximum, and in
    # the backward pass of the checkpointed period step XLA recomputed the values in two
    # kernels that rounded differently (12 % off at utility_constant; see `max_along`).
    _, params, _, _ = tiny
    np.testing.assert_allclose(
        _value_gradients(my, plain_tiny, params, "reverse"),
        _value_gradients(my, plain_tiny, params, "forward"),
        rtol=1e-8,
    )


# ---------------------------------------------------------------------------------------
# Continuous effort (`build(continuous_effort=True)`), on the grid and refined off it.
# ---------------------------------------------------------------------------------------


def test_continuous_effort_on_the_grid_is_the_discrete_model(my, tiny):
    # Keeping the lagged effort is choosing its level, adjusting to it pays the cost and
    # never wins, and the continuation is read at lagged-effort nodes: the same values.
    solution = tiny[3]
    continuous, c_params, _ = my.build("tiny", saving=4, continuous_effort=True)
    on_grid = continuous.solve(c_params)
    for period in range(my.SIZES["tiny"]["periods"] - 1):
        np.testing.assert_allclose(
            np.asarray(on_grid.value("alive", period)),
            np.asarray(solution.value("alive", period)),
            rtol=1e-12,
            atol=1e-12,
        )


@pytest.mark.slow
def test_effort_refined_off_the_grid_stays_in_bounds_and_only_raises_values(my):
    sizes = {"saving": 4, "periods": 3}
    grid, params, initial = my.build("tiny", n_subjects=16, continuous_effort=True, **sizes)
    refined, _, _ = my.build(
        "tiny", continuous_effort=True, solver=lcm.GridSearch(refine=["effort"]), **sizes
    )
    on_grid, off_grid = grid.solve(params), refined.solve(params)
    # The refinement starts from the grid's best point and keeps a point only if it is
    # better, so the maximum can only rise (to round-off of the continuation).
    gain = np.asarray(off_grid.value("alive", 0)) - np.asarray(on_grid.value("alive", 0))
    assert np.all(gain >= -1e-12) and gain.max() > 1e-6
    frame = refined.simulate(params, initial, off_grid, key=jax.random.key(0)).to_dataframe(
        extra=["effort_value"], model=refined, params=params
    )
    effort = frame.loc[frame["regime"] == "alive", "effort_value"].to_numpy()
    nodes = np.linspace(0.0, 1.0, my.SIZES["tiny"]["effort"])
    assert np.all((effort >= 0.0) & (effort <= 1.0))
    assert np.abs(effort[:, None] - nodes).min(axis=1).max() > 1e-3  # some off the grid


@pytest.mark.slow  # the plain product's refinement compiles in a minute or more
@pytest.mark.parametrize("taste_shocks", [None, 0.05], ids=["max", "taste-shocks"])
def test_effort_refined_inside_the_elimination_equals_the_plain_products(my, taste_shocks):
    # Effort enters its cost and the health transition's continuation: refined in the
    # step that eliminates it (2,880 points per period on the tiny grids), not at each
    # of the 2,880 states x 6 discrete choices; the plain refinement's values.
    solver = lcm.GridSearch(refine=["effort"])
    model, params, _ = my.build(
        "tiny", continuous_effort=True, solver=solver, taste_shock_scale=taste_shocks
    )
    alive = next(r for r in model.describe(params).regimes if r.name == "alive")
    assert alive.obstacles == () and alive.work is not None
    plain, _, _ = my.build(
        "tiny",
        continuous_effort=True,
        solver=lcm.GridSearch(refine=["effort"], factored=False),
        taste_shock_scale=taste_shocks,
    )
    a = np.asarray(model.solve(params).values["alive"])
    b = np.asarray(plain.solve(params).values["alive"])
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
    finite = np.isfinite(b)
    np.testing.assert_allclose(a[finite], b[finite], rtol=0, atol=1e-10)


def test_choice_probabilities_take_labelled_series_params(tiny):
    # The example's age tables are labelled Series: the estimation helpers convert them
    # as `solve` does (they raised an IndexError on the raw Series before).
    model, params, _, solution = tiny
    probabilities = np.asarray(lcm.choice_probabilities(model, params, solution, "alive", 0))
    finite = np.isfinite(np.asarray(solution.value("alive", 0)))
    total = probabilities.sum(axis=(-2, -1))  # over the discrete labour supply and effort
    np.testing.assert_allclose(total[finite], 1.0)


@pytest.mark.slow  # the refined solve's and distribution's forward mode compile in minutes
def test_refined_effort_with_taste_shocks_has_the_central_differences_derivatives(my):
    # With taste shocks on labour supply and the effort adjustment, every discrete
    # choice's refined effort enters the values and the moments. Three Newton steps left
    # a tenth of them `unconverged` (each starts at a kink: a grid point is a node of the
    # continuation in lagged effort), whose derivative is zero: mean effort's derivatives
    # were 25–40 % off central differences (tests/test_refine.py has the fast analogue).
    model, params, initial = my.build(
        "tiny", n_subjects=100, continuous_effort=True, taste_shock_scale=0.05,
        solver=lcm.GridSearch(refine=["effort"]), periods=5, wealth=4, saving=3,
    )  # fmt: skip
    mass = model.initial_mass(initial)
    n_alive = model.n_periods - 1

    def values_and_moments(theta):
        alive = dict(params["alive"])
        alive["effort_cost"] = {**alive["effort_cost"], "effort_elasticity": theta[0]}
        beta = alive["discount_factor"]["discount_factor_by_type"]
        alive["discount_factor"] = {"discount_factor_by_type": jnp.asarray(beta) * theta[1]}
        moved = {**params, "alive": alive}
        solution = model.solve(moved, validate="off")
        dist = model.distribution(moved, mass, solution, validate="off")
        values = [jnp.sum(solution.value("alive", t)) for t in range(n_alive - 1)]
        return jnp.concatenate([jnp.stack(values), dist.mean("effort_value")[:n_alive]])

    theta = jnp.array([params["alive"]["effort_cost"]["effort_elasticity"], 1.0])
    jacobian = np.asarray(jax.jacfwd(values_and_moments)(theta))
    step = 1e-5
    central = np.stack(
        [
            (values_and_moments(theta.at[i].add(step)) - values_and_moments(theta.at[i].add(-step)))
            / (2 * step)
            for i in range(2)
        ],
        axis=1,
    )
    assert np.all(np.abs(central) > 1e-3)
    np.testing.assert_allclose(jacobian, central, rtol=1e-6)


@pytest.mark.slow  # minutes: the refined model's moments and their forward-mode Jacobian
def test_the_method_of_moments_recovers_effort_parameters_from_a_simulated_panel(my):
    # The four failures of issue 65 in one run: a Profile of the alive regime (pandas
    # 3), the labelled Series tables kept, the distribution started from the panel's
    # period-0 rows (process states as node values), the Jacobian finite with
    # `taxed_income`'s infinite slope at the retirees' income 0.
    model, truth, initial = my.build(
        "tiny", n_subjects=2000, continuous_effort=True, solver=lcm.GridSearch(refine=["effort"])
    )
    solution = model.solve(truth)
    panel = model.simulate(truth, initial, solution, key=jax.random.key(3)).to_dataframe(
        extra=["effort_value"], model=model, params=truth
    )
    elasticity = ("alive", "effort_cost", "effort_elasticity")
    penalty = ("alive", "consumption_utility", "health_consumption_penalty")
    alive = truth["alive"]
    start = {
        **truth,
        "alive": {
            **alive,
            "effort_cost": {**alive["effort_cost"], "effort_elasticity": 1.1 * 1.115},
            "consumption_utility": {
                **alive["consumption_utility"],
                "health_consumption_penalty": 0.9 * 0.8715,
            },
        },
    }
    moments = [
        lcm.Profile("effort_value", regime="alive", periods=[0, 1, 2, 3]),
        lcm.Profile("health", "good", regime="alive", periods=[1, 2, 3, 4]),
    ]
    result = lcm.estimate(
        model, start, data=panel, method="msm", moments=moments, free=[elasticity, penalty],
        bounds={penalty: (0.0, 1.0)}, weighting="diagonal",
    )  # fmt: skip
    assert result.converged, result.message
    assert np.all(np.isfinite(result.jacobian))
    expected = [my.START_PARAMS["effort_elasticity"], my.START_PARAMS["health_consumption_penalty"]]
    errors = np.sqrt(np.diag(result.covariance))
    assert np.all(np.abs(result.estimates - expected) < 3 * errors)
    table = result.params["alive"]["work_disutility"]["work_disutility_grid"]
    assert table is truth["alive"]["work_disutility"]["work_disutility_grid"]  # as given
