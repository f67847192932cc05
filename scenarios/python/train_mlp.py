"""A small but ordinary training job, written the way many are: each step copies a batch from
pageable CPU memory (`.to("cuda")`), runs forward, backward and an optimizer step, and logs the
loss with `.item()`; every `--eval-every` steps it measures accuracy with a boolean mask and
`.item()`. Not a manifest scenario: it runs for `--seconds` and is the job the README's monitor
screen was taken from. At exit it prints one JSON line with what it did (the ground truth to
compare the monitor and the report with).
"""
import argparse
import json
import os
import time

import torch

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--seconds", type=float, default=20.0, help="how long to train")
ap.add_argument("--batch", type=int, default=4096, help="rows per batch")
ap.add_argument("--width", type=int, default=2048, help="hidden layer width")
ap.add_argument("--eval-every", type=int, default=25, help="steps between accuracy checks")
ap.add_argument("--step-log", metavar="FILE",
                help="write one line per step at exit: its end (Unix time, s) and its loss")
args = ap.parse_args()

torch.manual_seed(0)
features, classes = 512, 10
model = torch.nn.Sequential(
    torch.nn.Linear(features, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, classes),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
# A fixed pool of CPU batches in ordinary (pageable) memory, as a naive data loader makes.
pool = [(torch.randn(args.batch, features), torch.randint(0, classes, (args.batch,)))
        for _ in range(8)]

steps = evals = 0
losses = []
ends = []
print(f"training for {args.seconds:g} s", flush=True)  # start-up is over
t0 = time.perf_counter()
while time.perf_counter() - t0 < args.seconds:
    x, y = pool[steps % len(pool)]
    x, y = x.to("cuda"), y.to("cuda")          # pageable host-to-device copies
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())                  # waits for the whole step
    ends.append(time.time())
    steps += 1
    if steps % args.eval_every == 0:
        with torch.no_grad():
            right = model(x).argmax(1) == y
            acc = right[right].numel() / args.batch  # boolean mask: waits for the count
        evals += 1
torch.cuda.synchronize()
wall = time.perf_counter() - t0
if args.step_log:
    with open(args.step_log, "w") as f:
        f.writelines(f"{t:.6f} {l!r}\n" for t, l in zip(ends, losses))
print(json.dumps({
    "scenario": "torch-train-mlp",
    "pid": os.getpid(),
    "ops": {"steps": steps, "item": steps, "to_cuda": 2 * steps, "mask": evals},
    "wall_ms": {"loop": wall * 1e3},
    "checks": {"loss_finite": all(l == l for l in losses)},
}), flush=True)
