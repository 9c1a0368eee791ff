"""What the layers below the façade ask of a model: a structural type (`ModelLike`),
so that no module under `lcm_eqx/_facade.py` names `Model`, even for its types.

`Model` (`_facade.py`) satisfies it; the modules that take a model (the simulated
panel's `to_dataframe`, the choice probabilities) are imported by the façade, and naming
`Model` there made import circles of the type annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._grids._age import AgeGrid
    from ._model._plan import ModelPlan
    from ._solve._solution import Solution
    from ._solve._solver import AbstractSolver
    from ._typing import Params


class ModelLike(Protocol):
    """A model as the layers below the façade read it: its plan, ages and solvers, its
    parameters' normal form and its solve."""

    @property
    def plan(self) -> ModelPlan: ...

    @property
    def ages(self) -> AgeGrid | None: ...

    @property
    def solvers(self) -> dict[str, AbstractSolver]: ...

    def checked_params(self, params: Params) -> dict[str, Any]: ...

    def solve(
        self, params: Params, *, validate: str = "raise", progress: bool | str = False
    ) -> Solution: ...
