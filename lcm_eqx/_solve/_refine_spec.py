"""What `GridSearch(refine=...)` asks for: which continuous actions are refined off their
grids and how (`Refine`), the check of that request against a regime (`check`), and the
result code of each refined action (`RefineCode`). The refinement itself:
`_refine.py`."""

from __future__ import annotations

import enum
from typing import TypeVar

import equinox as eqx

from .._errors import ModelInitializationError

T = TypeVar("T")


class RefineCode(enum.IntEnum):
    """The result of refining one continuous action at one state and discrete choice.

    - `interior`: a converged interior optimum (`Q_a ≈ 0`, `Q_aa < 0`); the action's
      derivative is the implicit-function one, `−Q_aθ / Q_aa`.
    - `lower_bound` / `upper_bound`: the optimum is the first / last point of the
      action's grid (the slope points outside); derivative zero.
    - `constraint`: the optimum is against an infeasible region (a binding constraint
      between grid points); derivative zero.
    - `kink`: the bracket collapsed around a jump of the slope (a non-differentiable
      maximum, e.g. where a next state crosses a node of an interpolated value);
      derivative zero.
    - `tie`: another bracket of the grid is (nearly) as good: the policy may jump to it
      as parameters move. The action is refined in the best bracket, with the
      derivative that bracket gives.
    - `flat`: the objective does not vary along the action there (`Q_a ≈ Q_aa ≈ 0`):
      any point is optimal; derivative zero.
    - `unconverged`: the Newton budget (`Refine.newton_steps`) ran out before any of
      the above; the best point found is used, derivative zero.
    - `infeasible`: no point of the action grids is feasible.
    """

    interior = 0
    lower_bound = 1
    upper_bound = 2
    constraint = 3
    kink = 4
    tie = 5
    flat = 6
    unconverged = 7
    infeasible = 8


class Refine(eqx.Module):
    """How `GridSearch` refines continuous actions off their grids.

    Args:
        actions: the continuous actions to refine, by name; None (the default): every
            continuous action of the regime.
        newton_steps: safeguarded Newton iterations per action and round (each costs
            about three evaluations of the kernel: `q` with its first two derivatives
            along the action). From a grid point, three reach round-off on a smooth
            objective (and the queries that return actions take one more); kinks need
            five or so, and a binding constraint halves the bracket per step. A grid
            point is often a kink: where a continuous next state is the action itself
            (Mahler–Yum's lagged effort), the grid's points are nodes of the
            interpolated continuation. So the default is 5: with 3, an eighth of the
            tiny Mahler–Yum's effort choices in period 3 ended `unconverged` (a zero
            derivative at a point short of the optimum), and with taste shocks, where
            every discrete choice's refinement counts, moments' derivatives were 25–40 %
            off.
        rounds: with several refined actions, how often each is refined in turn with
            the others at their current best (coordinate ascent), before `newton_steps`
            joint Newton steps on all of them (the turns alone converge only linearly
            where the actions interact).
        tolerance: a Newton step below `tolerance` times the grid spacing counts as
            converged.

    Example:
        >>> solver = lcm.GridSearch(refine=lcm.Refine(newton_steps=8))
        >>> solver = lcm.GridSearch(refine=True)  # every continuous action, the defaults
    """

    actions: tuple[str, ...] | None = eqx.field(default=None, static=True)
    newton_steps: int = eqx.field(default=5, static=True)
    rounds: int = eqx.field(default=1, static=True)
    tolerance: float = eqx.field(default=1e-7, static=True)

    def __check_init__(self):
        if self.newton_steps < 1:
            raise ModelInitializationError(
                f"Refine: newton_steps must be at least 1, got {self.newton_steps}."
            )
        if self.rounds < 1:
            raise ModelInitializationError(f"Refine: rounds must be at least 1, got {self.rounds}.")
        if not self.tolerance > 0:
            raise ModelInitializationError(
                f"Refine: tolerance must be positive, got {self.tolerance}."
            )

    def names(self, continuous: tuple[str, ...]) -> tuple[str, ...]:
        """The refined actions among the regime's `continuous` actions, in its order."""
        if self.actions is None:
            return continuous
        return tuple(a for a in continuous if a in self.actions)


def as_refine(refine) -> Refine | None:
    """`GridSearch(refine=...)`: False / None (no refinement), True (every continuous
    action, default settings), an action name or a tuple of names, or a `Refine`."""
    if refine is None or refine is False:
        return None
    if refine is True:
        return Refine()
    if isinstance(refine, Refine):
        return refine
    if isinstance(refine, str):
        return Refine(actions=(refine,))
    if isinstance(refine, tuple | list) and all(isinstance(a, str) for a in refine):
        return Refine(actions=tuple(refine))
    raise ModelInitializationError(
        "GridSearch(refine=...) takes True, False, an action name, a tuple of action "
        f"names or an lcm.Refine(...), got {refine!r}."
    )


def check(refine: Refine, model, regime) -> None:
    """Reject a regime that the refinement cannot handle, by name. (A model-wide solver
    may name actions that only some regimes have; a name no regime has is an error.)"""
    continuous = tuple(regime.continuous_actions)
    anywhere = {a for r in model.regimes.values() for a in r.continuous_actions}
    unknown = [a for a in refine.actions or () if a not in anywhere]
    if unknown:
        raise ModelInitializationError(
            f"Regime {regime.name!r}: GridSearch(refine=...) names {unknown}, which are not "
            f"continuous actions of any regime (this regime's: {list(continuous)})."
        )
    aggregator = regime.aggregator
    if aggregator is not None and aggregator.n_values > 1 and refine.names(continuous):
        raise ModelInitializationError(
            f"Regime {regime.name!r}: GridSearch(refine=...) does not refine the actions of "
            f"a regime with aggregator {type(aggregator).__name__} (two value arrays); "
            "leave refine off for it."
        )
