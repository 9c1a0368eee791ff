"""`lcm.estimate`: closed-form estimates and standard errors, identification, types, errors.

The closed forms use the retirement model with taste shocks over a single period. Then
both labor choices consume all wealth, `v_work − v_retire = −δ` at every wealth, and
`P(work) = 1 / (1 + exp(δ / λ))`: the maximum-likelihood estimate of `δ` (λ known) is
`λ · log((1 − p̂) / p̂)` with `p̂` the share working, and its standard error (the delta
method on the Bernoulli share) is `λ / sqrt(n p̂ (1 − p̂))`. The method of moments on the
share working is exactly identified and gives the same numbers. With both `δ` and `λ`
free only their ratio is identified.
"""

import jax

jax.config.update("jax_enable_x64", True)

import warnings  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation import _estimate as estimate_module  # noqa: E402
from lcm_eqx._estimation import _inference as inference_module  # noqa: E402
from lcm_eqx._estimation import _objective as objective_module  # noqa: E402
from lcm_eqx._estimation import _optimise as optimise_module  # noqa: E402
from tests.models import retirement  # noqa: E402
from tests.test_taste_shocks import build_model  # noqa: E402

Labor, RegimeId = retirement.Labor, retirement.RegimeId
TRUE = {
    "discount_factor": 0.95,
    "interest_rate": 0.02,
    "disutility_of_work": -0.4,
    "wage": 8.0,
    "taste_shock_scale": 0.5,
}
N = 400


@pytest.fixture(scope="module")
def one_period():
    model = build_model(n_periods=1, wealth=(1.0, 40.0, 6), consumption=(1.0, 40.0, 8))
    rng = np.random.default_rng(5)
    initial = {"regime": np.zeros(N, dtype=int), "wealth": rng.uniform(2.0, 30.0, N)}
    df = model.simulate(TRUE, initial, key=jax.random.key(7)).to_dataframe()
    return model, df


def closed_form(df, scale):
    share = float(np.mean(df["labor"] == "work"))
    estimate = scale * np.log((1 - share) / share)
    return estimate, scale / np.sqrt(len(df) * share * (1 - share))


def test_mle_equals_the_closed_form(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3}
    result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], tolerance=1e-10)
    estimate, se = closed_form(df, TRUE["taste_shock_scale"])
    assert result.converged, result.message
    np.testing.assert_allclose(float(result.params["disutility_of_work"]), estimate, rtol=1e-7)
    for kind in ("hessian", "opg", "sandwich"):  # all three agree at a Bernoulli MLE
        np.testing.assert_allclose(np.sqrt(result.covariances[kind][0, 0]), se, rtol=1e-5)
    np.testing.assert_allclose(float(result.standard_errors["disutility_of_work"]), se, rtol=1e-5)
    assert np.isnan(float(result.standard_errors["wage"]))  # fixed
    # The reported objective is the log-likelihood at the estimate.
    p = 1 / (1 + np.exp(estimate / TRUE["taste_shock_scale"]))
    work = np.asarray(df["labor"] == "work")
    log_l = np.sum(np.where(work, np.log(p), np.log(1 - p)))
    np.testing.assert_allclose(result.objective, log_l, rtol=1e-9)
    table = result.summary()
    assert list(table.index) == ["disutility_of_work"]
    np.testing.assert_allclose(table["ci_upper"] - table["ci_lower"], 2 * 1.959964 * se, rtol=1e-5)
    assert "converged" in repr(result)


def test_msm_equals_the_closed_form(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3}
    moments = [lcm.Profile("labor", Labor.work)]
    values, covariance = lcm.data_moments(model, df, moments)
    share = float(np.mean(df["labor"] == "work"))
    np.testing.assert_allclose(values.to_numpy(), [share])
    np.testing.assert_allclose(covariance.to_numpy(), [[share * (1 - share) / N]])
    result = lcm.estimate(
        model, start, data=df, method="msm", moments=moments, free=["disutility_of_work"],
        tolerance=1e-12,
    )  # fmt: skip
    estimate, se = closed_form(df, TRUE["taste_shock_scale"])
    assert result.converged, result.message
    np.testing.assert_allclose(result.estimates, [estimate], rtol=1e-6)
    np.testing.assert_allclose(np.sqrt(result.covariance[0, 0]), se, rtol=1e-5)


def test_msm_matches_given_targets_with_the_datas_covariance(one_period):
    # `targets=`: the model's exact share at the true parameters replaces the data's;
    # the estimate is the truth, the standard error still the data's (N subjects).
    model, df = one_period
    moments = [lcm.Profile("labor", Labor.work)]
    true = {**TRUE, "disutility_of_work": 0.3}
    first = df[df["period"] == 0]
    initial = {"regime": np.zeros(len(first), dtype=int), "wealth": first["wealth"].to_numpy()}
    target = np.asarray(moments[0].of(model.distribution(true, initial), [0]))
    start = {**TRUE, "disutility_of_work": -0.2}
    result = lcm.estimate(
        model, start, data=df, method="msm", moments=moments, free=["disutility_of_work"],
        targets=target, tolerance=1e-12,
    )  # fmt: skip
    assert result.converged, result.message
    np.testing.assert_allclose(result.estimates, [0.3], rtol=1e-6)
    np.testing.assert_allclose(result.data_moments, target)
    with pytest.raises(lcm.EstimationError, match="targets must be 1 finite numbers"):
        lcm.estimate(
            model, start, data=df, method="msm", moments=moments, free=["disutility_of_work"],
            targets=[0.5, 0.5],
        )  # fmt: skip
    with pytest.raises(lcm.EstimationError, match="targets works with method='msm'"):
        lcm.estimate(model, start, data=df, free=["disutility_of_work"], targets=target)


def test_a_ratio_is_flagged_and_never_reported_converged(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3, "taste_shock_scale": 0.7}
    with pytest.warns(lcm.LcmWarning, match="not positive definite"):
        result = lcm.estimate(
            model, start, data=df, free=["disutility_of_work", "taste_shock_scale"],
            tolerance=1e-9,
        )  # fmt: skip
    assert not result.converged
    # Standard errors that cannot be computed are NaN with the reason, naming both.
    if np.isnan(result.summary()["std_error"]).any():
        assert "are NaN" in result.message and "taste_shock_scale" in result.message
    report = result.identification()
    assert set(report.weak) == {"disutility_of_work", "taste_shock_scale"}
    assert report.condition_number > 1e6
    # Only δ/λ is pinned down: it equals the closed form's.
    ratio = result.estimates[0] / result.estimates[1]
    np.testing.assert_allclose(ratio, closed_form(df, 1.0)[0], rtol=1e-4)


