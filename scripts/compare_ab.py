"""syncspy's cost measured inside one process: the job runs with libsyncspy.so preloaded
dormant (SYNCSPY_DORMANT=1: the hooks pass through, nothing is recorded) and this script
switches recording on and off under it with `syncspy attach` / `syncspy detach`, block after
block, in the order on off off on (ABBA, which cancels a slow drift). Every block is a fixed
number of seconds of training steps; the figure is the median over cycles of (median step
time of the cycle's on blocks) / (that of its off blocks). Comparing processes instead puts
their start-up differences (clocks, memory placement) into the ratio: about ±10% between two
runs of the same launch-heavy loop on the H100 host, against a fraction of a percent here.

The noise floor is measured the same way: the same cycles, with the off blocks split into two
interleaved halves compared with each other (no tool in either), and a bootstrap over cycles
gives a 95% interval for each ratio.

    LD_PRELOAD=.../libsyncspy.so SYNCSPY_DORMANT=1 python3 scripts/compare_ab.py \\
        --syncspy .../syncspy --workload launch-heavy --cycles 12 --block 2 \\
        --mode stalls --out OUT.json

Modes (the settings `syncspy attach` passes to the library): `stalls` (SYNCSPY_PYTHON=0,
SYNCSPY_GPU_IDLE=off), `python` (Python call sites), `gpu-on` (Python call sites and GPU
activity traced all the time while attached, attach's default), `duty` (Python call sites
and GPU activity traced one second in ten, `syncspy run`'s default).
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

# The workloads of the end-to-end table (docs/performance.md): scenarios/python/cost_workloads.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "scenarios", "python"))
import cost_workloads  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--syncspy", required=True)
ap.add_argument("--workload", choices=["launch-heavy", "compute-heavy", *cost_workloads.WORKLOADS],
                default="launch-heavy",
                help=f"{', '.join(cost_workloads.WORKLOADS)}: the steps of "
                     "scenarios/python/cost_workloads.py")
ap.add_argument("--mode", choices=["stalls", "python", "gpu-on", "duty"], default="python")
ap.add_argument("--cycles", type=int, default=12)
ap.add_argument("--block", type=float, default=2.0, help="seconds of steps per block")
ap.add_argument("--settle", type=float, default=0.5,
                help="seconds of untimed steps before each block: a pause (attach, detach) lets "
                     "a GPU-bound loop's clocks rise, which shows as a faster first second")
ap.add_argument("--out", required=True)
ap.add_argument("--cpus", default="", help="pin the job to these CPUs (e.g. 2,3): less "
                "scheduler noise in a launch-bound loop; the attacher is left unpinned")
opts = ap.parse_args()
ALL_CPUS = os.sched_getaffinity(0)
JOB_CPUS = {int(c) for c in opts.cpus.split(",")} if opts.cpus else set()
if JOB_CPUS:
    os.sched_setaffinity(0, JOB_CPUS)

if opts.workload in cost_workloads.WORKLOADS:
    # JAX's without PyTorch in the process, and without JAX's grab of most of the GPU's
    # memory at start.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    step = cost_workloads.make_step(opts.workload)
elif opts.workload == "launch-heavy":
    import torch  # noqa: E402

    torch.manual_seed(0)
    # The launch-heavy step of scenarios/python/launch_heavy.py: many small kernels.
    size = 256
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(size, size), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(size, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, size, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
else:
    import torch  # noqa: E402

    torch.manual_seed(0)
    # The compute-heavy step of scenarios/python/compute_heavy.py: bf16 matrix products.
    ma = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    mb = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 1e-2

    def step():
        v = ma
        for _ in range(8):
            v = torch.tanh(v @ mb)
        return v.float().mean().item()

SETTINGS = {
    "stalls": {"SYNCSPY_PYTHON": "0", "SYNCSPY_GPU_IDLE": "off"},
    "python": {"SYNCSPY_PYTHON": "1", "SYNCSPY_GPU_IDLE": "off"},
    "gpu-on": {"SYNCSPY_PYTHON": "1", "SYNCSPY_GPU_IDLE": "on"},
    # `syncspy run`'s default: GPU activity traced one second in ten.
    "duty": {"SYNCSPY_PYTHON": "1", "SYNCSPY_GPU_IDLE": "duty"},
}[opts.mode]


def block(seconds):
    """Step times (ms) of `seconds` of training."""
    times = []
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
        if t1 >= end:
            return times


def unpin():
    """The attacher runs on the other CPUs, not on the job's."""
    if JOB_CPUS:
        os.sched_setaffinity(0, (ALL_CPUS - JOB_CPUS) or ALL_CPUS)


