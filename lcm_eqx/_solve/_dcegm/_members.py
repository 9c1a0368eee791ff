"""DC-EGM's groups of regimes of equal structure within one pass over rows: which
regimes of a period are traced once and mapped over their stacked parameters
(`DCEGM.solve_batched`), and how their rows are put back in the order of the regimes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._groups import stacked_params, structure_groups
from .._kernel import RegimeProblem

# The name of the `vmap` axis over a group's members: a decision taken once for the
# whole period (Newton's early exit, `invert_marginals`) is reduced along it, so that it
# stays a branch taken at run time rather than a selection of both branches.
MEMBERS = "dcegm_members"

Part = tuple[list[int], tuple[Any, Any] | None]


def member_parts(problems: list[RegimeProblem]) -> list[Part]:
    """The indices of `problems` in parts: the regimes that have no structural twin
    among them (one part, solved together as rows; stacked None), and each group of
    equal structure whose parameters stack (the stacked parameters and their `vmap`
    axes, `stacked_params`)."""
    if len(problems) < 2:
        return [(list(range(len(problems))), None)]
    singles: list[int] = []
    groups: list[Part] = []
    for indices in structure_groups([p.regime for p in problems]):
        stacked = (
            stacked_params([problems[i].params for i in indices]) if len(indices) > 1 else None
        )
        if stacked is None or not _same_context(problems, indices):
            singles.extend(indices)
        else:
            groups.append((indices, stacked))
    return ([(sorted(singles), None)] if singles else []) + groups


def _same_context(problems: list[RegimeProblem], indices: list[int]) -> bool:
    """Whether the members' problems differ in nothing but their regime and parameters
    (the same period, checks and readers' targets), so that one member's problem with
    each member's parameters is each member's problem."""
    first = problems[indices[0]]
    return all(
        problems[i].validate == first.validate
        and problems[i].last_period == first.last_period
        and problems[i].period is first.period
        and problems[i].next_policies.keys() == first.next_policies.keys()
        for i in indices[1:]
    )


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