def test_bad_inputs_get_named_errors(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3}
    free = ["disutility_of_work"]
    with pytest.raises(lcm.InvalidDataError, match="wealth"):
        lcm.estimate(model, start, data=df.drop(columns="wealth"), free=free)
    with pytest.raises(lcm.EstimationError, match="outside its bounds"):
        lcm.estimate(model, start, data=df, free=free, bounds={"disutility_of_work": (0.5, 2)})
    with pytest.raises(lcm.EstimationError, match=r"'taste_shock_scale'.*outside"):
        lcm.estimate(model, {**start, "taste_shock_scale": -1.0}, data=df,
                     free=["taste_shock_scale"])  # fmt: skip
    with pytest.raises(lcm.EstimationError, match="params must be a dict, got list"):
        lcm.estimate(model, [start], data=df, free=free)
    with pytest.raises(lcm.EstimationError, match="'salary' is not in params"):
        lcm.estimate(model, start, data=df, free=["salary"])
    with pytest.raises(lcm.EstimationError, match="objective is nan at the start"):
        lcm.estimate(model, {**start, "taste_shock_scale": np.nan}, data=df, free=free)
    twice = [lcm.Profile("labor", Labor.work), lcm.Profile("labor", "work")]
    with pytest.raises(lcm.EstimationError, match="covariance is singular"):
        lcm.estimate(model, start, data=df, method="msm", moments=twice, free=free)
    with pytest.raises(lcm.InvalidDataError, match="consumption_share"):
        lcm.estimate(model, start, data=df, method="msm", free=free,
                     moments=[lcm.Profile("consumption_share")])  # fmt: skip
    with pytest.raises(lcm.EstimationError, match="method must be"):
        lcm.estimate(model, start, data=df, method="gmm", free=free)


def test_a_profile_of_one_regime_reads_only_its_rows(one_period):
    """`Profile(..., regime=...)` raised `ValueError: output array is read-only` under
    pandas 3, whose `to_numpy()` is a read-only view that `panel_moments` updated in
    place. One row per subject: a regime's mean wealth is its rows' mean, its variance
    their variance over their number."""
    model, _ = one_period
    rng = np.random.default_rng(3)
    initial = {
        "regime": (rng.uniform(size=N) < 0.4).astype(int),
        "wealth": rng.uniform(2.0, 30.0, N),
    }
    df = model.simulate(TRUE, initial, key=jax.random.key(3)).to_dataframe()
    regimes = ("retired", "working")
    profiles = [lcm.Profile("wealth", regime=r) for r in regimes] + [lcm.Profile("wealth")]
    values, covariance = lcm.data_moments(model, df, profiles)
    rows = [df.loc[df["regime"] == r, "wealth"].to_numpy() for r in regimes]
    rows.append(df["wealth"].to_numpy())
    assert 0 < rows[0].size < N
    np.testing.assert_allclose(values.to_numpy(), [y.mean() for y in rows], rtol=1e-12)
    np.testing.assert_allclose(
        np.diag(covariance.to_numpy()), [y.var() / y.size for y in rows], rtol=1e-12
    )
    assert covariance.to_numpy()[0, 1] == 0.0  # no subject in both regimes


def test_the_model_moments_influence_is_their_derivative_towards_each_subject(one_period):
    """`ψ_i = ∂m/∂μ · (μ_i − μ̂)`, taken for all subjects at once as a derivative in the
    subjects' masses, equals central differences of the moments along `μ_i − μ̂` (and,
    for mean wealth in period 0, `w_i − w̄`: linear interpolation keeps the mean)."""
    model, df = one_period
    profiles = [lcm.Profile("labor", Labor.work), lcm.Profile("wealth")]
    result = lcm.estimate(
        model, {**TRUE, "disutility_of_work": 0.3}, data=df, method="msm", moments=profiles,
        free=["disutility_of_work"], weighting="diagonal",
    )  # fmt: skip
    objective, theta = result.problem, jnp.asarray(result.estimates)
    panel = estimate_module.panel_moments(model, df, profiles)
    conditions = estimate_module._first_rows(model, df, "subject_id", panel)
    influence = estimate_module.model_influence(model, objective, theta, conditions)
    assert influence.shape == (N, 2)
    wealth = conditions["wealth"]
    np.testing.assert_allclose(influence[:, 1], wealth - wealth.mean(), rtol=1e-10, atol=1e-10)
    params, sample = objective.model_params(theta), objective.mass
    for i in (0, 17, 250):
        own = model.initial_mass({k: v[i : i + 1] for k, v in conditions.items()})

        def moments(step, own=own):
            mass = {r: sample[r] + step * (own[r] - sample[r]) for r in sample}
            return np.asarray(objective.moments(params, mass))

        central = (moments(1e-4) - moments(-1e-4)) / 2e-4
        np.testing.assert_allclose(influence[i], central, rtol=1e-6, atol=1e-9)


def test_max_steps_reached_is_not_converged(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3}
    with pytest.warns(lcm.LcmWarning, match="max_steps=1"):
        result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], max_steps=1,
                              tolerance=1e-14)  # fmt: skip
    assert not result.converged and result.n_steps == 1
    assert result.summary()["at_bound"].tolist() == [False]


@pytest.mark.parametrize(
    ("bound", "start", "edge"), [((0.0, np.inf), 0.3, 0.0), ((-np.inf, -0.5), -1.0, -0.5)]
)
def test_an_estimate_at_its_bound_is_not_converged(one_period, bound, start, edge):
    """The unconstrained MLE (about -0.4) lies outside the bounds: the transform pushes
    the estimate onto the bound, where its gradient in the unconstrained coordinate
    vanishes, which once passed for convergence."""
    model, df = one_period
    with pytest.warns(lcm.LcmWarning, match=r"disutility_of_work at .*at its bound"):
        result = lcm.estimate(
            model, {**TRUE, "disutility_of_work": start}, data=df, free=["disutility_of_work"],
            bounds={"disutility_of_work": bound},
        )  # fmt: skip
    assert not result.converged
    assert result.summary()["at_bound"].tolist() == [True]
    np.testing.assert_allclose(result.estimates, [edge], atol=1e-4)
    # The Newton step points back to the unconstrained optimum, the closed form.
    np.testing.assert_allclose(
        result.estimates + result.newton_step, closed_form(df, TRUE["taste_shock_scale"])[0],
        atol=0.05,
    )  # fmt: skip


