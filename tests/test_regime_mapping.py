"""A regime transition may return `{regime name: probability}` (issue 32, item 6): the
same solution and simulation as the vector in the order of `regime_ids`, whatever the
order of the dict."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests import test_errors as table  # noqa: E402


def by_name(labor, regime_transition):
    p = regime_transition[labor]
    return {"retired": p[1], "working": p[0]}  # not the order of regime_ids


def test_regime_probabilities_by_name_equal_the_vector():
    model = lcm.Model(
        **table.model_kwargs(working=table.working_regime(transition=lcm.MarkovTransition(by_name)))
    )
    reference = table.model()
    solution, expected = model.solve(table.PARAMS), reference.solve(table.PARAMS)
    for regime in expected.values:
        np.testing.assert_array_equal(solution.values[regime], expected.values[regime])
    conditions, key = table.initial_conditions(), jax.random.key(4)
    pd.testing.assert_frame_equal(
        model.simulate(table.PARAMS, conditions, solution, key=key).to_dataframe(),
        reference.simulate(table.PARAMS, conditions, expected, key=key).to_dataframe(),
    )
