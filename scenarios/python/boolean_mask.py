"""Boolean-mask indexing (x[x > 0]) every step: the result's size depends on the data, so
torch reads the count back and waits for the GPU."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
y = work()
y[y > 0]  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
sizes = []
for step in range(args.iters):
    spans.begin()
    y = work()
    mask = y > 0
    spans.end()
    sizes.append(y[mask].numel())  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-boolean-mask", args, {"mask_index": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"selected": all(0 < s < y.numel() for s in sizes)})