def test_a_loose_gradient_tolerance_is_caught_by_the_newton_step(one_period):
    model, df = one_period
    start = {**TRUE, "disutility_of_work": 0.3}
    with pytest.warns(lcm.LcmWarning, match="Newton step of more than"):
        result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], tolerance=0.05)
    assert not result.converged and not result.at_bound.any()
    # Near the optimum the Newton step is what remains to the closed form.
    estimate, se = closed_form(df, TRUE["taste_shock_scale"])
    np.testing.assert_allclose(result.estimates + result.newton_step, estimate, atol=0.05 * se)
    assert abs(result.estimates[0] - estimate) > 0.05 * se


def test_datasets_of_the_same_size_trace_the_likelihood_once(one_period, monkeypatch):
    """A coverage loop compiles once: the data's arrays have the same shapes for every
    panel of as many subjects, however the rows split between the regimes (here the
    subjects start in either regime, and the second panel has no retired subject)."""
    model, _ = one_period
    traces = []
    counted = objective_module.block_log_likelihoods

    def counting(*args, **kwargs):
        traces.append(1)
        return counted(*args, **kwargs)

    monkeypatch.setattr(objective_module, "block_log_likelihoods", counting)
    panels = []
    for seed, retired_share in ((1, 0.3), (2, 0.0)):
        rng = np.random.default_rng(seed)
        initial = {
            "regime": (rng.uniform(size=N) < retired_share).astype(int),
            "wealth": rng.uniform(2.0, 30.0, N),
        }
        panels.append(model.simulate(TRUE, initial, key=jax.random.key(seed)).to_dataframe())
    shapes = [jax.tree.map(np.shape, lcm.prepare_data(model, df)) for df in panels]
    assert shapes[0] == shapes[1]
    start = {**TRUE, "disutility_of_work": 0.3}
    counts = []
    for df in panels:
        result = lcm.estimate(model, start, data=df, free=["disutility_of_work"])
        assert result.converged, result.message
        counts.append(len(traces))
    assert counts[0] <= 1 and counts[1] == counts[0]


def test_panels_with_another_number_of_rows_trace_the_likelihood_once(monkeypatch):
    """Issue 62: with mortality, panels of as many subjects have other numbers of rows
    (the dead leave), which `ChoiceData` holds as a static number; the objective reads
    the blocks and each entry's subject instead, whose shapes are the same, so a second
    panel compiles nothing (it took 113 s against 50 s for the first). Three regimes,
    one of them terminal, and a stochastic regime transition."""
    from tests import test_ruled_out_choices as mortal

    model = mortal.build()
    panels = []
    for seed in (0, 4):
        rng = np.random.default_rng(seed)
        initial = {"regime": np.zeros(150, dtype=int), "wealth": rng.uniform(4.0, 15.0, 150)}
        simulated = model.simulate(mortal.params(), initial, key=jax.random.key(seed))
        panels.append(simulated.to_dataframe())
    assert len(panels[0]) != len(panels[1])
    traces = []
    counted = objective_module.block_log_likelihoods

    def counting(*args, **kwargs):
        traces.append(1)
        return counted(*args, **kwargs)

    monkeypatch.setattr(objective_module, "block_log_likelihoods", counting)
    start = {**mortal.params(), "disutility_of_work": jnp.asarray(0.5)}
    counts = []
    for df in panels:
        with pytest.warns(lcm.LcmWarning, match="max_steps=2"):
            lcm.estimate(model, start, data=df, free=["disutility_of_work"], max_steps=2)
        counts.append(len(traces))
    assert counts == [1, 1]


# ------------------------------------------------------------------ unobserved types
class Kind(retirement.IntEnum):
    low = 0
    high = 1


def typed_utility(consumption, labor, kind, disutility_low, disutility_high):
    disutility = jnp.where(kind == Kind.low, disutility_low, disutility_high)
    return jnp.log(consumption) - disutility * (labor == Labor.work)


def typed_model(utility=typed_utility, n_periods=4, n_wealth=12, n_consumption=15, extra=None):
    wealth = lcm.LinSpacedGrid(1.0, 60.0, n_wealth)
    consumption = lcm.LinSpacedGrid(1.0, 60.0, n_consumption)
    working = lcm.Regime(
        states={"wealth": wealth, "kind": lcm.DiscreteGrid(Kind)},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
        functions={"utility": utility, "labor_income": retirement.labor_income, **(extra or {})},
        state_transitions={"wealth": retirement.next_wealth, "kind": lambda kind: kind},
        transition=retirement.next_regime,
        constraints={"borrowing": retirement.borrowing},
        taste_shocks=lcm.ExtremeValueShocks(),
    )
    retired = lcm.Regime(
        states={"wealth": wealth, "kind": lcm.DiscreteGrid(Kind)},
        actions={"consumption": consumption},
        functions={"utility": retirement.utility_retired},
        state_transitions={"wealth": retirement.next_wealth_retired, "kind": lambda kind: kind},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": retirement.borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired}, n_periods=n_periods, regime_ids=RegimeId
    )


