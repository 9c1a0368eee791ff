"""The exceptions lcm_eqx raises. Every one derives from `LcmError`."""


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


class InvalidPeriodError(LcmError, ValueError):
    """A period outside the model's horizon, or one in which a regime is inactive."""


class SavedFileError(LcmError, ValueError):
    """A saved solution or simulation result cannot be loaded: the file is corrupt or
    truncated, holds another kind of object, or was saved from a model with a different
    structure (the message says what differs)."""


class InvalidDataError(LcmError, ValueError):
    """Observed data that do not fit the model (unknown regimes, labels, missing columns)."""


class NaNError(LcmError, FloatingPointError):
    """A value array contains NaN; the message names the regime, period and term."""
