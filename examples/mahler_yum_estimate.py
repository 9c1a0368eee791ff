"""Mahler & Yum (2024) estimated by gradient: the method of moments on the exact distribution.

`examples/mahler_yum.py`'s model with effort a continuous choice refined off its grid
(`build(continuous_effort=True)`, `GridSearch(refine=["effort"])`) and EV1 taste shocks on
the alive regime's discrete choices (labour supply and the effort adjustment), so that
every moment used below moves smoothly with the parameters. Five parameters are
estimated, each a scalar of `params` (the example's functions take three scales of its
tables):

- the effort cost's elasticity (`effort_elasticity`) and a scale of its age table
  (`effort_cost_scale`);
- a common scale of the two discount types' factors (`discount_factor_scale`);
- a scale of the work disutility's age table (`work_disutility_scale`);
- the consumption weight in bad health (`health_consumption_penalty`).

The steps:

1. Targets: the exact moments of `model.distribution` at the true parameters (no
   simulation noise; `lcm.estimate(..., targets=...)`): mean effort, the share in good
   health, mean wealth and the share not working, each at a few ages. A panel simulated
   at the truth (`--subjects`) gives the moments' covariance, so the standard errors are
   those of a sample of that size.
2. The derivative check: the exact Jacobian of the moments at the truth (forward mode,
   what the estimation uses) against central differences; the table counts, per
   parameter, the moments with a non-zero derivative that equals its central difference.
3. The estimation from a start 10–20 % away from the truth (damped Gauss–Newton with
   the exact Jacobian, sandwich standard errors), and the estimates against the truth in
   standard errors.
4. `--bootstrap B`: B panels of the same size simulated at the truth from new subjects,
   each estimated from its own data moments (recentred on the panels' mean: a simulated
   panel's moments carry a discretisation bias against the exact distribution's); the
   spread of those estimates against the reported standard errors. `--fix NAME` holds
   a parameter at the truth; `--bootstrap-steps` caps each replication's steps.

`--tangent-batch-size 1` computes the Jacobian one tangent at a time (`lcm.estimate`'s
`tangent_batch_size`): the same numbers in a fifth of the memory, which is what fits the
reduced grids on a 16 GB TPU (7.4 GiB there; 25.9 GB with the five tangents at once).

Run from the repository root: `python examples/mahler_yum_estimate.py` (tiny: 6 periods),
`--size reduced` for the reduced grids (39 periods; `--float32` on an accelerator without
float64). Measured on reduced (2 CPU cores, float64, 2026-12-07): 35 moments; every
parameter moves 34–35 of them, and 12–33 per parameter have exact derivatives equal to
central differences to 1e-5 (the discount scale's 12: wealth moments through the saving
grid's kinks); 8 Gauss–Newton steps from the perturbed start to the truth (within 1e-4
s.e.), 8.1 s per step compiled, 117 s in all with the compile (52.8 s), besides 15 s to
simulate the panel and 33 s for the derivative check. Since 2026-12-08 `lcm.estimate`
also checks the refinement at the estimate (`check_refinement`: 36 s with its compile,
14 s compiled; it finds 1.7 % of period 1's effort cells out of Newton steps, under the
5 % that warns, and says so in `result.message`): 140.5 s in all, cold cache.

The bootstrap, measured on reduced with the discount scale fixed (`--fix
discount_factor_scale --bootstrap 60 --bootstrap-steps 8`, stopped after 33
replications, 2,000 subjects each): standard error over the replications' spread 0.96
(effort elasticity), 1.13 (effort cost scale), 0.70 (work disutility scale) and 1.08
(bad-health consumption weight); 8 of the 33 replications converged within 8 steps, the
others stalled on the kinks that the grid argmaxes of saving leave in the wealth moments.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import jax

# `--float32` for an accelerator without float64 (a TPU); the derivative check needs
# float64 (its central differences) and is skipped there.
jax.config.update("jax_enable_x64", "--float32" not in sys.argv)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mahler_yum as my  # noqa: E402

# ---------------------------------------------------------------------------------------
# The model: the example's functions with a scalar scale on each age table.
# ---------------------------------------------------------------------------------------


def effort_cost(
    period,
    education,
    health,
    effort_value,
    effort_elasticity,
    effort_cost_grid,
    effort_cost_scale,
):
    return effort_cost_scale * my.effort_cost(
        period, education, health, effort_value, effort_elasticity, effort_cost_grid
    )


def work_disutility(
    labor_supply, health, education, period, work_disutility_grid, work_disutility_scale
):
    return work_disutility_scale * my.work_disutility(
        labor_supply, health, education, period, work_disutility_grid
    )


def discount_factor(discount_type, discount_factor_by_type, discount_factor_scale):
    return discount_factor_scale * discount_factor_by_type[discount_type]


# The free parameters: (path in params, true value, start, bounds).
FREE = {
    "effort_elasticity": (("alive", "effort_cost", "effort_elasticity"), 1.15, (0.2, 5.0)),
    "effort_cost_scale": (("alive", "effort_cost", "effort_cost_scale"), 0.85, (0.1, 10.0)),
    "discount_factor_scale": (
        ("alive", "discount_factor", "discount_factor_scale"),
        0.98,
        (0.8, 1.03),
    ),
    "work_disutility_scale": (
        ("alive", "work_disutility", "work_disutility_scale"),
        1.2,
        (0.1, 10.0),
    ),
    "health_consumption_penalty": (
        ("alive", "consumption_utility", "health_consumption_penalty"),
        0.9,
        (0.0, 1.0),
    ),
}  # the middle entry: the start as a multiple of the truth

TASTE_SHOCK_SCALE = 0.05


def build(
    size: str,
    *,
    n_subjects: int,
    seed: int = 0,
    taste_shock_scale=TASTE_SHOCK_SCALE,
    solver: lcm.AbstractSolver | None = None,
):
    """The estimable model at `size`, its true parameters and initial conditions
    (`solver`: the model's, by default `GridSearch(refine=["effort"])`)."""
    base, params, initial = my.build(
        size,
        n_subjects=n_subjects,
        seed=seed,
        continuous_effort=True,
        solver=lcm.GridSearch(refine=["effort"]) if solver is None else solver,
        taste_shock_scale=taste_shock_scale,
    )
    alive = base.regimes["alive"]
    alive = alive.replace(
        functions={
            **alive.functions,
            "effort_cost": effort_cost,
            "work_disutility": work_disutility,
            "discount_factor": discount_factor,
        }
    )
    model = lcm.Model(
        regimes={**base.regimes, "alive": alive},
        ages=lcm.AgeGrid(start=my.START_AGE, step=my.AGE_STEP),
        n_periods=base.n_periods,
        regime_ids=my.RegimeId,
        fixed_params=my.make_fixed_params(base.n_periods, None),
        solver=base.solver,
    )
    a = params["alive"]
    params["alive"] = {
        **a,
        "effort_cost": {**a["effort_cost"], "effort_cost_scale": 1.0},
        "work_disutility": {**a["work_disutility"], "work_disutility_scale": 1.0},
        "discount_factor": {**a["discount_factor"], "discount_factor_scale": 1.0},
    }
    return model, params, initial


def get(params, path):
    for key in path:
        params = params[key]
    return float(params)


def put(params, path, value):
    if len(path) == 1:
        return {**params, path[0]: jnp.asarray(value, dtype=float)}
    return {**params, path[0]: put(params[path[0]], path[1:], value)}


def profiles(n_periods: int) -> list[lcm.Profile]:
    """Mean effort, the good-health share, mean wealth and the share not working, at a
    few ages (every alive period on the tiny grids, where no one saves before 35, so
    wealth is left out); period 0 only where it varies."""
    last = n_periods - 2  # the last alive period
    if n_periods <= 8:
        every = list(range(0, last + 1))
        return [
            lcm.Profile("effort_value", regime="alive", periods=every),
            lcm.Profile("health", "good", regime="alive", periods=every[1:]),
            lcm.Profile("labor_supply", "retired", regime="alive", periods=every),
        ]
    later = list(range(2, last + 1, 4))
    return [
        lcm.Profile("effort_value", regime="alive", periods=list(range(0, last + 1, 4))),
        lcm.Profile("health", "good", regime="alive", periods=later),
        lcm.Profile("wealth", regime="alive", periods=later),
        lcm.Profile(
            "labor_supply", "retired", regime="alive", periods=range(1, my.RETIREMENT_PERIOD, 3)
        ),
    ]


def simulate_panel(model, params, initial, seed: int) -> pd.DataFrame:
    solution = model.solve(params)
    result = model.simulate(params, initial, solution, key=jax.random.key(seed))
    return result.to_dataframe(extra=["effort_value"], model=model, params=params)


def moment_labels(moments) -> list[str]:
    labels = {
        "effort_value": "mean effort",
        "health": "share good health",
        "wealth": "mean wealth",
        "labor_supply": "share not working",
    }
    return [f"{labels[p.name]} @{t}" for p in moments for t in p.periods]


@eqx.filter_jit
def _moments(problem, theta):
    return problem.moments(problem.model_params(theta))


def derivative_table(probe, names, step: float = 1e-5) -> tuple[pd.DataFrame, np.ndarray]:
    """Per parameter: moments with a non-zero derivative (|central difference| > 1e-6),
    and among them those whose exact derivative equals the central difference to 1e-5
    (relative, or absolute below 1)."""
    theta = np.asarray(probe.estimates)
    exact = np.asarray(probe.jacobian)
    central = np.empty_like(exact)
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[i] += step
        down[i] -= step
        central[:, i] = (
            np.asarray(_moments(probe.problem, jnp.asarray(up)))
            - np.asarray(_moments(probe.problem, jnp.asarray(down)))
        ) / (2 * step)
    nonzero = np.abs(central) > 1e-6
    error = np.abs(exact - central) / np.maximum(np.abs(central), 1.0)
    equal = nonzero & (error <= 1e-5)
    table = pd.DataFrame(
        {
            "moments": exact.shape[0],
            "non-zero": nonzero.sum(axis=0),
            "equal to CD (1e-5)": equal.sum(axis=0),
            "max rel. error (non-zero)": [
                float(np.max(error[nonzero[:, i], i])) if nonzero[:, i].any() else np.nan
                for i in range(theta.size)
            ],
        },
        index=names,
    )
    return table, central


def estimate(model, start, panel, moments, initial, targets=None, free_set=None, **options):
    free_set = FREE if free_set is None else free_set
    free = [path for path, _, _ in free_set.values()]
    bounds = {path: bound for path, _, bound in free_set.values()}
    return lcm.estimate(
        model,
        start,
        data=panel,
        method="msm",
        moments=moments,
        free=free,
        bounds=bounds,
        weighting="diagonal",
        initial=initial,
        targets=targets,
        **options,
    )


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(my.SIZES), default="tiny")
    parser.add_argument(
        "--subjects", type=int, default=2_000, help="the sample size the s.e. assume"
    )
    parser.add_argument("--bootstrap", type=int, default=0, help="bootstrap replications")
    parser.add_argument(
        "--bootstrap-steps", type=int, default=25, help="Gauss–Newton steps per replication"
    )
    parser.add_argument("--no-check", action="store_true", help="skip the derivative check")
    parser.add_argument("--float32", action="store_true", help="single precision (a TPU)")
    parser.add_argument("--max-steps", type=int, default=200, help="Gauss–Newton steps at most")
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        choices=sorted(FREE),
        help="hold this parameter at the truth (repeatable)",
    )
    parser.add_argument(
        "--tangent-batch-size",
        type=int,
        default=0,
        help="the Jacobian's tangents at a time (0: all; 1 fits reduced grids on a TPU)",
    )
    args = parser.parse_args(argv)
    if args.float32:
        args.no_check = True
    free_set = {name: spec for name, spec in FREE.items() if name not in args.fix}
    names = list(free_set)
    paths = [path for path, _, _ in free_set.values()]

    model, truth, initial = build(args.size, n_subjects=args.subjects)
    knobs = {"tangent_batch_size": args.tangent_batch_size, "free_set": free_set}
    moments = profiles(model.n_periods)
    labels = moment_labels(moments)
    print(
        f"Mahler–Yum ({args.size}, {model.n_periods} periods), continuous effort refined, "
        f"taste shocks {TASTE_SHOCK_SCALE}; {len(names)} parameters, {len(labels)} moments, "
        f"s.e. for {args.subjects} subjects"
    )

    clock = time.perf_counter()
    panel = simulate_panel(model, truth, initial, seed=1)
    setup = time.perf_counter() - clock
    print(f"solve and simulate {args.subjects} subjects (compile included): {setup:.1f} s")

    # The targets: the exact moments at the truth, from the estimation's own compiled
    # program (no steps; the Jacobian there comes along for the derivative check).
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)  # "did not converge": no steps
        probe = estimate(
            model, truth, panel, moments, initial, max_steps=0, check_refinement=False, **knobs
        )  # the estimation below checks its refinement at the estimate
    targets = np.asarray(probe.moments)
    compile_time = time.perf_counter() - clock
    print(f"exact moments and Jacobian at the truth (compile included): {compile_time:.1f} s")

    check = None
    if not args.no_check:
        clock = time.perf_counter()
        check, _ = derivative_table(probe, names)
        with pd.option_context("display.width", 120):
            print("\nderivatives at the truth: exact (forward mode) against central differences")
            print(check.to_string(float_format=lambda v: f"{v:.1e}"))
        print(f"({time.perf_counter() - clock:.1f} s)")

    start = truth
    for path, factor, _ in free_set.values():
        start = put(start, path, factor * get(truth, path))
    clock = time.perf_counter()
    result = estimate(
        model, start, panel, moments, initial, targets, max_steps=args.max_steps, **knobs
    )
    elapsed = time.perf_counter() - clock
    true_values = np.array([get(truth, p) for p in paths])
    se = np.sqrt(np.diag(result.covariance))
    table = pd.DataFrame(
        {
            "truth": true_values,
            "start": result.start,
            "estimate": result.estimates,
            "s.e.": se,
            "(est - truth)/s.e.": (result.estimates - true_values) / se,
        },
        index=names,
    )

    if args.bootstrap:
        clock = time.perf_counter()
        sizes = my.SIZES[args.size]
        panels, sampled = [], []
        for b in range(args.bootstrap):
            initial_b = my.make_initial_conditions(
                n_subjects=args.subjects,
                seed=100 + b,
                effort_grid=np.linspace(0.0, 1.0, sizes["effort"]),
                n=sizes,
                continuous_effort=True,
            )  # the same model (one compile), new subjects
            panels.append(simulate_panel(model, truth, initial_b, seed=200 + b))
            sampled.append(np.asarray(lcm.data_moments(model, panels[-1], moments)[0]))
        # A simulated panel's moments differ from the exact distribution's by a
        # discretisation bias (its lagged effort lies between the grid's nodes, where the
        # distribution splits it onto them), which standard errors do not measure: each
        # panel's moments are matched recentred on the panels' mean, so that the spread
        # of the estimates is the sampling noise alone.
        bias = np.mean(sampled, axis=0) - targets
        print(
            f"bootstrap: {args.bootstrap} panels simulated ({time.perf_counter() - clock:.1f} s);"
            f" their mean moments against the exact ones: |bias| up to {np.max(np.abs(bias)):.3g}"
        )
        draws = []
        for b, (panel_b, values) in enumerate(zip(panels, sampled, strict=True)):
            # The model's distribution starts from the same initial mass as the main
            # estimation's (`initial`); only the data are new, initial states included,
            # which is the sampling variation its standard errors measure.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", lcm.LcmWarning)  # a J statistic's warning
                fit = estimate(
                    model,
                    truth,
                    panel_b,
                    moments,
                    initial,
                    values - bias,
                    max_steps=args.bootstrap_steps,
                    check_refinement=False,  # checked by the estimation above
                    **knobs,
                )
            draws.append(fit.estimates)
            print(
                f"bootstrap {b + 1}: {fit.n_steps} steps, converged {fit.converged}, "
                + ", ".join(f"{v:.4f}" for v in fit.estimates),
                flush=True,
            )
        draws = np.asarray(draws)
        table["bootstrap sd"] = draws.std(axis=0, ddof=1)
        table["s.e. / bootstrap sd"] = se / table["bootstrap sd"]
        table["bootstrap mean"] = draws.mean(axis=0)
        print(f"bootstrap ({args.bootstrap} panels): {time.perf_counter() - clock:.1f} s")

    print(f"\nestimation: {'converged' if result.converged else 'not converged'}: {result.message}")
    with pd.option_context("display.width", 140):
        print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    per_step = elapsed / max(result.n_steps, 1)
    print(
        f"{result.n_steps} Gauss–Newton steps, {elapsed:.1f} s ({per_step:.1f} s per step, "
        f"compiled); first call with compile {compile_time:.1f} s; "
        f"in all {compile_time + elapsed:.1f} s"
    )
    return {
        "table": table,
        "check": check,
        "result": result,
        "times": {"setup": setup, "compile": compile_time, "estimation": elapsed},
    }


if __name__ == "__main__":
    main()
