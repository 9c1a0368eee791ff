"""Stationary general equilibrium: prices from the model's own aggregates, by Newton's
method with exact Jacobians, differentiable by the implicit function theorem."""

from ._equilibrium import Calibration, Equilibrium, EquilibriumResult
from ._population import Population

__all__ = ["Calibration", "Equilibrium", "EquilibriumResult", "Population"]
