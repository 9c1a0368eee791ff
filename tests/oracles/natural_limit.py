"""A consumption–saving model whose borrowing limit depends on the income state, solved
by the endogenous grid method in plain numpy (float64), independently of `lcm_eqx`.

Cash on hand `m`, a Markov income state `z` (income `y_z`, transition `P[z, z']`),
consumption `c > 0` with savings `m − c >= L_z` (the limit of the current income
state), next cash on hand `m' = R·(m − c) + y_{z'}` (income drawn after the decision).
CRRA utility `c^(1−ρ)/(1−ρ)`, discount factor `β`, `V_T ≡ 0` after the last period
`T − 1` (there the agent consumes down to the limit: `c = m − L_z`).

EGM at each period and income state: savings `a_j = L_z + s_j` (`s_0 = 0`), the Euler
equation `u'(c_j) = β R Σ_{z'} P[z, z'] u'(c_{t+1}(R a_j + y_{z'}, z'))`, endogenous
`m_j = a_j + c_j`; below `m_0` the limit binds (`c = m − L_z`), between points
consumption is linear in `m`. The parameters are chosen so that `m'` stays inside the
next period's grid (no extrapolation) and above its limit (consumption positive).
"""

from __future__ import annotations

import numpy as np


def read_policy(m_nodes, c_nodes, limit, m):
    """Consumption at `m` off one endogenous grid: `m − limit` below the first point,
    linear between points."""
    m = np.asarray(m, dtype=float)
    k = np.clip(np.searchsorted(m_nodes, m, side="right") - 1, 0, len(m_nodes) - 2)
    m0, m1 = m_nodes[k], m_nodes[k + 1]
    c0, c1 = c_nodes[k], c_nodes[k + 1]
    t = (m - m0) / (m1 - m0)
    return np.where(m < m_nodes[0], m - limit, c0 + t * (c1 - c0))


def egm(*, offsets, income, transition, limits, n_periods, beta, interest_rate, rho):
    """`grids[t][z] = (m_nodes, c_nodes)` for every period before the last; `None` in
    the last period (`c = m − L_z`)."""
    R = 1.0 + interest_rate
    offsets = np.asarray(offsets, dtype=float)
    income = np.asarray(income, dtype=float)
    transition = np.asarray(transition, dtype=float)
    limits = np.asarray(limits, dtype=float)
    grids: list = [None] * n_periods

    def consumption(t, z, m):
        if grids[t] is None:
            return m - limits[z]
        m_nodes, c_nodes = grids[t][z]
        return read_policy(m_nodes, c_nodes, limits[z], m)

    for t in range(n_periods - 2, -1, -1):
        per_state = []
        for z in range(len(income)):
            a = limits[z] + offsets
            expected = np.zeros_like(a)
            for z_next in range(len(income)):
                m_next = R * a + income[z_next]
                if grids[t + 1] is not None:
                    assert np.all(m_next <= grids[t + 1][z_next][0][-1]), "widen the offsets"
                c_next = consumption(t + 1, z_next, m_next)
                assert np.all(c_next > 0), "m' below the next limit: change the parameters"
                expected += transition[z, z_next] * c_next ** (-rho)
            c = (beta * R * expected) ** (-1.0 / rho)
            per_state.append((a + c, c))
        grids[t] = per_state
    return grids
