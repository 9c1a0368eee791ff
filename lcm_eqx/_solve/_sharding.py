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
2 points each are fine (2 x 2), a lone axis of 3 or 6 points is an error. A distributed
state left with one device (two axes of 4 points: the first takes all 4) is replicated,
and with several devices that warns (`LcmWarning`) at trace time; with one device
nothing is split and nothing is said.

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

Simulation uses the same plan: the continuations a period's state sweep maps jointly
(and DC-EGM policies) enter a `shard_map` as each device's block, and each device
simulates the subjects whose codes fall in its block (`_simulate/_simulate.py`,
`_on_blocks`); only per-subject results are summed across devices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._errors import ModelInitializationError, warn
from .._logging import logger
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
    distributed axes, and warns (`LcmWarning`) for each distributed axis that several
    devices leave replicated (see `mesh_sizes`).
    """
    states = distributed_states(plan)
    if not states:
        return None
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_sizes(states, len(devices))
    names = tuple(states)
    mesh = Mesh(np.asarray(devices, dtype=object).reshape(tuple(sizes[s] for s in names)), names)
    return ShardingPlan(mesh=mesh, mesh_axes={s: (s if sizes[s] > 1 else None) for s in names})


def mesh_sizes(states: Mapping[str, tuple[str, int]], n_devices: int) -> dict[str, int]:
    """How many devices each distributed state is split over (1: replicated).

    `states` maps each distributed state to (its first regime, its number of points), in
    model order; each state gets `gcd(devices left, n_points)` devices. The devices must
    all be used, else `ModelInitializationError`. With several devices, a distributed
    state that gets only one (its size shares no factor with the devices left, or the
    states before it took them all) runs replicated: the solve is still split over all
    devices, but not along that axis, so this warns (`LcmWarning`) naming the state, its
    size and the device count. With one device nothing is split and nothing is said:
    that is the laptop run of a model meant for several devices.
    """
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
    if n_devices == 1:
        logger.debug("distributed=True: one device, so the value arrays are not split.")
        return sizes
    split = " x ".join(f"{s!r} over {k}" for s, k in sizes.items() if k > 1)
    for state, (regime, n_points) in states.items():
        if sizes[state] > 1:
            continue
        left = n_devices // _devices_before(state, sizes)
        if left == 1:
            why = f"the distributed states before it in model order already use them all ({split})"
        else:
            why = (
                f"its {n_points} points share no factor with the {left} devices left for it, "
                f"so the devices are split as {split}"
            )
        warn(
            f"Regime {regime!r}: state {state!r} has distributed=True, but it is not split over "
            f"the {n_devices} devices: {why}. {state!r} is replicated on every device; the "
            f"solve is correct and still uses every device. It would be split on e.g. "
            f"{_devices_splitting_all(states, n_devices)} devices; to silence this, set "
            f"distributed=False on {state!r}."
        )
    return sizes


def _devices_before(state: str, sizes: Mapping[str, int]) -> int:
    """How many devices the distributed states before `state` (in model order) use."""
    used = 1
    for name, k in sizes.items():
        if name == state:
            break
        used *= k
    return used


def _devices_splitting_all(states: Mapping[str, tuple[str, int]], n_devices: int) -> int:
    """A device count above `n_devices` that splits every distributed state: the smallest
    up to 64 x `n_devices`, else the product of their sizes (which always does)."""
    sizes = [n for _, n in states.values()]
    for candidate in range(n_devices + 1, min(math.prod(sizes), 64 * n_devices) + 1):
        left = candidate
        for n_points in sizes:
            k = math.gcd(left, n_points)
            if k == 1:
                break
            left //= k
        else:
            if left == 1:
                return candidate
    return math.prod(sizes)


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
