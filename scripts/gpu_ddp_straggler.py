"""A two-or-more-rank NCCL job for scripts/gpu-ddp-straggler.sh (issue 33), started by
`torchrun --nproc-per-node N`. Each step every rank multiplies a matrix and all-reduces a
buffer, then reads the loss with `.item()`. Rank `--late` first reads a value with `.item()`
(the marked line) and then does `--host-ms` of host work before its all-reduce, so every other
rank waits for it inside the all-reduce and then in its own `.item()` after it.

`--mode cost` is the all-reduce-heavy loop for the cost of the collective hooks: no late rank,
`--steps` all-reduces of `--mb` MiB back to back, one `.item()` every 50.

At exit each rank prints one JSON line: rank, steps, loop seconds, and the host time it
measured itself around every call that waits for the GPU (`waits_ns`, perf_counter)."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100)
p.add_argument("--late", type=int, default=1)
p.add_argument("--host-ms", type=float, default=15.0)
p.add_argument("--size", type=int, default=2048)
p.add_argument("--mb", type=float, default=4.0)
p.add_argument("--mode", choices=["straggler", "cost"], default="straggler")
args = p.parse_args()

local = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
dist.init_process_group("nccl", device_id=dev)
rank = dist.get_rank()
x = torch.randn(args.size, args.size, device=dev)
w = torch.randn(args.size, args.size, device=dev)
buf = torch.ones(int(args.mb * (1 << 20) / 4), device=dev)
waits = 0


def timed(f):
    """Calls f, adding the host time it took to this rank's own account of its waits."""
    global waits
    t = time.perf_counter_ns()
    v = f()
    waits += time.perf_counter_ns() - t
    return v


timed(torch.cuda.synchronize)
dist.barrier()  # not a wait for the GPU: the first collective connects the ranks
timed(torch.cuda.synchronize)
print(f"rank {rank}: loop", flush=True)
t0 = time.perf_counter()
for step in range(args.steps):
    if args.mode == "cost":
        dist.all_reduce(buf)
        if step % 50 == 49:
            timed(lambda: buf[0].item())
        continue
    y = x @ w
    if rank == args.late:
        v = timed(lambda: y[0, 0].item())  # the late rank's line
        end = time.perf_counter() + args.host_ms / 1e3
        while time.perf_counter() < end:
            pass
    dist.all_reduce(buf)
    loss = timed(lambda: buf[0].item())
timed(torch.cuda.synchronize)
loop_s = time.perf_counter() - t0
print(json.dumps({"rank": rank, "steps": args.steps, "loop_s": loop_s, "waits_ns": waits}), flush=True)
dist.destroy_process_group()
