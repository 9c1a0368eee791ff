"""DC-EGM's groups of regimes of equal structure within one pass over rows (which
regimes form them: `_groups.member_parts`): the name of the map over their members, and
how their rows are put back in the order of the regimes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

# The name of the `vmap` axis over a group's members: a decision taken once for the
# whole period (Newton's early exit, `invert_marginals`) is reduced along it, so that it
# stays a branch taken at run time rather than a selection of both branches.
MEMBERS = "dcegm_members"


def in_order(pieces: list[tuple[list[int], dict[str, Array]]], sizes: list[int]):
    """The rows of each part (`pieces`: the indices of its regimes and their rows, one
    regime's after the other) in the order of the regimes (`sizes`: each one's rows)."""
    order = [i for indices, _ in pieces for i in indices]
    if order == list(range(len(sizes))):
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *(rows for _, rows in pieces))
    by_regime: dict[int, dict[str, Array]] = {}
    for indices, rows in pieces:
        offsets = np.cumsum([0, *(sizes[i] for i in indices)])
        for j, i in enumerate(indices):
            by_regime[i] = jax.tree.map(lambda x, j=j: x[offsets[j] : offsets[j + 1]], rows)
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *(by_regime[i] for i in range(len(sizes))))


def rows_of(rows: dict[str, Array], offsets, indices: list[int]) -> dict[str, Array]:
    """The rows of the regimes `indices` (`offsets`: where each regime's rows start,
    and the end), one regime's after the other: one slice where they are consecutive."""
    if indices == list(range(indices[0], indices[-1] + 1)):
        start, stop = offsets[indices[0]], offsets[indices[-1] + 1]
        return jax.tree.map(lambda x: x[start:stop], rows)
    return jax.tree.map(
        lambda x: jnp.concatenate([x[offsets[i] : offsets[i + 1]] for i in indices]), rows
    )
