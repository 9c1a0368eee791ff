"""Reading next period along one continuous state, and marginal utility: the pieces
that every solver which works with the Euler equation shares (the endogenous-grid
solvers' period step, and the Euler errors of any solver's policy).

A `ContinuationReader` reads one next regime at a next-period value `m'` of the
reading regime's continuous state: the value and marginal value for each of the
target's discrete states. Which reader a regime is read through is its solver's choice
(`AbstractSolver.reader`): `array_reader` interpolates a value array on the state grid
(the default), an endogenous-grid solver reads its own grids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._grids import AbstractContinuousGrid
from .._model._plan import ModelPlan
from .._numerics import one_kernel_reduce
from ._continuation import NEG_INF, settle, weighted
from ._kernel import RegimeProblem
from ._reduce import choice_weights, max_along, smooth_max

# The action value at which transitions are evaluated for a savings point `a`: the
# state is `a + REFERENCE_ACTION`, so `state − action = a`. The class check of a solver
# that relies on it verifies that the result does not depend on this choice.
REFERENCE_ACTION = 1.0


class ContinuationReader(eqx.Module):
    """Reads one next regime at a next-period cash on hand `m'`: its value and marginal
    value for each of its discrete states (axes `axes`, in its state order; `continuous`
    left out).

    The arrays it reads are `data` (leading axes `axes`), so that a sharded state that
    never transitions can be mapped jointly with them (`sliced`): each state point then
    reads only its own slice, on its own device, and `fixed` holds the codes taken.

    A reader of several regimes of equal structure at once (`members`, their names;
    empty for one regime) reads them all in one mapped read: its value and marginal
    value have a leading axis over `members` before `axes`, and `expected_at_savings`
    finds it under the key `members` (tuple) beside the members' own readers.

    `kinks_fn(data, fixed)`, where the regime read has one: the kinks and jumps of its
    consumption functions over the discrete states and choices left in `data`, as
    next-period cash on hand and the change of slope there (-1: none; see
    `BudgetKinks`), each with the leading axes of `data` (`axes`, then the regime's
    discrete actions) and one row of its endogenous grid last.
    """

    continuous: str | None = eqx.field(static=True)
    axes: tuple[str, ...] = eqx.field(static=True)
    data: tuple[Array, ...]
    fixed: dict[str, Array]
    read_fn: Callable = eqx.field(static=True)
    members: tuple[str, ...] = eqx.field(static=True, default=())
    kinks_fn: Callable | None = eqx.field(static=True, default=None)

    def __call__(self, m_next):
        return self.read_fn(self.data, self.fixed, m_next)

    def kinks(self) -> tuple[Array, Array] | None:
        """The kinks of the regime's consumption and their size (None: not known)."""
        if self.kinks_fn is None:
            return None
        return self.kinks_fn(self.data, self.fixed)

    def leading(self, name: str) -> tuple[Array, ...]:
        """`data` with the axis of state `name` first."""
        axis = self.axes.index(name)
        return tuple(jnp.moveaxis(array, axis, 0) for array in self.data)

    def sliced(self, name: str, code: Array, data: tuple[Array, ...]) -> ContinuationReader:
        """The reader of one code of state `name`, given that slice of `leading(name)`."""
        return ContinuationReader(
            continuous=self.continuous,
            axes=tuple(a for a in self.axes if a != name),
            data=data,
            fixed={**self.fixed, name: code},
            read_fn=self.read_fn,
            kinks_fn=self.kinks_fn,
        )


def zero_reader(model: ModelPlan, target: str, continuous: str, dtype) -> ContinuationReader:
    """A reader of the period after the model's last: value and marginal value 0 at
    every cash on hand, for each of the target's discrete states (no array is read)."""
    target_plan = model.regimes[target]
    axes = tuple(s for s in target_plan.states if s != continuous)
    zeros = jnp.zeros(tuple(target_plan.grids[s].n_points for s in axes), dtype)

    def constant(data, fixed, x):
        return data[0], data[0]

    return ContinuationReader(continuous=None, axes=axes, data=(zeros,), fixed={}, read_fn=constant)


