"""`lcm.estimate` on the retirement model with taste shocks: warm time and a coverage study.

Three measurements:

- `timing`: the API.md retirement model (5 periods, 100 wealth and 500 consumption
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
- `bootstrap` (msm): the sandwich standard errors of one panel against the standard
  deviation of the estimates over panels resampled by subject.

Run: `python benchmarks/coverage.py timing`,
`python benchmarks/coverage.py coverage --method mle --replications 200 --n-wealth 40`.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
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


def fit(model, df, method: str, n_periods: int, beta_upper: float = 1.0):
    free = FREE if method == "mle" else MSM_FREE
    start = {**TRUE, **{k: START[k] for k in free}}
    # A finite horizon is solved for any discount factor; an upper bound of 1 truncates
    # the estimator's distribution (and fails the replications that reach it).
    bounds = {"discount_factor": (0.0, beta_upper)}
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
    estimates, errors, profiles, failures = [], [], [], []
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lcm.LcmWarning)  # failures are counted below
        for replication in range(args.replications):
            df = simulate(model, args.subjects, 1000 + replication)
            result = fit(model, df, args.method, args.n_periods, args.beta_upper)
            if not result.converged:
                failures.append(failure(result))
            else:
                estimates.append(result.estimates)
                errors.append({k: np.sqrt(np.diag(c)) for k, c in result.covariances.items()})
                if args.profile:
                    table = result.profile_intervals()
                    profiles.append(table[["profile_lower", "profile_upper"]].to_numpy())
            done = replication + 1
            if done % args.report_every == 0 or done == args.replications:
                report(args, names, estimates, errors, profiles, failures, done, began)


def failure(result) -> str:
    """Why an estimation did not converge, in a few words."""
    if result.at_bound.any():
        return "at a bound"
    for words in ("line search", "max_steps", "Newton step", "not positive definite"):
        if words in result.message:
            return words
    return result.message


def report(args, names, estimates, errors, profiles, failures, done, began) -> None:
    """Bias, RMSE, mean standard error and 95% coverage over the replications so far."""
    estimates = np.asarray(estimates)
    kinds = list(errors[0]) if errors else []
    truth = np.asarray([TRUE[n] for n in names])
    se = {k: np.asarray([e[k] for e in errors]) for k in kinds}
    covered = {k: np.abs(estimates - truth) <= 1.959963984540054 * se[k] for k in kinds}
    why = {reason: failures.count(reason) for reason in sorted(set(failures))}
    print(
        f"{args.method}: {len(estimates)} converged replications of {done} "
        f"(failed: {why or 0}), {args.subjects} subjects, grids {args.n_wealth}x"
        f"{args.n_consumption} ({args.solver}), {args.n_periods} periods, "
        f"{time.perf_counter() - began:.0f} s"
    )
    header = f"{'parameter':<20} {'truth':>8} {'bias':>9} {'rmse':>8}"
    header += "".join(f" {'se ' + k:>12} {'cover ' + k:>14}" for k in kinds)
    print(header + (f" {'cover profile':>13}" if profiles else ""))
    for i, name in enumerate(names):
        line = (
            f"{name:<20} {truth[i]:>8.3f} {np.mean(estimates[:, i]) - truth[i]:>9.4f} "
            f"{np.sqrt(np.mean((estimates[:, i] - truth[i]) ** 2)):>8.4f}"
        )
        line += "".join(
            f" {np.mean(se[k][:, i]):>12.4f} {np.mean(covered[k][:, i]):>14.3f}" for k in kinds
        )
        if profiles:
            edges = np.asarray(profiles)[:, i]
            inside = (edges[:, 0] <= truth[i]) & (truth[i] <= edges[:, 1])
            line += f" {np.mean(inside):>13.3f}"
        print(line, flush=True)


def bootstrap(args) -> None:
    model = build(args.solver, args.n_wealth, args.n_consumption, args.n_periods)
    df = simulate(model, args.subjects, 7)
    result = fit(model, df, "msm", args.n_periods)
    rng = np.random.default_rng(0)
    groups = {s: g for s, g in df.groupby("subject_id")}
    ids = np.asarray(list(groups))
    draws = []
    for _ in range(args.replications):
        chosen = rng.choice(ids, size=ids.size, replace=True)
        sample = [groups[s].assign(subject_id=k) for k, s in enumerate(chosen)]
        refit = fit(model, pd.concat(sample, ignore_index=True), "msm", args.n_periods)
        if refit.converged:
            draws.append(refit.estimates)
    spread = np.std(np.asarray(draws), axis=0, ddof=1)
    sandwich = np.sqrt(np.diag(result.covariance))
    print(f"msm bootstrap: {len(draws)} converged resamples of {args.replications}")
    print(f"{'parameter':<20} {'sandwich':>9} {'bootstrap':>9} {'ratio':>6}")
    for name, a, b in zip(MSM_FREE, sandwich, spread, strict=True):
        print(f"{name:<20} {a:>9.4f} {b:>9.4f} {a / b:>6.3f}")


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
    args = parser.parse_args()
    {"timing": timing, "coverage": coverage, "bootstrap": bootstrap}[args.what](args)


if __name__ == "__main__":
    main()
