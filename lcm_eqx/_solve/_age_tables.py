"""The points by period of the grids whose bounds vary with age (`AbstractContinuousGrid.
varies_with_age`): scanned by the period loop and the simulation like the continuation."""

from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._grids import AbstractContinuousGrid
from .._model._plan import ModelPlan

GridPoints = dict[str, dict[str, Array]]


def age_varying_points(model: ModelPlan) -> GridPoints:
    """The points of every period, `(n_periods, n_points)`, of each grid whose bounds vary
    with age, by regime and variable (states and actions). Empty for a model without such
    grids, so that nothing extra is traced."""
    tables: GridPoints = {}
    for name, regime in model.regimes.items():
        varying = {
            variable: cast(AbstractContinuousGrid, grid).points_by_period()
            for variable, grid in regime.grids.items()
            if grid.varies_with_age
        }
        if varying:
            tables[name] = varying
    return tables


def points_in(tables: GridPoints, period) -> GridPoints:
    """The points of `period` (clipped to the horizon: after the last period, the last
    period's points, which nothing reads with positive weight since V_T = 0)."""
    return jax.tree.map(lambda table: table[jnp.clip(period, 0, table.shape[0] - 1)], tables)


def shifted(tables: GridPoints) -> GridPoints:
    """Index t holds period t + 1's points (the last period's after the last period)."""
    return jax.tree.map(lambda t: jnp.concatenate([t[1:], t[-1:]], axis=0), tables)
