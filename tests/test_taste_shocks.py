"""Taste shocks on the discrete actions, checked against an independent numpy oracle.

The model is the API.md retirement model with `ExtremeValueShocks` on the labor choice,
on small grids with a positive interest rate (so next-period wealth falls between grid
points and below the grid). The oracle below is plain numpy backward induction: for each
labor choice `d`, `v_d` is the max over the consumption grid of utility plus the
discounted, linearly interpolated (and extrapolated) next-period value; the working
value is `λ·logsumexp(v_d / λ)`. Conditional choice probabilities `softmax(v_d / λ)` are
checked against the oracle and against simulated choice frequencies.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation import choice_probabilities, discrete_values  # noqa: E402
from tests.models import retirement  # noqa: E402

N_PERIODS = 4
WEALTH = (1.0, 60.0, 30)
CONSUMPTION = (1.0, 60.0, 45)
PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "disutility_of_work": 0.6,
    "wage": 8.0,
    "taste_shock_scale": 0.4,
}


RegimeId, Labor = retirement.RegimeId, retirement.Labor
utility, utility_retired = retirement.utility, retirement.utility_retired
labor_income, next_wealth = retirement.labor_income, retirement.next_wealth
next_wealth_retired, next_regime = retirement.next_wealth_retired, retirement.next_regime
borrowing = retirement.borrowing


def build_model(n_periods=N_PERIODS, wealth=WEALTH, consumption=CONSUMPTION, taste_shocks=True):
    wealth_grid = lcm.LinSpacedGrid(*wealth)
    consumption_grid = lcm.LinSpacedGrid(*consumption)
    working = lcm.Regime(
        states={"wealth": wealth_grid},
        actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption_grid},
        functions={"utility": utility, "labor_income": labor_income},
        state_transitions={"wealth": next_wealth},
        transition=next_regime,
        constraints={"borrowing": borrowing},
        taste_shocks=lcm.ExtremeValueShocks() if taste_shocks else None,
    )
    retired = lcm.Regime(
        states={"wealth": wealth_grid},
        actions={"consumption": consumption_grid},
        functions={"utility": utility_retired},
        state_transitions={"wealth": next_wealth_retired},
        transition=lambda: RegimeId.retired,
        constraints={"borrowing": borrowing},
    )
    return lcm.Model(
        regimes={"working": working, "retired": retired}, n_periods=n_periods, regime_ids=RegimeId
    )


# ---------------------------------------------------------------------------------------
# The numpy oracle
# ---------------------------------------------------------------------------------------


def _interp(grid, values, x):
    """Linear interpolation on an evenly spaced grid, linear extrapolation outside."""
    step = grid[1] - grid[0]
    i = np.clip(np.floor((x - grid[0]) / step).astype(int), 0, len(grid) - 2)
    w = (x - grid[i]) / step
    return (1 - w) * values[i] + w * values[i + 1]


def oracle_solve(params, n_periods=N_PERIODS, wealth=WEALTH, consumption=CONSUMPTION):
    """Values (working, retired) and v_d of the working regime, each `(n_periods, n_wealth...)`."""
    w = np.linspace(*wealth)
    c = np.linspace(*consumption)
    beta = params["discount_factor"]
    r = params["interest_rate"]
    delta = params["disutility_of_work"]
    wage = params["wage"]
    scale = params["taste_shock_scale"]
    next_working = np.zeros(len(w))
    next_retired = np.zeros(len(w))
    v_working = np.zeros((n_periods, len(w)))
    v_retired = np.zeros((n_periods, len(w)))
    v_d_all = np.zeros((n_periods, len(w), 2))
    for t in reversed(range(n_periods)):
        feasible = c[None, :] <= w[:, None]
        saving = (1 + r) * (w[:, None] - c[None, :])
        q_retired = np.log(c)[None, :] + beta * _interp(w, next_retired, saving)
        q_work = np.log(c)[None, :] - delta + beta * _interp(w, next_working, saving + wage)
        q_retire = q_retired
        v_d = np.stack(
            [np.where(feasible, q, -np.inf).max(axis=1) for q in (q_work, q_retire)], axis=-1
        )
        top = v_d.max(axis=1, keepdims=True)
        v_working[t] = top[:, 0] + scale * np.log(np.exp((v_d - top) / scale).sum(axis=1))
        v_retired[t] = np.where(feasible, q_retired, -np.inf).max(axis=1)
        v_d_all[t] = v_d
        next_working, next_retired = v_working[t], v_retired[t]
    return v_working, v_retired, v_d_all


def oracle_probabilities(v_d, scale):
    z = v_d / scale
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return build_model()


@pytest.fixture(scope="module")
def solution(model):
    return model.solve(PARAMS)


def test_oracle_is_not_trivial():
    _, _, v_d = oracle_solve(PARAMS)
    p = oracle_probabilities(v_d, PARAMS["taste_shock_scale"])
    # Both choices have material probability somewhere, and the shocks matter.
    assert p[..., 0].max() > 0.9 and p[..., 1].max() > 0.75
    assert np.sum((p[..., 0] > 0.1) & (p[..., 0] < 0.9)) >= 5


@pytest.mark.parametrize("scale", [0.4, 2.0])
def test_values_match_numpy_oracle(model, scale):
    params = {**PARAMS, "taste_shock_scale": scale}
    assert_matches_oracle(model.solve(params), params)


def assert_matches_oracle(solution, params):
    v_working, v_retired, _ = oracle_solve(params)
    for t in range(N_PERIODS):
        np.testing.assert_allclose(
            solution.value("working", t), v_working[t], rtol=1e-10, atol=1e-10
        )
        np.testing.assert_allclose(
            solution.value("retired", t), v_retired[t], rtol=1e-10, atol=1e-10
        )


def test_logsumexp_is_not_a_max(model):
    """With a large scale the solved value is visibly above the max over v_d (no shift)."""
    params = {**PARAMS, "taste_shock_scale": 2.0}
    solution = model.solve(params)
    v_d = discrete_values(model, params, solution, "working", 0)
    gap = np.asarray(solution.value("working", 0) - jnp.max(v_d, axis=-1))
    assert np.all(gap > 0) and gap.max() > 0.5


def test_choice_probabilities_match_oracle(model, solution):
    _, _, v_d = oracle_solve(PARAMS)
    expected = oracle_probabilities(v_d, PARAMS["taste_shock_scale"])
    for t in range(N_PERIODS):
        np.testing.assert_allclose(
            discrete_values(model, PARAMS, solution, "working", t), v_d[t], rtol=1e-10, atol=1e-10
        )
        p = choice_probabilities(model, PARAMS, solution, "working", t)
        assert p.shape == (WEALTH[2], len(Labor))
        np.testing.assert_allclose(np.sum(p, axis=-1), 1.0, atol=1e-12)
        np.testing.assert_allclose(p, expected[t], rtol=1e-9, atol=1e-12)


def test_value_is_logsumexp_of_discrete_values(model, solution):
    for t in range(N_PERIODS):
        v_d = discrete_values(model, PARAMS, solution, "working", t)
        lam = PARAMS["taste_shock_scale"]
        np.testing.assert_allclose(
            lam * jax.nn.logsumexp(v_d / lam, axis=-1), solution.value("working", t), rtol=1e-12
        )


def test_choice_probabilities_without_taste_shocks_are_one_hot():
    model = build_model(taste_shocks=False)
    params = {k: v for k, v in PARAMS.items() if k != "taste_shock_scale"}
    solution = model.solve(params)
    p = np.asarray(choice_probabilities(model, params, solution, "working", 0))
    assert set(np.unique(p)) <= {0.0, 1.0}
    np.testing.assert_array_equal(p.sum(axis=-1), 1.0)
    # A regime without discrete actions: a single certain "choice" per state.
    q = choice_probabilities(model, params, solution, "retired", 0)
    np.testing.assert_array_equal(q, np.ones(WEALTH[2]))


def test_choice_probabilities_match_simulated_frequencies(model, solution):
    """Simulate 1e5 subjects from grid states; period-0 labor choices match P(d | s)."""
    grid = np.linspace(*WEALTH)
    p = np.asarray(choice_probabilities(model, PARAMS, solution, "working", 0))[:, Labor.work]
    # Grid states where the choice is genuinely uncertain, plus one near-certain one.
    chosen = np.flatnonzero((p > 0.05) & (p < 0.95))[:4]
    chosen = np.append(chosen, np.argmax(p))
    n_each = 100_000 // len(chosen)
    wealth = np.repeat(grid[chosen], n_each)
    result = model.simulate(
        PARAMS,
        {"regime": np.zeros(wealth.size, dtype=int), "wealth": wealth},
        solution=solution,
        key=jax.random.key(7),
    )
    works = np.asarray(result.actions["labor"][0]) == Labor.work
    for k, i in enumerate(chosen):
        freq = works[k * n_each : (k + 1) * n_each].mean()
        se = np.sqrt(max(p[i] * (1 - p[i]), 1e-4) / n_each)
        assert abs(freq - p[i]) < 4.5 * se, (grid[i], freq, p[i], se)


def test_choice_probabilities_errors(model, solution):
    with pytest.raises(lcm.InvalidPeriodError, match="period"):
        choice_probabilities(model, PARAMS, solution, "working", N_PERIODS)
    with pytest.raises(lcm.InvalidRegimeError, match="unemployed"):
        choice_probabilities(model, PARAMS, solution, "unemployed", 0)
    p = choice_probabilities(model, PARAMS, solution, "working", np.int64(1))
    np.testing.assert_allclose(p, choice_probabilities(model, PARAMS, solution, "working", 1))


@pytest.mark.parametrize(
    ("labor", "consumption"), [(1, 0), (0, 10), (1, 7)], ids=["labor", "consumption", "both"]
)
def test_splayed_actions_match_the_oracle(model, labor, consumption):
    """With the discrete action splayed, the chunks' logsumexps are combined (a running
    logsumexp); with the continuous one, their maxima: the same values as the oracle."""
    splayed = model.with_batch_size("labor", labor) if labor else model
    splayed = splayed.with_batch_size("consumption", consumption) if consumption else splayed
    assert_matches_oracle(splayed.solve(PARAMS), PARAMS)
