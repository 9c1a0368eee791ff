"""Loading saved files back into a model: `load_solution` and `load_simulation_result`.

The file format (`_persistence`) reads and checks the arrays and the static fields and
knows no result class; the results are built here, one floor above both, where the
solution's age-varying grids can be recomputed from the model's plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._persistence import load
from ._simulate._result import SimulationResult
from ._solve._age_tables import age_varying_points
from ._solve._backward import state_points
from ._solve._solution import Solution
from ._typing import FilePath

if TYPE_CHECKING:
    from ._facade import Model


def load_solution(path: FilePath, model: Model) -> Solution:
    """Read a solution saved with `solution.save(path)`, for `model`.

    `model` must have the structure of the model that was solved: the same regimes,
    periods, states and actions with the same grids, active periods, taste shocks and
    function names (the tuning knobs `batch_size` and `distributed` may differ). Arrays
    come back bit-exactly, with their saved dtypes (64-bit ones need
    `jax.config.update("jax_enable_x64", True)`). A file written by another lcm_eqx
    version loads with a warning when the structure matches.

    Raises:
        SavedFileError: the file is corrupt or truncated, holds a simulation result, or
            comes from a model with a different structure (the message says what
            differs).

    Example:
        >>> solution.save("retirement.lcm")
        >>> solution = lcm.load_solution("retirement.lcm", model)
    """

    def build(arrays: dict, static: dict, structure: str) -> Solution:
        return Solution(
            grids=state_points(model.plan, age_varying_points(model.plan)),
            values=arrays["values"],
            violations=arrays["violations"],
            exponential_values=arrays.get("exponential_values", {}),
            checks=_tuples(static["checks"]),
            active={key: tuple(int(p) for p in value) for key, value in static["active"].items()},
            state_names=_tuples(static["state_names"]),
            model_structure=structure,
        )

    return load(path, model, "Solution", build)


def load_simulation_result(path: FilePath, model: Model) -> SimulationResult:
    """Read a simulated panel saved with `result.save(path)`, for `model`.

    The same checks as `load_solution`; arrays come back bit-exactly as NumPy arrays.

    Example:
        >>> result.save("panel.lcm")
        >>> result = lcm.load_simulation_result("panel.lcm", model)
        >>> df = result.to_dataframe()
    """

    def build(arrays: dict, static: dict, structure: str) -> SimulationResult:
        ages = static["ages"]
        return SimulationResult(
            regime=arrays["regime"],
            present=arrays["present"],
            value=arrays["value"],
            states=arrays["states"],
            actions=arrays["actions"],
            regime_names=tuple(static["regime_names"]),
            has_variable=_tuples(static["has_variable"]),
            labels=_tuples(static["labels"]),
            ages=None if ages is None else tuple(float(a) for a in ages),
            model_structure=structure,
        )

    return load(path, model, "SimulationResult", build)


def _tuples(mapping: dict) -> dict[str, tuple]:
    """JSON's lists back to the tuples of the results' static fields."""
    return {key: tuple(value) for key, value in mapping.items()}
