"""The 4-device checks of tests/test_knobs.py, run in a subprocess.

XLA_FLAGS must give 4 host devices before jax is imported, hence a separate process.
Usage: python knobs_devices.py OUT.npz. Prints one JSON object with the measurements
and writes the sharded value arrays to OUT.npz (and a simulated panel next to it);
tests/test_knobs.py asserts on them.
"""

import functools
import json
import os
import re
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import knobs_model  # noqa: E402
from hlo_collectives import collectives_in  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

COLLECTIVES = r"\b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\("


def sharded_axes(solution):
    return {
        regime: [str(s) for s in values.sharding.spec] if hasattr(values.sharding, "spec") else None
        for regime, values in solution.values.items()
    }


def collectives(model, params, validate=True):
    """Cross-device collectives in the compiled solve (validate=True: the default solve,
    whose executable is already cached by `model.solve`)."""
    text = model._solve.lower(params, validate=validate).compile().as_text()
    return sorted(set(re.findall(COLLECTIVES, text)))


def user_collectives(fn, params):
    """The collectives of `jax.jit(fn)(params)` as the user compiles it: `[kind, number of
    elements of its largest operand]`, one per collective in the program."""
    return collectives_in(jax.jit(fn).lower(params).compile().as_text())


def checked_collectives(model, params):
    """The user-level collectives of `jax.jit(model.solve)`, validated and not."""
    return {
        "raise": user_collectives(model.solve, params),
        "off": user_collectives(functools.partial(model.solve, validate="off"), params),
        "n_checks": sum(len(c) for c in model.solve(params).checks.values()),
    }


def initial_conditions(n_skill=4):
    return knobs_model.initial_conditions(n_skill)


def simulate_program(model, params, solution, n_skill=4):
    """The compiled simulation against `solution` (an argument, as `model.simulate` gets
    it): its collectives and XLA's per-device memory (bytes)."""
    initial = initial_conditions(n_skill)
    compiled = (
        jax.jit(lambda p, s: model.simulate(p, initial, s, key=jax.random.key(3), validate="off"))
        .lower(params, solution)
        .compile()
    )
    memory = compiled.memory_analysis()
    return {
        "collectives": collectives_in(compiled.as_text()),
        "argument": memory.argument_size_in_bytes,
        "temp": memory.temp_size_in_bytes,
        "value_elements": max(int(v.size) for v in solution.values.values()),
    }


def simulate_memory():
    """Per-device memory of the simulation program, unsharded and with 8 types sharded
    over the 4 devices (200 wealth points, so that the value arrays dominate)."""
    params = knobs_model.params(n_skill=8)
    result = {}
    for name, distributed in (("unsharded", False), ("sharded", True)):
        model = knobs_model.build(n_wealth=200, n_skill=8, skill_distributed=distributed)
        solution = model.solve(params, validate="off")
        result[name] = simulate_program(model, params, solution, n_skill=8)
    return result


def on_one_device(model, params, solution):
    """The unsharded simulation against the same (gathered) solution values."""
    gathered = jax.tree.map(np.asarray, solution)
    plain = knobs_model.build()
    return simulate(plain, params, gathered, 0)


def checked_simulate_collectives(model, params):
    """The collectives of `jax.jit(model.simulate)` (solving inside), validated and not."""
    initial = initial_conditions()

    def simulate_with(validate):
        return lambda p: model.simulate(p, initial, key=jax.random.key(3), validate=validate)

    return {
        "raise": user_collectives(simulate_with("raise"), params),
        "off": user_collectives(simulate_with("off"), params),
        "n_checks": sum(len(c) for c in model.solve(params).checks.values()),
    }


def simulate(model, params, solution, batch):
    initial = initial_conditions()
    frame = model.simulate(
        params, initial, solution, key=jax.random.key(3), subject_batch_size=batch
    ).to_dataframe()
    return frame


def main(out):
    """Solve and simulate with sharded axes; values and frames go to `out` (npz) for
    tests/test_knobs.py to compare with its single-device plain solve."""
    report = {"device_count": jax.device_count()}
    arrays = {}
    params = knobs_model.params()
    cases = {
        "skill": {"skill_distributed": True},
        "income": {"income_distributed": True},
        "skill+splay": {"skill_distributed": True, "wealth_batch": 6, "consumption_batch": 10},
    }
    models = {}
    for name, knobs in cases.items():
        model = knobs_model.build(**knobs)
        models[name] = model
        solution = model.solve(params)
        for regime, values in solution.values.items():
            arrays[f"{name}/{regime}"] = np.asarray(values)
        report[name] = {
            "devices": {r: len(v.sharding.device_set) for r, v in solution.values.items()},
            "spec": sharded_axes(solution),
            "shapes": {r: list(v.shape) for r, v in solution.values.items()},
            "period_value_devices": len(solution.value("working", 0).sharding.device_set),
        }
        if name in ("skill", "income"):
            report[name]["user"] = checked_collectives(model, params)
        if name == "skill":
            report[name]["collectives"] = collectives(model, params, validate=False)
            report[name]["validated_collectives"] = collectives(model, params)
            report[name]["simulate_user"] = checked_simulate_collectives(model, params)
            frames = [simulate(model, params, solution, b) for b in (0, 4)]
            expected = on_one_device(model, params, solution)
            report["simulate"] = {
                "batch_invariant": bool(frames[0].equals(frames[1])),
                "choices_exact": [
                    bool(frame.drop(columns="value").equals(expected.drop(columns="value")))
                    for frame in frames
                ],
                "value_difference": max(
                    float(np.max(np.abs(frame["value"].to_numpy() - expected["value"].to_numpy())))
                    for frame in frames
                ),
                "program": simulate_program(model, params, solution),
                "memory": simulate_memory(),
            }
            frames[0].to_pickle(out + ".simulated.pkl")
        if name == "income":
            report[name]["collectives"] = collectives(model, params)
            frames = [simulate(model, params, solution, b) for b in (0, 4)]
            expected = on_one_device(model, params, solution)
            report[name]["simulate"] = {
                "choices_exact": [
                    bool(frame.drop(columns="value").equals(expected.drop(columns="value")))
                    for frame in frames
                ],
                "value_difference": max(
                    float(np.max(np.abs(frame["value"].to_numpy() - expected["value"].to_numpy())))
                    for frame in frames
                ),
                "program": simulate_program(model, params, solution),
            }
    for kind in ("process", "deterministic"):
        plain_values = knobs_model.build_small(kind, False).solve(knobs_model.SMALL_PARAMS)
        model = knobs_model.build_small(kind, True)
        solution = model.solve(knobs_model.SMALL_PARAMS)
        arrays[f"{kind}/plain"] = np.asarray(plain_values.values["only"])
        arrays[f"{kind}/sharded"] = np.asarray(solution.values["only"])
        report[kind] = {
            "devices": len(solution.values["only"].sharding.device_set),
            "spec": [str(s) for s in solution.values["only"].sharding.spec],
            "collectives": collectives(model, knobs_model.SMALL_PARAMS),
        }
    try:
        knobs_model.build(skill_distributed=True, n_skill=3).solve(knobs_model.params(n_skill=3))
        report["indivisible"] = None
    except lcm.LcmError as error:
        report["indivisible"] = [type(error).__name__, str(error)]
    np.savez(out, **arrays)
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
