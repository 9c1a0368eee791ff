"""The exact forward distribution (`model.distribution`) against independent references.

- A Monte Carlo simulation of 10⁵ subjects (`model.simulate`, off-grid states) of a model
  with Rouwenhorst income, mortality and taste shocks: every moment within 4 standard
  errors in every period (on a fine wealth grid: the distribution puts mass on grid
  nodes, a discretisation whose bias shrinks with the grid step).
- A NumPy oracle that pushes the mass of the same model by hand from the choice
  probabilities and policies at the nodes.
- Mass conservation, jit/vmap, `jax.grad` against central finite differences.
"""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lcm_eqx as lcm  # noqa: E402
from tests.models import life_cycle as lc  # noqa: E402
from tests.models import retirement  # noqa: E402

N_PERIODS = 6


def initial_conditions(n, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "regime": jnp.zeros(n, dtype=int),
        "wealth": jnp.asarray(rng.uniform(1.0, 5.0, n)),
        "income:index": jnp.asarray(rng.integers(0, 3, n)),
    }


@functools.cache
def solved(n_wealth=60, solver="dcegm"):
    model = lc.build(N_PERIODS, n_wealth=n_wealth, solver=solver)
    return model, model.solve(lc.PARAMS)


@functools.cache
def small_distribution():
    model, solution = solved()
    return model, solution, model.distribution(lc.PARAMS, initial_conditions(200), solution)


@pytest.mark.parametrize(
    ("n", "n_wealth"),
    [(100_000, 300), pytest.param(1_000_000, 1000, marks=pytest.mark.slow)],
    ids=["1e5", "1e6"],
)
def test_moments_match_a_monte_carlo_simulation(n, n_wealth):
    # Measured: |z| <= 2.4 for every moment and period with 10⁵ subjects on 300 wealth
    # nodes, 1.3 with 10⁶ subjects on 1000 nodes. With 60 wealth nodes the
    # discretisation bias reaches 7 standard errors of 10⁵ subjects.
    model, solution = solved(n_wealth=n_wealth)
    initial = initial_conditions(n)
    dist = model.distribution(lc.PARAMS, initial, solution)
    df = model.simulate(lc.PARAMS, initial, solution, key=jax.random.key(1)).to_dataframe()
    alive = df[df["regime"] != "dead"]
    working = df[df["regime"] == "working"]
    present = df.groupby("period").size().to_numpy()

    def z_scores(exact, samples, binary=False):
        groups = samples.groupby(level=0)
        mean, count = groups.mean().to_numpy(), groups.count().to_numpy()
        exact = np.asarray(exact)[groups.mean().index.to_numpy()]
        if binary:
            # The exact share's binomial standard error (a sample of a near-certain
            # event has none), plus one subject's worth.
            se = np.sqrt(exact * (1 - exact) / count) + 1 / count
        else:
            se = groups.std().to_numpy() / np.sqrt(count)
        return (exact - mean) / se

    by_period = alive.set_index("period")
    z = {
        "mean wealth": z_scores(dist.mean("wealth"), by_period["wealth"]),
        "mean consumption": z_scores(dist.mean("consumption"), by_period["consumption"]),
        "mean income": z_scores(dist.mean("income"), by_period["income"]),
        "share working": z_scores(
            dist.share("labor", lc.Labor.work),
            working.set_index("period")["labor"].astype(str).eq("work").astype(float),
            binary=True,
        ),
        "in working": z_scores(
            dist.regime_share("working"),
            df.set_index("period")["regime"].astype(str).eq("working").astype(float),
            binary=True,
        ),
    }
    assert present[0] == n
    for name, scores in z.items():
        assert scores.shape == (N_PERIODS,), name
        assert np.max(np.abs(scores)) < 4.0, (name, scores)


