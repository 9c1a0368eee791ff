"""`continuation_at`, the kernel's read of the expected continuation at one point, against
a numpy oracle written from its documented semantics: per-axis indexing, interpolation
corners, stochastic nodes, `-inf` ignored at zero mass and absorbing at nonzero mass
(extrapolation weights included)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from lcm_eqx._solve import _continuation  # noqa: E402
from lcm_eqx._solve._continuation import (  # noqa: E402
    Layout,
    continuation_at,
    mask_neg_inf,
    settle,
    weighted,
)


def oracle(prepared, n_stochastic, fixed, intervals, probabilities):
    """Sum over stochastic nodes and corners of mass * node, per the docstring."""
    prepared = np.asarray(prepared)
    stochastic_shape = prepared.shape[:n_stochastic]
    fixed = [
        int(np.clip(c, 0, n - 1))
        for c, n in zip(fixed, prepared.shape[n_stochastic:], strict=False)
    ]
    total, blocked = 0.0, False
    for nodes in itertools.product(*(range(n) for n in stochastic_shape)):
        p = np.prod([probabilities[k][i] for k, i in enumerate(nodes)]) if nodes else 1.0
        for corner in itertools.product((0, 1), repeat=len(intervals)):
            weight = np.prod(
                [w if up else 1 - w for (_, w), up in zip(intervals, corner, strict=True)]
            )
            index = (
                *nodes,
                *fixed,
                *(lo + up for (lo, _), up in zip(intervals, corner, strict=True)),
            )
            mass, node = p * weight, prepared[index]
            if mass == 0:
                continue
            if np.isneginf(node):
                blocked = True
            else:
                total += mass * node
    return -np.inf if blocked else total


def _case(seed, n_stochastic, n_fixed, n_continuous, stacked):
    rng = np.random.default_rng(seed)
    shape = (
        tuple(rng.integers(2, 4, n_stochastic))
        + ((3,) if stacked else ())
        + tuple(rng.integers(2, 5, n_fixed))
        + tuple(rng.integers(3, 6, n_continuous))
    )
    prepared = rng.normal(size=shape)
    prepared[rng.random(shape) < 0.15] = -np.inf
    names = [f"s{i}" for i in range(n_stochastic)]
    current = [f"c{i}" for i in range(n_fixed)]
    continuous = [f"x{i}" for i in range(n_continuous)]
    layout = Layout(tuple(names), tuple(current), (), tuple(continuous))
    probabilities = []
    for n in shape[:n_stochastic]:
        p = rng.random(n)
        p[rng.random(n) < 0.3] = 0.0  # zero-probability nodes, possibly -inf
        probabilities.append(p / max(p.sum(), 1e-12))
    offset = n_stochastic + int(stacked)
    fixed = [int(rng.integers(0, n)) for n in shape[offset : offset + n_fixed]]
    intervals = []
    for n in shape[offset + n_fixed :]:
        lo = int(rng.integers(0, n - 1))
        # exact grid points (weight 0 or 1), interior and extrapolating weights
        weight = float(rng.choice([0.0, 1.0, rng.random(), -0.5, 1.7]))
        intervals.append((lo, weight))
    regime_index = int(rng.integers(0, 3)) if stacked else None
    result = continuation_at(
        mask_neg_inf(jnp.asarray(prepared)),
        layout,
        current=dict(zip(current, map(jnp.asarray, fixed), strict=True)),
        discrete={},
        intervals={
            n: (jnp.asarray(lo, jnp.int32), jnp.asarray(w))
            for n, (lo, w) in zip(continuous, intervals, strict=True)
        },
        probabilities={n: jnp.asarray(p) for n, p in zip(names, probabilities, strict=True)},
        regime_index=None if regime_index is None else jnp.asarray(regime_index),
    )
    all_fixed = ([regime_index] if stacked else []) + fixed
    return result, oracle(prepared, n_stochastic, all_fixed, intervals, probabilities)


# The numbers of stochastic, fixed and continuous axes in a Latin square (every pair of
# their values occurs, 9 of the 27 triples) and the largest case, each stacked and not:
# each case compiles twelve readers, and the full product took 54 cases.
PAIRWISE = [(a, b, (a + b) % 3) for a in range(3) for b in range(3)] + [(2, 2, 2)]


@pytest.fixture(params=["gather", "dense"])
def read(request, monkeypatch):
    """Both reads of one continuous axis (an accelerator's default is the dense one)."""
    monkeypatch.setattr(_continuation, "READ", request.param)
    return request.param


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("n_stochastic, n_fixed, n_continuous", PAIRWISE)
def test_continuation_at_matches_oracle(n_stochastic, n_fixed, n_continuous, stacked, read):
    if read == "dense" and n_continuous != 1:
        pytest.skip("the dense read is for one continuous axis")
    n_neg_inf = 0
    for seed in range(12):
        result, expected = _case(seed, n_stochastic, n_fixed, n_continuous, stacked)
        if np.isneginf(expected):
            n_neg_inf += 1
            assert np.isneginf(result), (seed, result)
        else:
            np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)
    if n_stochastic + n_continuous:  # the cases exercise both outcomes
        assert 0 < n_neg_inf < 12


