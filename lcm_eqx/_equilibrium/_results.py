"""What `Equilibrium.solve` and `Equilibrium.calibrate` return: the prices or parameters
found, the aggregates there, and why Newton's method stopped."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import pandas as pd
from jaxtyping import Array, Bool, Int

from .._solve._solution import Solution
from . import _newton
from ._population import Population


class _AbstractNewtonOutcome(eqx.Module):
    """Where a Newton search stopped (`EquilibriumResult`, `Calibration`), and why."""

    steps: eqx.AbstractVar[Int[Array, ""]]
    converged: eqx.AbstractVar[Bool[Array, ""]]
    status: eqx.AbstractVar[Int[Array, ""]]

    @property
    def message(self) -> str:
        """Why Newton's method stopped, in words."""
        return _newton.STATUS_MESSAGES[int(self.status)]


class EquilibriumResult(_AbstractNewtonOutcome):
    """A stationary equilibrium (or the economy at given prices): `Equilibrium.solve`.

    Every array is differentiable in the parameters (`jax.grad`, `jax.jacfwd`): the
    prices by the implicit function theorem, the rest through the model at them.

    Attributes:
        prices: `{price: value}`.
        aggregates: `{aggregate: value}` at the prices.
        excess: `{clearing condition: value}` at the prices (0 in equilibrium).
        params: the parameters with the prices in place (for `model.solve`,
            `model.simulate`, ...; the equilibrium's own parameters included).
        population: the stationary cross-section at the prices (`lcm.Population`; its
            `distribution` holds one cohort's life).
        solution: the model's solution at the prices.
        steps: Newton steps taken.
        converged: whether every excess demand is within the tolerance.
        status: 0 if converged, else the reason Newton's method stopped (`message`).
    """

    prices: dict[str, Array]
    aggregates: dict[str, Array]
    excess: dict[str, Array]
    params: dict[str, Any]
    population: Population
    solution: Solution
    steps: Int[Array, ""]
    converged: Bool[Array, ""]
    status: Int[Array, ""]

    def summary(self) -> pd.DataFrame:
        """A table of the prices, aggregates and excess demands (`kind`, `value`)."""
        rows = [
            (kind, name, float(value))
            for kind, values in (
                ("price", self.prices),
                ("aggregate", self.aggregates),
                ("excess demand", self.excess),
            )
            for name, value in values.items()
        ]
        frame = pd.DataFrame(rows, columns=["kind", "name", "value"])
        return frame.set_index("name")


class Calibration(_AbstractNewtonOutcome):
    """Parameters at which the equilibrium reaches its targets: `Equilibrium.calibrate`.

    Attributes:
        params: the parameters, the free ones at their calibrated values.
        equilibrium: the `EquilibriumResult` at `params`.
        values: `{target: value}` reached (an aggregate or a price of the equilibrium).
        errors: `{target: value − target}`.
        steps: Newton steps taken on the free parameters.
        converged: whether every error is within the tolerance.
        status: 0 if converged, else the reason Newton's method stopped (`message`).
    """

    params: dict[str, Any]
    equilibrium: EquilibriumResult
    values: dict[str, Array]
    errors: dict[str, Array]
    steps: Int[Array, ""]
    converged: Bool[Array, ""]
    status: Int[Array, ""]
