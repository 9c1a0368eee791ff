"""Type aliases of the public signatures (what a user's type checker sees)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeAlias

import pandas as pd

Params: TypeAlias = Mapping[str, Any] | pd.Series
"""Model parameters: a nested dict (a pytree of floats and arrays) or a Series indexed by
`(regime, function, name)` (see `params_to_series`)."""

InitialConditions: TypeAlias = Mapping[str, Any] | pd.DataFrame
"""`"regime"` and every state of the starting regimes: a dict of arrays or a DataFrame."""

Data: TypeAlias = Mapping[str, Any] | pd.DataFrame
"""Observed rows: a DataFrame (e.g. `result.to_dataframe()`) or a dict of columns."""

FilePath: TypeAlias = str | os.PathLike[str]
"""A file path, as a string or a `pathlib.Path`."""
