"""The GPU idle behind each sync, measured by the program with CUDA events: the ground truth
for syncspy's measurement of the GPU idle each stall causes (docs/gpu-validation.md). Three
loops, each at its own line, each step: an event, the step's GPU work, an event, then the
step's sync, then host work (a sleep) before the next step:

- `.item()` (a copy into pinned memory and a stream sync), --item-sleep-ms of host work;
- `torch.cuda.synchronize()` (a device sync), --sync-sleep-ms;
- `.cpu()` of a small tensor (a copy and a stream sync), no sleep: the idle is the sync's
  return and the next launch only.

The GPU idle after step k is the time from its end event to step k + 1's start event: the
sync's copy (4 bytes) and the idle through the host's work. Each step's first kernel is a
one-cycle sleep launched right after its start event, so that the event falls within a few
microseconds of the next work's arrival (where the library's measurement ends). At exit one JSON line gives, per
line, the steps and the summed idle after them (the last step of all has no next step and
is left out), their median and the three longest. Not a manifest scenario."""
import argparse
import json
import os
import time

import torch

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--steps", type=int, default=100, help="steps per loop")
ap.add_argument("--item-sleep-ms", type=float, default=2.0)
ap.add_argument("--sync-sleep-ms", type=float, default=1.0)
ap.add_argument("--size", type=int, default=2048)
args = ap.parse_args()

a = torch.randn(args.size, args.size, device="cuda") * 1e-3
b = torch.randn(args.size, args.size, device="cuda") * 1e-3
small = torch.zeros(16, device="cuda")


def work():
    x = a
    for _ in range(4):
        x = x @ b
    return x


work()
torch.cuda.synchronize()  # warm-up
steps = []  # (line name, start event, end event)


def step(name):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    # The step's first kernel right behind its start event: a matrix product's dispatch in
    # PyTorch takes tens of microseconds of host time, idle GPU time the start event would
    # leave out of the idle before it. A one-cycle sleep kernel is dispatched in a few.
    torch.cuda._sleep(1)
    x = work()
    e.record()
    steps.append((name, s, e))
    return x


for _ in range(args.steps):
    x = step("item")
    x[0, 0].item()  # syncspy-line: item
    time.sleep(args.item_sleep_ms / 1e3)
for _ in range(args.steps):
    step("synchronize")
    torch.cuda.synchronize()  # syncspy-line: synchronize
    time.sleep(args.sync_sleep_ms / 1e3)
for _ in range(args.steps):
    step("cpu")
    small.cpu()  # syncspy-line: cpu
torch.cuda.synchronize()
idle = {}
for (name, _, end), (_, start, _) in zip(steps, steps[1:]):
    idle.setdefault(name, []).append(end.elapsed_time(start))
lines = {}
with open(os.path.abspath(__file__)) as f:
    for i, text in enumerate(f, 1):
        if "# syncspy-line: " in text and "syncspy-line: \"" not in text:
            lines[text.rsplit("# syncspy-line: ", 1)[1].strip()] = i
print(json.dumps({"scenario": "idle-after", "pid": os.getpid(), "steps": args.steps,
                  "lines": lines,
                  "idle_after": {k: {"gaps": len(v), "ms": sum(v), "median_ms": sorted(v)[len(v) // 2],
                                     "longest_ms": sorted(v, reverse=True)[:3]}
                                 for k, v in idle.items()},
                  "ok": True}), flush=True)
