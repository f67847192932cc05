"""syncspy side by side with the tools a PyTorch user would pick instead, in one interleaved run
on a GPU host. scripts/compare-tools.sh runs it; docs/performance.md has the recorded tables.

    python3 scripts/compare_tools.py OUT_DIR [--rounds N] [--syncspy PATH] [--quick]

Two parts:
- Cost: the launch-heavy and compute-heavy training steps (scenarios/python/launch_heavy.py,
  compute_heavy.py) under each tool, interleaved (every tool once per round, in a rotating
  order), ROUNDS rounds; the step time is each script's own timing of its loop. `none-again`
  runs the baseline a second time in every round: its ratio to `none` is the noise floor of
  this very run.
- Detection: the seed patterns (scenarios/python: .item(), print, nonzero, boolean mask,
  pageable copies, pinned double buffering), a JAX loop and two processes on one GPU, once
  per tool: how many of the syncs each script makes at its marked line (`# syncspy-site`, its own
  count in its ground-truth line) the tool reported at that line.
Tools: none; syncspy (stall recording: SYNCSPY_PYTHON=0, SYNCSPY_GPU_IDLE=off); syncspy with
Python call sites; with GPU idle tracing duty-cycled and always on (cost only);
torch.profiler with CUDA activity and stacks; torch.cuda.set_sync_debug_mode("warn").
Nsight Systems is not in the table where `nsys` is missing or does not run (it says so).
Writes OUT_DIR/compare.md and OUT_DIR/runs.json.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY_DIR = ROOT / "scenarios" / "python"
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("out")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--syncspy", default=str(ROOT / ".gpu" / "syncspy"))
ap.add_argument("--python", default=os.environ.get("PYTHON", "python3"))
ap.add_argument("--quick", action="store_true", help="short loops (a smoke test)")
ap.add_argument("--only", default="", help="comma-separated workload names to run (default: all)")
opts = ap.parse_args()
OUT = pathlib.Path(opts.out)
OUT.mkdir(parents=True, exist_ok=True)
PY = opts.python

COST = {
    "launch-heavy": ("launch_heavy.py", ["--iters", "60" if opts.quick else "400"]),
    "compute-heavy": ("compute_heavy.py", ["--iters", "10" if opts.quick else "60"]),
}
DETECT = {
    "item": ("item_in_loop.py", ["--iters", "40"]),
    "print": ("print_tensor.py", ["--iters", "20"]),
    "nonzero": ("nonzero.py", ["--iters", "40"]),
    "boolean-mask": ("boolean_mask.py", ["--iters", "40"]),
    "pageable-h2d": ("h2d_pageable.py", ["--iters", "40"]),
    "pinned-double-buffer": ("double_buffer.py", ["--iters", "40"]),
    "jax": ("jax_loop.py", ["--iters", "100"]),
    "two-processes": ("two_procs.py", ["--iters", "100"]),
}
if opts.only:
    keep = set(opts.only.split(","))
    COST = {k: v for k, v in COST.items() if k in keep}
    DETECT = {k: v for k, v in DETECT.items() if k in keep}
TOOLS = ["none", "syncspy", "syncspy+python", "torch.profiler", "sync-debug"]
# syncspy's GPU idle tracing modes (SYNCSPY_GPU_IDLE), measured for cost only.
GPU_MODES = ["syncspy+gpu-duty", "syncspy+gpu-on"]
# Where a tool cannot run a workload at all.
NOT_FOR = {
    ("torch.profiler", "jax"), ("sync-debug", "jax"),
    ("torch.profiler", "two-processes"), ("sync-debug", "two-processes"),
}
N = [0]


def command(tool, script, args):
    """(argv, extra env, file with the tool's findings or None)."""
    N[0] += 1
    path = str(PY_DIR / script)
    tag = OUT / f"run{N[0]:04d}"
    if tool in ("none", "none-again"):
        return [PY, path] + args, {}, None
    if tool.startswith("syncspy"):
        # Each mode says every setting, whatever the library's defaults are.
        env = {
            "SYNCSPY_PYTHON": "0" if tool == "syncspy" else "1",
            "SYNCSPY_GPU_IDLE": {"syncspy+gpu-duty": "duty", "syncspy+gpu-on": "on"}.get(tool, "off"),
        }
        rep = f"{tag}.json"
        return [opts.syncspy, "run", "--report", rep, "--", PY, path] + args, env, rep
    t = "profiler" if tool == "torch.profiler" else "syncdebug"
    det = f"{tag}.detect.json"
    inproc = str(ROOT / "scripts" / "compare_inproc.py")
    return [PY, inproc, "--tool", t, "--detect", det, path, "--"] + args, {}, det


def run(tool, name, script, args):
    argv, env, found = command(tool, script, args)
    t0 = time.perf_counter()
    p = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=600)
    wall = time.perf_counter() - t0
    truth = [l for l in p.stdout.splitlines() if l.startswith("{")]
    rec = {"tool": tool, "workload": name, "rc": p.returncode, "wall_s": wall,
           "found_file": found, "stderr_tail": p.stderr[-800:] if p.returncode else ""}
    if truth:
        t = json.loads(truth[-1])
        loop, iters = t.get("wall_ms", {}).get("loop"), t.get("args", {}).get("iters")
        rec["ops"] = sum(t.get("ops", {}).values())
        rec["gpu_ms"] = sum(t.get("gpu_ms", {}).values())
        if loop and iters:
            rec["ms_per_step"] = loop / iters
    rec.update(findings(tool, script, found))
    return rec


