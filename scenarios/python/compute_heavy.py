"""A compute-heavy step: bf16 matrix products big enough that the GPU, not the host, sets the
pace, with the loss read by `.item()` once per step."""
import _harness as h
import torch

args = h.parse(__doc__, iters=60, size=4096)
a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16) * 1e-2
spans = h.Spans()
out = []


def step():
    x = a
    for _ in range(8):
        x = torch.tanh(x @ b)
    return x.float().mean()


step().item()  # warm-up
torch.cuda.synchronize()
clock = h.Clock()
for _ in range(args.iters):
    spans.begin()
    v = step()
    spans.end()
    out.append(v.item())  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-compute-heavy", args, {"item": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"values": len(out) == args.iters})
