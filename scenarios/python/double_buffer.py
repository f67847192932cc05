"""Double buffering with two streams: a side stream copies the next pinned batch to the GPU
while the default stream computes on the current one; wait_stream orders them on the GPU, so
the host never waits inside the loop."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
copy_stream = torch.cuda.Stream()
batches = [torch.randn(args.size, args.size).pin_memory() for _ in range(2)]


def prefetch(i):
    with torch.cuda.stream(copy_stream):
        return batches[i % 2].to("cuda", non_blocking=True)


work(prefetch(0) * 1e-3)  # warm-up
torch.cuda.synchronize()

clock = h.Clock()
main = torch.cuda.current_stream()
spans.begin(copy_stream)
nxt = prefetch(0)
for step in range(args.iters):
    main.wait_stream(copy_stream)
    cur = nxt
    cur.record_stream(main)
    if step + 1 < args.iters:
        nxt = prefetch(step + 1)
    out = work(cur * 1e-3)
spans.end(main)
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-double-buffer", args, {"prefetch": args.iters}, {"loop": spans.total_ms()},
       {"loop": loop_ms}, {"finite": bool(torch.isfinite(out).all())})
