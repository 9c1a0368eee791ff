"""Preference aggregators: how a regime combines this period's utility with the future.

Without an aggregator a regime is additive, `u + β·E[V']`. An aggregator replaces that
combination; the engine asks it for three things, all cheap:

- `prepare`: a transform of each next regime's value array, once per period on the
  small carried arrays (never per state-action point), before the engine's linear
  expectation (weights × values) reads it;
- `combine`: at one point, this period's utility and the expectation of the prepared
  arrays → the point's value (and, for aggregators that carry a second value array,
  that one too);
- `best`: the reduction over an action axis (the max, or the carried value at the
  action that maximises the decision value).

Specs are data: an aggregator holds no parameter values. Its parameters are regime-level
parameters looked up like `discount_factor` (`params[regime]` or `params`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar, Literal, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from .._errors import ModelInitializationError
from .._solve._continuation import discounted
from .._solve._reduce import max_along

NEG_INF = -jnp.inf


class Continuation(NamedTuple):
    """The expectation of the prepared next-period arrays at one point, by kind of target.

    `alive_sum`: `Σ P(r')·E[prepared V_r']` over the non-terminal regimes reached;
    `alive_mass`: their total probability; `terminal_sum`: the same sum over the
    terminal regimes reached. A `-inf` sum means that a node with positive weight is
    infeasible.
    """

    alive_sum: Array
    alive_mass: Array
    terminal_sum: Array


def _power(value: Array, exponent: Array) -> Array:
    """`value ** exponent` for a positive `value`; `0 → 0`, `-inf → -inf`, negative → NaN.

    Written so that neither the value nor its derivative is NaN where `value` is not
    positive (the branches not taken see a safe base of 1).
    """
    positive = value > 0
    safe = jnp.where(positive, value, 1.0)
    powered = safe**exponent
    other = jnp.where(value == 0, 0.0, jnp.where(jnp.isneginf(value), NEG_INF, jnp.nan))
    return jnp.where(positive, powered, other)


class AbstractCertaintyEquivalent(eqx.Module):
    """How a risky next-period value is reduced to a sure one: `f⁻¹(E[f(V')])`.

    `transform` is `f`, applied once per period to the next value arrays (the engine's
    expectation is linear in them); `invert` is `f⁻¹`, applied per point to the
    expectation. `parameters` names the regime-level parameters they read.
    """

    parameters: ClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def transform(self, values: Array, params: dict[str, Array]) -> Array:
        """`f(V')` of a next-period value array (`-inf`, infeasible, stays `-inf`)."""

    @abc.abstractmethod
    def invert(self, mean: Array, params: dict[str, Array]) -> Array:
        """`f⁻¹` of an expectation of transformed values (positive)."""

    def violations(self, params: dict[str, Array]) -> dict[str, Array]:
        """Per-period checks of the parameter values, by parameter name (0 when valid)."""
        return {}


class PowerMean(AbstractCertaintyEquivalent):
    """The power certainty equivalent `(E[V'^(1−γ)])^(1/(1−γ))` of Epstein–Zin.

    `γ` is the parameter `risk_aversion` (positive, `γ ≠ 1`).

    Example:
        >>> lcm.EpsteinZin(certainty_equivalent=lcm.PowerMean())
    """

    parameters: ClassVar[tuple[str, ...]] = ("risk_aversion",)

    def transform(self, values, params):
        return _power(values, 1.0 - params["risk_aversion"])

    def invert(self, mean, params):
        return jnp.maximum(mean, jnp.finfo(mean.dtype).tiny) ** (
            1.0 / (1.0 - params["risk_aversion"])
        )

    def violations(self, params):
        gamma = params["risk_aversion"]
        return {"risk_aversion": jnp.where((gamma > 0) & (gamma != 1), 0.0, 1.0)}


class LinearExpectation(AbstractCertaintyEquivalent):
    """The linear certainty equivalent `E[V']`: risk neutral in the value's own units.

    With `EpsteinZin` this is the CES time aggregator over the expected next value,
    `V = ((1−β)·u^(1−1/ψ) + β·E[V']^(1−1/ψ))^(1/(1−1/ψ))` (pylcm's
    `certainty_equivalent=None`). It reads no parameter (no `risk_aversion`).

    Example:
        >>> lcm.EpsteinZin(certainty_equivalent=lcm.LinearExpectation())
    """

    parameters: ClassVar[tuple[str, ...]] = ()

    def transform(self, values, params):
        return values

    def invert(self, mean, params):
        return jnp.maximum(mean, jnp.finfo(mean.dtype).tiny)


class AbstractAggregator(eqx.Module):
    """How a regime aggregates this period's utility with the continuation.

    Without an aggregator (`Regime(aggregator=None)`) a regime is additive,
    `u + β·E[V']`. Subclasses provide:

    - `parameters`: the regime-level parameters they read (besides `discount_factor`);
    - `prepare(values, params, terminal=..., has_future=...)`: the transform of a next
      regime's value array, once per period;
    - `combine(utility, continuation, params, has_future)`: the value(s) of one point;
    - `n_values`: 1, or 2 for aggregators that carry a second value array from period
      to period (then `combine` returns `(decision value, carried value)` and `best`
      reduces the pair over an action axis);
    - `violations(params)`: per-period checks of the parameter values.

    Aggregators work with `GridSearch`; taste shocks and `DCEGM` are not supported.
    """

    n_values: ClassVar[int]
    splits_terminal: ClassVar[bool]
    positive_utility: ClassVar[bool]

    @property
    @abc.abstractmethod
    def parameters(self) -> tuple[str, ...]:
        """The regime-level parameters the aggregator reads, besides `discount_factor`."""

    @abc.abstractmethod
    def prepare(
        self, values: Array, params: dict[str, Array], *, terminal: bool, has_future: Array
    ) -> Array:
        """The next-period value array of one target regime, as the expectation reads it.

        `has_future` is False in the last period (the carried arrays are then `V_T ≡ 0`).
        """

    @abc.abstractmethod
    def combine(
        self,
        utility: Array,
        continuation: Array | Continuation,
        params: dict[str, Array],
        has_future: Array,
    ) -> tuple[Array, ...]:
        """The value(s) of one state-action point.

        `continuation` is the expectation of the prepared arrays: a `Continuation` when
        `splits_terminal`, else one scalar. `has_future` is False in the last period,
        where the continuation is absent.
        """

    def node_transform(
        self, params: dict[str, Array], *, terminal: bool
    ) -> Callable[[Array], Array] | None:
        """A transform the kernel applies to each interpolated next value, before any
        expectation (then `prepare` leaves the arrays untransformed); None by default:
        the engine's expectation is linear in the prepared arrays."""
        return None

    @property
    def value_checks(self) -> tuple[str, ...]:
        """The checks of next period's value arrays (`value:<kind>`) beyond `value:range`."""
        return ()

    def value_violations(
        self, values: Array, params: dict[str, Array], *, terminal: bool, has_future: Array
    ) -> dict[str, Array]:
        """The `value_checks` of one target regime's value array (0 when valid)."""
        return {}

    def best(self, values: tuple[Array, ...]) -> tuple[Array, ...]:
        """Reduce the values over the leading (action) axis: the max by default."""
        return tuple(max_along(v, 0) for v in values)

    def violations(self, params: dict[str, Array]) -> dict[str, Array]:
        """Per-period checks of the parameter values, by parameter name (0 when valid)."""
        return {}

    def check(self, regime: str, *, terminal: bool, taste_shocks: bool) -> None:
        """Raise `ModelInitializationError` for a regime the aggregator cannot solve."""
        name = type(self).__name__
        if terminal:
            raise ModelInitializationError(
                f"Regime {regime!r}: aggregator {name} on a terminal regime (transition=None); "
                "a terminal regime has no continuation to aggregate, its value is its "
                "utility. Remove the aggregator there."
            )
        if taste_shocks:
            raise ModelInitializationError(
                f"Regime {regime!r}: aggregator {name} together with taste_shocks is not "
                "supported; remove one of them."
            )


