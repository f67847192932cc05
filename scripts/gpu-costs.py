"""syncspy's end-to-end cost on a GPU host: the workloads of scenarios/python/cost_workloads.py,
each run bare and under `syncspy run` (and under any extra settings given with --config), in
interleaved rounds (each round runs every workload in every setting; the order of the settings
alternates from round to round), each timed inside its own process. Prints the table of
docs/performance.md ("End-to-end cost"): ms per step of each round, the median, and the ratio
to the bare run of the same round (median, min and max over rounds). For the JAX loop it also
says how many `host_wait`s the report has at each of the loop's two lines (the truth: one per
step) and the library's own time as the report gives it. Exits non-zero when a run fails.

    python3 scripts/gpu-costs.py --syncspy .gpu/syncspy [--rounds 5] [--workloads mlp,transformer,jax]
        [--config nolook=SYNCSPY_STACKS=0] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--syncspy", required=True)
ap.add_argument("--python", default=sys.executable)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--workloads", default="mlp,transformer,jax")
ap.add_argument("--steps", type=int, default=0, help="override every workload's step count")
ap.add_argument("--config", action="append", default=[],
                help="NAME=VAR=VALUE[,VAR=VALUE]: one more setting under syncspy run")
ap.add_argument("--out", help="keep each run's report and output in this folder")
args = ap.parse_args()

WORKLOAD = os.path.join(ROOT, "scenarios/python/cost_workloads.py")
configs = [("bare", None), ("syncspy", {})]
for c in args.config:
    name, _, env = c.partition("=")
    configs.append((name, dict(kv.split("=", 1) for kv in env.split(",") if kv)))


def host_waits(report, lines):
    """(count at each marked line, the library's own ns, what it shed) from a JSON report."""
    got = {name: 0 for name in lines}
    overhead = 0
    shed = []
    for proc in report.get("processes", []):
        overhead += proc.get("overhead_ns", 0) or 0
        c = proc.get("cost")
        if c:
            shed.append(f"shedding {c['shedding']} (raised {c['raised']}), "
                        f"{c['looks_skipped']} looks skipped")
        for s in proc.get("sites", []):
            if s.get("kind") != "host_wait":
                continue
            loc = s.get("location") or ""
            for name, n in lines.items():
                if loc.startswith(f"{WORKLOAD}:{n} "):
                    got[name] += s["count"]
    return got, overhead, "; ".join(shed) or "nothing shed"


def run(workload, env, tag, d):
    cmd = [args.python, WORKLOAD, "--workload", workload]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    report = os.path.join(d, f"{tag}.json")
    if env is not None:
        cmd = [args.syncspy, "run", "--report", report, "--"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if args.out:
        with open(os.path.join(args.out, f"{tag}.log"), "w") as f:
            f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"{tag}: exit {p.returncode}\n{p.stderr[-3000:]}")
    truth = json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])
    waits = None
    if env is not None:
        rep = json.load(open(report))
        if args.out:
            os.replace(report, os.path.join(args.out, f"{tag}.json"))
        waits = host_waits(rep, truth["lines"])
    return truth, waits


if args.out:
    os.makedirs(args.out, exist_ok=True)
workloads = args.workloads.split(",")
ms = {(w, c): [] for w in workloads for c, _ in configs}
waits = {(w, c): [] for w in workloads for c, _ in configs}
steps = {}
with tempfile.TemporaryDirectory() as d:
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for w in workloads:
            for c, env in order:
                truth, got = run(w, env, f"{w}-{c}-{r}", d)
                steps[w] = truth["steps"]
                ms[(w, c)].append(truth["ms_per_step"])
                if got is not None:
                    waits[(w, c)].append(got)
                print(f"round {r} {w} {c}: {truth['ms_per_step']:.3f} ms/step"
                      + (f" host_waits {got}" if got else ""), file=sys.stderr, flush=True)

print("| workload | setting | ms/step, each round | median | ratio to bare, median (min-max) "
      "| host_waits per line (of steps), each round | library's own time, median | budget |")
print("| --- | --- | --- | ---: | ---: | --- | ---: | --- |")
for w in workloads:
    for c, env in configs:
        xs = ms[(w, c)]
        ratios = [a / b for a, b in zip(xs, ms[(w, "bare")])]
        ratio = ("-" if c == "bare" else
                 f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        hw = waits[(w, c)]
        counts = "; ".join(", ".join(f"{v}" for v in g.values()) for g, _, _ in hw) if hw and hw[0][0] else "-"
        own = (f"{statistics.median(o for _, o, _ in hw) / 1e6:.1f} ms" if hw else "-")
        shed = "; ".join(sorted(set(x for _, _, x in hw))) if hw else "-"
        print(f"| {w} ({steps[w]} steps) | {c} | {' / '.join(f'{x:.3f}' for x in xs)} "
              f"| {statistics.median(xs):.3f} | {ratio} | {counts} | {own} | {shed} |")
