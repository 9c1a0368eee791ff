"""Continuous actions refined off their grids: `GridSearch(refine=...)`.

After the grid search, each refined continuous action is polished inside its bracket
(the grid neighbours of the best grid point) by a safeguarded Newton iteration on `q`
along that action, with every other action at its best; several refined actions take
turns (`Refine.rounds`), then joint Newton steps with the full Hessian. The search runs
without derivatives; the derivatives are those of the implicit function theorem:

- the value is `q` at the refined point, whose derivative is `q_θ` there (the envelope
  theorem: at an interior optimum `q_a = 0`, and at a bound the action does not move);
- the refined action's derivative is `−Q_aa⁻¹ Q_aθ` over the actions at an interior
  optimum (one more Newton step, taken with derivatives, from the converged point), and
  zero for an action at a bound, a binding constraint, a kink or a flat objective.

Each refined action of each discrete choice gets a result code (`RefineCode`): the
cells where its derivative is not the interior one (or where another bracket is as
good, a tie) are reported instead of being given a NaN or a silent wrong derivative.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._numerics import negative_definite, solve_small
from ._axes import Axis, map_axis, reduce_axis
from ._check_arrays import max_each
from ._kernel import RegimeProblem
from ._reduce import at_first_maximum
from ._refine_spec import Refine, RefineCode

T = TypeVar("T")


# ----------------------------------------------------------------------------- grid
def _top(values: Array, index: Array, k: int) -> tuple[Array, Array]:
    """The `k` largest of `values` (any shape) with their `index`, first occurrence
    first among equals."""
    flat, flat_index = values.reshape(-1), index.reshape(-1)
    top, where = jax.lax.top_k(flat, k)
    return top, flat_index[where]


def grid_best(
    problem: RegimeProblem, state: dict, fixed: dict, continuous: tuple[Axis, ...]
) -> tuple[Array, Array, Array, tuple[Array, ...]]:
    """The best point of the product of the `continuous` action grids at `state` (other
    actions `fixed`): its value and flat index, the best value outside the box of
    radius 1 around it (a rival bracket), and the check violations over the grid.

    Unsplayed, the grid's values are reduced directly (XLA fuses the reductions with the
    kernel). With a splayed axis the grid is scanned in chunks that carry the `3^M + 1`
    best points, among which the best one outside the box always is.
    """
    shape = tuple(int(a.points.shape[0]) for a in continuous)
    size = math.prod(shape)
    chunk = math.prod(
        a.batch_size if 0 < a.batch_size < n else n for a, n in zip(continuous, shape, strict=True)
    )
    dtype = jnp.zeros(()).dtype

    def at(i):
        codes = jnp.unravel_index(i, shape)
        action = {a.name: a.points[c] for a, c in zip(continuous, codes, strict=True)}
        value, violations = problem.q(state, {**fixed, **action})
        return value, i.astype(dtype), violations

    def outside(index: Array, best: Array) -> Array:
        """Whether the flat `index` lies outside the box of radius 1 around `best`."""
        codes = jnp.unravel_index(index, shape)
        centre = jnp.unravel_index(best, shape)
        far = [jnp.abs(c - b) >= 2 for c, b in zip(codes, centre, strict=True)]
        return functools.reduce(jnp.logical_or, far)

    if chunk >= size:
        if len(continuous) == 1:  # the points themselves, not gathered by index
            axis = continuous[0]
            values, violations = jax.vmap(lambda x: problem.q(state, {**fixed, axis.name: x}))(
                axis.points
            )
        else:
            values, _, violations = jax.vmap(at)(jnp.arange(size))
        best, (top,) = at_first_maximum(values, 0, (values,))
        rival = jnp.max(jnp.where(outside(jnp.arange(size), best), values, -jnp.inf))
        return top, best, rival, max_each(violations, (0,))

    k = min(3 ** len(continuous) + 1, size)

    def reduce(outputs):
        values, index, violations = outputs
        top, where = _top(values, index, min(k, values.size))
        if top.shape[0] < k:  # a chunk of fewer than k points: padded with the identity
            pad = jnp.full((k - top.shape[0],), -jnp.inf, top.dtype)
            top, where = jnp.concatenate([top, pad]), jnp.concatenate([where, pad])
        return top, where, max_each(tuple(v.reshape(-1) for v in violations), (0,))

    top, index, violations = reduce_axis(at, jnp.arange(size), chunk, reduce)
    flat = jnp.clip(jnp.nan_to_num(index, nan=0.0, neginf=0.0), 0, size - 1).astype(jnp.int32)
    far = outside(flat[1:], flat[0]) & (top[1:] > -jnp.inf)
    rival = jnp.max(jnp.where(far, top[1:], -jnp.inf))
    return top[0], flat[0], rival, violations


# ----------------------------------------------------------------------------- line
class _Line(NamedTuple):
    """The state of the safeguarded Newton iteration along one action: the bracket
    `[lo, hi]` (with `q` and its first two derivatives at ends that were evaluated, NaN
    where not; an end is `open` where it is infeasible), the best point with its
    `q, g, h`, the last estimate of a kink's location (NaN before one) and how many
    steps in a row aimed past it fell short."""

    lo: Array
    hi: Array
    q_lo: Array
    g_lo: Array
    h_lo: Array
    q_hi: Array
    g_hi: Array
    h_hi: Array
    lo_open: Array
    hi_open: Array
    x: Array
    q: Array
    g: Array
    h: Array
    kink: Array
    short: Array


def value_slope_curvature(f: Callable[[Array], Array], t: Array) -> tuple[Array, Array, Array]:
    """`f(t)`, `f'(t)` and `f''(t)` of a scalar function, by forward mode twice."""
    one = jnp.ones_like(t)
    (q, g), (_, h) = jax.jvp(lambda s: jax.jvp(f, (s,), (one,)), (t,), (one,))
    return q, g, h


def _update(line: _Line, t, q, g, h) -> _Line:
    """`line` after evaluating `t`: the bracket shrinks to the side of the optimum that
    the slope at `t` points to (to the side away from `t` where `t` is infeasible)."""
    feasible = q > -jnp.inf
    right = t > line.x
    to_lo = jnp.where(feasible, g > 0, ~right)
    to_hi = jnp.where(feasible, g < 0, right)
    nan = jnp.full_like(q, jnp.nan)
    # Near the optimum `q` stops resolving the last Newton steps: a point that is as good
    # to round-off with a smaller slope is better too.
    roundoff = 8 * jnp.finfo(q.dtype).eps * (1.0 + jnp.abs(q))
    flatter = (q >= line.q - roundoff) & (jnp.abs(g) < jnp.abs(line.g))
    better = feasible & ((q > line.q) | flatter)

    def end(to, new, old):
        return jnp.where(to, jnp.where(feasible, new, nan), old)

    return line._replace(
        lo=jnp.where(to_lo, t, line.lo),
        hi=jnp.where(to_hi, t, line.hi),
        q_lo=end(to_lo, q, line.q_lo),
        g_lo=end(to_lo, g, line.g_lo),
        h_lo=end(to_lo, h, line.h_lo),
        q_hi=end(to_hi, q, line.q_hi),
        g_hi=end(to_hi, g, line.g_hi),
        h_hi=end(to_hi, h, line.h_hi),
        lo_open=jnp.where(to_lo, ~feasible, line.lo_open),
        hi_open=jnp.where(to_hi, ~feasible, line.hi_open),
        x=jnp.where(better, t, line.x),
        q=jnp.where(better, q, line.q),
        g=jnp.where(better, g, line.g),
        h=jnp.where(better, h, line.h),
    )


def _kink(line: _Line) -> tuple[Array, Array, Array]:
    """Where the quadratic models of `q` at the bracket's ends (value, slope and
    curvature there) meet, and whether they show a kink there: the left model still
    rising and the right one falling, their slopes apart by at least half the fall of
    the slope across the bracket. (On a smooth objective both ends model the same
    function: their slopes where they meet differ by the cubic term only.)

    Between a kink's two pieces `q` is the smaller of their smooth extensions, and the
    kink the root of their difference `D`; each end's model stands for its piece."""
    width = line.hi - line.lo
    # D(lo + s) = a·s² + b·s + c, with c = D(lo) <= 0 and b = D'(lo) > 0 at a kink.
    c = line.q_lo - line.q_hi + line.g_hi * width - 0.5 * line.h_hi * width * width
    b = line.g_lo - line.g_hi + line.h_hi * width
    a = 0.5 * (line.h_lo - line.h_hi)
    discriminant = b * b - 4 * a * c
    linear = -c / b
    quadratic = -2 * c / (b + jnp.sqrt(jnp.maximum(discriminant, 0.0)))
    s = jnp.where(discriminant >= 0, quadratic, linear)
    where = line.lo + s
    left = line.g_lo + line.h_lo * s
    right = line.g_hi + line.h_hi * (s - width)
    shown = (
        (line.g_lo > 0)
        & (line.g_hi < 0)
        & (left > 0)
        & (right < 0)
        & (left - right > 0.25 * (line.g_lo - line.g_hi))
        & jnp.isfinite(where)
        & (where > line.lo)
        & (where < line.hi)
    )
    return where, shown, left - right


