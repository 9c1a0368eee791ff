"""Estimation helpers: conditional choice probabilities, likelihoods, moments."""

from ._choice import choice_probabilities, discrete_values, refine_codes
from ._data import ChoiceData, InvalidDataError, prepare_data
from ._distribution import Distribution
from ._estimate import estimate
from ._euler import euler_errors
from ._likelihood import best_continuous_actions, choice_moments, log_likelihood
from ._moments import Profile, data_moments
from ._result import EstimationResult, Identification, LikelihoodRatioTest

__all__ = [
    "ChoiceData",
    "Distribution",
    "EstimationResult",
    "Identification",
    "InvalidDataError",
    "LikelihoodRatioTest",
    "Profile",
    "best_continuous_actions",
    "choice_moments",
    "choice_probabilities",
    "data_moments",
    "discrete_values",
    "estimate",
    "euler_errors",
    "log_likelihood",
    "prepare_data",
    "refine_codes",
]