def test_mass_is_conserved_and_never_negative():
    _, _, dist = small_distribution()
    total = dist.total() + dist.exited + dist.stranded
    # Measured: 1e-15.
    np.testing.assert_allclose(total, 1.0, rtol=0, atol=1e-12)
    for mass in dist.mass.values():
        assert np.all(np.asarray(mass) >= 0)
    np.testing.assert_allclose(dist.stranded, 0.0, atol=1e-15)
    # The dead: mass that arrives there in period t has exited by period t + 1.
    dead = np.asarray(dist.mass["dead"])
    np.testing.assert_allclose(np.diff(dist.exited), dead[:-1], atol=1e-15)
    assert float(dist.exited[-1]) > 0.01


def test_mass_follows_a_numpy_oracle():
    """Push the mass by hand from the distribution's choices and policies at the nodes."""
    _model, _, dist = small_distribution()
    p = lc.PARAMS
    wealth = np.linspace(0.5, 30.0, 60)
    income, transition = (np.asarray(a) for a in lcm.rouwenhorst(3, 0.9, 0.2))
    survival = np.asarray(p["survival_probability"])
    r = p["interest_rate"]
    mass = {k: np.asarray(dist.mass[k][0]) for k in ("working", "retired")}

    def push(m_next, into, amount):
        """Mass `amount (n_wealth, n_income)` at next wealth `m_next`, income drawn."""
        j = np.clip(np.searchsorted(wealth, m_next, side="right") - 1, 0, len(wealth) - 2)
        w = np.clip((m_next - wealth[j]) / (wealth[j + 1] - wealth[j]), 0.0, 1.0)
        for z in range(3):
            for k in range(3):
                np.add.at(into[:, k], j[:, z], (1 - w[:, z]) * amount[:, z] * transition[z, k])
                np.add.at(into[:, k], j[:, z] + 1, w[:, z] * amount[:, z] * transition[z, k])

    for t in range(N_PERIODS - 1):
        np.testing.assert_allclose(dist.mass["working"][t], mass["working"], atol=1e-13)
        np.testing.assert_allclose(dist.mass["retired"][t], mass["retired"], atol=1e-13)
        new = {k: np.zeros((60, 3)) for k in mass}
        choice = np.asarray(dist.choice["working"][t])
        c = np.asarray(dist.actions["working"]["consumption"][t])
        for labor, target, alive in ((0, "working", 1), (1, "retired", 1)):
            earned = p["wage"] * np.exp(income)[None, :] * (labor == 0)
            m_next = (1 + r) * (wealth[:, None] - c[..., labor]) + earned
            amount = mass["working"] * choice[..., labor] * survival[t] * alive
            push(m_next, new[target], amount)
        c = np.asarray(dist.actions["retired"]["consumption"][t])
        m_next = (1 + r) * (wealth[:, None] - c) + p["pension"]
        push(m_next, new["retired"], mass["retired"] * survival[t])
        mass = new


def test_choices_are_the_solutions_choice_probabilities():
    model, solution, dist = small_distribution()
    for t in range(N_PERIODS):
        expected = lcm.choice_probabilities(model, lc.PARAMS, solution, "working", t)
        np.testing.assert_allclose(dist.choice["working"][t], expected, atol=1e-12)


@pytest.mark.slow
def test_initial_mass_as_arrays_jit_and_vmap():
    model, _solution = solved()
    start = np.zeros((60, 3))
    start[5, 1] = 1.0

    def moment(params):
        dist = model.distribution(params, {"working": start}, validate="off")
        return dist.mean("wealth")

    eager = moment(lc.PARAMS)
    np.testing.assert_allclose(eager[0], np.linspace(0.5, 30.0, 60)[5])
    np.testing.assert_allclose(jax.jit(moment)(lc.PARAMS), eager, rtol=1e-12)
    batch = {**lc.PARAMS, "wage": jnp.asarray([2.1, 2.5])}
    vmapped = jax.vmap(moment, in_axes=({k: (0 if k == "wage" else None) for k in batch},))(batch)
    np.testing.assert_allclose(vmapped[0], eager, rtol=1e-10)
    assert float(vmapped[1][-1]) > float(eager[-1])