def _candidate(line: _Line) -> tuple[Array, Array, Array]:
    """The next point, and the estimate of a kink's location (`_kink`; the previous
    one where the ends show none).

    Where the ends show a kink: just past the estimate, towards the end farther from it
    (whose model is the worse one), by as much as the estimate moved since the last
    step. Each evaluation moves only the end on its own side, and the estimate is as
    good as the worse of the two ends' models: aimed at the estimate itself, the points
    fell on one side for step after step while the far end stayed put (on the
    retirement model's kinks, a quarter of the cells ended short of the kink by up to
    1e-3 grid steps).

    Else Newton's from the best point where it stays strictly inside the bracket; else
    where the tangents at the bracket's ends meet (on a smooth objective the bracket's
    midpoint); else the vertex of the parabola through the best point (value and slope)
    and the value at the end its slope points to; else bisection.

    The parabola is for a best point where the curvature is infinite, so that Newton's
    step does not move: `a ** p` with `1 < p < 2` at `a = 0`, which is where a grid
    starts (Mahler–Yum's effort cost `effort ** (1 + 1/η)`, `η > 1`), and from where
    bisection took two steps more to converge."""
    lo, hi = line.lo, line.hi
    inside = lambda t: jnp.isfinite(t) & (t > lo) & (t < hi)
    kink, shown, jump = _kink(line)
    below, above = kink - lo, hi - kink
    far = jnp.maximum(below, above)
    # The far end's model is off at the kink by about its cubic term, `q''' far³ / 6`
    # (`q'''` from the curvatures at the two ends), which moves the estimate by that over
    # the jump of the slope. Each step that fell short of the kink (a cubic term that the
    # curvatures do not show) makes the margin ten times as large.
    cubic = jnp.abs(line.h_hi - line.h_lo) / (hi - lo) * far**3 / (6 * jump)
    floor = 64 * jnp.finfo(kink.dtype).eps * (1.0 + jnp.abs(kink))
    margin = jnp.minimum(jnp.maximum(2 * cubic, floor) * 10.0**line.short, 0.5 * far)
    aim = jnp.where(above > below, 1.0, -1.0)
    past = kink + aim * margin

    def newton_from(x, g, h):
        return x - g / jnp.where(h < 0, h, jnp.nan)

    newton = newton_from(line.x, line.g, line.h)
    newton_lo = newton_from(lo, line.g_lo, line.h_lo)
    newton_hi = newton_from(hi, line.g_hi, line.h_hi)
    denominator = line.g_lo - line.g_hi
    tangents = (line.q_hi - line.q_lo + line.g_lo * lo - line.g_hi * hi) / jnp.where(
        (line.g_lo > 0) & (line.g_hi < 0), denominator, jnp.nan
    )
    ahead = line.g > 0
    width = jnp.where(ahead, hi, lo) - line.x
    bend = (jnp.where(ahead, line.q_hi, line.q_lo) - line.q - line.g * width) / (width * width)
    vertex = line.x - line.g / (2 * jnp.where(bend < 0, bend, jnp.nan))
    middle = 0.5 * (lo + hi)
    smooth = middle
    for candidate in (tangents, vertex, newton_hi, newton_lo, newton):  # the last first
        smooth = jnp.where(inside(candidate), candidate, smooth)
    shown = shown & inside(past)
    return (
        jnp.where(shown, past, smooth),
        jnp.where(shown, kink, line.kink),
        jnp.where(shown, aim, 0.0),
    )