def test_two_type_mixture_recovers_the_share_and_both_types():
    model = typed_model()
    truth = {**TRUE, "disutility_low": -1.0, "disutility_high": 1.0}
    del truth["disutility_of_work"]
    rng = np.random.default_rng(3)
    n, share_high = 800, 0.35
    initial = {
        "regime": np.zeros(n, dtype=int),
        "wealth": rng.uniform(2.0, 40.0, n),
        "kind": (rng.uniform(size=n) < share_high).astype(int),
    }
    # A few subjects reach a state with no feasible action (wealth below the lowest
    # consumption point): simulated as flagged rows, and left out of the data.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)
        simulated = model.simulate(truth, initial, key=jax.random.key(2), validate="warn")
    df = simulated.to_dataframe()
    infeasible = df.loc[~np.isfinite(df["value"]), "subject_id"].unique()
    df = df[~df["subject_id"].isin(infeasible)]
    assert len(infeasible) < 10
    with pytest.raises(lcm.InvalidDataError, match="'kind'"):
        lcm.estimate(model, truth, data=df, free=["disutility_low"], unobserved_type="kind")
    start = {**truth, "disutility_low": -0.5, "disutility_high": 0.5}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lcm.LcmWarning)
        result = lcm.estimate(
            model, start, data=df.drop(columns="kind"), free=["disutility_low", "disutility_high"],
            unobserved_type="kind", type_shares=[0.6, 0.4],
        )  # fmt: skip
    # The one warning: the observed consumption is not used to tell the types apart.
    messages = [str(w.message) for w in caught if issubclass(w.category, lcm.LcmWarning)]
    assert len(messages) == 1 and "carry no information about the types" in messages[0]
    assert "['consumption']" in messages[0]
    assert result.converged, result.message
    assert result.names == ("disutility_low", "disutility_high", "type_share[1]")
    se = np.sqrt(np.diag(result.covariance))
    values = [truth["disutility_low"], truth["disutility_high"], share_high]
    z = (result.estimates - values) / se
    assert np.all(np.abs(z) < 2), (result.estimates, se)
    np.testing.assert_allclose(result.type_shares.sum(), 1.0)


# ------------------------------------------------- profile likelihood and the LR test
def shifted_utility(consumption, labor, kind, disutility_of_work, kind_shift):
    return jnp.log(consumption) - (disutility_of_work + kind_shift * kind) * (labor == Labor.work)


def high_and_working(labor, kind):
    return ((labor == Labor.work) & (kind == Kind.high)).astype(float)


SHIFTED = {**TRUE, "disutility_of_work": 0.2, "kind_shift": 0.5}


@pytest.fixture(scope="module")
def shifted():
    """One period, an observed `kind` that shifts the disutility: the log-likelihood is
    that of two Bernoulli shares, `P(work | k) = 1 / (1 + exp((δ + Δk) / λ))`."""
    model = typed_model(
        shifted_utility, n_periods=1, n_wealth=5, n_consumption=6,
        extra={"high_and_working": high_and_working},
    )  # fmt: skip
    rng = np.random.default_rng(4)
    n = 600
    initial = {
        "regime": np.zeros(n, dtype=int),
        "wealth": rng.uniform(2.0, 50.0, n),
        "kind": rng.integers(0, 2, n),
    }
    simulated = model.simulate(SHIFTED, initial, key=jax.random.key(4))
    df = simulated.to_dataframe(["high_and_working"], model=model, params=SHIFTED)
    work = np.asarray(df["labor"] == "work")
    kind = np.asarray(df["kind"] == "high", dtype=int)
    counts = [(np.sum(kind == k), np.sum(work & (kind == k))) for k in (0, 1)]
    scale = TRUE["taste_shock_scale"]
    shares = [w / m for m, w in counts]
    delta = scale * np.log((1 - shares[0]) / shares[0])
    shift = scale * np.log((1 - shares[1]) / shares[1]) - delta
    return model, df, counts, (delta, shift)


def kinds_initial(seed: int, low: float, high: float) -> dict:
    """`N` subjects in the working regime, wealth uniform on `(low, high)`, either kind."""
    rng = np.random.default_rng(seed)
    return {
        "regime": np.zeros(N, dtype=int),
        "wealth": rng.uniform(low, high, N),
        "kind": rng.integers(0, 2, N),
    }


def tabled_utility(consumption, labor, kind, period, disutility_of_work, kind_shift):
    shift = kind_shift[period, kind]
    return jnp.log(consumption) - (disutility_of_work + shift) * (labor == Labor.work)


def test_a_labelled_series_parameter_keeps_its_shape_through_estimate():
    """A table given as a pandas Series indexed by `(period, kind)` is the `(1, 2)` array
    the utility indexes; `estimate` turned it into a flat array (`IndexError: Too many
    indices` in the utility). With the shift fixed at its closed form, `δ̂` is the
    closed form's too (the joint maximum), and the result keeps the Series as given."""
    model = typed_model(tabled_utility, n_periods=1, n_wealth=5, n_consumption=6)
    index = pd.MultiIndex.from_product([[0], ["low", "high"]], names=["period", "kind"])
    truth = {**TRUE, "disutility_of_work": 0.2, "kind_shift": pd.Series([0.0, 0.5], index=index)}
    initial = kinds_initial(6, 2.0, 50.0)
    df = model.simulate(truth, initial, key=jax.random.key(6)).to_dataframe()
    scale = TRUE["taste_shock_scale"]
    work, high = np.asarray(df["labor"] == "work"), np.asarray(df["kind"] == "high")
    closed = [scale * np.log((1 - work[high == k].mean()) / work[high == k].mean()) for k in (0, 1)]
    shift = pd.Series([0.0, closed[1] - closed[0]], index=index)
    start = {**truth, "disutility_of_work": 0.6, "kind_shift": shift}
    result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], tolerance=1e-10)
    assert result.converged, result.message
    np.testing.assert_allclose(result.estimates, [closed[0]], rtol=1e-7)
    pd.testing.assert_series_equal(result.params["kind_shift"], shift)
    errors = result.standard_errors["kind_shift"]
    assert errors.index.equals(index) and errors.isna().all()
    refit = model.solve(result.params).value("working", 0)  # the result is valid params
    assert np.all(np.isfinite(np.asarray(refit)))


def by_kind_utility(consumption, labor, kind, disutility_by_kind):
    return jnp.log(consumption) - disutility_by_kind[kind] * (labor == Labor.work)


