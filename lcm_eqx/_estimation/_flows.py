"""How the exact distribution moves mass between grids (`_distribution.forward`): a
flow's next states as indices and weights on the target grid, scattered there; Markov
states as dense blocks, process states along their chain once per period.

A flow from one node and discrete choice lists, for each combination `K` of the target's
sparse states (deterministic or interpolated next values), their indices and weight;
Markov states whose probabilities the choice moves travel as a dense block at each of
them (`dense_states`), and process states (an exogenous chain) at the current code, the
pushed array then moved along the chain (`chained_states`, `along_chain`). On reduced
Mahler–Yum that is 4 indices and a block of 2 per node and choice where every
combination (200 indices of 9 codes) was once its own scatter index.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._grids import AbstractContinuousGrid, AbstractProcessGrid
from .._solve._sharding import ShardingPlan, is_identity_transition


def interpolation(grid, x: Array) -> tuple[Array, Array]:
    """Indices `(..., 2)` and weights `(..., 2)` of `x` on a continuous grid, clipped."""
    assert isinstance(grid, AbstractContinuousGrid)
    points = grid.to_jax()
    lo, w = jax.vmap(lambda v: grid.interval(v, points))(x.reshape(-1))
    # Beyond the grid the mass stays at the end node (never extrapolated).
    w = jnp.clip(w, 0.0, 1.0)
    indices = jnp.stack([lo, lo + 1], axis=-1).reshape((*x.shape, 2))
    weights = jnp.stack([1.0 - w, w], axis=-1).reshape((*x.shape, 2))
    return indices.astype(jnp.int32), weights


def outer(dims: list[tuple[Array, Array]], n: int, dtype) -> tuple[Array, Array]:
    """Per-dimension (indices, weights) `(n, k_i)` → all combinations `(n, K, n_dims)`."""
    indices = jnp.zeros((n, 1, 0), jnp.int32)
    weights = jnp.ones((n, 1), dtype)
    for index, weight in dims:
        k, big_k = index.shape[1], indices.shape[1]
        indices = jnp.concatenate(
            [
                jnp.repeat(indices, k, axis=1),
                jnp.tile(index, (1, big_k))[..., None],
            ],
            axis=-1,
        )
        weights = (weights[:, :, None] * weight[:, None, :]).reshape(n, big_k * k)
    return indices, weights


def scatter(shape: tuple[int, ...], indices: Array, weights: Array) -> Array:
    """Add `weights` (any shape) at `indices` (that shape, then one axis of state codes)."""
    if not shape:
        return jnp.sum(weights)
    flat = indices.reshape(-1, len(shape))
    return (
        jnp.zeros(shape, weights.dtype)
        .at[tuple(flat[:, i] for i in range(len(shape)))]
        .add(weights.reshape(-1))
    )


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
    indices: Array,
    moved: Array,
    joint: tuple[str, ...],
    dense: tuple[str, ...] = (),
) -> Array:
    """The mass `moved` `(*source states, ..., K, *dense states)` arriving on the target
    grid: at `indices` `(*source states, ..., K, sparse states)` along the target's other
    (sparse) states, each a block along the `dense` ones (one scatter of `K` blocks
    rather than of every combination).

    The `joint` states keep their code: the scatter is mapped over their axes (sliced
    alike in source and target), so a sharded one needs no communication.
    """
    sparse = tuple(s for s in target_states if s not in dense)
    size = dict(zip(target_states, shape, strict=True))
    n_dense = len(dense)
    if joint:
        source_axes = [source_states.index(s) for s in joint]
        front = list(range(len(joint)))
        moved = jnp.moveaxis(moved, source_axes, front)
        indices = jnp.moveaxis(indices, source_axes, front)
        kept = [i for i, s in enumerate(sparse) if s not in joint]
        indices = indices[..., jnp.asarray(kept, dtype=jnp.int32)]
    kept_states = tuple(s for s in sparse if s not in joint)

    if not (joint or n_dense):
        return scatter(shape, indices, moved)

    def in_blocks(index, weight):
        return scatter_blocks(
            tuple(size[s] for s in kept_states), index, weight, tuple(size[s] for s in dense)
        )

    for _ in joint:
        in_blocks = jax.vmap(in_blocks)
    arrived = in_blocks(indices, moved)
    names = (*joint, *kept_states, *dense)
    return jnp.transpose(arrived, [names.index(s) for s in target_states])


def scatter_blocks(
    shape: tuple[int, ...], indices: Array, blocks: Array, block_shape: tuple[int, ...]
) -> Array:
    """Add `blocks` `(..., *block_shape)` at `indices` `(..., len(shape))`: an array of
    `shape + block_shape`."""
    flat = blocks.reshape((-1, *block_shape))
    if not shape:
        return jnp.sum(flat, axis=0)
    index = indices.reshape(-1, len(shape))
    return (
        jnp.zeros((*shape, *block_shape), blocks.dtype)
        .at[tuple(index[:, i] for i in range(len(shape)))]
        .add(flat)
    )