def polish(
    f: Callable[[Array], Array],
    x0: Array,
    lo: Array,
    hi: Array,
    steps: int,
    ends: tuple[Array, Array, Array] | None = None,
) -> _Line:
    """Maximise `f` over `[lo, hi]` from `x0` (the grid's best point): `x0` evaluated,
    then `steps` safeguarded Newton iterations (one loop, so the kernel is traced
    once). `ends`: `f` and its first two derivatives at `lo` and `hi` (each of shape
    `(2,)`) where known: for `_candidate`'s parabola, and so that a kink between the
    grid points shows from the first step on."""
    nan = jnp.full_like(x0, jnp.nan)
    false = jnp.zeros(x0.shape, bool)
    if ends is None:
        q_ends = g_ends = h_ends = jnp.stack([nan, nan])
    else:
        q_ends, g_ends, h_ends = ends
        feasible = q_ends > -jnp.inf
        g_ends = jnp.where(feasible, g_ends, jnp.nan)
        h_ends = jnp.where(feasible, h_ends, jnp.nan)
    start = _Line(
        lo=lo,
        hi=hi,
        q_lo=q_ends[0],
        g_lo=g_ends[0],
        h_lo=h_ends[0],
        q_hi=q_ends[1],
        g_hi=g_ends[1],
        h_hi=h_ends[1],
        lo_open=false,
        hi_open=false,
        x=x0,
        q=jnp.full_like(x0, -jnp.inf),
        g=nan,
        h=nan,
        kink=nan,
        short=jnp.zeros_like(x0),
    )

    def step(i, line):
        candidate, kink, aim = _candidate(line)
        t = jnp.where(i == 0, x0, candidate)
        aim = jnp.where(i == 0, 0.0, aim)
        line = _update(line._replace(kink=kink), t, *value_slope_curvature(f, t))
        landed = jnp.where(aim > 0, line.hi == t, line.lo == t)
        return line._replace(short=jnp.where((aim != 0) & ~landed, line.short + 1, 0.0))

    return jax.lax.fori_loop(0, steps + 1, step, start)


