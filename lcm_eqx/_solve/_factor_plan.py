"""The plan of the structure-aware grid search (`_factored.py` carries it out): the
Bellman objective of one point traced into a flat jaxpr of scalars, split into additive
terms and masks, the axes each depends on read off the jaxpr (`_Graph`), the pieces
(terms and masks of equal axes) and the greedy elimination order of the actions
(`plan_factoring`, `Factoring`), whether it is worth it (`worth_it`, `_MIN_GAIN`), and
what keeps a model on the plain product (`Factoring.obstacles`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from ._axes import (
    bind_equation,
    flat_jaxpr,
)
from ._kernel import CONTINUATION_SCOPE, RegimeProblem

# Evaluate the pieces where they need at most this fraction of the plain product's work
# (points times equations per point).
_MIN_GAIN = 0.5

# The largest piece (a stored array) as a fraction of the plain product's pairs.
_MAX_PIECE = 0.25

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


def elimination_order(
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
    steps, final = elimination_order(
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
    cost = sum(size(p.axes) * len(graph.needed(piece_outputs(p))) for p in pieces)
    cost += sum(size(s.axes) * (len(s.group) + 1) for s in steps)
    cost += sum(size(k) * len(graph.needed(list(f))) for k, f in check_components)
    refine_obstacle = ""
    if refined is not None:
        # The first step refines: at each point of its other axes, the pieces that
        # contain the refined action are evaluated off the grid; the plain refinement
        # evaluates the whole objective at each state and discrete choice.
        first = steps[0]
        out = tuple(n for n in first.axes if n != refined)
        outputs = [v for i in first.group for v in piece_outputs(pieces[i])]
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


def piece_outputs(piece: Piece) -> list:
    """The jaxpr variables a piece reads: each term's (`Term.outputs`), then its masks."""
    return [v for term in piece.terms for v in term.outputs()] + list(piece.masks)
