"""Labels for periods: ages."""

from __future__ import annotations

import math

import equinox as eqx

from .._errors import GridInitializationError


class AgeGrid(eqx.Module):
    """Labels period t with age `start + step * t`; provides the `age` argument.

    Example:
        >>> ages = AgeGrid(start=40, step=10)   # periods 0, 1, 2 are ages 40, 50, 60
    """

    start: int | float = eqx.field(static=True)
    step: int | float = eqx.field(static=True, default=1)

    def __check_init__(self):
        for name in ("start", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise GridInitializationError(f"AgeGrid: {name} must be a number, got {value!r}.")
            if not math.isfinite(value):
                raise GridInitializationError(f"AgeGrid: {name} must be finite, got {value}.")
        if not self.step > 0:
            raise GridInitializationError(f"AgeGrid: step must be > 0, got {self.step}.")

    def age(self, period):
        """The age in `period` (works on traced periods too)."""
        return self.start + self.step * period
