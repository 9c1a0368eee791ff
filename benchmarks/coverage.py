"""`lcm.estimate` on the retirement model with taste shocks: warm time and a coverage study.

Three measurements:

- `timing`: the quick start's retirement model (5 periods, 100 wealth and 500 consumption
  points) with EV1 taste shocks on the labor choice, 2,000 simulated subjects, four
  free parameters (disutility of work, discount factor, taste-shock scale, wage)
  started 30% away from the truth, solved by `DCEGM` (100 savings points; `--solver
  grid` for the grid search, whose likelihood has kinks where the best consumption
  jumps between grid points, which L-BFGS may stall at); wall time of
  `lcm.estimate(..., method="mle")` with standard errors, first call (compilation
  included) and warm (median of repeats).
- `coverage`: simulate a panel from the truth with a new key, estimate, repeat; for
  each parameter the bias, the RMSE, the mean standard error and the share of 95%
  intervals (estimate ± 1.96 s.e.) that hold the truth, over the converged
  replications (the others are counted, with why they failed: at a bound, or not
  converged). The panels all have the same size, so the likelihood compiles once
  for the whole loop. `--profile` adds the coverage of the profile-likelihood
  intervals (`"mle"`; several re-maximisations per parameter and replication).
  `--method msm` matches the share working and mean wealth by age of the exact
  distribution.
- `bootstrap` (`--method msm` or `mle`): the standard errors of one panel against the standard
  deviation of the estimates over panels resampled by subject.

Run: `python benchmarks/coverage.py timing`,
`python benchmarks/coverage.py coverage --method mle --replications 400 --beta-upper 1.5
--lr --output benchmarks/results/coverage_mle.csv` (`--lr`: the profile-likelihood
coverage from one re-maximisation per parameter; `--output`: every replication as CSV),
`python benchmarks/coverage.py bootstrap --method msm --beta-upper 1.5`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from lcm_eqx._estimation._inference import to_unconstrained  # noqa: E402
from lcm_eqx._estimation._optimise import minimise  # noqa: E402
from tests.models import retirement  # noqa: E402

TRUE = {
    "discount_factor": 0.95,
    "interest_rate": 0.02,
    "disutility_of_work": 1.0,
    "wage": 20.0,
    "taste_shock_scale": 0.5,
}
FREE = ("disutility_of_work", "discount_factor", "taste_shock_scale", "wage")
START = {"disutility_of_work": 1.3, "discount_factor": 0.8, "taste_shock_scale": 0.65, "wage": 14.0}
POSITIVE = ("disutility_of_work", "wage")
MSM_FREE = ("disutility_of_work", "discount_factor", "taste_shock_scale")


def build(solver: str, n_wealth: int, n_consumption: int, n_periods: int):
    """The retirement model with taste shocks; `"dcegm"` (savings grid of `n_wealth`
    points) or `"grid"` (a grid search over `n_consumption` points)."""
    solver = retirement.dcegm(n_savings=n_wealth) if solver == "dcegm" else None
    return retirement.build(
        n_periods=n_periods,
        n_wealth=n_wealth,
        n_consumption=n_consumption,
        taste_shocks=True,
        solver=solver,
    )


def simulate(model, n_subjects: int, seed: int):
    rng = np.random.default_rng(seed)
    initial = {
        "regime": np.zeros(n_subjects, dtype=int),
        "wealth": rng.uniform(1.0, 100.0, n_subjects),
    }
    return model.simulate(TRUE, initial, key=jax.random.key(seed)).to_dataframe()


def moments(n_periods: int):
    return [
        lcm.Profile("labor", retirement.Labor.work, periods=range(n_periods - 1)),
        lcm.Profile("wealth", periods=range(1, n_periods - 1)),
    ]


def fit(model, df, method: str, n_periods: int, beta_upper: float = 1.0, start=None):
    free = FREE if method == "mle" else MSM_FREE
    start = {**TRUE, **{k: (start or START)[k] for k in free}}
    # A finite horizon is solved for any discount factor; an upper bound of 1 truncates
    # the estimator's distribution (and fails the replications that reach it).
    # The disutility of work and the wage are positive: bounded at 0, `summary()`'s
    # intervals for them are built on the log scale (see `lcm_eqx._estimation.
    # _inference.wald_interval`), where these skewed estimates are closer to normal.
    bounds = {
        "discount_factor": (0.0, beta_upper),
        **{k: (0.0, math.inf) for k in POSITIVE if k in free},
    }
    if method == "mle":
        return lcm.estimate(model, start, data=df, free=list(free), bounds=bounds)
    return lcm.estimate(
        model, start, data=df, method="msm", moments=moments(n_periods), free=list(free),
        bounds=bounds,
    )  # fmt: skip


def timing(args) -> None:
    model = build(args.solver, args.n_wealth, args.n_consumption, args.n_periods)
    df = simulate(model, args.subjects, 0)
    began = time.perf_counter()
    result = fit(model, df, "mle", args.n_periods)
    first = time.perf_counter() - began
    warm = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        result = fit(model, df, "mle", args.n_periods)
        warm.append(time.perf_counter() - began)
    print(result)
    print(
        f"MLE, {args.subjects} subjects, {len(FREE)} free, grids {args.n_wealth}x"
        f"{args.n_consumption} ({args.solver}), {args.n_periods} periods: "
        f"first call {first:.1f} s, warm "
        f"{statistics.median(warm):.2f} s (median of {args.repeats}: "
        f"{', '.join(f'{t:.2f}' for t in warm)}), {result.n_steps} L-BFGS steps"
    )


def coverage(args) -> None:
    model = build(args.solver, args.n_wealth, args.n_consumption, args.n_periods)
    names = FREE if args.method == "mle" else MSM_FREE
    rows = []
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)  # failures are counted below
        for replication in range(args.replications):
            df = simulate(model, args.subjects, 1000 + replication)
            result = fit(model, df, args.method, args.n_periods, args.beta_upper)
            row = {"replication": replication, "converged": bool(result.converged)}
            row["failure"] = "" if result.converged else failure(result)
            row["n_steps"] = result.n_steps
            summary = result.summary()
            for i, name in enumerate(names):
                row[f"estimate {name}"] = float(result.estimates[i])
                row[f"ci_lower {name}"] = float(summary.loc[name, "ci_lower"])
                row[f"ci_upper {name}"] = float(summary.loc[name, "ci_upper"])
                for kind, cov in result.covariances.items():
                    row[f"se {kind} {name}"] = float(np.sqrt(np.abs(cov[i, i])))
            if args.method == "mle" and args.lr:
                row.update(likelihood_ratios(result, names))
            if args.profile and result.converged:
                table = result.profile_intervals()
                for name in names:
                    row[f"profile_lower {name}"] = float(table.loc[name, "profile_lower"])
                    row[f"profile_upper {name}"] = float(table.loc[name, "profile_upper"])
            rows.append(row)
            done = replication + 1
            if done % args.report_every == 0 or done == args.replications:
                table = pd.DataFrame(rows)
                if args.output:
                    args.output.parent.mkdir(parents=True, exist_ok=True)
                    table.to_csv(args.output, index=False)
                report(args, names, table, began)


def likelihood_ratios(result, names) -> dict:
    """The likelihood-ratio statistics at the truth: `2 (ℓ̂ − ℓ(θ₀))` for all the free
    parameters at once (no maximisation) and, for each parameter `j`, the profile
    statistic `2 (ℓ̂ − max ℓ(θ_j = θ₀_j))`, the others maximised again (warm-started
    L-BFGS on the same compiled likelihood, as `profile_intervals` does). The profile
    interval of `j` holds the truth exactly when its statistic is below the χ²₁
    quantile, so its coverage needs one re-maximisation per parameter, not the search
    for both edges."""
    problem, n = result.problem, result.n_subjects
    tolerance, max_steps = result.settings
    truth = np.asarray([TRUE[name] for name in names])
    at_truth = problem.evaluate(jax.numpy.asarray(truth))[0]
    out = {"lr joint": 2.0 * (result.objective + at_truth * n)}
    x_hat = to_unconstrained(problem, result.estimates)
    for j, name in enumerate(names):
        fixed = np.arange(len(names)) == j
        x = x_hat.copy()
        x[j] = to_unconstrained(problem, np.where(fixed, truth, result.estimates))[j]
        _, value, gradient = minimise(problem, x, tolerance, max_steps, fixed)[:3]
        out[f"lr {name}"] = 2.0 * (result.objective + value * n)
        out[f"lr gradient {name}"] = gradient
    return out


def failure(result) -> str:
    """Why an estimation did not converge, in a few words."""
    if result.at_bound.any():
        return "at a bound"
    for words in ("line search", "max_steps", "Newton step", "not positive definite"):
        if words in result.message:
            return words
    return result.message


def report(args, names, table, began) -> None:
    """Bias, RMSE, mean standard error and 95% coverage over the converged replications:
    of the Wald intervals `θ̂ ± 1.96 se` for each covariance, of the Wald intervals on
    the log scale (`θ̂ exp(± 1.96 se / θ̂)`, the delta method for `log θ`; all these
    parameters are positive), of `summary()`'s intervals (`cover ci`: the Wald interval
    on the optimiser's scale, log or logit by the bounds), of the profile-likelihood
    intervals (`--lr`: the profile statistic at the truth below the χ²₁ quantile;
    `--profile`: the edges found), and of the joint likelihood-ratio region."""
    ok = table[table["converged"]]
    failed = table.loc[~table["converged"], "failure"].value_counts().to_dict()
    kinds = [c.split()[1] for c in table.columns if c.startswith("se ") and names[0] in c]
    z = 1.959963984540054
    print(
        f"{args.method}: {len(ok)} converged replications of {len(table)} "
        f"(failed: {failed or 0}), {args.subjects} subjects, grids {args.n_wealth}x"
        f"{args.n_consumption} ({args.solver}), {args.n_periods} periods, "
        f"{time.perf_counter() - began:.0f} s"
    )
    lr = f"lr {names[0]}" in ok
    profile = f"profile_lower {names[0]}" in ok
    header = f"{'parameter':<20} {'truth':>8} {'bias':>9} {'rmse':>8}"
    header += "".join(f" {'se ' + k:>12} {'cover ' + k:>14}" for k in kinds)
    header += f" {'cover log':>10} {'cover ci':>9}" + (f" {'cover LR':>9}" if lr else "")
    print(header + (f" {'cover profile':>13}" if profile else ""))
    for name in names:
        truth, estimate = TRUE[name], ok[f"estimate {name}"].to_numpy()
        line = (
            f"{name:<20} {truth:>8.3f} {np.mean(estimate) - truth:>9.4f} "
            f"{np.sqrt(np.mean((estimate - truth) ** 2)):>8.4f}"
        )
        for kind in kinds:
            se = ok[f"se {kind} {name}"].to_numpy()
            line += f" {np.mean(se):>12.4f} {np.mean(np.abs(estimate - truth) <= z * se):>14.3f}"
        se = ok[f"se {kinds[0]} {name}"].to_numpy()
        line += f" {np.mean(np.abs(np.log(estimate / truth)) <= z * se / estimate):>10.3f}"
        inside = (ok[f"ci_lower {name}"] <= truth) & (truth <= ok[f"ci_upper {name}"])
        line += f" {np.mean(inside):>9.3f}"
        if lr:
            line += f" {np.mean(ok[f'lr {name}'].to_numpy() <= z**2):>9.3f}"
        if profile:
            inside = (ok[f"profile_lower {name}"] <= truth) & (truth <= ok[f"profile_upper {name}"])
            line += f" {np.mean(inside):>13.3f}"
        print(line, flush=True)
    if lr:
        joint = ok["lr joint"].to_numpy()
        critical = {3: 7.814727903251178, 4: 9.487729036781154}[len(names)]
        print(
            f"joint LR region ({len(names)} parameters): coverage {np.mean(joint <= critical):.3f}"
            f", mean statistic {np.mean(joint):.2f} (the χ² mean is {len(names)})",
            flush=True,
        )


def bootstrap(args) -> None:
    """The standard errors of one panel (seed 7) against the standard deviation of the
    estimates over panels resampled by subject (each refit warm-started at the panel's
    estimates, which moves where the optimiser starts, not where it stops)."""
    model = build(args.solver, args.n_wealth, args.n_consumption, args.n_periods)
    names = FREE if args.method == "mle" else MSM_FREE
    df = simulate(model, args.subjects, 7)
    result = fit(model, df, args.method, args.n_periods, args.beta_upper)
    warm = dict(zip(names, result.estimates, strict=True))
    rng = np.random.default_rng(0)
    groups = {s: g for s, g in df.groupby("subject_id")}
    ids = np.asarray(list(groups))
    draws, failed = [], 0
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)  # failures are counted below
        for _ in range(args.replications):
            chosen = rng.choice(ids, size=ids.size, replace=True)
            sample = [groups[s].assign(subject_id=k) for k, s in enumerate(chosen)]
            resampled = pd.concat(sample, ignore_index=True)
            refit = fit(model, resampled, args.method, args.n_periods, args.beta_upper, warm)
            if refit.converged:
                draws.append(refit.estimates)
            else:
                failed += 1
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(draws, columns=list(names)).to_csv(args.output, index=False)
    spread = np.std(np.asarray(draws), axis=0, ddof=1)
    print(
        f"{args.method} bootstrap: {len(draws)} converged resamples of {args.replications} "
        f"({failed} not converged), {args.subjects} subjects, "
        f"{time.perf_counter() - began:.0f} s; estimates {np.round(result.estimates, 4)}"
    )
    kinds = list(result.covariances)
    print(f"{'parameter':<20} {'bootstrap':>9}" + "".join(f" {k:>9} {'ratio':>6}" for k in kinds))
    for i, name in enumerate(names):
        line = f"{name:<20} {spread[i]:>9.4f}"
        for kind in kinds:
            se = math.sqrt(abs(result.covariances[kind][i, i]))
            line += f" {se:>9.4f} {se / spread[i]:>6.3f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("timing", "coverage", "bootstrap"))
    parser.add_argument("--method", choices=("mle", "msm"), default="mle")
    parser.add_argument("--solver", choices=("dcegm", "grid"), default="dcegm")
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--subjects", type=int, default=2000)
    parser.add_argument("--n-wealth", type=int, default=100)
    parser.add_argument("--n-consumption", type=int, default=500)
    parser.add_argument("--n-periods", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--report-every", type=int, default=25)
    parser.add_argument("--profile", action="store_true", help="profile-likelihood coverage")
    parser.add_argument("--beta-upper", type=float, default=1.0, help="discount factor bound")
    parser.add_argument("--lr", action="store_true", help="likelihood ratios at the truth")
    parser.add_argument("--output", type=Path, default=None, help="CSV of the replications")
    args = parser.parse_args()
    {"timing": timing, "coverage": coverage, "bootstrap": bootstrap}[args.what](args)


if __name__ == "__main__":
    main()
