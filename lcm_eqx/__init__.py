"""lcm_eqx: finite-horizon discrete-continuous life-cycle models in JAX.

Write a model as plain JAX functions, solve it by backward induction as one jit-able
function, simulate panels into pandas, and differentiate through the solution.
"""

from ._config import configure_jax as _configure_jax

_configure_jax()

from ._errors import EstimationError as EstimationError  # noqa: E402
from ._errors import GridInitializationError as GridInitializationError  # noqa: E402
from ._errors import InvalidDataError as InvalidDataError  # noqa: E402
from ._errors import InvalidInitialConditionsError as InvalidInitialConditionsError  # noqa: E402
from ._errors import InvalidParamsError as InvalidParamsError  # noqa: E402
from ._errors import InvalidPeriodError as InvalidPeriodError  # noqa: E402
from ._errors import (  # noqa: E402
    InvalidTransitionProbabilitiesError as InvalidTransitionProbabilitiesError,
)
from ._errors import LcmError as LcmError  # noqa: E402
from ._errors import LcmWarning as LcmWarning  # noqa: E402
from ._errors import ModelInitializationError as ModelInitializationError  # noqa: E402
from ._errors import NaNError as NaNError  # noqa: E402
from ._errors import SavedFileError as SavedFileError  # noqa: E402
from ._estimation import ChoiceData as ChoiceData  # noqa: E402
from ._estimation import Distribution as Distribution  # noqa: E402
from ._estimation import EstimationResult as EstimationResult  # noqa: E402
from ._estimation import Identification as Identification  # noqa: E402
from ._estimation import Profile as Profile  # noqa: E402
from ._estimation import best_continuous_actions as best_continuous_actions  # noqa: E402
from ._estimation import choice_moments as choice_moments  # noqa: E402
from ._estimation import choice_probabilities as choice_probabilities  # noqa: E402
from ._estimation import data_moments as data_moments  # noqa: E402
from ._estimation import discrete_values as discrete_values  # noqa: E402
from ._estimation import estimate as estimate  # noqa: E402
from ._estimation import euler_errors as euler_errors  # noqa: E402
from ._estimation import log_likelihood as log_likelihood  # noqa: E402
from ._estimation import prepare_data as prepare_data  # noqa: E402
from ._grids import AbstractGrid as AbstractGrid  # noqa: E402
from ._grids import AgeGrid as AgeGrid  # noqa: E402
from ._grids import DiscreteGrid as DiscreteGrid  # noqa: E402
from ._grids import IrregSpacedGrid as IrregSpacedGrid  # noqa: E402
from ._grids import LinSpacedGrid as LinSpacedGrid  # noqa: E402
from ._grids import LogNormalIIDGrid as LogNormalIIDGrid  # noqa: E402
from ._grids import LogSpacedGrid as LogSpacedGrid  # noqa: E402
from ._grids import NormalIIDGrid as NormalIIDGrid  # noqa: E402
from ._grids import PiecewiseLinSpacedGrid as PiecewiseLinSpacedGrid  # noqa: E402
from ._grids import PiecewiseLogSpacedGrid as PiecewiseLogSpacedGrid  # noqa: E402
from ._grids import RouwenhorstGrid as RouwenhorstGrid  # noqa: E402
from ._grids import TauchenGrid as TauchenGrid  # noqa: E402
from ._grids._ar1 import rouwenhorst as rouwenhorst  # noqa: E402
from ._grids._ar1 import tauchen as tauchen  # noqa: E402
from ._logging import set_log_level as set_log_level  # noqa: E402
from ._model._aggregator import AbstractAggregator as AbstractAggregator  # noqa: E402
from ._model._aggregator import (  # noqa: E402
    AbstractCertaintyEquivalent as AbstractCertaintyEquivalent,
)
from ._model._aggregator import EpsteinZin as EpsteinZin  # noqa: E402
from ._model._aggregator import PowerMean as PowerMean  # noqa: E402
from ._model._aggregator import PresentBias as PresentBias  # noqa: E402
from ._model._markov import ExtremeValueShocks as ExtremeValueShocks  # noqa: E402
from ._model._markov import MarkovTransition as MarkovTransition  # noqa: E402
from ._model._model import Model as Model  # noqa: E402
from ._model._regime import Regime as Regime  # noqa: E402
from ._pandas import params_from_series as params_from_series  # noqa: E402
from ._pandas import params_to_series as params_to_series  # noqa: E402
from ._persistence import load_simulation_result as load_simulation_result  # noqa: E402
from ._persistence import load_solution as load_solution  # noqa: E402
from ._plotting import compute_policy as compute_policy  # noqa: E402
from ._plotting import plot_policy as plot_policy  # noqa: E402
from ._plotting import plot_profiles as plot_profiles  # noqa: E402
from ._plotting import plot_values as plot_values  # noqa: E402
from ._simulate._result import SimulationResult as SimulationResult  # noqa: E402
from ._solve._dcegm import DCEGM as DCEGM  # noqa: E402
from ._solve._envelope import AbstractUpperEnvelope as AbstractUpperEnvelope  # noqa: E402
from ._solve._envelope import EndogenousGrid as EndogenousGrid  # noqa: E402
from ._solve._envelope import ExactEnvelope as ExactEnvelope  # noqa: E402
from ._solve._solution import Solution as Solution  # noqa: E402
from ._solve._solver import AbstractPointwiseSolver as AbstractPointwiseSolver  # noqa: E402
from ._solve._solver import AbstractSolver as AbstractSolver  # noqa: E402
from ._solve._solver import GridSearch as GridSearch  # noqa: E402

__version__ = "0.1.0"
