"""Discretised AR(1) income processes usable as states."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import GridInitializationError
from ._ar1 import rouwenhorst, tauchen
from ._base import AbstractGrid

PROCESS_PARAMETERS = ("rho", "sigma", "mean")


class AbstractProcessGrid(AbstractGrid):
    """A discrete Markov chain approximating an AR(1) process, used as a state.

    User functions see the value of the current point (a float); the state transition is
    the chain's transition matrix, so the regime needs no `state_transitions` entry for
    it. Each of `rho`, `sigma`, `mean` left as `None` is a parameter, looked up like the
    parameters of the function `next_<state>`: `params[regime]["next_<state>"][name]`,
    `params[regime][name]` or `params[name]`. `mean` is the process's unconditional
    mean, `y' = mean * (1 - rho) + rho * y + eps`; from an intercept `mu`
    (`y' = mu + rho * y + eps`, pylcm's spelling) it is `mu / (1 - rho)`.
    """

    n_points_: eqx.AbstractVar[int]
    rho: eqx.AbstractVar[float | None]
    sigma: eqx.AbstractVar[float | None]
    mean: eqx.AbstractVar[float | None]
    is_discrete: ClassVar[bool] = True

    @property
    def n_points(self) -> int:
        return self.n_points_

    def free_parameters(self) -> tuple[str, ...]:
        """Names of the process parameters to be read from `params`."""
        return tuple(name for name in PROCESS_PARAMETERS if getattr(self, name) is None)

    def _check_process(self) -> None:
        name = type(self).__name__
        n = self.n_points_
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise GridInitializationError(f"{name}: n_points must be an int >= 2, got {n!r}.")
        if isinstance(self.rho, int | float) and not -1 < self.rho < 1:
            raise GridInitializationError(
                f"{name}: rho must lie strictly between -1 and 1, got {self.rho}."
            )
        if isinstance(self.sigma, int | float) and not self.sigma > 0:
            raise GridInitializationError(f"{name}: sigma must be > 0, got {self.sigma}.")
        self.check_knobs()

    def discretize(
        self, values: dict[str, Array]
    ) -> tuple[Float[Array, " n"], Float[Array, "n n"]]:
        """Points and transition matrix, with free parameters taken from `values`."""
        given = {name: getattr(self, name) for name in PROCESS_PARAMETERS}
        given.update(values)
        return self._discretize(given["rho"], given["sigma"], given["mean"])

    def _discretize(self, rho, sigma, mean):
        raise NotImplementedError


class RouwenhorstGrid(AbstractProcessGrid):
    """Rouwenhorst discretisation of an AR(1) with persistence `rho`, shock sd `sigma`.

    Exact in the chain's mean, variance and autocorrelation; preferred for persistent
    processes.

    Example:
        >>> income = RouwenhorstGrid(n_points=7, rho=0.95, sigma=0.1)
        >>> income = RouwenhorstGrid(n_points=7)   # rho, sigma are parameters
    """

    n_points_: int = eqx.field(static=True)
    rho: float | None
    sigma: float | None
    mean: float | None
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        n_points: int,
        rho=None,
        sigma=None,
        mean=0.0,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.n_points_ = n_points
        self.rho = rho
        self.sigma = sigma
        self.mean = mean
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self._check_process()

    def _discretize(self, rho, sigma, mean):
        return rouwenhorst(self.n_points_, rho, sigma, mean)


class TauchenGrid(AbstractProcessGrid):
    """Tauchen discretisation of an AR(1) on `mean ± n_std` stationary standard deviations.

    Example:
        >>> income = TauchenGrid(n_points=9, rho=0.9, sigma=0.2, n_std=3.0)
    """

    n_points_: int = eqx.field(static=True)
    rho: float | None
    sigma: float | None
    mean: float | None
    n_std: float = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        n_points: int,
        rho=None,
        sigma=None,
        mean=0.0,
        *,
        n_std: float = 3.0,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.n_points_ = n_points
        self.rho = rho
        self.sigma = sigma
        self.mean = mean
        self.n_std = n_std
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        self._check_process()
        if not self.n_std > 0:
            raise GridInitializationError(f"TauchenGrid: n_std must be > 0, got {self.n_std}.")

    def _discretize(self, rho, sigma, mean):
        return tauchen(self.n_points_, rho, sigma, mean, n_std=self.n_std)


class _AbstractIIDGrid(AbstractProcessGrid):
    """A state drawn afresh each period, independent of its current value, discretised
    by the `n_points`-point Gauss–Hermite rule `(x_k, w_k)`: nodes `mean + √2·sigma·x_k`,
    probabilities `w_k / √π` (every row of the transition matrix). `mean` and `sigma`
    left as `None` are parameters of `next_<state>`, like a process's."""

    n_points_: int = eqx.field(static=True)
    rho: float | None
    sigma: float | None
    mean: float | None
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        n_points: int,
        mean=None,
        sigma=None,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.n_points_ = n_points
        self.rho = 0.0  # independent draws: not a parameter
        self.sigma = sigma
        self.mean = mean
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        name = type(self).__name__
        n = self.n_points_
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise GridInitializationError(f"{name}: n_points must be an int >= 1, got {n!r}.")
        if isinstance(self.sigma, int | float) and not self.sigma > 0:
            raise GridInitializationError(f"{name}: sigma must be > 0, got {self.sigma}.")
        self.check_knobs()

    def _normal_nodes(self, sigma, mean):
        x, w = np.polynomial.hermite.hermgauss(self.n_points_)
        points = mean + np.sqrt(2.0) * sigma * jnp.asarray(x)
        probabilities = jnp.asarray(w / np.sqrt(np.pi))
        dtype = jnp.result_type(points)
        matrix = jnp.broadcast_to(probabilities.astype(dtype), (self.n_points_, self.n_points_))
        return points, matrix


class NormalIIDGrid(_AbstractIIDGrid):
    """An i.i.d. Normal(`mean`, `sigma`²) shock drawn each period (Gauss–Hermite nodes).

    Like `RouwenhorstGrid`, it needs no `state_transitions` entry and user functions see
    the node's value; `mean`, `sigma` left as `None` are parameters of `next_<state>`.

    Example:
        >>> shock = NormalIIDGrid(n_points=5, mean=0.0, sigma=0.1)
        >>> shock = NormalIIDGrid(n_points=5)   # mean, sigma are parameters
    """

    def _discretize(self, rho, sigma, mean):
        return self._normal_nodes(sigma, mean)


class LogNormalIIDGrid(_AbstractIIDGrid):
    """An i.i.d. log-normal shock: `exp` of a Normal(`mean`, `sigma`²) draw each period.

    Example:
        >>> income = LogNormalIIDGrid(n_points=5, mean=0.0, sigma=0.2)
    """

    def _discretize(self, rho, sigma, mean):
        points, matrix = self._normal_nodes(sigma, mean)
        return jnp.exp(points), matrix
