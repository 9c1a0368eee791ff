"""The stationary population of a finite-horizon model: its cross-section at one date.

In a stationary overlapping-generations economy every period a new cohort is born,
`1 + n` times as large as the one born a period before, and each cohort lives through
the model's periods as `model.distribution` describes one cohort of unit size. At any
date the cohort in its period `t` was born `t` periods ago, so its size relative to the
newborns is `(1 + n)⁻ᵗ` times the mass of the distribution in period `t` (which holds
the survival up to `t`, as mass that moved to a terminal regime such as `dead`). The
cross-section at a date is every period of the distribution at once, period `t`
weighted by `(1 + n)⁻ᵗ`, normalised so that the living population has size 1: an
aggregate of it is per head of the living population.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import LcmError
from .._estimation._distribution import Distribution


class Population(eqx.Module):
    """The stationary cross-section of a model's population (every cohort at one date).

    The argument `population` of an `lcm.Equilibrium`'s aggregates. Period `t` of the
    exact distribution (`model.distribution`, one cohort of unit size) is weighted by
    `(1 + population_growth)⁻ᵗ`, the size of the cohort now in period `t` relative to
    the newborns, and the weights are normalised so that the living population (the
    regimes in `living`) has size 1. Every moment is differentiable in the parameters.

    Attributes:
        distribution: the distribution of one cohort over its life (`lcm.Distribution`).
        cohort_weights: `(n_periods,)`: `(1 + population_growth)⁻ᵗ`.
        living: the regimes whose mass is the living population.

    Example:
        >>> capital = population.per_capita("savings")  # savings per head
        >>> retirees = population.regime_share("retired")
    """

    distribution: Distribution
    cohort_weights: Float[Array, " n_periods"]
    living: tuple[str, ...] = eqx.field(static=True)

    @property
    def size(self) -> Float[Array, ""]:
        """The living population before normalisation: `Σ_t (1 + n)⁻ᵗ · mass_t`, per
        newborn."""
        return jnp.sum(self.cohort_weights * self._living_mass(None))

    @property
    def cohort_sizes(self) -> Float[Array, " n_periods"]:
        """The share of the living population in each period of life (sums to 1)."""
        weighted = self.cohort_weights * self._living_mass(None)
        return weighted / jnp.sum(weighted)

    def per_capita(
        self, x: str | Callable[..., Any], regime: str | None = None
    ) -> Float[Array, ""]:
        """The sum of `x` over the population, per head of the living population.

        Args:
            x: a state, action or scalar function of a regime by name, or a function of
                them by name (as for `Distribution.expect`). Living regimes without it
                add nothing (so `per_capita("labor_supply")` counts retirees as 0).
            regime: only this (living) regime.

        Returns:
            A scalar: `Σ_t ω_t Σ_nodes mass · x / Σ_t ω_t Σ_living mass` (`ω_t` the
            cohort weights).
        """
        return self._sum(x, regime) / self.size

    def mean(self, x: str | Callable[..., Any], regime: str | None = None) -> Float[Array, ""]:
        """The mean of `x` over the part of the population that has it (in `regime`, if
        given): e.g. the mean wealth of retirees with `regime="retired"`."""
        names = _argument_names(x)
        return self._sum(x, regime) / self._sum(_one(names), regime)

    def regime_share(self, regime: str) -> Float[Array, ""]:
        """The share of the living population in `regime`."""
        self._check_living(regime)
        weighted = self.cohort_weights * self._living_mass(regime)
        return jnp.sum(weighted) / self.size

    def _sum(self, x: str | Callable[..., Any], regime: str | None) -> Array:
        if regime is not None:
            self._check_living(regime)
        names = _argument_names(x)
        regimes = [regime] if regime is not None else self._having(names)
        if not regimes:
            raise LcmError(
                f"Population: {list(names)} are not all states, actions or functions of a "
                f"living regime ({list(self.living)})."
            )
        by_period = sum(
            (self.distribution.total(x, regime=r) for r in regimes),
            start=jnp.zeros_like(self.cohort_weights),
        )
        return jnp.sum(self.cohort_weights * by_period)

    def _living_mass(self, regime: str | None) -> Array:
        regimes = self.living if regime is None else (regime,)
        return sum(
            (self.distribution.total(regime=r) for r in regimes),
            start=jnp.zeros_like(self.cohort_weights),
        )

    def _having(self, names: tuple[str, ...]) -> list[str]:
        having = []
        for layout in self.distribution.layouts:
            known = (
                *layout.states,
                *layout.discrete_actions,
                *layout.continuous_actions,
                *layout.functions,
            )
            if layout.name in self.living and all(n in known for n in names):
                having.append(layout.name)
        return having

    def _check_living(self, regime: str) -> None:
        if regime not in self.living:
            raise LcmError(
                f"Population: {regime!r} is not a living regime; the living regimes are "
                f"{list(self.living)}."
            )


def _argument_names(x: str | Callable[..., Any]) -> tuple[str, ...]:
    if isinstance(x, str):
        return (x,)
    return tuple(inspect.signature(x).parameters)


def _one(names: tuple[str, ...]) -> Callable[..., Any]:
    """A function of `names` that is 1 everywhere (the mass that has them)."""

    def one(**kwargs):
        return jnp.ones_like(kwargs[names[0]], dtype=float) if names else 1.0

    one.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    )
    return one
