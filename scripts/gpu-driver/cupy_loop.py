"""A CuPy loop: N steps, each reading a scalar back with float(x.sum()) (one wait each)."""
import json, os, sys, threading
import cupy as cp

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
x = cp.random.random((4096, 4096), dtype=cp.float32)
float(x.sum())  # warm up: not in the account
for _ in range(n):
    x = cp.tanh(x @ x) * 0.5
    float(x.sum())  # loop-wait
print(json.dumps({"program": "cupy", "waits": n, "iters": n,
                  "tid": threading.get_native_id(), "pid": os.getpid()}))
