"""`lcm.Spline`: an age profile from a few knot values, against a separately written
numpy natural cubic spline (the full system with its end conditions, polynomial
coefficients per interval) and scipy's where it is installed, in float64."""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

KNOTS = np.array([25.0, 32.0, 45.0, 60.0, 72.0])
VALUES = np.array([0.4, 1.1, 0.7, 1.6, 0.9])


def natural_spline_oracle(knots, values, x):
    """Cubic pieces a + b t + c t² + d t³ on each interval; 4(n−1) unknowns from
    interpolation, C¹ and C² continuity and zero curvature at both ends; beyond the
    ends the tangent line."""
    n = knots.size - 1
    rows, rhs = [], []

    def row(entries):
        r = np.zeros(4 * n)
        for j, v in entries:
            r[j] = v
        return r

    for i in range(n):
        h = knots[i + 1] - knots[i]
        rows.append(row([(4 * i, 1.0)]))
        rhs.append(values[i])
        rows.append(row([(4 * i, 1.0), (4 * i + 1, h), (4 * i + 2, h**2), (4 * i + 3, h**3)]))
        rhs.append(values[i + 1])
        if i < n - 1:
            rows.append(row([(4 * i + 1, 1.0), (4 * i + 2, 2 * h), (4 * i + 3, 3 * h**2),
                             (4 * i + 5, -1.0)]))  # fmt: skip
            rhs.append(0.0)
            rows.append(row([(4 * i + 2, 2.0), (4 * i + 3, 6 * h), (4 * i + 6, -2.0)]))
            rhs.append(0.0)
    rows.append(row([(2, 2.0)]))
    rhs.append(0.0)
    h = knots[-1] - knots[-2]
    rows.append(row([(4 * (n - 1) + 2, 2.0), (4 * (n - 1) + 3, 6 * h)]))
    rhs.append(0.0)
    c = np.linalg.solve(np.array(rows), np.array(rhs)).reshape(n, 4)

    out = np.empty_like(x)
    for j, xj in enumerate(x):
        if xj < knots[0]:
            out[j] = c[0, 0] + c[0, 1] * (xj - knots[0])
        elif xj > knots[-1]:
            h = knots[-1] - knots[-2]
            _, b, cc, d = c[-1]
            slope = b + 2 * cc * h + 3 * d * h**2
            out[j] = values[-1] + slope * (xj - knots[-1])
        else:
            i = min(np.searchsorted(knots, xj, side="right") - 1, n - 1)
            t = xj - knots[i]
            out[j] = c[i] @ np.array([1.0, t, t**2, t**3])
    return out


def test_the_cubic_spline_equals_the_oracle_inside_at_the_knots_and_beyond():
    x = np.concatenate([np.linspace(18.0, 80.0, 125), KNOTS])
    got = np.asarray(lcm.Spline(KNOTS)(jnp.asarray(VALUES), jnp.asarray(x)))
    np.testing.assert_allclose(got, natural_spline_oracle(KNOTS, VALUES, x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[-KNOTS.size :], VALUES, atol=1e-13)
    scipy_interpolate = pytest.importorskip("scipy.interpolate")
    inside = x[(x >= KNOTS[0]) & (x <= KNOTS[-1])]
    reference = scipy_interpolate.CubicSpline(KNOTS, VALUES, bc_type="natural")(inside)
    np.testing.assert_allclose(lcm.Spline(KNOTS)(VALUES, inside), reference, atol=1e-12)


def test_the_linear_spline_is_the_broken_line_continued_straight():
    x = np.linspace(18.0, 80.0, 63)
    got = np.asarray(lcm.Spline(KNOTS, kind="linear")(VALUES, x))
    inside = (x >= KNOTS[0]) & (x <= KNOTS[-1])
    np.testing.assert_allclose(got[inside], np.interp(x[inside], KNOTS, VALUES), atol=1e-13)
    first = (VALUES[1] - VALUES[0]) / (KNOTS[1] - KNOTS[0])
    np.testing.assert_allclose(got[x < 25], VALUES[0] + first * (x[x < 25] - 25), atol=1e-13)


def test_the_profile_is_linear_in_the_values_and_differentiable():
    spline = lcm.Spline(KNOTS)
    x = jnp.linspace(20.0, 78.0, 30)
    jacobian = np.asarray(jax.jacfwd(lambda y: spline(y, x))(jnp.asarray(VALUES)))
    basis = np.stack(
        [natural_spline_oracle(KNOTS, np.eye(KNOTS.size)[k], np.asarray(x)) for k in range(5)],
        axis=1,
    )  # the weight of each knot value: the spline through a unit vector
    np.testing.assert_allclose(jacobian, basis, atol=1e-12)
    np.testing.assert_allclose(jax.jacrev(lambda y: spline(y, x))(jnp.asarray(VALUES)), basis,
                               atol=1e-12)  # fmt: skip
    step = 1e-6
    slope = jax.vmap(jax.grad(lambda a: spline(jnp.asarray(VALUES), a)))(x)
    central = (spline(VALUES, x + step) - spline(VALUES, x - step)) / (2 * step)
    np.testing.assert_allclose(slope, central, atol=1e-7)


def test_bad_knots_and_values_are_named():
    with pytest.raises(lcm.ModelInitializationError, match="strictly increasing"):
        lcm.Spline([25, 25, 40])
    with pytest.raises(lcm.ModelInitializationError, match="at least two"):
        lcm.Spline([25])
    with pytest.raises(lcm.ModelInitializationError, match="kind"):
        lcm.Spline([25, 40], kind="quadratic")  # type: ignore[arg-type]
    with pytest.raises(lcm.ModelInitializationError, match="3 knots take 3 values"):
        lcm.Spline([25, 40, 60])(jnp.ones(4), 30.0)
