"""Simulation evaluates each regime's kernel only for the subjects in that regime, in
blocks (`in_blocks`); results must not depend on the blocking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lcm_eqx as lcm
from lcm_eqx._simulate import _simulate
from lcm_eqx._simulate._simulate import in_blocks


@pytest.mark.parametrize("block", [1, 3, 7, 50])
@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_in_blocks_equals_masked_vmap(block, share):
    rng = np.random.default_rng(0)
    n = 23
    x = jnp.asarray(rng.normal(size=n))
    y = {"a": jnp.asarray(rng.integers(0, 5, n)), "b": jnp.asarray(rng.normal(size=(n, 2)))}
    mask = jnp.asarray(rng.random(n) < share)

    def fn(x, y):
        return {"sum": x + y["b"].sum(), "code": y["a"] * 2}, jnp.stack([x, x**2])

    got = in_blocks(fn, (x, y), mask, block)
    want = jax.vmap(fn)(x, y)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        m = np.asarray(mask).reshape((n,) + (1,) * (g.ndim - 1))
        np.testing.assert_array_equal(np.where(m, g, 0), np.where(m, w, 0))
        np.testing.assert_array_equal(np.where(m, 0, g), 0)  # untouched elsewhere


def test_simulation_does_not_depend_on_the_block_size(monkeypatch):
    from benchmarks import _models

    model = _models._retirement(4, n_wealth=30, n_consumption=60)
    n = 40
    initial = {
        "regime": jnp.asarray(np.arange(n) % 2),
        # Not from wealth 1: on this coarse consumption grid (1, 7.8, ...) a poor retired
        # subject soon reaches a wealth below 1, where no consumption on the grid is
        # feasible (`InfeasibleStateError`).
        "wealth": jnp.linspace(100.0, 300.0, n),
    }
    params = _models.RETIREMENT_PARAMS
    frames = []
    for block in (_simulate.SUBJECT_BLOCK, 3):
        monkeypatch.setattr(_simulate, "SUBJECT_BLOCK", block)
        # a fresh model, so that the simulation is traced again with this block size
        model = _models._retirement(4, n_wealth=30, n_consumption=60)
        frames.append(model.simulate(params, initial, key=jax.random.key(1)).to_dataframe())
    assert (frames[0]["regime"] == "retired").any() and (frames[0]["regime"] == "working").any()
    import pandas as pd

    pd.testing.assert_frame_equal(frames[0], frames[1])


def test_simulated_subjects_beyond_a_continuous_grid_are_reported():
    """Issue 62: a wealth grid ending at 3 while simulated wealth grows beyond it is
    extrapolated; the simulation says how many subjects, how far and where (under the
    validation switch), and nothing when the grid covers them."""
    import warnings

    def build(top):
        alive = lcm.Regime(
            states={"wealth": lcm.LinSpacedGrid(start=1.0, stop=top, n_points=12)},
            actions={"consumption": lcm.LinSpacedGrid(start=0.1, stop=2.0, n_points=20)},
            functions={"utility": lambda consumption: jnp.log(consumption)},
            state_transitions={"wealth": lambda wealth, consumption: wealth - consumption + 3.0},
            transition=lambda: 0,
            constraints={"budget": lambda consumption, wealth: consumption <= wealth},
        )
        return lcm.Model(regimes={"alive": alive}, n_periods=6)

    initial = {"regime": jnp.zeros(4, dtype=int), "wealth": jnp.asarray([1.0, 1.5, 2.0, 2.5])}
    params = {"discount_factor": 0.95}
    with pytest.warns(lcm.LcmWarning, match=r"Regime 'alive', state 'wealth': \d+ simulated") as w:
        build(3.0).simulate(params, initial, key=jax.random.key(0))
    message = str(next(x.message for x in w if "beyond its grid" in str(x.message)))
    assert "beyond its grid [1, 3]" in message and "up to" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", lcm.LcmWarning)
        build(3.0).simulate(params, initial, key=jax.random.key(0), validate="off")
        build(20.0).simulate(params, initial, key=jax.random.key(0))
