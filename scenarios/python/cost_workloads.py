"""The workloads of syncspy's published end-to-end cost (docs/performance.md, "End-to-end
cost"), each timed inside its own process after a warm-up, so that start-up (the library's
and the framework's) is not part of the figure:

- `mlp`: a launch-bound PyTorch MLP step (small batch, four layers, forward, backward, SGD)
  with the loss read by `.item()` every step;
- `transformer`: a PyTorch transformer encoder step in bf16 (autocast), AdamW, the loss read
  every step;
- `jax`: a jitted JAX step, then `block_until_ready` and `jax.device_get` of a scalar: the
  loop whose waits are `host_wait`s (two per step, at the lines marked `# cost-wait:NAME`).

Prints one JSON line: the workload, steps, ms per step (the timed loop's wall time over its
steps), and for `jax` the lines of its two waits (the ground truth for the counts).

    python3 scenarios/python/cost_workloads.py --workload jax --steps 2000
"""
import argparse
import json
import os
import re
import time

WORKLOADS = ("mlp", "transformer", "jax")


def marked_lines():
    out = {}
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            m = re.search(r"\S.*#\s*cost-wait:(\w+)\s*$", text)
            if m:
                out[m.group(1)] = i
    return out


def torch_loop(make_step, steps, warmup):
    import torch

    step = make_step(torch)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def mlp(torch):
    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def transformer(torch):
    torch.manual_seed(0)
    dev = "cuda"
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 256, 1024, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def jax_setup():
    """The JAX loop's jitted step (eight products of 2048 x 2048 and `tanh`) and its inputs."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x, w):
        for _ in range(8):
            x = jnp.tanh(x @ w)
        return x, x.mean()

    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (2048, 2048))
    w = jax.random.normal(key, (2048, 2048)) * 1e-2
    return jax, step, x, w


def jax_step():
    """The JAX loop's step and its two waits, as one function (scripts/compare_ab.py times it)."""
    jax, step, x0, w = jax_setup()
    state = [x0]

    def one():
        x, m = step(state[0], w)
        x.block_until_ready()
        state[0] = x
        return jax.device_get(m)

    return one


TORCH_STEPS = {"mlp": mlp, "transformer": transformer}


def make_step(name):
    """A function that runs one step of workload `name` (the framework imported on the way)."""
    if name == "jax":
        return jax_step()
    import torch

    return TORCH_STEPS[name](torch)


def jax_loop(steps, warmup):
    jax, step, x, w = jax_setup()
    for _ in range(warmup):
        x, m = step(x, w)
        x.block_until_ready()
        jax.device_get(m)
    t0 = time.perf_counter()
    for _ in range(steps):
        x, m = step(x, w)
        x.block_until_ready()  # cost-wait:block_until_ready
        jax.device_get(m)  # cost-wait:device_get
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=WORKLOADS, required=True)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: 1000, 100, 2000)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    args = ap.parse_args()
    steps = args.steps or {"mlp": 1000, "transformer": 100, "jax": 2000}[args.workload]
    if args.workload == "jax":
        seconds = jax_loop(steps, args.warmup)
    else:
        seconds = torch_loop(TORCH_STEPS[args.workload], steps, args.warmup)
    print(json.dumps({"workload": args.workload, "pid": os.getpid(), "steps": steps,
                      "ms_per_step": seconds * 1e3 / steps, "lines": marked_lines()}), flush=True)


if __name__ == "__main__":
    main()
