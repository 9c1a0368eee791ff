"""Discretised AR(1) income processes usable as states."""

from __future__ import annotations

import abc
import statistics
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import GridInitializationError
from ._ar1 import rouwenhorst, tauchen
from ._base import AbstractGrid

PROCESS_PARAMETERS = ("rho", "sigma", "mean")
# Initial conditions (and data) give a process state as its node values under its name,
# or as grid indices under its name with this suffix.
INDEX_SUFFIX = ":index"


def unknown_states_message(
    what: str, unknown: list[str], states: list[str], process: set[str] | list[str]
) -> str:
    """`<what> has unknown entries [...]; the states are [...]`, with how process states
    may be given (values, or grid indices under `<state>:index`): the message of
    `simulate`'s initial conditions and `compute_policy`'s states."""
    hint = (
        f" (process states as node values, or grid indices under "
        f"{sorted(s + INDEX_SUFFIX for s in process)})"
        if process
        else ""
    )
    return f"{what} has unknown entries {unknown}; the states are {states}{hint}"


def state_spellings(what: str, state: str, entries) -> tuple[list[str], str | None]:
    """The keys of `entries` that give `state` (its values under `state`, grid indices
    under `<state>:index`), and the message where both do (`None` otherwise): the check
    of `simulate`'s initial conditions and `compute_policy`'s states."""
    index_key = state + INDEX_SUFFIX
    given = [k for k in (state, index_key) if k in entries]
    both = (
        f"{what} has both {state!r} (values) and {index_key!r} (grid indices); give one of them."
        if len(given) > 1
        else None
    )
    return given, both


class AbstractProcessGrid(AbstractGrid):
    """A state whose transition is its own Markov chain on fixed nodes (an AR(1)
    discretisation or an i.i.d. draw).

    User functions see the value of the current node (a float); the state transition is
    the chain's transition matrix, so the regime needs no `state_transitions` entry for
    it. The parameters of the chain left as `None` at construction are looked up like
    the parameters of the function `next_<state>`: `params[regime]["next_<state>"][name]`,
    `params[regime][name]` or `params[name]`.
    """

    n_points_: eqx.AbstractVar[int]
    is_discrete: ClassVar[bool] = True
    # Drawn independently of its current value: every row of the matrix is the same.
    is_iid: ClassVar[bool] = False

    @property
    def n_points(self) -> int:
        return self.n_points_

    @abc.abstractmethod
    def free_parameters(self) -> tuple[str, ...]:
        """Names of the chain's parameters to be read from `params`."""

    @abc.abstractmethod
    def discretize(
        self, values: dict[str, Array]
    ) -> tuple[Float[Array, " n"], Float[Array, "n n"]]:
        """Nodes and transition matrix, with free parameters taken from `values`."""

    def parameter_shape(self, name: str) -> tuple[int, ...]:
        """The shape the free parameter `name` must have (a scalar unless overridden)."""
        del name
        return ()


class _AbstractAR1Grid(AbstractProcessGrid):
    """A discrete Markov chain approximating an AR(1) process.

    Each of `rho`, `sigma`, `mean` left as `None` is a parameter of `next_<state>`.
    `mean` is the process's unconditional mean, `y' = mean * (1 - rho) + rho * y + eps`;
    from an intercept `mu` (`y' = mu + rho * y + eps`, pylcm's spelling) it is
    `mu / (1 - rho)`.
    """

    rho: eqx.AbstractVar[float | None]
    sigma: eqx.AbstractVar[float | None]
    mean: eqx.AbstractVar[float | None]

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


class RouwenhorstGrid(_AbstractAR1Grid):
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


class TauchenGrid(_AbstractAR1Grid):
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


class _AbstractIIDGrid(_AbstractAR1Grid):
    """A state drawn afresh each period, independent of its current value, discretised
    by the `n_points`-point Gauss–Hermite rule `(x_k, w_k)`: nodes `mean + √2·sigma·x_k`,
    probabilities `w_k / √π` (every row of the transition matrix). `mean` and `sigma`
    left as `None` are parameters of `next_<state>`, like a process's."""

    is_iid: ClassVar[bool] = True

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


def _iid_matrix(probabilities: Array, n: int) -> Array:
    """The transition matrix of an i.i.d. draw: every row is `probabilities`."""
    return jnp.broadcast_to(probabilities, (n, n))


