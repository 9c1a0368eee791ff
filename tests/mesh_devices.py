"""The 4-device checks of tests/test_mesh.py, run in a subprocess.

XLA_FLAGS must give 4 host devices before jax is imported, hence a separate process.
Usage: python mesh_devices.py. Solves the knob test model (small grids) with two
distributed axes of several sizes and prints one JSON line, `REPORT {...}`: per case,
the LcmWarnings of the solve, the partition spec of the `working` value array, and
whether the values equal those of the same model solved without `distributed`.
"""

import json
import os
import sys
import warnings

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import knobs_model  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

SMALL = {"n_wealth": 6, "n_consumption": 8}

# case -> (n_income, n_skill); both axes distributed (income comes first in model order)
CASES = {
    "income 4, skill 4": (4, 4),  # income takes all 4 devices: skill is replicated
    "income 3, skill 4": (3, 4),  # 3 shares no factor with 4: income is replicated
    "income 2, skill 2": (2, 2),  # a 2 x 2 mesh: both split, nothing to say
    "income 2, skill 4": (2, 4),  # 2 x 2 as well (skill over 2 of its 4 points)
}


def solve_case(n_income, n_skill):
    params = knobs_model.params(n_income=n_income, n_skill=n_skill)
    sizes = {**SMALL, "n_income": n_income, "n_skill": n_skill}
    plain = knobs_model.build(**sizes).solve(params)
    model = knobs_model.build(**sizes, income_distributed=True, skill_distributed=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        solution = model.solve(params)
    values = solution.values["working"]
    same = all(_close(solution.values[r], plain.values[r]) for r in plain.values)
    return {
        "warnings": [str(w.message) for w in record if issubclass(w.category, lcm.LcmWarning)],
        "spec": [str(s) for s in values.sharding.spec],
        "devices": len(values.sharding.device_set),
        "same_values": same,
    }


def _close(values, reference) -> bool:
    """Equal up to 1e-12 where finite, with the same -inf pattern (as tests/test_knobs.py)."""
    values, reference = np.asarray(values), np.asarray(reference)
    finite = np.isfinite(reference)
    return bool(
        np.array_equal(finite, np.isfinite(values))
        and np.array_equal(values[~finite], reference[~finite])
        and np.allclose(values[finite], reference[finite], rtol=0, atol=1e-12)
    )


def main():
    report = {"device_count": jax.device_count()}
    for name, (n_income, n_skill) in CASES.items():
        report[name] = solve_case(n_income, n_skill)
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main()
