"""Automatic splay: where a period's state-action product would take more than
`EVALUATION_BYTES` at once, a pointwise solver splays state axes by itself, with the
same solution as the plain evaluation, and `describe()` says so."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lcm_eqx._solve import _axes, _grid_search, _solver
from lcm_eqx._solve._axes import Axis, auto_splayed
from tests.models import retirement


def _axis(name, n, batch_size=0, distributed=False):
    return Axis(name, jnp.zeros(n), batch_size, False, distributed)


def test_the_largest_axes_are_splayed_to_the_largest_chunk_that_fits():
    states = (_axis("wealth", 50), _axis("effort", 40), _axis("health", 2))
    actions = (_axis("saving", 50), _axis("labor", 3))
    # 4,000 states x 150 actions x 8 bytes = 4.8 MB: fits 5 MB as it is.
    assert auto_splayed(states, actions, 8, budget=5_000_000) == states
    # 1 MB: wealth alone in chunks of 10 (10 x 40 x 2 x 150 x 8 = 0.96 MB).
    splayed = auto_splayed(states, actions, 8, budget=1_000_000)
    assert [a.batch_size for a in splayed] == [10, 0, 0]
    # 10 kB: wealth one point at a time, then effort in chunks of 4 (4 x 2 x 150 x 8).
    splayed = auto_splayed(states, actions, 8, budget=10_000)
    assert [a.batch_size for a in splayed] == [1, 4, 0]


def test_the_users_knobs_are_kept_and_sharded_axes_never_splayed():
    states = (_axis("wealth", 50, batch_size=25), _axis("type", 4, distributed=True))
    actions = (_axis("consumption", 100, batch_size=10),)
    # The product evaluated at once is 25 x 4 x 10 points: the user's knobs count.
    assert auto_splayed(states, actions, 8, budget=8 * 1000) == states
    splayed = auto_splayed(states, actions, 8, budget=8 * 100)
    assert [a.batch_size for a in splayed] == [25, 0]  # nothing left that may be splayed


def test_an_automatically_splayed_solve_equals_the_plain_one(monkeypatch):
    params = retirement.PARAMS
    plain = retirement.build(3, 40, 60).solve(params)
    # Working: 40 wealth x 2 labor x 60 consumption x itemsize: chunks of 5 wealth points.
    itemsize = jnp.zeros(()).dtype.itemsize
    monkeypatch.setattr(_axes, "EVALUATION_BYTES", 5 * 2 * 60 * itemsize)
    model = retirement.build(3, 40, 60)
    assert "automatic splay): wealth batch_size=5" in str(model.describe())
    # The solve itself splays (not only describe's report of it).
    chosen = []

    def recording(*args, **kwargs):
        axes = auto_splayed(*args, **kwargs)
        chosen.append({a.name: a.batch_size for a in axes})
        return axes

    # Grid search evaluates its values (the checks apart) in `_grid_search`; other
    # pointwise solvers in `_solver`.
    monkeypatch.setattr(_solver, "auto_splayed", recording)
    monkeypatch.setattr(_grid_search, "auto_splayed", recording)
    splayed = model.solve(params)
    assert {"wealth": 5} in chosen and {"wealth": 10} in chosen  # working, retired
    # The same to round-off, as the user's splay (XLA fuses a chunk's sums differently).
    tolerance = 16 * float(jnp.finfo(jnp.zeros(()).dtype).eps)
    for name in ("working", "retired"):
        np.testing.assert_allclose(splayed.values[name], plain.values[name], rtol=tolerance)


def test_a_model_that_fits_is_not_splayed():
    summary = retirement.build(3, 40, 60).describe()
    assert all(not r.automatic_splay for r in summary.regimes)
    assert "automatic splay" not in str(summary)
