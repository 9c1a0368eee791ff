"""lcm_eqx: finite-horizon discrete-continuous life-cycle models in JAX.

Write a model as plain JAX functions, solve it by backward induction as one jit-able
function, simulate panels into pandas, and differentiate through the solution.
"""

# First: importing `_config` sets lcm_eqx's JAX defaults before anything imports jax.
from . import _config as _config
from ._equilibrium import Calibration as Calibration
from ._equilibrium import Equilibrium as Equilibrium
from ._equilibrium import EquilibriumResult as EquilibriumResult
from ._equilibrium import Population as Population
from ._errors import EquilibriumError as EquilibriumError
from ._errors import EstimationError as EstimationError
from ._errors import GridInitializationError as GridInitializationError
from ._errors import InfeasibleStateError as InfeasibleStateError
from ._errors import InvalidDataError as InvalidDataError
from ._errors import InvalidInitialConditionsError as InvalidInitialConditionsError
from ._errors import InvalidParamsError as InvalidParamsError
from ._errors import InvalidPeriodError as InvalidPeriodError
from ._errors import InvalidRegimeError as InvalidRegimeError
from ._errors import (
    InvalidTransitionProbabilitiesError as InvalidTransitionProbabilitiesError,
)
from ._errors import LcmError as LcmError
from ._errors import LcmWarning as LcmWarning
from ._errors import ModelInitializationError as ModelInitializationError
from ._errors import NaNError as NaNError
from ._errors import SavedFileError as SavedFileError
from ._estimation import ChoiceData as ChoiceData
from ._estimation import Distribution as Distribution
from ._estimation import EstimationResult as EstimationResult
from ._estimation import Identification as Identification
from ._estimation import LikelihoodRatioTest as LikelihoodRatioTest
from ._estimation import Profile as Profile
from ._estimation import best_continuous_actions as best_continuous_actions
from ._estimation import choice_moments as choice_moments
from ._estimation import choice_probabilities as choice_probabilities
from ._estimation import data_moments as data_moments
from ._estimation import discrete_values as discrete_values
from ._estimation import estimate as estimate
from ._estimation import euler_errors as euler_errors
from ._estimation import log_likelihood as log_likelihood
from ._estimation import prepare_data as prepare_data
from ._estimation import refine_codes as refine_codes
from ._facade import Model as Model
from ._grids import AbstractGrid as AbstractGrid
from ._grids import AgeGrid as AgeGrid
from ._grids import DiscreteGrid as DiscreteGrid
from ._grids import IIDGrid as IIDGrid
from ._grids import IrregSpacedGrid as IrregSpacedGrid
from ._grids import LinSpacedGrid as LinSpacedGrid
from ._grids import LogNormalIIDGrid as LogNormalIIDGrid
from ._grids import LogSpacedGrid as LogSpacedGrid
from ._grids import NormalIIDGrid as NormalIIDGrid
from ._grids import PiecewiseLinSpacedGrid as PiecewiseLinSpacedGrid
from ._grids import PiecewiseLogSpacedGrid as PiecewiseLogSpacedGrid
from ._grids import RouwenhorstGrid as RouwenhorstGrid
from ._grids import TauchenGrid as TauchenGrid
from ._grids import UniformIIDGrid as UniformIIDGrid
from ._grids._ar1 import rouwenhorst as rouwenhorst
from ._grids._ar1 import tauchen as tauchen
from ._loading import load_simulation_result as load_simulation_result
from ._loading import load_solution as load_solution
from ._logging import set_log_level as set_log_level
from ._model._aggregator import AbstractAggregator as AbstractAggregator
from ._model._aggregator import (
    AbstractCertaintyEquivalent as AbstractCertaintyEquivalent,
)
from ._model._aggregator import EpsteinZin as EpsteinZin
from ._model._aggregator import LinearExpectation as LinearExpectation
from ._model._aggregator import PowerMean as PowerMean
from ._model._aggregator import PresentBias as PresentBias
from ._model._markov import ExtremeValueShocks as ExtremeValueShocks
from ._model._markov import MarkovTransition as MarkovTransition
from ._model._regime import Regime as Regime
from ._pandas import params_from_series as params_from_series
from ._pandas import params_to_series as params_to_series
from ._plotting import compute_policy as compute_policy
from ._plotting import plot_policy as plot_policy
from ._plotting import plot_profiles as plot_profiles
from ._plotting import plot_values as plot_values
from ._simulate._result import SimulationResult as SimulationResult
from ._solve._dcegm import DCEGM as DCEGM
from ._solve._dcegm import AbstractUpperEnvelope as AbstractUpperEnvelope
from ._solve._dcegm import BudgetKinks as BudgetKinks
from ._solve._dcegm import EndogenousGrid as EndogenousGrid
from ._solve._dcegm import ExactEnvelope as ExactEnvelope
from ._solve._grid_search import GridSearch as GridSearch
from ._solve._negm import NEGM as NEGM
from ._solve._negm import NEGMPolicy as NEGMPolicy
from ._solve._refine_spec import Refine as Refine
from ._solve._refine_spec import RefineCode as RefineCode
from ._solve._solution import Solution as Solution
from ._solve._solver import AbstractPointwiseSolver as AbstractPointwiseSolver
from ._solve._solver import AbstractSolver as AbstractSolver
from ._spline import Spline as Spline
from ._version import __version__ as __version__