@pytest.mark.slow
def test_process_values_under_jit_are_binned_on_the_traced_nodes():
    # Under jit the income nodes depend on traced parameters: the values were converted
    # to NumPy there (a raw TracerArrayConversionError) before.
    model, solution = solved()
    by_index = initial_conditions(50)
    nodes = small_distribution()[2].state_values["working"]["income"][0]
    by_value = {k: v for k, v in by_index.items() if k != "income:index"}
    by_value["income"] = nodes[by_index["income:index"]]
    eager = model.distribution(lc.PARAMS, by_index, solution).mean("wealth")
    jitted = jax.jit(lambda p: model.distribution(p, by_value, solution).mean("wealth"))
    np.testing.assert_allclose(jitted(lc.PARAMS), eager, rtol=1e-12)
    off_node = {**by_value, "income": by_value["income"] + 0.01}
    with pytest.raises(Exception, match=r"not a node of 'income'.*income:index"):
        jax.block_until_ready(
            jax.jit(lambda p: model.distribution(p, off_node, solution).mean("wealth"))(lc.PARAMS)
        )


def test_new_parameter_values_do_not_recompile():
    from lcm_eqx._estimation._distribution import forward

    model, solution = solved()
    initial = initial_conditions(20)
    model.distribution(lc.PARAMS, initial, solution)
    before = forward._cache_size()
    other = {**lc.PARAMS, "wage": 2.2}
    model.distribution(other, initial, model.solve(other))
    assert forward._cache_size() == before


GRADIENT_PARAMS = [
    ("discount_factor",),
    ("disutility_of_work",),
    ("wage",),
    ("taste_shock_scale",),
    ("working", "next_income", "rho"),
    ("working", "next_income", "sigma"),
]


def _get(params, path):
    for key in path:
        params = params[key]
    return params


def _set(params, path, value):
    if len(path) == 1:
        return {**params, path[0]: value}
    return {**params, path[0]: _set(params[path[0]], path[1:], value)}


@functools.cache
def moment_and_gradient(solver):
    """A moment of the distribution (jitted) and its gradient at `lc.PARAMS`: compiled
    once for all the parameters a test checks, not once per parameter (the gradient's
    program is the costliest compile of this file), and with the model's compiler
    options (`Model.compiler_options`: DC-EGM's, about 35 % less compile)."""
    model = lc.build(N_PERIODS, n_wealth=60, solver=solver)
    start = {"working": np.full((60, 3), 0.0)}
    start["working"][4:12, :] = 1.0 / 24

    def moment(params):
        dist = model.distribution(params, start, validate="off")
        return jnp.sum(dist.mean("wealth")) + 10.0 * jnp.sum(dist.share("labor", "work")[:-1])

    gradient = jax.jit(jax.grad(moment), compiler_options=model.compiler_options())
    return jax.jit(moment), gradient(lc.PARAMS)


@pytest.mark.slow
@pytest.mark.parametrize("path", GRADIENT_PARAMS, ids=lambda p: p[-1])
def test_gradients_of_moments_match_finite_differences(path):
    objective, gradient = moment_and_gradient("dcegm")
    x = float(_get(lc.PARAMS, path))
    h = 1e-5 * max(abs(x), 0.1)
    fd = (objective(_set(lc.PARAMS, path, x + h)) - objective(_set(lc.PARAMS, path, x - h))) / (
        2 * h
    )
    g = float(_get(gradient, path))
    assert abs(g - float(fd)) <= 1e-5 * abs(float(fd)) + 1e-9, (g, float(fd))


def test_grid_search_regimes():
    model, solution = solved(solver="grid")
    dist = model.distribution(lc.PARAMS, initial_conditions(100), solution)
    np.testing.assert_allclose(dist.total() + dist.exited + dist.stranded, 1.0, atol=1e-12)
    consumption = np.asarray(dist.actions["retired"]["consumption"])
    grid = np.linspace(0.05, 30.0, 200)
    assert np.all(np.min(np.abs(consumption[..., None] - grid), axis=-1) < 1e-12)