class EpsteinZin(AbstractAggregator):
    """Epstein–Zin preferences: risk aversion separate from intertemporal substitution.

    `V = ((1−β)·u^(1−1/ψ) + β·CE^(1−1/ψ))^(1/(1−1/ψ))` with `CE = (E[V'^(1−γ)])^(1/(1−γ))`,
    where `u` is the regime's `"utility"` (it must be positive, e.g. consumption), `β`
    the `discount_factor`, `γ` the parameter `risk_aversion` (`γ > 0`, `γ ≠ 1`) and `ψ`
    the parameter `eis` (`ψ > 0`, `ψ ≠ 1`).

    - **Last period**: there is no `CE` term: `V = (1−β)^(1/(1−1/ψ))·u`.
    - **Terminal regimes** (death, with a bequest or with utility 0), `terminal=`:
      - `"certainty_equivalent"` (the default; pylcm's and most of the recursive-utility
        literature's form: mortality risk is risk): the expectation in `CE` runs over
        every next regime, terminal ones included,
        `CE = (Σ_alive P(r')·E[V_r'^(1−γ)] + Σ_terminal P(r')·E[B_r'^(1−γ)])^(1/(1−γ))`
        with `B` the terminal regime's value. A terminal value must then be positive
        where `γ > 1` (`0^(1−γ)` is infinite: `CE = 0` whatever the survival
        probability); a value `≤ 0` on a terminal regime's grid is an error at `solve`.
      - `"time_aggregator"`: terminal regimes enter the time aggregator,
        `β·(P_alive·CE_alive^(1−1/ψ) + Σ_terminal P(r')·V_r'^(1−1/ψ))`, where `CE_alive`
        is the certainty equivalent conditional on reaching a non-terminal regime and
        `0^(1−1/ψ)` is read as 0. With zero-utility death this is survival discounting.
    - **Interpolation** on the continuous states, `interpolate=`:
      - `"transformed"` (the default): the next values are transformed once per period
        (`V'^(1−γ)`) and the transformed arrays are interpolated, so with `γ = 1/ψ` the
        model is exactly the additive CRRA model `c^(1−γ)/(1−γ)` after the monotone
        transform `V^(1−γ)/((1−β)(1−γ))`, interpolation included;
      - `"values"` (pylcm's): `V'` is interpolated and the interpolated value transformed
        at each node of the expectation (every expectation over a stochastic state then
        happens per state-action point, none once per period).
    - The regimes a non-terminal Epstein–Zin regime can reach are terminal or
      Epstein–Zin regimes themselves. Not with taste shocks or `DCEGM`.

    Args:
        certainty_equivalent: the certainty equivalent; `PowerMean()` by default,
            `LinearExpectation()` for `E[V']`.
        terminal: where terminal regimes enter: `"certainty_equivalent"` or
            `"time_aggregator"`.
        interpolate: what is interpolated: `"transformed"` values or `"values"`.

    Example:
        >>> alive = lcm.Regime(..., aggregator=lcm.EpsteinZin())
        >>> params = {"discount_factor": 0.95, "risk_aversion": 5.0, "eis": 0.5, ...}
        >>> pylcm = lcm.EpsteinZin(interpolate="values")  # pylcm's conventions
    """

    certainty_equivalent: AbstractCertaintyEquivalent = PowerMean()
    terminal: Literal["certainty_equivalent", "time_aggregator"] = eqx.field(
        static=True, default="certainty_equivalent"
    )
    interpolate: Literal["transformed", "values"] = eqx.field(static=True, default="transformed")
    n_values: ClassVar[int] = 1
    splits_terminal: ClassVar[bool] = True
    positive_utility: ClassVar[bool] = True

    def __check_init__(self):
        if not isinstance(self.certainty_equivalent, AbstractCertaintyEquivalent):
            raise ModelInitializationError(
                "EpsteinZin: certainty_equivalent must be an AbstractCertaintyEquivalent "
                "such as PowerMean() or LinearExpectation() (pylcm's None), got "
                f"{self.certainty_equivalent!r}."
            )
        if self.terminal not in ("certainty_equivalent", "time_aggregator"):
            raise ModelInitializationError(
                "EpsteinZin: terminal must be 'certainty_equivalent' or 'time_aggregator', "
                f"got {self.terminal!r}."
            )
        if self.interpolate not in ("transformed", "values"):
            raise ModelInitializationError(
                f"EpsteinZin: interpolate must be 'transformed' or 'values', got "
                f"{self.interpolate!r}."
            )

    @property
    def parameters(self) -> tuple[str, ...]:
        return (*self.certainty_equivalent.parameters, "eis")

    def _transform(self, values: Array, params: dict[str, Array], terminal: bool) -> Array:
        """`f(V)` of a next value: `V^(1−1/ψ)` for a terminal regime in the time
        aggregator, the certainty equivalent's transform otherwise."""
        if terminal and self.terminal == "time_aggregator":
            return _power(values, 1.0 - 1.0 / params["eis"])
        return self.certainty_equivalent.transform(values, params)

    def prepare(self, values, params, *, terminal, has_future):
        # In the last period the continuation is absent (`combine` drops it); a value of 1
        # keeps the transform finite there, and so its derivatives.
        values = jnp.where(has_future, values, 1.0)
        if self.interpolate == "values":
            return values
        return self._transform(values, params, terminal)

    def node_transform(self, params, *, terminal):
        if self.interpolate == "transformed":
            return None
        return lambda values: self._transform(values, params, terminal)

    @property
    def value_checks(self) -> tuple[str, ...]:
        return ("value:terminal",) if self.terminal == "certainty_equivalent" else ()

    def value_violations(self, values, params, *, terminal, has_future):
        if not terminal or self.terminal != "certainty_equivalent":
            return {}
        # A negative value has no power; 0 has an infinite one where the exponent is
        # negative (`γ > 1` under `PowerMean`). (LinearExpectation reads no parameter.)
        gamma = params.get("risk_aversion", 0.0)
        bad = (values < 0) | ((values == 0) & (gamma > 1))
        if isinstance(self.certainty_equivalent, LinearExpectation):
            bad = values < 0
        failed = jnp.any(jnp.isfinite(values) & bad) & has_future
        return {"value:terminal": failed.astype(values.dtype)}

    def combine(self, utility, continuation, params, has_future):
        assert isinstance(continuation, Continuation)
        beta = params["discount_factor"]
        rho = 1.0 - 1.0 / params["eis"]
        alive_sum, alive_mass, terminal_sum = continuation
        infeasible = jnp.isneginf(alive_sum) | jnp.isneginf(terminal_sum)
        if self.terminal == "certainty_equivalent":
            # Every regime in the one expectation (its probabilities sum to 1).
            mean = jnp.where(infeasible, 1.0, alive_sum + terminal_sum)
            equivalent = self.certainty_equivalent.invert(mean, params)
            future = jnp.where(infeasible, 0.0, equivalent**rho)
        else:
            reached = (alive_mass > 0) & ~infeasible
            mean = jnp.where(reached, alive_sum, 1.0) / jnp.where(reached, alive_mass, 1.0)
            equivalent = self.certainty_equivalent.invert(mean, params)
            future = jnp.where(reached, alive_mass * equivalent**rho, 0.0)
            future = future + jnp.where(infeasible, 0.0, terminal_sum)
        future = jnp.where(has_future, future, 0.0)
        safe_utility = jnp.where(utility > 0, utility, 1.0)
        value = ((1.0 - beta) * safe_utility**rho + beta * future) ** (1.0 / rho)
        value = jnp.where(utility > 0, value, jnp.nan)
        return (jnp.where(infeasible & has_future, NEG_INF, value),)

    def violations(self, params):
        psi = params["eis"]
        return {
            **self.certainty_equivalent.violations(params),
            "eis": jnp.where((psi > 0) & (psi != 1), 0.0, 1.0),
        }


