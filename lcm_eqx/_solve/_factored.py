"""Structure-aware grid search: each piece of a regime's Bellman objective evaluated on
the axes it depends on, and actions eliminated inside the pieces that contain them.

The objective of one (state, action) point, `q = where(feasible, u + β·E[V'], -inf)`,
is traced once into a flat jaxpr of scalars (one input per state and action axis). Its
value is split into additive *terms* (through `+`, `-`, negation and the selects that
give `-inf` where a constraint fails, whose predicates split through `&` into *masks*),
and the axes every term, mask and check depends on are read off the jaxpr. A *piece*
collects the terms and masks of equal axes and is evaluated on the product of its own
axes; `E[V']`, for instance, once per distinct next state rather than once per pair.

The maximum over actions is then taken by variable elimination in the (max, +)
semiring, with `λ·logsumexp(·/λ)` for discrete actions under taste shocks (after every
continuous action, as `GridSearch` reduces them): each action is maximised over the
pieces that contain it, forming a new piece on their other axes, in a greedy order that
keeps the largest product small. The checks are reduced over the actions on their own
axes. Values, checks and derivatives equal the plain product's up to the order of
floating-point sums; where the structure buys less than `_MIN_GAIN` (a model whose
every piece depends on every axis), `GridSearch` evaluates the plain product instead.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal
from jaxtyping import Array

from ._axes import (
    EVALUATION_BYTES,
    Axis,
    Carried,
    auto_splayed,
    bind_equation,
    flat_jaxpr,
    lift,
    map_axis,
    reduce_axis,
)
from ._kernel import CONTINUATION_SCOPE, RegimeProblem, max_each
from ._reduce import max_along, smooth_max
from ._refine import refine_along

# Evaluate the pieces where they need at most this fraction of the plain product's work
# (points times equations per point).
_MIN_GAIN = 0.5

# The largest piece (a stored array) as a fraction of the plain product's pairs.
_MAX_PIECE = 0.25

# The checks of a period are reduced over the states in one reduction where they fit on
# the union of their axes in this many points (all checks together), else one per shape.
_ONE_REDUCTION = 2**16

# Primitives that leave a scalar constant a constant.
_PASS_THROUGH = ("convert_element_type", "broadcast_in_dim")


@dataclasses.dataclass(frozen=True)
class Term:
    """One additive term of the objective: `sign * f_1(f_2(... f_n(var)))`, where each
    factor `f_i` is `("mul", x)` (times `x`), `("div", x)` (divided by `x`), `("if", p)`
    (`where(p, ·, 0)`) or `("unless", p)` (`where(p, 0, ·)`), the outermost first: what
    distributing a product, a quotient or a select over a sum leaves of each summand
    (`s * (a - b)` is the terms `s * a` and `-(s * b)`)."""

    var: object  # a jaxpr variable
    sign: int
    factors: tuple[tuple[str, object], ...] = ()

    def outputs(self) -> list:
        """The jaxpr variables its value reads: `var`, then its factors'."""
        return [self.var, *(x for _, x in self.factors)]


@dataclasses.dataclass(frozen=True)
class Piece:
    """Terms and masks that depend on the same axes (canonical order)."""

    axes: tuple[str, ...]
    terms: tuple[Term, ...]
    masks: tuple[object, ...]  # boolean jaxpr variables


@dataclasses.dataclass(frozen=True)
class Step:
    """One elimination: `action` maximised (or log-sum-exp'd) over the pieces `group`
    (indices into the pieces and the earlier steps' results), on the product `axes`."""

    action: str
    group: tuple[int, ...]
    axes: tuple[str, ...]
    smooth: bool


@dataclasses.dataclass(frozen=True)
class Factoring:
    """How one regime's period is evaluated: pieces, elimination steps, checks."""

    names: tuple[str, ...]  # every axis, states then actions (the jaxpr's inputs)
    sizes: dict[str, int]
    states: tuple[str, ...]
    pieces: tuple[Piece, ...]
    steps: tuple[Step, ...]
    final: tuple[int, ...]  # what is left (on state axes only), summed at the end
    # Per check, its alternatives, each a product of components (indices into
    # `check_components`: the axes and the factors of each, maximised over its actions).
    checks: tuple[tuple[tuple[int, ...], ...], ...]
    check_components: tuple[tuple[tuple[str, ...], tuple], ...]
    value: object  # the jaxpr variable of the objective's value
    # Points times equations per point: of the plan, and of the plain product.
    cost: int
    plain_cost: int
    # Per piece, what joins its axes (`_Graph.joining`), for the pieces that span more
    # than `_MAX_PIECE` of the product, or else the largest: the reasons `obstacles`
    # gives where the plan is not used.
    joins: tuple[tuple[int, str], ...] = ()
    # The continuous action refined off its grid inside the first step (`GridSearch(
    # refine=...)`: see `solve_factored`), and why that plan cannot be used ("" where
    # it can).
    refined: str | None = None
    refine_obstacle: str = ""

    def work_by_piece(self) -> list[tuple[str, int]]:
        """(label, points evaluated) for each piece and elimination step, and for the
        checks together."""
        rows = [(f"piece on ({', '.join(p.axes)})", self.points(p.axes)) for p in self.pieces]
        rows += [
            (f"max over {s.action!r} on ({', '.join(s.axes)})", self.points(s.axes))
            for s in self.steps
        ]
        if self.refined is not None and self.steps:
            out = tuple(n for n in self.steps[0].axes if n != self.refined)
            rows.append((f"refine {self.refined!r} on ({', '.join(out)})", self.points(out)))
        if self.check_components:
            n = len(self.check_components)
            total = sum(self.points(a) for a, _ in self.check_components)
            rows.append((f"checks ({n} products of their own axes)", total))
        return rows

    def points(self, axes) -> int:
        """The number of points of the product of `axes`."""
        return math.prod(self.sizes[a] for a in axes)

    def pieces_fit(self) -> bool:
        """Whether no piece spans more than `_MAX_PIECE` of the whole product (what
        `plan_factoring(..., limit_pieces=True)` asks before it plans the rest)."""
        largest = max((self.points(p.axes) for p in self.pieces), default=0)
        return largest <= _MAX_PIECE * self.points(self.names)

    def obstacles(self) -> tuple[str, ...]:
        """Why `GridSearch` evaluates the plain product rather than this plan, in words
        (the operation and the user function that join a piece's axes, the work of the
        steps, what keeps the refined action from being refined in its own step); empty
        where the plan is used."""
        fits = self.pieces_fit()
        if fits and worth_it(self):
            return (self.refine_obstacle,) if self.refine_obstacle else ()
        total = self.points(self.names)
        reasons = [
            f"piece on ({', '.join(self.pieces[i].axes)}), "
            f"{_share(self.points(self.pieces[i].axes), total)} of the product: {why}"
            for i, why in self.joins
        ]
        if fits:
            largest = max(self.steps, key=lambda s: self.points(s.axes), default=None)
            if largest is not None:
                reasons.append(
                    f"the largest step, max over {largest.action!r}, spans "
                    f"({', '.join(largest.axes)}), {_share(self.points(largest.axes), total)} "
                    "of the product"
                )
            reasons.append(
                f"the pieces, steps and checks take {self.cost / self.plain_cost:.0%} of the "
                f"plain product's work (evaluated by piece at most {_MIN_GAIN:.0%})"
            )
        if self.refine_obstacle:
            reasons.append(self.refine_obstacle)
        return tuple(reasons)

    def usable(self) -> bool:
        """Whether `GridSearch` solves the period by this plan (`obstacles` is empty)."""
        return not self.obstacles()


