#!/usr/bin/env python3
"""Issue 26 on a GPU host with CuPy: runs scenarios/python/cupy_host_func.py under
`syncspy run --report` and checks that (a) the line that waits for a host function has
exactly one `host_wait` per wait, compared with the script's own clock, and (b) a host
function captured into a CUDA graph ran at every replay under the library (the script's own
count). Exits non-zero on a failed check.

    python3 scripts/gpu-host-funcs.py [--syncspy target/release/syncspy] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--syncspy", default=os.path.join(ROOT, "target/release/syncspy"))
ap.add_argument("--python", default=sys.executable)
ap.add_argument("--keep", help="also copy the JSON report and the summary into this folder")
args = ap.parse_args()

script = os.path.join(ROOT, "scenarios/python/cupy_host_func.py")
with tempfile.TemporaryDirectory() as d:
    report = os.path.join(d, "r.json")
    p = subprocess.run([args.syncspy, "run", "--report", report, "--", args.python, script],
                       capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"cupy_host_func.py under syncspy printed no result ({p.returncode})")
    truth = json.loads(lines[-1])
    rep = json.load(open(report))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        with open(os.path.join(args.keep, "host-funcs.json"), "w") as f:
            json.dump(rep, f, indent=1)
        with open(os.path.join(args.keep, "host-funcs.summary"), "w") as f:
            f.write(p.stderr)

line = truth["lines"]["event"]
count = total = 0
for proc in rep["processes"]:
    for s in proc["sites"]:
        if s["kind"] == "host_wait" and (s.get("location") or "").startswith(f"{script}:{line} "):
            count += s["count"]
            total += s["total_ns"]
print(f"| line {line} (event.wait) | host_wait {count} of {truth['ops']['event']} | "
      f"{total / 1e6:.2f} ms (script's own clock {truth['wall_ms']['event']:.2f} ms) |")
print(f"graph host function runs: {truth['ops']['graph_host_runs']} of "
      f"{truth['ops']['replays']} replays")
fail = []
if count != truth["ops"]["event"]:
    fail.append(f"{count} host_waits at line {line}, want {truth['ops']['event']}")
if not truth["ok"]:
    fail.append("the captured host function did not run at every replay")
if p.returncode != 0:
    fail.append(f"the program under syncspy exited {p.returncode}")
if fail:
    sys.exit("FAIL: " + "; ".join(fail))
print("OK")
