"""Calibrate the retirement model to its own moments by gradient descent.

The model of `examples/retirement_dcegm.py` (Iskhakov, Jørgensen, Rust & Schjerning
2017) with taste shocks on the work/retire choice, solved with `lcm.DCEGM`. Targets: the
share working and mean wealth at each age, computed by `model.distribution` (the exact
distribution over the wealth grid, no simulation) at known parameters. Starting 30% away
from them, optax's L-BFGS recovers the disutility of work, the discount factor and the
taste-shock scale by minimising the squared distance between the model's moments and
the targets, with `jax.grad` through the solve and the distribution.

Prints the start, the estimate and the largest moment error, and saves a figure next to
this script (`examples/calibrate_moments.png`): the targets, the moments at the start and
at the fit.

Run from the repository root: `python examples/calibrate_moments.py`.
"""

import time
from enum import IntEnum
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import lcm_eqx as lcm  # noqa: E402


class RegimeId(IntEnum):
    working = 0
    retired = 1


class Labor(IntEnum):
    work = 0
    retire = 1


def utility(consumption, labor, disutility_of_work):
    return jnp.log(consumption) - disutility_of_work * (labor == Labor.work)


def utility_retired(consumption):
    return jnp.log(consumption)


def labor_income(labor, wage):
    return jnp.where(labor == Labor.work, wage, 0.0)


def next_wealth(wealth, consumption, labor_income, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + labor_income


def next_wealth_retired(wealth, consumption, interest_rate):
    return (1 + interest_rate) * (wealth - consumption)


def next_regime(labor):
    return jnp.where(labor == Labor.work, RegimeId.working, RegimeId.retired)


def borrowing(consumption, wealth):
    return consumption <= wealth


N_PERIODS = 8
wealth = lcm.LinSpacedGrid(start=1.0, stop=300.0, n_points=120)
consumption = lcm.LinSpacedGrid(start=1.0, stop=300.0, n_points=100)  # not searched by DCEGM
savings = lcm.IrregSpacedGrid(points=[300.0 * (i / 119) ** 2 for i in range(120)])
solver = lcm.DCEGM(state="wealth", action="consumption", savings=savings)
working = lcm.Regime(
    states={"wealth": wealth},
    actions={"labor": lcm.DiscreteGrid(Labor), "consumption": consumption},
    functions={"utility": utility, "labor_income": labor_income},
    state_transitions={"wealth": next_wealth},
    transition=next_regime,
    constraints={"borrowing": borrowing},
    taste_shocks=lcm.ExtremeValueShocks(),
)
retired = lcm.Regime(
    states={"wealth": wealth},
    actions={"consumption": consumption},
    functions={"utility": utility_retired},
    state_transitions={"wealth": next_wealth_retired},
    transition=lambda: RegimeId.retired,
    constraints={"borrowing": borrowing},
)
model = lcm.Model(
    regimes={"working": working, "retired": retired},
    n_periods=N_PERIODS,
    regime_ids=RegimeId,
    solver=solver,
)

NAMES = ("disutility_of_work", "discount_factor", "taste_shock_scale")
TRUTH = {"disutility_of_work": 0.6, "discount_factor": 0.95, "taste_shock_scale": 0.2}
FIXED = {"interest_rate": 0.02, "wage": 20.0}
INITIAL = {
    "regime": jnp.zeros(100, dtype=int),
    "wealth": jnp.linspace(10.0, 60.0, 100),
}


def moments(params):
    """Share working (periods 0 … T-2) and mean wealth (periods 1 … T-1)."""
    dist = model.distribution(params, INITIAL, validate="off")
    return dist.share("labor", Labor.work)[:-1], dist.mean("wealth")[1:]


def params_from(x):
    """Unconstrained x -> parameters: log for the positive ones, logit for β."""
    return {
        **FIXED,
        "disutility_of_work": jnp.exp(x[0]),
        "discount_factor": jax.nn.sigmoid(x[1]),
        "taste_shock_scale": jnp.exp(x[2]),
    }


def to_x(values):
    d, beta, scale = values
    return jnp.array([jnp.log(d), jnp.log(beta / (1 - beta)), jnp.log(scale)])


def main() -> None:
    target_share, target_wealth = moments({**FIXED, **TRUTH})
    wealth_scale = jnp.mean(target_wealth)

    def residuals(x):
        share, mean_wealth = moments(params_from(x))
        return jnp.concatenate([share - target_share, (mean_wealth - target_wealth) / wealth_scale])

    def loss(x):
        return 0.5 * jnp.sum(residuals(x) ** 2)

    start_values = [
        1.3 * TRUTH["disutility_of_work"],
        0.7 * TRUTH["discount_factor"],
        1.3 * TRUTH["taste_shock_scale"],
    ]
    x = to_x(start_values)
    optimizer = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    @jax.jit
    def step(x, state):
        value, grad = value_and_grad(x, state=state)
        updates, state = optimizer.update(grad, state, x, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(x, updates), state, value

    start_moments = moments(params_from(x))
    state = optimizer.init(x)
    began = time.perf_counter()
    iterations = 0
    while iterations < 100:
        x, state, value = step(x, state)
        iterations += 1
        if float(value) < 1e-20:
            break
    elapsed = time.perf_counter() - began
    fit = params_from(x)
    share, mean_wealth = moments(fit)
    error = max(
        float(jnp.max(jnp.abs(share - target_share))),
        float(jnp.max(jnp.abs(mean_wealth - target_wealth) / target_wealth)),
    )
    print(f"L-BFGS: {iterations} iterations in {elapsed:.1f} s (including compilation)")
    for name, begin in zip(NAMES, start_values, strict=True):
        print(
            f"{name:>20}: truth {TRUTH[name]:.6f}  start {begin:.6f}  fit {float(fit[name]):.10f}"
        )
    print(f"largest moment error (share; relative for wealth): {error:.2e}")
    assert error < 1e-6, "the calibration did not reproduce the targets"

    periods = np.arange(N_PERIODS)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(periods[:-1], target_share, "ko", label="target")
    left.plot(periods[:-1], start_moments[0], "--", label="start")
    left.plot(periods[:-1], share, "-", label="fit")
    left.set(xlabel="period", ylabel="share working", title="Share working")
    right.plot(periods[1:], target_wealth, "ko", label="target")
    right.plot(periods[1:], start_moments[1], "--", label="start")
    right.plot(periods[1:], mean_wealth, "-", label="fit")
    right.set(xlabel="period", ylabel="mean wealth", title="Mean wealth")
    left.legend()
    figure.tight_layout()
    figure.savefig(Path(__file__).with_suffix(".png"), dpi=100)


if __name__ == "__main__":
    main()
