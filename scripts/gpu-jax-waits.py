#!/usr/bin/env python3
"""Issue 26 on a GPU host with JAX: runs scenarios/python/jax_sync.py under `syncspy run
--report`, then checks from the JSON report that the stalls XLA's threads make (no Python
frames of their own) are attributed, as `sites[].waited_by`, to the script's
`block_until_ready` and `jax.device_get` lines, with counts; and that no such line appears as
a site's own location (the two are never mixed). Prints a table and exits non-zero on a
failed check.

    python3 scripts/gpu-jax-waits.py [--syncspy target/release/syncspy] [--python python3]
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
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--keep", help="also copy the JSON report and the summary into this folder")
args = ap.parse_args()

script = os.path.join(ROOT, "scenarios/python/jax_sync.py")
with tempfile.TemporaryDirectory() as d:
    report = os.path.join(d, "r.json")
    p = subprocess.run([args.syncspy, "run", "--report", report, "--", args.python, script,
                        "--iters", str(args.iters)], capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        sys.exit(f"jax_sync.py under syncspy failed ({p.returncode})")
    truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    rep = json.load(open(report))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        with open(os.path.join(args.keep, "jax-waits.json"), "w") as f:
            json.dump(rep, f, indent=1)
        with open(os.path.join(args.keep, "jax-waits.summary"), "w") as f:
            f.write(p.stderr)

lines = truth["lines"]
want = {f"jax_sync.py:{n}": name for name, n in lines.items()}
waited = {}
own = []
for proc in rep["processes"]:
    for s in proc["sites"]:
        loc = s.get("location") or ""
        if any(loc.startswith(f"{script}:{n} ") for n in lines.values()) and "python" not in s:
            own.append(s)
        w = s.get("waited_by")
        if not w:
            continue
        key = None
        for f in w.get("python", []):
            short = f"{os.path.basename(f['file'])}:{f['line']}"
            if short in want:
                key = short
                break
        waited.setdefault(key, []).append((s["kind"], s["api"], s["count"]))

print("| line | call | waited-for stalls (kind api xN) |\n| --- | --- | --- |")
fail = []
for short, name in sorted(want.items()):
    got = waited.get(short, [])
    print(f"| {short} | {name} | {', '.join(f'{k} {a} x{c}' for k, a, c in got) or 'none'} |")
    # Each call waits for XLA's threads, but whether a given step's wait coincides with a
    # recorded stall on them depends on XLA: at least one per line is required, the counts
    # are printed.
    if not got:
        fail.append(f"{name} ({short}): no stall names it as the waiting line")
other = {k: v for k, v in waited.items() if k not in want}
print(f"\nwaited-for stalls at other lines: {other}")
if own:
    fail.append(f"a waiting line reported as a site's own location without its frames: {own}")
if fail:
    sys.exit("FAIL: " + "; ".join(fail))
print("OK: both lines named as waiting lines")
