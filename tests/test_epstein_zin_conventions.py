"""Epstein–Zin's conventions (`terminal=`, `interpolate=`, the certainty equivalent).

pylcm's Epstein–Zin example (its grids and parameters, as its documentation gives them:
wealth, a two-state health chain, health-dependent survival into a `dead` regime whose
value is a bequest `scale·sqrt(wealth)`) and a richer case (γ = 5, ψ = 0.5, survival
0.97 → 0.85, health costs), each solved under every convention and compared with a
numpy float64 backward induction written here from the formulas of each convention:

- `terminal="certainty_equivalent"`: `CE = f⁻¹((1−s)·f(B) + s·Σ P(h'|h)·f(V'_h'))`;
- `terminal="time_aggregator"`: `β·(s·CE_alive^ρ + (1−s)·B^ρ)`, `CE_alive = f⁻¹(Σ P·f(V'))`;
- `interpolate="transformed"`: `f` (and `^ρ`) applied on the grid, then interpolated;
  `interpolate="values"`: interpolated, then transformed;
- `f(v) = v^(1−γ)` (`PowerMean`) or `f(v) = v` (`LinearExpectation`).
"""

from __future__ import annotations

import dataclasses

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

HEALTH_TRANSITION = np.array([[0.8, 0.2], [0.1, 0.9]])  # rows: bad, good
BAD_HEALTH_SURVIVAL_FACTOR = 0.9


@dataclasses.dataclass(frozen=True)
class Case:
    wealth: tuple[float, float, int]
    dead_wealth: tuple[float, float, int]
    consumption: tuple[float, float, int]
    survival: tuple[float, ...]  # by period; the last alive period's is 0
    beta: float
    gamma: float
    psi: float
    income: float
    health_cost: float
    bequest_scale: float


# pylcm's `lcm_examples/epstein_zin.py` at its defaults (γ = 0.5 as in its tests).
PYLCM = Case((0.5, 12.0, 6), (0.0, 12.0, 25), (0.5, 5.0, 7), (0.95, 0.85, 0.0), 0.9, 0.5, 2.0,
             0.5, 0.0, 1.0)  # fmt: skip
RICHER = Case((0.5, 12.0, 6), (0.5, 12.0, 24), (0.5, 5.0, 7), (0.97, 0.93, 0.89, 0.85, 0.0),
              0.95, 5.0, 0.5, 1.0, 0.3, 0.5)  # fmt: skip


def build(case: Case, aggregator, *, per_target: bool = False):
    lo, hi, _ = case.wealth

    def next_wealth(wealth, consumption, health, income, health_cost):
        cost = jnp.where(health == 0, health_cost, 0.0)
        return jnp.clip(wealth - consumption + income - cost, lo, hi)

    def health_probs(health):
        return jnp.asarray(HEALTH_TRANSITION)[health]

    def next_regime(health, period, survival):
        sp = survival[period] * jnp.where(health == 1, 1.0, BAD_HEALTH_SURVIVAL_FACTOR)
        return jnp.stack([sp, 1.0 - sp])

    health = lcm.MarkovTransition(health_probs)
    n_periods = len(case.survival) + 1
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(*case.wealth),
            "health": lcm.DiscreteGrid(["bad", "good"]),
        },
        actions={"consumption": lcm.LinSpacedGrid(*case.consumption)},
        state_transitions={
            "wealth": next_wealth,
            "health": {"alive": health} if per_target else health,
        },
        transition=lcm.MarkovTransition(next_regime),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
        functions={"utility": lambda consumption: consumption},
        aggregator=aggregator,
        active=range(n_periods - 1),
    )  # fmt: skip
    dead = lcm.Regime(
        states={"wealth": lcm.LinSpacedGrid(*case.dead_wealth)},
        functions={"utility": lambda wealth, bequest_scale: bequest_scale * jnp.sqrt(wealth)},
    )
    return lcm.Model(regimes={"alive": alive, "dead": dead}, n_periods=n_periods)


