#!/usr/bin/env python3
"""Fails on an import circle between the modules of a crate (issue: the reader and the CLI
crate had `daemon`<->`metrics`, `run`<->`summary`, `jobs`<->`report`).

A module depends on another when its file names it as `crate::NAME` (a `use` line or a path
in the code), or as `super::NAME` from a module of the crate's root; tests (`#[cfg(test)]`
modules at the end of a file) are left out. Prints each circle and exits 1 when there is one.

    scripts/import-cycles.py reader/src cli/src agent/src
"""
import os
import re
import sys


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]) or not parts:
                continue
            name = parts[0]  # top-level module of the crate
            text = open(path, encoding="utf-8").read()
            cut = re.search(r"^#\[cfg\(test\)\]", text, re.M)
            if cut:
                text = text[: cut.start()]
            # Comments do not import.
            text = re.sub(r"//[^\n]*", "", text)
            mods.setdefault(name, set()).update(
                m for m in re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text)
            )
            if len(parts) == 1:
                mods[name].update(re.findall(r"\bsuper::([a-z_][a-z0-9_]*)", text))
    for name in mods:
        mods[name] = {d for d in mods[name] if d in mods and d != name}
    return mods


def cycles(graph):
    found, seen = [], set()

    def walk(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cyc = path + [nxt]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    found.append(cyc)
            elif nxt not in path and nxt > path[0]:
                walk(nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


bad = 0
for src in sys.argv[1:]:
    for c in cycles(modules(src)):
        print(f"{src}: import circle: {' -> '.join(c)}")
        bad += 1
if bad:
    sys.exit(1)
print("no import circles in " + ", ".join(sys.argv[1:]))
