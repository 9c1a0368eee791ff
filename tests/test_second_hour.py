"""The new user's second hour (issue 62), at small sizes: the 31-period model of
`benchmarks/second_hour.py` (working, retired and dead regimes, Gompertz mortality,
income drawn after the decision with an unemployment atom, a consumption floor solved by
`DCEGM(kinks=BudgetKinks(1))`, taste shocks on work/retire, mandatory retirement at 69
as a constraint on the discrete choice) over fewer ages and points.

- A second panel of the same size (as many subjects; another number of rows, as
  subjects die and retire at other ages) traces nothing again, in `lcm.log_likelihood`
  and in `lcm.estimate`: the issue's second panel took 113 s against 50 s for the first.
- The gradient of the log-likelihood in the three estimated parameters equals central
  differences in float64 (slow: the DC-EGM gradient compiles for about a minute).
"""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from benchmarks import second_hour  # noqa: E402
from lcm_eqx._estimation import _likelihood as likelihood_module  # noqa: E402
from lcm_eqx._estimation import _objective as objective_module  # noqa: E402

FREE = list(second_hour.FREE)


def small_model(n_periods=4):
    """Ages 66 to 69 (mandatory retirement binds at 69), 12 wealth and savings points,
    two log-normal atoms and the unemployment atom."""
    return second_hour.build(
        n_periods=n_periods, start_age=70 - n_periods, n_wealth=12, n_savings=12, n_income=2
    )


@pytest.fixture(scope="module")
def two_panels():
    """The small model and two panels of 60 subjects: another number of rows (deaths),
    the same shapes once prepared."""
    model, truth = small_model(), second_hour.true_params()
    panels = [second_hour.panel(model, truth, 60, seed) for seed in (1, 3)]
    assert len(panels[0]) != len(panels[1])
    shapes = [jax.tree.map(np.shape, lcm.prepare_data(model, df).blocks) for df in panels]
    assert shapes[0] == shapes[1]
    return model, truth, panels


def count_calls(monkeypatch, module, name):
    """Count the calls of `module.name`: run at trace time, they count traces."""
    calls = []
    function = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_log_likelihood_of_a_second_panel_of_the_same_size_traces_nothing(two_panels, monkeypatch):
    model, truth, panels = two_panels
    traces = count_calls(monkeypatch, likelihood_module, "_map_rows")
    after = []
    for df in panels:
        assert np.isfinite(float(lcm.log_likelihood(model, truth, df)))
        after.append(len(traces))
    assert after == [1, 1]  # one term (the working regime's choices), traced once


@pytest.mark.slow  # compiles the DC-EGM log-likelihood's gradient (about a minute)
def test_estimate_on_a_second_panel_of_the_same_size_traces_nothing(two_panels, monkeypatch):
    model, _, panels = two_panels
    traces = count_calls(monkeypatch, objective_module, "block_log_likelihoods")
    after = []
    for df in panels:
        with pytest.warns(lcm.LcmWarning, match="did not converge"):  # one step
            result = lcm.estimate(
                model, second_hour.start_params("near"), data=df, free=FREE, max_steps=1
            )
        assert result.n_steps == 1
        after.append(len(traces))
    assert after == [1, 1]


@pytest.mark.slow  # the DC-EGM log-likelihood and its gradient compile for about 2 minutes
def test_log_likelihood_gradient_matches_central_differences():
    model, truth = small_model(n_periods=10), second_hour.true_params()
    data = lcm.prepare_data(model, second_hour.panel(model, truth, 300, 1))
    # Rows at 69, where working is ruled out: the constraint's log-sum-exp is exercised.
    working = data.blocks["working"]
    assert np.any(working.mask[working.periods == 9])

    def log_likelihood(free):
        return lcm.log_likelihood(model, {**truth, **free}, data)

    at = {name: truth[name] for name in FREE}
    gradient = jax.jit(jax.grad(log_likelihood))(at)
    value = jax.jit(log_likelihood)
    h = 1e-6
    for name in FREE:
        up = value({**at, name: at[name] + h})
        down = value({**at, name: at[name] - h})
        central = float((up - down) / (2 * h))
        assert np.isfinite(float(gradient[name])), name
        np.testing.assert_allclose(float(gradient[name]), central, rtol=1e-5, err_msg=name)