def marks(script):
    files = [script, "launch_heavy.py"] if script == "two_procs.py" else [script]
    out = set()
    for f in files:
        for i, l in enumerate((PY_DIR / f).read_text().splitlines(), 1):
            if "# syncspy-site" in l:
                out.add((f, i))
    return out


def findings(tool, script, path):
    """Syncs the tool reported at the script's marked lines."""
    if not path or not os.path.exists(path):
        return {}
    data = json.loads(pathlib.Path(path).read_text())
    if not tool.startswith("syncspy"):
        return {"at_marks": data["at_marks"], "tool_events": data["events"],
                "at_file": data.get("at_file")}
    m = marks(script)
    at, stalls, at_ns = 0, 0, 0
    for p in data.get("processes", []):
        for s in p.get("sites", []):
            stalls += s["count"]
            loc = s.get("location") or ""
            if " in " in loc and ":" in loc:
                file_line = loc.rsplit(" in ", 1)[0]
                f, _, line = file_line.rpartition(":")
                if line.isdigit() and (os.path.basename(f), int(line)) in m:
                    at += s["count"]
                    at_ns += s.get("total_ns", 0)
    return {"at_marks": at, "tool_events": stalls, "stall_ms_at_marks": at_ns / 1e6}


def nsys_note():
    if not shutil.which("nsys"):
        return "nsys: not installed on this host, not measured"
    p = subprocess.run(["nsys", "--version"], capture_output=True, text=True)
    return f"nsys: {p.stdout.strip() or p.stderr.strip()} (not measured by this script)"


runs = []
cost_tools = ["none", "none-again"] + TOOLS[1:3] + GPU_MODES + TOOLS[3:]
for r in range(opts.rounds):
    for name, (script, args) in COST.items():
        order = cost_tools[r % len(cost_tools):] + cost_tools[: r % len(cost_tools)]
        for tool in order:
            rec = run(tool, name, script, args)
            rec["round"] = r
            runs.append(rec)
            print(f"round {r} {name:14} {tool:16} {rec.get('ms_per_step', float('nan')):.3f} ms/step rc {rec['rc']}", flush=True)
for name, (script, args) in DETECT.items():
    for tool in TOOLS:
        if (tool, name) in NOT_FOR:
            continue
        rec = run(tool, name, script, args)
        runs.append(rec)
        print(f"detect {name:20} {tool:16} at marks {rec.get('at_marks')} of {rec.get('ops')} rc {rec['rc']}", flush=True)
(OUT / "runs.json").write_text(json.dumps(runs, indent=1))

lines = ["| workload | tool | ms/step, median (min-max) | ratio to none |", "| --- | --- | ---: | ---: |"]
for name in COST:
    base = [x["ms_per_step"] for x in runs if x["workload"] == name and x["tool"] == "none" and "ms_per_step" in x]
    b = statistics.median(base) if base else float("nan")
    for tool in cost_tools:
        v = [x["ms_per_step"] for x in runs if x["workload"] == name and x["tool"] == tool and "ms_per_step" in x]
        if not v:
            lines.append(f"| {name} | {tool} | failed | |")
            continue
        med = statistics.median(v)
        lines.append(f"| {name} | {tool} | {med:.3f} ({min(v):.3f}-{max(v):.3f}) | {med / b:.3f} |")
lines += ["", "| workload | tool | syncs found at the marked line / the script's own count | slowdown of that run | answer |",
          "| --- | --- | ---: | ---: | --- |"]
answer = {"syncspy": "live", "syncspy+python": "live", "syncspy+gpu-duty": "live", "syncspy+gpu-on": "live", "torch.profiler": "after the run",
          "sync-debug": "live (warnings)", "none": ""}
for name in DETECT:
    base = [x for x in runs if x["workload"] == name and x["tool"] == "none"]
    b = base[0].get("ms_per_step") if base else None
    for tool in TOOLS[1:]:
        x = [y for y in runs if y["workload"] == name and y["tool"] == tool]
        if not x:
            lines.append(f"| {name} | {tool} | cannot run it | | |")
            continue
        x = x[0]
        slow = f"{x['ms_per_step'] / b:.2f}x" if b and x.get("ms_per_step") else "-"
        if x["rc"] != 0:
            got = f"failed (rc {x['rc']})"
        elif not marks(DETECT[name][0]):
            got = f"{x.get('tool_events', 0)} reported (a healthy loop: none expected inside it)"
        else:
            # Each marked line counts once per execution, however many events it made.
            at, ops = x.get("at_marks", 0), x.get("ops") or 0
            got = f"{min(at, ops)} / {ops}" + (f" ({at} events)" if at > ops else "")
            if x.get("at_file"):
                got += f"; {x['at_file']} sync events in the script's file, without the line"
        lines.append(f"| {name} | {tool} | {got} | {slow} | {answer[tool]} |")
lines += ["", "syncspy's stall time at the marked lines against the GPU time the script measured with "
          "CUDA events around the work it waits for (`gpu_ms` of its ground-truth line; the host "
          "waits for that work less what it queued meanwhile, so the stall is at most about it):", "",
          "| workload | tool | stall ms at the marks | GPU ms (CUDA events) |", "| --- | --- | ---: | ---: |"]
for name in DETECT:
    for tool in ("syncspy+python",):
        x = [y for y in runs if y["workload"] == name and y["tool"] == tool and y["rc"] == 0]
        if x and x[0].get("gpu_ms"):
            lines.append(f"| {name} | {tool} | {x[0].get('stall_ms_at_marks', 0):.2f} | {x[0]['gpu_ms']:.2f} |")
lines += ["", nsys_note()]
(OUT / "compare.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
