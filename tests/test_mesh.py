"""How `distributed=True` axes share the devices, and what is said when one is not split.

Each distributed state gets `gcd(devices left, n_points)` devices in model order; the
devices must all be used (else `ModelInitializationError`, see tests/test_knobs.py).
With several devices, a distributed state that ends up on one device (replicated) warns
(`LcmWarning`) naming the state, its regime, the device count and what to do; with one
device nothing is split and nothing is said (the laptop run of a multi-device model).

The rule is checked on device counts directly (`mesh_sizes`); `tests/mesh_devices.py`
solves with 4 host devices in a subprocess (XLA_FLAGS must be set before jax is
imported), and the one-device case solves in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest

import lcm_eqx as lcm
from lcm_eqx._solve._sharding import mesh_sizes

sys.path.insert(0, str(Path(__file__).parent))
import knobs_model

TESTS = Path(__file__).parent


def states(**sizes: int) -> dict[str, tuple[str, int]]:
    return {name: ("working", n_points) for name, n_points in sizes.items()}


def lcm_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, lcm.LcmWarning)]


def sizes_and_warnings(n_devices: int, **sizes: int) -> tuple[dict[str, int], list[str]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = mesh_sizes(states(**sizes), n_devices)
    return result, lcm_warnings(record)


@pytest.mark.parametrize(
    ("n_devices", "sizes", "expected"),
    [
        (4, {"skill": 4}, {"skill": 4}),
        (4, {"skill": 8}, {"skill": 4}),
        (4, {"income": 2, "skill": 2}, {"income": 2, "skill": 2}),
        (4, {"income": 2, "skill": 4}, {"income": 2, "skill": 2}),
        (4, {"income": 6, "skill": 2}, {"income": 2, "skill": 2}),
        (8, {"income": 4, "skill": 4}, {"income": 4, "skill": 2}),
    ],
)
def test_every_distributed_axis_split_says_nothing(n_devices, sizes, expected):
    assert sizes_and_warnings(n_devices, **sizes) == (expected, [])


def test_axis_left_without_devices_warns():
    sizes, messages = sizes_and_warnings(4, income=4, skill=2)
    assert sizes == {"income": 4, "skill": 1}
    (message,) = messages
    assert "Regime 'working': state 'skill' has distributed=True" in message
    assert "not split over the 4 devices" in message and "already use them all" in message
    assert "'income' over 4" in message
    assert "e.g. 8 devices" in message  # 8 = income over 4 x skill over 2
    assert "set distributed=False on 'skill'" in message


def test_axis_sharing_no_factor_with_the_devices_warns():
    sizes, messages = sizes_and_warnings(4, income=3, skill=4)
    assert sizes == {"income": 1, "skill": 4}
    (message,) = messages
    assert "state 'income'" in message and "3 points share no factor with the 4 devices" in message
    assert "e.g. 6 devices" in message  # 6 = income over 3 x skill over 2


def test_each_replicated_axis_warns():
    sizes, messages = sizes_and_warnings(2, a=2, b=2, c=3)
    assert sizes == {"a": 2, "b": 1, "c": 1}
    assert ["'b'" in messages[0], "'c'" in messages[1], len(messages)] == [True, True, 2]


def test_suggested_device_count_splits_every_axis():
    # 997 and 991 are primes: nothing up to 64 x 4 splits both, the product always does.
    _, (message,) = sizes_and_warnings(4, a=4, b=991)
    assert f"e.g. {4 * 991} devices" in message
    _, (message,) = sizes_and_warnings(4, a=997, b=4)
    assert f"e.g. {997 * 4} devices" in message


@pytest.mark.parametrize("sizes", [{"skill": 3}, {"income": 4, "skill": 4}, {"a": 2, "b": 5}])
def test_one_device_splits_nothing_and_says_nothing(sizes):
    assert sizes_and_warnings(1, **sizes) == (dict.fromkeys(sizes, 1), [])


def test_devices_that_cannot_all_be_used_still_raise():
    with pytest.raises(lcm.ModelInitializationError, match="'skill' \\(3 points"):
        mesh_sizes(states(skill=3), 4)
    with pytest.raises(lcm.ModelInitializationError, match="cannot be split evenly"):
        mesh_sizes(states(income=2, skill=3), 4)


@pytest.mark.skipif(jax.device_count() != 1, reason="needs a single device")
def test_one_device_solve_with_two_distributed_axes_is_silent():
    model = knobs_model.build(
        n_wealth=6, n_consumption=8, income_distributed=True, skill_distributed=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.solve(knobs_model.params())


# --------------------------------------------------------------------------- 4 devices


@pytest.fixture(scope="module")
def four_devices() -> dict:
    env = dict(os.environ)
    root = str(TESTS.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    process = subprocess.run(
        [sys.executable, str(TESTS / "mesh_devices.py")],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"subprocess failed:\n{output[-4000:]}"
    line = next(x for x in process.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    assert report["device_count"] == 4
    return report


@pytest.mark.slow
def test_four_devices_second_axis_without_devices_warns_and_is_correct(four_devices):
    case = four_devices["income 4, skill 4"]
    (message,) = case["warnings"]
    assert "state 'skill'" in message and "4 devices" in message
    assert case["spec"][2:] == ["income"]  # (period, wealth, income, skill): skill replicated
    assert case["devices"] == 4 and case["same_values"]


def test_four_devices_axis_sharing_no_factor_warns_and_is_correct(four_devices):
    case = four_devices["income 3, skill 4"]
    (message,) = case["warnings"]
    assert "state 'income'" in message and "3 points" in message and "4 devices" in message
    assert case["spec"][2:] == ["None", "skill"]
    assert case["devices"] == 4 and case["same_values"]


@pytest.mark.parametrize("name", ["income 2, skill 2", "income 2, skill 4"])
def test_four_devices_two_split_axes_are_silent(four_devices, name):
    case = four_devices[name]
    assert case["warnings"] == []
    assert case["spec"][2:] == ["income", "skill"]
    assert case["devices"] == 4 and case["same_values"]