def classify(
    line: _Line, first: Array, last: Array, spacing: Array, tolerance: float
) -> tuple[Array, Array, Array, Array]:
    """The `RefineCode` of a polished line (`first`, `last`: the grid's ends), the
    refined point, the two points either side of it from which its derivatives are
    taken and the slopes there (`Refined.sides`, `Refined.side_slopes`): at a kink, the
    estimate of its location and points as near to it as the estimate's error allows
    (at most `resolution`) either side of it, within the bracket, on the kink's two
    pieces; elsewhere the best point twice, slopes 0."""
    scale = 1.0 + jnp.abs(line.q)
    eps = 1e3 * jnp.finfo(line.q.dtype).eps
    flat = (jnp.abs(line.g) * spacing <= eps * scale) & (
        jnp.abs(line.h) * spacing**2 <= eps * scale
    )
    # Within `tolerance` grid steps, or a few units of round-off of the point itself (in
    # float32 the slope stops resolving steps long before 1e-7 grid steps).
    resolution = tolerance * spacing + 64 * jnp.finfo(line.x.dtype).eps * (1.0 + jnp.abs(line.x))
    newton = jnp.abs(line.g / jnp.where(line.h < 0, line.h, jnp.nan))
    converged = (newton <= resolution) | (line.g == 0)
    interior = converged & (line.h < 0)
    lower = (line.x <= first) & (line.g <= 0)
    upper = (line.x >= last) & (line.g >= 0)
    constraint = ((line.g > 0) & line.hi_open) | ((line.g < 0) & line.lo_open)
    # A kink: the slopes at both ends of the bracket are too steep for the curvature
    # over it (at a smooth optimum they are about `|h|·width`), the bracket has
    # collapsed, and the estimate of the kink's location (`_kink`) is good to well
    # within `resolution` (its error is about the cubic term of the farther end's
    # model; unknown where an end's curvature is infinite), so that points that far
    # either side of it lie on its two pieces.
    width = line.hi - line.lo
    steep = jnp.minimum(line.g_lo, -line.g_hi) > 2 * jnp.abs(line.h) * width + eps * scale
    location, _, jump = _kink(line)
    location = jnp.clip(jnp.where(jnp.isfinite(location), location, line.x), line.lo, line.hi)
    far = jnp.maximum(location - line.lo, line.hi - location)
    cubic = jnp.abs(line.h_hi - line.h_lo) / width * far**3 / (6 * jump)
    collapsed = width <= tolerance ** (1 / 3) * spacing + resolution
    kink = (
        (line.g_lo > 0)
        & (line.g_hi < 0)
        & steep
        & collapsed
        & (jump > 0)
        & (cubic <= 0.25 * resolution)
    )
    code = jnp.full(line.q.shape, RefineCode.unconverged, jnp.int8)
    for test, value in (
        (interior, RefineCode.interior),
        (kink, RefineCode.kink),
        (constraint, RefineCode.constraint),
        (upper, RefineCode.upper_bound),
        (lower, RefineCode.lower_bound),
        (flat, RefineCode.flat),
        (~(line.q > -jnp.inf), RefineCode.infeasible),
    ):
        code = jnp.where(test, jnp.int8(value), code)
    at_kink = code == RefineCode.kink
    point = jnp.where(at_kink, location, line.x)
    # The sides as near the kink as the estimate's error allows (the derivatives taken
    # there are off by about their distance from it): its cubic term, its last move (if
    # the kink showed before the last step), or round-off where the kink itself lies (to
    # `eps` of the variables that cross a node).
    moved = jnp.abs(location - line.kink)
    error = jnp.maximum(cubic, jnp.where(jnp.isnan(moved), jnp.inf, moved))
    floor = 1e3 * jnp.finfo(line.x.dtype).eps * (1.0 + jnp.abs(location))
    distance = jnp.minimum(jnp.maximum(4 * error, floor), resolution)
    below = jnp.where(at_kink, jnp.maximum(location - distance, line.lo), line.x)
    above = jnp.where(at_kink, jnp.minimum(location + distance, line.hi), line.x)
    # The slopes at the sides from the ends' models (to the square of the bracket's width).
    slopes = [
        jnp.where(at_kink, line.g_lo + line.h_lo * (below - line.lo), 0.0),
        jnp.where(at_kink, line.g_hi + line.h_hi * (above - line.hi), 0.0),
    ]
    return code, point, jnp.stack([below, above], axis=-1), jnp.stack(slopes, axis=-1)


