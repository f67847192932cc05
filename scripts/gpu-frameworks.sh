#!/usr/bin/env bash
# Issue 26 on a GPU host: polling waits (torch Event.query and CuPy Stream.done spins,
# scripts/gpu-polling.py) against the program's own count, and a torch.compile loop whose
# compile-time waits run deep in Python (scripts/gpu-compile-deep.py): where its sites are
# named. Needs .gpu/ (scripts/gpu-stage.sh). Results in RESULTS_DIR (default
# ./gpu-results/frameworks): frameworks.md, the reports.
#
#   bash scripts/gpu-frameworks.sh
set -uo pipefail
. "$(dirname "$0")/gpu-host.sh" frameworks
R=$RESULTS_DIR
export SYNCSPY_DIR; SYNCSPY_DIR=$(mktemp -d /dev/shm/syncspy-fw.XXXXXX)
trap 'rm -rf "$SYNCSPY_DIR"' EXIT
"$G/syncspy" run --report "$R/polling.json" -- "$PY" scripts/gpu-polling.py --iters 20 \
  >"$R/polling.out" 2>"$R/polling.err"
echo $? >"$R/polling.exit"
"$G/syncspy" run --report "$R/compile.json" -- "$PY" scripts/gpu-compile-deep.py \
  >"$R/compile.out" 2>"$R/compile.err"
echo $? >"$R/compile.exit"
"$PY" - "$R" >"$R/frameworks.md" <<'PYEOF'
import json, sys, os
R = sys.argv[1]
truth = json.loads([l for l in open(f"{R}/polling.out") if l.startswith("{")][-1])
rep = json.load(open(f"{R}/polling.json"))
p = max(rep["processes"], key=lambda p: p["kinds"].get("poll_wait", {}).get("count", 0))
pw = p["kinds"].get("poll_wait", {})
apis = {a: s for a, s in p["apis"].items() if "Query" in a}
print("## Polling waits\n")
print(f"program's truth: {truth}\n")
print("| what | program | syncspy |\n| --- | --- | --- |")
waits = truth["torch_waits"] + truth["cupy_waits"]
print(f"| spins that waited (poll_wait count) | {waits} | {pw.get('count', 0)} |")
nr = truth["torch_queries"] - 20 + (truth["cupy_queries"] - 20 if truth["cupy_queries"] else 0)
print(f"| not-ready answers (polls) | {nr} | {pw.get('polls', 'n/a')} |")
for a, s in sorted(apis.items()):
    print(f"| {a} | | {s['count']} waits, {s['total_ns']/1e6:.2f} ms |")
print(f"| calls that did not stall | | {p.get('non_stall_calls', {})} |")
sites = [(s["kind"], s.get("location"), s["count"]) for s in p["sites"] if s["kind"] == "poll_wait"]
print(f"\npoll_wait sites: {sites}\n")
print("## torch.compile, deep stacks\n")
rep = json.load(open(f"{R}/compile.json"))
for p in rep["processes"]:
    if not p["sites"]:
        continue
    n = len(p["sites"])
    user = [s for s in p["sites"] if "gpu-compile-deep.py" in (s.get("location") or "")]
    print(f"pid {p['pid']}: {n} sites, {len(user)} named at the script; truncated stacks: {p.get('python', {})}")
    for s in p["sites"][:12]:
        sk = any("skipped" in json.dumps(f) for f in s.get("python", []))
        print(f"- {s['kind']} {s['api']} x{s['count']} at {s.get('location')}{' (middle skipped)' if sk else ''}")
PYEOF
cat "$R/frameworks.md"
# A sync inside CUDA graph capture.
"$G/syncspy" run --report "$R/graphs.json" -- "$PY" scripts/gpu-graphs.py \
  >"$R/graphs.out" 2>"$R/graphs.err"
"$PY" - "$R" >>"$R/frameworks.md" <<'PYEOF'
import json, sys
R = sys.argv[1]
print("\n## A sync inside CUDA graph capture\n")
print("program: " + open(f"{R}/graphs.out").read().strip() + "\n")
rep = json.load(open(f"{R}/graphs.json"))
for p in rep["processes"]:
    for s in p["sites"]:
        if s.get("capture_failures") or "graphs.py" in (s.get("location") or ""):
            print(f"- {s['kind']} {s['api']} x{s['count']} at {s.get('location')}: "
                  f"capture_failures {s.get('capture_failures', 0)}; advice: {s.get('advice')}")
PYEOF
tail -20 "$R/frameworks.md"
# Graph replays counted as GPU busy: the program's CUDA events against the report's busy time
# over its active span, for replays and for the same kernels launched one by one.
for mode in graph eager; do
  flag=; [ "$mode" = eager ] && flag=--eager
  SYNCSPY_GPU_IDLE=1 "$G/syncspy" run --report "$R/replay-$mode.json" -- "$PY" \
    scripts/gpu-graph-replay.py $flag >"$R/replay-$mode.out" 2>"$R/replay-$mode.err"
done
"$PY" - "$R" >>"$R/frameworks.md" <<'PYEOF'
import json, sys
R = sys.argv[1]
print("\n## CUDA graph replays counted as GPU busy\n")
print("| launch | program: busy ms / span ms (share) | syncspy: busy ms / active span ms (share) | kernels traced |")
print("| --- | --- | --- | --- |")
for mode in ("graph", "eager"):
    try:
        truth = json.loads([l for l in open(f"{R}/replay-{mode}.out") if l.startswith("{")][-1])
        rep = json.load(open(f"{R}/replay-{mode}.json"))
    except Exception as e:
        print(f"| {mode} | failed: {e} | | |")
        continue
    g = max((p["gpu"] for p in rep["processes"]), key=lambda g: g.get("active_span_ns", 0))
    span = g.get("active_span_ns", 0) / 1e6
    busy = span * (1 - g.get("active_idle_share", 1.0))
    print(f"| {mode} | {truth['busy_ms']:.1f} / {truth['span_ms']:.1f} ({truth['busy_share']:.3f}) "
          f"| {busy:.1f} / {span:.1f} ({busy / span if span else 0:.3f}) | {g.get('measured')} |")
PYEOF
tail -8 "$R/frameworks.md"
# The runtime called through ctypes (and cuda-python when installed): reported under the
# runtime names, at the script's lines.
"$G/syncspy" run --report "$R/ctypes.json" -- "$PY" scripts/gpu-ctypes.py \
  >"$R/ctypes.out" 2>"$R/ctypes.err"
echo $? >"$R/ctypes.exit"
"$PY" - "$R" >>"$R/frameworks.md" <<'PYEOF'
import json, sys
R = sys.argv[1]
print("\n## The runtime through ctypes\n")
print("program: " + open(f"{R}/ctypes.out").read().strip() + f"; exit {open(f'{R}/ctypes.exit').read().strip()}\n")
rep = json.load(open(f"{R}/ctypes.json"))
for p in rep["processes"]:
    for s in p["sites"]:
        print(f"- {s['kind']} {s['api']} x{s['count']} at {s.get('location')}")
PYEOF
tail -6 "$R/frameworks.md"
