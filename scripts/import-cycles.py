#!/usr/bin/env python3
"""Fails on an import circle between the top-level modules of a crate (issue 34, item 3).

A top-level module (`src/NAME.rs` with everything under `src/NAME/`) depends on another when
one of its files names it:

- in a `use` item, brace groups and all: `use crate::{a, b::{self, C}}`, `use super::a`,
  `use self::x` (resolved against the file's own module path; `super::super::` climbs two),
  `pub use`, `pub(crate) use`, `as` renames;
- as a path in the code: `crate::a::f()`, `super::a::T` (from a top-level file),
  `super::super::a` (from a file one level down);
- through a name the crate root re-exports: `crate::Thing` where `lib.rs` has
  `pub use a::Thing` counts as a dependency on `a`.

Left out: tests (everything from the first `#[cfg(test)]` at the start of a line), comments,
`$crate::` in macros (it belongs to the expansion site), `src/bin/` (each file there is its
own crate) and the crate roots `lib.rs` / `main.rs` themselves.

Each circle is reported as one strongly connected set of modules with one example path, and
the script exits 1 when there is any circle that is not allowed.

    scripts/import-cycles.py reader/src cli/src agent/src
    scripts/import-cycles.py --allow interpose/src=runtime,hooks,gpu interpose/src ...
    scripts/import-cycles.py --self-test

`--allow SRC=m1,m2,...` (repeatable) accepts a circle in SRC whose modules all lie within the
listed set: a documented, temporary exception for a circle not broken yet. A circle that
grows beyond the list, or any other circle, still fails; a listed set with no circle left is
reported so that the exception can be dropped.
"""
import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """The part of a file that imports: no tests, no comments, no string contents."""
    cut = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    # Strings (not char literals or lifetimes): a "crate::x" in a message imports nothing.
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def use_trees(text):
    """The bodies of the `use` items of a file: `use a::{b, c::d};` gives `a::{b, c::d}`."""
    return re.findall(r"(?<![\w$])use\s+([^;]+);", text)