# ----------------------------------------------------------------------------- regime
def _joint_newton(q: Callable, actions: dict, refined: tuple[Axis, ...], grid_codes, steps):
    """Newton steps on all refined actions at once, from the turns' result (which
    converge only linearly where the actions interact): a step is taken where the
    Hessian is negative definite, the point stays in the grid brackets and `q` does
    not fall."""
    names = tuple(a.name for a in refined)
    brackets = [_neighbours(a.points, grid_codes[a.name]) for a in refined]
    lower = jnp.stack([b[0] for b in brackets])
    upper = jnp.stack([b[1] for b in brackets])

    def at(x):
        return q({**actions, **{name: x[i] for i, name in enumerate(names)}})

    def step(_, carry):
        x, value = carry
        slope = jax.grad(at)(x)
        curvature = jax.hessian(at)(x)
        concave = negative_definite(curvature)
        moved = x - solve_small(jnp.where(concave, curvature, -jnp.eye(len(names))), slope)
        ok = concave & jnp.all(jnp.isfinite(moved)) & jnp.all((moved >= lower) & (moved <= upper))
        candidate = jnp.where(ok, moved, x)
        new = at(candidate)
        roundoff = 8 * jnp.finfo(new.dtype).eps * (1.0 + jnp.abs(value))
        accept = ok & (new >= value - roundoff)
        return jnp.where(accept, candidate, x), jnp.where(accept, jnp.maximum(new, value), value)

    x0 = jnp.stack([actions[name] for name in names])
    x, _ = jax.lax.fori_loop(0, steps, step, (x0, at(x0)))
    return {**actions, **{name: x[i] for i, name in enumerate(names)}}


def _rebased(q: Callable, actions: dict, refined: tuple[Axis, ...], lines: dict) -> dict:
    """Each refined action's line with its slope and curvature at the joint optimum
    (the others there too), for `classify`."""
    out = {}
    for axis in refined:

        def along(t, axis=axis):
            return q({**actions, axis.name: t})

        value, slope, curvature = value_slope_curvature(along, actions[axis.name])
        out[axis.name] = lines[axis.name]._replace(
            x=actions[axis.name], q=value, g=slope, h=curvature
        )
    return out


def without_derivatives(fn: Callable, *args):
    """`fn(*args)` with no derivative with respect to `args` or anything `fn` closes
    over (the problem's parameters and continuations): closed-over tracers are hoisted
    into arguments (`jax.closure_convert`) and cut, so no tangent is ever traced."""
    args = jax.lax.stop_gradient(args)
    converted, consts = jax.closure_convert(fn, *args)
    return converted(*args, *jax.lax.stop_gradient(consts))


class Refined(NamedTuple):
    """The refined choice at one state for one discrete choice (stacked: for each).

    `value`: `q` at the refined point, with the derivative `q_θ` there (the envelope
    theorem), or at a kink the derivative along it (`along_kink`); `actions`: every
    continuous action, without derivatives (see `with_derivatives`); `codes`: one
    `RefineCode` per refined action (last axis); `interior`: per refined action, whether
    its derivative is the implicit-function one; `violations`: the check violations over
    the grid and at the refined point; `sides`: per refined action, the two points either
    side of a kink from which the derivatives are taken (the action twice elsewhere, and
    always with several refined actions), and `side_slopes`: `q`'s slopes there.
    """

    value: Array
    actions: dict[str, Array]
    codes: Array
    interior: Array
    violations: tuple[Array, ...]
    sides: Array
    side_slopes: Array


