"""Exact solution of the deterministic retirement model without taste shocks.

This is a test oracle, written in plain numpy (float64) and independent of `lcm_eqx`.
It solves the retirement model of Iskhakov, Jørgensen, Rust & Schjerning (2017,
Quantitative Economics 8(2)) *without* taste shocks and with continuous consumption
(no grids), in the timing of the `lcm_eqx` API contract:

- Periods ``t = 0, …, T-1``; the continuation value after the last period is zero.
- A *worker* with wealth ``M`` chooses ``labor`` (0 = work, 1 = retire) and consumption
  ``0 < c <= M``. Utility ``log(c) - delta * [work]``. Next wealth
  ``(1 + r) (M - c) + wage * [work]``: income earned in period ``t`` arrives in ``t+1``.
  Working keeps the agent in the working regime; retiring moves her to the retired
  regime from the next period on.
- A *retiree* (absorbing) chooses ``0 < c <= M``; utility ``log(c)``; next wealth
  ``(1 + r) (M - c)``.

Method. Once the labor path is fixed, what is left is a concave consumption problem with
a known income stream and the liquidity constraints ``c_s <= M_s``. With log utility the
unconstrained Euler equation is ``c_{s+1} = g c_s``, ``g = beta (1 + r)``, and the
Kuhn–Tucker conditions give ``c_{s+1} >= g c_s`` everywhere (with equality unless the
constraint binds at ``s``). Hence for every horizon ``b >= s`` the present value of
consumption over ``s..b`` is at least ``c_s * D(b - s)`` with ``D(m) = sum_{k<=m} beta^k``,
which must not exceed the resources available through ``b``,
``W_s(b) = M_s + sum_{j=s+1}^{b} y_j / (1+r)^(j-s)``; at the first period where the
constraint binds (or at ``T-1``) the bound holds with equality. So

    c_s = min_{b = s..T-1} W_s(b) / D(b - s),

which we apply forward, period by period, to get the whole consumption path.

A worker's labor path is "work in ``t, …, tau-1``, then retire" for some
``tau in {t, …, T}`` (``tau = T``: work to the end, dominated when ``delta > 0`` because
the last wage arrives after the horizon). The worker's value is the maximum over
``tau``; the retiree's is the ``tau = t`` path without disutility. Ties between working
and retiring are resolved towards *work* (label 0), as a first-index argmax would.
"""

from __future__ import annotations

import numpy as np

WORK = 0
RETIRE = 1


def _as_wealth(wealth):
    return np.atleast_1d(np.asarray(wealth, dtype=np.float64))


def _check_period(period, n_periods):
    if not 0 <= period < n_periods:
        raise ValueError(f"period must be in 0..{n_periods - 1}, got {period}")


def consumption_path(wealth, incomes, *, beta, r):
    """Optimal consumption path with a known income stream and liquidity constraints.

    Solves ``max sum_s beta^s log(c_s)`` over ``s = 0..n-1`` subject to
    ``M_{s+1} = (1+r)(M_s - c_s) + incomes[s+1]`` and ``0 < c_s <= M_s``,
    ``M_0 = wealth``.

    Args:
        wealth: initial wealth ``M_0 > 0``, any shape.
        incomes: length-``n`` sequence; ``incomes[s]`` arrives at the start of period
            ``s`` (``incomes[0]`` is ignored: it is already part of ``wealth``).
        beta: discount factor.
        r: interest rate, ``r >= 0`` (any ``r > -1`` works).

    Returns:
        ``(consumption, wealth_path)``, each of shape ``(n, *wealth.shape)``.
    """
    wealth = np.asarray(wealth, dtype=np.float64)
    incomes = np.asarray(incomes, dtype=np.float64)
    n = incomes.shape[0]
    gross = 1.0 + r
    # D[m] = sum_{k=0}^{m} beta^k: present value of a path growing at g = beta (1 + r).
    annuity = np.cumsum(beta ** np.arange(n))
    consumption = np.empty((n, *wealth.shape))
    wealth_path = np.empty((n, *wealth.shape))
    cash = wealth
    for s in range(n):
        wealth_path[s] = cash
        horizon = np.arange(n - s)
        discounted_future_income = np.cumsum(
            np.concatenate([[0.0], incomes[s + 1 :] / gross ** horizon[1:]])
        )
        resources = cash[..., None] + discounted_future_income
        consumption[s] = np.min(resources / annuity[: n - s], axis=-1)
        savings = np.maximum(cash - consumption[s], 0.0)
        if s + 1 < n:
            cash = gross * savings + incomes[s + 1]
    return consumption, wealth_path


