"""A JAX loop: N steps, each waiting twice, with block_until_ready and jax.device_get.
Prints its own account and the user's thread id (to tell whose waits syncspy saw)."""
import json, os, sys, threading
import jax, jax.numpy as jnp

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
f = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)
x = jnp.ones((2048, 2048), jnp.float32)
f(x).block_until_ready()  # compile and warm up: not in the account
for _ in range(n):
    y = f(x)
    y.block_until_ready()  # loop-wait
    jax.device_get(y[0, :8])  # loop-wait
print(json.dumps({"program": "jax", "waits": 2 * n, "iters": n,
                  "tid": threading.get_native_id(), "pid": os.getpid()}))