def params(case: Case, *, linear: bool = False):
    out = {
        "discount_factor": case.beta,
        "eis": case.psi,
        "survival": jnp.asarray(case.survival),
        "income": case.income,
        "health_cost": case.health_cost,
        "bequest_scale": case.bequest_scale,
    }
    return out if linear else {**out, "risk_aversion": case.gamma}


def oracle(case: Case, *, terminal: str, interpolate: str, linear: bool = False):
    """The alive values by period, `(wealth, health)`, by backward induction in numpy."""
    wealth = np.linspace(*case.wealth)
    dead_wealth = np.linspace(*case.dead_wealth)
    consumption = np.linspace(*case.consumption)
    gamma, rho, beta = case.gamma, 1.0 - 1.0 / case.psi, case.beta

    def f(v):
        return v if linear else v ** (1.0 - gamma)

    def f_inv(m):
        return m if linear else m ** (1.0 / (1.0 - gamma))

    def expect(transform, x, grid, values):
        """`transform(V)` at `x`: interpolated after or before the transform."""
        assert grid[0] <= x <= grid[-1]  # no extrapolation: np.interp would clamp
        if interpolate == "values":
            return transform(np.interp(x, grid, values))
        return np.interp(x, grid, transform(values))

    bequest = case.bequest_scale * np.sqrt(dead_wealth)
    values, following = {}, None
    for period in reversed(range(len(case.survival))):
        v = np.full((2, len(wealth)), -np.inf)
        for h in range(2):
            s = case.survival[period] * (1.0 if h == 1 else BAD_HEALTH_SURVIVAL_FACTOR)
            for i, w in enumerate(wealth):
                for c in consumption[consumption <= w]:
                    x = np.clip(w - c + case.income - (case.health_cost if h == 0 else 0.0),
                                wealth[0], wealth[-1])  # fmt: skip
                    alive = 0.0
                    if s > 0:
                        alive = sum(HEALTH_TRANSITION[h, k] * expect(f, x, wealth, following[k])
                                    for k in range(2))  # fmt: skip
                    if terminal == "certainty_equivalent":
                        mean = (1 - s) * expect(f, x, dead_wealth, bequest) + s * alive
                        future = f_inv(mean) ** rho
                    else:
                        future = (1 - s) * expect(lambda b: b**rho, x, dead_wealth, bequest)
                        if s > 0:
                            future += s * f_inv(alive) ** rho
                    q = ((1 - beta) * c**rho + beta * future) ** (1 / rho)
                    v[h, i] = max(v[h, i], q)
        following = v
        values[period] = v.T
    return values


CONVENTIONS = [
    ("certainty_equivalent", "values"),  # pylcm's
    ("certainty_equivalent", "transformed"),  # the default
    ("time_aggregator", "transformed"),  # this library's before
    ("time_aggregator", "values"),
]


