"""Polling waits on a GPU host (issue 26): a loop that spins on `torch.cuda.Event.query()`
until queued work is done, and one that spins on CuPy's `Stream.done` (when CuPy is there).
Each spin that found the work not done at least once is one wait; the program prints its own
count of them, and of the queries it made, as one JSON line, for the report's `poll_wait`
count to be compared with (scripts/gpu-polling.sh).

    python3 scripts/gpu-polling.py [--iters N]
"""
import argparse
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=20)
args = ap.parse_args()

a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
truth = {"torch_waits": 0, "torch_queries": 0, "cupy_waits": 0, "cupy_queries": 0}
for _ in range(args.iters):
    b = a @ a
    for _ in range(4):
        b = b @ a / 4096
    e = torch.cuda.Event()
    e.record()
    polls = 0
    while True:
        polls += 1
        if e.query():  # the spin: syncspy-site
            break
    truth["torch_queries"] += polls
    truth["torch_waits"] += polls > 1
try:
    import cupy

    s = cupy.cuda.Stream(non_blocking=True)
    x = cupy.random.random((4096, 4096), dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    for _ in range(args.iters):
        with s:
            y = x @ x
            for _ in range(4):
                y = y @ x / 4096
        polls = 0
        while True:
            polls += 1
            if s.done:  # the CuPy spin
                break
        truth["cupy_queries"] += polls
        truth["cupy_waits"] += polls > 1
except ImportError:
    truth["cupy"] = "not installed"
print(json.dumps(truth), flush=True)