class _Graph:
    """A flat jaxpr with, per variable, its producing equation and its input axes."""

    def __init__(self, jaxpr, names: tuple[str, ...]):
        self.jaxpr = jaxpr
        self.producer: dict = {}
        self.depends: dict = {}
        self._splitting: dict = {}  # `_splits`, by variable
        for var, name in zip(jaxpr.invars, names, strict=True):
            self.depends[var] = frozenset([name])
        for var in jaxpr.constvars:
            self.depends[var] = frozenset()
        for index, eqn in enumerate(jaxpr.eqns):
            deps = frozenset().union(*(self.deps(v) for v in eqn.invars))
            for out in eqn.outvars:
                self.producer[out] = index
                self.depends[out] = deps

    def deps(self, var) -> frozenset:
        return frozenset() if isinstance(var, Literal) else self.depends[var]

    def equation(self, var):
        index = None if isinstance(var, Literal) else self.producer.get(var)
        return None if index is None else self.jaxpr.eqns[index]

    def constant(self, var):
        """The value of `var` where it is a scalar constant (a literal, possibly
        converted or broadcast), else None."""
        while not isinstance(var, Literal):
            eqn = self.equation(var)
            if eqn is None or eqn.primitive.name not in _PASS_THROUGH:
                return None
            var = eqn.invars[0]
        value = np.asarray(var.val)
        return value if value.shape == () else None

    def is_neg_inf(self, var) -> bool:
        value = self.constant(var)
        return value is not None and bool(np.isneginf(value))

    def is_zero(self, var) -> bool:
        value = self.constant(var)
        return value is not None and bool(value == 0)

    def operation(self, var) -> tuple[str, list]:
        """The name of the primitive that produces `var` and its operands ("" and none
        for an input, a constant or a literal)."""
        eqn = self.equation(var)
        return ("", []) if eqn is None else (eqn.primitive.name, list(eqn.invars))

    def split(self, var, sign: int, terms: list, masks: list, factors: tuple = ()) -> None:
        """`var` (times `factors`: see `Term`) as a sum of signed terms, restricted to
        where `masks` hold.

        Exact rewrites only, whatever the values' signs: a sum, a difference or a
        negation splits; a product or a quotient distributes its other operand over the
        terms of the operand that splits (`s * (a + b)` is `s*a + s*b`: no maximum is
        taken of a scaled sum, so a negative or unknown `s` is as exact as a positive
        one, with taste shocks too); a select on a predicate of fewer axes than its
        branches splits into the terms of each branch, each kept where the predicate
        holds (or fails) and 0 elsewhere. The select that gives `-inf` where a
        constraint fails gives masks, outside any factor (where `s * -inf` would depend
        on the sign of `s`). What does not split is one term.
        """
        name, operands = self.operation(var)
        if name in ("add", "sub") and _is_float(var):
            for operand, side in zip(operands, (1, 1 if name == "add" else -1), strict=True):
                if not self.is_zero(operand):  # Python's `sum` starts from 0
                    self.split(operand, side * sign, terms, masks, factors)
        elif name == "reduce_sum" and self.stacked(operands[0]) and _is_float(var):
            # `jnp.sum(jnp.stack([a, b, c]))`
            for operand in self.stacked(operands[0]):
                self.split(operand, sign, terms, masks, factors)
        elif name == "neg":
            self.split(operands[0], -sign, terms, masks, factors)
        elif name == "convert_element_type" and _is_float(operands[0]) and _is_float(var):
            self.split(operands[0], sign, terms, masks, factors)
        elif name == "select_n" and len(operands) == 3 and _is_bool(operands[0]):
            predicate, when_false, when_true = operands
            if not factors and sign > 0 and self.is_neg_inf(when_false):
                self.conjuncts(predicate, masks)
                self.split(when_true, sign, terms, masks)
            elif self.deps(predicate) < self.deps(var):
                branches = ((when_true, ("if", predicate)), (when_false, ("unless", predicate)))
                self._distribute(var, sign, terms, masks, factors, branches)
            else:
                terms.append(Term(var, sign, factors))
        elif name == "mul" and _is_float(var):
            # The operand on fewer axes is the factor (a scale of states, the period),
            # distributed over the terms of the other.
            first, second = sorted(operands, key=lambda v: len(self.deps(v)))
            if self._splits(second):
                self._distribute(var, sign, terms, masks, factors, ((second, ("mul", first)),))
            elif self._splits(first):
                self._distribute(var, sign, terms, masks, factors, ((first, ("mul", second)),))
            else:
                terms.append(Term(var, sign, factors))
        elif name == "div" and _is_float(var):
            numerator, denominator = operands
            self._distribute(var, sign, terms, masks, factors, ((numerator, ("div", denominator)),))
        else:
            terms.append(Term(var, sign, factors))

    def joining(self, var):
        """The equation that joins the axes of `var`: from `var` down through an operand
        that depends on all of them, the first whose operands each depend on fewer
        (None for an input)."""
        axes = self.deps(var)
        while True:
            eqn = self.equation(var)
            if eqn is None:
                return None
            carrier = next((v for v in eqn.invars if self.deps(v) == axes), None)
            if carrier is None:
                return eqn
            var = carrier

    def stacked(self, var) -> list:
        """The scalars that `var` (a vector) stacks, or none where it is no such stack."""
        name, operands = self.operation(var)
        if name == "stack" and all(_aval(v).shape == () for v in operands):
            return operands
        if name == "concatenate":  # JAX before the `stack` primitive
            parts = [self.operation(v) for v in operands]
            if all(
                n == "broadcast_in_dim" and _aval(ops[0]).shape == () and _aval(v).shape == (1,)
                for (n, ops), v in zip(parts, operands, strict=True)
            ):
                return [ops[0] for _, ops in parts]
        return []

    def _splits(self, var) -> bool:
        """Whether `var` is a sum of more than one term (under a factor: no masks)."""
        if isinstance(var, Literal):
            return False
        if var not in self._splitting:
            found: list = []
            self.split(var, 1, found, [], (("mul", var),))
            self._splitting[var] = len(found) > 1
        return self._splitting[var]

    def _distribute(self, var, sign: int, terms: list, masks: list, factors: tuple, parts) -> None:
        """The terms of each `(operand, factor)` of `parts` with `factor` innermost, in
        place of `var`; `var` itself where that gives one term or none (nothing to gain).
        A term that is a constant 0 under selects alone is 0 and dropped."""
        found: list = []
        for operand, factor in parts:
            self.split(operand, sign, found, [], (*factors, factor))
        # (The factors outside, shared by every term found, keep their NaN and inf.)
        found = [
            t
            for t in found
            if not (
                self.is_zero(t.var)
                and all(k in ("if", "unless") for k, _ in t.factors[len(factors) :])
            )
        ]
        if len(found) > 1:
            terms.extend(found)
        else:
            terms.append(Term(var, sign, factors))

    def conjuncts(self, var, masks: list) -> None:
        name, operands = self.operation(var)
        if name == "and" and all(map(_is_bool, operands)):
            for operand in operands:
                self.conjuncts(operand, masks)
        elif not (isinstance(var, Literal) and bool(var.val)):
            masks.append(var)

    def alternatives(self, var) -> list[tuple]:
        """A check (non-negative) as the maximum of products of factors: each a tuple of
        jaxpr variables, boolean (0 or 1) or non-negative."""
        name, operands = self.operation(var)
        if self.is_zero(var):
            return []
        if name == "max":
            return self.alternatives(operands[0]) + self.alternatives(operands[1])
        return [tuple(self.factors(var))]

    def factors(self, var) -> list:
        name, operands = self.operation(var)
        if name == "convert_element_type" and _is_bool(operands[0]):
            masks: list = []
            self.conjuncts(operands[0], masks)
            return masks
        if name == "convert_element_type" and _is_float(operands[0]) and _is_float(var):
            return self.factors(operands[0])
        if name == "select_n" and len(operands) == 3 and _is_bool(operands[0]):
            predicate, when_false, when_true = operands
            if self.is_zero(when_false):
                masks = []
                self.conjuncts(predicate, masks)
                return masks + self.factors(when_true)
        return [var]

    def needed(self, outputs) -> list:
        """The equations that compute `outputs`, in order."""
        wanted: set[int] = set()
        stack = [v for v in outputs if not isinstance(v, Literal)]
        seen = set()
        while stack:
            var = stack.pop()
            if var in seen:
                continue
            seen.add(var)
            index = self.producer.get(var)
            if index is None:
                continue
            wanted.add(index)
            stack.extend(v for v in self.jaxpr.eqns[index].invars if not isinstance(v, Literal))
        return [self.jaxpr.eqns[i] for i in sorted(wanted)]


