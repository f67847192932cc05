"""An explicit torch.cuda.synchronize() after every step (often left in from timing code)."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
work()  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
for step in range(args.iters):
    spans.begin()
    work()
    spans.end()
    torch.cuda.synchronize()  # syncspy-site
loop_ms = clock.ms()
h.emit("torch-synchronize", args, {"synchronize": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms})