class UniformIIDGrid(AbstractProcessGrid):
    """An i.i.d. Uniform(`start`, `stop`) draw each period, at the midpoints of `n_points`
    equal-probability bins: nodes `start + (k + 1/2)·(stop − start)/n_points`, each with
    probability `1/n_points`.

    Like `NormalIIDGrid`, it needs no `state_transitions` entry and user functions see
    the node's value; `start`, `stop` left as `None` are parameters of `next_<state>`.
    (The midpoint rule integrates a function that is linear on each bin exactly.)

    Example:
        >>> adjustment_cost = UniformIIDGrid(n_points=5, start=0.0, stop=1.0)
        >>> adjustment_cost.discretize({})[0]
        Array([0.1, 0.3, 0.5, 0.7, 0.9], dtype=float64)
        >>> adjustment_cost = UniformIIDGrid(n_points=5)   # start, stop are parameters
    """

    is_iid: ClassVar[bool] = True

    n_points_: int = eqx.field(static=True)
    start: float | None
    stop: float | None
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        n_points: int,
        start=None,
        stop=None,
        *,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.n_points_ = n_points
        self.start = start
        self.stop = stop
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        n = self.n_points_
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise GridInitializationError(
                f"UniformIIDGrid: n_points must be an int >= 1, got {n!r}."
            )
        if (
            isinstance(self.start, int | float)
            and isinstance(self.stop, int | float)
            and not self.start < self.stop
        ):
            raise GridInitializationError(
                f"UniformIIDGrid: start must be < stop, got start={self.start}, stop={self.stop}."
            )
        self.check_knobs()

    def free_parameters(self) -> tuple[str, ...]:
        return tuple(name for name in ("start", "stop") if getattr(self, name) is None)

    def discretize(self, values):
        given = {"start": self.start, "stop": self.stop, **values}
        start, stop = given["start"], given["stop"]
        n = self.n_points_
        midpoints = (np.arange(n) + 0.5) / n  # host constants: exact in float64
        points = start + (stop - start) * jnp.asarray(midpoints)
        probabilities = jnp.full((n,), 1.0 / n, dtype=jnp.result_type(points))
        return points, _iid_matrix(probabilities, n)