@pytest.fixture(scope="module")
def by_kind():
    """One period, two kinds, each kind's work disutility its own entry of an array: the
    maximum-likelihood estimate of each is the closed form of its kind's share working."""
    model = typed_model(by_kind_utility, n_periods=1, n_wealth=5, n_consumption=6)
    truth = {k: v for k, v in TRUE.items() if k != "disutility_of_work"}
    truth["disutility_by_kind"] = jnp.array([0.2, 0.7])
    initial = kinds_initial(8, 2.0, 50.0)
    df = model.simulate(truth, initial, key=jax.random.key(8)).to_dataframe()
    scale = TRUE["taste_shock_scale"]
    closed = []
    for k in ("low", "high"):
        share = float(np.mean(df["labor"][df["kind"] == k] == "work"))
        n = int(np.sum(df["kind"] == k))
        closed.append(
            (scale * np.log((1 - share) / share), scale / np.sqrt(n * share * (1 - share)))
        )
    return model, truth, df, np.array(closed)


def test_an_array_parameter_frees_each_entry_and_keeps_its_shape(by_kind):
    model, truth, df, closed = by_kind
    start = {**truth, "disutility_by_kind": jnp.array([0.5, 0.5])}
    result = lcm.estimate(
        model, start, data=df, free=["disutility_by_kind"], bounds={"disutility_by_kind": (-5, 5)},
        tolerance=1e-10,
    )  # fmt: skip
    assert result.converged, result.message
    assert result.names == ("disutility_by_kind[0]", "disutility_by_kind[1]")
    np.testing.assert_allclose(result.estimates, closed[:, 0], rtol=1e-7)
    np.testing.assert_allclose(np.sqrt(np.diag(result.covariance)), closed[:, 1], rtol=1e-4)
    assert result.params["disutility_by_kind"].shape == (2,)
    np.testing.assert_allclose(result.params["disutility_by_kind"], closed[:, 0], rtol=1e-7)
    np.testing.assert_allclose(
        result.standard_errors["disutility_by_kind"], closed[:, 1], rtol=1e-4
    )
    assert list(result.summary().index) == list(result.names)
    with pytest.raises(lcm.EstimationError, match=r"start of 'disutility_by_kind\[1\]' is 0.5"):
        lcm.estimate(
            model, {**start, "disutility_by_kind": jnp.array([0.3, 0.5])}, data=df,
            free=["disutility_by_kind"], bounds={"disutility_by_kind": (-1, 0.4)},
        )  # fmt: skip


def test_a_labelled_series_parameter_frees_its_rows_by_their_labels(by_kind):
    """The same table as a Series indexed by kind, its rows in another order than the
    codes: each entry is labelled by its row and the result is the Series, reordered
    nowhere."""
    model, truth, df, closed = by_kind
    index = pd.Index(["high", "low"], name="kind")
    start = {**truth, "disutility_by_kind": pd.Series([0.5, 0.4], index=index)}
    result = lcm.estimate(model, start, data=df, free=["disutility_by_kind"], tolerance=1e-10)
    assert result.converged, result.message
    assert set(result.names) == {"disutility_by_kind[high]", "disutility_by_kind[low]"}
    estimated = result.params["disutility_by_kind"]
    assert isinstance(estimated, pd.Series) and estimated.index.equals(index)
    np.testing.assert_allclose(estimated.loc[["low", "high"]], closed[:, 0], rtol=1e-7)
    errors = result.standard_errors["disutility_by_kind"]
    np.testing.assert_allclose(errors.loc[["low", "high"]], closed[:, 1], rtol=1e-4)
    by_label = dict(zip(result.names, result.estimates, strict=True))
    np.testing.assert_allclose(by_label["disutility_by_kind[high]"], closed[1, 0], rtol=1e-7)


KNOTS = lcm.Spline([0.0, 1.5, 3.0])  # a profile over periods 0-3 from three numbers


def knotted_utility(consumption, labor, period, disutility_knots):
    return jnp.log(consumption) - KNOTS(disutility_knots, period) * (labor == Labor.work)


def test_an_age_profile_by_spline_knots_is_recovered_from_exact_moments():
    """A work disutility over four periods written as a natural spline through three free
    knot values: `estimate` frees the array, the exact Jacobian equals central
    differences, and the exact moments at the truth give the truth back."""
    model = typed_model(knotted_utility, n_periods=4, n_wealth=5, n_consumption=6)
    truth = {k: v for k, v in TRUE.items() if k != "disutility_of_work"}
    truth["disutility_knots"] = jnp.array([0.1, 0.6, 0.3])
    initial = kinds_initial(9, 30.0, 60.0)
    df = model.simulate(truth, initial, key=jax.random.key(9)).to_dataframe()
    moments = [lcm.Profile("labor", Labor.work, regime="working", periods=[0, 1, 2, 3])]
    options = dict(data=df, method="msm", moments=moments, free=["disutility_knots"])
    options.update(initial=initial, weighting="identity")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)  # no steps: "did not converge"
        probe = lcm.estimate(model, truth, **options, max_steps=0)
    step, theta = 1e-6, np.asarray(probe.estimates)
    central = np.empty_like(probe.jacobian)
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[i] += step
        down[i] -= step
        problem = probe.problem
        moments_at = [np.asarray(problem.moments(problem.model_params(jnp.asarray(t))))
                      for t in (up, down)]  # fmt: skip
        central[:, i] = (moments_at[0] - moments_at[1]) / (2 * step)
    # every knot moves three periods' shares (the last period's is the last knot's alone)
    assert np.all(np.sum(np.abs(central) > 1e-4, axis=0) >= 3)
    np.testing.assert_allclose(probe.jacobian, central, rtol=1e-6, atol=1e-9)

    start = {**truth, "disutility_knots": jnp.array([0.3, 0.3, 0.3])}
    result = lcm.estimate(model, start, **options, targets=probe.moments, tolerance=1e-12)
    assert result.converged, result.message
    assert result.names == tuple(f"disutility_knots[{k}]" for k in range(3))
    np.testing.assert_allclose(result.params["disutility_knots"], truth["disutility_knots"],
                               atol=1e-7)  # fmt: skip

    # The tangents in batches of one and of two (the memory knob): the same Jacobian,
    # and the same estimation, step by step.
    for batch in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lcm.LcmWarning)
            batched = lcm.estimate(model, truth, **options, max_steps=0, tangent_batch_size=batch)
        np.testing.assert_allclose(batched.jacobian, probe.jacobian, rtol=1e-12, atol=1e-15)
    again = lcm.estimate(
        model, start, **options, targets=probe.moments, tolerance=1e-12, tangent_batch_size=1
    )
    assert again.n_steps == result.n_steps
    np.testing.assert_allclose(again.estimates, result.estimates, rtol=1e-10)
    for bad in (-1, 1.5, True):
        with pytest.raises(lcm.EstimationError, match="tangent_batch_size"):
            lcm.estimate(model, start, **options, tangent_batch_size=bad)