def _path_value(consumption, beta, disutility):
    """Discounted utility of a consumption path (axis 0 = time) minus work disutility."""
    discount = beta ** np.arange(consumption.shape[0])
    return np.tensordot(discount, np.log(consumption), axes=1) - disutility


def value_retiring_at(period, wealth, retirement_date, *, T, beta, delta, wage, r=0.0):
    """Value and first consumption of working in ``period..retirement_date-1``, then not.

    ``retirement_date`` ranges over ``period..T``; ``T`` means working in every remaining
    period. Returns ``(value, consumption in period)``, each of shape ``(n_wealth,)``.
    """
    _check_period(period, T)
    if not period <= retirement_date <= T:
        raise ValueError(f"retirement_date must be in {period}..{T}, got {retirement_date}")
    wealth = _as_wealth(wealth)
    n = T - period
    worked = retirement_date - period
    incomes = np.zeros(n)
    # Income of working period s arrives at s + 1; the last period's wage never arrives.
    incomes[1 : min(worked, n - 1) + 1] = wage
    consumption, _ = consumption_path(wealth, incomes, beta=beta, r=r)
    disutility = delta * np.sum(beta ** np.arange(worked))
    return _path_value(consumption, beta, disutility), consumption[0]


def _worker_choices(period, wealth, *, T, beta, delta, wage, r):
    """Values and first-period consumptions of every retirement date ``period..T``."""
    outcomes = [
        value_retiring_at(period, wealth, date, T=T, beta=beta, delta=delta, wage=wage, r=r)
        for date in range(period, T + 1)
    ]
    values, consumptions = zip(*outcomes, strict=True)
    return np.stack(values), np.stack(consumptions)


def value_working_by_labor(period, wealth, *, T, beta, delta, wage, r=0.0):
    """Choice-specific values of a worker: ``(value if she works, value if she retires)``.

    Both assume optimal behaviour in every later period. Useful to skip comparisons near
    points of indifference.
    """
    values, _ = _worker_choices(period, wealth, T=T, beta=beta, delta=delta, wage=wage, r=r)
    return values[1:].max(axis=0), values[0]


def labor_working(period, wealth, *, T, beta, delta, wage, r=0.0):
    """Optimal labor choice of a worker: 0 = work, 1 = retire (ties go to work)."""
    value_work, value_retire = value_working_by_labor(
        period, wealth, T=T, beta=beta, delta=delta, wage=wage, r=r
    )
    return np.where(value_work >= value_retire, WORK, RETIRE)


def value_working(period, wealth, *, T, beta, delta, wage, r=0.0):
    """Value function of the working regime in ``period`` at ``wealth``."""
    value_work, value_retire = value_working_by_labor(
        period, wealth, T=T, beta=beta, delta=delta, wage=wage, r=r
    )
    return np.maximum(value_work, value_retire)


def consumption_working(period, wealth, *, T, beta, delta, wage, r=0.0):
    """Optimal consumption of a worker in ``period`` at ``wealth``."""
    values, consumptions = _worker_choices(
        period, wealth, T=T, beta=beta, delta=delta, wage=wage, r=r
    )
    # Index 0 of `values` is "retire now"; ties between working and retiring go to work,
    # as in `labor_working`.
    best_work = 1 + np.argmax(values[1:], axis=0)
    choice = np.where(values[1:].max(axis=0) >= values[0], best_work, 0)
    return np.take_along_axis(consumptions, choice[None], axis=0)[0]


def value_retired(period, wealth, *, T, beta, r=0.0, **_unused):
    """Value function of the retired regime: ``sum_k beta^k log(c_k)`` on the exact path.

    Without income the liquidity constraint never binds before the last period, so
    ``c_t = M / D(T-1-t)`` and consumption grows at ``beta (1 + r)``. Extra keyword
    arguments (``delta``, ``wage``) are accepted and ignored, so one parameter dict can
    be passed to every function of this module.
    """
    _check_period(period, T)
    wealth = _as_wealth(wealth)
    n = T - period
    consumption, _ = consumption_path(wealth, np.zeros(n), beta=beta, r=r)
    return _path_value(consumption, beta, 0.0)


def consumption_retired(period, wealth, *, T, beta, r=0.0, **_unused):
    """Optimal consumption of a retiree: ``M / sum_{k=0}^{T-1-t} beta^k``."""
    _check_period(period, T)
    wealth = _as_wealth(wealth)
    return wealth / np.sum(beta ** np.arange(T - period))