def expand(tree):
    """The paths a use tree names: `crate::{a, b::{self, C}}` gives
    [[crate, a], [crate, b, self], [crate, b, C]]."""
    tokens = re.findall(IDENT + r"|::|[{},*]", tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        path = list(prefix)
        out = []
        while pos < len(tokens):
            tok = tokens[pos]
            if tok == "::":
                pos += 1
            elif tok == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    out.extend(parse(path))
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                pos += 1  # the closing brace
                return out
            elif tok in (",", "}"):
                break
            elif tok == "as":
                pos += 2  # `as NAME`
            elif tok == "*":
                pos += 1
                path.append("*")
            else:
                pos += 1
                path.append(tok)
        if len(path) > len(prefix) or not out:
            out.append(path)
        return out

    paths = []
    while pos < len(tokens):
        paths.extend(parse([]))
        if pos < len(tokens) and tokens[pos] in (",", "}"):
            pos += 1
    return paths


def code_paths(text):
    """`crate::a::f`, `super::a`, `self::x` paths written in the code."""
    found = re.findall(
        r"(?<![\w$])((?:crate|super|self)(?:\s*::\s*" + IDENT + r")+)", text
    )
    return [re.split(r"\s*::\s*", p) for p in found]


def resolve(path, here, exports):
    """The crate's top-level module a path lands in, or None (another crate, the root, or a
    name the root defines itself). `here` is the module path of the file."""
    if not path:
        return None
    head = path[0]
    if head == "crate":
        absolute = path[1:]
    elif head in ("super", "self"):
        base = list(here)
        rest = list(path)
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base.pop()
            rest.pop(0)
        absolute = base + rest
    else:
        return None  # another crate, or a child module named directly: same module
    absolute = [p for p in absolute if p not in ("self", "*")]
    if not absolute:
        return None
    return exports.get(absolute[0], absolute[0])


def files(src):
    for root, dirs, names in os.walk(src):
        if os.path.normpath(root) == os.path.normpath(src) and "bin" in dirs:
            dirs.remove("bin")  # each file under src/bin is a crate of its own
        dirs.sort()
        for f in sorted(names):
            if f.endswith(".rs"):
                path = os.path.join(root, f)
                parts = os.path.relpath(path, src)[:-3].split(os.sep)
                if parts[-1] == "mod":
                    parts = parts[:-1]
                yield path, parts


def modules(src):
    """Graph {module: set(modules it depends on)} of a crate's top-level modules."""
    texts = {}
    for path, parts in files(src):
        with open(path, encoding="utf-8") as f:
            texts[tuple(parts)] = strip(f.read())
    tops = {p[0] for p in texts if p and p not in (("lib",), ("main",))}
    # Names the root brings into `crate::` from a module: `pub use gpu::GpuSection;`.
    exports = {}
    for root in (("lib",), ("main",)):
        for tree in use_trees(texts.get(root, "")):
            for path in expand(tree):
                path = [p for p in path if p != "self"]
                if path and path[0] == "crate":
                    path = path[1:]
                if len(path) >= 2 and path[0] in tops and path[-1] != "*":
                    exports.setdefault(path[-1], path[0])
    graph = {name: set() for name in tops}
    for parts, text in texts.items():
        if not parts or parts in (("lib",), ("main",)):
            continue
        here = list(parts)
        paths = [p for t in use_trees(text) for p in expand(t)] + code_paths(text)
        for path in paths:
            dep = resolve(path, here, exports)
            if dep in graph and dep != parts[0]:
                graph[parts[0]].add(dep)
    return graph


def components(graph):
    """Strongly connected sets of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def example(graph, comp):
    """A shortest circle through the first module of a component."""
    start = comp[0]
    members = set(comp)
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def check(sources, allow, out=print):
    """Number of circles not allowed, reporting every circle found."""
    bad = 0
    for src in sources:
        graph = modules(src)
        allowed = allow.get(os.path.normpath(src), set())
        comps = components(graph)
        for comp in comps:
            text = f"{' -> '.join(example(graph, comp))} (modules: {', '.join(comp)})"
            if allowed and set(comp) <= allowed:
                out(f"{src}: allowed import circle (--allow): {text}")
            else:
                out(f"{src}: import circle: {text}")
                bad += 1
        if allowed and not any(set(c) <= allowed for c in comps):
            out(f"{src}: the --allow list for it is no longer needed")
    return bad


FIXTURES = {
    # A circle seen only through brace groups: a -> b by `use crate::{b::X}`, b -> a by
    # `use super::{a}` (the old check read neither).
    "brace/lib.rs": "mod a;\nmod b;\nmod c;\n",
    "brace/a.rs": "use crate::{\n    b::{self, X},\n    c,\n};\n",
    "brace/b.rs": "use super::{a::{Y as Z}};\npub struct X;\n",
    "brace/c.rs": "pub fn f() {}\n",
    # A circle through a path in the code one level down and a root re-export.
    "nested/lib.rs": "mod p;\nmod q;\npub use q::Thing;\n",
    "nested/p/mod.rs": "mod inner;\n",
    "nested/p/inner.rs": "fn f() { super::super::q::g(); }\n",
    "nested/q.rs": "pub struct Thing;\npub fn g() -> crate::Thing { Thing }\n"
    "fn h(_: &crate::p::Y) {}\n",
    # No circle: tests, comments, strings, `$crate`, bin/ and other crates do not count.
    "clean/lib.rs": "mod a;\nmod b;\n",
    "clean/a.rs": "use crate::b::X;\nuse std::{fmt, io};\n",
    "clean/b.rs": "// crate::a::f\n/* use crate::a; */\npub struct X;\n"
    'const S: &str = "crate::a::f";\n'
    "macro_rules! m { () => { $crate::a::f() } }\n"
    "#[cfg(test)]\nmod tests { use crate::a; }\n",
    "clean/bin/tool.rs": "mod a { }\nuse crate::b;\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in FIXTURES.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        src = lambda n: os.path.join(tmp, n)  # noqa: E731
        lines = []
        assert expand("crate::{a, b::{self, C as D}, e::*}") == [
            ["crate", "a"],
            ["crate", "b", "self"],
            ["crate", "b", "C"],
            ["crate", "e", "*"],
        ], expand("crate::{a, b::{self, C as D}, e::*}")
        assert modules(src("brace")) == {"a": {"b", "c"}, "b": {"a"}, "c": set()}
        assert check([src("brace")], {}, lines.append) == 1, lines
        assert "a -> b -> a" in lines[-1], lines
        assert modules(src("nested")) == {"p": {"q"}, "q": {"p"}}, modules(src("nested"))
        assert check([src("nested")], {}, lines.append) == 1, lines
        assert modules(src("clean")) == {"a": {"b"}, "b": set()}, modules(src("clean"))
        assert check([src("clean")], {}, lines.append) == 0, lines
        allow = {os.path.normpath(src("brace")): {"a", "b", "c"}}
        assert check([src("brace")], allow, lines.append) == 0, lines
        allow = {os.path.normpath(src("brace")): {"a"}}
        assert check([src("brace")], allow, lines.append) == 1, lines
    print("import-cycles self-test: ok")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    allow, sources = {}, []
    it = iter(argv)
    for arg in it:
        if arg == "--allow":
            spec = next(it)
            src, _, mods = spec.partition("=")
            allow.setdefault(os.path.normpath(src), set()).update(mods.split(","))
        else:
            sources.append(arg)
    if not sources:
        print(__doc__)
        return 2
    if check(sources, allow):
        return 1
    extra = " outside the --allow lists" if allow else ""
    print(f"no import circles{extra} in " + ", ".join(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