SEGMENT = re.compile(rf"^syncspy-{os.getpid()}-[0-9]+$")


def armed():
    """Whether this process has a segment in the folder, which it has while attached."""
    return any(SEGMENT.match(n) for n in os.listdir(os.environ.get("SYNCSPY_DIR", "/dev/shm")))


class Attached:
    """`syncspy attach` on this process, from when it says it is attached to `stop`."""

    def __init__(self):
        env = {**os.environ, **SETTINGS}
        env.pop("LD_PRELOAD", None)
        self.log = open(opts.out + f".attach{len(attaches)}.log", "w+")
        self.p = subprocess.Popen([opts.syncspy, "attach", str(os.getpid()), "--duration", "3600"],
                                  env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                  preexec_fn=unpin)
        t0 = time.perf_counter()
        # Dormant hooks look for the attach at most once a second, from inside a CUDA call:
        # keep calling until the library is armed, which is when its segment appears (the
        # attacher removes it when it ends).
        while time.perf_counter() - t0 < 30:
            step()
            if armed():
                self.ready_s = time.perf_counter() - t0
                return
            if self.p.poll() is not None:
                self.log.seek(0)
                sys.exit(f"syncspy attach ended before attaching:\n{self.log.read()}")
        sys.exit("syncspy attach did not attach within 30 s")

    def stop(self):
        subprocess.run([opts.syncspy, "detach", str(os.getpid())], capture_output=True, timeout=60)
        self.p.wait(timeout=60)
        t0 = time.perf_counter()
        while armed() and time.perf_counter() - t0 < 10:
            time.sleep(0.01)
        self.log.seek(0)
        # The summary's own-time line ("syncspy overhead: ..."), kept with the result.
        self.overhead = next((line.strip() for line in self.log if "syncspy overhead" in line), "")
        return self.p.returncode


attaches = []
block(3.0)  # warm-up: caches, clocks, the allocator
cycles = []
for c in range(opts.cycles):
    on, off = [], []
    for kind in ("on", "off", "off", "on"):
        if kind == "on":
            att = Attached()
            attaches.append(att)
            block(opts.settle)
            on.append(statistics.median(block(opts.block)))
            rc = att.stop()
            if rc != 0:
                sys.exit(f"syncspy attach exited {rc}")
        else:
            block(opts.settle)
            off.append(statistics.median(block(opts.block)))
    cycles.append({"on": on, "off": off})
    print(f"cycle {c}: on {on[0]:.4f} {on[1]:.4f} off {off[0]:.4f} {off[1]:.4f} ms", flush=True)


def ratios(num, den):
    return [statistics.mean(num(c)) / statistics.mean(den(c)) for c in cycles]


def summary(r):
    rng = random.Random(1)
    boot = sorted(statistics.median(rng.choices(r, k=len(r))) for _ in range(2000))
    return {"median": statistics.median(r), "ci95": [boot[50], boot[1949]], "per_cycle": r}


result = {
    "workload": opts.workload,
    "mode": opts.mode,
    "block_s": opts.block,
    "settle_s": opts.settle,
    "cycles": len(cycles),
    "ms_per_step_off": statistics.median(x for c in cycles for x in c["off"]),
    "ms_per_step_on": statistics.median(x for c in cycles for x in c["on"]),
    "on_over_off": summary(ratios(lambda c: c["on"], lambda c: c["off"])),
    # No tool in either half: the first off block of each cycle against the second.
    "noise_floor": summary(ratios(lambda c: c["off"][:1], lambda c: c["off"][1:])),
    "attach_ready_s": statistics.median(x.ready_s for x in attaches),
    "overhead_lines": [x.overhead for x in attaches],
    "blocks": cycles,
}
with open(opts.out, "w") as f:
    json.dump(result, f, indent=1)
o, n = result["on_over_off"], result["noise_floor"]
print(f"{opts.workload} {opts.mode}: on/off {o['median']:.4f} [{o['ci95'][0]:.4f}, {o['ci95'][1]:.4f}], "
      f"noise floor {n['median']:.4f} [{n['ci95'][0]:.4f}, {n['ci95'][1]:.4f}], "
      f"off {result['ms_per_step_off']:.3f} ms/step", flush=True)
