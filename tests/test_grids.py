"""Grids: points, interval lookup exact at grid points, linear extrapolation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm

jax.config.update("jax_enable_x64", True)

GRIDS = {
    "lin": (lcm.LinSpacedGrid(1.0, 5.0, 5), np.linspace(1.0, 5.0, 5)),
    "log": (lcm.LogSpacedGrid(1.0, 16.0, 5), np.geomspace(1.0, 16.0, 5)),
    "irregular": (lcm.IrregSpacedGrid([0.0, 1.0, 3.0, 7.0]), np.array([0.0, 1.0, 3.0, 7.0])),
    "piecewise_lin": (
        lcm.PiecewiseLinSpacedGrid([0.0, 1.0, 5.0], [3, 5]),
        np.array([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ),
    "piecewise_log": (
        lcm.PiecewiseLogSpacedGrid([1.0, 4.0, 64.0], [3, 3]),
        np.array([1.0, 2.0, 4.0, 16.0, 64.0]),
    ),
}


@pytest.mark.parametrize("name", GRIDS)
def test_points(name):
    grid, expected = GRIDS[name]
    np.testing.assert_allclose(grid.to_jax(), expected, rtol=1e-12)
    assert grid.n_points == expected.shape[0]


@pytest.mark.parametrize("name", GRIDS)
def test_interval_is_exact_at_grid_points_and_extrapolates(name):
    grid, expected = GRIDS[name]
    points = grid.to_jax()
    for i, x in enumerate(np.asarray(points)):  # the grid's own points (test_points)
        lo, w = grid.interval(jnp.asarray(x), points)
        # At a grid point the weight on any other point is exactly zero.
        assert (int(lo), float(w)) in {(i, 0.0), (i - 1, 1.0)}
    values = 3.0 * expected - 1.0  # linear: interpolation and extrapolation are exact
    for x in (expected[0] - 0.7, 0.5 * (expected[1] + expected[2]), expected[-1] + 2.5):
        lo, w = grid.interval(jnp.asarray(x), points)
        interpolated = (1 - w) * values[lo] + w * values[lo + 1]
        np.testing.assert_allclose(interpolated, 3.0 * x - 1.0, rtol=1e-12)


def test_discrete_grid_labels_from_enum_and_sequence():
    from enum import IntEnum

    class Health(IntEnum):
        bad = 0
        good = 1

    assert lcm.DiscreteGrid(Health).labels == ("bad", "good")
    assert lcm.DiscreteGrid(["a", "b", "c"]).n_points == 3
    np.testing.assert_array_equal(lcm.DiscreteGrid(Health).to_jax(), [0, 1])


def test_grids_are_pytrees_with_static_sizes():
    grid = lcm.LinSpacedGrid(0.0, 1.0, 7, batch_size=2)
    leaves = jax.tree.leaves(grid)
    assert len(leaves) == 2  # start and stop: differentiable, traceable
    assert grid.batch_size == 2 and grid.n_points == 7


def test_age_grid():
    ages = lcm.AgeGrid(start=40, step=10)
    assert ages.age(2) == 60


def test_lin_grid_weight_derivative_at_a_grid_point():
    """At a grid point the weight is snapped to exactly 0 (value) but its derivative is
    that of x, 1 / step (the slope above the point), not the 0 of a rounding."""
    grid = lcm.LinSpacedGrid(1.0, 3.0, 5)  # step 0.5
    points = grid.to_jax()

    def weight(x):
        return grid.interval(x, points)[1]

    x = 1.0 + 1.5 * (1.0 + 1e-16)  # on the point 2.5 up to rounding
    assert weight(x) == 0.0
    np.testing.assert_allclose(jax.grad(weight)(x), 2.0)
    np.testing.assert_allclose(jax.grad(weight)(2.3), 2.0)
