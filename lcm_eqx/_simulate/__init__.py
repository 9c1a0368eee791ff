"""Simulation of panels and their results."""