def along_kink(values: Array, slopes: Array, sides: Array) -> tuple[Array, Array]:
    """The value at a kink and its location, with their derivatives, from `q` at the
    kink's two `sides` (a point on each of its pieces, next to it) and its slopes there
    (whose derivatives are not needed); where the sides are one point (no kink), `q`
    there and the point.

    Near a kink `q` is the smaller of its two pieces' smooth extensions, and the kink
    is where they cross; a maximum there moves with the parameters along the crossing.
    With the pieces' tangents at the sides, it lies where the tangents meet, and moves
    as `−(Q⁻_θ − Q⁺_θ) / (Q⁻_a − Q⁺_a)`; the value's derivative is `w Q⁻_θ + (1 − w) Q⁺_θ`
    with `w = −Q⁺_a / (Q⁻_a − Q⁺_a)`, not `q_θ` on either side (the envelope theorem
    needs `q_a = 0`, and at a kink the slope is `Q⁻_a > 0` on one side and `Q⁺_a < 0` on
    the other). Both to within the sides' distance from the kink, `resolution`.
    """
    below, above = sides[..., 0], sides[..., 1]
    kinked = above > below
    # Zeros in the branch not taken, so that no NaN of an infeasible point meets its zero
    # cotangent there.
    q_below, q_above = (jnp.where(kinked, values[..., i], 0.0) for i in (0, 1))
    g_below, g_above = (
        jax.lax.stop_gradient(jnp.where(kinked, slopes[..., i], 0.0)) for i in (0, 1)
    )
    denominator = jnp.where(kinked, g_below - g_above, 1.0)
    where = below + (q_above - q_below - g_above * (above - below)) / denominator
    value = q_below + g_below * (where - below)
    return jnp.where(kinked, value, values[..., 0]), jnp.where(kinked, where, below)


def _neighbours(points: Array, index: Array) -> tuple[Array, Array]:
    n = points.shape[0]
    return points[jnp.maximum(index - 1, 0)], points[jnp.minimum(index + 1, n - 1)]


def _spacing(points: Array, index: Array) -> Array:
    """The grid step around point `index` (the bracket's width over its steps)."""
    lo, hi = _neighbours(points, index)
    inner = (index > 0) & (index < points.shape[0] - 1)
    return jnp.where(hi - lo > 0, hi - lo, 1.0) / jnp.where(inner, 2.0, 1.0)


def evaluations(refine: Refine) -> int:
    """About how many evaluations of the objective refining one action takes at one
    point (for the structure-aware search's cost): three per Newton iteration and per
    end of the bracket (value, slope and curvature), and the two sides."""
    return 3 * (refine.newton_steps + 3) + 2


def _search_along(objective: Callable[[Array], Array], points: Array, index: Array, refine):
    """The polish of one action in the bracket around its grid point `index`, without
    derivatives: the kink's sides and slopes there, whether the optimum is interior and
    the refined point (`classify`)."""

    def search(_):
        lo, hi = _neighbours(points, index)
        ends = jax.vmap(lambda t: value_slope_curvature(objective, t))(jnp.stack([lo, hi]))
        line = polish(objective, points[index], lo, hi, refine.newton_steps, ends)
        code, point, sides, side_slopes = classify(
            line, points[0], points[-1], _spacing(points, index), refine.tolerance
        )
        return sides, side_slopes, code == RefineCode.interior, point

    return without_derivatives(search, jnp.zeros(()))


def refine_along(
    f: Callable[[Array], tuple[Array, T]], points: Array, index: Array, refine: Refine
) -> tuple[Array, T]:
    """One action refined in the bracket around its grid point `index` (of `points`),
    as `refine_choice` refines a single action: `f(t)` is `(objective, other outputs)`
    with the action at `t` (every other variable fixed). The objective at the refined
    point, with the envelope theorem's derivative (along a kink: `along_kink`'s), and
    the other outputs at the point from which the derivatives are taken (the lower side
    of a kink, else the refined point).

    `GridSearch`'s structure-aware search calls it in the step that eliminates the
    refined action, with `f` the pieces that contain it (`_factored.solve_factored`)."""
    sides, side_slopes, _, _ = _search_along(lambda t: f(t)[0], points, index, refine)
    values, others = jax.vmap(f)(sides)  # one trace of `f`
    value, _ = along_kink(values, side_slopes, sides)
    return value, jax.tree.map(lambda x: x[0], others)


