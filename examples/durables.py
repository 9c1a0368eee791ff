"""A durable-goods model solved by the nested endogenous grid method (`lcm.NEGM`) or by
grid search.

Each period an agent with liquid wealth `m` (cash on hand), a durable stock `n` and
log income `y` (a Rouwenhorst AR(1) process) either keeps the durable and consumes
out of `m`, or sells it at an adjustment cost `τ` and buys a new stock `d` out of total
resources `x = m + (1 − τ)·n`. Utility is CRRA over a Cobb–Douglas aggregate,
`(c^α·(h + h̲)^(1−α))^(1−ρ) / (1 − ρ)` with `h` the durable held this period; the stock
depreciates at rate `δ`; liquid wealth earns `R` and no borrowing is allowed:

    keep:    a = m − c,          n' = (1 − δ)·n
    adjust:  a = x − d − c,      n' = (1 − δ)·d
    m' = R·a + exp(y)

`build(...)` returns the model and its parameters; `solver="negm"` solves it with
`lcm.NEGM` (no consumption or durable grid: consumption from the Euler equation, the
new stock by golden section), `solver="grid"` with `lcm.GridSearch` on grids of
consumption and the new stock, `solver="grid-shares"` with `lcm.GridSearch` on grids of
shares: the new stock a share of total resources (at most the durable grid's top) and
consumption a share of what is left (liquid wealth for a keeper), so that every action
point is feasible and the grids follow the budget.
`euler_errors(...)` measures the liquid margin's Euler errors of an `NEGM` solution,
written apart from the solver in numpy.

Run from the repository root: `python examples/durables.py`.
"""

from __future__ import annotations

from enum import IntEnum

import jax.numpy as jnp
import numpy as np

import lcm_eqx as lcm


class Adjust(IntEnum):
    keep = 0
    adjust = 1


PARAMS = {
    "discount_factor": 0.965,
    "interest_rate": 0.03,
    "risk_aversion": 2.0,
    "alpha": 0.9,
    "durable_floor": 0.01,
    "depreciation": 0.15,
    "adjustment_cost": 0.1,
}

INCOME = {"rho": 0.9, "sigma": 0.1}


def held(durable, new_durable, adjust):
    return jnp.where(adjust == Adjust.adjust, new_durable, durable)


def utility(consumption, held, alpha, risk_aversion, durable_floor):
    aggregate = consumption**alpha * (held + durable_floor) ** (1.0 - alpha)
    return aggregate ** (1.0 - risk_aversion) / (1.0 - risk_aversion)


def resources(wealth, durable, adjustment_cost):
    return wealth + (1.0 - adjustment_cost) * durable


def saved(wealth, consumption, new_durable, adjust, resources):
    return jnp.where(adjust == Adjust.adjust, resources - new_durable, wealth) - consumption


def income(log_income):
    return jnp.exp(log_income)


def next_wealth(saved, income, interest_rate):
    return (1.0 + interest_rate) * saved + income


def next_durable(held, depreciation):
    return (1.0 - depreciation) * held


def no_borrowing(saved):
    return saved >= 0.0


def budget(wealth, new_durable, adjust, resources):
    return jnp.where(adjust == Adjust.adjust, resources - new_durable, wealth)


def consumption_of_share(consumption_share, budget):
    return consumption_share * budget


