"""A torch.compile loop (issue 26, deep stacks): the first call of `step` compiles, and the
compiler's own waits run 60 to 80 Python frames deep. Each of those waits should be named at
the user's line that called `step` (marked `# L:step` below), not inside torch._inductor.

    python3 scripts/gpu-compile-deep.py
"""
import torch


@torch.compile
def step(a):
    return torch.relu(a @ a).sum()


a = torch.randn(512, 512, device="cuda")
total = 0.0
for i in range(5):
    x = step(a)  # L:step
    total += x.item()  # L:item
print(f"done {total:.1f}", flush=True)