def _aval(var):
    return var.aval


def _is_bool(var) -> bool:
    return _aval(var).dtype == jnp.bool_ and _aval(var).shape == ()


def _is_float(var) -> bool:
    return jnp.issubdtype(_aval(var).dtype, jnp.floating)


def _elimination(
    live: dict[int, tuple[str, ...]],
    actions: tuple[str, ...],
    size: Callable,
    order: dict[str, int],
    smooth: frozenset[str],
    leading: tuple[str, ...] = (),
    last: frozenset[str] = frozenset(),
) -> tuple[tuple[Step, ...], tuple[int, ...]]:
    """Greedy elimination of `actions` from the pieces `live` (index -> axes): each time
    the action whose pieces span the smallest product, the actions of `smooth` (log-sum-
    exp) and of `last` after every other, those of `leading` before any (in order); the
    steps, and the pieces left (on state axes only)."""
    live = dict(live)
    first = len(live)
    steps: list[Step] = []
    remaining = list(actions)
    while remaining:
        eligible = [a for a in leading if a in remaining][:1]
        eligible = eligible or [a for a in remaining if a not in smooth | last] or remaining

        def span(action):
            group = [i for i, ax in live.items() if action in ax]
            union = set().union(*(live[i] for i in group)) if group else {action}
            return tuple(sorted(union, key=order.__getitem__))

        action = min(eligible, key=lambda a: (size(span(a)), order[a]))
        union = span(action)
        group = tuple(i for i, ax in live.items() if action in ax)
        steps.append(Step(action, group, union, action in smooth))
        for i in group:
            del live[i]
        live[first + len(steps) - 1] = tuple(a for a in union if a != action)
        remaining.remove(action)
    return tuple(steps), tuple(live)