def build(
    n_periods: int = 20,
    *,
    solver: str = "negm",
    n_wealth: int = 80,
    n_durable: int = 40,
    n_income: int = 3,
    wealth_max: float = 20.0,
    durable_max: float = 5.0,
    n_savings: int = 120,
    n_resources: int = 160,
    adjuster_points: int = 64,
    n_consumption: int = 100,
    n_new_durable: int = 60,
    wealth_power: float = 3.0,
    durable_power: float = 3.0,
    refine: bool = False,
    action_batch_size: int = 0,
):
    """The durable-goods model and its parameters.

    `solver`: `"negm"` (`lcm.NEGM` on `n_savings` savings points, `n_resources` points
    of total resources and `adjuster_points` candidates of the new stock), `"grid"`
    (`lcm.GridSearch` on `n_consumption × n_new_durable` action points) or
    `"grid-shares"` (`lcm.GridSearch` on `n_consumption` consumption shares, spaced
    geometrically from 0.01 to 1, × `n_new_durable` shares of the new stock from 0 to 1;
    `refine=True` polishes both off the grid, `lcm.GridSearch(refine=True)`).

    The liquid grid (and NEGM's savings and resources grids) is `u ** wealth_power`
    of evenly spaced `u`, the durable grid `u ** durable_power`: dense near the
    borrowing limit and a zero stock, where utility bends most. With the same powers,
    the nodes of `n` points are nodes of `k·(n − 1) + 1` points. `action_batch_size`
    splays the grid search's first action grid (bounded memory on large grids).
    """
    wealth = lcm.IrregSpacedGrid(
        points=list(0.1 + (wealth_max - 0.1) * np.linspace(0.0, 1.0, n_wealth) ** wealth_power)
    )
    durable = lcm.IrregSpacedGrid(
        points=list(durable_max * np.linspace(0.0, 1.0, n_durable) ** durable_power)
    )
    consumption = lcm.IrregSpacedGrid(
        points=list(1e-3 + (wealth_max + durable_max) * np.linspace(0, 1, n_consumption) ** 2),
        batch_size=action_batch_size,
    )
    new_durable = lcm.LinSpacedGrid(start=0.0, stop=durable_max, n_points=n_new_durable)
    actions = {
        "adjust": lcm.DiscreteGrid(Adjust),
        "consumption": consumption,
        "new_durable": new_durable,
    }
    functions = {
        "utility": utility,
        "held": held,
        "resources": resources,
        "saved": saved,
        "income": income,
    }
    regime_solver = None
    if solver in ("grid", "grid-shares") and refine:
        regime_solver = lcm.GridSearch(refine=True)
    if solver == "grid-shares":

        def new_durable_of_share(durable_share, resources):
            return durable_share * jnp.minimum(resources, durable_max)

        actions = {
            "adjust": lcm.DiscreteGrid(Adjust),
            "consumption_share": lcm.IrregSpacedGrid(
                points=list(np.geomspace(0.01, 1.0, n_consumption)), batch_size=action_batch_size
            ),
            "durable_share": lcm.LinSpacedGrid(start=0.0, stop=1.0, n_points=n_new_durable),
        }
        functions = {
            **functions,
            "budget": budget,
            "consumption": consumption_of_share,
            "new_durable": new_durable_of_share,
        }
    elif solver == "negm":
        # The keeper is solved on the liquid grid, so an adjuster's resources stay
        # within it (x − d ≤ wealth_max for every new stock d).
        top = wealth_max
        regime_solver = lcm.NEGM(
            liquid="wealth",
            durable="durable",
            consumption="consumption",
            durable_choice="new_durable",
            adjust="adjust",
            savings=lcm.IrregSpacedGrid(
                points=list(top * np.linspace(0.0, 1.0, n_savings) ** wealth_power)
            ),
            resources=lcm.IrregSpacedGrid(
                points=list(0.1 + (top - 0.1) * np.linspace(0.0, 1.0, n_resources) ** wealth_power)
            ),
            adjuster_points=adjuster_points,
        )
    elif solver != "grid":
        raise ValueError(f"solver must be 'negm', 'grid' or 'grid-shares', got {solver!r}")
    regime = lcm.Regime(
        states={
            "wealth": wealth,
            "durable": durable,
            "log_income": lcm.RouwenhorstGrid(n_points=n_income, **INCOME),
        },
        actions=actions,
        functions=functions,
        state_transitions={"wealth": next_wealth, "durable": next_durable},
        transition=lambda: 0,
        constraints={"no_borrowing": no_borrowing},
        **({} if regime_solver is None else {"solver": regime_solver}),
    )
    model = lcm.Model(regimes={"alive": regime}, n_periods=n_periods)
    return model, dict(PARAMS)


