"""CUDA graph replays and GPU busy time (issue 26): one graph of 8 matrix products, replayed
ITERS times with a host pause after each (a sync, then 2 ms of sleep: the GPU idles). The
program measures each replay with CUDA events and prints, as one JSON line, the GPU time its
replays took and the span from the first replay's start to the last one's end. Run under the
library with GPU idle tracing on: the report's busy time over its active span should match,
which holds only if the kernels a graph launch runs are counted as busy.

    SYNCSPY_GPU_IDLE=1 syncspy run --report r.json -- python3 scripts/gpu-graph-replay.py
"""
import argparse
import json
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=100)
ap.add_argument("--eager", action="store_true", help="launch the kernels without a graph")
args = ap.parse_args()

a = torch.randn(4096, 4096, device="cuda")
b = torch.empty_like(a)


def work():
    x = a
    for _ in range(8):
        x = torch.mm(x, a).mul_(1.0 / 4096)
    b.copy_(x)


s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    work()  # warm-up outside capture (cuBLAS workspaces)
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
if not args.eager:
    with torch.cuda.graph(g):
        work()
torch.cuda.synchronize()

marks = []
for _ in range(args.iters):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    if args.eager:
        work()
    else:
        g.replay()
    e1.record()
    e1.synchronize()
    marks.append((e0, e1))
    time.sleep(0.002)
busy_ms = sum(e0.elapsed_time(e1) for e0, e1 in marks)
span_ms = marks[0][0].elapsed_time(marks[-1][1])
print(json.dumps({
    "mode": "eager" if args.eager else "graph",
    "iters": args.iters,
    "busy_ms": round(busy_ms, 3),
    "span_ms": round(span_ms, 3),
    "busy_share": round(busy_ms / span_ms, 4),
}), flush=True)
