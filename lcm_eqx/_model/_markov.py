"""Stochastic transitions and taste shocks: small markers around user functions."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp

from .._errors import ModelInitializationError


class MarkovTransition(eqx.Module):
    """Marks a transition function as stochastic.

    `fn` returns a probability vector: over the target grid's points when used in
    `state_transitions`, over all regimes (ordered by `regime_ids`) when used as a
    regime's `transition`. A regime's `transition` may instead return a dict from regime
    names to probabilities (regimes left out get 0), so that the order of `regime_ids`
    and of a vector can never disagree. Its arguments are resolved by name like any
    user function.

    Example:
        >>> next_health = MarkovTransition(lambda health, transition: transition[health])
        >>> next_regime = MarkovTransition(
        ...     lambda survival_prob: {"alive": survival_prob, "dead": 1 - survival_prob}
        ... )
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


def regime_vector(plan, regime, probabilities: dict):
    """A regime transition's `{regime name: probability}` as the vector over all regimes
    in the order of `regime_ids` (0 for the regimes left out)."""
    import difflib

    names = list(plan.regimes)
    if not regime.next_regime_is_markov:
        raise ModelInitializationError(
            f"Regime {regime.name!r}, function 'next_regime': returns a dict of "
            "probabilities by regime, which needs a stochastic transition: wrap the "
            "function in lcm.MarkovTransition (or return one regime id)."
        )
    for name in probabilities:
        if name not in plan.regimes:
            close = difflib.get_close_matches(str(name), names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ModelInitializationError(
                f"Regime {regime.name!r}, function 'next_regime': returns a probability for "
                f"{name!r}, which is not a regime (regimes: {names}).{hint}"
            )
    values = [jnp.asarray(p) for p in probabilities.values()]
    dtype = jnp.result_type(*values, float)
    zero = jnp.zeros((), dtype)
    for value in values:
        if value.shape != ():
            raise ModelInitializationError(
                f"Regime {regime.name!r}, function 'next_regime': each probability in the "
                f"dict it returns must be a scalar at one point, got shape {value.shape}."
            )
    return jnp.stack(
        [jnp.asarray(probabilities[n], dtype) if n in probabilities else zero for n in names]
    )
