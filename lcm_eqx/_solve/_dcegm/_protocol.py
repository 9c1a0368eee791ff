"""What DC-EGM's period mathematics (`_period.py`) and readers (`_readers.py`) ask of
the solver: a structural type (`DCEGMLike`, which `DCEGM` satisfies), so that those
modules, which the solver's module imports, need not import it back, even for types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jaxtyping import Array

    from ..._grids import AbstractContinuousGrid
    from ..._model._plan import RegimePlan
    from .._kernel import RegimeProblem
    from .._solver import PeriodSolution
    from ._envelope import AbstractUpperEnvelope, EndogenousGrid


class DCEGMLike(Protocol):
    """The solver's settings and the steps of a period that the period loop calls."""

    @property
    def state(self) -> str: ...

    @property
    def action(self) -> str: ...

    @property
    def savings(self) -> AbstractContinuousGrid: ...

    @property
    def upper_envelope(self) -> AbstractUpperEnvelope: ...

    def n_savings(self, regime: RegimePlan) -> int: ...

    def choices_always_feasible(self, regime: RegimePlan) -> bool: ...

    def batchable(self, regime: RegimePlan) -> bool: ...

    def solve_period(self, problem: RegimeProblem) -> PeriodSolution: ...

    def solve_batched(
        self, problems: list[RegimeProblem], with_values: bool = True
    ) -> tuple[list[PeriodSolution], dict[str, Array]]: ...

    def values_batched(
        self,
        problems: list[RegimeProblem],
        grids: list[EndogenousGrid],
        refined: dict[str, Array] | None = None,
    ) -> list[Array]: ...