def plan_factoring(
    problem: RegimeProblem,
    smooth_discrete: bool,
    fixed: dict | None = None,
    *,
    limit_pieces: bool = True,
    refined: str | None = None,
    refine_evaluations: int = 0,
) -> tuple[Factoring, Callable] | None:
    """The factoring of `problem`'s objective, and `evaluate(outputs, point)`, which
    computes jaxpr variables `outputs` at `point` (axis name -> scalar); None where a
    piece would span more than `_MAX_PIECE` of the product (with `limit_pieces`: a
    period's whole product, whose memory matters).

    `fixed` (state name -> value) fixes states at one point: the simulation's state of a
    subject; the remaining axes are the other states and the actions.

    `refined`: a continuous action that `GridSearch(refine=...)` refines off its grid,
    about `refine_evaluations` evaluations of the pieces that contain it per point where
    it is refined: eliminated first (refined in that step, `solve_factored`), the
    discrete actions last (the plain refinement's order: the grid's best continuous
    actions for each discrete choice, the refined action polished there, the discrete
    choices compared by their refined values). `Factoring.refine_obstacle` says where
    the refined action cannot be refined in its own step.
    """
    fixed = {} if fixed is None else fixed
    states = tuple(a.name for a in problem.state_axes if a.name not in fixed)
    actions = tuple(a.name for a in problem.action_axes)
    names = states + actions
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    sizes = {n: int(axes[n].points.shape[0]) for n in names}
    example = {n: jax.ShapeDtypeStruct((), axes[n].points.dtype) for n in names}

    def objective(point):
        state = {
            n: fixed[n] if n in fixed else point[n] for n in (a.name for a in problem.state_axes)
        }
        return problem.q(state, {n: point[n] for n in actions})

    closed, _ = flat_jaxpr(objective, example)
    # The jaxpr's inputs are the leaves of `example`: its names in sorted order.
    graph = _Graph(closed.jaxpr, tuple(sorted(names)))
    value, *check_vars = closed.jaxpr.outvars
    terms: list = []
    masks: list = []
    graph.split(value, 1, terms, masks)

    order = {n: i for i, n in enumerate(names)}

    def canonical(deps) -> tuple[str, ...]:
        return tuple(sorted(deps, key=order.__getitem__))

    def size(ax) -> int:
        return math.prod(sizes[a] for a in ax)

    by_axes: dict[tuple[str, ...], tuple[list, list]] = {}
    for term in terms:
        reach = frozenset().union(*(graph.deps(v) for v in term.outputs()))
        by_axes.setdefault(canonical(reach), ([], []))[0].append(term)
    for var in masks:
        ax = canonical(graph.deps(var))
        # A mask joins the smallest piece of terms that covers its axes (cheap there, and
        # it keeps a term's NaN where the mask fails inside the select that drops it).
        covering = [k for k in by_axes if set(ax) <= set(k) and by_axes[k][0]]
        key = min(covering, key=size) if covering else ax
        by_axes.setdefault(key, ([], []))[1].append(var)
    pieces = tuple(Piece(k, tuple(t), tuple(m)) for k, (t, m) in by_axes.items())
    # A piece is a stored array: one that spans most of the product would cost memory
    # that splaying cannot take back (the plain product reduces chunk by chunk), and
    # leaves nothing to eliminate early. Known before the rest is planned.
    largest = max((size(p.axes) for p in pieces), default=0)
    if limit_pieces and largest > _MAX_PIECE * size(names):  # `Factoring.pieces_fit`
        return None
    # What joins the axes of the pieces that span too much (else of the largest).
    regime = problem.regime
    functions = frozenset(
        (
            "utility",
            "next_regime",
            *regime.helpers,
            *regime.constraints,
            *(f"next_{n}" for n in regime.state_transitions),
        )
    )
    explained = [i for i, p in enumerate(pieces) if size(p.axes) > _MAX_PIECE * size(names)]
    if not explained and pieces:
        explained = [max(range(len(pieces)), key=lambda i: size(pieces[i].axes))]
    joins = tuple((i, _joined(graph, pieces[i], canonical, functions)) for i in explained)

    # Continuous actions (max) before discrete ones under taste shocks (log-sum-exp).
    smooth = frozenset(problem.regime.discrete_actions) if smooth_discrete else frozenset()
    discrete = frozenset(problem.regime.discrete_actions)
    steps, final = _elimination(
        {i: p.axes for i, p in enumerate(pieces)},
        actions,
        size,
        order,
        smooth,
        leading=() if refined is None else (refined,),
        last=frozenset() if refined is None else discrete,
    )

    # Each check: the maximum over alternatives of products of factors; each product
    # splits into components that share no action, maximised over their actions apart
    # (a mask of feasibility, shared by most checks, is reduced once for all of them).
    components: dict[frozenset, tuple[tuple[str, ...], tuple]] = {}
    checks_list = []
    for var in check_vars:
        alternatives = []
        for factors in graph.alternatives(var):
            parts: list[tuple[set, list]] = []
            unique = list({id(f): f for f in factors}.values())
            for factor in unique:
                span = set(graph.deps(factor))
                joined = [p for p in parts if span & p[0] & set(actions)]
                members = [factor] + [f for p in joined for f in p[1]]
                merged = (span.union(*(p[0] for p in joined)), members)
                parts = [p for p in parts if not any(p is q for q in joined)] + [merged]
            keys = []
            for span, members in parts:
                component = frozenset(id(m) for m in members)
                components.setdefault(component, (canonical(span), tuple(members)))
                keys.append(component)
            alternatives.append(tuple(keys))
        checks_list.append(tuple(alternatives))
    component_keys = list(components)
    checks = tuple(
        tuple(tuple(component_keys.index(c) for c in alt) for alt in alts) for alts in checks_list
    )
    check_components = tuple(components[k] for k in component_keys)

    # The work, weighed by equations per point: the plain product evaluates every
    # equation at every pair; a piece its own, a step one addition per member.
    plain_cost = size(names) * len(closed.jaxpr.eqns)
    cost = sum(size(p.axes) * len(graph.needed(_piece_outputs(p))) for p in pieces)
    cost += sum(size(s.axes) * (len(s.group) + 1) for s in steps)
    cost += sum(size(k) * len(graph.needed(list(f))) for k, f in check_components)
    refine_obstacle = ""
    if refined is not None:
        # The first step refines: at each point of its other axes, the pieces that
        # contain the refined action are evaluated off the grid; the plain refinement
        # evaluates the whole objective at each state and discrete choice.
        first = steps[0]
        out = tuple(n for n in first.axes if n != refined)
        outputs = [v for i in first.group for v in _piece_outputs(pieces[i])]
        cost += size(out) * refine_evaluations * len(graph.needed(outputs))
        plain_refinements = size(states) * size(tuple(discrete))
        plain_cost += plain_refinements * refine_evaluations * len(closed.jaxpr.eqns)
        spanning = [
            k for k, f in check_components if refined in k and not set(k) <= set(first.axes)
        ]
        if not first.group:
            refine_obstacle = f"the objective does not depend on {refined!r}"
        elif spanning:
            refine_obstacle = (
                f"a check on ({', '.join(spanning[0])}) reads {refined!r} beyond the axes "
                f"of the pieces that contain it ({', '.join(first.axes)})"
            )
        elif size(out) > plain_refinements:
            refine_obstacle = (
                f"the pieces that contain {refined!r} span ({', '.join(first.axes)}): more "
                "points to refine than the plain product's states and discrete choices"
            )
        if refine_obstacle:
            refine_obstacle = (
                f"{refined!r} cannot be refined inside the elimination: {refine_obstacle}"
            )
    factoring = Factoring(
        names=names,
        sizes=sizes,
        states=states,
        pieces=pieces,
        steps=steps,
        final=final,
        checks=checks,
        check_components=check_components,
        value=value,
        cost=cost,
        plain_cost=plain_cost,
        joins=joins,
        refined=refined,
        refine_obstacle=refine_obstacle,
    )

    inputs = dict(zip(sorted(names), closed.jaxpr.invars, strict=True))

    def evaluate(outputs, point):
        env: dict = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        for name, x in point.items():
            env[inputs[name]] = x

        def read(v):
            return v.val if isinstance(v, Literal) else env[v]

        for eqn in graph.needed(outputs):
            outs = bind_equation(eqn, [read(v) for v in eqn.invars])
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in outputs]

    return factoring, evaluate


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if part * 100 >= whole else f"{part / whole:.2g}"


def _joined(graph: _Graph, piece: Piece, canonical: Callable, functions: frozenset[str]) -> str:
    """What joins the axes of `piece`, in words: the operation, the user function it is
    in (by its named scope) and the axes of its operands."""
    axes = frozenset(piece.axes)
    for var in [t.var for t in piece.terms] + list(piece.masks):
        eqn = graph.joining(var) if graph.deps(var) == axes else None
        if eqn is None:
            continue
        groups = []
        for operand in eqn.invars:
            reach = canonical(graph.deps(operand))
            if reach and reach not in groups:
                groups.append(reach)
        joined = " and ".join(f"({', '.join(g)})" for g in groups)
        return f"`{eqn.primitive.name}` in {_location(eqn, functions)} joins {joined}"
    term = piece.terms[0] if piece.terms else None
    if term is not None and term.factors:
        factor_axes = canonical(frozenset().union(*(graph.deps(x) for _, x in term.factors)))
        return (
            f"a term on ({', '.join(canonical(graph.deps(term.var)))}) times a factor on "
            f"({', '.join(factor_axes)})"
        )
    return "its terms and constraints together"


