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
        states={"wealth": lcm.LinSpacedGrid(*case.wealth), "health": lcm.DiscreteGrid(["bad", "good"])},
        actions={"consumption": lcm.LinSpacedGrid(*case.consumption)},
        state_transitions={"wealth": next_wealth, "health": {"alive": health} if per_target else health},
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
    with pytest.raises(lcm.ModelInitializationError, match="Regime 'alive'.*time_aggregator"):
        model.solve({**params(PYLCM), "risk_aversion": 5.0})
    # In the time aggregator, 0^(1-1/ψ) is read as 0: no error.
    build(PYLCM, lcm.EpsteinZin(terminal="time_aggregator")).solve(
        {**params(PYLCM), "risk_aversion": 5.0}
    )


def test_unknown_conventions_are_model_errors():
    with pytest.raises(lcm.ModelInitializationError, match="terminal.*'death'"):
        lcm.EpsteinZin(terminal="death")
    with pytest.raises(lcm.ModelInitializationError, match="interpolate.*'levels'"):
        lcm.EpsteinZin(interpolate="levels")
    with pytest.raises(lcm.ModelInitializationError, match="LinearExpectation"):
        lcm.EpsteinZin(certainty_equivalent=None)
