"""Labels for periods: ages."""

from __future__ import annotations

import math
import re

import equinox as eqx

from .._errors import GridInitializationError

# Step strings: an optional count and a unit, e.g. "Y", "2Y", "Q", "3M".
_PER_YEAR = {"Y": 1, "Q": 4, "M": 12}
_STEP_STRING = re.compile(r"(\d*)([YQM])", re.IGNORECASE)


class AgeGrid(eqx.Module):
    """Labels period t with age `start + step * t`; provides the `age` argument.

    Args:
        start: the age in period 0.
        stop: the age in the last period (inclusive), or `None`. With it, the grid knows
            the horizon (`n_periods`) and `Model` needs no `n_periods`.
        step: the age increment per period: a number of years, or a string of an
            optional count and a unit, `"Y"` (years), `"Q"` (quarters), `"M"` (months),
            e.g. `"2Y"` or `"3M"`.

    Example:
        >>> ages = AgeGrid(start=40, step=10)   # periods 0, 1, 2 are ages 40, 50, 60
        >>> ages = AgeGrid(start=40, stop=60, step="10Y")   # the same, 3 periods
    """

    start: int | float = eqx.field(static=True)
    stop: int | float | None = eqx.field(static=True)
    step: int | float = eqx.field(static=True)

    def __init__(self, start, stop=None, step=1):
        self.start = start
        self.stop = stop
        self.step = _parse_step(step)

    def __check_init__(self):
        for name in ("start", "step", "stop"):
            value = getattr(self, name)
            if name == "stop" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise GridInitializationError(f"AgeGrid: {name} must be a number, got {value!r}.")
            if not math.isfinite(value):
                raise GridInitializationError(f"AgeGrid: {name} must be finite, got {value}.")
        if not self.step > 0:
            raise GridInitializationError(f"AgeGrid: step must be > 0, got {self.step}.")
        if self.stop is not None:
            if self.stop < self.start:
                raise GridInitializationError(
                    f"AgeGrid: stop ({self.stop}) must be >= start ({self.start})."
                )
            steps = (self.stop - self.start) / self.step
            if abs(steps - round(steps)) > 1e-9 * max(1.0, abs(steps)):
                raise GridInitializationError(
                    f"AgeGrid: stop - start ({self.stop} - {self.start}) must be a whole "
                    f"number of steps of {self.step:g}."
                )

    @property
    def n_periods(self) -> int | None:
        """The number of periods from `start` to `stop` (None without `stop`)."""
        if self.stop is None:
            return None
        return round((self.stop - self.start) / self.step) + 1

    def age(self, period):
        """The age in `period` (works on traced periods too)."""
        return self.start + self.step * period

    def period(self, age) -> int:
        """The period whose age is `age` (a number); raises if no period has that age."""
        steps = (age - self.start) / self.step
        period = round(steps)
        if abs(steps - period) > 1e-9 * max(1.0, abs(steps)) or period < 0:
            raise ValueError(
                f"age {age} is not on the age grid (start {self.start}, step {self.step:g})"
            )
        return period


def age_of(ages: AgeGrid | None, period):
    """The age of `period` (an int or an array of them), or the period itself when the
    model has no `AgeGrid`: what a user function's `age` argument receives."""
    return period if ages is None else ages.age(period)


def _parse_step(step):
    if not isinstance(step, str):
        return step
    match = _STEP_STRING.fullmatch(step.strip())
    if match is None:
        raise GridInitializationError(
            f"AgeGrid: step {step!r} is not a number or a step string such as 'Y', '2Y', "
            "'Q' or 'M' (an optional count and a unit: Y years, Q quarters, M months)."
        )
    count = int(match.group(1)) if match.group(1) else 1
    if count == 0:
        raise GridInitializationError(f"AgeGrid: step must be > 0, got {step!r}.")
    per_year = _PER_YEAR[match.group(2).upper()]
    return count if per_year == 1 else count / per_year