def array_reader(
    model: ModelPlan, target: str, values: Array, continuous: str, points: Array | None = None
) -> ContinuationReader:
    """A reader of a value array on a regime's state grid (e.g. a `GridSearch` regime):
    linear interpolation along `continuous` and the interpolant's slope. `points`: the
    grid's points in the period read (for a grid whose bounds vary with age)."""
    target_plan = model.regimes[target]
    if continuous not in target_plan.states:

        def constant(data, fixed, x):
            return data[0], jnp.zeros_like(data[0])

        return ContinuationReader(
            continuous=None, axes=target_plan.states, data=(values,), fixed={}, read_fn=constant
        )
    axis = target_plan.states.index(continuous)
    grid = target_plan.grids[continuous]
    assert isinstance(grid, AbstractContinuousGrid)

    nodes = grid.to_jax() if points is None else points

    def linear(data, fixed, x):
        moved = data[0]
        lo, w = grid.interval(x, nodes)
        low, high = moved[..., lo], moved[..., lo + 1]
        value = settle(weighted(1 - w, low) + weighted(w, high))
        slope = (high - low) / (nodes[lo + 1] - nodes[lo])
        slope = jnp.where(jnp.isfinite(slope), slope, 0.0)
        return value, slope

    return ContinuationReader(
        continuous=continuous,
        axes=tuple(s for s in target_plan.states if s != continuous),
        data=(jnp.moveaxis(values, axis, -1),),
        fixed={},
        read_fn=linear,
    )


