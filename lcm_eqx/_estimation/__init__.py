"""Estimation helpers: conditional choice probabilities, likelihoods, moments."""

from ._choice import choice_probabilities, discrete_values
from ._data import ChoiceData, InvalidDataError, prepare_data
from ._distribution import Distribution
from ._euler import euler_errors
from ._likelihood import best_continuous_actions, choice_moments, log_likelihood

__all__ = [
    "ChoiceData",
    "Distribution",
    "InvalidDataError",
    "best_continuous_actions",
    "choice_moments",
    "choice_probabilities",
    "discrete_values",
    "euler_errors",
    "log_likelihood",
    "prepare_data",
]