def test_retirement_model_without_stochastic_states():
    model = retirement.build(4, taste_shocks=True, solver=retirement.dcegm(60))
    params = {**retirement.PARAMS, "taste_shock_scale": 0.3}
    initial = {"regime": jnp.zeros(10, dtype=int), "wealth": jnp.linspace(5.0, 100.0, 10)}
    dist = model.distribution(params, initial)
    np.testing.assert_allclose(dist.total(), 1.0, atol=1e-12)
    np.testing.assert_allclose(dist.mean("wealth")[0], 52.5, rtol=1e-12)
    assert dist.share("labor", "work").shape == (4,)


def test_bad_input_raises():
    model, solution = solved()
    with pytest.raises(lcm.InvalidInitialConditionsError, match="sum to 1"):
        model.distribution(lc.PARAMS, {"working": np.zeros((60, 3))}, solution)
    with pytest.raises(lcm.InvalidInitialConditionsError, match="shape"):
        model.distribution(lc.PARAMS, {"working": np.ones(3)}, solution)
    with pytest.raises(lcm.InvalidInitialConditionsError, match="not regimes"):
        model.distribution(lc.PARAMS, {"workers": np.ones(3)}, solution)
    _, _, dist = small_distribution()
    with pytest.raises(lcm.LcmError, match="not a discrete"):
        dist.share("wealth", 1)
    with pytest.raises(lcm.LcmError, match="not a label"):
        dist.share("labor", "sleep")
    with pytest.raises(lcm.LcmError, match="not all states, actions or functions"):
        dist.mean("savings")


