"""A consumption-floor model (Hubbard, Skinner & Zeldes 1995) solved exactly in plain
numpy (float64), independently of `lcm_eqx`: by maximising the Bellman equation at each
state over the savings, not by the endogenous grid method.

Cash on hand `m`, consumption `c = m − a` with savings `a >= 0`, CRRA utility
`c^(1−ρ)/(1−ρ)`, i.i.d. income `y_k` with probabilities `p_k` drawn after the decision,
an asset-tested benefit `b` withdrawn at rate `θ` per unit of savings above a
threshold `ā` (resources `x(a, y) = R·a + y + max(0, b − θ·max(0, a − ā))`: a concave
kink at `ā`, where a mass of agents saves exactly `ā`, and a convex one where the
benefit is gone), and a means-tested transfer `max(0, floor − x)` that guarantees next
period's resources: `m' = max(x(a, y'), floor)`. `V_{T−1}(m) = u(m)` (the last period consumes
everything), and before it

    V_t(m) = max_{0 <= a < m}  u(m − a) + β · Σ_k p_k · V_{t+1}(max(x(a, y_k), floor)).

The objective is concave in `a` between its breakpoints: the benefit's `ā` and
`ā + b/θ`, the savings where a node's resources reach the floor, and those where they
reach a point at which `V_{t+1}` switches between two concave branches
(`switch_points`, a convex kink of `V_{t+1}`). On each such piece it is maximised by
golden-section search (to rounding: the interval shrinks 0.618^100), and the best piece
wins. The switch points of `V_t` are
found where the best piece changes on a fine scan of `m`, each then by bisection.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


class FloorOracle:
    def __init__(
        self,
        *,
        income,
        probabilities,
        floor,
        interest_rate,
        beta,
        rho,
        n_periods,
        benefit=0.0,
        threshold=0.0,
        taper=1.0,
    ):
        self.benefit = benefit
        self.threshold = threshold
        self.taper = taper
        self.income = np.asarray(income, float)
        self.p = np.asarray(probabilities, float)
        self.floor = float(floor)
        self.R = 1.0 + interest_rate
        self.beta = beta
        self.rho = rho
        self.n_periods = n_periods
        self.scan_top = 40.0

    def u(self, c):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                c > 0, np.maximum(c, 1e-300) ** (1 - self.rho) / (1 - self.rho), -np.inf
            )

    def objective(self, t, m, a):
        """`u(m − a) + β·E[V_{t+1}]` at savings `a` (arrays of one shape)."""
        resources = np.maximum(self.resources(a[..., None], self.income), self.floor)
        expected = self.value(t + 1, resources.reshape(-1)).reshape(resources.shape) @ self.p
        return self.u(m - a) + self.beta * expected

    def resources(self, a, y):
        withdrawn = self.taper * np.maximum(0.0, a - self.threshold)
        return self.R * a + y + np.maximum(0.0, self.benefit - withdrawn)

    def budget_breakpoints(self):
        if self.benefit <= 0:
            return []
        return [self.threshold, self.threshold + self.benefit / self.taper]

    def savings_reaching(self, level, y):
        """The savings at which resources `x(a, y)` reach `level`: `x` is increasing and
        affine between its breakpoints, so linear interpolation inverts it exactly."""
        points = np.array([0.0, *self.budget_breakpoints(), 1e6])
        return float(np.interp(level, self.resources(points, y), points, left=-1.0))

    def breakpoints(self, t):
        """The savings at which the objective of period `t` is kinked (sorted, > 0)."""
        levels = [self.floor, *self.switch_points(t + 1)]
        points = {self.savings_reaching(level, y) for level in levels for y in self.income}
        points |= set(self.budget_breakpoints())
        return np.array(sorted(a for a in points if a > 0))

    def pieces(self, t, m):
        """The best value on each concave piece of savings, `(n_pieces, len(m))`, and the
        savings that give it."""
        m = np.asarray(m, float)
        edges = np.concatenate([[0.0], self.breakpoints(t), [np.inf]])
        values, savings = [], []
        for lo, hi in itertools.pairwise(edges):
            top = np.minimum(hi, m * (1 - 1e-15))
            usable = lo < top
            lo_a = np.where(usable, lo, 0.0)
            hi_a = np.where(usable, top, m * 0.5)
            a, v = self._golden(t, m, lo_a, hi_a)
            values.append(np.where(usable, v, -np.inf))
            savings.append(a)
        return np.array(values), np.array(savings)

    def _golden(self, t, m, lo, hi):
        x1 = hi - _GOLDEN * (hi - lo)
        x2 = lo + _GOLDEN * (hi - lo)
        f1, f2 = self.objective(t, m, x1), self.objective(t, m, x2)
        for _ in range(100):
            left = f1 >= f2
            hi = np.where(left, x2, hi)
            lo = np.where(left, lo, x1)
            x2n = np.where(left, x1, lo + _GOLDEN * (hi - lo))
            x1n = np.where(left, hi - _GOLDEN * (hi - lo), x2)
            fresh = np.where(left, x1n, x2n)
            f_fresh = self.objective(t, m, fresh)
            f1, f2 = np.where(left, f_fresh, f2), np.where(left, f1, f_fresh)
            x1, x2 = x1n, x2n
        candidates = np.stack([lo, hi, 0.5 * (lo + hi)])
        values = np.stack([self.objective(t, m, c) for c in candidates])
        best = np.argmax(values, axis=0)
        pick = np.arange(m.size)
        return candidates[best, pick], values[best, pick]

    def value(self, t, m):
        m = np.asarray(m, float)
        if t == self.n_periods - 1:
            return self.u(m)
        return self.pieces(t, m)[0].max(axis=0)

    def policy(self, t, m):
        """Optimal savings at `m` in period `t`."""
        m = np.asarray(m, float)
        if t == self.n_periods - 1:
            return np.zeros_like(m)
        values, savings = self.pieces(t, m)
        return savings[np.argmax(values, axis=0), np.arange(m.size)]

    @cache  # noqa: B019 - one oracle per test module, kept for its lifetime
    def switch_points(self, t):
        """Cash on hand at which `V_t` switches between concave branches (sorted)."""
        if t >= self.n_periods - 1:
            return ()
        scan = np.linspace(self.floor, self.scan_top, 2001)
        values, _ = self.pieces(t, scan)
        best = np.argmax(values, axis=0)
        found = []
        for j in np.flatnonzero(best[1:] != best[:-1]):
            i, k = best[j], best[j + 1]
            lo, hi = scan[j], scan[j + 1]
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                v = self.pieces(t, np.array([mid]))[0][:, 0]
                lo, hi = (mid, hi) if v[i] >= v[k] else (lo, mid)
            _, a = self.pieces(t, np.array([lo, hi]))
            # Where both pieces' best is their common end (a mass at a concave kink) the
            # value does not switch branch: the savings do not jump.
            if abs(a[i, 0] - a[k, 1]) > 1e-7:
                found.append(0.5 * (lo + hi))
        return tuple(found)
