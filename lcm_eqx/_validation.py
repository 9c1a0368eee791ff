"""Reporting failed validation checks: one table, one path, eager or traced.

The compiled solve (and simulation) reduces every check to a few numbers per regime,
period and check: `violations[regime]` of shape `(n_periods, n_checks)`, how far the
check named `checks[regime][i]` was from valid (0 when valid). Nothing larger leaves the
program. This module turns those flags into an `LcmError` or a warning:

- eagerly (the flags are concrete), on the host right after the call: the error is
  raised as itself;
- when the caller traces (`jax.jit`, `jax.grad`, `jax.vmap` from outside), with a host
  callback inside the caller's program that formats the same message from the flags
  and raises or warns there. A raise inside a compiled program reaches the caller as
  `jax.errors.JaxRuntimeError`, whose text holds the `LcmError` class name and message.

A check name is `"<function>"` or `"<function>:<kind>"`; `CHECKS` maps the kind to the
error class and the message. A new check is one entry there (and its computation).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Mapping

import jax
import jax.core  # jax.core.Tracer: a submodule that `import jax` does not declare
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jax.typing import ArrayLike

from ._errors import (
    InfeasibleStateError,
    InvalidInitialConditionsError,
    InvalidParamsError,
    InvalidTransitionProbabilitiesError,
    LcmError,
    LcmWarning,
    ModelInitializationError,
    NaNError,
)

NAN_CHECK = "value:nan"  # the check that a regime's value array has no NaN


class _SkipLcmErrors(logging.Filter):
    """JAX logs the traceback of an exception raised in a `jax.debug.callback` before
    re-raising it; for our own errors that repeats the message the caller gets."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, LcmError)


