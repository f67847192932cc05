"""A JAX loop: a jitted step whose result is fetched to the host with `jax.device_get` every
step (a sync per step). Prints the same ground-truth line as the PyTorch scenarios."""
import argparse
import json
import os
import time

import jax
import jax.numpy as jnp

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--iters", type=int, default=200)
ap.add_argument("--size", type=int, default=1024)
args = ap.parse_args()


@jax.jit
def step(x, w):
    for _ in range(4):
        x = jnp.tanh(x @ w)
    return x, x.mean()


key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (args.size, args.size))
w = jax.random.normal(key, (args.size, args.size)) * 1e-2
x, m = step(x, w)
jax.device_get(m)  # warm-up: compile
t0 = time.perf_counter()
vals = []
for _ in range(args.iters):
    x, m = step(x, w)
    vals.append(float(jax.device_get(m)))  # syncspy-site
loop_ms = (time.perf_counter() - t0) * 1e3
print(json.dumps({"scenario": "jax-loop", "pid": os.getpid(),
                  "args": {"iters": args.iters, "size": args.size},
                  "ops": {"device_get": args.iters}, "gpu_ms": {},
                  "wall_ms": {"loop": loop_ms}, "checks": {}, "ok": True}), flush=True)
