"""A launch-heavy training step: a deep, narrow MLP (many small kernels per step, forward,
backward and an optimizer step) with the loss read by `.item()` once per step. The GPU work of a
step is short, so the host's own cost (and any tool's) shows in the step time."""
import _harness as h
import torch

args = h.parse(__doc__, iters=300, size=256)
torch.manual_seed(0)
layers = []
for _ in range(12):
    layers += [torch.nn.Linear(args.size, args.size), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(args.size, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, args.size, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
spans = h.Spans()
losses = []


def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


for _ in range(5):  # warm-up
    step().item()
torch.cuda.synchronize()
clock = h.Clock()
for _ in range(args.iters):
    spans.begin()
    loss = step()
    spans.end()
    losses.append(loss.item())  # syncspy-site
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-launch-heavy", args, {"item": args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"losses": len(losses) == args.iters})
