"""The nested endogenous grid method (`NEGM`) for liquid wealth and a durable stock."""

from ._policy import NEGMPolicy as NEGMPolicy
from ._solver import NEGM as NEGM
