"""What `estimate` optimises: the free parameters (`Free`), unobserved types (`Types`)
and the objective (`Objective`: minus the mean log-likelihood, or the moments'
quadratic form), a pure JAX function of the unconstrained coordinates, and its
derivatives."""

from __future__ import annotations

import math
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ._data import RegimeBlock
from ._likelihood import block_log_likelihoods
from ._moments import Profile


class Free(eqx.Module):
    """One free parameter: where it is in `params` (a scalar leaf, or the entry `index`
    of an array leaf), its label and its interval. An entry of a parameter the user gave
    as a labelled Series is also its `row` there, and labelled by the row's index."""

    path: tuple[str, ...] = eqx.field(static=True)
    lower: float = eqx.field(static=True)
    upper: float = eqx.field(static=True)
    index: tuple[int, ...] | None = eqx.field(static=True, default=None)
    row: int | None = eqx.field(static=True, default=None)
    row_label: str | None = eqx.field(static=True, default=None)

    @property
    def label(self) -> str:
        name = "/".join(self.path)
        if self.index is None:
            return name
        if self.row_label is not None:
            return f"{name}[{self.row_label}]"
        return f"{name}[{', '.join(str(i) for i in self.index)}]"

    def value_in(self, params) -> Any:
        """This parameter's value in `params` (the model's arrays or the user's Series)."""
        leaf = leaf_at(params, self.path)
        if self.index is None:
            return leaf
        if isinstance(leaf, pd.Series):
            return leaf.to_numpy()[self.row]
        return jnp.asarray(leaf)[self.index]

    def set_in(self, params, value) -> Any:
        """`params` with this parameter at `value` (traced or not; a labelled Series
        keeps its labels and order)."""
        if self.index is None:
            return with_leaf(params, self.path, value)
        leaf = leaf_at(params, self.path)
        if isinstance(leaf, pd.Series):
            values = leaf.to_numpy(dtype=float, copy=True)
            values[self.row] = float(value)
            return with_leaf(params, self.path, pd.Series(values, leaf.index, name=leaf.name))
        return with_leaf(params, self.path, jnp.asarray(leaf).at[self.index].set(value))

    def to_natural(self, x: float) -> tuple[float, float]:
        """`θ` and `dθ/dx` at the unconstrained `x` (a line search's wild trial step
        gives an infinite or boundary `θ`, whose objective it then rejects)."""
        lo, hi = self.lower, self.upper
        if math.isinf(lo) and math.isinf(hi):
            return x, 1.0
        with np.errstate(over="ignore"):
            growth = float(np.exp(x))
        if math.isinf(hi):
            return lo + growth, growth
        if math.isinf(lo):
            return hi - growth, -growth
        u = 0.5 * (1.0 + math.tanh(0.5 * x))  # the logistic function, without overflow
        return lo + (hi - lo) * u, (hi - lo) * u * (1.0 - u)

    def to_unconstrained(self, theta: float) -> float:
        lo, hi = self.lower, self.upper
        if math.isinf(lo) and math.isinf(hi):
            return theta
        if math.isinf(hi):
            return math.log(theta - lo)
        if math.isinf(lo):
            return math.log(hi - theta)
        u = (theta - lo) / (hi - lo)
        return math.log(u / (1 - u))


class Types(eqx.Module):
    """Unobserved types: a permanent discrete state left out of the data, with shares."""

    state: str = eqx.field(static=True)
    n_types: int = eqx.field(static=True)