def test_splayed_wealth_axis_gives_the_same_distribution():
    params = {**retirement.PARAMS, "taste_shock_scale": 0.3}
    initial = {"regime": jnp.zeros(10, dtype=int), "wealth": jnp.linspace(5.0, 100.0, 10)}
    plain = retirement.build(4, taste_shocks=True, solver=retirement.dcegm(60))
    splayed = retirement.build(
        4, taste_shocks=True, solver=retirement.dcegm(60), wealth_batch_size=30
    )
    a = plain.distribution(params, initial)
    b = splayed.distribution(params, initial)
    for regime in ("working", "retired"):
        np.testing.assert_allclose(a.mass[regime], b.mass[regime], rtol=0, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("path", [("wage",), ("working", "next_income", "sigma")], ids=str)
def test_grid_search_gradients_where_smooth(path):
    # Wage and the income process move next states given the chosen grid point, and the
    # choice probabilities through `v_d`: smooth as long as no argmax flips.
    objective, gradient = moment_and_gradient("grid")
    x = float(_get(lc.PARAMS, path))
    h = 1e-6 * max(abs(x), 0.1)
    fd = (objective(_set(lc.PARAMS, path, x + h)) - objective(_set(lc.PARAMS, path, x - h))) / (
        2 * h
    )
    g = float(_get(gradient, path))
    assert abs(g - float(fd)) <= 1e-5 * abs(float(fd)) + 1e-9, (g, float(fd))


def test_moments_of_functions():
    _, _, dist = small_distribution()
    p = lc.PARAMS
    income = np.exp(np.asarray(dist.state_values["working"]["income"]))  # (T, 3)
    # labor_income = wage · exp(income) when working: its mean over workers' mass.
    weight = np.asarray(dist.mass["working"])[..., None] * np.asarray(dist.choice["working"])
    earned = p["wage"] * income[:, None, :, None] * (np.arange(2) == 0)
    expected = np.sum(weight * earned, axis=(1, 2, 3)) / np.sum(weight, axis=(1, 2, 3))
    np.testing.assert_allclose(dist.mean("labor_income"), expected, rtol=1e-12)
    np.testing.assert_allclose(
        dist.expect(lambda labor_income, consumption: labor_income - consumption, "working"),
        dist.mean("labor_income") - dist.mean("consumption", "working"),
        rtol=1e-10,
    )
    assert np.all(np.isfinite(np.asarray(dist.mean("utility"))[:-1]))


@pytest.mark.slow
def test_sharded_permanent_type_gives_the_same_distribution():
    """4 host devices: a sharded skill that never transitions gives the unsharded mass,
    the mass stays split over the devices along skill, and the compiled forward pass
    moves nothing between devices."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("distribution_devices.py")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["difference"] <= 1e-14
    assert report["spec"][-1] == "skill"
    assert report["collectives"] == []


def test_retirement_model_gradients_match_finite_differences():
    # The moments the calibration example fits (share working, mean wealth), which move
    # strongly with the disutility of work and the taste-shock scale.
    # Measured: relative errors 4e-11 .. 7e-10.
    model = retirement.build(4, n_wealth=60, taste_shocks=True, solver=retirement.dcegm(60))
    params = {**retirement.PARAMS, "taste_shock_scale": 0.3}
    initial = {"regime": jnp.zeros(10, dtype=int), "wealth": jnp.linspace(5.0, 100.0, 10)}

    def moment(p):
        dist = model.distribution(p, initial, validate="off")
        return jnp.sum(dist.share("labor", "work")[:-1]) + jnp.sum(dist.mean("wealth")) / 100

    gradient = jax.jit(jax.grad(moment), compiler_options=model.compiler_options())(params)
    objective = jax.jit(moment)
    for name in (
        "discount_factor",
        "disutility_of_work",
        "wage",
        "taste_shock_scale",
        "interest_rate",
    ):
        h = 1e-5 * max(abs(params[name]), 0.1)
        fd = (
            objective({**params, name: params[name] + h})
            - objective({**params, name: params[name] - h})
        ) / (2 * h)
        assert abs(float(fd)) > 0.05, name
        assert abs(float(gradient[name]) - float(fd)) <= 1e-6 * abs(float(fd)), name


def test_choice_probabilities_over_several_axes_equal_the_flattened_ones():
    """The distribution's choice probabilities reduce over every discrete action's axis
    at once (no flatten): without taste shocks 1 at numpy's first argmax in row-major
    order (ties, NaN as argmax takes it), 0 everywhere when no action is feasible; with
    them the softmax over all entries, 0 at a ruled-out one."""
    from lcm_eqx._estimation import _distribution as distribution_module

    probabilities = distribution_module._probabilities
    rng = np.random.default_rng(0)
    cases = [rng.integers(0, 3, (3, 2, 2)).astype(float) for _ in range(6)]  # ties
    with_nan = rng.normal(size=(2, 3))
    with_nan[1, 0] = np.nan
    infeasible = np.full((2, 2), -np.inf)
    partly = np.array([[-np.inf, 1.0], [1.0, -np.inf]])
    for v in [*cases, with_nan, infeasible, partly]:
        flat = v.reshape(-1)
        expected = np.zeros_like(flat)
        if np.any(np.isfinite(flat)):
            expected[np.argmax(flat)] = 1.0
        np.testing.assert_array_equal(
            probabilities(jnp.asarray(v), None), expected.reshape(v.shape)
        )
        if not np.any(np.isnan(flat)) and np.any(np.isfinite(flat)):
            tempered = np.where(np.isneginf(flat), -np.inf, flat / 0.3)
            soft = np.exp(tempered - np.max(tempered))
            np.testing.assert_allclose(
                probabilities(jnp.asarray(v), 0.3), (soft / soft.sum()).reshape(v.shape),
                rtol=1e-12, atol=1e-300,
            )  # fmt: skip
    np.testing.assert_array_equal(probabilities(jnp.asarray(infeasible), 0.3), 0.0)
    assert float(probabilities(jnp.asarray(2.0), None)) == 1.0
    assert float(probabilities(jnp.asarray(-np.inf), 0.3)) == 0.0