def _location(eqn, functions: frozenset[str]) -> str:
    """The user function whose operation `eqn` is (its innermost named scope that names
    one), and whether it is computed for the continuation; the kernel's own otherwise."""
    scopes = str(eqn.source_info.name_stack).split("/")
    named = [s for s in scopes if s in functions]
    continuation = CONTINUATION_SCOPE in scopes
    if named:
        return f"`{named[-1]}`" + (" (for the continuation)" if continuation else "")
    if continuation:
        return "the continuation (the discount factor times the expected next value)"
    return "the Bellman kernel (utility, constraints and continuation combined)"


def worth_it(factoring: Factoring) -> bool:
    """Whether the plan does at most `_MIN_GAIN` of the plain product's work."""
    return factoring.cost <= _MIN_GAIN * factoring.plain_cost


def solve_factored(
    problem: RegimeProblem, factoring: Factoring, evaluate: Callable, scale, refine=None
) -> tuple[Array, Array]:
    """The period's value array (the state shape) and its checks (one array: an axis
    per state, of size 1 where not sharded, and one entry per check of `problem.checks`
    last), by elimination.

    With `factoring.refined` (a plan for `GridSearch(refine=...)`, `refine` its
    settings), the results the plain refinement gives: for each discrete choice, the
    best point of the continuous grids, the refined action polished there with the
    others at their best, and the discrete choices compared by those refined values.
    The refined action is eliminated first: at each point of that step's other axes
    the grid's best point along it, and the pieces that contain it polished off the grid
    from there (`_refine.refine_along`). From then on each result carries two arrays,
    the grid's maximum (which the later continuous steps maximise: the grid search
    picks the other continuous actions by it) and the refined value at the grid's
    choice (what the plain refinement's value is); the discrete actions, eliminated
    last, compare the refined values."""
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    dtype = jnp.zeros(()).dtype
    itemsize = np.zeros((), dtype).itemsize
    states = factoring.states

    def on_axes(names: tuple[str, ...], fn: Callable):
        return _on_axes(problem, states, names, fn)

    # The check components, by their axes: those on a piece's axes are evaluated with
    # that piece, in one function, so that what they share (a feasibility mask, the
    # quantities it reads) is computed once per point; the others on their own.
    by_axes: dict[tuple[str, ...], list[int]] = {}
    for index, (names, _) in enumerate(factoring.check_components):
        by_axes.setdefault(names, []).append(index)
    reduced: list = [None] * len(factoring.check_components)

    def evaluated(outputs: list, indices, point) -> tuple[list, tuple[Array, ...]]:
        """`outputs` and the products of the check components `indices` at `point`, in
        one evaluation (each equation bound once)."""
        factors = [list(factoring.check_components[i][1]) for i in indices]
        values = evaluate(outputs + [f for fs in factors for f in fs], point)
        rest, start = values[len(outputs) :], 0
        out = []
        for fs in factors:
            out.append(_product(rest[start : start + len(fs)], dtype))
            start += len(fs)
        return values[: len(outputs)], tuple(out)

    def products(indices, point):
        return evaluated([], indices, point)[1]

    def keep_reduced(names: tuple[str, ...], indices: list[int], arrays) -> None:
        """The products of the components `indices` (on the axes `names`) maximised
        over their actions, broadcast to the state axes."""
        over = tuple(i for i, n in enumerate(names) if n not in states)
        kept = tuple(n for n in names if n in states)
        for index, array in zip(indices, max_each(tuple(arrays), over), strict=True):
            reduced[index] = _broadcast(array, kept, states)

    # Each result: its axes, its array, and where the refined action was eliminated into
    # it, the refined value (its array then the grid's maximum, without derivative).
    results: list[tuple[tuple[str, ...], Array, Array | None]] = []
    refined_checks: list[tuple[tuple[str, ...], list[int], tuple]] = []
    for piece in factoring.pieces:
        with_checks = by_axes.pop(piece.axes, [])

        def piece_and_checks(point, piece=piece, indices=with_checks):
            values, checks = evaluated(_piece_outputs(piece), indices, point)
            return _piece_value(piece, values, dtype), checks

        array, arrays = on_axes(piece.axes, piece_and_checks)
        results.append((piece.axes, array, None))
        if with_checks:
            keep_reduced(piece.axes, with_checks, arrays)

    discrete = frozenset(problem.regime.discrete_actions)
    for step in factoring.steps:
        members = [results[i] for i in step.group]
        out = tuple(n for n in step.axes if n != step.action)
        # State axes chunked where the step's product would not fit at once (or where
        # the user splays them): the knobs and the budget of the plain evaluation.
        chunked = auto_splayed(
            tuple(axes[n] for n in out if n in states),
            tuple(axes[n] for n in step.axes if n not in states),
            itemsize,
        )
        todo = tuple(
            (a.name, a.batch_size) for a in chunked if 0 < a.batch_size < a.points.shape[0]
        )
        if step.action == factoring.refined:
            # Original pieces only (`plan_factoring` eliminates it first).
            indices = [
                i for i, (names, _) in enumerate(factoring.check_components) if step.action in names
            ]
            grid, paid, checks = _refined_step(
                problem, factoring, evaluate, evaluated, step, members, todo, indices, refine
            )
            results.append((out, grid, paid))
            if indices:
                refined_checks.append((out, indices, checks))
        elif any(paid is not None for _, _, paid in members) and step.action not in discrete:
            # The grid's best point along the action (by the grid's maxima), and the
            # refined value there.
            def best(totals, position):
                grid, paid = totals
                at = jnp.expand_dims(jnp.argmax(grid, axis=position), position)
                return tuple(
                    jnp.squeeze(jnp.take_along_axis(x, at, axis=position), position)
                    for x in (grid, paid)
                )

            group: list = [
                (n, (jax.lax.stop_gradient(a), a if paid is None else paid))
                for n, a, paid in members
            ]
            grid, paid = _eliminate_with(step, group, todo, best)
            results.append((out, grid, paid))
        else:
            group = [(n, a if paid is None else paid) for n, a, paid in members] or [
                _nothing(step, factoring, dtype)
            ]
            results.append((out, _eliminate(step, group, todo, scale), None))

    value = jnp.zeros(tuple(factoring.sizes[n] for n in states), dtype)
    for index in factoring.final:
        names, array, refined_value = results[index]
        value = value + _broadcast(array if refined_value is None else refined_value, names, states)
    value = _drop_tangent_at_neg_inf(value)

    # The other components of equal axes evaluated together and reduced over their
    # actions in one variadic reduction (`max_each`: one XLA kernel for all of them).
    for names, indices in by_axes.items():
        arrays = (
            on_axes(names, functools.partial(products, indices)) if names else products(indices, {})
        )
        keep_reduced(names, indices, arrays)
    # The components that read the refined action, at the refined points too.
    grid_reduced = list(reduced)
    for names, indices, arrays in refined_checks:
        keep_reduced(names, indices, arrays)
        for index in indices:
            reduced[index] = jnp.maximum(reduced[index], grid_reduced[index])

    return value, combined_checks(problem, factoring, reduced, value.shape)


