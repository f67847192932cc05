"""Runs a workload script inside one of the in-process tools a PyTorch user would reach for,
and writes what that tool found at the script's marked lines (`# syncspy-site`).

    python3 scripts/compare_inproc.py --tool profiler|syncdebug --detect OUT.json -- SCRIPT ARGS...

- profiler: torch.profiler with CPU and CUDA activity and Python stacks (with_stack=True, and
  `experimental_config=_ExperimentalConfig(verbose=True)`: without it the events' stacks are
  empty in torch 2.x, pytorch/pytorch#100253, which is what a user following the docs gets).
  A sync counts as found at a mark when a CUDA runtime sync or copy event, or an op above it,
  carries a stack frame at the marked line.
- syncdebug: torch.cuda.set_sync_debug_mode("warn"). A sync counts as found at a mark when the
  warning torch raises names the marked line.
The script runs as `__main__`, so its own timing and ground-truth line are unchanged.
"""
import argparse
import json
import os
import runpy
import sys
import warnings

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--tool", choices=["profiler", "syncdebug"], required=True)
ap.add_argument("--detect", required=True)
ap.add_argument("script")
ap.add_argument("args", nargs=argparse.REMAINDER)
opts = ap.parse_args()

script = os.path.abspath(opts.script)
src = open(script).read().splitlines()
marks = [i + 1 for i, l in enumerate(src) if "# syncspy-site" in l]
base = os.path.basename(script)
sys.argv = [script] + [a for a in opts.args if a != "--"]
sys.path.insert(0, os.path.dirname(script))

import torch  # noqa: E402

SYNC = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
        "cudaMemcpyAsync", "cudaMemcpy"}
# at_file: events placed in the script's file at all (any line): torch.profiler's Python
# stacks give module-level frames as `script.py(0): <module>`, the file without the line.
found = {"tool": opts.tool, "marks": marks, "at_marks": 0, "at_file": 0, "events": 0, "lines": {}}


def run():
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise


def in_file(frames):
    return any(base in s for s in frames or [])


def at_mark(frames):
    for s in frames or []:
        # torch.profiler stack entries look like "path/file.py(42): function".
        if base in s:
            try:
                line = int(s.split("(", 1)[1].split(")", 1)[0])
            except (IndexError, ValueError):
                continue
            if line in marks:
                return line
    return None


if opts.tool == "profiler":
    from torch.profiler import ProfilerActivity, profile

    from torch._C._profiler import _ExperimentalConfig

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 experimental_config=_ExperimentalConfig(verbose=True)) as prof:
        run()
    events = list(prof.events())
    # Ops that carry a Python stack, to find the one around each runtime call by time (a
    # runtime event's own stack, and its parent link, are often empty).
    ops = [e for e in events if getattr(e, "stack", None)]
    for e in events:
        if e.name not in SYNC:
            continue
        found["events"] += 1
        if in_file(getattr(e, "stack", None)):
            found["at_file"] += 1
        line, p = None, e
        while p is not None and line is None:
            line = at_mark(getattr(p, "stack", None))
            p = p.cpu_parent
        if line is None:
            t = e.time_range.start
            around = [o for o in ops if o.time_range.start <= t <= o.time_range.end]
            same = [o for o in around if o.thread == e.thread] or around
            if same:
                inner = min(same, key=lambda o: o.time_range.end - o.time_range.start)
                line = at_mark(inner.stack)
        if line is not None:
            found["at_marks"] += 1
            found["lines"][str(line)] = found["lines"].get(str(line), 0) + 1
else:
    seen = []
    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        seen.append((filename, lineno, str(message)))

    warnings.showwarning = show
    warnings.simplefilter("always")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        run()
    finally:
        torch.cuda.set_sync_debug_mode(0)
        warnings.showwarning = old
    for filename, lineno, msg in seen:
        if "synchroniz" not in msg:
            continue
        found["events"] += 1
        if os.path.basename(filename) == base and lineno in marks:
            found["at_marks"] += 1
            found["lines"][str(lineno)] = found["lines"].get(str(lineno), 0) + 1

with open(opts.detect, "w") as f:
    json.dump(found, f)