# ---------------------------------------------------------------------- Euler errors
_GAUSS = ((0.5 - 0.5 * 0.6**0.5, 5 / 18), (0.5, 8 / 18), (0.5 + 0.5 * 0.6**0.5, 5 / 18))


def _locate(points, x):
    lo = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    return lo, points[lo], points[lo + 1]


def _integrated(low, high, v_low, v_high, slope, x):
    """The value at `x` from the interval's end values, integrating `slope` (marginal
    utility at interpolated consumption) from each end, blended by position."""

    def integral(a, b):
        return (b - a) * sum(w * slope(a + s * (b - a)) for s, w in _GAUSS)

    weight = np.clip((x - low) / (high - low), 0.0, 1.0)
    forward = v_low + integral(low, x)
    backward = v_high - integral(x, high)
    return (1 - weight) * forward + weight * backward


def _cubic(v0, v1, s0, s1, h, t):
    ti = np.clip(t, 0.0, 1.0)
    inner = (
        (2 * ti**3 - 3 * ti**2 + 1) * v0
        + (ti**3 - 2 * ti**2 + ti) * h * s0
        + (-2 * ti**3 + 3 * ti**2) * v1
        + (ti**3 - ti**2) * h * s1
    )
    return np.where(t < 0, v0 + s0 * h * t, np.where(t > 1, v1 + s1 * h * (t - 1), inner))


def euler_errors(model, params, solution, period: int, n_draws: int = 2_000, seed: int = 0):
    """log10 of the relative consumption error of the liquid margin's Euler equation
    `u_c(c, h) = β·R·E[V'_m(m', n')]` at random states of `period` (an `NEGM`
    solution), for the choices that save more than 1e-6 (`euler_errors_at`).
    `lcm.euler_errors` gives the same errors on the liquid x durable grid, of keeping
    and of adjusting."""
    regime = model.regimes["alive"]
    wealth_top = float(regime.states["wealth"].to_jax()[-1])
    durable_top = float(regime.states["durable"].to_jax()[-1])
    n_income = regime.states["log_income"].n_points
    rng = np.random.default_rng(seed)
    z = rng.integers(0, n_income, n_draws)
    m = rng.uniform(0.5, 0.6 * wealth_top, n_draws)
    n = rng.uniform(0.0, 0.6 * durable_top, n_draws)
    errors, _ = euler_errors_at(model, params, solution, period, z, m, n)
    return errors[np.isfinite(errors)]


