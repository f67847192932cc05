"""The negative control: the same loop as item_in_loop.py, but the loss is summed on the GPU
and read once at the end: no wait inside the loop."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
work().sum().item()  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
total = torch.zeros((), device="cuda")
spans.begin()
for step in range(args.iters):
    total += work().sum()
spans.end()
value = total.item()
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-clean-async", args, {"item": 1}, {"loop": spans.total_ms()},
       {"loop": loop_ms}, {"finite": value == value})