def _refined_step(
    problem: RegimeProblem,
    factoring: Factoring,
    evaluate: Callable,
    evaluated: Callable,
    step: Step,
    members: list,
    todo: tuple[tuple[str, int], ...],
    check_indices: list[int],
    refine,
) -> tuple[Array, Array, tuple]:
    """The first step of a refined plan (`solve_factored`): on the step's axes but the
    refined action, the grid's maximum of its pieces along it (no derivative), the
    refined value of those pieces (`_refine.refine_along` from the grid's best point:
    derivatives by the envelope theorem, or along a kink), and the products of the
    check components `check_indices` at the refined point."""
    action = step.action
    out = tuple(n for n in step.axes if n != action)
    dtype = jnp.zeros(()).dtype

    def best(totals, position):
        (total,) = totals
        return jnp.max(total, axis=position), jnp.argmax(total, axis=position)

    group = [(n, (jax.lax.stop_gradient(a),)) for n, a, _ in members]
    grid, codes = _eliminate_with(step, group, todo, best)

    pieces = [factoring.pieces[i] for i in step.group]
    outputs = [_piece_outputs(p) for p in pieces]
    flat = [v for o in outputs for v in o]
    points = next(a for a in problem.action_axes if a.name == action).points

    def at(point, arrays):
        def along(t):
            values, checks = evaluated(flat, check_indices, {**point, action: t})
            total, start = None, 0
            for piece, o in zip(pieces, outputs, strict=True):
                v = _piece_value(piece, values[start : start + len(o)], dtype)
                total = v if total is None else total + v
                start += len(o)
            assert total is not None  # a step's group holds at least one piece
            return total, checks

        return refine_along(along, points, arrays["code"], refine)

    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    itemsize = np.zeros((), dtype).itemsize
    chosen = tuple(axes[n] for n in out)
    splayed = {
        a.name: a
        for a in auto_splayed(
            tuple(a for a in chosen if a.name in factoring.states),
            tuple(a for a in chosen if a.name not in factoring.states),
            itemsize,
        )
    }
    paid, checks = lift(
        at,
        tuple(splayed.get(a.name, a) for a in chosen),
        carried={"code": Carried(codes, out)},
    )
    return grid, paid, checks


def combined_checks(
    problem: RegimeProblem, factoring: Factoring, reduced: list, state_shape: tuple[int, ...]
) -> Array:
    """The checks of `problem.checks` from their components maximised over their actions
    (`reduced`, one array per `factoring.check_components`, broadcast to the state axes):
    each alternative the product of its components, each check the maximum of its
    alternatives, reduced over the state axes that are not sharded (the backward
    induction reduces the checks over those anyway, and the sharded ones after the
    loop). One array: an axis per state, of size 1 where reduced, the checks last.
    Where no state is sharded and the checks fit one reduction, they are returned
    unreduced, on the union of their axes (size 1 elsewhere): the backward induction
    reduces them with the other regimes' checks (`_backward._merge_checks`)."""
    dtype = jnp.zeros(()).dtype
    sharding = problem.sharding
    sharded = [sharding is not None and sharding.is_sharded(n) for n in factoring.states]
    over = tuple(i for i, keep in enumerate(sharded) if not keep)
    shape = tuple(n if keep else 1 for n, keep in zip(state_shape, sharded, strict=True))
    if not factoring.checks:
        return jnp.zeros((*shape, 0), dtype)
    # Each check on the union of its components' axes (size 1 elsewhere), not yet
    # reduced over the states.
    unreduced = []
    for alternatives in factoring.checks:
        check = jnp.zeros((), dtype)
        for alternative in alternatives:
            term = jnp.ones((), dtype)
            for index in alternative:
                term = term * reduced[index]
            check = jnp.maximum(check, term)
        unreduced.append(jnp.broadcast_to(check, jnp.broadcast_shapes(check.shape, shape)))
    # Stacked and reduced over the states in one reduction (one XLA kernel that also
    # computes the products) where all of them fit on the union of their axes, else one
    # variadic reduction per shape: a reduction per check was a kernel per check in
    # every period (the Mahler-Yum example's 24 checks: 14 kernels of a few hundred
    # points each). The checks are >= 0 (or NaN) before the reduction.
    union = jnp.broadcast_shapes(*(c.shape for c in unreduced))
    if math.prod(union) * len(unreduced) <= _ONE_REDUCTION:
        stacked = jnp.stack([jnp.broadcast_to(c, union) for c in unreduced], axis=-1)
        if not any(sharded):
            # Reduced by the backward induction, together with the other regimes'
            # checks (`_backward._merge_checks`): one kernel for all of them.
            return jax.lax.stop_gradient(stacked)
        (highest,) = max_each((stacked,), over)
        highest = jnp.expand_dims(highest, over)
        return jax.lax.stop_gradient(jnp.broadcast_to(highest, (*shape, len(unreduced))))
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(unreduced):
        by_shape.setdefault(tuple(c.shape), []).append(i)
    checks: list = [None] * len(unreduced)
    for indices in by_shape.values():
        group = max_each(tuple(unreduced[i] for i in indices), over)
        for i, high in zip(indices, group, strict=True):
            checks[i] = jnp.broadcast_to(jnp.expand_dims(high, over), shape)
    # Flags, without derivative (as the plain product's `max_each`): concrete under an
    # eager `jax.grad`, so `solve` reports them on the host.
    return jax.lax.stop_gradient(jnp.stack(checks, axis=-1))


