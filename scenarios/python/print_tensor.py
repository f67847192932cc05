"""Printing a CUDA tensor every step (print(t)): formatting reads the values on the host, so
each print waits for the GPU work that produced them."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
print(work()[:2, :2])  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
for step in range(args.iters):
    spans.begin()
    y = work()
    t = y[:2, :2] * 1e6
    spans.end()
    print(t)  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-print-tensor", args, {"print": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms})
