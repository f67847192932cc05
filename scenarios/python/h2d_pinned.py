"""The same batch pinned (pin_memory()) and moved with non_blocking=True: the copy is queued
behind the GPU work and the host never waits inside the loop."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
batch = torch.randn(4 << 20).pin_memory()
work()
batch.to("cuda", non_blocking=True)  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
for step in range(args.iters):
    spans.begin()
    work()
    x = batch.to("cuda", non_blocking=True)
    spans.end()
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-h2d-pinned", args, {"to_cuda_non_blocking": args.iters},
       {"work": spans.total_ms()}, {"loop": loop_ms},
       {"copied": bool((x.cpu() == batch).all())})
