"""float32, the dtype of an accelerator, for every solver (issue 59).

- DC-EGM, NEGM, budget kinks and grid search solve their models in float32 (no false
  `ModelInitializationError`) and agree with the same model in float64 within the
  tolerances docs/tuning.md states ("Running on an accelerator");
- a real violation still raises in float32 (an Euler equation left unsolved);
- the Euler check's tolerance scales with the dtype (`_numerics.relative`).

Each test switches float64 off for itself (other test modules switch it on at import).
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._numerics import relative
from lcm_eqx._solve._dcegm._egm import EULER_ROUNDINGS, EULER_TOLERANCE, euler_miss
from tests import test_budget_kinks as floor_model
from tests.models import retirement
from tests.test_dcegm_limit import RETIREE, retiree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import durables


@pytest.fixture
def x64():
    """Set float64 on or off for the test; restored after it."""
    before = jax.config.jax_enable_x64

    def use(on: bool) -> None:
        jax.config.update("jax_enable_x64", on)

    yield use
    jax.config.update("jax_enable_x64", before)


def _largest_relative_difference(a, b) -> float:
    """Over the entries finite in both (which must be the same entries), relative to
    the value's scale (a value near 0 is compared with the array's typical size)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert (np.isfinite(a) == np.isfinite(b)).all()
    finite = np.isfinite(a)
    scale = np.maximum(np.abs(b[finite]), 1e-3 * np.mean(np.abs(b[finite])))
    return float(np.max(np.abs(a[finite] - b[finite]) / scale))


# Each model, and the largest relative difference of its float32 values from float64's
# that docs/tuning.md states (measured: DC-EGM 2.7e-6, grid search 2.5e-7, NEGM 1.9e-4,
# budget kinks 2.0e-7).
CASES = {
    "DCEGM": (
        lambda: (retirement.build(n_periods=4, solver=retirement.dcegm()), retirement.PARAMS),
        1e-5,
    ),
    "GridSearch": (lambda: (retirement.build(n_periods=4), retirement.PARAMS), 1e-6),
    "NEGM": (lambda: durables.build(n_periods=4)[:2], 1e-3),
    "BudgetKinks": (lambda: (floor_model.build(n_periods=3), floor_model.PARAMS), 1e-5),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_solver_solves_in_float32_close_to_float64(x64, case):
    build, tolerance = CASES[case]
    values = {}
    for on in (True, False):
        x64(on)
        model, params = build()
        solution = model.solve(params)  # validated: no check fires in float32 either
        values[on] = {name: np.asarray(array) for name, array in solution.values.items()}
    for name, value in values[False].items():
        assert value.dtype == np.float32
        assert _largest_relative_difference(value, values[True][name]) <= tolerance, name


def test_an_euler_equation_left_unsolved_still_raises_in_float32(x64):
    x64(False)
    model = retiree(
        n_periods=2,
        inverse_marginal_utility=lambda marginal_utility, risk_aversion: (
            2 * marginal_utility ** (-1 / risk_aversion)
        ),
    )
    with pytest.raises(lcm.ModelInitializationError, match="Euler equation"):
        model.solve({**RETIREE, "risk_aversion": 1.95})


def test_the_euler_tolerance_is_the_dtypes():
    # float64 keeps its 1e-6; float32 allows 10^4 roundings (a TPU's float32 `log` and
    # `pow` missed by up to 1.0e-4 on the retirement example).
    assert relative(EULER_TOLERANCE, EULER_ROUNDINGS, jnp.float64) == 1e-6
    assert relative(EULER_TOLERANCE, EULER_ROUNDINGS, jnp.float32) == pytest.approx(1.19e-3, 1e-2)
    target = jnp.asarray([1.0, 1.0, 1.0], jnp.float32)
    mu = jnp.asarray([1.0 + 1e-4, 1.0 + 5e-3, jnp.nan], jnp.float32)
    miss = np.asarray(euler_miss(mu, target, jnp.zeros(3, jnp.float32)))
    np.testing.assert_allclose(miss, [0.0, 5e-3, 1.0], rtol=1e-3)


def test_the_inversion_of_marginal_utility_needs_no_accurate_logarithm(x64, monkeypatch):
    # A TPU's float32 `log` errs by up to 1.1e-4 (absolute): Newton's steps in logs alone
    # stopped that far from the root there (the DC-EGM retirement values 1.5e-4 off
    # float64). With such a logarithm emulated here, the last step, on the ratio
    # u'(c) / q, still solves u'(c) = q to float32 rounding.
    from lcm_eqx._solve._reading import invert_marginal

    x64(False)
    exact_log = jnp.log

    @jax.custom_jvp
    def coarse_log(x):  # off by up to 1e-4, varying from one float to the next; its
        # derivative is `1 / x`, as JAX's rule says
        return exact_log(x) + 1e-4 * jnp.sin(1e7 * x)

    coarse_log.defjvp(lambda primals, tangents: (coarse_log(*primals), tangents[0] / primals[0]))
    monkeypatch.setattr(jnp, "log", coarse_log)
    q = jnp.asarray(np.geomspace(1e-3, 1e3, 1001), jnp.float32)
    for marginal, solution in ((lambda c: 1.0 / c, 1.0 / q), (lambda c: c**-2.0, q**-0.5)):
        c = invert_marginal(marginal, q, 6)
        assert float(jnp.max(jnp.abs(c / solution - 1.0))) < 2e-6


@pytest.mark.parametrize("case", ["DCEGM", "GridSearch", "NEGM"])
def test_every_contraction_is_at_the_highest_precision(x64, case):
    """A TPU multiplies a contraction at its default precision in one bfloat16 pass
    (three digits: NEGM's quintic read was 3.2e-3 off float64 on a TPU): every
    `dot_general` of a solve names the highest precision, read from its StableHLO."""
    import re

    x64(False)
    model, params = CASES[case][0]()
    text = model._solve_nested.lower(
        model.checked_params(params), validate=True, progress=None
    ).as_text()
    dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
    assert all("precision = [HIGHEST, HIGHEST]" in d for d in dots), [
        d for d in dots if "HIGHEST" not in d
    ][:3]
    if case == "NEGM":
        assert dots  # its adjuster's quintic read


def test_a_float32_initial_mass_is_accepted_to_its_round_off(x64):
    # A TPU's `initial_mass` summed to 1.0000001 in float32, and `distribution` rejected
    # it against float64's 1e-9. The tolerance is now the dtype's round-off (100 ulps),
    # summed in float64; a mass that is off by more is still refused, never renormalised.
    x64(False)
    model = retirement.build(n_periods=3)
    shape = tuple(
        model.plan.regimes["working"].grids[s].n_points
        for s in model.plan.regimes["working"].states
    )
    n = int(np.prod(shape))
    close = np.full(shape, np.float32(1.0 / n) * np.float32(1 + 2e-7), np.float32)
    assert abs(float(np.sum(close, dtype=np.float64)) - 1) > 1e-9
    dist = model.distribution(retirement.PARAMS, {"working": close})
    assert dist.mass["working"].dtype == np.float32
    off = np.full(shape, np.float32(1.0 / n) * np.float32(1 + 1e-4), np.float32)
    with pytest.raises(lcm.InvalidInitialConditionsError, match=r"sum to 1 \(to 1e-05"):
        model.distribution(retirement.PARAMS, {"working": off})
    x64(True)
    with pytest.raises(lcm.InvalidInitialConditionsError, match=r"sum to 1 \(to 1e-09"):
        model.distribution(retirement.PARAMS, {"working": close.astype(np.float64)})
