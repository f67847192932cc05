"""Checks syncspy's measurement of the GPU idle each sync causes against the program's own
CUDA events, on a GPU host: runs scenarios/python/idle_after.py under `syncspy run` with the
default settings (and any --env given), and prints per sync line: the stalls there (the syncs,
and the pageable copy of `.cpu()`), how many syncspy measured, the idle it measured, the idle
the program's events measured, their ratio and their difference per step. Exits non-zero when
a line is off by more than --tolerance or a run fails. A line whose steps' idle is short (a
median under 0.5 ms: `.cpu()`'s, about 50 us) is judged by its difference per step instead
(at most --abs-us): there a few microseconds of where the events fall are more than 5%.

    python3 scripts/gpu-idle-after.py --syncspy .gpu/syncspy [--env SYNCSPY_GPU_IDLE=on]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scenarios/python/idle_after.py")
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--syncspy", required=True)
ap.add_argument("--python", default=sys.executable)
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--tolerance", type=float, default=0.05)
ap.add_argument("--abs-us", type=float, default=10.0,
                help="the most a short-gap line may differ per step, in microseconds")
ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for the run")
args = ap.parse_args()

with tempfile.TemporaryDirectory() as d:
    report = os.path.join(d, "r.json")
    env = dict(os.environ, SYNCSPY_DIR=d)
    env.update(kv.split("=", 1) for kv in args.env)
    run = subprocess.run([args.syncspy, "run", "--report", report, "--", args.python, SCRIPT,
                          "--steps", str(args.steps)], env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"the run failed ({run.returncode}):\n{run.stderr}")
    truth = json.loads([l for l in run.stdout.splitlines() if l.startswith("{")][-1])
    rep = json.load(open(report))
proc = next(p for p in rep["processes"] if p["pid"] == truth["pid"])
print(f"settings: {' '.join(args.env) or 'default'}; GPU tracing {proc['gpu'].get('mode')}; "
      f"behind_stalls {proc['gpu'].get('behind_stalls')}; library's own time "
      f"{proc.get('overhead_ns', 0) / 1e6:.1f} ms; cost {proc.get('cost')}")
print(f"{'line':<12} {'stalls':>6} {'measured':>9} {'syncspy ms':>11} {'events ms':>10} {'ratio':>7}"
      f" {'us/step':>8}  events: median, three longest (ms)")
bad = False
for name, line in truth["lines"].items():
    syncs = measured = ns = 0
    for s in proc["sites"]:
        if (s.get("location") or "").startswith(f"{SCRIPT}:{line} ") and \
                s["kind"] in ("stream_sync", "device_sync", "memcpy_sync", "memcpy_pageable"):
            syncs += s["count"]
            a = s.get("gpu_idle_after") or {}
            measured += a.get("count", 0)
            ns += a.get("total_ns", 0)
    t = truth["idle_after"][name]
    want = t["ms"]
    ratio = (ns / 1e6) / want if want else float("nan")
    per_step_us = (ns / 1e6 - want) * 1e3 / max(t["gaps"], 1)
    if t["median_ms"] < 0.5:
        ok = abs(per_step_us) <= args.abs_us
    else:
        ok = abs(ratio - 1) <= args.tolerance
    bad |= not ok
    longest = ", ".join(f"{x:.3f}" for x in t["longest_ms"])
    print(f"{name:<12} {syncs:>6} {measured:>9} {ns / 1e6:>11.3f} {want:>10.3f} {ratio:>7.3f}"
          f" {per_step_us:>8.1f}  {t['median_ms']:.3f}; {longest}{'' if ok else '  OFF'}")
sys.exit(1 if bad else 0)
