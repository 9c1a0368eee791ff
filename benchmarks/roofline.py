"""Floors for the throughput of a state-action sweep on this machine.

For the same number of points as one period of the benchmark's large model, time three
kernels that each do only one kind of work the Bellman kernel needs:

- arithmetic: a transcendental (log) plus a few flops per point, max-reduced over the
  action axis (what utility and the budget cost, fused, with no memory traffic);
- gather: two reads per point from a small table at computed indices (what the
  interpolation of next period's values costs);
- memory: streaming a state x action array through memory once (what materialising the
  state-action product would cost).

    python benchmarks/roofline.py [--points 112000000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp


def _time(fn, *args, repeats: int = 5) -> float:
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--states", type=int, default=56_000)  # 1000 x 7 x 2 x 4
    parser.add_argument("--actions", type=int, default=2_000)  # 2 x 1000
    args = parser.parse_args()
    n_states, n_actions = args.states, args.actions
    points = n_states * n_actions
    states = jnp.linspace(1.0, 100.0, n_states)
    actions = jnp.linspace(0.5, 100.0, n_actions)
    table = jnp.linspace(0.0, 1.0, 1000)

    def arithmetic(states, actions):
        def at_state(s):
            return jnp.max(jnp.log(actions) + 0.9 * (s - actions) * 1e-3)

        return jax.vmap(at_state)(states)

    def gather(states, actions, table):
        def at_state(s):
            x = (s - actions) * 9.0
            lo = jnp.clip(x.astype(jnp.int32), 0, 998)
            w = x - lo
            return jnp.max((1 - w) * table[lo] + w * table[lo + 1])

        return jax.vmap(at_state)(states)

    block = jnp.ones((n_states // 8, n_actions))

    def memory(block):
        return jnp.max(block, axis=1)

    rows = {
        "arithmetic (log + flops, fused max)": (_time(arithmetic, states, actions), points),
        "gather (2 table reads per point)": (_time(gather, states, actions, table), points),
        "memory (stream a state x action array)": (_time(memory, block), block.size),
    }
    print(
        f"{points:,} state-action points ({n_states:,} states x {n_actions:,} actions); "
        f"devices {jax.devices()}"
    )
    for name, (seconds, count) in rows.items():
        print(f"  {name:42s} {count / seconds:10.3e} points/s")


if __name__ == "__main__":
    main()
