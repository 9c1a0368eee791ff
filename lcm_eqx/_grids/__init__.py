"""Grids for states and actions."""

from ._age import AgeGrid as AgeGrid
from ._base import AbstractContinuousGrid as AbstractContinuousGrid
from ._base import AbstractGrid as AbstractGrid
from ._continuous import IrregSpacedGrid as IrregSpacedGrid
from ._continuous import LinSpacedGrid as LinSpacedGrid
from ._continuous import LogSpacedGrid as LogSpacedGrid
from ._continuous import PiecewiseLinSpacedGrid as PiecewiseLinSpacedGrid
from ._continuous import PiecewiseLogSpacedGrid as PiecewiseLogSpacedGrid
from ._discrete import DiscreteGrid as DiscreteGrid
from ._process import INDEX_SUFFIX as INDEX_SUFFIX
from ._process import AbstractProcessGrid as AbstractProcessGrid
from ._process import IIDGrid as IIDGrid
from ._process import LogNormalIIDGrid as LogNormalIIDGrid
from ._process import NormalIIDGrid as NormalIIDGrid
from ._process import RouwenhorstGrid as RouwenhorstGrid
from ._process import TauchenGrid as TauchenGrid
from ._process import UniformIIDGrid as UniformIIDGrid
from ._process import state_spellings as state_spellings
from ._process import unknown_states_message as unknown_states_message
