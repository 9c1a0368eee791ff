"""The estimation helpers: data preparation, the log-likelihood and its gradient.

The model is the retirement model with taste shocks of `test_taste_shocks.py`. Data are
simulated by `model.simulate`; the likelihood evaluates `v_d` at each row's exact state,
as the simulation does, so it is the likelihood of the data-generating process.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation import (  # noqa: E402
    InvalidDataError,
    choice_probabilities,
    log_likelihood,
    prepare_data,
)
from tests.test_taste_shocks import PARAMS as RAW_PARAMS  # noqa: E402
from tests.test_taste_shocks import WEALTH, Labor, build_model  # noqa: E402

PARAMS = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in RAW_PARAMS.items()}
H = 1e-6


@pytest.fixture(scope="module")
def model():
    return build_model()


@pytest.fixture(scope="module")
def panel(model):
    rng = np.random.default_rng(0)
    n = 300
    initial = {"regime": np.zeros(n, dtype=int), "wealth": rng.uniform(2.0, 50.0, n)}
    result = model.simulate(PARAMS, initial, key=jax.random.key(11))
    return result.to_dataframe()


def test_prepare_data_groups_rows_by_regime_and_period(model, panel):
    data = prepare_data(model, panel)
    assert data.n_rows == len(panel)
    working = data.blocks["working"]
    assert np.sum(working.mask) == np.sum(panel["regime"] == "working")
    assert set(working.periods.tolist()) == set(panel.loc[panel["regime"] == "working", "period"])
    # Each row appears once, padding is masked.
    rows = working.row[working.mask]
    assert len(np.unique(rows)) == rows.size


def test_log_likelihood_gradient_matches_finite_differences(model, panel):
    data = prepare_data(model, panel)

    def objectives(params):
        solution = model.solve(params)
        discrete_only = log_likelihood(model, params, data, solution=solution)
        with_consumption = log_likelihood(
            model, params, data, solution=solution, measurement_sd=2.0
        )
        return jnp.stack([discrete_only, with_consumption])

    forward = jax.jit(objectives)
    jacobian = jax.jit(jax.jacrev(objectives))(PARAMS)
    for name in PARAMS:
        up = forward({**PARAMS, name: PARAMS[name] + H})
        down = forward({**PARAMS, name: PARAMS[name] - H})
        fd = np.asarray((up - down) / (2 * H))
        ad = np.asarray(jacobian[name])
        assert np.abs(ad[0]) > 1e-6, name
        np.testing.assert_allclose(ad, fd, rtol=1e-5, err_msg=name)


def test_per_row_contributions(model, panel):
    total = log_likelihood(model, PARAMS, panel)
    rows = np.asarray(log_likelihood(model, PARAMS, panel, per_row=True))
    assert rows.shape == (len(panel),)
    np.testing.assert_allclose(rows.sum(), total, rtol=1e-12)
    retired = (panel["regime"] == "retired").to_numpy()
    np.testing.assert_array_equal(rows[retired], 0.0)  # no discrete choice there
    assert np.all(rows[~retired] < 0)


def test_likelihood_at_grid_states_equals_grid_choice_probabilities(model):
    """Rows on grid states give exactly log P from `choice_probabilities`."""
    solution = model.solve(PARAMS)
    grid = np.linspace(*WEALTH)
    labor = np.arange(grid.size) % 2
    period = np.arange(grid.size) % 3
    data = {
        "regime": np.zeros(grid.size, dtype=int),
        "period": period,
        "wealth": grid,
        "labor": labor,
    }
    rows = np.asarray(log_likelihood(model, PARAMS, data, solution=solution, per_row=True))
    for i in range(grid.size):
        p = choice_probabilities(model, PARAMS, solution, "working", int(period[i]))
        np.testing.assert_allclose(rows[i], np.log(p[i, labor[i]]), rtol=1e-10)


def test_labels_and_codes_are_equivalent(model, panel):
    codes = panel.copy()
    codes["labor"] = codes["labor"].cat.codes.replace(-1, 0)
    codes["regime"] = codes["regime"].cat.codes
    np.testing.assert_allclose(
        log_likelihood(model, PARAMS, codes), log_likelihood(model, PARAMS, panel), rtol=1e-12
    )


def test_data_errors(model, panel):
    with pytest.raises(InvalidDataError, match="labor"):
        log_likelihood(model, PARAMS, panel.drop(columns="labor"))
    bad = panel.copy()
    bad["regime"] = bad["regime"].astype(str).replace("working", "employed")
    with pytest.raises(InvalidDataError, match="employed"):
        prepare_data(model, bad)
    bad = panel.copy()
    bad["period"] = bad["period"] + 10
    with pytest.raises(InvalidDataError, match="period"):
        prepare_data(model, bad)


def test_discrete_choices_need_taste_shocks(panel):
    model = build_model(taste_shocks=False)
    params = {k: v for k, v in PARAMS.items() if k != "taste_shock_scale"}
    with pytest.raises(lcm.LcmError, match="taste shocks"):
        log_likelihood(model, params, panel)


def test_simulated_labor_matches_labels(panel):
    assert set(panel["labor"].dropna()) <= {label.name for label in Labor}


@pytest.mark.slow
def test_a_period_without_rows_of_a_regime_is_masked_out():
    """`prepare_data` gives each regime a group for every period of the data (so that
    datasets of the same size have the same shapes); a group without rows of the regime
    adds nothing to the likelihood or its gradient, and its choice moments are NaN."""
    model = build_model(n_periods=3, wealth=(1.0, 30.0, 5), consumption=(1.0, 30.0, 7))
    rng = np.random.default_rng(1)
    initial = {"regime": np.zeros(100, dtype=int), "wealth": rng.uniform(2.0, 25.0, 100)}
    panel = model.simulate(PARAMS, initial, key=jax.random.key(1)).to_dataframe()
    working = panel["regime"] == "working"
    period = 1
    assert np.any(~working & (panel["period"] == period))  # the period stays in the data
    keep = ~(working & (panel["period"] == period)).to_numpy()
    data = prepare_data(model, panel[keep])
    block = data.blocks["working"]
    assert period in block.periods and not block.mask[block.periods == period].any()
    moments = lcm.choice_moments(model, PARAMS, data)["working"]
    assert np.all(np.isnan(moments[period])) and np.all(np.isfinite(moments[0]))
    full = log_likelihood(model, PARAMS, panel, per_row=True)
    value, gradient = jax.value_and_grad(lambda p: log_likelihood(model, p, data))(PARAMS)
    np.testing.assert_allclose(value, np.sum(np.asarray(full)[keep]), rtol=1e-12)
    assert all(np.isfinite(float(g)) for g in jax.tree.leaves(gradient))
