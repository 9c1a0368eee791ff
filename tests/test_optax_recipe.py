"""The optax recipe of docs/estimation.md compiles its step once, whatever the start
(issue 32, item 3): a Python float, a list, a float32 or a float64 array. Without the
recipe's two casts the step is traced twice (the optimizer state's weakly typed scalars
become strong after the first update). A cheap loss stands in for the likelihood: the
retracing is the optimizer's, not the model's."""

import equinox as eqx
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402


def loss(x):
    return jnp.sum((jnp.exp(x) - jnp.array([1.0, 0.5])) ** 2)


def fit(start, *, cast: bool, steps=4):
    optimizer = optax.lbfgs(
        linesearch=optax.scale_by_backtracking_linesearch(max_backtracking_steps=20)
    )

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(x, state):
        value, grad = jax.value_and_grad(loss)(x)
        updates, state = optimizer.update(grad, state, x, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(x, updates), state

    if cast:  # the recipe's two lines
        x = jnp.asarray(start, dtype=float)
        state = jax.tree.map(lambda a: jnp.asarray(a, jnp.result_type(a)), optimizer.init(x))
    else:
        x = jnp.asarray(start)
        state = optimizer.init(x)
    for _ in range(steps):
        x, state = step(x, state)
    return x


STARTS = {
    "python-float": 0.3,
    "list": [0.3, -0.2],
    "float32": jnp.array([0.3, -0.2], dtype=jnp.float32),
    "float64": jnp.log(jnp.array([1.4, 0.7])),
}


@pytest.mark.parametrize("start", list(STARTS.values()), ids=list(STARTS))
def test_the_recipe_compiles_its_step_once(start):
    x = fit(start, cast=True, steps=8)
    assert float(loss(x)) < float(loss(jnp.asarray(start, dtype=float)))


def test_without_the_casts_the_step_is_traced_again():
    with pytest.raises(RuntimeError, match="traced"):
        fit(STARTS["float64"], cast=False)