def expected_at_savings(
    problem: RegimeProblem,
    readers: dict[str, ContinuationReader],
    state_name: str,
    action: str,
    discrete,
    a,
    checks=(),
    targets=None,
):
    """`E[V']` and `E[R·V'_m]` at savings `a` (`state_name − action`), and the check
    violations, for the discrete states and actions `discrete`.

    Next period's regimes are read through `readers` (`ContinuationReader`s): those in
    `targets` (default: every regime this one can move to; a subset where the others
    are known to have probability 0).
    """
    regime = problem.regime
    c_ref = jnp.asarray(REFERENCE_ACTION, a.dtype)
    point = {**discrete, state_name: a + c_ref, action: c_ref}
    evaluate = problem.evaluator(point)
    function = regime.state_transitions[state_name].function
    assert function is not None

    regime_p, regime_code = problem.regime_probabilities_and_id(evaluate)
    codes, probabilities = problem.next_states(evaluate)
    for name, t in regime.state_transitions.items():
        if t.is_markov and name not in probabilities:
            if t.function is None:
                probabilities[name] = problem.process_matrices[name][point[name]]
            else:
                probabilities[name] = jnp.asarray(evaluate(t.function))
    # A law of motion that reads the next value of drawn states (`next_<state>`): `m'`
    # and its gross return at each joint node of the draw, `(n_nodes,)`.
    drawn = regime.drawn
    node_codes, node_weights = (
        problem.drawn_nodes({s: probabilities[s] for s in drawn}) if drawn else ({}, None)
    )

    def next_state(m, c, node):
        e = problem.evaluator({**discrete, state_name: m, action: c})
        if drawn:
            e = e.with_inputs({f"next_{s}": problem.value_of(s, k) for s, k in node.items()})
        return jnp.asarray(e(function))

    def along(direction):
        def at(node):
            return jax.jvp(
                lambda m, c: next_state(m, c, node),
                (a + c_ref, c_ref),
                (jnp.ones_like(a), jnp.full_like(a, direction)),
            )

        return jax.vmap(at)(node_codes) if drawn else at({})

    m_next, gross_return = along(0.0)
    violations: dict[str, Any] = dict(problem.period_violations)
    if checks:
        checked = codes
        if drawn:
            # NaN where any node's next state is not finite.
            worst = jnp.where(jnp.all(jnp.isfinite(m_next)), m_next[0], jnp.nan)
            checked = {**codes, state_name: worst}
        problem.record_violations(regime_p, checked, probabilities, violations)
        _, through = along(1.0)
        scale = 1.0 + jnp.abs(gross_return)
        off = jnp.where(jnp.abs(through) <= 1e-6 * scale, 0.0, jnp.abs(through))
        violations[f"next_{state_name}:savings"] = jnp.max(off) if drawn else off
    if checks and problem.index_checks:
        # Parameter arrays read out of bounds (JAX would clamp): the utility and its
        # helpers are evaluated here only for their checks; the transitions were above
        # (those that read drawn states at the nodes here).
        if drawn:
            problem.drawn_next_states(evaluate, node_codes)
        evaluate(regime.utility)
        for key, failed in evaluate.index_errors.items():
            if key not in problem.index_checks:
                continue
            if problem.is_transition(key):
                failed = failed & problem.before_last_period()
            check = problem.index_checks[key]
            violations[check] = jnp.maximum(
                violations.get(check, 0.0), jnp.asarray(failed, a.dtype)
            )
    expected = jnp.asarray(0.0, a.dtype)
    marginal = jnp.asarray(0.0, a.dtype)
    unreachable = [r.id for n, r in problem.model.regimes.items() if n not in regime.targets]

    def read_arrays(reader: ContinuationReader, value, slope):
        """The value and slope over the target's discrete states taken at the next
        states' codes, or their expectation."""
        for state in reader.axes:
            if state in probabilities:
                value = jnp.sum(weighted(front(probabilities[state], value), value), axis=0)
                slope = jnp.sum(front(probabilities[state], slope) * slope, axis=0)
            else:
                value, slope = value[codes[state]], slope[codes[state]]
        return value, slope

    def read(reader: ContinuationReader, m, has_states: bool):
        value, slope = read_arrays(reader, *reader(m))  # over the target's discrete states
        return (settle(value) if has_states else value), slope

    def read_nodes(reader: ContinuationReader, has_states: bool):
        """`E[V']` and `E[R·V'_m]` over the nodes of the drawn states: each node reads
        the target at its own `m'`, at its own code of the drawn states."""

        def at(node, m, gross):
            here = reader
            for s, k in node.items():
                if s in here.axes:
                    here = here.sliced(s, k, tuple(d[k] for d in here.leading(s)))
            value, slope = read(here, m, has_states)
            return value, gross * slope

        values, slopes = jax.vmap(at)(node_codes, m_next, gross_return)
        return jnp.sum(weighted(node_weights, values)), jnp.sum(node_weights * slopes)

    reading = tuple(regime.targets if targets is None else targets)
    # Readers of several targets at once (`ContinuationReader.members`), where all of
    # them are read: each member's term is added where its own would be.
    together = {
        member: key
        for key in readers
        if isinstance(key, tuple) and not drawn and set(key) <= set(reading)
        for member in key
    }
    done: set[str] = set()
    for target in reading:
        if target in done:
            continue
        if target in together:
            key = together[target]
            has_states = bool(problem.model.regimes[target].states)
            values, slopes = readers[key](m_next)
            values, slopes = jax.vmap(lambda v, s: read_arrays(readers[key], v, s))(values, slopes)
            if has_states:
                values = settle(values)
            for j, member in enumerate(key):
                p = regime_p[problem.model.regimes[member].id]
                expected = expected + weighted(p, values[j])
                marginal = marginal + p * slopes[j]
            done.update(key)
            continue
        target_id = problem.model.regimes[target].id
        p = regime_p[target_id]
        has_states = bool(problem.model.regimes[target].states)
        if drawn:
            value, slope = read_nodes(readers[target], has_states)
        else:
            value, slope = read(readers[target], m_next, has_states)
        expected = expected + weighted(p, value)
        marginal = marginal + p * slope
    if unreachable:
        blocked = jnp.any(regime_p[jnp.asarray(unreachable)] > 0)
        expected = jnp.where(blocked, NEG_INF, expected)
    del regime_code
    diagnostics = (
        jnp.stack([jnp.asarray(violations.get(c, 0.0), a.dtype) for c in checks])
        if checks
        else jnp.zeros((0,), a.dtype)
    )
    # (With drawn states the gross return is inside the sum over the nodes.)
    return settle(expected), (marginal if drawn else gross_return * marginal), diagnostics