def check(model, p, expected):
    solution = model.solve(p)
    for period, v in expected.items():
        np.testing.assert_allclose(solution.value("alive", period), v, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", [PYLCM, RICHER], ids=["pylcm-example", "richer"])
@pytest.mark.parametrize(("terminal", "interpolate"), CONVENTIONS)
def test_each_convention_matches_its_numpy_oracle(case, terminal, interpolate):
    aggregator = lcm.EpsteinZin(terminal=terminal, interpolate=interpolate)
    expected = oracle(case, terminal=terminal, interpolate=interpolate)
    check(build(case, aggregator), params(case), expected)


def test_the_defaults_are_death_in_the_certainty_equivalent_and_transformed_values():
    default = lcm.EpsteinZin()
    assert (default.terminal, default.interpolate) == ("certainty_equivalent", "transformed")
    expected = oracle(RICHER, terminal="certainty_equivalent", interpolate="transformed")
    check(build(RICHER, default), params(RICHER), expected)


@pytest.mark.parametrize("terminal", ["certainty_equivalent", "time_aggregator"])
def test_linear_certainty_equivalent_matches_its_numpy_oracle(terminal):
    """pylcm's `certainty_equivalent=None`; no `risk_aversion` parameter."""
    aggregator = lcm.EpsteinZin(certainty_equivalent=lcm.LinearExpectation(), terminal=terminal)
    model = build(PYLCM, aggregator)
    assert "risk_aversion" not in model.params_template()
    # (Linear: interpolating V' or f(V') = V' is the same, except for V^ρ in the time
    # aggregator, interpolated after the transform by default.)
    expected = oracle(PYLCM, terminal=terminal, interpolate="transformed", linear=True)
    check(model, params(PYLCM, linear=True), expected)


def test_the_conventions_move_values():
    """Each choice matters on the richer case (the differences the docs quote)."""
    solved = {
        c: build(RICHER, lcm.EpsteinZin(terminal=c[0], interpolate=c[1]))
        .solve(params(RICHER))
        .value("alive", 0)
        for c in CONVENTIONS
    }
    pylcm = solved[CONVENTIONS[0]]
    for convention in CONVENTIONS[1:]:
        assert np.max(np.abs(solved[convention] / pylcm - 1)) > 1e-3


def test_zero_terminal_value_inside_the_certainty_equivalent_is_an_error():
    """pylcm's bequest grid starts at wealth 0: with γ > 1 the CE form cannot read it."""
    model = build(PYLCM, lcm.EpsteinZin())
    with pytest.raises(lcm.ModelInitializationError, match=r"Regime 'alive'.*time_aggregator"):
        model.solve({**params(PYLCM), "risk_aversion": 5.0})
    # In the time aggregator, 0^(1-1/ψ) is read as 0: no error.
    build(PYLCM, lcm.EpsteinZin(terminal="time_aggregator")).solve(
        {**params(PYLCM), "risk_aversion": 5.0}
    )


def test_unknown_conventions_are_model_errors():
    with pytest.raises(lcm.ModelInitializationError, match=r"terminal.*'death'"):
        lcm.EpsteinZin(terminal="death")
    with pytest.raises(lcm.ModelInitializationError, match=r"interpolate.*'levels'"):
        lcm.EpsteinZin(interpolate="levels")
    with pytest.raises(lcm.ModelInitializationError, match="LinearExpectation"):
        lcm.EpsteinZin(certainty_equivalent=None)


# ------------------------------------------------------- per-target MarkovTransition
def test_a_per_target_markov_transition_into_the_only_regime_with_the_state():
    """pylcm's spelling `{"alive": MarkovTransition(f)}` (dead has no health) is the plain
    `MarkovTransition(f)`: under both interpolations (the per-node one reads it in the
    kernel, the default contracts it once per period)."""
    for interpolate in ("transformed", "values"):
        aggregator = lcm.EpsteinZin(interpolate=interpolate)
        plain = build(RICHER, aggregator).solve(params(RICHER))
        per_target = build(RICHER, aggregator, per_target=True).solve(params(RICHER))
        np.testing.assert_allclose(per_target.values["alive"], plain.values["alive"], rtol=1e-12)


A = np.array([[0.7, 0.3], [0.2, 0.8]])  # health law when working on
B = np.array([[0.4, 0.6], [0.05, 0.95]])  # health law when retiring


def _two_laws(per_target: bool):
    """Working (labor: 0 work, 1 retire) or retired; health's law depends on the regime
    moved to: per target, or written by hand on the choice that decides the regime."""
    if per_target:
        health = {
            "working": lcm.MarkovTransition(lambda health: jnp.asarray(A)[health]),
            "retired": lcm.MarkovTransition(lambda health: jnp.asarray(B)[health]),
        }
    else:
        health = lcm.MarkovTransition(
            lambda health, labor: jnp.where(
                labor == 1, jnp.asarray(B)[health], jnp.asarray(A)[health]
            )
        )  # fmt: skip
    retired_health = lcm.MarkovTransition(lambda health: jnp.asarray(B)[health])
    wealth = lcm.LinSpacedGrid(1.0, 8.0, 5)
    states = {"wealth": wealth, "health": lcm.DiscreteGrid(["bad", "good"])}
    consumption = lcm.LinSpacedGrid(0.5, 7.5, 6)

    def next_wealth(wealth, consumption, income):
        return 1.02 * (wealth - consumption) + income

    working = lcm.Regime(
        states=states,
        actions={"labor": lcm.DiscreteGrid(["work", "retire"]), "consumption": consumption},
        functions={
            "utility": lambda consumption, labor, health: (
                jnp.log(consumption) - 0.4 * (labor == 0) + 0.2 * health
            ),
            "income": lambda labor: jnp.where(labor == 0, 1.5, 0.0),
        },
        state_transitions={"wealth": next_wealth, "health": health},
        transition=lambda labor: jnp.where(labor == 1, 1, 0),
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )  # fmt: skip
    retired = lcm.Regime(
        states=states,
        actions={"consumption": consumption},
        functions={"utility": lambda consumption, health: jnp.log(consumption) + 0.2 * health},
        state_transitions={
            "wealth": lambda wealth, consumption: 1.02 * (wealth - consumption) + 0.5,
            "health": retired_health,
        },
        transition=lambda: 1,
        constraints={"budget": lambda consumption, wealth: consumption <= wealth},
    )  # fmt: skip
    return lcm.Model(regimes={"working": working, "retired": retired}, n_periods=4)


@pytest.mark.slow
def test_per_target_markov_transitions_equal_the_law_written_on_the_choice():
    p = {"discount_factor": 0.95}
    per_target, by_hand = _two_laws(True), _two_laws(False)
    a, b = per_target.solve(p), by_hand.solve(p)
    for regime in ("working", "retired"):
        np.testing.assert_allclose(a.values[regime], b.values[regime], rtol=1e-12, atol=1e-12)
    initial = {"regime": ["working"] * 6, "wealth": np.linspace(1.0, 8.0, 6), "health": [0, 1] * 3}
    sim_a = per_target.simulate(p, initial, a, key=jax.random.key(3)).to_dataframe()
    sim_b = by_hand.simulate(p, initial, b, key=jax.random.key(3)).to_dataframe()
    assert sim_a.equals(sim_b)
    dist_a, dist_b = per_target.distribution(p, initial, a), by_hand.distribution(p, initial, b)
    for regime in ("working", "retired"):
        np.testing.assert_allclose(dist_a.mass[regime], dist_b.mass[regime], atol=1e-12)


def test_bad_per_target_probabilities_are_caught_where_the_target_is_reached():
    model = _two_laws(True)
    bad = model.regimes["working"].replace(
        state_transitions={
            **model.regimes["working"].state_transitions,
            "health": {
                "working": lcm.MarkovTransition(lambda health: jnp.asarray(A)[health]),
                "retired": lcm.MarkovTransition(lambda: jnp.array([0.5, 0.49])),
            },
        }
    )
    broken = lcm.Model(regimes={"working": bad, "retired": model.regimes["retired"]}, n_periods=4)
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match=r"'working'.*next_health"):
        broken.solve({"discount_factor": 0.95})


def test_a_per_target_markov_transition_of_a_continuous_state_is_a_model_error():
    alive = build(PYLCM, lcm.EpsteinZin()).regimes["alive"]
    wrong = alive.replace(
        state_transitions={
            **alive.state_transitions,
            "wealth": {"alive": lcm.MarkovTransition(lambda: jnp.ones(6) / 6)},
        }
    )
    with pytest.raises(lcm.ModelInitializationError, match=r"'alive'.*'wealth'.*continuous"):
        lcm.Model(regimes={"alive": wrong, "dead": build(PYLCM, None).regimes["dead"]}, n_periods=4)