class IIDGrid(AbstractProcessGrid):
    """An i.i.d. draw each period from given nodes with given probabilities.

    Nodes and probabilities are arrays, or `None` to make them parameters of
    `next_<state>` (then they can be estimated, and `n_points` says how many there
    are). Probabilities given here are checked at construction, probabilities given as
    parameters by `solve`'s validation (`validate="raise"`, like a `MarkovTransition`'s):
    non-negative and summing to 1 (tolerance 1e-6). They are never renormalised.

    `IIDGrid.equiprobable_normal` and `IIDGrid.equiprobable_lognormal` build the
    equiprobable discretisation of a normal or log-normal (HARK's equiprobable atoms),
    and `with_atom` adds a node such as an unemployment state.

    Args:
        points: the nodes, a 1-d array (any order; user functions see the node's value).
        probabilities: their probabilities, a 1-d array of the same length.
        n_points: the number of nodes; needed only when both are parameters.

    Example:
        >>> shock = IIDGrid(points=[-0.1, 0.0, 0.1], probabilities=[0.25, 0.5, 0.25])
        >>> income = IIDGrid.equiprobable_lognormal(7, mean=0.0, sigma=0.1).with_atom(0.3, 0.05)
        >>> estimated = IIDGrid(n_points=4)   # points, probabilities are parameters
    """

    is_iid: ClassVar[bool] = True

    n_points_: int = eqx.field(static=True)
    points: np.ndarray | None
    probabilities: np.ndarray | None
    batch_size: int = eqx.field(static=True)
    distributed: bool = eqx.field(static=True)

    def __init__(
        self,
        points: Sequence[float] | np.ndarray | None = None,
        probabilities: Sequence[float] | np.ndarray | None = None,
        *,
        n_points: int | None = None,
        batch_size: int = 0,
        distributed: bool = False,
    ):
        self.points = None if points is None else _vector("points", points)
        self.probabilities = (
            None if probabilities is None else _vector("probabilities", probabilities)
        )
        sizes = {
            name: value.shape[0]
            for name, value in (("points", self.points), ("probabilities", self.probabilities))
            if value is not None
        }
        if n_points is not None:
            sizes["n_points"] = n_points
        if not sizes:
            raise GridInitializationError(
                "IIDGrid: with both points and probabilities left as parameters, give "
                "n_points (the number of nodes)."
            )
        if len(set(sizes.values())) > 1:
            raise GridInitializationError(
                f"IIDGrid: points, probabilities and n_points disagree on the number of nodes: "
                f"{sizes}."
            )
        self.n_points_ = next(iter(sizes.values()))
        self.batch_size = batch_size
        self.distributed = distributed

    def __check_init__(self):
        n = self.n_points_
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise GridInitializationError(f"IIDGrid: n_points must be an int >= 1, got {n!r}.")
        p = self.probabilities
        if p is not None:
            if np.any(p < 0):
                raise GridInitializationError(
                    f"IIDGrid: probabilities must be >= 0, got {p.tolist()}."
                )
            if abs(float(np.sum(p)) - 1.0) > PROBABILITY_TOLERANCE:
                raise GridInitializationError(
                    f"IIDGrid: probabilities must sum to 1, got {p.tolist()} (sum "
                    f"{float(np.sum(p))!r}); they are never renormalised."
                )
        self.check_knobs()

    def free_parameters(self) -> tuple[str, ...]:
        return tuple(name for name in ("points", "probabilities") if getattr(self, name) is None)

    def parameter_shape(self, name: str) -> tuple[int, ...]:
        return (self.n_points_,)

    def discretize(self, values):
        given = {"points": self.points, "probabilities": self.probabilities, **values}
        points = jnp.asarray(given["points"])
        probabilities = jnp.asarray(given["probabilities"])
        dtype = jnp.result_type(points, probabilities, jnp.zeros(()).dtype)
        return points.astype(dtype), _iid_matrix(probabilities.astype(dtype), self.n_points_)

    @classmethod
    def equiprobable_normal(cls, n_points: int, mean: float, sigma: float, **knobs) -> IIDGrid:
        """The normal N(`mean`, `sigma`²) cut into `n_points` bins of probability
        `1/n_points` (edges at its quantiles `k/n_points`), each represented by its
        conditional mean `mean + sigma·n·(φ(z_{k−1}) − φ(z_k))`. The nodes keep the
        distribution's mean exactly and understate its variance."""
        edges = _standard_normal_edges(n_points, sigma)
        density = np.array([_PHI.pdf(z) if np.isfinite(z) else 0.0 for z in edges])
        points = mean + sigma * n_points * (density[:-1] - density[1:])
        return cls(points=points, probabilities=np.full(n_points, 1.0 / n_points), **knobs)

    @classmethod
    def equiprobable_lognormal(cls, n_points: int, mean: float, sigma: float, **knobs) -> IIDGrid:
        """`exp` of a N(`mean`, `sigma`²) draw cut into `n_points` bins of probability
        `1/n_points`, each represented by its conditional mean
        `n·exp(mean + sigma²/2)·(Φ(z_k − sigma) − Φ(z_{k−1} − sigma))` (HARK's
        equiprobable log-normal atoms). The nodes keep the mean `exp(mean + sigma²/2)`
        exactly."""
        edges = _standard_normal_edges(n_points, sigma)
        shifted = np.array([_PHI.cdf(z - sigma) if np.isfinite(z) else float(z > 0) for z in edges])
        points = n_points * np.exp(mean + sigma**2 / 2) * (shifted[1:] - shifted[:-1])
        return cls(points=points, probabilities=np.full(n_points, 1.0 / n_points), **knobs)

    def with_atom(self, point: float, probability: float) -> IIDGrid:
        """This grid with one more node, `point`, drawn with `probability`; the other
        nodes keep their relative probabilities, scaled by `1 − probability` (HARK's
        unemployment atom: income `point` with the unemployment probability). The new
        node comes first."""
        if self.points is None or self.probabilities is None:
            raise GridInitializationError(
                "IIDGrid.with_atom: the grid's points and probabilities must be arrays, not "
                "parameters; write the IIDGrid with the extra node instead."
            )
        if not 0 <= probability <= 1:
            raise GridInitializationError(
                f"IIDGrid.with_atom: probability must lie in [0, 1], got {probability!r}."
            )
        return IIDGrid(
            points=np.concatenate([[point], self.points]),
            probabilities=np.concatenate([[probability], (1 - probability) * self.probabilities]),
            batch_size=self.batch_size,
            distributed=self.distributed,
        )


PROBABILITY_TOLERANCE = 1e-6  # as `solve`'s check of transition probabilities in float64
_PHI = statistics.NormalDist()


def _standard_normal_edges(n_points: int, sigma: float) -> np.ndarray:
    """The standard normal's quantiles `k/n_points`, `k = 0..n_points` (±inf at the ends)."""
    if not isinstance(n_points, int) or isinstance(n_points, bool) or n_points < 1:
        raise GridInitializationError(f"IIDGrid: n_points must be an int >= 1, got {n_points!r}.")
    if not sigma > 0:
        raise GridInitializationError(f"IIDGrid: sigma must be > 0, got {sigma!r}.")
    inner = [_PHI.inv_cdf(k / n_points) for k in range(1, n_points)]
    return np.array([-np.inf, *inner, np.inf])


def _vector(name: str, value) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as error:
        raise GridInitializationError(
            f"IIDGrid: {name} must be a sequence of numbers, got {value!r:.80}."
        ) from error
    if array.ndim != 1:
        raise GridInitializationError(
            f"IIDGrid: {name} must be one-dimensional, got shape {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise GridInitializationError(f"IIDGrid: {name} must be finite, got {array.tolist()}.")
    return array
