"""Declared budget kinks (NB-EGM): the breakpoints of a piecewise-affine law of motion in
savings, as extra points of DC-EGM's savings grid.

A consumption floor (`m' = max(R·a + y', floor)`: a means-tested transfer
`max(0, floor − R·a − y')`), a phased-out transfer, a tax bracket or a borrowing rate
above the saving rate make next period's cash on hand piecewise affine in savings `a`.
Between two breakpoints the Euler equation holds as usual; at a breakpoint `a*` the
continuation `E[V'](a)` has a left and a right slope, and the first-order condition is
the inequality `β·E'_+(a*) ≤ u'(c) ≤ β·E'_-(a*)`:

- where the slope falls at `a*` (a concave kink: a higher tax above the bracket), every
  cash on hand in `[a* + c_-, a* + c_+]` saves exactly `a*`, with `c_± = (u')⁻¹(β·E'_±)`:
  a mass of agents sits at the kink ("save just below the threshold"). The two points
  `(a* + c_-, c_-)` and `(a* + c_+, c_+)` bound that segment, and between them
  consumption is `m − a*` exactly, which the linear read of the endogenous grid is;
- where it rises (a convex kink: the floor, below which saving is confiscated), the two
  points fold back (`a* + c_- > a* + c_+`) and the upper envelope takes the best of the
  segments on either side: no one sits at the kink, and cash on hand jumps over it (the
  spend-down: saving nothing rather than a little).

So each breakpoint adds two savings points at `a*` itself, one with the left and one with
the right slope of the continuation (read a relative `SIDE` away from it, on each side:
the gross return of a piecewise-affine budget is constant there, and so is the piece of
next period's value), and the EGM, the upper envelope and the read of the endogenous
grids are DC-EGM's own.

The breakpoints are found in the law of motion itself, so nothing is written twice and
breakpoints that move with parameters (the floor) are traced and differentiable: at each
point `a_j` of the savings grid and each node of the draw, next period's state `m'_j` and
its slope just right of `a_j`, `g_j`. Where `g_j ≠ g_{j+1}`, the interval `(a_j, a_{j+1}]`
holds a breakpoint, where the two affine pieces meet:
`a* = (m'_{j+1} − m'_j + g_j·a_j − g_{j+1}·a_{j+1}) / (g_j − g_{j+1})` (exact for one
breakpoint in the interval; smooth in the parameters through `m'`). The user declares how
many breakpoints each node's law of motion has at most (`BudgetKinks(n_kinks)`), which
fixes the size of the savings grid; more are a check failure (`next_<state>:kinks`).

Before the last period, next period's consumption has kinks and jumps of its own, and a
savings interval whose next states straddle one would be interpolated across (the
consumption first order in the savings step where the slope jumps, the value second).
The reader of next period's grids says where they are (`consumption_kinks`: the change
of `dc/dm` from one interval of the endogenous grid to the next, and jumps, two rows at
one `m`); `next_levels` keeps the `next_kinks` largest at each node of the draw, at the
next discrete states the choice moves to; `reaching` maps each back to the savings at
which the law of motion reaches it (affine between the breakpoints just found: inverted
exactly, and traced); and `kinked_savings` merges them into the grid as grid points, by counting.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..._errors import ModelInitializationError
from ..._numerics import relative
from .._reading import REFERENCE_ACTION

if TYPE_CHECKING:
    from ..._model._plan import RegimePlan
    from .._kernel import RegimeProblem

# How far (relative to `1 + |a*|`) from a breakpoint its one-sided slopes are read, at
# least 64 roundings (float32); breakpoints closer than `SNAP` (at least 8 roundings) to
# each other or to a grid point are one; slopes of the law of motion closer than
# `KINK_TOLERANCE` (at least 64 roundings) are one affine piece.
SIDE = 1e-9
SNAP = 1e-11
KINK_TOLERANCE = 1e-9


class BudgetKinks(eqx.Module):
    """Declares the law of motion of `DCEGM`'s state piecewise affine in savings, with at
    most `n_kinks` breakpoints at each node of the draw (NB-EGM).

    A consumption floor (a means-tested transfer), a phased-out benefit, tax brackets or a
    borrowing rate above the saving rate make next period's cash on hand piecewise affine
    in savings `a = state − action`. With `kinks=BudgetKinks(n_kinks)`, DCEGM finds the
    breakpoints in the law of motion (they may move with parameters: traced and
    differentiable), solves each affine piece by the EGM, adds the points at the
    breakpoints themselves (where a mass of agents saves exactly the breakpoint), and
    takes the upper envelope across the pieces.

    Before the last period, next period's consumption function has kinks and jumps of
    its own (where next period's agents start or stop saving exactly a breakpoint, reach
    the borrowing limit, or jump over a convex kink). The savings that lead to them (at
    each node of the draw: the law of motion inverted, exact between its breakpoints)
    are added to the savings grid too, so that the endogenous grid does not interpolate
    across them: the `next_kinks` largest (by the change of next period's slope of
    consumption; jumps first, mapped in float64 only) at each node.

    Args:
        n_kinks: the most breakpoints the law of motion has in savings, at each node of
            the draw (for each value of the next draw of a drawn state). Breakpoints
            outside the savings grid do not count. More is the check
            `next_<state>:kinks` when solving.
        next_kinks: how many kinks and jumps of next period's consumption are mapped to
            savings points, at each node of the draw (default `2·n_kinks + 1`: both ends
            of each breakpoint's mass of savers, and the borrowing limit; 0: none). Where
            next period has more, the largest are kept.

    Example (a consumption floor, means-tested against next period's resources):
        >>> def next_wealth(wealth, consumption, interest_rate, next_income, floor):
        ...     resources = (1 + interest_rate) * (wealth - consumption) + next_income
        ...     return jnp.maximum(resources, floor)
        >>> solver = DCEGM(state="wealth", action="consumption", savings=savings,
        ...                kinks=BudgetKinks(n_kinks=1))
    """

    n_kinks: int = eqx.field(static=True, default=1)
    next_kinks: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not isinstance(self.n_kinks, int) or isinstance(self.n_kinks, bool) or self.n_kinks < 1:
            raise ModelInitializationError(
                f"BudgetKinks: n_kinks must be an int >= 1, got {self.n_kinks!r}."
            )
        if self.next_kinks is not None and (
            not isinstance(self.next_kinks, int)
            or isinstance(self.next_kinks, bool)
            or self.next_kinks < 0
        ):
            raise ModelInitializationError(
                f"BudgetKinks: next_kinks must be an int >= 0 (0: next period's kinks not "
                f"mapped) or None (2·n_kinks + 1), got {self.next_kinks!r}."
            )

    @property
    def n_next(self) -> int:
        """How many of next period's kinks are mapped to savings, at each node."""
        return 2 * self.n_kinks + 1 if self.next_kinks is None else self.next_kinks

    def count(self, regime: RegimePlan) -> int:
        """How many breakpoints a choice of `regime` has room for: `n_kinks` per node of
        its draw (a static size: the savings points are carried from period to period)."""
        return self.n_kinks * n_nodes(regime)

    def count_next(self, regime: RegimePlan) -> int:
        """How many savings points next period's kinks add to a choice of `regime`:
        `n_next` per node of its draw."""
        return self.n_next * n_nodes(regime)

    def breakpoints(
        self,
        problem: RegimeProblem,
        state: str,
        action: str,
        discrete,
        grid: Array,
        levels: Array | None = None,
    ) -> tuple[Array, Array, Array | None]:
        """The breakpoints of one discrete state and action, `(count,)` (below the
        grid where there are fewer), how many more there are than `n_kinks` (the
        check `next_<state>:kinks`: 0 where none), and the savings at which next
        period's state reaches `levels` (`(n_nodes, n_next)`, next period's kinks at
        each node, NaN where none: `(count_next,)`, below the grid where none or
        outside it; None without `levels`)."""
        law = next_state_law(problem, state, action, discrete)
        reference = jnp.asarray(REFERENCE_ACTION, grid.dtype)
        side = relative(SIDE, 64, grid.dtype) * (1.0 + jnp.abs(grid))
        tolerance = relative(KINK_TOLERANCE, 64, grid.dtype)

        def at(node):
            def next_state(a):
                return law(a + reference, reference, node)

            m_next = jax.vmap(next_state)(grid)
            _, slope = jax.vmap(lambda a: jax.jvp(next_state, (a,), (jnp.ones_like(a),)))(
                grid + side
            )
            slope = jax.lax.stop_gradient(slope)
            change = ~(
                jnp.abs(slope[1:] - slope[:-1])
                <= tolerance * (1.0 + jnp.abs(slope[1:]) + jnp.abs(slope[:-1]))
            )
            (index,) = jnp.nonzero(change, size=self.n_kinks, fill_value=0)
            found = jnp.arange(self.n_kinks) < jnp.sum(change)
            g0, g1 = slope[index], slope[index + 1]
            a0, a1 = grid[index], grid[index + 1]
            denominator = jnp.where(found, g0 - g1, 1.0)
            meet = (m_next[index + 1] - m_next[index] + g0 * a0 - g1 * a1) / denominator
            meet = jnp.clip(meet, a0, a1)
            below = grid[0] - 1.0 - jnp.abs(grid[0])
            excess = jnp.maximum(jnp.sum(change) - self.n_kinks, 0).astype(grid.dtype)
            return jnp.where(found, meet, below), excess, m_next, slope

        codes = node_codes(problem)
        if codes is None:
            points, excess, m_next, slope = at({})
            points, m_next, slope = points[None], m_next[None], slope[None]
        else:
            points, excess, m_next, slope = jax.vmap(at)(codes)
            excess = jnp.max(excess)
        mapped = None
        if levels is not None:
            mapped = jax.vmap(lambda m, g, x: reaching(grid, m, g, x, tolerance))(
                m_next, slope, levels
            ).reshape(-1)
        return points.reshape(-1), excess, mapped


def next_levels(
    problem: RegimeProblem,
    readers: dict,
    targets: tuple[str, ...],
    discrete,
    state: str,
    action: str,
    count: int,
    dtype,
) -> Array:
    """The `count` largest kinks and jumps of next period's consumption that one discrete
    state and action (`discrete`) can reach at each node of its draw, `(n_nodes,
    count)` (next-period cash on hand; NaN where fewer): those of every regime in
    `targets` whose reader knows them, at the next discrete states the choice moves to
    (the node's drawn states, the deterministic ones), over the stochastic ones and the
    next period's discrete choices.

    Next period's kinks are the same for every choice of this period: each target's
    are found over all its rows, depending on no choice (under the `vmap` over the
    choices, found once), and each choice and node only takes the rows it reaches."""
    tolerance = relative(KINK_TOLERANCE, 64, dtype)
    reference = jnp.asarray(REFERENCE_ACTION, dtype)
    # The discrete transitions do not depend on the continuous state or action.
    evaluate = problem.evaluator({**discrete, state: reference, action: reference})
    deterministic, _ = problem.next_states(evaluate)
    found = {target: readers[target].kinks() for target in targets}
    known = {target: kinks for target, kinks in found.items() if kinks is not None}

    def at(node):
        codes = {**deterministic, **node}
        points, change = [], []
        for target, kinks in known.items():
            # The codes of the states the choice moves to, every row of the others.
            rows = tuple(codes.get(s, slice(None)) for s in readers[target].axes)
            points.append(kinks[0][rows].reshape(-1))
            change.append(kinks[1][rows].reshape(-1))
        if not points:
            return jnp.full((count,), jnp.nan, dtype)
        return largest(jnp.concatenate(points), jnp.concatenate(change), count, tolerance)

    codes = node_codes(problem)
    return at({})[None] if codes is None else jax.vmap(at)(codes)


def n_nodes(regime: RegimePlan) -> int:
    """How many joint nodes the regime's draw has (1 without drawn states)."""
    return math.prod(regime.grids[s].n_points for s in regime.drawn)


def node_codes(problem: RegimeProblem) -> dict[str, Array] | None:
    """The codes of the drawn states at each joint node of the draw (row-major), or None
    without drawn states."""
    drawn = problem.regime.drawn
    if not drawn:
        return None
    sizes = [problem.regime.grids[s].n_points for s in drawn]
    mesh = jnp.meshgrid(*(jnp.arange(n, dtype=jnp.int32) for n in sizes), indexing="ij")
    return {s: m.reshape(-1) for s, m in zip(drawn, mesh, strict=True)}


def reaching(grid: Array, m_next: Array, slope: Array, levels: Array, tolerance) -> Array:
    """The savings at which next period's state `m'` reaches each of `levels` (NaN: none
    wanted), given `m'` at the savings `grid` and its slope just right of each point:
    `m'` is affine between its breakpoints, at most one in each interval of the grid
    (where the two affine pieces meet, as `BudgetKinks.breakpoints` finds them), so the
    level is reached on the left piece up to that meeting point and on the right one
    beyond. Below the grid where the level is not reached inside it (or is NaN).

    `m'` is taken as nondecreasing in savings (a budget in which saving more never
    leaves less); where it is not, the savings found are still points inside the grid,
    which the EGM solves as any other, only not at the kink."""
    n = grid.shape[0]
    found = (levels >= m_next[0]) & (levels <= m_next[-1])
    safe = jnp.where(found, levels, m_next[0])
    j = jnp.clip(jnp.searchsorted(m_next, safe, side="right") - 1, 0, n - 2)
    a0, a1, m0, m1, g0, g1 = grid[j], grid[j + 1], m_next[j], m_next[j + 1], slope[j], slope[j + 1]
    bent = ~(jnp.abs(g0 - g1) <= tolerance * (1.0 + jnp.abs(g0) + jnp.abs(g1)))
    meet = (m1 - m0 + g0 * a0 - g1 * a1) / jnp.where(bent, g0 - g1, 1.0)
    meet = jnp.clip(meet, a0, a1)
    m_meet = m0 + g0 * (meet - a0)
    rise = m1 - m0
    secant = a0 + (safe - m0) * (a1 - a0) / jnp.where(rise > 0, rise, 1.0)
    secant = jnp.where(rise > 0, secant, a1)
    on_left = a0 + (safe - m0) / jnp.where(g0 > 0, g0, 1.0)
    on_right = a1 - (m1 - safe) / jnp.where(g1 > 0, g1, 1.0)
    left = safe <= m_meet
    piecewise = jnp.where(left, jnp.where(g0 > 0, on_left, meet), jnp.where(g1 > 0, on_right, meet))
    savings = jnp.clip(jnp.where(bent, piecewise, secant), a0, a1)
    below = grid[0] - 1.0 - jnp.abs(grid[0])
    return jnp.where(found, savings, below)


def consumption_kinks(
    nodes: Array, count: Array, limit: Array, continuation0: Array, jumps: bool
) -> tuple[Array, Array]:
    """Where one choice's consumption function (the rows `(m, c, …)` of its
    `EndogenousGrid`, sorted by `m`, copies as zero-width intervals) has a kink or a
    jump, and how large: at each row, `(m, change)`, the change of the slope `dc/dm`
    across the row (`inf` for a jump where `jumps`; -1 where the row is not a kink).

    A kink is counted once, at the row that starts the first interval of positive width
    after it (the last of its copies). The first point is a kink against the
    credit-constrained segment below it (`dc/dm = 1`, or the line from `(a_0, 0)` where
    `continuation0` is `-inf`); the last is not (consumption past it is held, a
    convention of the read, not of the model)."""
    m, c = nodes[:, 0], nodes[:, 1]
    k = nodes.shape[0]
    index = jnp.arange(k)
    inside = index < count - 1
    finite_m = jnp.where(index < count, m, 0.0)
    width = jnp.concatenate([finite_m[1:] - finite_m[:-1], jnp.zeros((1,), m.dtype)])
    rise = jnp.concatenate([c[1:] - c[:-1], jnp.zeros((1,), m.dtype)])
    # Intervals narrower than this are copies or jumps (the envelope's are exactly 0).
    tiny = 64 * jnp.finfo(m.dtype).eps * (1.0 + jnp.abs(finite_m))
    starts = inside & (width > tiny)
    slope = rise / jnp.where(starts, width, 1.0)
    previous = jax.lax.cummax(jnp.where(starts, index, -1))
    # The last interval of positive width before the one this row starts.
    before = jnp.concatenate([jnp.full((1,), -1, previous.dtype), previous[:-1]])
    has_before = before >= 0
    left_slope = slope[jnp.maximum(before, 0)]
    end_c = c[jnp.clip(before + 1, 0, k - 1)]
    jump = has_before & ~(
        jnp.abs(c - end_c) <= relative(KINK_TOLERANCE, 64, c.dtype) * (1.0 + jnp.abs(c))
    )
    first = starts & ~has_before
    x0, c0 = m[0], c[0]
    run = x0 - limit
    to_limit = c0 / jnp.where(run > 0, run, 1.0)
    constrained_slope = jnp.where(continuation0 == -jnp.inf, to_limit, 1.0)
    left_slope = jnp.where(first, constrained_slope, left_slope)
    change = jnp.abs(slope - left_slope)
    if jumps:
        change = jnp.where(jump, jnp.inf, change)
    else:
        change = jnp.where(jump, -1.0, change)
    return m, jnp.where(starts & (count > 0), change, -1.0)


def largest(points: Array, change: Array, k: int, tolerance: float) -> Array:
    """The `k` points of largest `change` (NaN for those past the ones with a change
    above `tolerance`), by `k` passes of an argmax (no sort)."""
    change = jax.lax.stop_gradient(change)

    def pick(i, state):
        remaining, chosen = state
        best = jnp.argmax(remaining)
        chosen = chosen.at[i].set(
            jnp.where(remaining[best] > tolerance, best, -1).astype(jnp.int32)
        )
        return remaining.at[best].set(-jnp.inf), chosen

    chosen = jnp.full((k,), -1, jnp.int32)
    _, chosen = jax.lax.fori_loop(0, k, pick, (change, chosen))
    return jnp.where(chosen >= 0, points[jnp.maximum(chosen, 0)], jnp.nan)


def next_state_law(problem: RegimeProblem, state: str, action: str, discrete):
    """The law of motion of `state` at one discrete state and action, as a function of
    `(state, action, node)`, `node` the codes of the drawn states' next values."""
    function = problem.regime.state_transitions[state].function
    assert function is not None

    def law(m, c, node):
        e = problem.evaluator({**discrete, state: m, action: c})
        if node:
            e = e.with_inputs({f"next_{s}": problem.value_of(s, k) for s, k in node.items()})
        return jnp.asarray(e(function))

    return law


def kinked_savings(
    grid: Array, breakpoints: Array, mapped: Array | None = None
) -> tuple[Array, Array]:
    """The savings points with each breakpoint twice and the `mapped` points (next
    period's kinks) once, sorted, and where each point's gross return is read:
    `(points, slope_at)`.

    Grid points are read just right of themselves (a breakpoint on a grid point is the
    grid point's right side), and so are mapped points. A breakpoint inside
    `(grid[0], grid[-1])` is a point at `a*` read once just left of it and once just
    right (left first); outside, it is clamped to the nearer end and read on the grid's
    side there (a copy of that end's point, a zero-width interval that the envelope and
    the read step over). Mapped points outside the grid are clamped to it likewise.

    Breakpoints within `SNAP` of each other or of a grid point are made equal first (the
    same breakpoint found at several nodes of the draw differs by roundings), and mapped
    points within `SNAP` of a grid point, or two `SIDE`s of a breakpoint, are made equal
    to it: the sorted points then go left sides, grid point, mapped points, right sides,
    and consumption rises with them. Merged into the grid by counting, not by a sort.
    """
    low, high = grid[0], grid[-1]
    at = _snapped(grid, jnp.clip(breakpoints, low, high))
    # Each run of breakpoints closer than the tolerance takes its first one's value.
    at = jnp.sort(at)
    tolerance = relative(SNAP, 8, grid.dtype) * (1.0 + jnp.abs(at))
    starts = jnp.concatenate([jnp.ones((1,), bool), jnp.diff(at) > tolerance[1:]])
    first = jax.lax.cummax(jnp.where(starts, jnp.arange(at.shape[0]), 0))
    at = at[first]
    side_step = relative(SIDE, 64, grid.dtype)
    side = side_step * (1.0 + jnp.abs(at))
    left = jnp.where(at > low, at - side, at + side)
    right = jnp.where(at < high, at + side, at - side)
    grid_side = grid + side_step * (1.0 + jnp.abs(grid))
    # Extra points by class: at equal points, left sides (0) before the grid's point
    # (1), then mapped points (2), then right sides (3).
    extra_points, extra_reads, classes = [at], [left], [jnp.zeros(at.shape, jnp.int32)]
    if mapped is not None:
        # Within two `SIDE`s of a breakpoint a mapped point would be read on the
        # breakpoint's other side: it is the breakpoint's right side.
        mapped = _snapped(grid, jnp.clip(mapped, low, high), at, 2 * side_step)
        extra_points.append(mapped)
        extra_reads.append(mapped + side_step * (1.0 + jnp.abs(mapped)))
        classes.append(jnp.full(mapped.shape, 2, jnp.int32))
    extra_points.append(at)
    extra_reads.append(right)
    classes.append(jnp.full(at.shape, 3, jnp.int32))
    points, reads, cls = (jnp.concatenate(x) for x in (extra_points, extra_reads, classes))
    key = jax.lax.stop_gradient(points)
    n = grid.shape[0]
    # How many grid points come before each extra point, and how many extra points.
    grid_before = jnp.where(
        cls == 0,
        jnp.searchsorted(jax.lax.stop_gradient(grid), key, side="left"),
        jnp.searchsorted(jax.lax.stop_gradient(grid), key, side="right"),
    )
    order = jnp.arange(key.shape[0])
    earlier = (key[None, :] < key[:, None]) | (
        (key[None, :] == key[:, None])
        & (
            (cls[None, :] < cls[:, None])
            | ((cls[None, :] == cls[:, None]) & (order[None, :] < order[:, None]))
        )
    )
    extra_position = grid_before + jnp.sum(earlier, axis=1)
    # An extra point comes before grid point `j` exactly when fewer than `j + 1` grid
    # points come before it.
    grid_position = jnp.arange(n) + jnp.sum(grid_before[None, :] <= jnp.arange(n)[:, None], axis=1)
    position = jnp.concatenate([grid_position, extra_position])
    size = n + key.shape[0]
    merged = (
        jnp.zeros((size,), grid.dtype)
        .at[position]
        .set(jnp.concatenate([grid, points]), unique_indices=True)
    )
    slope_at = (
        jnp.zeros((size,), grid.dtype)
        .at[position]
        .set(jnp.concatenate([grid_side, reads]), unique_indices=True)
    )
    return merged, slope_at


def _snapped(
    grid: Array, points: Array, others: Array | None = None, near_others: float = 0.0
) -> Array:
    """`points` made equal to a grid point within `SNAP` of it, or to one of `others`
    within `near_others` (relative) of it."""
    tolerance = relative(SNAP, 8, grid.dtype) * (1.0 + jnp.abs(points))
    nearest = jnp.clip(jnp.searchsorted(grid, points), 1, grid.shape[0] - 1)
    for candidate in (grid[nearest - 1], grid[nearest]):
        points = jnp.where(jnp.abs(points - candidate) <= tolerance, candidate, points)
    if others is not None:
        distance = jnp.abs(points[:, None] - others[None, :])
        closest = jnp.argmin(distance, axis=1)
        near = jnp.min(distance, axis=1) <= near_others * (1.0 + jnp.abs(points))
        points = jnp.where(near, others[closest], points)
    return points
