"""`Model.describe` sizes the model and computes the chunking that fits a memory budget."""

import jax
import numpy as np

from benchmarks import _models


def _temp_bytes(model, params) -> int:
    return model._solve.lower(params, validate=True).compile().memory_analysis().temp_size_in_bytes


def test_describe_reports_sizes_and_memory():
    model = _models._large(2, n_wealth=60, n_consumption=80)
    summary = model.describe(_models.LARGE_PARAMS)
    alive = summary.regimes[0]
    assert alive.state_action_points == 60 * 7 * 2 * 4 * 2 * 80
    assert summary.state_action_points_per_period == alive.state_action_points + 1
    assert summary.temp_bytes == _temp_bytes(model, _models.LARGE_PARAMS)
    text = str(summary)
    assert "wealth LinSpacedGrid(60)" in text and "XLA compiled memory" in text


def test_suggested_chunking_fits_the_budget_when_applied():
    params = _models.LARGE_PARAMS
    model = _models._large(2, n_wealth=64, n_consumption=80)
    budget = _temp_bytes(model, params) // 3
    advice = model.describe(params, memory_budget=budget).chunking
    assert advice.axis == "wealth" and advice.fits and advice.chunks > 1
    splayed = model.with_batch_size(advice.axis, advice.batch_size)
    assert _temp_bytes(splayed, params) <= budget
    # Fewest chunks: half as many would not fit.
    if advice.chunks > 2:
        fewer = model.with_batch_size(advice.axis, -(-64 // (advice.chunks // 2)))
        assert _temp_bytes(fewer, params) > budget
    # Same results.
    np.testing.assert_allclose(
        splayed.solve(params).values["alive"], model.solve(params).values["alive"], rtol=1e-6
    )
    jax.clear_caches()
