"""The exceptions and warnings lcm_eqx raises. Every exception derives from `LcmError`,
every warning from `LcmWarning`."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import NoReturn

# Packages whose frames a warning skips to reach the user's line (lcm_eqx calls user code
# through jax transforms and equinox modules).
_INTERNAL_PACKAGES = frozenset({"lcm_eqx", "equinox", "jax", "jaxlib", "jaxtyping", "beartype"})


class LcmError(Exception):
    """Base class of every error lcm_eqx raises on purpose."""


class GridInitializationError(LcmError, ValueError):
    """A grid was constructed with invalid arguments."""


class ModelInitializationError(LcmError, ValueError):
    """A regime or model specification is inconsistent."""


class InvalidParamsError(LcmError, ValueError):
    """Parameters are missing, ambiguous, unknown or of the wrong shape."""


class InvalidInitialConditionsError(LcmError, ValueError):
    """Initial conditions passed to `simulate` are invalid."""


class InvalidTransitionProbabilitiesError(LcmError, ValueError):
    """A Markov transition returned probabilities outside [0, 1] or not summing to 1."""


class InvalidRegimeError(LcmError, ValueError):
    """A regime name that is not one of the model's regimes (e.g. in
    `solution.value(regime, period)`)."""


class InvalidPeriodError(LcmError, ValueError):
    """A period outside the model's horizon, or one in which a regime is inactive."""


class SavedFileError(LcmError, ValueError):
    """A saved solution or simulation result cannot be loaded: the file is corrupt or
    truncated, holds another kind of object, or was saved from a model with a different
    structure (the message says what differs)."""


class InvalidDataError(LcmError, ValueError):
    """Observed data that do not fit the model (unknown regimes, labels, missing columns)."""


class InfeasibleStateError(LcmError, ValueError):
    """A simulated subject reached a state where no action is feasible (every action is
    ruled out by a constraint, or leads only to such states); the message names the
    regime, period, constraints and the subject's state."""


class NaNError(LcmError, FloatingPointError):
    """A value array contains NaN; the message names the regime, period and term."""


class LcmWarning(UserWarning):
    """Base class of every warning lcm_eqx issues: a model that works but not as well as it
    could, or a result to double-check. Filter them all with
    `warnings.filterwarnings("ignore", category=lcm.LcmWarning)`."""


def outside_class(regime: str, solver: str) -> Callable[[str], NoReturn]:
    """`fail(what)` for a solver's check of a regime (`AbstractSolver.check`): raises
    `ModelInitializationError("Regime <regime>: <solver> cannot solve it: <what>")`."""

    def fail(what: str) -> NoReturn:
        raise ModelInitializationError(f"Regime {regime!r}: {solver} cannot solve it: {what}")

    return fail


def warn(message: str) -> None:
    """Issue `message` as an `LcmWarning` attributed to the first caller outside lcm_eqx
    (and the libraries it calls user code through), so that it points at the user's line."""
    caller = inspect.currentframe()
    if caller is None or caller.f_back is None:  # an interpreter without frame support
        warnings.warn(message, LcmWarning, stacklevel=2)
        return
    level, frame = 2, caller.f_back
    while frame.f_back is not None and _is_internal(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, LcmWarning, stacklevel=level)


def _is_internal(frame) -> bool:
    return frame.f_globals.get("__name__", "").partition(".")[0] in _INTERNAL_PACKAGES


class EstimationError(LcmError, ValueError):
    """An estimation that cannot start or be read: free parameters that are not in
    `params`, bounds that do not hold the start, moments with a singular covariance, an
    objective that is not finite at the start (the message names the parameter or
    moment)."""


class EquilibriumError(LcmError, ValueError):
    """An equilibrium that cannot be set up or was not found: prices or aggregates that
    the model does not know, clearing conditions that do not match the prices, or
    Newton's method that failed (no equilibrium bracketed, excess demands not finite,
    too many steps); the message names the prices, the clearing conditions and where
    the search stopped."""
