"""The test harness: models with known solutions, each written once, and the solvers
that every model is solved with.

`CASES` is the list of (solver, model) pairs that `tests/test_solvers.py` runs its
transform tests on (jit, grad, vmap, splay, simulate, no recompilation). A new solver is
one line in `SOLVERS`: it then inherits every test on every model it `fits`.

A `Model` here is a recipe, not an `lcm.Model`: the solver is part of the `lcm.Model`,
so each case builds its own with `model.build(solver)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import lcm_eqx as lcm
from tests.models import retirement

# Tiny grids and three periods: every test compiles a solve, so size is run time.
N_PERIODS = 3
N_WEALTH = 12
N_CONSUMPTION = 40
N_SAVINGS = 30


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class Model:
    """A test model: how to build it with a solver, its parameters, and what is known.

    Attributes:
        name: the test id.
        build: `solver -> lcm.Model`.
        params: a valid parameter set.
        scalar: the name of one float parameter that the grad and vmap tests vary.
        initial_conditions: a few subjects on the wealth grid's points, where a
            simulated first-period value is the solution's value.
    """

    name: str
    build: Callable[[lcm.AbstractSolver], lcm.Model]
    params: dict
    scalar: str
    initial_conditions: dict


# API.md's retirement model; its exact solution is tests/oracles/retirement_analytical.py
# (checked on fine grids in tests/test_retirement_analytical.py).
RETIREMENT = Model(
    name="retirement",
    build=lambda solver: retirement.build(
        N_PERIODS, n_wealth=N_WEALTH, n_consumption=N_CONSUMPTION, solver=solver
    ),
    params=dict(retirement.PARAMS),
    scalar="disutility_of_work",
    initial_conditions={
        "regime": jnp.zeros(4, dtype=int),
        "wealth": jnp.asarray(np.linspace(1.0, 400.0, N_WEALTH)[[1, 3, 6, 9]]),
    },
)

# Each model once; a new one (taste shocks, a stochastic income) is one more entry.
MODELS = (RETIREMENT,)


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: a cache key
class Solver:
    """A solver under test: its test id, how to make it, and which models it fits."""

    name: str
    make: Callable[[], lcm.AbstractSolver]
    fits: Callable[[Model], bool] = lambda model: True


SOLVERS = (
    Solver("grid-search", lcm.GridSearch),
    Solver("dcegm", lambda: retirement.dcegm(N_SAVINGS)),
    # Consumption–saving: the refined optimum often sits on a kink of the interpolated
    # continuation, which takes more Newton steps than a smooth optimum (docs/solvers.md).
    Solver("grid-search-refined", lambda: lcm.GridSearch(refine=lcm.Refine(newton_steps=8))),
)

CASES = tuple((solver, model) for solver in SOLVERS for model in MODELS if solver.fits(model))
CASE_IDS = tuple(f"{solver.name}-{model.name}" for solver, model in CASES)


def force_accelerator_forms(monkeypatch) -> None:
    """Trace every `_numerics.by_platform` choice as for an accelerator (its `default`),
    so that the accelerator's forms run on the CPU; the caches are cleared first (a
    program traced before keeps the CPU's forms)."""
    from lcm_eqx import _numerics

    jax.clear_caches()
    monkeypatch.setattr(_numerics, "on_accelerator", lambda: True)
