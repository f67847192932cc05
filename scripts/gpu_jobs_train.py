"""A data-parallel training job for scripts/gpu-jobs.sh: `torchrun --nproc-per-node N` starts N
ranks. With `--backend gloo` (the default) all ranks run on GPU 0 and a forward and backward
pass of a small MLP runs under DistributedDataParallel (gloo all-reduces the gradients on the
CPU). With `--backend nccl` each rank has its own GPU (LOCAL_RANK) and all-reduces its
gradients itself, flattened into one NCCL all-reduce per step, timed with CUDA events on the
rank's stream (from when the stream reaches the all-reduce to when it is done: the time in
the collective, waiting for the other ranks included). Every rank reads `loss.item()` at the
end of each step. Rank `--slow-rank` also computes a metric on the GPU and reads it with
`.item()` in the middle of every step: the injected stall. Its host waits there while the
others are ahead, and they then wait for it in the all-reduce.

At exit each rank prints one JSON line: its rank, steps, loop time and (NCCL) its time in
all-reduces."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=100)
p.add_argument("--slow-rank", type=int, default=1)
p.add_argument("--size", type=int, default=2048)
p.add_argument("--metric-size", type=int, default=4096)
p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
args = p.parse_args()

nccl = args.backend == "nccl"
dist.init_process_group(args.backend)
rank = dist.get_rank()
local = int(os.environ.get("LOCAL_RANK", "0")) if nccl else 0
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(args.size, args.size), torch.nn.ReLU(), torch.nn.Linear(args.size, args.size)
).to(dev)
net = model if nccl else DDP(model)
params = list(model.parameters())
opt = torch.optim.SGD(net.parameters(), lr=1e-4)
x = torch.randn(256, args.size, device=dev)
big = torch.randn(args.metric_size, args.metric_size, device=dev)
losses, metrics, allreduce = [], [], []


def all_reduce_grads():
    flat = torch.cat([q.grad.flatten() for q in params])
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    dist.all_reduce(flat)
    t1.record()
    allreduce.append((t0, t1))
    flat /= dist.get_world_size()
    off = 0
    for q in params:
        n = q.grad.numel()
        q.grad.copy_(flat[off:off + n].view_as(q.grad))
        off += n


def step():
    opt.zero_grad(set_to_none=True)
    out = net(x)
    if rank == args.slow_rank:
        metrics.append((big @ big).relu().mean().item())  # the injected stall
    loss = out.square().mean()
    loss.backward()
    if nccl:
        all_reduce_grads()
    opt.step()
    losses.append(loss.item())


step()  # warm-up
torch.cuda.synchronize()
dist.barrier()
t0 = time.monotonic()
for _ in range(args.iters):
    step()
torch.cuda.synchronize()
wall = time.monotonic() - t0
# The loop's all-reduces (the warm-up's first one left out).
ar_ms = sum(a.elapsed_time(b) for a, b in allreduce[1:]) if nccl else None
print(json.dumps({"rank": rank, "world_size": dist.get_world_size(), "iters": args.iters,
                  "slow_rank": args.slow_rank, "backend": args.backend, "loop_s": wall,
                  "allreduce_ms": ar_ms, "pid": os.getpid()}), flush=True)
dist.destroy_process_group()
