"""JAX waits (issue 26): a 20-step loop that blocks on each step's result with
`block_until_ready` and fetches a value with `jax.device_get` (markers `# jax-wait:NAME`).
Measured with JAX 0.11.2 on an H100: the loop's two calls wait on host futures that host
functions XLA queues (`cuLaunchHostFunc`) complete; no CUDA call stalls for them on any
thread, and syncspy records them as `host_wait`s at their lines. The stalls XLA's own threads
make come from the first `step(x, w)` call, which compiles and autotunes; syncspy names the
Python line that was waiting for them (`sites[].waited_by`). Prints one JSON line with the
ground truth: its own count of each call, their lines, and the time it spent in each
(`wall_ms`)."""
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
waited = {"block_until_ready": 0.0, "device_get": 0.0}
for _ in range(args.iters):
    x, m = step(x, w)
    ta = time.perf_counter()
    x.block_until_ready()  # jax-wait:block_until_ready
    tb = time.perf_counter()
    vals.append(float(jax.device_get(m)))  # jax-wait:device_get
    tc = time.perf_counter()
    waited["block_until_ready"] += tb - ta
    waited["device_get"] += tc - tb
loop_ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"scenario": "jax-sync", "pid": os.getpid(), "lines": lines(),
                  "ops": {"block_until_ready": args.iters, "device_get": args.iters},
                  "wall_ms": {"loop": loop_ms, **{k: v * 1e3 for k, v in waited.items()}},
                  "ok": True}), flush=True)
