"""The result of a solve: value arrays by regime and period."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from .._errors import InvalidPeriodError, InvalidRegimeError
from .._persistence import save
from .._typing import FilePath
from .._validation import first_failures


class Solution(eqx.Module):
    """Value arrays of every regime in every period, as returned by `Model.solve`.

    `values[regime]` has shape `(n_periods, *state_shape)`, one axis per state in
    declaration order; periods in which the regime is inactive hold `-inf`.
    `policies[regime]` holds, for regimes solved by `DCEGM`, the choice-specific
    consumption and value functions on their endogenous grids.
    `exponential_values[regime]` holds, for regimes with `aggregator=PresentBias(...)`,
    the exponentially discounted value `W` (same shape as `values`), which is what
    earlier periods read as the continuation; `values` holds the decision value.
    `grids[regime][state]` holds, for each state grid whose bounds vary with age, its
    points in every period, `(n_periods, n_points)`: period t's values are on row t.
    `violations[regime]` has shape `(n_periods, n_checks)`: how far each check named in
    `checks[regime]` was from valid (0 when valid; the transition checks, and
    `"value:nan"`, 1 when that period's value array has a NaN). Without validation it has
    no checks. `solution.save(path)`
    writes it to a file; `lcm.load_solution(path, model)` reads it back.

    Example:
        >>> solution = model.solve(params)
        >>> solution.value("working", 0).shape
        (100,)
    """

    values: dict[str, Float[Array, "n_periods ..."]]
    violations: dict[str, Float[Array, "n_periods n_checks"]]
    checks: dict[str, tuple[str, ...]] = eqx.field(static=True)
    active: dict[str, tuple[int, ...]] = eqx.field(static=True)
    state_names: dict[str, tuple[str, ...]] = eqx.field(static=True)
    # What endogenous-grid solvers keep per regime and period (`EndogenousGrid`s with a
    # leading period axis), read by the simulation and the likelihoods; empty otherwise.
    policies: dict[str, Any] = eqx.field(default_factory=dict)
    exponential_values: dict[str, Float[Array, "n_periods ..."]] = eqx.field(default_factory=dict)
    # The points of every period, `(n_periods, n_points)`, of each state grid whose bounds
    # vary with age, by regime and state (empty when no grid varies): value arrays of
    # period t are on the points of period t.
    grids: dict[str, dict[str, Any]] = eqx.field(default_factory=dict)
    # Canonical JSON of the structure of the model that produced it (set by Model.solve),
    # written into saved files so that loading can check the model it is loaded into.
    model_structure: str | None = eqx.field(static=True, default=None, repr=False)

    @property
    def continuation_values(self) -> dict[str, Float[Array, "n_periods ..."]]:
        """The value arrays earlier periods read as the continuation: `values`, with
        `exponential_values` in place for the present-biased regimes."""
        return {**self.values, **self.exponential_values}

    @property
    def n_periods(self) -> int:
        return next(iter(self.values.values())).shape[0]

    def save(self, path: FilePath) -> None:
        """Write the solution to the file `path` (atomically: a crash leaves the old file).

        Arrays round-trip bit-exactly. Load it with `lcm.load_solution(path, model)`.

        Example:
            >>> solution.save("retirement.lcm")
            >>> solution = lcm.load_solution("retirement.lcm", model)
        """
        save(self, path)

    def value(self, regime: str, period: int) -> Float[Array, "..."]:
        """The value array of `regime` in `period` (axes = its states in declaration order)."""
        if regime not in self.values:
            raise InvalidRegimeError(
                f"Unknown regime {regime!r}; the model's regimes are {list(self.values)}."
            )
        if isinstance(period, bool) or not isinstance(period, int | np.integer):
            raise InvalidPeriodError(f"Regime {regime!r}: period must be an int, got {period!r}.")
        period = int(period)
        if not 0 <= period < self.n_periods:
            raise InvalidPeriodError(
                f"Regime {regime!r}: period {period} is outside 0..{self.n_periods - 1}."
            )
        if period not in self.active[regime]:
            raise InvalidPeriodError(
                f"Regime {regime!r} is not active in period {period} (active periods: "
                f"{list(self.active[regime])})."
            )
        return self.values[regime][period]

    def first_violation(self, tolerance: float = 0.0) -> tuple[str, int, str, float] | None:
        """The first (regime, period, check, size) whose check failed, if any.

        A failed transition check comes first (its earliest period); then a NaN in a value
        array (check `"value:nan"`, in the latest period that has one, where it appears).
        """
        violations = {r: np.asarray(v) - tolerance for r, v in self.violations.items()}
        failures = first_failures(violations, self.checks)
        if not failures:
            return None
        found = failures[0]
        return found.regime, found.period, found.check, found.size + tolerance
