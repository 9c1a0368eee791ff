"""Stationary general equilibrium: prices from the model's own aggregates, by Newton's
method with exact Jacobians, differentiable by the implicit function theorem."""

from ._equilibrium import Equilibrium
from ._population import Population
from ._results import Calibration, EquilibriumResult

__all__ = ["Calibration", "Equilibrium", "EquilibriumResult", "Population"]
