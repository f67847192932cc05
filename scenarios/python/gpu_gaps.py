"""GPU idle gaps of known length, for checking syncspy's GPU idle measurement: each step queues
about --work-ms of GPU work, waits for it with torch.cuda.synchronize() (a device sync: the GPU
drains while the host is inside it), then the host sleeps --sleep-ms before queueing the next
step. The GPU is idle from the end of one step's work to the start of the next: about the sleep,
plus the return from the sync and the next launch. At exit one JSON line gives, per step, the
host's CLOCK_MONOTONIC times (ns) when the sync returned and when the next work was queued: the
expected gap is their difference, give or take a launch latency. Not a manifest scenario."""
import argparse
import json
import os
import time

import torch

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--iters", type=int, default=50)
ap.add_argument("--sleep-ms", type=float, default=2.0)
ap.add_argument("--size", type=int, default=2048)
ap.add_argument("--reps", type=int, default=8, help="matrix products per step (the work)")
args = ap.parse_args()

a = torch.randn(args.size, args.size, device="cuda") * 1e-3
b = torch.randn(args.size, args.size, device="cuda") * 1e-3


def work():
    x = a
    for _ in range(args.reps):
        x = x @ b
    return x


work()
torch.cuda.synchronize()  # warm-up
returned, queued = [], []
for i in range(args.iters):
    queued.append(time.monotonic_ns())
    work()
    torch.cuda.synchronize()  # syncspy-gap
    returned.append(time.monotonic_ns())
    time.sleep(args.sleep_ms / 1e3)
# The gap after step i ends when step i + 1 is queued (the last one is followed by nothing).
expected = [queued[i + 1] - returned[i] for i in range(args.iters - 1)]
print(json.dumps({"scenario": "gpu-gaps", "pid": os.getpid(), "iters": args.iters,
                  "sleep_ms": args.sleep_ms, "expected_gap_ns": expected, "ok": True}),
      flush=True)
