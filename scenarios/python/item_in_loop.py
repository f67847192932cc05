"""A training loop that logs its loss with .item() every step: each .item() waits for the
step's GPU work (torch 2.11: a cudaStreamSynchronize, plus a copy into pinned memory)."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
losses = []
work().sum().item()  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
for step in range(args.iters):
    spans.begin()
    loss = work().sum()
    spans.end()
    losses.append(loss.item())  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-item-in-loop", args, {"item": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"losses": len(losses) == args.iters})
