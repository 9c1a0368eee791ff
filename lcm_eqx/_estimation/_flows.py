"""How the exact distribution moves mass between grids (`_distribution.forward`): a
flow's next states as codes and weights on the target grid, scattered there; Markov
states as dense blocks, process states along their chain once per period.

A flow from one node and discrete choice gives, per sparse state of the target
(deterministic or interpolated next values), its code (exact) or codes and weights
(spread over the nodes around an interpolated value); their combinations are axes of
their own (`outer`), never flattened. Markov states whose probabilities the choice
moves travel as a dense block at each combination (`dense_states`), and process states
(an exogenous chain) at the current code, the pushed array then moved along the chain
(`chained_states`, `along_chain`). On reduced Mahler–Yum that is 4 combinations and a
block of 2 per node and choice where every combination (200 indices of 9 codes) was
once its own scatter index.

Arrays here keep one axis per state, choice and combination, most of them short. The
scatter (`scatter`) gives each entry one code on the target's flat grid, so nothing of
that size is reshaped: on a TPU, whose tiles span an array's last two axes, flattening
such an array is a relayout whose compile time grows with its size (tiny Mahler–Yum's
Jacobian spent 53 of its 64 s of compile there), and on the CPU the flat scatter runs
3–5× faster than the flattened one (`benchmarks/accelerator_layout.py`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._grids import AbstractContinuousGrid, AbstractProcessGrid
from .._solve._sharding import ShardingPlan, is_identity_transition


def widen(x: Array, shape: tuple[int, ...]) -> Array:
    """`x` broadcast to `shape` along its leading axes (new axes after its own): a
    broadcast, not a reshape that adds unit axes (on a TPU a relayout)."""
    return jax.lax.broadcast_in_dim(x, shape, tuple(range(x.ndim)))


def interpolation(grid, x: Array) -> tuple[Array, Array]:
    """Codes `(*x.shape, 2)` and weights `(*x.shape, 2)` of `x` (a scalar or `(n,)`) on a
    continuous grid, clipped: the two nodes around it, by linear interpolation."""
    assert isinstance(grid, AbstractContinuousGrid)
    points = grid.to_jax()
    if x.ndim == 0:
        lo, w = grid.interval(x, points)
    else:
        lo, w = jax.vmap(lambda v: grid.interval(v, points))(x)
    # Beyond the grid the mass stays at the end node (never extrapolated).
    w = jnp.clip(w, 0.0, 1.0)
    # A new last axis of two by broadcasting, not by stacking and reshaping: on a TPU
    # every reshape of a short last axis is a relayout (benchmarks/accelerator_layout.py).
    two = (*x.shape, 2)
    side = jax.lax.broadcasted_iota(jnp.int32, two, x.ndim)
    lo, w = widen(jnp.asarray(lo, jnp.int32), two), widen(w, two)
    return lo + side, jnp.where(side == 0, 1.0 - w, w)


def outer(
    dims: list[tuple[Array, Array | None]], batch: tuple[int, ...], dtype
) -> tuple[tuple[Array, ...], Array]:
    """All combinations of the per-dimension codes: each entry of `dims` is either an
    exact code `(codes (*batch), None)` or a spread `(codes (*batch, k), weights (*batch,
    k))`. Returns one code array per dimension, and the weights `(*batch, *ks)`, with one
    axis per spread dimension (the combinations are never flattened): an exact code keeps
    the shape `(*batch)` (it broadcasts from the leading axes), a spread one has the
    whole shape."""
    ks = tuple(c.shape[-1] for c, w in dims if w is not None)
    shape = (*batch, *ks)
    lead = tuple(range(len(batch)))
    codes: list[Array] = []
    weights = jnp.ones(shape, dtype)
    position = len(batch)
    for code, weight in dims:
        if weight is None:
            codes.append(jnp.asarray(code, jnp.int32))
            continue
        where = (*lead, position)
        codes.append(jax.lax.broadcast_in_dim(code.astype(jnp.int32), shape, where))
        weights = weights * jax.lax.broadcast_in_dim(weight.astype(dtype), shape, where)
        position += 1
    return tuple(codes), weights


def scatter(
    shape: tuple[int, ...],
    codes: tuple[Array, ...],
    blocks: Array,
    block_shape: tuple[int, ...] = (),
) -> Array:
    """Add `blocks` `(*batch, *block_shape)` at `codes` (one array per axis of `shape`,
    each `(*batch)` or a leading part of it): an array `shape + block_shape`.

    Each entry gets one code on the flat grid, and the sum is one scatter on a flat axis:
    the batch's many short axes (states, choices, combinations) are never flattened. An
    entry with a code outside its axis is dropped, as a scatter drops an index out of
    bounds.
    """
    n_batch = blocks.ndim - len(block_shape)
    if not shape:
        return jnp.sum(blocks, axis=tuple(range(n_batch)))
    batch = blocks.shape[:n_batch]
    size = math.prod(shape)
    flat = jnp.zeros(batch, jnp.int32)
    inside = jnp.ones(batch, bool)
    for code, n in zip(codes, shape, strict=True):
        code = widen(code, batch)
        flat = flat * n + code
        inside = inside & (code >= 0) & (code < n)
    flat = jnp.where(inside, flat, size)
    arrived = jnp.zeros((size, *block_shape), blocks.dtype).at[flat].add(blocks, mode="drop")
    return arrived.reshape(*shape, *block_shape)


def joint_states(sharding: ShardingPlan | None, regime, target) -> tuple[str, ...]:
    """Sharded states that never transition from `regime` and that `target` has: their
    mass stays at its own code, so it is pushed per code (on its own device)."""
    if sharding is None:
        return ()
    return tuple(
        s
        for s in regime.states
        if sharding.is_sharded(s) and s in target.states and is_identity_transition(regime, s)
    )


def dense_states(regime, target) -> tuple[str, ...]:
    """The states of `target` whose next value a flow from `regime` carries as a dense
    probability vector over their whole grid (Markov transitions, where no state is
    drawn): pushed as a block at each of the other states' indices, in `target`'s order
    of states. Process states (`chained_states`) apart."""
    if regime.drawn:
        return ()
    chained = chained_states(regime, target)
    return tuple(
        s
        for s in target.states
        if s not in chained
        and (
            regime.state_transitions[s].is_markov
            or target.name in regime.state_transitions[s].per_target_markov
        )
    )


def chained_states(regime, target) -> tuple[str, ...]:
    """The process states of `target` (an exogenous chain on the grid, no law of motion)
    that `regime` has, where no state is drawn: a flow pushes its mass at the current
    code, and the pushed array is moved along the chain afterwards, once for all nodes
    (`along_chain`), rather than a probability vector pushed from every node."""
    if regime.drawn:
        return ()
    return tuple(
        s
        for s in target.states
        if s in regime.states
        and isinstance(regime.grids[s], AbstractProcessGrid)
        and regime.state_transitions[s].is_markov
        and regime.state_transitions[s].function is None
        and target.name not in regime.state_transitions[s].per_target_markov
    )


def along_chain(array: Array, axis: int, matrix: Array) -> Array:
    """`array` with the mass along `axis` (current codes) moved by the transition
    `matrix` (current × next): a sum of products, exact on every device."""
    moved = jnp.moveaxis(array, axis, -1)
    moved = jnp.sum(moved[..., :, None] * matrix.astype(array.dtype), axis=-2)
    return jnp.moveaxis(moved, -1, axis)


def push(
    shape: tuple[int, ...],
    target_states: tuple[str, ...],
    source_states: tuple[str, ...],
    codes: tuple[Array, ...],
    moved: Array,
    joint: tuple[str, ...],
    dense: tuple[str, ...] = (),
) -> Array:
    """The mass `moved` `(*source states, ..., *dense states)` arriving on the target
    grid: at `codes` (one per target state that is not dense, in the target's order;
    each `(*source states, ...)` or a leading part of it), each entry a block along the
    `dense` states (one scatter of blocks rather than of every combination).

    The `joint` states keep their code: the scatter is mapped over their axes (sliced
    alike in source and target), so a sharded one needs no communication.
    """
    sparse = tuple(s for s in target_states if s not in dense)
    size = dict(zip(target_states, shape, strict=True))
    block_shape = tuple(size[s] for s in dense)
    code_of = dict(zip(sparse, codes, strict=True))
    if joint:
        source_axes = [source_states.index(s) for s in joint]
        front = list(range(len(joint)))
        moved = jnp.moveaxis(moved, source_axes, front)
        # Every code has the source's state axes (a map over them gives them).
        code_of = {
            s: jnp.moveaxis(c, source_axes, front) for s, c in code_of.items() if s not in joint
        }
    kept_states = tuple(s for s in sparse if s not in joint)

    def in_blocks(kept_codes, blocks):
        return scatter(tuple(size[s] for s in kept_states), kept_codes, blocks, block_shape)

    for _ in joint:
        in_blocks = jax.vmap(in_blocks)
    arrived = in_blocks(tuple(code_of[s] for s in kept_states), moved)
    names = (*joint, *kept_states, *dense)
    if names == target_states:
        return arrived
    return jnp.transpose(arrived, [names.index(s) for s in target_states])