def taxed_utility(consumption, labor, wage, disutility_of_work, income_weight, tax_rate):
    # `earnings ** (1 − tax_rate)` has an infinite slope at the retirees' earnings 0
    # (Mahler–Yum's `taxed_income`); weighted by 0 here.
    earnings = wage * (labor == Labor.work)
    taxed = income_weight * earnings ** (1 - tax_rate)
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work) + taxed


@pytest.fixture(scope="module")
def taxed():
    model = typed_model(taxed_utility, n_periods=1, n_wealth=6, n_consumption=8)
    truth = {**TRUE, "income_weight": 0.0, "tax_rate": 0.3}
    initial = kinds_initial(5, 2.0, 30.0)
    return model, truth, model.simulate(truth, initial, key=jax.random.key(7)).to_dataframe()


def test_fixed_parameters_with_an_infinite_slope_leave_the_jacobian_finite(taxed):
    """The moments' Jacobian carried a tangent for every parameter, 0 for the fixed
    ones, and `0 · ∞` at income 0 put NaN in it (then `LinAlgError: SVD did not
    converge` in Gauss–Newton). Only the free parameter is differentiated now: the
    estimate is the closed form of the share working (the taxed term weighs 0)."""
    model, truth, df = taxed
    result = lcm.estimate(
        model, {**truth, "disutility_of_work": 0.3}, data=df, method="msm",
        moments=[lcm.Profile("labor", Labor.work)], free=["disutility_of_work"], tolerance=1e-12,
    )  # fmt: skip
    estimate, se = closed_form(df, TRUE["taste_shock_scale"])
    assert result.converged, result.message
    assert np.all(np.isfinite(result.jacobian))
    np.testing.assert_allclose(result.estimates, [estimate], rtol=1e-6)
    np.testing.assert_allclose(np.sqrt(result.covariance[0, 0]), se, rtol=1e-5)


def test_a_non_finite_derivative_in_a_free_parameter_is_named(taxed):
    """Freeing the wage makes `∞ · 0` (the slope at earnings 0 times their derivative in
    the wage when retired) its own derivative: an `EstimationError` that names the
    parameter and the moment, never a failed SVD."""
    model, truth, df = taxed
    free = ["disutility_of_work", "wage"]
    with pytest.raises(
        lcm.EstimationError,
        match=r"Jacobian of the moments is not finite.*share labor=work \[period 0\]\)/∂\(wage",
    ):
        lcm.estimate(
            model, truth, data=df, method="msm", free=free,
            moments=[lcm.Profile("labor", Labor.work), lcm.Profile("wealth")],
        )  # fmt: skip
    with pytest.raises(lcm.EstimationError, match=r"gradient is not finite.*\(wage\) = nan"):
        lcm.estimate(model, truth, data=df, free=free)