def refine_along_action(
    objective: Callable[[Array], Array], points: Array, index: Array, refine: Refine
) -> tuple[Array, Array]:
    """`refine_along`'s value, and the refined action with `with_derivatives`'
    derivative (the implicit function theorem's, or along a kink), for the policy on
    the whole grid (`_factored_policy`): `objective` may be the pieces that contain the
    action alone, since the others add nothing to its slope."""
    sides, side_slopes, interior, point = _search_along(objective, points, index, refine)
    values, slope, curvature, kink_step = _implicit_step_terms(objective, sides, side_slopes)
    value, _ = along_kink(values, side_slopes, sides)
    system = jnp.where(interior & jnp.isfinite(curvature), curvature, -1.0)
    rhs = jnp.where(interior & jnp.isfinite(slope), slope, 0.0)
    step = -rhs / system
    step = jnp.where(interior & jnp.isfinite(step), step, 0.0) + kink_step
    return value, point + step


def _implicit_step_terms(objective: Callable[[Array], Array], sides: Array, side_slopes: Array):
    """At the two `sides` of one refined action (the point twice where no kink): the
    objective there, its slope and curvature (without derivative) at the first side,
    and the kink's move (`along_kink`'s location's derivative; 0 where no kink)."""
    sides = jax.lax.stop_gradient(sides)
    values, slopes, curvatures = jax.vmap(lambda t: value_slope_curvature(objective, t))(sides)
    _, kink = along_kink(values, side_slopes, sides)
    kink_step = jnp.where(sides[1] > sides[0], kink - jax.lax.stop_gradient(kink), 0.0)
    return values, slopes[0], jax.lax.stop_gradient(curvatures[0]), kink_step


def refine_choice(problem: RegimeProblem, state: dict, fixed: dict, refine: Refine) -> Refined:
    """The grid search over the continuous actions at `state` (discrete actions
    `fixed`), then each refined action polished in its bracket (`refine.rounds` turns
    with several), the others at their best."""
    n_discrete = len(problem.regime.discrete_actions)
    continuous = problem.action_axes[n_discrete:]
    names = refine.names(tuple(a.name for a in continuous))
    refined = tuple(a for a in continuous if a.name in names)
    shape = tuple(int(a.points.shape[0]) for a in continuous)

    def q(action: dict) -> Array:
        return problem.q(state, {**fixed, **action})[0]

    def search(_):
        top, best, rival, violations = grid_best(problem, state, fixed, continuous)
        codes = jnp.unravel_index(best, shape)
        grid_codes = dict(zip((a.name for a in continuous), codes, strict=True))
        actions = {a.name: a.points[c] for a, c in zip(continuous, codes, strict=True)}
        lines = {}
        for _round in range(refine.rounds if len(refined) > 1 else 1):
            for axis in refined:
                lo, hi = _neighbours(axis.points, grid_codes[axis.name])

                def along(t, axis=axis, actions=actions):
                    return q({**actions, axis.name: t})

                ends = jax.vmap(lambda t, along=along: value_slope_curvature(along, t))(
                    jnp.stack([lo, hi])
                )  # one trace of the kernel
                line = polish(along, actions[axis.name], lo, hi, refine.newton_steps, ends)
                actions = {**actions, axis.name: line.x}
                lines[axis.name] = line
        if len(refined) > 1:
            actions = _joint_newton(q, actions, refined, grid_codes, refine.newton_steps)
            value = q(actions)
            lines = _rebased(q, actions, refined, lines)
        else:
            value = lines[refined[0].name].q if refined else top
        results = []
        for axis in refined:
            line = lines[axis.name]._replace(q=value)
            spacing = _spacing(axis.points, grid_codes[axis.name])
            code, point, sides, side_slopes = classify(
                line, axis.points[0], axis.points[-1], spacing, refine.tolerance
            )
            if len(refined) == 1:  # a kink's location (with several: the joint optimum)
                actions = {**actions, axis.name: point}
            else:
                sides = jnp.stack([actions[axis.name], actions[axis.name]], axis=-1)
                side_slopes = jnp.zeros_like(sides)
            results.append((code, sides, side_slopes))
        dtype = jnp.zeros(()).dtype
        codes_out = (
            jnp.stack([r[0] for r in results], axis=-1) if results else jnp.zeros((0,), jnp.int8)
        )
        sides = jnp.stack([r[1] for r in results]) if results else jnp.zeros((0, 2), dtype)
        side_slopes = jnp.stack([r[2] for r in results]) if results else jnp.zeros((0, 2), dtype)
        interior = codes_out == RefineCode.interior
        # A tie: outside the best point's box, a grid point within twice the refinement's
        # gain of the best grid value (its own bracket could then hold a better optimum;
        # on a smooth single-peaked objective the nearest point outside the box is lower
        # by at least 8 gains).
        gain = jnp.maximum(value - top, 0.0)
        slack = 2.0 * gain + 1e3 * jnp.finfo(top.dtype).eps * (1.0 + jnp.abs(top))
        tie = (rival > -jnp.inf) & (rival >= top - slack)
        codes_out = jnp.where(
            tie & (codes_out == RefineCode.interior), jnp.int8(RefineCode.tie), codes_out
        )
        return actions, codes_out, interior, violations, sides, side_slopes

    actions, codes, interior, grid_violations, sides, side_slopes = without_derivatives(
        search, jnp.zeros(())
    )
    if len(refined) == 1:
        name = refined[0].name
        values, at_sides = jax.vmap(  # one trace of the kernel
            lambda t: problem.q(state, {**fixed, **actions, name: t})
        )(sides[0])
        value, _ = along_kink(values, side_slopes[0], sides[0])
        violations = tuple(v[0] for v in at_sides)
    else:
        value, violations = problem.q(state, {**fixed, **actions})
    violations = tuple(
        jnp.maximum(jax.lax.stop_gradient(v), g)
        for v, g in zip(violations, grid_violations, strict=True)
    )
    return Refined(value, actions, codes, interior, violations, sides, side_slopes)


