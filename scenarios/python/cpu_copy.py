"""Moving a result to the CPU every step with t.cpu(): a device-to-host copy into pageable
memory, which waits for the step's GPU work."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
work()[:256, :256].cpu()  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
total = 0.0
for step in range(args.iters):
    spans.begin()
    y = work()[:256, :256]
    spans.end()
    total += float(y.cpu().sum())  # syncspy-site; the sum runs on the CPU tensor
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-cpu-copy", args, {"cpu": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms})
