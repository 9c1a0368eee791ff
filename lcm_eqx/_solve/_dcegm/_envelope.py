"""Endogenous grids: the upper envelope that makes them a function, and reading them.

An endogenous-grid solver produces, for one discrete choice, points `(m_j, c_j, v_j)`
from the Euler equation at each exogenous savings point `a_j` (`m_j = a_j + c_j`). Where
the continuation is not concave (future discrete choices), `m_j` folds back and some
points are not optimal: the **upper envelope** drops them and inserts the points where
the optimal branch switches. The result, an `EndogenousGrid`, is read at any `m` with
the exact credit-constrained segment below its first point (`c = m − a_0`; or, with no
income at the limit, consumption rising from 0 at the limit), linear interpolation of
consumption above it and the value that consumption gives (`dv/dm = u'(c)` integrated
along it: exact where consumption is linear).

Everything here works on fixed-size arrays (dropped points are padded to the end with
`m = +inf`), so it is jit-, vmap- and grad-able.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..._numerics import count_at_or_below, one_kernel_reduce

NEG_INF = -jnp.inf

# `EndogenousGrid.status`: an ordinary grid, the zero continuation after the last period,
# or a regime inactive in that period (value -inf).
ORDINARY, ZERO, INACTIVE = 0, 1, 2


class EndogenousGrid(eqx.Module):
    """Choice-specific consumption and value functions on their endogenous grids.

    Leading axes (`...`) are the regime's discrete states and discrete actions; then the
    refined endogenous points, sorted by `m` and padded with `m = +inf`, each a row
    `(m, c, v, u)` (read together, so one gather fetches an interval):

    Attributes:
        nodes: per point, the endogenous value of the continuous state `m` (cash on
            hand), consumption `c`, the choice-specific value `v` and the utility of that
            consumption `u = u(c)` (which the read of the value between points uses;
            the marginal value `dv/dm` is `u'(c)`).
        count: number of valid points.
        continuation0: `β·E[V']` at the borrowing limit (the constrained segment's
            continuation).
        feasible: whether the discrete choice is allowed (constraints on discrete
            variables only); infeasible choices have value `-inf`.
        borrowing_limit: the first savings point `a_0`.
        status: `ORDINARY`, `ZERO` (after the last period) or `INACTIVE` (scalar).
    """

    nodes: Float[Array, "... k 4"]
    count: Int[Array, "..."]
    continuation0: Float[Array, "..."]
    feasible: Array
    borrowing_limit: Float[Array, "..."]
    status: Int[Array, "..."]

    @property
    def m(self) -> Array:
        return self.nodes[..., 0]

    @property
    def c(self) -> Array:
        return self.nodes[..., 1]

    @property
    def v(self) -> Array:
        return self.nodes[..., 2]


class AbstractUpperEnvelope(eqx.Module):
    """Turns the raw Euler-equation points of one discrete choice into an upper envelope.

    `__call__(m, c, v, mu, constrained_value, marginal, *, utility)` takes the points in
    savings order (1-d arrays of length `n`) and returns `(nodes, count)`: the refined
    rows `(m, c, v, mu)`, a fixed number of them, sorted by `m`, padded with `m = +inf`.
    `constrained_value(m)` is the value of consuming down to the borrowing limit at `m`,
    `marginal(c)` is `u'(c)`, `utility(c)` is `u(c)`. Where `dominated_rows` returns an
    array, `__call__` also gets its row for the choice as the keyword `dominated`.
    """

    def n_rows(self, n: int) -> int:
        """How many rows `__call__` returns for `n` savings points (a static size: the
        backward induction carries the envelope from period to period)."""
        return 3 * n

    def dominated_rows(self, m: Array, v: Array) -> Array | None:
        """Optional: a test of many choices' raw points at once (`m`, `v`: one row per
        choice, `(rows, n)`), whose row `i` `__call__` then receives as its keyword
        `dominated`. `None` (the default): no such pass, and `__call__` is called
        without it."""
        return None

    @abc.abstractmethod
    def __call__(
        self,
        m: Array,
        c: Array,
        v: Array,
        mu: Array,
        constrained_value: Callable[[Array], Array],
        marginal: Callable[[Array], Array],
        *,
        utility: Callable[[Array], Array],
    ) -> tuple[Array, Array]: ...


class ExactEnvelope(AbstractUpperEnvelope):
    """The exact upper envelope by pairwise comparison (`O(n²)` per choice that folds).

    A point is dropped when a segment between two other consecutive points, or the
    credit-constrained branch, lies above it at its `m` (by more than a relative
    `tolerance`). Where the optimal branch jumps (consecutive kept points that are not
    consecutive savings points), the point where the two branches' values are equal
    (each branch read as `read` reads it: consumption extended linearly from its kept
    point; found by Newton steps from the crossing of their tangents) is inserted twice,
    with the consumption of the left and of the right branch, so the policy jumps there
    and the value has its kink exactly. Without `utility` (a direct call), the crossing
    of the tangents.

    Its rows are two per savings point (`n_rows(n) = 2n`), in savings order: each kept
    point twice; in the slots of the points dropped between two kept ones, the crossing
    (first with the left, then with the right branch's consumption), then copies of the
    right-branch crossing; before the first and after the last kept point, copies of
    that point. Sorted by `m` without a sort, and the copies are zero-width intervals
    that `read` steps over. `count` is `2n` (0 where no point is kept).

    Vectorised: every point is tested against every segment at once, which on savings
    grids of a few hundred points costs less than a sequential scan's per-step overhead,
    and has a clean derivative (the selection is piecewise constant, the kept values and
    crossings are smooth in the parameters). Choices whose points do not fold back skip
    the test (`dominated_rows`).
    """

    tolerance: float = 1e-10

    def _margin(self, v: Array) -> Array:
        """How far above a point another branch must lie to drop it."""
        return jnp.maximum(self.tolerance, 64 * jnp.finfo(v.dtype).eps) * (1.0 + jnp.abs(v))

    def _below_a_segment(self, m: Array, v: Array) -> Array:
        """Whether each point lies below a segment between two other consecutive points
        (one choice's points, `O(n²)`)."""
        n = m.shape[0]
        lo_m, hi_m = m[:-1], m[1:]
        width = hi_m - lo_m
        safe_width = jnp.where(width == 0, 1.0, width)
        slope = (v[1:] - v[:-1]) / safe_width
        # Each segment's bounds and slope computed once, not once per point they are
        # tested against (20 % of the test's time).
        low, high, slope = materialize(jnp.minimum(lo_m, hi_m), jnp.maximum(lo_m, hi_m), slope)
        # Static masks in numpy (constants of the program, not computed by a kernel).
        point = np.arange(n)[:, None]
        segment = np.arange(n - 1)[None, :]
        inside = (m[:, None] >= low[None, :]) & (m[:, None] <= high[None, :])
        incident = (segment == point) | (segment == point - 1)
        on_segment = v[:-1][None, :] + (m[:, None] - lo_m[None, :]) * slope[None, :]
        margin = self._margin(v)
        return one_kernel_reduce(
            jax.lax.bitwise_or,
            False,
            inside & ~incident & (on_segment > v[:, None] + margin[:, None]),
            1,
        )

    def dominated_rows(self, m: Array, v: Array) -> Array:
        """The pairwise test of many choices at once (`(rows, n)`), run only on the rows
        whose points fold back (`m` not strictly increasing).

        Where `m` increases strictly, a point lies only on the two segments it ends, so
        no other segment can drop it: the test's answer is known (`_folds`). The folded
        rows are tested one by one in a `while_loop` that steps from one to the next, so
        a row without folds (every row of a concave problem, of the last period, of a
        choice with no discrete choice ahead) costs no `O(n²)` work. On the retirement example's
        retirement model 3 of its 15 rows fold, and the steady solve takes 11 % less
        time than with the test in every row.
        """
        m, v = jax.lax.stop_gradient((m, v))
        folded = _folds(m)
        rows = m.shape[0]
        # Each folded row's own index, `rows` for the others; `following[r]`: the first
        # folded row after row `r` (`rows` if none).
        marked = jnp.where(folded, jnp.arange(rows, dtype=jnp.int32), rows)
        following = jax.lax.cummin(
            jnp.concatenate([marked[1:], jnp.full((1,), rows, jnp.int32)]), reverse=True
        )

        def test(state):
            row, out = state
            beaten = self._below_a_segment(m[row], v[row])
            out = jax.lax.dynamic_update_index_in_dim(out, beaten, row, 0)
            return following[row], out

        # The loop's state starts from the data (the folded rows, each overwritten by its
        # test; False elsewhere) rather than from constants, which would each be an XLA
        # kernel ready when the period starts (see docs/architecture.md, "threads").
        start = (jnp.min(marked), jnp.broadcast_to(folded[:, None], m.shape))
        _, dominated = jax.lax.while_loop(lambda state: state[0] < rows, test, start)
        return dominated

    def __call__(self, m, c, v, mu, constrained_value, marginal, dominated=None, utility=None):
        n = m.shape[0]
        margin = self._margin(v)
        beaten = self._below_a_segment(m, v) if dominated is None else dominated
        beaten = beaten | (jax.lax.stop_gradient(constrained_value(m)) > v + margin)
        beaten = beaten | ~jnp.isfinite(m)
        kept = ~jax.lax.stop_gradient(beaten)

        # Two rows per savings point, in savings order: a kept point twice; in a gap of
        # dropped points between two kept ones (where the optimal branch jumps), the
        # crossing of the two branches' tangents, with the left and the right branch's
        # consumption in the gap's first slot and the right one's in the others; before
        # the first and after the last kept point, copies of that point. The kept points,
        # taken in savings order, are already in order of m (the optimal savings rise
        # with cash on hand: u(m − a) + βE[V'](a) has increasing differences in (m, a)
        # for concave u, Topkis), so the rows are sorted by m with neither a sort nor a
        # compaction; the copies are zero-width intervals that `read` steps over (the
        # last one holds consumption past the last point).
        index = jnp.arange(n, dtype=jnp.int32)
        # The last kept point <= i and the first >= i: one running maximum of both (the
        # second reversed and negated), one chain of XLA kernels rather than two.
        both = jax.lax.cummax(
            jnp.stack([jnp.where(kept, index, -1), jnp.where(kept, -index, -n)[::-1]]), axis=1
        )
        previous, following = both[0], -both[1][::-1]
        # Each point with the slope of its branch towards the next and from the previous
        # savings point (dc/dm), which extends the branch's consumption to a crossing.
        # Dropped points may hold +inf / -inf: zero them, so that no derivative below
        # meets an infinity (where() would turn its 0 * inf into NaN).
        finite_m = jnp.where(jnp.isfinite(m), m, 0.0)
        width = finite_m[1:] - finite_m[:-1]
        c_slope = jnp.where(width != 0, (c[1:] - c[:-1]) / jnp.where(width != 0, width, 1.0), 0.0)
        forward = jnp.concatenate([c_slope, c_slope[-1:]])
        backward = jnp.concatenate([c_slope[:1], c_slope])
        columns = [jnp.where(kept, m, 0.0), c, jnp.where(kept, v, 0.0), mu, forward, backward]
        # A row of zeros after the points, which a missing neighbour gathers.
        table = jnp.concatenate([jnp.stack(columns, axis=1), jnp.zeros((1, len(columns)), m.dtype)])
        left_point = table[jnp.where(previous >= 0, previous, n)]
        right_point = table[following]
        km, kc, kv, kmu, k_forward = (left_point[:, i] for i in (0, 1, 2, 3, 4))
        m_right, c_right_point, v_right, mu_right, right_backward = (
            right_point[:, i] for i in (0, 1, 2, 3, 5)
        )
        gap = ~kept & (previous >= 0) & (following < n)
        denominator = kmu - mu_right
        safe_denominator = jnp.where(denominator == 0, 1.0, denominator)
        crossing = (v_right - kv + kmu * km - mu_right * m_right) / safe_denominator
        crossing = jnp.where(denominator == 0, 0.5 * (km + m_right), crossing)
        crossing = jnp.clip(crossing, km, jnp.maximum(km, m_right))
        crossing = jnp.where(gap, crossing, 0.0)
        if utility is None:
            value = kv + kmu * (crossing - km)
        else:
            # Where the two branches' values are equal, each read as `read` will read
            # it (consumption linear along the branch, the value its integral).
            left = _Branch(km, kc, kv, k_forward, gap, utility, marginal)
            right = _Branch(m_right, c_right_point, v_right, right_backward, gap, utility, marginal)
            # The branches, then the steps, each computed in one kernel and stored: XLA
            # would otherwise split the steps into a kernel per shared intermediate (23
            # for one step on the retirement model) or repeat them in each column below.
            leaves, tree = jax.tree.flatten((left, right))
            left, right = jax.tree.unflatten(tree, materialize(*leaves))
            crossing, value = materialize(
                *_equal_values(crossing, left, right, utility, marginal, gap)
            )
        c_left = kc + (crossing - km) * k_forward
        c_right = c_right_point + (crossing - m_right) * right_backward
        safe_c_left = jnp.where(gap, c_left, 1.0)
        safe_c_right = jnp.where(gap, c_right, 1.0)
        # Outside the gaps: the point itself if kept, else the last kept point before
        # it, or (before the first kept point) the first one.
        has_left = previous >= 0
        own_m, own_c, own_v, own_mu = (
            jnp.where(has_left, left_point[:, i], right_point[:, i]) for i in range(4)
        )
        first_slot = gap & (previous == index - 1)
        slope_left, slope_right = marginal(safe_c_left), marginal(safe_c_right)
        any_kept = previous[-1] >= 0
        # The six distinct columns of the two rows (both rows share m and v) computed in
        # one kernel (`materialize`), which the interleaving below only copies.
        columns = materialize(
            jnp.where(any_kept, jnp.where(gap, crossing, own_m), jnp.inf),
            jnp.where(any_kept, jnp.where(gap, value, own_v), 0.0),
            jnp.where(any_kept, jnp.where(gap, jnp.where(first_slot, c_left, c_right), own_c), 0.0),
            jnp.where(any_kept, jnp.where(gap, c_right, own_c), 0.0),
            jnp.where(
                any_kept,
                jnp.where(gap, jnp.where(first_slot, slope_left, slope_right), own_mu),
                0.0,
            ),
            jnp.where(any_kept, jnp.where(gap, slope_right, own_mu), 0.0),
        )
        m_rows, v_rows, c0, c1, mu0, mu1 = columns
        row0 = jnp.stack([m_rows, c0, v_rows, mu0], axis=1)
        row1 = jnp.stack([m_rows, c1, v_rows, mu1], axis=1)
        rows = jnp.stack([row0, row1], axis=1).reshape(2 * n, 4)
        count = jnp.where(any_kept, 2 * n, 0).astype(jnp.int32)
        return rows, count

    def n_rows(self, n: int) -> int:
        """Two rows per savings point (see the class docstring)."""
        return 2 * n


# Newton steps that move a jump of the policy from the crossing of the two branches'
# tangents to where their values are equal, before the last (traced) one. A step short
# of the root leaves the crossing's derivative off by as much as the crossing is off its
# root, relatively magnified (the last step's derivative is the implicit function's only
# at the root). On the three-period floor model the values at the wealth nodes err
# 4.3e-5 after one step in all and 8.1e-7 after two; on the second-hour model
# (benchmarks/second_hour.py, a crossing where the left branch's consumption rises
# steeply) four steps left the crossing 3e-5 from the root and its derivative in the
# disutility of work 3% off; the root needs six. A static count, not a loop until no
# point moves: that test reduces over every point, which with a sharded state axis is
# a collective in every step (`tests/test_dcegm.py::
# test_sharded_permanent_type_needs_no_collective`). A point at its root stays there.
CROSSING_STEPS = 8


class _Branch(eqx.Module):
    """One branch of a choice's value next to a jump: its kept point `(m, c, v)`, the
    utility and marginal utility there, and the slope `dc/dm` that extends its
    consumption linearly (`gap`: where there is a jump; elsewhere a harmless branch, so
    that nothing below meets a NaN)."""

    m: Array
    c: Array
    v: Array
    u: Array
    mu: Array
    slope: Array

    def __init__(self, m, c, v, slope, gap, utility, marginal):
        self.m = jnp.where(gap, m, 0.0)
        self.c = jnp.where(gap & (c > 0), c, 1.0)
        self.v = jnp.where(gap, v, 0.0)
        self.u, self.mu = utility(self.c), marginal(self.c)
        self.slope = jnp.where(gap, slope, 0.0)

    def at(self, x: Array, utility: Callable, marginal: Callable) -> tuple[Array, Array]:
        """The value at `x` as `read` reads it between the point and `x` (the point's
        value plus `∫ u'(c) dm` along the linear consumption, `(x − m)·Δu/Δc`; the
        trapezoid where consumption barely changes), and its slope `u'(c(x))`."""
        # An extension that runs out of positive consumption stops short of 0.
        c = jnp.maximum(self.c + (x - self.m) * self.slope, 1e-3 * self.c)
        u, mu = utility(c), marginal(c)
        rise = c - self.c
        close = jnp.abs(rise) <= _CLOSE * (jnp.abs(c) + self.c)
        secant = (u - self.u) / jnp.where(close, 1.0, rise)
        mean_marginal = jnp.where(close, 0.5 * (mu + self.mu), secant)
        return self.v + (x - self.m) * mean_marginal, mu


def _equal_values(
    start: Array,
    left: _Branch,
    right: _Branch,
    utility: Callable,
    marginal: Callable,
    gap: Array,
) -> tuple[Array, Array]:
    """Where the left and the right branch's values are equal, by Newton's method on
    their difference from the crossing of their tangents (`start`), within the two
    kept points; and the value there.

    The tangents cross an error of second order in the savings step away (1e-4 in cash
    on hand on the three-period floor model, where the branches' slopes differ little),
    which puts next period's jump, and the breakpoint savings that lead near it, on the
    wrong side. The steps run on constants in one `fori_loop` of `CROSSING_STEPS`; one
    last step on the traced branches carries the derivative
    (the implicit function's, `dx = −d(V_l − V_r) / (u'(c_l) − u'(c_r))`, exact only at
    the root).
    """

    def step(x, left, right):
        low, high = left.m, jnp.maximum(left.m, right.m)
        value_left, slope_left = left.at(x, utility, marginal)
        value_right, slope_right = right.at(x, utility, marginal)
        derivative = slope_left - slope_right
        steep = jnp.abs(derivative) > 1e-12 * (jnp.abs(slope_left) + jnp.abs(slope_right))
        moved = x - (value_left - value_right) / jnp.where(steep, derivative, 1.0)
        moved = jnp.where(gap & steep & jnp.isfinite(moved), moved, x)
        return jnp.clip(moved, low, high)

    fixed = jax.lax.stop_gradient((start, left, right))
    x = jax.lax.fori_loop(0, CROSSING_STEPS, lambda _, x: step(x, *fixed[1:]), fixed[0])
    x = jnp.where(gap, step(jax.lax.stop_gradient(x), left, right), 0.0)
    return x, left.at(x, utility, marginal)[0]


def _folds(m: Array) -> Array:
    """Whether each row of endogenous points (`(rows, n)`) folds back: a finite point at
    or below the finite one before it, or a finite point after a non-finite one other
    than those that lead the row (savings too small to reach a feasible next period).

    A segment with a non-finite end lies above no point (its slope is NaN), so a row
    that does not fold has no point on a segment other than the two it ends.
    """
    finite = jnp.isfinite(m)
    inverted = finite[:, 1:] & finite[:, :-1] & ~(m[:, 1:] > m[:, :-1])
    resumed = finite[:, 1:] & ~finite[:, :-1]
    events = (inverted | resumed).astype(jnp.int32)
    leading = (~finite[:, 0]).astype(jnp.int32)
    return one_kernel_reduce(jax.lax.add, 0, events, 1) > leading


@jax.custom_jvp
def materialize(*arrays: Array) -> tuple[Array, ...]:
    """`arrays` (floating point) unchanged, with their derivative, computed together in
    one XLA kernel and stored, rather than recomputed inside each kernel that uses them.

    XLA:CPU fuses an elementwise producer into every consumer kernel, and strips
    `optimization_barrier`s before fusing. Where one chain of work (a continuation read:
    a search, gathers, Hermite interpolation) feeds several consumers, each one repeats
    it, which costs run time and, for every copy, compile time. A variadic reduction
    over a new axis of two entries (the array and a constant `-inf`) is a kernel of its
    own that evaluates the chain once for all of `arrays`.
    """
    pairs = tuple(jnp.stack([a, jnp.full_like(a, -jnp.inf)]) for a in arrays)
    inits = tuple(jnp.asarray(-jnp.inf, a.dtype) for a in arrays)
    return tuple(
        jax.lax.reduce(
            pairs,
            inits,
            lambda x, y: tuple(jax.lax.max(p, q) for p, q in zip(x, y, strict=True)),
            (0,),
        )
    )


@materialize.defjvp
def _materialize_jvp(primals, tangents):
    return materialize(*primals), tangents


@jax.jit
def _interpolate(nodes: Array, count: Array, borrowing_limit: Array, limit_point: Array, x: Array):
    """The part of `read` that does not depend on the utility: the interval of `x` (its
    ends `(m, c, v, u)` and the position in it), consumption at `x`, whether `x` is below
    the first point on the credit-constrained segment (`constrained`), past the last
    point (`beyond`, with that point) or above the borrowing limit (`feasible`), and a
    safe consumption at which to evaluate `u` and `u'`.

    With `limit_point`, the interval below the first point runs from the borrowing
    limit with consumption 0 (`(a_0, 0)`) to the first point (see `read`).

    Jitted so that its trace is reused by every read of a solve (each regime, target
    and discrete choice traces `read` again; its arithmetic is a good part of tracing);
    the nested `jit` is inlined, so the compiled program is the same.
    """
    m = nodes[:, 0]
    last = jnp.maximum(count - 1, 1)
    k = jnp.clip(count_at_or_below(m, x) - 1, 0, last - 1)
    pair = jax.lax.dynamic_slice_in_dim(nodes, k, 2)
    (m0, c0, v0, u0), (m1, c1, v1, u1) = pair[0], pair[1]
    end = jax.lax.dynamic_index_in_dim(nodes, last, keepdims=False)
    below = x < nodes[0, 0]
    # Below the first point with the limit point: the interval from (a_0, 0) to the first
    # point (row 0, the pair's first row there). Its left end's value and utility are
    # not used (`read` takes the integral back from the right end).
    to_limit = below & limit_point & (count > 0)
    m0, c0, m1, c1, v1, u1 = (
        jnp.where(to_limit, borrowing_limit, m0),
        jnp.where(to_limit, 0.0, c0),
        jnp.where(to_limit, m0, m1),
        jnp.where(to_limit, c0, c1),
        jnp.where(to_limit, v0, v1),
        jnp.where(to_limit, u0, u1),
    )
    h = m1 - m0
    safe_h = jnp.where(h > 0, h, 1.0)
    t = jnp.maximum(jnp.where(h > 0, (x - m0) / safe_h, 1.0), 0.0)
    consumption = c0 + t * (c1 - c0)
    # Past the last point consumption stays the last point's (and the value is linear in
    # its marginal utility, `read`).
    beyond = x > end[0]
    consumption = jnp.where(beyond, end[1], consumption)
    constrained = below & ~to_limit
    feasible = x > borrowing_limit
    c_constrained = jnp.where(feasible, x - borrowing_limit, 1.0)
    consumption = jnp.where(constrained, c_constrained, consumption)
    safe_consumption = jnp.where(feasible & (consumption > 0), consumption, 1.0)
    interval = (m0, c0, v0, u0, m1, c1, v1, u1, jnp.minimum(t, 1.0))
    flags = (constrained, beyond, feasible)
    return consumption, interval, flags, end, safe_consumption


# Below this relative change of consumption across an interval, the value is linear in
# it (exact for constant consumption): the correction for the curvature of `u` is then
# below `ρ·1e-7/8` of the interval's value increment, and its rounding
# (`eps·|u| / (u'·Δc)` of it) would be larger.
_CLOSE = 1e-7


def read(
    nodes: Array,
    count: Array,
    continuation0: Array,
    borrowing_limit: Array,
    x: Array,
    utility: Callable[[Array], Array],
    marginal: Callable[[Array], Array],
) -> tuple[Array, Array, Array]:
    """Consumption, value and marginal value of one choice at cash on hand `x`.

    `nodes` are the rows `(m, c, v, u)` of one choice's `EndogenousGrid`. Between two
    points consumption is linear, and the value is what that consumption gives: by the
    envelope theorem `dV/dm = u'(c(m))`, so from the left point `V = v_0 + ∫ u'(c)` =
    `v_0 + (u(c(x)) − u_0)·(x − m_0)/(c(x) − c_0)`, and likewise back from the right
    point; the value is their average weighted by the position in the interval (both
    agree where consumption is exactly linear, as with CRRA utility and no income, and
    the read is then exact). Past the last point consumption stays the last point's and
    the value is linear in its marginal utility.

    Below the first point the agent consumes down to the borrowing limit (exact:
    `u(x − a_0) + β·E[V'](a_0)`), unless saving exactly the limit has value `-inf`
    next period (`continuation0` is `-inf`: no income at the limit). Consumption then
    goes to 0 at the limit (`u'(c) = β·E[R·V'_m] → ∞`), the point `(a_0, 0)` belongs to
    the policy: below the first point consumption is linear from 0 at the limit, and
    the value is the first point's less `∫ u'(c)` back to `x` (finite above the limit,
    `-inf` only at it). `x` at or below the borrowing limit has no feasible consumption:
    value `-inf`.
    """
    limit_point = continuation0 == NEG_INF
    consumption, interval, flags, end, safe_consumption = _interpolate(
        nodes, count, borrowing_limit, limit_point, x
    )
    m0, c0, v0, u0, m1, c1, v1, u1, s = interval
    constrained, beyond, feasible = flags
    marginal_value = marginal(safe_consumption)
    u_x = utility(safe_consumption)
    # On the interval, c(x) − c_0 = t·Δc and x − m_0 = t·h, so the integral from the left
    # is `(u(c(x)) − u_0)·h/Δc`, the one back from the right `(u_1 − u(c(x)))·h/Δc`, and
    # their weighted average `(1 − s)·v_0 + s·v_1 + (u(c(x)) − (1 − s)·u_0 − s·u_1)·h/Δc`
    # (one division). Where consumption barely changes, the value is linear.
    h = jnp.where(jnp.isfinite(m1) & jnp.isfinite(m0), m1 - m0, 0.0)
    rise = c1 - c0
    close = jnp.abs(rise) <= _CLOSE * (jnp.abs(c0) + jnp.abs(c1))
    run = jnp.where(close, 0.0, h) / jnp.where(close, 1.0, rise)
    # The left end is not used where it is the limit point (consumption 0) or padding.
    left_ok = (c0 > 0) & jnp.isfinite(v0)
    safe_v0, safe_u0 = jnp.where(left_ok, v0, 0.0), jnp.where(left_ok, u0, 0.0)
    linear = safe_v0 + s * (v1 - safe_v0)
    chord = safe_u0 + s * (u1 - safe_u0)
    value = jnp.where(left_ok, linear + (u_x - chord) * run, v1 - (u1 - u_x) * run)
    beyond_value = end[2] + marginal_value * jnp.where(beyond, x - end[0], 0.0)
    value = jnp.where(beyond, beyond_value, value)
    value = jnp.where(constrained, u_x + continuation0, value)
    value = jnp.where(feasible, value, NEG_INF)
    return consumption, value, marginal_value