class PresentBias(AbstractAggregator):
    """β–δ (quasi-hyperbolic) discounting: today's self discounts the future by `β·δ`.

    `β` is the parameter `present_bias` (`0 < β ≤ 1`), `δ` the regime's
    `discount_factor`. Each period's self chooses by `u + β·δ·E[W']`, where `W` is the
    exponentially discounted value of the future (`δ` only):

    - `kind="sophisticated"`: the agent knows its future selves are present-biased, so
      `W' = u + δ·E[W'']` at the action the next self actually chooses;
    - `kind="naive"`: the agent believes its future selves are exponential, so `W'`
      solves `W = max u + δ·E[W']`.

    Two value arrays are computed per period. `Solution.values` holds the decision value
    `V = max u + β·δ·E[W']` of each period's self; `Solution.exponential_values` holds
    `W`, which is what earlier periods read as the continuation. Simulation takes each
    self's present-biased decision. With `β = 1` both kinds are the exponential model.
    The regimes a present-biased regime can reach are terminal or have the same
    aggregator. Not with taste shocks or `DCEGM`.

    Args:
        kind: `"sophisticated"` or `"naive"`.

    Example:
        >>> alive = lcm.Regime(..., aggregator=lcm.PresentBias(kind="naive"))
        >>> params = {"discount_factor": 0.96, "present_bias": 0.7, ...}
    """

    kind: Literal["sophisticated", "naive"] = eqx.field(static=True, default="sophisticated")
    n_values: ClassVar[int] = 2
    splits_terminal: ClassVar[bool] = False
    positive_utility: ClassVar[bool] = False

    def __check_init__(self):
        if self.kind not in ("sophisticated", "naive"):
            raise ModelInitializationError(
                f"PresentBias: kind must be 'sophisticated' or 'naive', got {self.kind!r}."
            )

    @property
    def parameters(self) -> tuple[str, ...]:
        return ("present_bias",)

    def prepare(self, values, params, *, terminal, has_future):
        return values

    def combine(self, utility, continuation, params, has_future):
        delta = params["discount_factor"]
        beta = params["present_bias"]
        assert not isinstance(continuation, Continuation)
        return (
            utility + discounted(beta * delta, continuation),
            utility + discounted(delta, continuation),
        )

    def best(self, values):
        decision, exponential = values
        if self.kind == "naive":
            return max_along(decision, 0), max_along(exponential, 0)
        chosen = jnp.argmax(decision, axis=0)
        return (
            jnp.take_along_axis(decision, chosen[None], axis=0)[0],
            jnp.take_along_axis(exponential, chosen[None], axis=0)[0],
        )

    def violations(self, params):
        beta = params["present_bias"]
        return {"present_bias": jnp.where((beta > 0) & (beta <= 1), 0.0, 1.0)}