def invert_marginal(marginal: Callable[[Array], Array], q: Array, steps: int) -> Array:
    """`c > 0` with `marginal(c) = q`, by Newton's method in logs (`invert_marginals` of
    one marginal utility)."""
    return invert_marginals([(marginal, q)], steps)[0]


def invert_marginals(
    problems: list[tuple[Callable[[Array], Array], Array]],
    steps: int,
    axis_name: str | None = None,
) -> list[Array]:
    """For each `(marginal, q)`: `c > 0` with `marginal(c) = q`, by Newton's method in
    `log c` on `log marginal(c) = log q` (one step is exact for CRRA utility), the last
    step on the ratio `marginal(c) / q = 1` (`polish`: no logarithm, whose float32
    rounding on a TPU is far coarser than the CPU's).

    The iterations run without derivatives; the first is fused by XLA into the kernels
    around it (a loop ran two kernels per step, the step and its counter: the steady
    solve takes 5 % less time without). A last Newton step from the
    converged point carries the derivative with respect to `q` and to whatever
    `marginal` closes over (the implicit function theorem). It is also the second step:
    where it moved no point of any problem by more than rounding (CRRA utility: the
    first step is exact), it is the result, and the remaining steps are skipped (one
    branch taken at run time for all the problems, e.g. all the regimes of a period; a
    selection under `vmap`); otherwise they run from it, and the last step is taken
    again from their end, in one `fori_loop` for all the problems (its step traced
    once). (Three Newton steps per point were two: `model.solve` 0.945 of before, the
    same solution to the last bit on the retirement model.)

    `axis_name`: a `vmap` axis the problems are mapped along (the members of a group of
    regimes of equal structure): the decision is taken for all of them at once, so that
    it stays a branch rather than a selection that runs both.
    """

    def newton(x, marginal, log_q):
        def residual(x):
            return jnp.log(marginal(jnp.exp(x))) - log_q

        return _newton_step(residual, x)

    def polish(x, marginal, q):
        # The last step on the ratio `u'(c) / q`, which needs no logarithm: a TPU's
        # float32 `log` errs by up to 1.1e-4 (absolute), and the steps in logs stopped
        # that far from the root there (the retirement example's values 1.5e-4 off
        # float64, its Euler check missing by 1.0e-4). At the root both residuals
        # vanish: the same implicit derivative.
        def residual(x):
            return marginal(jnp.exp(x)) / q - 1.0

        return _newton_step(residual, x)

    if not problems:
        return []
    log_qs, qs, steppers, xs = [], [], [], []
    for marginal, q in problems:
        log_q = jnp.log(q)
        x = jax.lax.stop_gradient(-log_q)
        # The loop sees no differentiable input (what `marginal` closes over is passed
        # in, without derivative), so differentiating the solve does not carry tangents
        # through it.
        converted, closed = jax.closure_convert(marginal, x)
        closed = jax.lax.stop_gradient(closed)
        frozen_log_q = jax.lax.stop_gradient(log_q)

        def step(_, x, converted=converted, closed=closed, frozen_log_q=frozen_log_q):
            return newton(x, lambda c: converted(c, *closed), frozen_log_q)

        log_qs.append(log_q)
        qs.append(q)
        steppers.append(step)
        xs.append(x)

    def rest(xs, start, unroll=True):
        def all_steps(i, xs):
            return tuple(step(i, x) for step, x in zip(steppers, xs, strict=True))

        return jax.lax.fori_loop(start, steps, all_steps, tuple(xs), unroll=unroll)

    def final(xs):
        return tuple(
            polish(x, marginal, q) for x, (marginal, _), q in zip(xs, problems, qs, strict=True)
        )

    if steps <= 2:
        return [jnp.exp(x) for x in final(rest(xs, 0))]
    first = tuple(step(0, x) for step, x in zip(steppers, xs, strict=True))
    second = final(first)
    # A step smaller than this (relative to 1 + |x|) is rounding: converged.
    moved = jnp.concatenate(
        [
            (jnp.abs(b - a) > 64 * jnp.finfo(b.dtype).eps * (1.0 + jnp.abs(b))).reshape(-1)
            for a, b in zip(first, jax.lax.stop_gradient(second), strict=True)
        ]
    )
    any_moved = one_kernel_reduce(jax.lax.bitwise_or, False, moved, 0)
    if axis_name is not None:
        any_moved = jax.lax.pmax(any_moved.astype(jnp.int32), axis_name) > 0
    # The remaining steps in a loop, not unrolled: the branch is taken where the first
    # step was not exact (not for CRRA utility), and unrolled each step of each problem
    # was a kernel of its own (XLA does not fuse a Newton step into the next, which
    # reads its result several times): on the quick start's model with `DCEGM`, 10 of
    # the program's kernels.
    xs = jax.lax.cond(
        any_moved,
        lambda: final(rest(jax.lax.stop_gradient(second), 2, unroll=False)),
        lambda: second,
    )
    return [jnp.exp(x) for x in xs]