def euler_errors_at(model, params, solution, period: int, z, m, n):
    """The liquid margin's log10 relative Euler errors at the states `(z, m, n)`
    (income node, liquid wealth, durable stock) of `period` of an `NEGM` solution, and
    whether the agent adjusts there; NaN where it saves at most 1e-6: the agent's
    choice at each state from the period's policy, and next period's marginal value of
    liquid wealth from the next period's policy (the consumption of the better of
    keeping and adjusting at `(m', n')`, with `u_c` evaluated exactly). Written in
    numpy, apart from the solver."""
    p = {**PARAMS, **params}
    regime = model.regimes["alive"]
    wealth_points = np.asarray(regime.states["wealth"].to_jax())
    durable_points = np.asarray(regime.states["durable"].to_jax())
    solver = regime.solver
    total = np.asarray(solver.resources.to_jax())
    grid = regime.states["log_income"]
    nodes, matrix = (np.asarray(a) for a in grid.discretize({}))
    policies = solution.policies["alive"]
    now = {k: np.asarray(getattr(policies, k)[period]) for k in _FIELDS}
    later = {k: np.asarray(getattr(policies, k)[period + 1]) for k in _FIELDS}
    alpha, rho, floor = p["alpha"], p["risk_aversion"], p["durable_floor"]
    beta, gross = p["discount_factor"], 1.0 + p["interest_rate"]

    def u_c(c, h):
        return alpha * c ** (alpha * (1 - rho) - 1) * (h + floor) ** ((1 - alpha) * (1 - rho))

    def choice(pol, z, m, n):
        rows = np.arange(len(m))
        x = m + (1 - p["adjustment_cost"]) * n
        i, low, high = _locate(wealth_points, m)
        j, n_low, n_high = _locate(durable_points, n)
        tx = (m - low) / (high - low)
        kv, kc, kn = (
            pol["keep_value"][z],
            pol["keep_consumption"][z],
            pol["keep_marginal_durable"][z],
        )

        def column(k):
            c_low, c_high = kc[rows, i, k], kc[rows, i + 1, k]

            def slope(s):
                desired = c_low + (s - low) / (high - low) * (c_high - c_low)
                return u_c(np.minimum(desired, s), durable_points[k])

            value = _integrated(low, high, kv[rows, i, k], kv[rows, i + 1, k], slope, m)
            return value, kn[rows, i, k] + tx * (kn[rows, i + 1, k] - kn[rows, i, k])

        v0, s0 = column(j)
        v1, s1 = column(j + 1)
        keep = _cubic(v0, v1, s0, s1, n_high - n_low, (n - n_low) / (n_high - n_low))
        # The keeper's desired consumption, at most liquid wealth (no borrowing).
        keep_c = (1 - tx) * (
            (1 - (n - n_low) / (n_high - n_low)) * kc[rows, i, j]
            + (n - n_low) / (n_high - n_low) * kc[rows, i, j + 1]
        ) + tx * (
            (1 - (n - n_low) / (n_high - n_low)) * kc[rows, i + 1, j]
            + (n - n_low) / (n_high - n_low) * kc[rows, i + 1, j + 1]
        )
        keep_c = np.minimum(keep_c, m)
        av, ac, ad = pol["adjust_value"][z], pol["adjust_consumption"][z], pol["adjust_durable"][z]
        k, x_low, x_high = _locate(total, x)

        def adjust_slope(s):
            t = (s - x_low) / (x_high - x_low)
            c = ac[rows, k] + t * (ac[rows, k + 1] - ac[rows, k])
            d = ad[rows, k] + t * (ad[rows, k + 1] - ad[rows, k])
            return u_c(c, d)

        adjust = _integrated(x_low, x_high, av[rows, k], av[rows, k + 1], adjust_slope, x)
        tk = (x - x_low) / (x_high - x_low)
        adjust_c = ac[rows, k] + tk * (ac[rows, k + 1] - ac[rows, k])
        adjust_d = ad[rows, k] + tk * (ad[rows, k + 1] - ad[rows, k])
        keeps = keep >= adjust
        c = np.where(keeps, keep_c, adjust_c)
        h = np.where(keeps, n, adjust_d)
        a = np.where(keeps, m, x - adjust_d) - c
        return c, h, a, ~keeps

    z, m, n = (np.asarray(v) for v in (z, m, n))
    c, h, a, adjusts = choice(now, z, m, n)
    expected = np.zeros(len(m))
    for z_next in range(len(nodes)):
        m_next = gross * a + np.exp(nodes[z])
        n_next = (1 - p["depreciation"]) * h
        c_next, h_next, _, _ = choice(later, np.full(len(m), z_next), m_next, n_next)
        expected += matrix[z, z_next] * u_c(c_next, h_next)
    target = beta * gross * expected
    # u_c(c, h) = target  =>  c = (target / (α·(h+h̲)^{(1−α)(1−ρ)}))^{1/(α(1−ρ)−1)}
    implied = (target / (alpha * (h + floor) ** ((1 - alpha) * (1 - rho)))) ** (
        1 / (alpha * (1 - rho) - 1)
    )
    errors = np.log10(np.abs(implied / c - 1.0) + 1e-16)
    return np.where(a > 1e-6, errors, np.nan), adjusts


_FIELDS = (
    "keep_value",
    "keep_consumption",
    "keep_marginal",
    "keep_marginal_durable",
    "adjust_value",
    "adjust_consumption",
    "adjust_durable",
    "adjust_marginal",
)


def main() -> None:
    model, params = build(n_periods=20)
    solution = model.solve(params)
    errors = np.concatenate([euler_errors(model, params, solution, t) for t in range(19)])
    print(f"NEGM, 20 periods: mean log10 Euler error {errors.mean():.2f}")


if __name__ == "__main__":
    main()