class Objective(eqx.Module):
    """Everything the optimiser's objective needs; arrays are leaves, structure static."""

    model: Any = eqx.field(static=True)
    method: str = eqx.field(static=True)
    params: dict
    free: tuple[Free, ...] = eqx.field(static=True)
    types: Types | None = eqx.field(static=True)
    # "mle": the data's blocks (one set per unobserved type), each row's subject (a
    # cluster) in the blocks' layout (`n_clusters` at padding), and what the likelihood
    # reads. Not `ChoiceData`, whose number of rows is static: a panel of as many
    # subjects with another number of rows would trace and compile the objective again.
    data: tuple[dict[str, RegimeBlock], ...] | None
    clusters: dict[str, Any] | None
    n_clusters: int = eqx.field(static=True)
    terms: tuple = eqx.field(static=True)
    measurement_sd: Any
    # "msm"
    mass: dict | None
    profiles: tuple[tuple[Profile, tuple[int, ...]], ...] = eqx.field(static=True)
    data_moments: Any
    weight: Any
    # How many of the Jacobian's tangents run at once (0: all; `estimate`'s knob).
    tangent_batch_size: int = eqx.field(static=True, default=0)

    @property
    def n_free(self) -> int:
        return len(self.free) + (self.types.n_types - 1 if self.types else 0)

    def natural(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`θ` (the free parameters, then the type shares 1…K−1) and `dθ/dx` at `x`."""
        n = len(self.free)
        theta, jacobian = np.zeros(self.n_free), np.zeros((self.n_free, self.n_free))
        for i, f in enumerate(self.free):
            theta[i], jacobian[i, i] = f.to_natural(float(x[i]))
        if self.types:
            logits = np.concatenate([[0.0], x[n:]])
            shares = np.exp(logits - logits.max())
            shares = shares[1:] / shares.sum()
            theta[n:] = shares
            jacobian[n:, n:] = np.diag(shares) - np.outer(shares, shares)
        return theta, jacobian

    def model_params(self, theta):
        params = self.params
        for i, f in enumerate(self.free):
            params = f.set_in(params, theta[i])
        return params

    def shares(self, theta):
        rest = theta[len(self.free) :]
        return jnp.concatenate([1.0 - jnp.sum(rest, keepdims=True), rest])

    def contributions(self, params, theta):
        """`"mle"`: each subject's log-likelihood (the type shares read from `theta`)."""
        solution = self.model.solve(params, validate="off")
        clusters = cast(dict, self.clusters)

        def by_subject(blocks):
            by_block = block_log_likelihoods(
                self.model, self.terms, "off", params, blocks, solution, self.measurement_sd
            )
            total = jnp.zeros(self.n_clusters, jnp.result_type(float))
            for name, values in by_block.items():
                total = total + jax.ops.segment_sum(
                    values.reshape(-1), clusters[name].reshape(-1), self.n_clusters
                )
            return total

        if self.types is None:
            return by_subject(cast(Any, self.data)[0])
        per_type = jnp.stack([by_subject(d) for d in cast(Any, self.data)])
        log_shares = jnp.log(self.shares(theta))
        return jax.nn.logsumexp(per_type + log_shares[:, None], axis=0)

    def moments(self, params, mass=None):
        """`"msm"`: the model's moments (from the data's initial mass unless given)."""
        dist = self.model.distribution(params, self.mass if mass is None else mass, validate="off")
        return jnp.concatenate([profile.of(dist, periods) for profile, periods in self.profiles])

    def evaluate(self, theta) -> tuple[float, np.ndarray, np.ndarray]:
        """The objective, its gradient in `θ`, and the subjects' log-likelihoods
        (`"mle"`) or the model's moments (`"msm"`), from one compiled call."""
        if self.method == "mle":
            contributions, gradient = (np.asarray(a) for a in _likelihood_and_gradient(self, theta))
            n = contributions.shape[0]
            return -float(np.sum(contributions)) / n, -gradient / n, contributions
        moments, jacobian = (np.asarray(a) for a in moments_and_jacobian(self, theta))
        residual = moments - np.asarray(self.data_moments)
        weighted = np.asarray(self.weight) @ residual
        return 0.5 * float(residual @ weighted), jacobian.T @ weighted, moments


def with_leaf(tree, path, value):
    if len(path) == 1:
        return {**tree, path[0]: value}
    return {**tree, path[0]: with_leaf(tree[path[0]], path[1:], value)}


def leaf_at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _with_model_options(function):
    """`function(objective, θ)` under `eqx.filter_jit`, compiled with the XLA options that
    `model.solve` compiles with (`model.compiler_options()`: on a DC-EGM model, its ~120
    small kernels compile faster without XLA:CPU's fusion emitters), one wrapper per set
    of options; without them where this XLA refuses one."""
    programs: dict = {}

    def call(objective, theta):
        options = objective.model.compiler_options()
        key = tuple(sorted(options.items()))
        if key not in programs:
            programs[key] = eqx.filter_jit(
                function, **({"compiler_options": options} if options else {})
            )
        try:
            return programs[key](objective, theta)
        except jax.errors.JaxRuntimeError as error:
            if not options or "No such compile option" not in str(error):
                raise
            programs[key] = eqx.filter_jit(function)
            return programs[key](objective, theta)

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


# Derivatives are taken in `θ` alone, read into the parameters inside the function
# differentiated: the fixed parameters are constants there, so their tangents are
# symbolic zeros that JAX never multiplies. Zero tangents of every parameter (as when the
# whole dict was differentiated) turn a function with an infinite slope where a fixed
# parameter puts it (Mahler–Yum's `taxed_income`, `income ** (1 − rate)` at income 0)
# into 0·∞ = NaN in the Jacobian.
@_with_model_options
def _likelihood_and_gradient(objective: Objective, theta):
    """The subjects' log-likelihoods and the gradient of their sum (reverse mode)."""

    def contributions(theta):
        return objective.contributions(objective.model_params(theta), theta)

    values, pullback = jax.vjp(contributions, theta)
    (gradient,) = pullback(jnp.ones_like(values))
    return values, gradient


@_with_model_options
def moments_and_jacobian(objective: Objective, theta):
    """The model's moments and their exact Jacobian `∂m/∂θ` (forward mode)."""

    def moments(theta):
        return objective.moments(objective.model_params(theta))

    def along(direction):
        return jax.jvp(moments, (theta,), (direction,))

    tangents = jnp.eye(theta.shape[0], dtype=theta.dtype)
    batch = objective.tangent_batch_size
    if 0 < batch < theta.shape[0]:
        # A loop over batches of tangents (`lax.map`): one batch's arrays at a time.
        values, jacobian = jax.lax.map(along, tangents, batch_size=batch)
    else:
        values, jacobian = jax.vmap(along)(tangents)
    return values[0], jacobian.T
