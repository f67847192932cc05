"""torch.nonzero every step: a data-dependent shape, read back on the host before the result
can be allocated."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
torch.nonzero(work() > 0)  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
counts = []
for step in range(args.iters):
    spans.begin()
    positive = work() > 0
    spans.end()
    counts.append(torch.nonzero(positive).shape[0])  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-nonzero", args, {"nonzero": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"found": all(c > 0 for c in counts)})