logging.getLogger("jax._src.debugging").addFilter(_SkipLcmErrors())


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failed check: where, which, and how far from valid."""

    regime: str
    period: int
    check: str
    size: float
    batch: tuple[int, ...] = ()  # the batch member under `jax.vmap` (empty otherwise)

    @property
    def function(self) -> str:
        return self.check.partition(":")[0]

    @property
    def kind(self) -> str:
        # `<function>:<kind>[:<detail>]`, e.g. `survival:index:'p' of shape (3,)`.
        return self.check.partition(":")[2].partition(":")[0]


@dataclasses.dataclass(frozen=True)
class CheckKind:
    """What a failed check of one kind raises, and its message."""

    error: type[LcmError]
    message: Callable[[Failure], str]


def _transition(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: invalid transition "
        f"(probabilities outside [0, 1], not summing to 1, or a discrete state code out of "
        f"range; violation {f.size:.3g}). Nothing is renormalised."
    )


def _unreachable(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function 'next_regime', period {f.period}: puts probability "
        f"{f.size:.3g} on regimes it cannot reach (their states are not all produced by "
        "this regime's state_transitions, or a per-target state transition names no law of "
        "motion into them)."
    )


def _inactive(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function 'next_regime', period {f.period}: puts probability "
        f"{f.size:.3g} on regimes that are inactive in period {f.period + 1} (see their "
        "`active` periods), and it depends on no action, so no choice avoids them. Give "
        f"them probability 0 in period {f.period} (e.g. survival 0 in the last active "
        "period) or keep them active. (Where the transition depends on an action, an "
        "action that leads into an inactive regime is never chosen, like one a "
        "constraint rules out.)"
    )


def _finite(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: returns NaN or an "
        "infinite value at a feasible state-action point, so next period's value cannot be "
        "interpolated there. Check the function and its parameters (points that a "
        "constraint rules out may return anything)."
    )


INFEASIBLE_CHECK = "constraints:infeasible"  # simulated subjects with no feasible action


def _infeasible(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, period {f.period}: {f.size:.0f} simulated subject(s) reached "
        "a state where no action is feasible (the constraints rule out every point of the "
        "action grids, or every feasible action leads only to such states); their "
        "continuous actions are NaN and their value -inf. " + INFEASIBLE_ADVICE
    )


INFEASIBLE_ADVICE = (
    "Start the action grids low enough (e.g. the consumption grid at or below the lowest "
    "wealth) or relax the constraints; with validate='warn' the simulation warns and "
    "carries on with these rows flagged (value -inf, continuous actions NaN)."
)


def _nan(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, period {f.period}: the value array contains NaN (the latest "
        "period with NaN, where it first appears). Call model.diagnose_nan(params) outside "
        "jax.jit to locate the function, state and action that produced it."
    )


def _savings(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: DCEGM needs the next "
        "value of its state to depend on the state and the action only through their "
        f"difference (savings), but it changes by {f.size:.3g} when both move by 1. Solve "
        "this regime with GridSearch() instead."
    )


def _kinks(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: DCEGM(kinks="
        "BudgetKinks(n_kinks)) needs the next value of its state piecewise affine in savings "
        "with at most n_kinks breakpoints at each node of the draw, but its slope changes "
        f"in {f.size:.0f} more intervals of the savings grid than that. Raise n_kinks to the "
        "number of breakpoints of the budget (a floor, each bracket's threshold), or, for a "
        "law of motion that is curved rather than kinked, drop kinks (DCEGM) or solve this "
        "regime with GridSearch()."
    )


def _limit(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, constraint {f.function!r}, period {f.period}: DCEGM takes the "
        "borrowing limit from the first point of its savings grid (or from the regime's "
        "function 'borrowing_limit'), but this constraint does not bind there (it forbids "
        "saving exactly that much, or allows saving less). Make savings[0] (or that "
        "function) the lowest savings the constraint allows."
    )


def _unbounded(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: the borrowing "
        "limit is not finite (inf or NaN) for some discrete state or action. DCEGM shifts "
        "its savings grid by this limit, so it needs a finite number; for no limit at all, "
        "give a finite limit low enough never to bind, or solve with GridSearch()."
    )


def _euler(f: Failure) -> str:
    action = f.check.partition(":")[2].partition(":")[2]
    return (
        f"Regime {f.regime!r}, function {f.function!r}, action {action!r}, period {f.period}: "
        f"DCEGM inverts the Euler equation u'({action}) = β·E[R·V'_m] at each savings point, "
        f"but at some no {action} > 0 solves it (u' misses by a relative {f.size:.3g}). The "
        f"marginal utility stays below what the equation asks as {action} falls to 0, so the "
        f"optimal {action} there is <= 0, outside DCEGM's class: it needs u'({action}) -> inf "
        f"as {action} -> 0 (log or CRRA utility). Solve this regime with GridSearch() and an "
        f"action grid that reaches the optimum. (With DCEGM(inverse_marginal_utility=...), "
        "check that function; with a utility Newton's method inverts slowly, raise "
        "newton_steps.)"
    )


def _inada(f: Failure) -> str:
    action = f.check.partition(":")[2].partition(":")[2]
    where = (
        f"Regime {f.regime!r}, function {f.function!r}, action {action!r}, period {f.period}: "
        f"outside DCEGM's class at {action} = 0: "
    )
    if f.size > 1:
        return where + (
            f"its marginal utility u'({action}) stays finite as {action} falls to 0, so the "
            f"optimal {action} may be <= 0, or saving more than the borrowing limit may be "
            f"optimal where DCEGM takes it as binding. DCEGM needs u'({action}) -> inf as "
            f"{action} -> 0 (log or CRRA utility); solve this regime with GridSearch() and an "
            "action grid that reaches the optimum."
        )
    return where + (
        f"its utility is finite at {action} = 0 (CRRA with risk aversion < 1), and the "
        "state grid reaches the borrowing limit savings[0], where DCEGM gives the value "
        "-inf (it needs u -> -inf as consumption falls to 0 there). Start the state grid "
        "above savings[0], or solve this regime with GridSearch()."
    )


def _index(f: Failure) -> str:
    detail = f.check.partition(":")[2].partition(":")[2]
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: indexes an array "
        f"out of bounds; its array parameters: {detail}. JAX would silently read the "
        "nearest element instead. Check the array's length against the periods (or codes) "
        "it is indexed with; to clamp on purpose, clip the index, e.g. "
        "`x[jnp.minimum(period, len(x) - 1)]`."
    )


# The valid range of each aggregator parameter, as the message states it.
_AGGREGATOR_RANGES = {
    "risk_aversion": "positive and != 1 (the power certainty equivalent needs 1 - γ != 0)",
    "eis": "positive and != 1 (the time aggregator needs 1 - 1/ψ != 0)",
    "present_bias": "in (0, 1]",
}


def _aggregator(f: Failure) -> str:
    aggregator = f.check.partition(":")[2].partition(":")[2]
    requirement = _AGGREGATOR_RANGES.get(f.function, "inside its valid range")
    return (
        f"Regime {f.regime!r}, aggregator {aggregator}, parameter {f.function!r}, period "
        f"{f.period}: must be {requirement}."
    )


def _positive(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: returns a value "
        "<= 0 at a feasible point, but the regime's aggregator (EpsteinZin) needs a positive "
        "utility (e.g. consumption itself, not its logarithm)."
    )


def _range(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, period {f.period}: the Epstein–Zin transform of next period's "
        "values (V'^(1-γ), and V'^(1-1/ψ) for terminal regimes) exceeds 1e30 in magnitude "
        "in float32 (1e150 in float64), where the solve can no longer tell it from an "
        "infeasible state. Solve in float64 (jax.config.update('jax_enable_x64', True)) or "
        "scale utility up (values near 0 with a large risk aversion overflow)."
    )


def _terminal(f: Failure) -> str:
    return (
        f"Regime {f.regime!r}, period {f.period}: a terminal regime it can move to has a "
        "value < 0 on its grid (or 0 with risk_aversion > 1), but "
        "EpsteinZin(terminal='certainty_equivalent') reads the terminal values inside the "
        "certainty equivalent, as V^(1-γ), which is then undefined or infinite (CE = 0 "
        "whatever the survival probability). Give the terminal regime a positive value on "
        "its whole grid (a bequest; a grid that starts above 0) or use "
        "EpsteinZin(terminal='time_aggregator'), where zero-utility death is survival "
        "discounting."
    )


def _beyond(f: Failure) -> str:
    liquid, _, stock = f.check.partition(":")[2].partition(":")[2].partition(":")
    return (
        f"Regime {f.regime!r}, function {f.function!r}, period {f.period}: NEGM's adjuster "
        f"reads the keeper's solution beyond the top of the liquid grid {liquid!r}: at some "
        f"nodes of the resources grid, total resources x less the chosen new stock "
        f"{stock!r} exceed the liquid grid's last point by up to {f.size:.3g}. The keeper "
        "is solved on the liquid grid only and extrapolated linearly beyond it, so the "
        f"adjuster's choice of {stock!r} and its value there can be far off (no error "
        f"bound). Extend the liquid grid {liquid!r} to at least the top of the resources "
        "grid (less the least stock an adjuster chooses there), or end the resources grid "
        "lower."
    )


CHECKS: dict[str, CheckKind] = {
    "": CheckKind(InvalidTransitionProbabilitiesError, _transition),
    "unreachable": CheckKind(InvalidTransitionProbabilitiesError, _unreachable),
    "inactive": CheckKind(InvalidTransitionProbabilitiesError, _inactive),
    "finite": CheckKind(NaNError, _finite),
    "nan": CheckKind(NaNError, _nan),
    "infeasible": CheckKind(InfeasibleStateError, _infeasible),  # a simulated subject
    "savings": CheckKind(ModelInitializationError, _savings),  # DCEGM's law of motion
    "limit": CheckKind(ModelInitializationError, _limit),  # DCEGM's borrowing limit
    "kinks": CheckKind(ModelInitializationError, _kinks),  # DCEGM's declared budget kinks
    "unbounded": CheckKind(ModelInitializationError, _unbounded),  # its limit function
    "euler": CheckKind(ModelInitializationError, _euler),  # DCEGM's Euler inversion
    "inada": CheckKind(ModelInitializationError, _inada),  # DCEGM's utility at 0
    "beyond": CheckKind(ModelInitializationError, _beyond),  # NEGM's adjuster's read
    "index": CheckKind(InvalidParamsError, _index),  # a parameter array read out of bounds
    "aggregator": CheckKind(InvalidParamsError, _aggregator),  # an aggregator parameter
    "positive": CheckKind(ModelInitializationError, _positive),  # utility under EpsteinZin
    "range": CheckKind(NaNError, _range),  # transformed values under EpsteinZin
    "terminal": CheckKind(ModelInitializationError, _terminal),  # death inside EZ's CE
    # A check whose message is fixed when it is traced (passed to `enforce` as `texts`).
    "initial": CheckKind(InvalidInitialConditionsError, lambda f: f.check),
}


def first_failures(
    violations: Mapping[str, ArrayLike], checks: Mapping[str, tuple[str, ...]]
) -> list[Failure]:
    """The failures to report, most important first (at most two).

    The first failed transition check (earliest period; then regime and check order),
    then the first NaN in a value array: NaN propagates backwards through the periods,
    so it first appears in the *latest* period that has one. `violations[regime]` may
    carry leading batch axes (under `jax.vmap`); the first failing member is reported.
    """
    # Each flag array read once, and no search where nothing failed (the common case:
    # part of every validated call's overhead).
    host = {regime: np.asarray(array) for regime, array in violations.items()}
    # `max` (NaN propagates: a NaN flag fails) costs a third of `np.all(array <= 0)`.
    if all(array.size == 0 or array.max() <= 0 for array in host.values()):
        return []
    found: list[Failure] = []
    for nan in (False, True):
        best = None
        for regime, array in host.items():
            if array.size == 0:
                continue
            columns = [i for i, c in enumerate(checks[regime]) if (c == NAN_CHECK) == nan]
            if not columns:
                continue
            failed = np.argwhere(~(array[..., columns] <= 0))  # NaN counts as failed
            if not len(failed):
                continue
            # Rows are in row-major order: the first is the first batch member's earliest
            # period; for NaN take that member's latest period instead.
            row = failed[0]
            if nan:
                member = failed[np.all(failed[:, :-2] == row[:-2], axis=1)]
                row = member[np.argmax(member[:, -2])]
            *batch, period, column = (int(i) for i in row)
            key = (tuple(batch), -period if nan else period)
            if best is None or key < best[0]:
                check = checks[regime][columns[column]]
                size = float(array[(*batch, period, columns[column])])
                best = (key, Failure(regime, period, check, size, tuple(batch)))
        if best is not None:
            found.append(best[1])
    return found


def describe(
    failure: Failure,
    nan_detail: Callable[[], str | None] | None = None,
    context: str = "",
    texts: Mapping[str, str] | None = None,
    detail: Callable[[Failure], str | None] | None = None,
):
    """The error class and message of a failure (`nan_detail`: an eager, more precise
    message for a NaN in the value arrays, e.g. from `diagnose_nan`; `context` is
    appended, e.g. that the check failed in simulation; `texts`: fixed messages by
    check name; `detail`: an eager, more precise message for any other failure, e.g.
    the state and the bad value from `transition_detail`, or None)."""
    # A kind without an entry (e.g. a solver's own check) reads as a transition check.
    kind = CHECKS.get(failure.kind, CHECKS[""])
    message = None
    if texts and failure.check in texts:
        message = texts[failure.check]
    elif failure.check == NAN_CHECK and nan_detail is not None:
        message = nan_detail()
    elif detail is not None and not failure.batch:
        message = detail(failure)
    if message is None:
        message = kind.message(failure)
    if failure.batch:
        member = ", ".join(str(i) for i in failure.batch)
        message += f" (batch member {member} of a jax.vmap)"
    return kind.error, message + context


def report(
    validate: str,
    violations: Mapping[str, ArrayLike],
    checks: Mapping[str, tuple[str, ...]],
    *,
    nan_detail: Callable[[], str | None] | None = None,
    context: str = "",
    texts: Mapping[str, str] | None = None,
    detail: Callable[[Failure], str | None] | None = None,
    stacklevel: int = 2,
) -> None:
    """Raise (`validate="raise"`) or warn (`"warn"`) on failed checks; host side."""
    for failure in first_failures(violations, checks):
        error, message = describe(failure, nan_detail, context, texts, detail)
        if validate == "raise":
            raise error(message)
        warnings.warn(message, LcmWarning, stacklevel=stacklevel + 1)


def is_traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


def enforce(
    validate: str,
    violations: Mapping[str, ArrayLike],
    checks: Mapping[str, tuple[str, ...]],
    *,
    nan_detail: Callable[[], str | None] | None = None,
    context: str = "",
    texts: Mapping[str, str] | None = None,
    detail: Callable[[Failure], str | None] | None = None,
    stacklevel: int = 2,
) -> None:
    """`report` the flags: on the host now if they are concrete, else inside the caller's
    program (a host callback that raises or warns with the same message; `nan_detail`
    and `detail` only apply on the host)."""
    if validate == "off" or not any(np.size(v) for v in violations.values()):
        return
    if not is_traced(violations):
        report(
            validate,
            violations,
            checks,
            nan_detail=nan_detail,
            context=context,
            texts=texts,
            detail=detail,
            stacklevel=stacklevel + 1,
        )
        return
    flags = {r: jax.lax.stop_gradient(v) for r, v in violations.items() if np.size(v)}
    _report_in_graph(
        flags, validate=validate, checks=dict(checks), context=context, texts=dict(texts or {})
    )


def _report_in_graph(
    flags, *, validate: str, checks: dict[str, tuple[str, ...]], context: str, texts
) -> None:
    def host(flags):
        report(validate, flags, checks, context=context, texts=texts, stacklevel=1)

    # Under jax.vmap the callback sees the whole batch at once (leading axes of the
    # flags), instead of one callback per member that `jax.debug.callback` would unroll.
    @custom_batching.custom_vmap
    def callback(flags):
        jax.debug.callback(host, flags)
        return jnp.zeros((), jnp.bool_)

    @callback.def_vmap
    def _(axis_size, in_batched, flags):
        flags = jax.tree.map(
            lambda x, batched: x if batched else jnp.broadcast_to(x, (axis_size, *x.shape)),
            flags,
            in_batched[0],
        )
        return callback(flags), False

    callback(flags)
