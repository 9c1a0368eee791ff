"""The consumption-floor model of `consumption_floor.py`, solved over many periods in plain
numpy (float64), independently of `lcm_eqx`: backward induction on a fine table of each
period's value, by maximising the Bellman equation at every node, not by the endogenous
grid method.

`consumption_floor.FloorOracle` evaluates `V_{t+1}` recursively by its own maximisation,
whose cost multiplies by the number of evaluations per period (three periods at most in
practice). Here each `V_t` is tabulated once, on a fine grid of cash on hand (step `step`)
together with its derivative (`V_t'(m) = u'(m − a_t(m))`, the envelope theorem), and read
between the nodes by cubic Hermite interpolation (error of order `step⁴` where `V_t` is
smooth). Where it is not smooth, the points are nodes of the table, located to rounding:

- where the savings jump (a convex kink of `V_t`: the best of two concave branches
  changes), a double node with the left and the right derivative;
- where the savings cross a kink of the objective continuously, or start or stop saving
  exactly a breakpoint (the borrowing limit, the benefit's threshold, the savings that
  lead to a kink of `V_{t+1}`), `V_t''` jumps: a node.

The maximisation at each cash on hand `m`: the objective

    f(a) = u(m − a) + β · Σ_k p_k · V_{t+1}(max(x(a, y_k), floor))

is concave between its convex kinks (where the budget's slope rises: the end of the
benefit's phase-out, the savings where a node's resources reach the floor, those that
lead to a convex kink of `V_{t+1}`); on each such segment the maximiser is where the
right derivative `f'(a+)` changes sign, found by bisection (to rounding), and the best
segment wins. The policy is nondecreasing in `m` (the objective is supermodular), so the
kinds of optimum (which interval between the objective's kinks, or exactly at one) change
monotonically along `m`: each change between two nodes is located by bisection on `m`.

Its own accuracy is measured by refining `step` (see tests/test_budget_kinks.py), and
over three periods against `FloorOracle` (4.1e-12). `prune`: savings jumps whose jump of
`V_t'` is at most this are not split at in the period before (they stay nodes of the
table; an optimum missed by not splitting at a convex kink of size δ costs at most
about δ²/|f''|); 0, the default, splits at every one.
"""

from __future__ import annotations

import numpy as np


