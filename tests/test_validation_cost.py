"""What validation adds to a solve's program, and that the cheaper form reports the same.

Where `GridSearch` evaluates the plain product (a model without structure), the checks
are evaluated apart from the values, each component on its own axes
(`_factored.checks_apart`): the flags equal those the plain product's `q` computes at
every pair (`GridSearch(factored=False)`), bit for bit, with and without the splay
knobs; and the validated period loop has no more kernels over the whole state x action
product than the unvalidated one (docs/architecture.md, "What validation costs").
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from tests.helpers import force_accelerator_forms

N_PERIODS = 4
N_WEALTH, N_INCOME, N_CONSUMPTION = 12, 3, 16


@functools.cache
def model(factored=True, wealth_batch_size=0, consumption_batch_size=0):
    """One model per configuration (each compiles its programs once)."""
    return build(lcm.GridSearch(factored=factored), wealth_batch_size, consumption_batch_size)


def build(solver, wealth_batch_size=0, consumption_batch_size=0):
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(0.5, 10.0, N_WEALTH, batch_size=wealth_batch_size),
            "income": lcm.RouwenhorstGrid(N_INCOME, rho=0.9, sigma=0.1),
        },
        actions={
            "labor": lcm.DiscreteGrid([0, 1]),
            "consumption": lcm.LinSpacedGrid(
                0.2, 10.0, N_CONSUMPTION, batch_size=consumption_batch_size
            ),
        },
        functions={
            "utility": lambda consumption, labor, disutility: (
                jnp.log(consumption) - disutility * labor
            ),
        },
        state_transitions={
            # NaN at feasible points where `bad` < 0 (log of a negative number) for the
            # poorest half of the consumption choices: a `next_wealth:finite` failure.
            "wealth": lambda wealth, consumption, income, labor, interest_rate, bad: (
                (1 + interest_rate) * (wealth - consumption)
                + jnp.exp(income) * labor
                + jnp.where(consumption < 0.5 * wealth, 0.0 * jnp.log(bad), 0.0)
            ),
        },
        # Indexed by the period: a probability above 1 in one period, an array too short
        # for the last periods in another parameter set.
        transition=lcm.MarkovTransition(
            lambda period, survival: jnp.array([survival[period], 1 - survival[period]])
        ),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    return lcm.Model({"alive": alive, "dead": dead}, N_PERIODS, solver=solver)


def params(survival=(0.99, 0.98, 0.97, 0.96), bad=1.0):
    return {
        "discount_factor": 0.95,
        "interest_rate": 0.02,
        "disutility": 0.5,
        "survival": jnp.asarray(survival),
        "bad": bad,
    }


FAILING = {
    "valid": params(),
    "probability above 1": params(survival=(0.99, 1.2, 0.97, 0.96)),
    "NaN next state": params(bad=-1.0),
    "out of bounds": params(survival=(0.99, 0.98)),
    "several at once": params(survival=(1.3, 0.98), bad=-1.0),
}


def flags(solved, p):
    solution, _ = solved._solve(solved.checked_params(p), validate=True, progress=None)
    return solution.checks, {r: np.asarray(v) for r, v in solution.violations.items()}


@pytest.mark.parametrize("case", list(FAILING))
@pytest.mark.parametrize("knobs", [(0, 0), (5, 6)], ids=["plain", "splayed"])
def test_checks_apart_equal_the_checks_at_every_pair(case, knobs):
    p = FAILING[case]
    apart = model(True, *knobs)
    # The model has no structure: `GridSearch()` evaluates the plain product too.
    assert all(r.work is None for r in apart.describe(p).regimes)
    checks, got = flags(apart, p)
    expected_checks, expected = flags(model(False), p)
    assert checks == expected_checks
    for regime in expected:
        np.testing.assert_array_equal(got[regime], expected[regime])
    if case != "valid":
        assert np.any(~(expected["alive"] <= 0))  # the case fails some check


def test_checks_apart_raise_what_the_plain_checks_raise():
    solve = model().solve
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="period 1"):
        solve(FAILING["probability above 1"])
    with pytest.raises(lcm.NaNError, match="next_wealth"):
        solve(FAILING["NaN next state"])
    with pytest.raises(lcm.InvalidParamsError, match="survival"):
        solve(FAILING["out of bounds"])


def test_the_accelerator_forms_flag_what_the_cpu_forms_flag(monkeypatch):
    """Every case's flags, with each `by_platform` choice traced as for a TPU (the
    check maxima over the arrays' own axes, not merged), equal the CPU forms'."""
    expected = {case: flags(model(), p) for case, p in FAILING.items()}
    force_accelerator_forms(monkeypatch)
    accelerated = build(lcm.GridSearch())
    for case, p in FAILING.items():
        checks, got = flags(accelerated, p)
        assert checks == expected[case][0]
        for regime, violations in expected[case][1].items():
            np.testing.assert_array_equal(got[regime], violations, err_msg=case)
    with pytest.raises(lcm.InvalidTransitionProbabilitiesError, match="period 1"):
        accelerated.solve(FAILING["probability above 1"])
    jax.clear_caches()


def _loop_bodies(text: str) -> list[str]:
    """The computations of the compiled program's while loops' bodies."""
    computations = dict(
        re.findall(r"^(?:ENTRY )?%(\S+) \(.*?\{\n(.*?)\n\}", text, re.MULTILINE | re.DOTALL)
    )
    names = re.findall(r"while\(.*?body=%([^,\s]+)", text)
    return [computations[name] for name in names]


def _kernels_over(text: str, points: int) -> int:
    """The kernels (fusions) of the period loop's body that read or write an array of at
    least `points` elements."""
    headers = dict(re.findall(r"^%(\S+) \((.*?)\) -> (?:.*?) \{", text, re.MULTILINE))
    signatures = {name: args for name, args in headers.items()}
    count = 0
    for body in _loop_bodies(text):
        for line in body.splitlines():
            fusion = re.match(r"\s*(?:ROOT )?%\S+ = (.*?) fusion\(.*?calls=%([^,\s]+)", line)
            if fusion is None:
                continue
            shapes = fusion.group(1) + " " + signatures.get(fusion.group(2), "")
            sizes = [
                int(np.prod([int(d) for d in dims.split(",")]))
                for dims in re.findall(r"\[([\d,]+)\]", shapes)
            ]
            count += any(size >= points for size in sizes)
    return count


def test_validation_adds_no_pass_over_the_product():
    apart = model()
    checked = apart.checked_params(params())
    texts = {
        validate: jax.jit(functools.partial(apart._solve, validate=validate, progress=None))
        .lower(checked)
        .compile()
        .as_text()
        for validate in (True, False)
    }
    pairs = N_WEALTH * N_INCOME * 2 * N_CONSUMPTION
    unvalidated = _kernels_over(texts[False], pairs)
    assert unvalidated >= 1  # the Bellman kernel itself
    # The checks that depend on the period or the parameters alone are reduced on their
    # own axes; `next_wealth:finite`, on the whole product, depends on neither the
    # period nor next period's values, so XLA hoists it out of the loop.
    assert _kernels_over(texts[True], pairs) == unvalidated


@pytest.mark.parametrize(
    ("shape", "axes", "merged"),
    [
        ((39, 20, 2, 5), (1, 2, 3), ((39, 200), (1,))),
        ((4, 5, 6), (0, 2), ((4, 5, 6), (0, 2))),  # not consecutive: nothing merged
        ((4, 5, 6), (0, 1), ((20, 6), (0,))),
        ((2, 3, 4, 5), (0, 1, 3), ((6, 4, 5), (0, 2))),  # axis 2 (sharded) kept apart
        ((2, 3), (), ((2, 3), ())),
    ],
)
def test_merged_axes(shape, axes, merged):
    from lcm_eqx._solve._reduce import merged_axes

    assert merged_axes(shape, axes) == merged
    x = np.arange(np.prod(shape), dtype=float).reshape(shape)
    new_shape, new_axes = merged
    np.testing.assert_array_equal(np.max(x.reshape(new_shape), axis=new_axes), np.max(x, axis=axes))
