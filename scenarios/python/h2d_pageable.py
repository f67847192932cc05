"""A batch moved to the GPU with x.to("cuda") from ordinary (pageable) memory every step: the
copy is staged through the CPU and waits for the GPU work queued before it."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
batch = torch.randn(4 << 20)  # 16 MiB, pageable
work()
batch.to("cuda")  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
for step in range(args.iters):
    spans.begin()
    work()
    x = batch.to("cuda")  # syncspy-site
    spans.end()
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-h2d-pageable", args, {"to_cuda": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"copied": bool((x.cpu() == batch).all())})
