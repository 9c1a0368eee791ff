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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..._errors import ModelInitializationError
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


def relative(tolerance: float, roundings: int, dtype) -> float:
    """`tolerance`, or `roundings` roundings of `dtype` where that is more."""
    return max(tolerance, roundings * float(jnp.finfo(dtype).eps))


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

    Args:
        n_kinks: the most breakpoints the law of motion has in savings, at each node of
            the draw (for each value of the next draw of a drawn state). Breakpoints
            outside the savings grid do not count. More is the check
            `next_<state>:kinks` when solving.

    Example (a consumption floor, means-tested against next period's resources):
        >>> def next_wealth(wealth, consumption, interest_rate, next_income, floor):
        ...     resources = (1 + interest_rate) * (wealth - consumption) + next_income
        ...     return jnp.maximum(resources, floor)
        >>> solver = DCEGM(state="wealth", action="consumption", savings=savings,
        ...                kinks=BudgetKinks(n_kinks=1))
    """

    n_kinks: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        if not isinstance(self.n_kinks, int) or isinstance(self.n_kinks, bool) or self.n_kinks < 1:
            raise ModelInitializationError(
                f"BudgetKinks: n_kinks must be an int >= 1, got {self.n_kinks!r}."
            )

    def count(self, regime: RegimePlan) -> int:
        """How many breakpoints a choice of `regime` has room for: `n_kinks` per node of
        its draw (a static size: the savings points are carried from period to period)."""
        return self.n_kinks * math.prod(regime.grids[s].n_points for s in regime.drawn)

    def breakpoints(
        self, problem: RegimeProblem, state: str, action: str, discrete, grid: Array
    ) -> tuple[Array, Array]:
        """The breakpoints of one discrete state and action, `(count,)` (below the
        grid where there are fewer), and how many more there are than `n_kinks` (the
        check `next_<state>:kinks`: 0 where none)."""
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
            return jnp.where(found, meet, below), excess

        drawn = problem.regime.drawn
        if not drawn:
            return at({})
        sizes = [problem.regime.grids[s].n_points for s in drawn]
        mesh = jnp.meshgrid(*(jnp.arange(n, dtype=jnp.int32) for n in sizes), indexing="ij")
        codes = {s: m.reshape(-1) for s, m in zip(drawn, mesh, strict=True)}
        points, excess = jax.vmap(at)(codes)
        return points.reshape(-1), jnp.max(excess)


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


def kinked_savings(grid: Array, breakpoints: Array) -> tuple[Array, Array]:
    """The savings points with each breakpoint twice, sorted, and where each point's
    gross return is read: `(points, slope_at)`.

    Grid points are read just right of themselves (a breakpoint on a grid point is the
    grid point's right side). A breakpoint inside `(grid[0], grid[-1])` is a point at `a*`
    read once just left of it and once just right (left first); outside, it is clamped to
    the nearer end and read on the grid's side there (a copy of that end's point, a
    zero-width interval that the envelope and the read step over).

    Breakpoints within `SNAP` of each other or of a grid point are made equal first (the
    same breakpoint found at several nodes of the draw differs by roundings): the sorted
    points then go left sides, grid point, right sides, and consumption rises with them.
    """
    low, high = grid[0], grid[-1]
    at = jnp.sort(jnp.clip(breakpoints, low, high))
    tolerance = relative(SNAP, 8, grid.dtype) * (1.0 + jnp.abs(at))
    side_step = relative(SIDE, 64, grid.dtype)
    nearest = jnp.clip(jnp.searchsorted(grid, at), 1, grid.shape[0] - 1)
    for candidate in (grid[nearest - 1], grid[nearest]):
        at = jnp.where(jnp.abs(at - candidate) <= tolerance, candidate, at)
    # Each run of breakpoints closer than the tolerance takes its first one's value.
    starts = jnp.concatenate([jnp.ones((1,), bool), jnp.diff(at) > tolerance[1:]])
    first = jax.lax.cummax(jnp.where(starts, jnp.arange(at.shape[0]), 0))
    at = at[first]
    side = side_step * (1.0 + jnp.abs(at))
    left = jnp.where(at > low, at - side, at + side)
    right = jnp.where(at < high, at + side, at - side)
    points = jnp.concatenate([at, grid, at])
    grid_side = grid + side_step * (1.0 + jnp.abs(grid))
    slope_at = jnp.concatenate([left, grid_side, right])
    # Stable: at equal points the left sides first, then the grid's point, then the right.
    order = jnp.argsort(jax.lax.stop_gradient(points), stable=True)
    return points[order], slope_at[order]