def checks_apart(problem: RegimeProblem, factoring: Factoring, evaluate: Callable) -> Array:
    """The checks of a period whose value the plain product computes (`GridSearch` where
    factoring buys too little), each component of a check evaluated on its own axes and
    maximised over its actions, as `combined_checks` returns them.

    The plain product's `q` would compute every check at every state-action pair, in a
    pass over the whole product of its own (XLA does not fuse a reduction of several
    outputs into the kernel that materialises the values for their maximum): a check
    that depends on the period and the parameters alone, such as a survival probability
    indexed by the period, was reduced over every pair. On its own axes it costs next to
    nothing, and a component that depends neither on the period nor on next period's
    values (a next continuous state that is NaN or infinite) is hoisted by XLA out of
    the period loop. A component that spans the whole product is still reduced chunk by
    chunk over its actions (the knobs of the action axes, and the state axes splayed as
    the plain product's are), never stored whole.
    """
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    dtype = jnp.zeros(()).dtype
    itemsize = np.zeros((), dtype).itemsize
    states = factoring.states
    by_axes: dict[tuple[str, ...], list[int]] = {}
    for index, (names, _) in enumerate(factoring.check_components):
        by_axes.setdefault(names, []).append(index)
    reduced: list = [None] * len(factoring.check_components)
    for names, indices in by_axes.items():
        factors = [list(factoring.check_components[i][1]) for i in indices]
        flat = [f for fs in factors for f in fs]

        def products(point, factors=factors, flat=flat) -> tuple[Array, ...]:
            values, out, start = evaluate(flat, point), [], 0
            for fs in factors:
                out.append(_product(values[start : start + len(fs)], dtype))
                start += len(fs)
            return tuple(out)

        action_axes = tuple(axes[n] for n in names if n not in states)

        def over_actions(point, depth=0, products=products, action_axes=action_axes):
            if depth == len(action_axes):
                return products(point)
            axis = action_axes[depth]
            return reduce_axis(
                lambda x: over_actions({**point, axis.name: x}, depth + 1),
                axis.points,
                axis.batch_size,
                lambda outputs: max_each(outputs, (0,)),
            )

        kept = tuple(n for n in names if n in states)
        state_axes = auto_splayed(tuple(axes[n] for n in kept), action_axes, itemsize)
        for index, array in zip(indices, lift(over_actions, state_axes), strict=True):
            reduced[index] = _broadcast(array, kept, states)
    shape = tuple(factoring.sizes[n] for n in states)
    return combined_checks(problem, factoring, reduced, shape)


def _on_axes(problem: RegimeProblem, states: tuple[str, ...], names: tuple[str, ...], fn: Callable):
    """`fn(point)` on the product of `names` (axes in that order), splayed as the knobs
    and the evaluation budget say (`states`: which of them are state axes)."""
    axes = {a.name: a for a in (*problem.state_axes, *problem.action_axes)}
    itemsize = np.zeros((), jnp.zeros(()).dtype).itemsize
    chosen = tuple(axes[n] for n in names)
    splayed = {
        a.name: a
        for a in auto_splayed(
            tuple(a for a in chosen if a.name in states),
            tuple(a for a in chosen if a.name not in states),
            itemsize,
        )
    }
    return lift(fn, tuple(splayed.get(a.name, a) for a in chosen))


def _broadcast(array: Array, names: tuple[str, ...], target: tuple[str, ...]) -> Array:
    """`array` (axes `names`, in the order of `target`) with size-1 axes for the rest."""
    shape = [1] * len(target)
    for name, n in zip(names, array.shape, strict=True):
        shape[target.index(name)] = n
    return array.reshape(shape)


def _eliminate(step: Step, group, todo: tuple[tuple[str, int], ...], scale) -> Array:
    """The result of `step` (on its axes but the eliminated action, in order): the group
    broadcast, summed and reduced along the action, mapped in chunks along `todo`."""

    def reduce(totals, position):
        (total,) = totals
        if step.smooth:
            return (smooth_max(total, scale, position),)
        return (max_along(total, position),)

    (result,) = _eliminate_with(step, [(n, (a,)) for n, a in group], todo, reduce)
    return result


def _eliminate_with(step: Step, group, todo: tuple[tuple[str, int], ...], reduce) -> tuple:
    """`_eliminate` of several arrays per member of the group (`(axes, arrays)` pairs,
    summed channel by channel), reduced along the action by `reduce(totals, position)`,
    which returns a tuple of arrays on the other axes."""
    out = tuple(n for n in step.axes if n != step.action)
    channels = len(group[0][1])

    def run(group, names, todo):
        """The results on `names` but the action, with the axes of `todo` leading."""
        if not todo:
            totals = tuple(
                _combined([(n, arrays[c]) for n, arrays in group], names) for c in range(channels)
            )
            return reduce(totals, names.index(step.action))
        (axis, batch_size), rest = todo[0], todo[1:]
        mapped = [(n, a) for n, a in group if axis in n]
        fixed = [(n, a) for n, a in group if axis not in n]
        slices = tuple(
            tuple(jnp.moveaxis(x, n.index(axis), 0) for x in arrays) for n, arrays in mapped
        )
        inner_names = tuple(x for x in names if x != axis)

        def body(parts):
            inner = [
                (tuple(x for x in n if x != axis), p)
                for (n, _), p in zip(mapped, parts, strict=True)
            ]
            return run(inner + fixed, inner_names, rest)

        return map_axis(body, slices, batch_size)

    results = run(list(group), step.axes, todo)
    # Leading: the chunked axes (in `todo` order), then the others in order.
    leading = [n for n, _ in todo]
    order = leading + [n for n in out if n not in leading]
    if not leading:
        return tuple(results)
    return tuple(jnp.transpose(r, [order.index(n) for n in out]) for r in results)


def choose_factored(
    factoring: Factoring, evaluate: Callable, points: dict[str, Array], noise=None
) -> tuple[dict[str, Array], Array]:
    """The best action at one state (every state fixed: `plan_factoring(..., fixed=)`),
    as grid indices by action, and its value: the elimination with each step's argmax
    kept, decoded from the last step back.

    `noise` is `(discrete action names, array)`: taste shocks drawn on those axes, added
    to the objective (then every action is maximised, none smoothed).
    """
    dtype = jnp.zeros(()).dtype
    axes = {n: Axis(n, points[n], 0, False) for n in factoring.names}
    results = [
        (
            piece.axes,
            lift(
                lambda point, piece=piece: _piece_value(
                    piece, evaluate(_piece_outputs(piece), point), dtype
                ),
                tuple(axes[n] for n in piece.axes),
            ),
        )
        for piece in factoring.pieces
    ]
    return _best_by_elimination(factoring, factoring.names, results, noise)