def test_weighted_and_settle():
    m = jnp.asarray([0.0, 0.5, -0.5, 0.0, 2.0])
    v = jnp.asarray([-jnp.inf, -jnp.inf, -jnp.inf, 3.0, 3.0])
    # zero mass ignores -inf; positive mass keeps it; negative (extrapolation) mass flips it
    np.testing.assert_array_equal(weighted(m, v), [0.0, -np.inf, np.inf, 0.0, 6.0])
    # settle: a sum that met a -inf with nonzero mass (+inf, or NaN from inf - inf) is -inf
    totals = jnp.asarray([1.5, -jnp.inf, jnp.inf, jnp.nan])
    np.testing.assert_array_equal(settle(totals), [1.5, -np.inf, -np.inf, -np.inf])


def test_nan_in_next_values_makes_the_period_nan():
    """NaN is never hidden: a NaN value next period makes the whole period NaN (the
    kernel's interpolation does no per-point NaN bookkeeping), while the period where
    the NaN appears keeps it where it is, for the NaN check to report."""
    import lcm_eqx as lcm

    wealth = lcm.LinSpacedGrid(1.0, 10.0, 10)
    regime = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": lcm.LinSpacedGrid(1.0, 10.0, 20)},
        functions={
            # NaN at wealth in (4, 5) in the last period only
            "utility": lambda consumption, wealth, period: jnp.where(
                (period == 2) & (wealth > 4.0) & (wealth < 5.5), jnp.nan, jnp.log(consumption)
            )
        },
        state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 1.0},
        transition=lambda: 0,
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model({"alive": regime}, 3)
    values = np.asarray(model.solve({"discount_factor": 0.9}, validate="off").values["alive"])
    np.testing.assert_array_equal(
        np.isnan(values[2]), (wealth.to_jax() > 4) & (wealth.to_jax() < 5.5)
    )
    assert np.isnan(values[:2]).all()
    with pytest.raises(lcm.NaNError):
        model.solve({"discount_factor": 0.9})


def test_dense_read_solves_and_differentiates_like_the_gathers(monkeypatch):
    """A solve with one continuous axis (the dense read's class; the Markov income is
    contracted before the kernel, so its codes are fixed ones) gives the same values
    and the same gradient in both reads; the nodes beyond `DENSE_READ_NODES` keep the
    gathers."""
    from tests.test_dcegm import STOCHASTIC_PARAMS, stochastic_model

    params = {**STOCHASTIC_PARAMS}

    def mean_value(risk_aversion):
        p = {**params, "risk_aversion": risk_aversion}
        return jnp.mean(model.solve(p).value("alive", 0))

    x = jnp.asarray(params["risk_aversion"])
    traced = []
    dense = _continuation._read_dense
    monkeypatch.setattr(
        _continuation, "_read_dense", lambda *a, **k: traced.append(1) or dense(*a, **k)
    )
    results = {}
    for mode in ("gather", "dense"):
        monkeypatch.setattr(_continuation, "READ", mode)
        # A model of its own per read: its programs are traced anew.
        model = stochastic_model(n_wealth=20, n_consumption=50)  # 20 nodes per point
        values = np.asarray(model.solve(params).values["alive"])
        results[mode] = (values, *jax.value_and_grad(mean_value)(x))
    (v_g, m_g, g_g), (v_d, m_d, g_d) = results["gather"], results["dense"]
    finite = np.isfinite(v_g)
    assert finite.mean() > 0.5
    np.testing.assert_array_equal(np.isfinite(v_d), finite)
    np.testing.assert_allclose(v_d[finite], v_g[finite], rtol=1e-12)
    np.testing.assert_allclose(m_d, m_g, rtol=1e-12)
    np.testing.assert_allclose(g_d, g_g, rtol=1e-10)
    assert abs(float(g_g)) > 0
    assert traced  # the dense read was the one traced
    traced.clear()
    monkeypatch.setattr(_continuation, "DENSE_READ_NODES", 19)
    stochastic_model(n_wealth=20, n_consumption=50).solve(params)
    assert not traced


def test_dense_read_of_transformed_nodes_matches_the_epstein_zin_oracle(monkeypatch):
    """Epstein-Zin reads each stochastic node, transforms it, then takes the expectation
    (`transform`): through the dense read, its values equal the numpy oracle."""
    from tests import test_aggregators as ez

    traced = []
    dense = _continuation._read_dense
    monkeypatch.setattr(
        _continuation, "_read_dense", lambda *a, **k: traced.append(1) or dense(*a, **k)
    )
    monkeypatch.setattr(_continuation, "READ", "dense")
    solution = ez.ez_model().solve(ez.ez_params(risk_aversion=4.0, eis=0.5))
    values = np.moveaxis(np.asarray(solution.values["alive"]), 1, 2)  # (t, income, wealth)
    np.testing.assert_allclose(values, ez.ez_oracle(0.95, 4.0, 0.5), rtol=1e-10, atol=0)
    assert traced
