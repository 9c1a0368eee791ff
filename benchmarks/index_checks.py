"""The cost of the out-of-bounds index checks on parameter arrays.

Under `validate="raise"` (the default), every user function with an array-valued
parameter runs under `checkify`'s index checks, and each check is reduced over the grids
like the probability checks. This script solves a mortality model whose wage and survival
probabilities are arrays indexed by `period` (the wage inside a helper evaluated at every
state-action point) three ways, in one run, timings interleaved:

- `checked`: validation on (the default), index checks included;
- `unchecked`: validation on, index checks left out (a patched build, for comparison);
- `off`: `validate="off"`, no checks at all.

    python benchmarks/index_checks.py [--x64] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from unittest import mock

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import interleaved


def build(n_wealth: int, n_consumption: int, n_periods: int):
    import jax.numpy as jnp

    import lcm_eqx as lcm

    wealth = lcm.LinSpacedGrid(1.0, 400.0, n_wealth)
    consumption = lcm.LinSpacedGrid(1.0, 400.0, n_consumption)

    def next_regime_working(labor, period, survival_probs):
        alive = survival_probs[period]
        return jnp.where(
            labor == 0, jnp.array([alive, 0.0, 1 - alive]), jnp.array([0.0, alive, 1 - alive])
        )

    def next_regime_retired(period, survival_probs):
        alive = survival_probs[period]
        return jnp.array([0.0, alive, 1 - alive])

    working = lcm.Regime(
        states={"wealth": wealth},
        actions={"labor": lcm.DiscreteGrid(["work", "retire"]), "consumption": consumption},
        functions={
            "utility": lambda consumption, labor, disutility: (
                jnp.log(consumption) - disutility * (labor == 0)
            ),
            "labor_income": lambda labor, period, wage: jnp.where(labor == 0, wage[period], 0.0),
        },
        state_transitions={
            "wealth": lambda wealth, consumption, labor_income, interest_rate: (
                (1 + interest_rate) * (wealth - consumption) + labor_income
            )
        },
        transition=lcm.MarkovTransition(next_regime_working),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    retired = lcm.Regime(
        states={"wealth": wealth},
        actions={"consumption": consumption},
        functions={"utility": lambda consumption: jnp.log(consumption)},
        state_transitions={
            "wealth": lambda wealth, consumption, interest_rate: (
                (1 + interest_rate) * (wealth - consumption)
            )
        },
        transition=lcm.MarkovTransition(next_regime_retired),
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    dead = lcm.Regime(functions={"utility": lambda: 0.0})
    model = lcm.Model({"working": working, "retired": retired, "dead": dead}, n_periods)
    params = {
        "discount_factor": 0.95,
        "interest_rate": 0.03,
        "disutility": 0.5,
        "wage": jnp.linspace(20.0, 30.0, n_periods),
        "survival_probs": jnp.linspace(0.99, 0.8, n_periods),
    }
    return model, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--n-wealth", type=int, default=200)
    parser.add_argument("--n-consumption", type=int, default=500)
    parser.add_argument("--n-periods", type=int, default=20)
    args = parser.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    from lcm_eqx._solve._kernel import RegimeProblem

    sizes = (args.n_wealth, args.n_consumption, args.n_periods)
    checked, params = build(*sizes)
    unchecked, _ = build(*sizes)
    off, _ = build(*sizes)
    calls = {
        "checked": lambda: checked._solve(params, validate=True),
        "unchecked": lambda: unchecked._solve(params, validate=True),
        "off": lambda: off._solve(params, validate=False),
    }
    jax.block_until_ready(calls["checked"]())
    with mock.patch.object(RegimeProblem, "_index_checks", lambda self: {}):
        jax.block_until_ready(calls["unchecked"]())  # compiled without the index checks
    jax.block_until_ready(calls["off"]())
    times = interleaved(calls, args.repeats)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"mortality model: wealth {sizes[0]}, consumption {sizes[1]}, {sizes[2]} periods")
    for name, seconds in median.items():
        print(f"{name:>10}: {1e3 * seconds:8.1f} ms (median of {args.repeats})")
    print(f"checked / unchecked: {median['checked'] / median['unchecked']:.3f}")
    print(f"checked / off:       {median['checked'] / median['off']:.3f}")
    print(f"unchecked / off:     {median['unchecked'] / median['off']:.3f}")


if __name__ == "__main__":
    main()
