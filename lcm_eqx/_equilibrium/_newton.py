"""Damped Newton's method for a small square system `fn(x, args) = 0`, differentiable in
`args` by the implicit function theorem.

The Jacobian `∂fn/∂x` is exact, by forward mode (one tangent per unknown: prices are few,
parameters behind them many). Each iteration evaluates `fn` and its Jacobian at a
candidate `x + λ d`, with `d = −J⁻¹ fn(x)` the Newton direction: the candidate is
accepted when it lowers `‖fn‖₂` by at least `10⁻⁴ λ` of itself (Armijo), otherwise `λ`
is halved. A candidate where `fn` or its Jacobian is not finite (prices at which the
model has no solution) counts as no decrease, so the step shrinks back towards where the
model is defined. Steps are cut short so as to stay strictly inside optional bounds (at
most 95% of the way to a bound). The whole search is one `jax.lax.while_loop`: it runs
under `jax.jit` and `jax.vmap`, with no host round trip per step.

Derivatives: at the root `x*(θ)`, `fn(x*(θ), θ) = 0`, so `dx* = −J⁻¹ (∂fn/∂θ) dθ`
(`jax.custom_jvp`). The Jacobian is the one the search computed at its last accepted
point, which is `x*`; `(∂fn/∂θ) dθ` is one forward-mode pass of `fn` at `x*`. Reverse
mode (`jax.grad`) transposes that rule, so the search itself is never differentiated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._numerics import CONTRACTION_PRECISION

RUNNING = -1
CONVERGED = 0
MAX_STEPS = 1
NO_DECREASE = 2
NOT_FINITE_AT_START = 3
SINGULAR = 4

STATUS_MESSAGES = {
    CONVERGED: "converged",
    MAX_STEPS: "did not converge (max_steps reached)",
    NO_DECREASE: (
        "stalled: no step along the Newton direction lowered the excess demands (the "
        "system may have no root near here, or be discontinuous, or the tolerance be "
        "below the excess demands' rounding)"
    ),
    NOT_FINITE_AT_START: "the excess demands or their Jacobian are not finite at the start",
    SINGULAR: "the Jacobian of the excess demands is singular",
}

_ARMIJO = 1e-4  # sufficient decrease of ‖fn‖₂, as a share of the step size
_TO_BOUND = 0.95  # the largest share of the way to a bound that one step may go


class Options(NamedTuple):
    """The search's settings (static: hashable Python values)."""

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    tolerance: float  # converged when max |fn| <= tolerance
    max_steps: int  # accepted Newton steps
    max_halvings: int  # step halvings after one accepted step


class Root(eqx.Module):
    """Where the search stopped."""

    x: Float[Array, " n"]
    value: Float[Array, " n"]  # fn at x
    aux: Any  # fn's auxiliary outputs at x (differentiable too)
    steps: Int[Array, ""]  # accepted Newton steps
    status: Int[Array, ""]  # one of STATUS_MESSAGES

    @property
    def converged(self) -> Bool[Array, ""]:
        return self.status == CONVERGED


class _Search(NamedTuple):
    x: Array
    value: Array
    aux: Any
    jacobian: Array  # ∂value/∂x
    aux_jacobian: Any  # ∂aux/∂x (a trailing axis per unknown)
    merit: Array  # ‖value‖₂
    direction: Array
    step: Array  # λ
    steps: Array  # -1 until the start has been evaluated
    halvings: Array
    status: Array


def _evaluate(fn: Callable, x: Array, args: Any):
    """`fn`'s value and auxiliary outputs at `x`, and their Jacobians in `x` (forward
    mode: one tangent per unknown, in one pass)."""

    def twice(x):
        value, aux = fn(x, args)
        return (value, aux), (value, aux)

    (jacobian, aux_jacobian), (value, aux) = jax.jacfwd(twice, has_aux=True)(x)
    return value, aux, jacobian, aux_jacobian


def _room(x: Array, direction: Array, options: Options) -> Array:
    """The largest step size, up to 1, that keeps `x + λ d` inside the bounds (strictly)."""
    lower = jnp.asarray(options.lower, x.dtype)
    upper = jnp.asarray(options.upper, x.dtype)
    safe = jnp.where(direction == 0, 1.0, direction)
    to_bound = jnp.where(
        direction > 0,
        (upper - x) / safe,
        jnp.where(direction < 0, (lower - x) / safe, jnp.inf),
    )
    return jnp.minimum(1.0, _TO_BOUND * jnp.min(to_bound))