def tabulate_shared_pieces(
    problem: RegimeProblem, factoring: Factoring, evaluate: Callable, n_subjects: int
) -> dict[int, Array]:
    """The pieces of a period's plan (no state fixed) that every subject of a simulated
    chunk shares, on their grids: those no continuous state enters (their states are read
    by code), where a table is smaller than what `n_subjects` subjects would evaluate
    apart, all of them within `EVALUATION_BYTES`. By piece index; empty where none is.

    On the full Mahler-Yum example the expected continuation is such a piece: each
    subject evaluated it at its own state, 2,000 reads of next period's values that a
    TPU gathers point by point (the simulation ran no faster there than on two CPU
    cores); its table is the solve's own piece, read by a subject as one contiguous slab.
    """
    continuous = {a.name for a in problem.state_axes if not a.is_discrete}
    itemsize = np.zeros((), jnp.zeros(()).dtype).itemsize
    tables = {}
    room = EVALUATION_BYTES  # all the tables of a period together
    for index, piece in enumerate(factoring.pieces):
        actions = tuple(n for n in piece.axes if n not in factoring.states)
        size = factoring.points(piece.axes)
        if (
            continuous.intersection(piece.axes)
            or size > n_subjects * factoring.points(actions)
            or size * itemsize > room
        ):
            continue
        room -= size * itemsize
        tables[index] = _on_axes(
            problem,
            factoring.states,
            piece.axes,
            lambda point, piece=piece: _piece_value(
                piece, evaluate(_piece_outputs(piece), point), jnp.zeros(()).dtype
            ),
        )
    return tables


def choose_tabulated(
    problem: RegimeProblem,
    factoring: Factoring,
    evaluate: Callable,
    tables: dict[int, Array],
    state: dict[str, Array],
    noise=None,
) -> tuple[dict[str, Array], Array]:
    """`choose_factored` of one subject at `state` by the period's plan (no state
    fixed): the pieces of `tables` read at the subject's codes, the others evaluated at
    its state; the same elimination."""
    dtype = jnp.zeros(()).dtype
    action_axes = {a.name: a for a in problem.action_axes}
    results = []
    for index, piece in enumerate(factoring.pieces):
        actions = tuple(n for n in piece.axes if n not in factoring.states)
        own = {n: state[n] for n in piece.axes if n in factoring.states}
        if index in tables:
            array = tables[index][tuple(own.values())]
        else:
            array = lift(
                lambda point, piece=piece, own=own: _piece_value(
                    piece, evaluate(_piece_outputs(piece), {**own, **point}), dtype
                ),
                tuple(Axis(n, action_axes[n].points, 0, False) for n in actions),
            )
        results.append((actions, array))
    names = tuple(a.name for a in problem.action_axes)
    return _best_by_elimination(factoring, names, results, noise)


def _best_by_elimination(
    factoring: Factoring, actions: tuple[str, ...], results: list, noise
) -> tuple[dict[str, Array], Array]:
    """The best of `actions` over the pieces `results` ((action axes, array) pairs at one
    state) and the taste shocks `noise`, as codes by action, and its value."""
    dtype = jnp.zeros(()).dtype
    order = {n: i for i, n in enumerate(factoring.names)}
    if noise is not None:
        names, draws = noise
        results = [*results, (tuple(sorted(names, key=order.__getitem__)), draws)]
    steps, final = _elimination(
        {i: ax for i, (ax, _) in enumerate(results)},
        actions,
        factoring.points,
        order,
        frozenset(),
    )
    best = []
    for step in steps:
        group = [results[i] for i in step.group] or [_nothing(step, factoring, dtype)]
        total = _combined(group, step.axes)
        position = step.axes.index(step.action)
        out = tuple(n for n in step.axes if n != step.action)
        results.append((out, max_along(total, position)))
        best.append((out, jnp.argmax(total, axis=position)))
    value = jnp.zeros((), dtype)
    for index in final:
        value = value + results[index][1]
    codes: dict[str, Array] = {}
    for step, (out, argmax) in zip(reversed(steps), reversed(best), strict=True):
        codes[step.action] = argmax[tuple(codes[n] for n in out)]
    return codes, value


def _product(values: list, dtype) -> Array:
    """The product of a check component's factors: the non-boolean ones multiplied,
    0 where a boolean one is False (a literal factor comes as a Python scalar)."""
    values = [jnp.asarray(v) for v in values]
    total = jnp.ones((), dtype)
    for v in values:
        if v.dtype != jnp.bool_:
            total = total * jnp.asarray(v, dtype)
    flags = [v for v in values if v.dtype == jnp.bool_]
    if not flags:
        return total
    ok = flags[0]
    for flag in flags[1:]:
        ok = ok & flag
    return jnp.where(ok, total, 0.0)


def _nothing(step: Step, factoring: Factoring, dtype) -> tuple[tuple[str, ...], Array]:
    """The piece of an action that no piece contains: 0 at each of its points (its max
    is 0; under taste shocks its log-sum-exp adds `λ·log n`, as in the plain product)."""
    return (step.action,), jnp.zeros((factoring.sizes[step.action],), dtype)


def _piece_outputs(piece: Piece) -> list:
    """The jaxpr variables a piece reads: each term's (`Term.outputs`), then its masks."""
    return [v for term in piece.terms for v in term.outputs()] + list(piece.masks)


def _term_value(term: Term, values: list, dtype) -> Array:
    """The value of `term` from `values` (`Term.outputs` evaluated at a point): its
    factors applied innermost first, as the objective applies them."""
    total = jnp.asarray(values[0], dtype)
    for (kind, _), x in zip(reversed(term.factors), reversed(values[1:]), strict=True):
        if kind == "mul":
            total = total * jnp.asarray(x, dtype)
        elif kind == "div":
            total = total / jnp.asarray(x, dtype)
        elif kind == "if":
            total = jnp.where(x, total, jnp.zeros((), dtype))
        else:
            total = jnp.where(x, jnp.zeros((), dtype), total)
    return total


def _piece_value(piece: Piece, values: list, dtype):
    """The sum of a piece's signed terms, `-inf` where a mask fails, from `values`
    (`_piece_outputs` evaluated at a point)."""
    total = jnp.zeros((), dtype)
    start = 0
    for term in piece.terms:
        stop = start + 1 + len(term.factors)
        value = _term_value(term, values[start:stop], dtype)
        total = total + value if term.sign > 0 else total - value
        start = stop
    if not piece.masks:
        return total
    feasible = values[start]
    for mask in values[start + 1 :]:
        feasible = feasible & mask
    return jnp.where(feasible, total, -jnp.inf)


def _combined(group, names: tuple[str, ...]) -> Array:
    """The arrays of `group` (each with its axes) broadcast to `names` and summed."""
    total = None
    for array_names, array in group:
        b = _broadcast(array, array_names, names)
        total = b if total is None else total + b
    assert total is not None
    shape = tuple(
        max(_broadcast(a, n, names).shape[i] for n, a in group) for i in range(len(names))
    )
    return _drop_tangent_at_neg_inf(jnp.broadcast_to(total, shape))


def _drop_tangent_at_neg_inf(total: Array) -> Array:
    """`total`, with no derivative where it is `-inf`.

    A piece that no constraint masks (the continuation) may carry a NaN derivative where
    its value is `-inf` (a `-inf` node read), which `jnp.max`'s derivative (a sum over
    every element weighted by whether it is the maximum) would spread; the plain
    product's `where(feasible, ·, -inf)` drops those points' derivatives the same way.
    """
    return jnp.where(total == -jnp.inf, -jnp.inf, total)
