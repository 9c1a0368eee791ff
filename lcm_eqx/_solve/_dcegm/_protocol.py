"""What DC-EGM's period loop (`_period.py`), one choice's step (`_egm.py`), its passes
over rows (`_passes.py`) and its readers (`_readers.py`) ask of the solver: a structural
type (`DCEGMLike`, which `DCEGM` satisfies), so that those modules, which the solver's
module imports, need not import it back, even for types."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jaxtyping import Array

    from ..._grids import AbstractContinuousGrid
    from ..._model._plan import RegimePlan
    from .._kernel import RegimeProblem
    from .._solver import PeriodSolution
    from ._envelope import AbstractUpperEnvelope, EndogenousGrid
    from ._kinks import BudgetKinks


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

    @property
    def newton_steps(self) -> int: ...

    @property
    def inverse_marginal_utility(self) -> Callable | None: ...

    @property
    def kinks(self) -> BudgetKinks | None: ...

    def extra_checks(self, regime: RegimePlan) -> tuple[str, ...]: ...

    def choice_limit(self, problem: RegimeProblem, discrete: dict[str, Array]) -> Array: ...

    def savings_points(self, problem: RegimeProblem, limit: Array) -> Array: ...

    def values_on(self, problem: RegimeProblem, grid: EndogenousGrid, nodes: Array) -> Array: ...

    def combine_choices(self, problem: RegimeProblem, values: Array) -> Array: ...

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
