"""Stochastic transitions and taste shocks: small markers around user functions."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx

from .._errors import ModelInitializationError


class MarkovTransition(eqx.Module):
    """Marks a transition function as stochastic.

    `fn` returns a probability vector: over the target grid's points when used in
    `state_transitions`, over all regimes (ordered by `regime_ids`) when used as a
    regime's `transition`. Its arguments are resolved by name like any user function.

    Example:
        >>> next_health = MarkovTransition(lambda health, transition: transition[health])
    """

    fn: Callable = eqx.field(static=True)

    def __check_init__(self):
        if not callable(self.fn):
            raise ModelInitializationError(
                f"MarkovTransition: fn must be callable, got {self.fn!r}."
            )


class ExtremeValueShocks(eqx.Module):
    """Additive i.i.d. extreme-value type 1 (Gumbel) taste shocks on the discrete actions.

    The scale is the parameter `taste_shock_scale` (looked up at `params[regime]` or
    `params`). The solve takes `scale * logsumexp(v_d / scale)` over the discrete
    actions, where `v_d` is the best value over the continuous actions; simulation adds
    `scale` times standard Gumbel draws to `v_d` before choosing.

    Example:
        >>> Regime(..., taste_shocks=ExtremeValueShocks())
    """
