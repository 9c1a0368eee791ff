"""`lcm.compute_policy` reads states as `Model.simulate` does: continuous states as
values, discrete states as codes or labels, process states as their node values or as
grid indices under `"<state>:index"` (issue 62). Integers under a process state's own
name, the spelling of before, still mean grid indices, with a `FutureWarning`."""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402

PARAMS = {
    "discount_factor": 0.95,
    "interest_rate": 0.03,
    "bonus": 0.2,
    # The shock's nodes are parameters: compute_policy matches values to the nodes at
    # these params.
    "alive": {"next_shock": {"mean": 0.1, "sigma": 0.3}},
}
WEALTH = np.array([1.0, 2.5, 4.0, 7.5])


def utility(consumption, kind, bonus):
    return jnp.log(consumption) + bonus * kind


def next_wealth(wealth, consumption, shock, interest_rate):
    return (1 + interest_rate) * (wealth - consumption) + jnp.exp(shock)


@pytest.fixture(scope="module")
def solved():
    alive = lcm.Regime(
        states={
            "wealth": lcm.LinSpacedGrid(0.5, 12.0, 30),
            "shock": lcm.NormalIIDGrid(3),
            "kind": lcm.DiscreteGrid(["low", "high"]),
        },
        actions={"consumption": lcm.LinSpacedGrid(0.05, 12.0, 120)},
        functions={"utility": utility},
        state_transitions={"wealth": next_wealth, "kind": lambda kind: kind},
        transition=lambda: 0,
        constraints={"borrowing": lambda consumption, wealth: consumption <= wealth},
    )
    model = lcm.Model(regimes={"alive": alive}, n_periods=3)
    solution = model.solve(PARAMS)
    nodes = 0.1 + np.sqrt(2.0) * 0.3 * np.polynomial.hermite.hermgauss(3)[0]
    return model, solution, nodes


def policy(model, solution, states):
    actions, values = lcm.compute_policy(model, PARAMS, solution, "alive", 0, states)
    return np.asarray(actions["consumption"]), np.asarray(values)


def test_process_states_as_node_values_or_grid_indices(solved):
    model, solution, nodes = solved
    codes = np.array([0, 2, 1, 2])
    kind = np.array([1, 0, 1, 1])
    by_value = policy(model, solution, {"wealth": WEALTH, "shock": nodes[codes], "kind": kind})
    by_index = policy(model, solution, {"wealth": WEALTH, "shock:index": codes, "kind": kind})
    np.testing.assert_array_equal(by_value[0], by_index[0])
    np.testing.assert_array_equal(by_value[1], by_index[1])
    # Discrete states as labels, as in simulate.
    labels = np.array(["low", "high"])[kind]
    by_label = policy(model, solution, {"wealth": WEALTH, "shock:index": codes, "kind": labels})
    np.testing.assert_array_equal(by_label[0], by_index[0])
    # The current shock enters next wealth: the node matters.
    other = policy(model, solution, {"wealth": WEALTH, "shock:index": 2 - codes, "kind": kind})
    assert not np.array_equal(other[0], by_index[0])


def test_the_same_spelling_as_the_simulation(solved):
    """The DataFrame's rows, passed back as they are, give the simulated choices."""
    model, solution, nodes = solved
    initial = {
        "regime": np.zeros(4, dtype=int),
        "wealth": WEALTH,
        "shock": nodes[[0, 1, 2, 1]],
        "kind": np.array(["high", "low", "low", "high"]),
    }
    frame = model.simulate(PARAMS, initial, solution, key=jax.random.key(0)).to_dataframe()
    first = frame[frame["period"] == 0]
    states = {
        "wealth": first["wealth"].to_numpy(),
        "shock": first["shock"].to_numpy(),
        "kind": first["kind"].astype(str).to_numpy(),
    }
    consumption, values = policy(model, solution, states)
    np.testing.assert_allclose(consumption, first["consumption"].to_numpy())
    np.testing.assert_allclose(values, first["value"].to_numpy(), rtol=1e-12)


def test_integers_under_the_state_name_are_grid_indices_with_a_warning(solved):
    model, solution, _ = solved
    codes = np.array([0, 2, 1, 2])
    kind = np.zeros(4, dtype=int)
    with pytest.warns(FutureWarning, match=r"'shock:index'"):
        old = policy(model, solution, {"wealth": WEALTH, "shock": codes, "kind": kind})
    new = policy(model, solution, {"wealth": WEALTH, "shock:index": codes, "kind": kind})
    np.testing.assert_array_equal(old[0], new[0])


@pytest.mark.parametrize(
    ("states", "match"),
    [
        ({"shock": np.full(4, 0.5)}, r"0\.5, which is not a node of 'shock'.*'shock:index'"),
        (
            {"shock": np.zeros(4), "shock:index": np.zeros(4, int)},
            "both 'shock' .* and 'shock:index'",
        ),
        ({"shock:index": np.full(4, 3)}, r"grid indices 0\.\.2"),
        ({"shock:index": np.zeros(4, int), "shocks": WEALTH}, r"unknown entries \['shocks'\]"),
        ({}, r"lacks \['shock'\]"),
        ({"shock:index": np.zeros(4, int), "kind": np.array(["mid"] * 4)}, "unknown labels"),
    ],
)
def test_bad_states_name_the_problem(solved, states, match):
    model, solution, _ = solved
    full = {"wealth": WEALTH, "kind": np.zeros(4, dtype=int), **states}
    with pytest.raises(lcm.LcmError, match=match):
        policy(model, solution, full)


def test_plot_policy_along_a_process_state_warns_nothing(solved):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, solution, _ = solved
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ax = lcm.plot_policy(model, PARAMS, solution, "alive", "consumption", by="shock")
        assert len(ax.get_lines()) == 3
        ax = lcm.plot_policy(
            model, PARAMS, solution, "alive", "consumption", state="shock", period=[0, 1, 2]
        )
        assert len(ax.get_lines()) == 3  # one per period
    plt.close("all")


def test_initial_conditions_with_both_spellings_of_a_state_are_refused(solved):
    """Values and grid indices of one process state in `simulate`'s initial conditions
    are refused by name (the same check as `compute_policy`'s states)."""
    model, solution, nodes = solved
    initial = {
        "regime": np.zeros(4, dtype=int),
        "wealth": WEALTH,
        "shock": nodes[[0, 1, 2, 1]],
        "shock:index": np.array([0, 1, 2, 1]),
        "kind": np.zeros(4, dtype=int),
    }
    with pytest.raises(
        lcm.InvalidInitialConditionsError,
        match=r"initial_conditions has both 'shock' \(values\) and 'shock:index'",
    ):
        model.simulate(PARAMS, initial, solution, key=jax.random.key(0))