class TabulatedFloorOracle:
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
        benefit,
        threshold,
        taper,
        top=8.0,
        bottom=0.5,
        step=2e-3,
        prune=0.0,
    ):
        self.income = np.asarray(income, float)
        self.p = np.asarray(probabilities, float)
        self.floor = float(floor)
        self.R = 1.0 + interest_rate
        self.beta = beta
        self.rho = rho
        self.n_periods = n_periods
        self.benefit, self.threshold, self.taper = benefit, threshold, taper
        self.step = step
        self.bottom = min(bottom, self.floor)
        # Period t is read up to the largest resources period t-1 reaches from below `top`.
        self.tops = [top]
        for _ in range(n_periods - 1):
            self.tops.append(self.R * self.tops[-1] + self.income.max() + benefit + 1e-2)
        # tables[t] = (nodes, values, derivatives); kinks[t] = (jumps, second-order kinks)
        self.tables = [None] * n_periods
        self.kinks = [((), ())] * n_periods
        self.jump_sizes = [()] * n_periods
        self.prune = prune
        self._edges_cache = [None] * n_periods
        for t in range(n_periods - 2, -1, -1):
            self._tabulate(t)

    # -- primitives --------------------------------------------------------------------
    def u(self, c):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                c > 0, np.maximum(c, 1e-300) ** (1 - self.rho) / (1 - self.rho), -np.inf
            )

    def du(self, c):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(c > 0, np.maximum(c, 1e-300) ** (-self.rho), np.inf)

    def resources(self, a, y):
        withdrawn = self.taper * np.maximum(0.0, a - self.threshold)
        return self.R * a + y + np.maximum(0.0, self.benefit - withdrawn)

    def _phase_out_end(self):
        return self.threshold + self.benefit / self.taper

    def _slope(self, a):
        """The budget's slope just right of `a`."""
        inside = (a >= self.threshold) & (a < self._phase_out_end())
        return np.where(inside, self.R - self.taper, self.R)

    def savings_reaching(self, level, y):
        """The savings at which `x(a, y)` reaches `level` (affine between breakpoints,
        increasing: inverted exactly); -1 where it is below `x(0, y)`."""
        points = np.array([0.0, self.threshold, self._phase_out_end(), 1e6])
        return np.interp(level, self.resources(points, y), points, left=-1.0)

    # -- reading V_{t+1} ---------------------------------------------------------------
    def _read(self, t, m):
        """`V_t(m)` and its right derivative, from the table (exact in the last period)."""
        if t == self.n_periods - 1:
            return self.u(m), self.du(m)
        x, v, d = self.tables[t]
        if np.any(m < x[0] - 1e-12) or np.any(m > x[-1] + 1e-12):
            raise ValueError(f"period {t}: read outside the table [{x[0]}, {x[-1]}]")
        i = np.clip(np.searchsorted(x, m, side="right") - 1, 0, len(x) - 2)
        x0, x1 = x[i], x[i + 1]
        h = x1 - x0
        s = (m - x0) / h
        s2, s3 = s * s, s * s * s
        value = (
            (2 * s3 - 3 * s2 + 1) * v[i]
            + (s3 - 2 * s2 + s) * h * d[i]
            + (-2 * s3 + 3 * s2) * v[i + 1]
            + (s3 - s2) * h * d[i + 1]
        )
        slope = (
            (6 * s2 - 6 * s) / h * v[i]
            + (3 * s2 - 4 * s + 1) * d[i]
            + (-6 * s2 + 6 * s) / h * v[i + 1]
            + (3 * s2 - 2 * s) * d[i + 1]
        )
        return value, slope

    def _continuation(self, t, a, derivative):
        """`Σ_k p_k V_{t+1}(m'_k)` at savings `a`, or its right derivative in `a`."""
        total = 0.0
        for y, p in zip(self.income, self.p, strict=True):
            x = self.resources(a, y)
            value, slope = self._read(t + 1, np.maximum(x, self.floor))
            if derivative:
                total = total + p * np.where(x < self.floor, 0.0, self._slope(a) * slope)
            else:
                total = total + p * value
        return total

    def objective(self, t, m, a):
        return self.u(m - a) + self.beta * self._continuation(t, a, derivative=False)

    # -- the kinks of period t's objective ---------------------------------------------
    def _mapped(self, levels):
        points = [self.savings_reaching(np.asarray(levels, float), y) for y in self.income]
        points = np.concatenate([np.atleast_1d(p) for p in points]) if len(levels) else []
        return [a for a in np.asarray(points) if a > 0]

    def _boundaries(self, t):
        """Convex kinks (segment edges, with 0 and inf) and all kinks (sorted, with 0)."""
        jumps, smooth = self.kinks[t + 1]
        convex = {self._phase_out_end(), *self._mapped([self.floor, *jumps])}
        edges = np.array([0.0, *sorted(a for a in convex if a > 0), np.inf])
        every = convex | {0.0, self.threshold} | set(self._mapped(list(smooth)))
        return edges, np.array(sorted(every))

    def _edges(self, t):
        if self._edges_cache[t] is None:
            self._edges_cache[t] = self._boundaries(t)
        return self._edges_cache[t]

    def _pairs(self, t, m, first, last):
        """The best savings and value of each `m` over the segments `first..last` (its
        own range each; the segments are the objective's concave pieces): the maximiser
        on each by bisection on the sign of `f'(a+)`, then the best. Returns the
        savings, the value and the segment."""
        edges, _ = self._edges(t)
        count = last - first + 1
        owner = np.repeat(np.arange(m.size), count)
        starts = np.concatenate([[0], np.cumsum(count)[:-1]])
        segment = first[owner] + np.arange(owner.size) - starts[owner]
        mm = m[owner]
        lo = edges[segment]
        hi = np.minimum(edges[segment + 1], mm)
        usable = lo < hi
        lo = np.where(usable, lo, 0.0)
        hi = np.where(usable, hi, np.maximum(mm * 0.5, 1e-3))
        for _ in range(80):
            mid = lo + 0.5 * (hi - lo)
            rising = (
                -self.du(mm - mid) + self.beta * self._continuation(t, mid, derivative=True)
            ) > 0
            lo, hi = np.where(rising, mid, lo), np.where(rising, hi, mid)
        f_lo, f_hi = self.objective(t, mm, lo), self.objective(t, mm, hi)
        a = np.where(f_hi > f_lo, hi, lo)
        f = np.where(usable, np.maximum(f_lo, f_hi), -np.inf)
        best = np.maximum.reduceat(f, starts)
        index = np.where(f == best[owner], np.arange(owner.size), owner.size)
        pick = np.minimum.reduceat(index, starts)
        return a[pick], f[pick], segment[pick]

    def solve(self, t, m):
        """Optimal savings and value at cash on hand `m` (1-d) in period `t`. The
        policy is nondecreasing in `m`, so is the segment that holds it: the nodes are
        solved by halving (each between the segments of its solved neighbours)."""
        m = np.asarray(m, float)
        order = np.argsort(m)
        sm = m[order]
        n = sm.size
        n_segments = len(self._edges(t)[0]) - 1
        a, v = np.empty(n), np.empty(n)
        seg = np.full(n, -1)
        ends = np.unique([0, n - 1])
        a[ends], v[ends], seg[ends] = self._pairs(
            t, sm[ends], np.zeros(ends.size, int), np.full(ends.size, n_segments - 1)
        )
        stride = 1 << max(int(np.ceil(np.log2(max(n - 1, 1)))), 0)
        while stride >= 1:
            idx = np.arange(stride, n - 1, 2 * stride) if stride > 0 else np.array([], int)
            idx = idx[seg[idx] < 0]
            if idx.size:
                left = seg[idx - stride]
                right = seg[np.minimum(idx + stride, n - 1)]
                a[idx], v[idx], seg[idx] = self._pairs(t, sm[idx], left, right)
            stride //= 2
        out_a, out_v, out_s = np.empty(n), np.empty(n), np.empty(n, int)
        out_a[order], out_v[order], out_s[order] = a, v, seg
        self._last_segments = out_s
        return out_a, out_v

    def _code(self, every, a):
        """Which interval between the objective's kinks `a` lies in (odd), or at which kink
        (even): nondecreasing in `a`."""
        count = np.searchsorted(every, a, side="right")
        at = np.abs(a - every[np.maximum(count - 1, 0)]) <= 1e-11 * (1 + np.abs(a))
        return np.where(at, 2 * (count - 1), 2 * count - 1)

    def _tabulate(self, t):
        _, every = self._edges(t)
        nodes = np.arange(self.bottom, self.tops[t] + self.step, self.step)
        a, v = self.solve(t, nodes)
        seg = self._last_segments
        code = self._code(every, a)
        los, his, targets, firsts, lasts = [], [], [], [], []
        for i in np.flatnonzero(code[1:] != code[:-1]):
            for c in range(code[i] + 1, code[i + 1] + 1):
                los.append(nodes[i])
                his.append(nodes[i + 1])
                targets.append(c)
                firsts.append(seg[i])
                lasts.append(seg[i + 1])
        lo, hi, target = np.array(los), np.array(his), np.array(targets, int)
        first, last = np.array(firsts, int), np.array(lasts, int)
        for _ in range(60):  # the smallest m whose code is at least the target
            mid = lo + 0.5 * (hi - lo)
            above = self._code(every, self._pairs(t, mid, first, last)[0]) >= target
            lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
        jumps, smooth, extra = [], [], []
        if lo.size:
            a_lo, v_lo, _ = self._pairs(t, lo, first, last)
            a_hi, v_hi, _ = self._pairs(t, hi, first, last)
            seen = set()
            for k in range(lo.size):
                key = round(hi[k], 11)
                if key in seen:
                    continue
                seen.add(key)
                point = hi[k]
                value = max(v_lo[k], v_hi[k])
                if abs(a_hi[k] - a_lo[k]) > 1e-7:  # the savings jump: a convex kink of V_t
                    jumps.append(
                        (point, float(self.du(point - a_hi[k]) - self.du(point - a_lo[k])))
                    )
                    extra.append((point, value, self.du(point - a_lo[k]), 0))
                    extra.append((point, value, self.du(point - a_hi[k]), 1))
                else:
                    smooth.append(point)
                    extra.append((point, value, self.du(point - a_hi[k]), 1))
        # Grid nodes within a rounding of an event are dropped (the event replaces them).
        if extra:
            events = np.array([e[0] for e in extra])
            near = np.min(np.abs(nodes[:, None] - events[None, :]), axis=1) < 1e-9
            keep = ~near
        else:
            keep = np.ones(nodes.size, bool)
        rows = [
            (x, val, self.du(x - s), 0)
            for x, val, s in zip(nodes[keep], v[keep], a[keep], strict=True)
        ]
        rows += extra
        rows.sort(key=lambda r: (r[0], r[3]))
        table = np.array([[r[0], r[1], r[2]] for r in rows])
        self.tables[t] = (table[:, 0], table[:, 1], table[:, 2])
        self.jump_sizes[t] = tuple(jumps)
        big = tuple(x for x, size in jumps if size > self.prune)
        small = tuple(x for x, size in jumps if size <= self.prune)
        self.kinks[t] = (big, tuple(smooth) + small)

    # -- public ------------------------------------------------------------------------
    def value(self, t, m):
        """`V_t(m)`, maximised at `m` itself (not read from the table)."""
        m = np.asarray(m, float)
        if t == self.n_periods - 1:
            return self.u(m)
        return self.solve(t, m)[1]

    def policy(self, t, m):
        m = np.asarray(m, float)
        if t == self.n_periods - 1:
            return np.zeros_like(m)
        return self.solve(t, m)[0]
