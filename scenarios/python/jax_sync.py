"""JAX waits the host makes on XLA's own threads (issue 26): a 20-step loop that blocks on
each step's result with `block_until_ready` and fetches a value with `jax.device_get`. The CUDA
calls XLA makes on its own threads have no Python frames; syncspy names the Python line that
was waiting for them (`sites[].waited_by`). Measured with JAX 0.11.2 on an H100: those stalls
come from the first `step(x, w)` call, which compiles and autotunes; the loop's two calls
(markers `# jax-wait:NAME`) wait on host futures and make no stalling CUDA call on any thread.
Prints one JSON line with the ground truth (its own count of each call and their lines)."""
import argparse
import json
import os
import re
import time

import jax
import jax.numpy as jnp

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--size", type=int, default=2048)
args = ap.parse_args()


@jax.jit
def step(x, w):
    for _ in range(8):
        x = jnp.tanh(x @ w)
    return x, x.mean()


def lines():
    """Line numbers of the `# jax-wait:` markers of this file."""
    out = {}
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            m = re.search(r"\S.*#\s*jax-wait:(\w+)\s*$", text)
            if m:
                out[m.group(1)] = i
    return out


key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (args.size, args.size))
w = jax.random.normal(key, (args.size, args.size)) * 1e-2
x, m = step(x, w)
x.block_until_ready()  # warm-up: compile
t0 = time.perf_counter()
vals = []
for _ in range(args.iters):
    x, m = step(x, w)
    x.block_until_ready()  # jax-wait:block_until_ready
    vals.append(float(jax.device_get(m)))  # jax-wait:device_get
loop_ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"scenario": "jax-sync", "pid": os.getpid(), "lines": lines(),
                  "ops": {"block_until_ready": args.iters, "device_get": args.iters},
                  "wall_ms": {"loop": loop_ms}, "ok": True}), flush=True)
