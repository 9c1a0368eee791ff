"""Floors for the throughput of a state-action sweep on this machine.

For the same number of points as one period of the benchmark's large model, time
kernels that each do only one kind of work the Bellman kernel needs. Each runs inside a
`lax.scan` over periods whose carry is the next-period value table, exactly like a
backward induction, so XLA hoists the same loop-invariant work out of the loop (the
interpolation indices and weights) and buffers are reused across periods:

- arithmetic: a transcendental (log) plus a few flops per point, max-reduced over the
  action axis (what utility and the budget cost, fused, with no memory traffic);
- interpolation: read next period's value at each point's computed next state, with
  two scalar gathers per point or with one gather of the adjacent pair (what the
  library emits), max-reduced over actions: the floor for any grid-search Bellman step;
- memory: stream a state x action array through memory once.

    python benchmarks/roofline.py [--states 56000 --actions 2000 --periods 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import steady_time


def _time(fn, *args, repeats: int = 3) -> float:
    compiled = jax.jit(fn).lower(*args).compile()
    return steady_time(lambda: compiled(*args), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--states", type=int, default=56_000)  # 1000 x 7 x 2 x 4
    parser.add_argument("--actions", type=int, default=2_000)  # 2 x 1000
    parser.add_argument("--periods", type=int, default=3)
    args = parser.parse_args()
    n_states, n_actions, n_periods = args.states, args.actions, args.periods
    n_table = 1000
    points = n_states * n_actions * n_periods
    states = jnp.linspace(1.0, 100.0, n_states)
    actions = jnp.linspace(0.5, 100.0, n_actions)

    def backward(per_state):
        """A scan over periods; `per_state(table, s)` is one state's reduced value."""

        def run(states, actions):
            def step(table, _):
                values = jax.vmap(lambda s: per_state(table, s, actions))(states)
                return values[:n_table] * 0.9, None

            table = jnp.linspace(0.0, 1.0, n_table)
            return jax.lax.scan(step, table, None, length=n_periods)[0]

        return run

    def arithmetic(table, s, actions):
        return jnp.max(jnp.log(actions) + table[0] * (s - actions))

    def coordinates(s, actions):
        x = jnp.clip((s - actions) * 9.0, 0.0, n_table - 1.0)
        lo = jnp.minimum(x.astype(jnp.int32), n_table - 2)
        return lo, x - lo

    def two_gathers(table, s, actions):
        lo, w = coordinates(s, actions)
        return jnp.max((1 - w) * table[lo] + w * table[lo + 1])

    def pair_gather(table, s, actions):
        lo, w = coordinates(s, actions)
        pair = jax.vmap(lambda i: jax.lax.dynamic_slice(table, (i,), (2,)))(lo)
        return jnp.max((1 - w) * pair[:, 0] + w * pair[:, 1])

    block = jnp.ones((n_states // 8, n_actions))

    def memory(block):
        return jnp.max(block, axis=1)

    rows = {
        "arithmetic (log + flops, fused max)": (
            _time(backward(arithmetic), states, actions),
            points,
        ),
        "interpolation, 2 scalar gathers per point": (
            _time(backward(two_gathers), states, actions),
            points,
        ),
        "interpolation, 1 pair gather per point": (
            _time(backward(pair_gather), states, actions),
            points,
        ),
        "memory (stream a state x action array)": (_time(memory, block), block.size),
    }
    print(
        f"{n_states:,} states x {n_actions:,} actions x {n_periods} periods "
        f"= {points:,} points; devices {jax.devices()}"
    )
    for name, (seconds, count) in rows.items():
        print(f"  {name:44s} {count / seconds:10.3e} points/s")


if __name__ == "__main__":
    main()