def with_derivatives(
    problem: RegimeProblem, state: dict, fixed: dict, refined: Refined, refine: Refine
) -> dict[str, Array]:
    """The continuous actions of `refined` with the implicit function theorem's
    derivative: one more Newton step `a* − H⁻¹ ∇_a q` over the interior refined actions
    (`H` without derivative), whose derivative at the optimum is `−H⁻¹ Q_aθ`. The step
    is below `tolerance` grid steps there (that is what `interior` means), and squares
    the iteration's residual. The others keep a zero derivative."""
    n_discrete = len(problem.regime.discrete_actions)
    continuous = tuple(a.name for a in problem.action_axes[n_discrete:])
    names = refine.names(continuous)
    if not names:
        return refined.actions
    actions = jax.lax.stop_gradient(refined.actions)
    point = jnp.stack([actions[name] for name in names])

    def q(x):
        moved = {**actions, **{name: x[i] for i, name in enumerate(names)}}
        return problem.q(state, {**fixed, **moved})[0]

    kink_step = jnp.zeros_like(point)
    if len(names) == 1:
        _, slope, curvature, kink_step = _implicit_step_terms(
            lambda s: q(s[None]), refined.sides[0], refined.side_slopes[0]
        )  # one trace of the kernel
        slope, curvature, kink_step = slope[None], curvature[None, None], kink_step[None]
    else:
        slope = jax.grad(q)(point)
        curvature = jax.lax.stop_gradient(jax.hessian(q)(point))
    interior = jax.lax.stop_gradient(refined.interior)
    both = interior[:, None] & interior[None, :]
    eye = jnp.eye(len(names), dtype=curvature.dtype)
    system = jnp.where(both, curvature, -eye)
    system = jnp.where(jnp.isfinite(system), system, -eye)
    rhs = jnp.where(interior & jnp.isfinite(slope), slope, 0.0)
    step = -solve_small(system, rhs)
    step = jnp.where(interior & jnp.isfinite(step), step, 0.0) + kink_step
    return {**actions, **{name: actions[name] + step[i] for i, name in enumerate(names)}}


def over_discrete(problem: RegimeProblem, fn: Callable[[dict], T]) -> T:
    """`fn(discrete action codes)` for every combination of the discrete actions
    (outputs: one axis per discrete action, in declaration order; splayed axes in
    chunks)."""
    n_discrete = len(problem.regime.discrete_actions)
    axes = problem.action_axes[:n_discrete]

    def at(action: dict, depth: int):
        if depth == n_discrete:
            return fn(action)
        axis = axes[depth]
        return map_axis(
            lambda x: at({**action, axis.name: x}, depth + 1), axis.points, axis.batch_size
        )

    return at({}, 0)
