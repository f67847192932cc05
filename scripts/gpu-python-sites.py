"""Checks syncspy's Python call sites against the scenario scripts' own `# syncspy-site` marks.

    python3 scripts/gpu-python-sites.py RESULTS_DIR [ITERS]

RESULTS_DIR holds py-<script>.json, the report of `syncspy run` on scenarios/python/<script>.py
(scripts/gpu-python-sites.sh makes them). For each script, the marked line's file, line and
function (found with `ast`) must be the location of the top call site of those that waited
in every step (a one-off wait of the warm-up, such as the first allocation, may take longer
in all than a short loop's); for a script with several marks, that site must be at one of them and each mark must be the location of its
own site that waited in every step (count >= ITERS, default 50). Where the pattern of a
script is one syncspy gives advice for (`ADVICE`: `.item()`, `print`, `nonzero` and boolean
masks, pageable copies, `torch.cuda.synchronize()`), the top site must carry that advice
(`sites[].advice`). Writes python-sites.md there and exits 1 when a check fails.
"""
import ast
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "scenarios" / "python"
LOC = re.compile(r"^(.*):(\d+) in (.+)$")
ITERS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
# A phrase of the advice (reader/src/advice.rs) each script's marked pattern must get.
ADVICE = {
    "item_in_loop.py": "`.item()`",
    "two_items.py": "`.item()`",
    "launch_heavy.py": "`.item()`",
    "compute_heavy.py": "`.item()`",
    "print_tensor.py": "printing a CUDA tensor",
    "nonzero.py": "`nonzero`",
    "boolean_mask.py": "`nonzero`",
    "h2d_pageable.py": "pageable",
    "synchronize.py": "`torch.cuda.synchronize()`",
}


def marks(script):
    """(line, qualified function) of each `# syncspy-site` line."""
    src = script.read_text()
    tree = ast.parse(src)
    scopes = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    scopes.append((child.lineno, child.end_lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    out = []
    for i, line in enumerate(src.splitlines(), 1):
        if "# syncspy-site" in line:
            inner = [s for s in scopes if s[0] <= i <= s[1]]
            func = max(inner, key=lambda s: s[0])[2] if inner else "<module>"
            out.append((i, func))
    return out


def parse(location):
    m = LOC.match(location or "")
    if not m:
        return None
    return pathlib.Path(m.group(1)).name, int(m.group(2)), m.group(3)


def main():
    res = pathlib.Path(sys.argv[1])
    rows, failed = [], 0
    for script in sorted(ROOT.glob("*.py")):
        want = marks(script)
        report = res / f"py-{script.stem}.json"
        if not want or not report.exists():
            continue
        r = json.loads(report.read_text())
        procs = [p for p in r["processes"] if p["sites"]]
        sites = max(procs, key=lambda p: p["stall_ns"])["sites"] if procs else []
        expected = [(script.name, line, func) for line, func in want]
        # Per mark, its largest site that waited in every step.
        top = []
        for e in expected:
            at = [s for s in sites if parse(s.get("location")) == e and s["count"] >= ITERS]
            if at:
                top.append(at[0])
        advice = ADVICE.get(script.name)
        steady = [s for s in sites if s["count"] >= ITERS]
        ok = (
            bool(steady)
            and parse(steady[0].get("location")) in expected
            and len(top) == len(expected)
            and all(s.get("python") for s in top)
            and (advice is None or all(advice in (s.get("advice") or "") for s in top))
        )
        failed += not ok
        for i, s in enumerate(top):
            rows.append(
                "| {} | {} | `{}` | {} {} x{} | {} | {} |".format(
                    script.name if i == 0 else "",
                    ", ".join(f"{l} in {f}" for l, f in want) if i == 0 else "",
                    s.get("location"),
                    s["kind"],
                    s["api"],
                    s["count"],
                    (s.get("advice") or "none")[:60],
                    ("ok" if ok else "FAIL") if i == 0 else "",
                )
            )
    table = [
        "| script | marked line(s) | call site(s) found: location | kind, count | advice (start) | check |",
        "| --- | --- | --- | --- | --- | --- |",
    ] + rows
    (res / "python-sites.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    print(f"{failed} failed")
    sys.exit(1 if failed else 0)


main()