def _all_finite(*arrays: Array) -> Array:
    return functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(a)) for a in arrays])


def search(fn: Callable, options: Options, x0: Array, args: Any) -> tuple[Root, _Search]:
    """The damped Newton search from `x0`; returns where it stopped and the search's
    last state (with the Jacobians there).

    `fn(x, args)` returns `(value, aux)`. The start is evaluated by the loop's first
    iteration (as a step of size 0 from it, accepted if finite), so the program holds
    one copy of `fn` and its Jacobian, not two.
    """
    shapes = jax.eval_shape(functools.partial(_evaluate, fn), x0, args)
    value, aux, jacobian, aux_jacobian = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    state = _Search(
        x=x0,
        value=value,
        aux=aux,
        jacobian=jacobian,
        aux_jacobian=aux_jacobian,
        merit=jnp.asarray(jnp.inf, x0.dtype),
        direction=jnp.zeros_like(x0),
        step=jnp.zeros((), x0.dtype),
        steps=-jnp.ones((), jnp.int32),
        halvings=jnp.zeros((), jnp.int32),
        status=jnp.asarray(RUNNING, jnp.int32),
    )

    def iterate(state: _Search) -> _Search:
        candidate = state.x + state.step * state.direction
        value, aux, jacobian, aux_jacobian = _evaluate(fn, candidate, args)
        merit = jnp.linalg.norm(value)
        finite = _all_finite(value, jacobian)
        accept = finite & (merit <= (1 - _ARMIJO * state.step) * state.merit)
        direction = -jnp.linalg.solve(jacobian, value)
        steps = state.steps + accept.astype(jnp.int32)
        halvings = jnp.where(accept, 0, state.halvings + 1)
        status = jnp.where(
            accept,
            jnp.where(
                jnp.max(jnp.abs(value)) <= options.tolerance,
                CONVERGED,
                jnp.where(
                    ~_all_finite(direction),
                    SINGULAR,
                    jnp.where(steps >= options.max_steps, MAX_STEPS, RUNNING),
                ),
            ),
            jnp.where(
                state.steps < 0,
                NOT_FINITE_AT_START,
                jnp.where(halvings > options.max_halvings, NO_DECREASE, RUNNING),
            ),
        ).astype(jnp.int32)
        accepted = _Search(
            x=candidate,
            value=value,
            aux=aux,
            jacobian=jacobian,
            aux_jacobian=aux_jacobian,
            merit=merit,
            direction=direction,
            step=_room(candidate, direction, options),
            steps=steps,
            halvings=halvings,
            status=status,
        )
        rejected = state._replace(step=state.step / 2, halvings=halvings, status=status)
        return jax.tree.map(lambda a, r: jnp.where(accept, a, r), accepted, rejected)

    state = jax.lax.while_loop(lambda s: s.status == RUNNING, iterate, state)
    found = Root(
        x=state.x,
        value=state.value,
        aux=state.aux,
        steps=jnp.maximum(state.steps, 0),
        status=state.status,
    )
    return found, state


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def root(fn: Callable, options: Options, x0: Array, args: Any) -> Root:
    """The root of `fn(x, args)[0] = 0` near `x0` (a `Root`, with `fn`'s auxiliary
    outputs there), differentiable in `args` by the implicit function theorem (not in
    `x0`)."""
    return search(fn, options, x0, args)[0]


@root.defjvp
def _root_jvp(fn: Callable, options: Options, primals, tangents):
    x0, args = primals
    _, args_dot = tangents
    found, state = search(fn, options, x0, args)
    x = jax.lax.stop_gradient(found.x)
    _, (value_dot, aux_dot) = jax.jvp(lambda a: fn(x, a), (args,), (args_dot,))
    x_dot = -jnp.linalg.solve(state.jacobian, value_dot)
    aux_dot = jax.tree.map(
        lambda d, j: d + jnp.matmul(j, x_dot, precision=CONTRACTION_PRECISION),
        aux_dot,
        state.aux_jacobian,
    )
    # float0: the tangent type of an integer leaf (an ndarray, not a jax Array).
    integer = cast(Any, np.zeros((), dtype=jax.dtypes.float0))
    tangent = Root(
        x=x_dot, value=jnp.zeros_like(found.value), aux=aux_dot, steps=integer, status=integer
    )
    return found, tangent
