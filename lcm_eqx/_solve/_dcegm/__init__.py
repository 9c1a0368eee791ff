"""The discrete-continuous endogenous grid method (`DCEGM`), its grids and envelopes."""

from ._envelope import AbstractUpperEnvelope as AbstractUpperEnvelope
from ._envelope import EndogenousGrid as EndogenousGrid
from ._envelope import ExactEnvelope as ExactEnvelope
from ._kinks import BudgetKinks as BudgetKinks
from ._solver import DCEGM as DCEGM
