"""A data-parallel training job for scripts/gpu-jobs.sh: `torchrun --nproc-per-node N` starts N
ranks, all on GPU 0, joined by the gloo backend (NCCL needs one GPU per rank). Each step is a
forward and backward pass of a small MLP under DistributedDataParallel (gloo all-reduces the
gradients) and `loss.item()` at the end of the step on every rank. Rank `--slow-rank` also
computes a metric on the GPU and reads it with `.item()` in the middle of every step: the
injected stall. Its host waits there while the others are ahead, and they then wait for it in
the all-reduce.

At exit each rank prints one JSON line: its rank, steps and loop time."""
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
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(args.size, args.size), torch.nn.ReLU(), torch.nn.Linear(args.size, args.size)
).to(dev)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
x = torch.randn(256, args.size, device=dev)
big = torch.randn(args.metric_size, args.metric_size, device=dev)
losses, metrics = [], []


def step():
    opt.zero_grad(set_to_none=True)
    out = ddp(x)
    if rank == args.slow_rank:
        metrics.append((big @ big).relu().mean().item())  # the injected stall
    loss = out.square().mean()
    loss.backward()
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
print(json.dumps({"rank": rank, "world_size": dist.get_world_size(), "iters": args.iters,
                  "slow_rank": args.slow_rank, "loop_s": wall,
                  "pid": os.getpid()}), flush=True)
dist.destroy_process_group()