def test_profile_intervals_and_the_likelihood_ratio_match_the_closed_form(shifted):
    """The profiles (maximised over the other parameter by scipy) and the LR statistic
    against `Δ = 0` (the pooled share) written out in numpy. With 600 subjects the
    likelihood is nearly quadratic, so the profile intervals are close to Wald's."""
    from scipy import optimize, stats

    model, df, counts, (delta_hat, shift_hat) = shifted
    truth, n = SHIFTED, len(df)
    free = ["disutility_of_work", "kind_shift"]
    result = lcm.estimate(model, truth, data=df, free=free, tolerance=1e-9)
    assert result.converged, result.message
    work = np.asarray(df["labor"] == "work")
    scale = TRUE["taste_shock_scale"]

    def log_l(delta, shift):
        total = 0.0
        for k, (n_k, w_k) in enumerate(counts):
            p = 1 / (1 + np.exp((delta + shift * k) / scale))
            total += w_k * np.log(p) + (n_k - w_k) * np.log(1 - p)
        return total

    np.testing.assert_allclose(result.estimates, [delta_hat, shift_hat], rtol=1e-6)
    best = log_l(delta_hat, shift_hat)

    def profile(j, t):
        other = lambda u: -log_l(t, u) if j == 0 else -log_l(u, t)
        return -optimize.minimize_scalar(other, bracket=(-1, 1), tol=1e-12).fun

    table = result.profile_intervals(level=0.95)
    critical = stats.chi2.ppf(0.95, 1)
    for j, name in enumerate(free):
        root = lambda t, j=j: 2 * (best - profile(j, t)) - critical
        estimate, half = result.estimates[j], 3 * np.sqrt(result.covariance[j, j])
        lower = optimize.brentq(root, estimate - half, estimate)
        upper = optimize.brentq(root, estimate, estimate + half)
        row = table.loc[name]
        np.testing.assert_allclose([row["profile_lower"], row["profile_upper"]], [lower, upper],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
        wald_half = (row["wald_upper"] - row["wald_lower"]) / 2
        assert abs(row["profile_lower"] - row["wald_lower"]) < 0.1 * wald_half
        assert abs(row["profile_upper"] - row["wald_upper"]) < 0.1 * wald_half

    restricted = lcm.estimate(model, {**truth, "kind_shift": 0.0}, data=df,
                              free=["disutility_of_work"], tolerance=1e-9)  # fmt: skip
    test = result.likelihood_ratio(restricted)
    pooled = work.mean()
    restricted_log_l = n * (pooled * np.log(pooled) + (1 - pooled) * np.log(1 - pooled))
    np.testing.assert_allclose(test.statistic, 2 * (best - restricted_log_l), rtol=1e-6)
    assert test.df == 1
    np.testing.assert_allclose(test.p_value, stats.chi2.sf(test.statistic, 1), rtol=1e-6)
    with pytest.raises(lcm.EstimationError, match="strict subset"):
        restricted.likelihood_ratio(result)


@pytest.mark.slow  # compiles the distribution and its derivative in the initial mass
def test_msm_by_gauss_newton_matches_the_likelihood(shifted):
    """Exactly identified moments (the share working, the share high and working) from
    the distribution started at the data's own kinds: the estimates are the two shares'
    closed form, as for the likelihood, and the sandwich standard errors are the
    likelihood's (the delta method on the shares, given the kinds). Gauss–Newton
    needs a handful of steps."""
    model, df, _, closed = shifted
    free = ["disutility_of_work", "kind_shift"]
    start = {**SHIFTED, "disutility_of_work": 0.6, "kind_shift": 0.0}
    moments = [lcm.Profile("labor", Labor.work), lcm.Profile("high_and_working")]
    result = lcm.estimate(model, start, data=df, method="msm", moments=moments, free=free)
    assert result.converged, result.message
    assert result.n_steps <= 10
    np.testing.assert_allclose(result.estimates, closed, rtol=1e-6)
    mle = lcm.estimate(model, start, data=df, free=free)
    np.testing.assert_allclose(result.covariance, mle.covariance, rtol=1e-3)


def test_wald_intervals_are_built_on_the_optimisers_scale():
    """Each case against its formula, written out separately: the delta method on the
    coordinate where the parameter is unbounded, mapped back."""
    z = 1.959963984540054
    theta = np.array([1.5, 0.4, 2.0, 0.9, 0.3, 0.0])
    se = np.array([0.2, 0.1, 0.5, 0.05, np.nan, 0.1])
    lower = np.array([-np.inf, 0.0, -np.inf, 0.0, 0.0, 0.0])
    upper = np.array([np.inf, np.inf, 3.0, 1.5, 1.0, 1.0])
    lo, hi = inference_module.wald_interval(theta, se, lower, upper)
    np.testing.assert_allclose([lo[0], hi[0]], [1.5 - z * 0.2, 1.5 + z * 0.2], rtol=1e-14)
    np.testing.assert_allclose(  # log(θ): θ exp(± z se / θ)
        [lo[1], hi[1]], [0.4 * np.exp(-z * 0.1 / 0.4), 0.4 * np.exp(z * 0.1 / 0.4)], rtol=1e-12
    )
    np.testing.assert_allclose(  # log(3 − θ)
        [lo[2], hi[2]], [3 - 1.0 * np.exp(z * 0.5), 3 - 1.0 * np.exp(-z * 0.5)], rtol=1e-12
    )
    u = 0.9 / 1.5  # logit(θ / 1.5), se / (1.5 u (1 − u)) on that scale
    logit, se_logit = np.log(u / (1 - u)), 0.05 / (1.5 * u * (1 - u))
    expected = [1.5 / (1 + np.exp(-(logit + s * z * se_logit))) for s in (-1, 1)]
    np.testing.assert_allclose([lo[3], hi[3]], expected, rtol=1e-12)
    assert np.isnan(lo[4]) and np.isnan(hi[4])  # no standard error, no interval
    np.testing.assert_allclose([lo[5], hi[5]], [0.0, z * 0.1], rtol=1e-14)  # on its bound
    assert np.all(lo[:4] > lower[:4]) and np.all(hi[:4] < upper[:4])


def test_the_summary_interval_of_a_positive_parameter_is_on_the_log_scale(one_period):
    model, df = one_period
    start = {**TRUE, "taste_shock_scale": 0.8}
    result = lcm.estimate(model, start, data=df, free=["taste_shock_scale"], tolerance=1e-10)
    assert result.converged, result.message
    # δ known: P(work) = 1 / (1 + exp(δ / λ)), so λ̂ = δ / log((1 − p̂) / p̂) and, by the
    # delta method, se(λ̂) = se(δ̂ at λ = 1) · λ̂² / |δ|.
    share = float(np.mean(df["labor"] == "work"))
    scale = TRUE["disutility_of_work"] / np.log((1 - share) / share)
    se = scale**2 / abs(TRUE["disutility_of_work"]) / np.sqrt(len(df) * share * (1 - share))
    table = result.summary()
    np.testing.assert_allclose(table.loc["taste_shock_scale", "estimate"], scale, rtol=1e-7)
    np.testing.assert_allclose(table.loc["taste_shock_scale", "std_error"], se, rtol=1e-5)
    spread = np.exp(1.959963984540054 * se / scale)
    np.testing.assert_allclose(
        table.loc["taste_shock_scale", ["ci_lower", "ci_upper"]].to_numpy(float),
        [scale / spread, scale * spread],
        rtol=1e-5,
    )


def test_a_large_j_statistic_warns(shifted):
    """Overidentified (two shares, one free parameter): with the shift fixed at its
    closed form the J statistic is ~0 and nothing is said; fixed far from it the
    converged minimum fits badly, and the J test says so."""
    model, df, _, (_, shift) = shifted
    moments = [lcm.Profile("labor", Labor.work), lcm.Profile("high_and_working")]
    for kind_shift, warns in ((shift, False), (shift + 3.0, True)):
        start = {**SHIFTED, "disutility_of_work": 0.6, "kind_shift": kind_shift}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = lcm.estimate(
                model, start, data=df, method="msm", moments=moments,
                free=["disutility_of_work"],
            )  # fmt: skip
        assert result.converged, result.message
        said = [w for w in caught if "J statistic" in str(w.message)]
        assert bool(said) == warns, (kind_shift, result.objective)
        if warns:
            assert issubclass(said[0].category, lcm.LcmWarning)


def test_a_failed_line_search_restarts_rescaled_and_says_so(one_period, monkeypatch):
    """A quasi-Newton direction 1e50 times too long (as a stale L-BFGS memory can give)
    defeats every trial of its line search: estimate restarts from the best point with
    the memory reset and the parameters rescaled, converges, and says so."""
    model, df = one_period
    direction = optimise_module._lbfgs_direction
    calls = []

    def stale_once(*args):
        updates, state = direction(*args)
        calls.append(1)
        return (updates * 1e50 if len(calls) == 2 else updates), state

    monkeypatch.setattr(optimise_module, "_lbfgs_direction", stale_once)
    start = {**TRUE, "disutility_of_work": 0.3}
    result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], tolerance=1e-10)
    assert len(calls) > 2  # the stale direction was met, and the search went on
    assert result.converged, result.message
    assert "restarted from the best point" in result.message
    np.testing.assert_allclose(result.estimates, [closed_form(df, 0.5)[0]], rtol=1e-7)


