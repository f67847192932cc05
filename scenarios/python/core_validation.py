"""Real-GPU validation of the core pipeline: PyTorch patterns that stall, with ground truth.

Each section runs in a process of its own (so syncspy's per-process report is the section's),
does one warm-up iteration, then --iters timed iterations, and prints one JSON line:

  {"section": ..., "pid": ..., "iters": N, "gpu_ms_per_iter": ..., "wall_ms": ...}

gpu_ms_per_iter is the CUDA-event time of the GPU work each iteration's sync waited for.
Counts are checked exactly by running a section twice (--iters A and --iters B): the report's
counts must differ by exactly (B - A) times the calls per iteration.

  python3 core_validation.py --section item --iters 50
  python3 core_validation.py --all --iters 20        # every section, one child process each
"""
import argparse
import json
import os
import subprocess
import sys
import time

SECTIONS = ["item", "cpu", "to_cuda_pageable", "to_cuda_pinned", "nonzero", "synchronize"]
# Overhead probes: the cost per call of a tight loop, to compare with and without syncspy.
TIGHT = ["tight_item", "tight_pinned"]


def run_tight(name, iters):
    import torch

    dev = torch.device("cuda")
    x = torch.ones(1, device=dev)
    src = torch.ones(16).pin_memory()
    dst = torch.empty(16, device=dev)
    for _ in range(100):
        x.item() if name == "tight_item" else dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if name == "tight_item":
        for _ in range(iters):
            x.item()
    else:
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) * 1e6 / iters
    print(json.dumps({"section": name, "pid": os.getpid(), "iters": iters, "us_per_call": us}), flush=True)


def busy(a, b, reps):
    """GPU work of a few milliseconds: chained matrix products."""
    x = a
    for _ in range(reps):
        x = x @ b
    return x


def run_section(name, iters):
    import torch

    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev) * 1e-3
    b = torch.randn(2048, 2048, device=dev) * 1e-3
    host_pageable = torch.randn(4 << 20)           # 16 MiB, pageable
    host_pinned = torch.randn(4 << 20).pin_memory()
    mask_src = torch.randn(1 << 20, device=dev)
    torch.cuda.synchronize()

    def step():
        if name == "item":
            y = busy(a, b, 4)
            return y[0, 0].item()
        if name == "cpu":
            y = busy(a, b, 4)
            return y[:256, :256].cpu()
        if name == "to_cuda_pageable":
            busy(a, b, 4)
            return host_pageable.to(dev)
        if name == "to_cuda_pinned":
            busy(a, b, 4)
            return host_pinned.to(dev, non_blocking=True)
        if name == "nonzero":
            busy(a, b, 4)
            return torch.nonzero(mask_src > 0)
        if name == "synchronize":
            busy(a, b, 4)
            torch.cuda.synchronize()
            return None
        raise SystemExit(f"unknown section {name}")

    step()  # warm-up: allocator, kernels, pinned staging buffers
    torch.cuda.synchronize()
    # Ground truth for the waits: the GPU time of the work each step's sync waits for.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    busy(a, b, 4)
    end.record()
    end.synchronize()
    gpu_ms = start.elapsed_time(end)

    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"section": name, "pid": os.getpid(), "iters": iters,
                      "gpu_ms_per_iter": gpu_ms, "wall_ms": wall_ms}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=SECTIONS + TIGHT)
    ap.add_argument("--all", action="store_true", help="run every section in a child process")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if args.all:
        for s in SECTIONS:
            subprocess.run([sys.executable, __file__, "--section", s, "--iters", str(args.iters)], check=True)
    elif args.section in TIGHT:
        run_tight(args.section, args.iters)
    elif args.section:
        run_section(args.section, args.iters)
    else:
        ap.error("give --section or --all")


if __name__ == "__main__":
    main()
