"""The shard knob: placing `distributed=True` state axes across devices.

Every state axis whose grid has `distributed=True` becomes one axis of a
`jax.sharding.Mesh` over `jax.devices()` (the global devices, so the same program runs
under `jax.distributed` across hosts). Value arrays are constrained to a `NamedSharding`
that splits those axes over the mesh; everything else is left to XLA's partitioner.

The mesh is built when the solve is traced, not when the model is built: `jax.devices()`
must not run before a user had the chance to call `jax.distributed.initialize`. Hence a
grid whose size does not fit the device count raises `ModelInitializationError` at the
first `solve` (at trace time), not at model construction.

How the devices are split: distributed states are taken in model order (regime order,
then declaration order); each gets `gcd(devices left, n_points)` devices. All devices
must be used: with 4 devices, one axis of 4 or 8 points is fine (4 devices), two axes of
2 points each are fine (2 x 2), a lone axis of 3 or 6 points is an error.

Within a period, a sharded axis is cheapest when it never transitions (its transition is
the identity, e.g. `lambda skill: skill`) or when its transition probabilities depend
only on current discrete states (an income chain, a process state): then the kernel is
mapped *jointly* over that state axis and the matching axis of the prepared continuation,
so each device reads only its own slice. The never-transitioning case needs no
cross-device communication at all; the chain case only sums the contraction
`sum_d' P(d'|d) V(d', .)` across devices (an all-reduce / reduce-scatter of the reduced
array). Any other transition of a sharded axis (a deterministic non-identity law of
motion, or probabilities depending on actions or continuous states) reads the next value
array at arbitrary codes; XLA then gathers that array across devices.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._errors import ModelInitializationError
from .._model._dag import Evaluator, transitive_helpers, transitive_inputs
from .._model._plan import ModelPlan, RegimePlan


@dataclasses.dataclass(frozen=True)
class ShardingPlan:
    """The mesh and which state is split over which of its axes (`None`: replicated)."""

    mesh: Mesh
    mesh_axes: dict[str, str | None]  # distributed state -> mesh axis name (or None)

    def spec(self, axis_names: tuple[str, ...]) -> PartitionSpec:
        """PartitionSpec of an array whose axes are the given state names (others: None)."""
        return PartitionSpec(*(self.mesh_axes.get(name) for name in axis_names))

    def constrain(self, array, axis_names: tuple[str | None, ...]):
        """`with_sharding_constraint` for an array whose axes hold these states."""
        spec = PartitionSpec(*(self.mesh_axes.get(n) if n else None for n in axis_names))
        if all(s is None for s in spec):
            return array
        return jax.lax.with_sharding_constraint(array, NamedSharding(self.mesh, spec))

    def replicate(self, array):
        """Pin `array` as replicated on every device of the mesh."""
        return jax.lax.with_sharding_constraint(array, NamedSharding(self.mesh, PartitionSpec()))

    def place_labels(self, array, labels, contracted: str):
        """Pin the block axis of a sharded contraction over `contracted`'s mesh axis.

        `labels` are `cur:<state>`, `next:<state>` or the block label `shard:`; current
        sharded states keep their mesh axis, everything else is left to XLA.
        """
        dims: list[object] = []
        for label in labels:
            kind, _, state = label.partition(":")
            if kind == "shard":
                dims.append(self.mesh_axes[contracted])
            elif kind == "cur" and self.is_sharded(state) and state != contracted:
                dims.append(self.mesh_axes[state])
            else:
                dims.append(PartitionSpec.UNCONSTRAINED)
        spec = PartitionSpec(*dims)
        return jax.lax.with_sharding_constraint(array, NamedSharding(self.mesh, spec))

    def n_shards(self, state: str) -> int:
        axis = self.mesh_axes.get(state)
        return 1 if axis is None else self.mesh.shape[axis]

    def is_sharded(self, state: str) -> bool:
        return self.mesh_axes.get(state) is not None


def distributed_states(plan: ModelPlan) -> dict[str, tuple[str, int]]:
    """Distributed states in model order: name -> (first regime declaring it, n_points)."""
    found: dict[str, tuple[str, int]] = {}
    for regime in plan.regimes.values():
        for state in regime.states:
            grid = regime.grids[state]
            if grid.distributed and state not in found:
                found[state] = (regime.name, grid.n_points)
    return found


def sharding_plan(plan: ModelPlan, devices=None) -> ShardingPlan | None:
    """The mesh for this model's distributed states, or None if it has none.

    Raises `ModelInitializationError` when the devices cannot be split evenly over the
    distributed axes.
    """
    states = distributed_states(plan)
    if not states:
        return None
    devices = list(jax.devices() if devices is None else devices)
    n_devices = len(devices)
    left = n_devices
    sizes: dict[str, int] = {}
    for state, (_, n_points) in states.items():
        sizes[state] = math.gcd(left, n_points)
        left //= sizes[state]
    if left != 1:
        described = ", ".join(
            f"{state!r} ({n} points, regime {regime!r})" for state, (regime, n) in states.items()
        )
        raise ModelInitializationError(
            f"distributed=True: the {n_devices} devices cannot be split evenly over the "
            f"distributed state axes {described}. Each sharded axis is split over a divisor "
            f"of its number of points, and together they must use all {n_devices} devices "
            f"(for a single distributed axis: its number of points must be divisible by "
            f"{n_devices}). Change the grid size, or set distributed=False."
        )
    names = tuple(states)
    mesh = Mesh(np.asarray(devices, dtype=object).reshape(tuple(sizes[s] for s in names)), names)
    return ShardingPlan(mesh=mesh, mesh_axes={s: (s if sizes[s] > 1 else None) for s in names})


def is_identity_transition(regime: RegimePlan, state: str) -> bool:
    """Whether regime's law of motion for `state` is the identity on its grid codes.

    Decided at trace time by evaluating the transition on the grid codes, which is only
    possible (and only attempted) when it depends on nothing but that state: no
    parameters, no other state, no action, no period.
    """
    transition = regime.state_transitions.get(state)
    if transition is None or transition.is_markov or transition.function is None:
        return False
    grid = regime.grids.get(state)
    if grid is None or not grid.is_discrete:
        return False
    function = transition.function
    if transitive_inputs(function, regime.helpers) != {state}:
        return False
    helpers = [regime.helpers[h] for h in transitive_helpers(function, regime.helpers)]
    if any(f.params for f in (function, *helpers)):  # defaults could be overridden
        return False
    codes = np.arange(grid.n_points, dtype=np.int32)
    try:
        with jax.ensure_compile_time_eval():
            evaluate = lambda code: jnp.asarray(
                Evaluator(regime.helpers, {state: code}, {})(function)
            )
            result = np.asarray(jax.vmap(evaluate)(jnp.asarray(codes)))
    except Exception:  # needs parameters, or is not traceable on codes: not provably identity
        return False
    return result.shape == codes.shape and bool(np.all(result == codes))