def _newton_step(residual: Callable[[Array], Array], x: Array) -> Array:
    """One Newton step on `residual` from `x` (a zero slope steps by the residual)."""
    value, slope = jax.jvp(residual, (x,), (jnp.ones_like(x),))
    slope = jnp.where(slope == 0, -1.0, slope)
    return x - value / slope


def combine_values_and_slopes(values, slopes, scale) -> tuple[Array, Array]:
    """The value over the discrete choices (last axis) and its marginal value: the best
    choice's, or with taste shocks `λ·logsumexp(v / λ)` and the choice-probability
    weighted slope."""
    if scale is None:
        if values.shape[-1] <= _UNROLL:
            return _unrolled_best(values, slopes)
        best = jnp.argmax(values, axis=-1)
        slope = jnp.take_along_axis(slopes, best[..., None], axis=-1)[..., 0]
        return max_along(values, values.ndim - 1), slope
    # A ruled-out choice (value -inf, weight 0) may have no slope (NaN or infinite):
    # left out, with no derivative through it.
    slopes = jnp.where(jnp.isneginf(values), 0.0, slopes)
    return smooth_max(values, scale), jnp.sum(choice_weights(values, scale) * slopes, axis=-1)


# Up to this many discrete choices, their max is unrolled into elementwise operations
# (each small reduction and gather would be an XLA kernel of its own).
_UNROLL = 8


def _unrolled_best(values, slopes) -> tuple[Array, Array]:
    """`max(values, -1)` and the slope of the first best choice (`argmax`), as a chain of
    elementwise comparisons over the (few) choices: the same results, NaN included (a
    NaN is the max and its first occurrence is taken, like `argmax`)."""
    best, slope = values[..., 0], slopes[..., 0]
    for i in range(1, values.shape[-1]):
        v = values[..., i]
        better = (v > best) | (jnp.isnan(v) & ~jnp.isnan(best))
        best = jnp.where(better, v, best)
        slope = jnp.where(better, slopes[..., i], slope)
    return best, slope


def marginal_of(utility: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """`u'` of a scalar utility, applied elementwise."""
    return jnp.vectorize(jax.grad(utility))


def front(p: Array, values: Array) -> Array:
    """`p` (over the first axis of `values`) shaped to broadcast against `values`."""
    return p.reshape((p.shape[0],) + (1,) * (values.ndim - 1))
