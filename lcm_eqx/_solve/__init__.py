"""Solving: the Bellman kernel, solvers and backward induction."""
