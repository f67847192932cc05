"""Shared by the PyTorch scenarios in this folder: their command line, the GPU work each step
queues, CUDA-event timing of that work, and the one ground-truth JSON line each prints at exit.

The line: {"scenario": "torch-...", "pid": ..., "args": {"iters": N, ...},
           "ops": {"item": N, ...}, "gpu_ms": {"work": ...}, "wall_ms": {"loop": ...},
           "checks": {...}, "ok": true}

"ops" counts the Python operations the scenario performed in its timed loop (the CUDA calls
they make are torch's business: scenarios/manifest.toml states them per iteration, checked by
running each scenario at two iteration counts). "gpu_ms" sums CUDA-event timings of the GPU
work the scenario's waits are about. Each scenario does one warm-up step first (allocator,
cuBLAS, pinned staging buffers), outside the counts.
"""
import argparse
import json
import os
import time

import torch


def parse(description, iters=20, size=2048):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--iters", type=int, default=iters, help="timed steps")
    ap.add_argument("--size", type=int, default=size, help="matrix side of the step's work")
    return ap.parse_args()


class Work:
    """About 1.5 ms of GPU work on an H100 (size 2048): chained matrix products, a model's
    forward pass in miniature."""

    def __init__(self, size, reps=4):
        self.a = torch.randn(size, size, device="cuda") * 1e-3
        self.b = torch.randn(size, size, device="cuda") * 1e-3
        self.reps = reps

    def __call__(self, x=None):
        x = self.a if x is None else x
        for _ in range(self.reps):
            x = x @ self.b
        return x


class Spans:
    """GPU time of marked stretches of work, from CUDA event pairs. Read total_ms() only after
    a synchronization covered the last one (reading does not synchronize)."""

    def __init__(self):
        self.pairs = []
        self.open = None

    def begin(self, stream=None):
        self.open = torch.cuda.Event(enable_timing=True)
        self.open.record(stream)

    def end(self, stream=None):
        e = torch.cuda.Event(enable_timing=True)
        e.record(stream)
        self.pairs.append((self.open, e))

    def total_ms(self):
        return sum(a.elapsed_time(b) for a, b in self.pairs)


class Clock:
    def __init__(self):
        self.t0 = time.perf_counter()

    def ms(self):
        return (time.perf_counter() - self.t0) * 1e3


def emit(name, args, ops, gpu_ms, wall_ms, checks=None):
    checks = checks or {}
    line = {
        "scenario": name,
        "pid": os.getpid(),
        "args": {"iters": args.iters, "size": args.size},
        "ops": ops,
        "gpu_ms": gpu_ms,
        "wall_ms": wall_ms,
        "checks": checks,
        "ok": all(checks.values()),
    }
    print(json.dumps(line), flush=True)
    if not line["ok"]:
        raise SystemExit(1)