class Known:
    """An objective given in numbers: `value_and_gradient(x)`, `θ = x`."""

    def __init__(self, value_and_gradient):
        self.value_and_gradient = value_and_gradient

    def natural(self, x):
        return np.asarray(x, dtype=float), np.eye(len(x))

    def evaluate(self, theta):
        value, gradient = self.value_and_gradient(np.asarray(theta))
        return value, np.asarray(gradient, dtype=float), None


def test_a_kink_that_stops_every_line_search_is_named():
    """|x₀ − 0.3| + x₁²: L-BFGS closes in on the kink until no step along the gradient
    decreases the objective, rescaling and the steepest descent included; the reason
    says the objective is not smooth, not just that a line search failed."""
    kinked = Known(lambda x: (abs(x[0] - 0.3) + x[1] ** 2, [1 if x[0] >= 0.3 else -1, 2 * x[1]]))
    run = estimate_module.minimise(kinked, np.array([1.0, 0.5]), 1e-8, 500)
    assert run.reason is not None and "not smooth there" in run.reason, run.reason
    assert "steepest descent" in run.reason
    assert abs(run.x[0] - 0.3) < 1e-6 and abs(run.x[1]) < 1e-6
    assert any("restarted from the best point" in note for note in run.notes)


def test_a_gradient_below_the_objectives_rounding_is_said():
    """A flat objective whose gradient stays at 1e-7: no step decreases it, and the
    decrease promised is within rounding, which the reason says."""
    flat = Known(lambda x: (1.0, [1e-7]))
    run = estimate_module.minimise(flat, np.array([0.0]), 1e-8, 50)
    assert run.n_steps == 0
    assert run.reason is not None and "within the objective's rounding" in run.reason


def test_a_kink_with_little_left_to_gain_settles_and_is_judged_by_the_newton_step():
    """Where the decrease promised is below `negligible`, a failed line search stops
    `settled` at once (no recovery), and `run_status` then judges by the curvature and the
    Newton step in standard errors instead of the gradient, saying so."""
    kinked = Known(lambda x: (abs(x[0] - 0.3) + x[1] ** 2, [1 if x[0] >= 0.3 else -1, 2 * x[1]]))
    run = estimate_module.minimise(kinked, np.array([1.0, 0.5]), 1e-8, 500, negligible=1e-3)
    assert run.settled and "kink" in run.reason and not run.notes
    fit = estimate_module.Fit(
        run.x, run.value, run.gradient, run.n_steps, run.reason, (np.eye(2),),
        np.array([0.01, 0.0]), np.array([False, False]), run.settled,
    )  # fmt: skip
    status = dict(names=("a", "b"), bounds=((-9, -9), (9, 9)), tolerance=1e-8, max_steps=500)
    converged, message = estimate_module.run_status(fit, step_tolerance=0.05, **status)
    assert converged and "above the tolerance" in message and "kink" in message
    far = fit._replace(newton_in_se=np.array([0.2, 0.0]))
    assert not estimate_module.run_status(far, step_tolerance=0.05, **status)[0]


class Rows:
    """A mean objective `½ |θ − 1|² + wiggle(θ₀ + θ₁)` of `n` identical subjects, the
    wiggle a triangle wave of period 1e-5 whose slope is ±`jump` (kinks finer than a
    standard error, as a DC-EGM likelihood has)."""

    def __init__(self, jump, n=100):
        self.jump, self.n = jump, n
        # Each subject's score varies about the mean's (variance 1): the outer product of
        # the scores is about n·I, as the information.
        self.spread = np.random.default_rng(0).standard_normal((n, 2))

    def evaluate(self, theta):
        t = np.asarray(theta, dtype=float)
        phase = (float(t.sum()) / 1e-5) % 1.0
        value = 0.5 * float(np.sum((t - 1) ** 2)) + self.jump * 1e-5 * min(phase, 1 - phase)
        gradient = (t - 1) + (self.jump if phase < 0.5 else -self.jump)
        return value, gradient, -value + self.spread @ (t - 1)


@pytest.mark.parametrize("jump", [0.0, 5e-4])
def test_the_hessian_through_fine_kinks_is_taken_over_a_quarter_of_a_standard_error(jump):
    """The information is n·I (standard errors of 0.1). Over 1e-4 the kinks put noise of
    several times that into it; over a quarter of a standard error, a few percent, and
    the note says which was used."""
    information, _, _, note = estimate_module.likelihood_curvature(
        Rows(jump), np.array([1.2345678, 0.7654321]), [-np.inf] * 2, [np.inf] * 2
    )
    if jump == 0.0:
        assert note is None
        np.testing.assert_allclose(information, 100 * np.eye(2), atol=1e-4)
    else:
        assert note is not None and "quarter of a standard error" in note
        np.testing.assert_allclose(information, 100 * np.eye(2), atol=5)


def test_a_stop_at_a_kink_short_of_the_optimum_takes_newton_steps(one_period, monkeypatch):
    """An optimiser stopped `settled` (at a kink) 0.3 standard errors from the optimum:
    estimate takes the Newton steps of the curvature there, lands on the closed form
    and says so (without them the Newton-step criterion fails)."""
    model, df = one_period
    estimate, se = closed_form(df, TRUE["taste_shock_scale"])
    minimise = estimate_module.minimise

    def short(objective, x, *args, **kwargs):
        run = minimise(objective, x, *args, **kwargs)
        theta = np.array([estimate + 0.3 * se])  # unbounded: x = θ
        value, gradient, _ = objective.evaluate(jnp.asarray(theta))
        return run._replace(
            x=theta, value=value, gradient=float(np.max(np.abs(gradient))),
            reason="a kink (made up)", settled=True, last=None,
        )  # fmt: skip

    monkeypatch.setattr(estimate_module, "minimise", short)
    start = {**TRUE, "disutility_of_work": 0.3}
    result = lcm.estimate(model, start, data=df, free=["disutility_of_work"], tolerance=1e-10)
    assert result.converged, result.message
    assert "Newton step(s) of the curvature" in result.message
    # The first step lands within a fraction of the step tolerance (quadratic convergence).
    assert abs(result.estimates[0] - estimate) < 0.01 * se
