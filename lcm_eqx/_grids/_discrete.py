"""Discrete grids: categories coded 0, 1, ..., n-1."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from .._errors import GridInitializationError
from ._base import AbstractGrid


class DiscreteGrid(AbstractGrid):
    """A grid of categories, coded 0, 1, ..., n-1.

    `categories` is an `IntEnum` class whose values are 0..n-1, or a sequence of labels.
    User functions see the integer code; data frames show the label.

    Example:
        >>> class Labor(IntEnum):
        ...     work = 0
        ...     retire = 1
        >>> labor = DiscreteGrid(Labor)
        >>> health = DiscreteGrid(["bad", "good"], distributed=True)
    """

    labels: tuple[str, ...] = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)
    is_discrete: ClassVar[bool] = True

    def __init__(
        self,
        categories: type[enum.Enum] | Sequence[object],
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.labels = _labels(categories)
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self.check_knobs()

    @property
    def n_points(self) -> int:
        return len(self.labels)

    def to_jax(self) -> Int[Array, " n"]:
        return jnp.arange(self.n_points, dtype=jnp.int32)

    def codes_of(self, labels: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The codes of `labels` (an array of labels, compared as strings) and the sorted
        labels that are not this grid's (their codes are -1): callers raise their own
        error, naming where the labels came from."""
        lookup = {label: i for i, label in enumerate(self.labels)}
        as_text = [str(v) for v in labels]
        bad = sorted({v for v in as_text if v not in lookup})
        return np.array([lookup.get(v, -1) for v in as_text], dtype=np.int32), bad


def _labels(categories: type[enum.Enum] | Sequence[object]) -> tuple[str, ...]:
    if isinstance(categories, type) and issubclass(categories, enum.Enum):
        members = list(categories)
        if not members:
            raise GridInitializationError(
                f"DiscreteGrid: the enum {categories.__name__} has no members; give at least one."
            )
        values = [m.value for m in members]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values) or sorted(
            values
        ) != list(range(len(values))):
            raise GridInitializationError(
                f"DiscreteGrid: the values of {categories.__name__} must be 0, 1, ..., "
                f"{len(values) - 1} (they are used as array indices), got {values}."
            )
        return tuple(m.name for m in sorted(members, key=lambda m: int(m.value)))
    if isinstance(categories, str) or not hasattr(categories, "__iter__"):
        raise GridInitializationError(
            "DiscreteGrid: categories must be an IntEnum class or a sequence of labels, "
            f"got {categories!r}."
        )
    labels = tuple(str(c) for c in categories)
    if not labels:
        raise GridInitializationError(
            "DiscreteGrid: categories is empty; give at least one category."
        )
    if len(set(labels)) != len(labels):
        raise GridInitializationError(
            f"DiscreteGrid: category labels must be unique, got {list(labels)}."
        )
    return labels
