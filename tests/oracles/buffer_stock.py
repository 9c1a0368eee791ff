"""The buffer-stock consumption model with income drawn after the decision, solved in
plain numpy (float64), independently of `lcm_eqx`.

Timing: cash on hand `m`, consumption `0 < c <= m` (borrowing limit 0), next cash on hand
`m' = R·(m − c) + θ'`, where `θ'` is next period's income: an i.i.d. draw (nodes `θ_k`,
probabilities `p_k`) or a Markov chain (`P[y, y']`, income `θ_{y'}`) drawn after this
period's decision. CRRA utility `c^(1−ρ)/(1−ρ)`, discount factor `β·s_t` (survival to
the next period `s_t`; the dead get 0), `V_T ≡ 0` after the last period `T − 1`.

Two solvers:

- `egm`: the endogenous grid method on a savings grid `a_j` (first point 0): at each
  `a_j`, `u'(c) = β s_t R Σ p u'(c_{t+1}(R a_j + θ'))`, `m = a_j + c`; below the first
  endogenous point the constraint binds (`c = m`). Between points consumption is
  linear in `m`, beyond the last one extrapolated linearly (the policy `DCEGM` reads).
- `grid_search`: the discretised Bellman equation on a wealth grid and a consumption
  grid, next-period values interpolated linearly in wealth (extrapolated linearly
  outside the grid): the problem `GridSearch` solves.

Markov income is written as an i.i.d. one with one row per current state: `transition`
of shape `(n_current, n_next)`; i.i.d. income is `transition` with one row.
"""

from __future__ import annotations

import numpy as np


def _marginal(c, rho):
    return c ** (-rho)


def _inverse_marginal(q, rho):
    return q ** (-1.0 / rho)


def read_policy(m_nodes, c_nodes, m):
    """Consumption at `m` off one endogenous grid `(m_nodes, c_nodes)`: `c = m` below
    its first point, linear between points, linear extrapolation past the last."""
    m = np.asarray(m, dtype=float)
    k = np.clip(np.searchsorted(m_nodes, m, side="right") - 1, 0, len(m_nodes) - 2)
    m0, m1 = m_nodes[k], m_nodes[k + 1]
    c0, c1 = c_nodes[k], c_nodes[k + 1]
    t = np.maximum((m - m0) / (m1 - m0), 0.0)
    return np.where(m < m_nodes[0], m, c0 + t * (c1 - c0))


def egm(*, savings, income, transition, n_periods, beta, survival, interest_rate, rho):
    """The endogenous grids of every period and current income state:
    `grids[t][y] = (m_nodes, c_nodes, v_nodes, v_limit)`, where `v_limit` is the
    discounted expected value of saving 0 (the constrained segment's value is
    `u(m) + v_limit`); `None` in the last period (there `c = m`, `V = u(m)`).

    The value at the endogenous points is `u(c) + β s_t E[V_{t+1}(m')]`, with `V_{t+1}`
    read by `egm_value` (linear between its points): accurate to the square of the
    savings grid's spacing, for a reference value on a fine grid."""
    R = 1.0 + interest_rate
    savings = np.asarray(savings, dtype=float)
    income = np.asarray(income, dtype=float)
    transition = np.atleast_2d(np.asarray(transition, dtype=float))
    n_next = transition.shape[1]
    grids: list = [None] * n_periods
    for t in range(n_periods - 2, -1, -1):
        per_state = []
        for y in range(transition.shape[0]):
            marginal = np.zeros_like(savings)
            value = np.zeros_like(savings)
            for y_next in range(n_next):
                m_next = R * savings + income[y_next]
                c_next = egm_consumption(grids, t + 1, y_next, m_next)
                marginal += transition[y, y_next] * _marginal(c_next, rho)
                value += transition[y, y_next] * egm_value(grids, t + 1, y_next, m_next, rho)
            c = _inverse_marginal(beta * survival[t] * R * marginal, rho)
            continuation = beta * survival[t] * value
            v = c ** (1 - rho) / (1 - rho) + continuation
            per_state.append((savings + c, c, v, continuation[0]))
        grids[t] = per_state
    return grids


def _at(grids, period, y):
    return grids[period][y if len(grids[period]) > 1 else 0]


def egm_consumption(grids, period, y, m):
    """Consumption in `period` at cash on hand `m` and current income state `y`."""
    if grids[period] is None:
        return np.asarray(m, dtype=float)
    m_nodes, c_nodes, _, _ = _at(grids, period, y)
    return read_policy(m_nodes, c_nodes, m)


def egm_value(grids, period, y, m, rho):
    """The value in `period` at cash on hand `m` and current income state `y`: exact on
    the constrained segment, linear between the endogenous points, linear past the last."""
    m = np.asarray(m, dtype=float)
    if grids[period] is None:
        return m ** (1 - rho) / (1 - rho)
    m_nodes, _, v_nodes, v_limit = _at(grids, period, y)
    constrained = np.minimum(m, m_nodes[0]) ** (1 - rho) / (1 - rho) + v_limit
    return np.where(m < m_nodes[0], constrained, interpolate(m_nodes, v_nodes, m))


def interpolate(points, values, x):
    """Linear interpolation of `values` on `points`, extrapolated linearly outside."""
    k = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    w = (x - points[k]) / (points[k + 1] - points[k])
    return (1 - w) * values[..., k] + w * values[..., k + 1]


def grid_search(
    *, wealth, consumption, income, transition, n_periods, beta, survival, interest_rate, rho
):
    """Values `(n_periods, n_current, n_wealth)` and the consumption chosen (a point of
    `consumption`) of the discretised problem."""
    R = 1.0 + interest_rate
    m = np.asarray(wealth, dtype=float)[:, None]
    c = np.asarray(consumption, dtype=float)[None, :]
    income = np.asarray(income, dtype=float)
    transition = np.atleast_2d(np.asarray(transition, dtype=float))
    n_current, n_next = transition.shape
    utility = np.where(c <= m, c ** (1 - rho) / (1 - rho), -np.inf)
    values = np.zeros((n_periods, n_current, m.shape[0]))
    chosen = np.zeros_like(values)
    next_values = np.zeros((n_next, m.shape[0]))
    for t in range(n_periods - 1, -1, -1):
        for y in range(n_current):
            expected = np.zeros((m.shape[0], c.shape[1]))
            if t < n_periods - 1:
                for y_next in range(n_next):
                    m_next = R * (m - c) + income[y_next]
                    expected += transition[y, y_next] * interpolate(
                        m[:, 0], next_values[y_next], m_next
                    )
            q = utility + beta * survival[t] * expected
            q = np.where(c <= m, q, -np.inf)
            values[t, y] = q.max(axis=1)
            chosen[t, y] = c[0, q.argmax(axis=1)]
        # i.i.d. income: next period's values do not depend on the current draw
        next_values = values[t] if n_current == n_next else np.repeat(values[t], n_next, 0)
    return values, chosen
