"""Checks what syncspy saw of each program of scripts/gpu-driver.sh against the program's own
account, and writes driver.md in RESULTS_DIR.

    python3 scripts/gpu-driver/check.py RESULTS_DIR

Per program NAME, RESULTS_DIR holds NAME.json (the report), NAME.trace.json (the trace, for
the threads) and NAME.log (the program's output, whose last JSON line is its account).
"""
import collections
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
LOC = re.compile(r"^(.*):(\d+) in (.+)$")
res = pathlib.Path(sys.argv[1])
rows, failed = [], 0


def load(name):
    rep = json.loads((res / f"{name}.json").read_text())
    procs = [p for p in rep["processes"] if p["recorded_events"]] or rep["processes"]
    acct = [l for l in (res / f"{name}.log").read_text().splitlines() if l.startswith("{")]
    return rep, procs, json.loads(acct[-1]) if acct else {}


def kinds(procs):
    c = collections.Counter()
    for p in procs:
        for k, v in p["kinds"].items():
            c[k] += v["count"]
    return c


def layers(procs):
    run = drv = 0
    for p in procs:
        for api, v in p["apis"].items():
            if api.startswith("cuda"):
                run += v["count"]
            else:
                drv += v["count"]
    return run, drv


def threads(name, tid):
    """(events on the user's thread, events on other threads), from the trace."""
    try:
        tr = json.loads((res / f"{name}.trace.json").read_text())
    except (OSError, ValueError):
        return None
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    evs = [e for e in evs if e.get("ph") == "X"]
    mine = sum(1 for e in evs if e.get("tid") == tid)
    return mine, len(evs) - mine


def at_loop(procs, script):
    lines = {i for i, l in enumerate((HERE / script).read_text().splitlines(), 1) if "# loop-wait" in l}
    n = 0
    for p in procs:
        for s in p["sites"]:
            m = LOC.match(s.get("location") or "")
            if m and pathlib.Path(m.group(1)).name == script and int(m.group(2)) in lines:
                n += s["count"]
    return n


def row(name, account, seen, verdict):
    global failed
    failed += verdict.startswith("FAIL")
    rows.append(f"| {name} | {account} | {seen} | {verdict} |")


# The C program, static runtime and shared runtime.
for name in ("static", "shared"):
    try:
        rep, procs, acct = load(f"c-{name}")
    except OSError:
        row(f"C, {name} runtime", "-", "no report", "FAIL: did not run")
        continue
    want, got = acct.get("account", {}), kinds(procs)
    run, drv = layers(procs)
    exact = all(got[k] == v for k, v in want.items() if k != "implicit_sync")
    implicit = got["implicit_sync"] >= want.get("implicit_sync", 0)
    row(
        f"C, {name} runtime",
        ", ".join(f"{k} {v}" for k, v in want.items()),
        ", ".join(f"{k} {v}" for k, v in sorted(got.items())) + f" (runtime-level {run}, driver-level {drv})",
        "exact" if exact and implicit else "FAIL: counts differ",
    )

# Python programs: waits at the marked loop lines, threads.
for name, script in (("jax", "jax_loop.py"), ("cupy", "cupy_loop.py"),
                     ("triton", "triton_direct.py"), ("compile", "compile_item.py")):
    try:
        rep, procs, acct = load(name)
    except OSError:
        row(name, "-", "no report", "FAIL: did not run")
        continue
    want = acct.get("waits", 0)
    loop = at_loop(procs, script)
    run, drv = layers(procs)
    th = threads(name, acct.get("tid"))
    seen = (f"{loop} at the loop's lines; all: {dict(sorted(kinds(procs).items()))}, "
            f"runtime-level {run}, driver-level {drv}"
            + (f"; user's thread {th[0]}, other threads {th[1]}" if th else ""))
    if loop == want:
        verdict = "exact"
    elif name == "jax":
        # Not a pass/fail: records what JAX's waits are (docs/contracts.md, "Driver API").
        verdict = f"record: {loop} of {want} waits are CUDA calls at the loop's lines"
    else:
        verdict = f"FAIL: {loop} of {want}"
    row(name, f"{want} waits", seen, verdict)

# torch.compile: no double counting, driver hooks on and off.
try:
    _, on, _ = load("compile")
    _, off, _ = load("compile-runtime-only")
    same = kinds(on) == kinds(off) and layers(on)[0] == layers(off)[0]
    row("compile, SYNCSPY_DRIVER=0 vs 1", "same counts", f"{dict(kinds(off))} vs {dict(kinds(on))}",
        "same" if same else "FAIL: counts changed")
except OSError:
    row("compile, SYNCSPY_DRIVER=0 vs 1", "-", "no report", "FAIL: did not run")

table = ["| program | its own account | what syncspy saw | check |", "| --- | --- | --- | --- |"] + rows
cost = res / "cost.md"
text = "\n".join(table) + "\n" + (("\n" + cost.read_text()) if cost.exists() else "")
(res / "driver.md").write_text(text)
print(text)
print(f"{failed} failed")
sys.exit(1 if failed else 0)
