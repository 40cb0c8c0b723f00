#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

For every crate of the workspace (each `src/` folder), it reads the `use` paths and inline paths
that start at `crate::` or `super::`, resolves them to the crate's top-level modules, and looks
for a cycle between those modules. The crate root (lib.rs / main.rs) is the crate's public face:
modules may use what it declares, so it is not a node. Test modules (`tests.rs`, `proptests.rs`,
`mod tests { ... }` blocks) are left out: they may look anywhere.

Usage: scripts/dev/module-cycles.py [REPO_ROOT]   (exit 1 and the cycle when there is one)
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
CRATES = ["crates/" + c for c in sorted(os.listdir(os.path.join(ROOT, "crates")))]
CRATES += ["src-cli", "trainer", "src-tauri"]

PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")


def strip_tests(text):
    """Drops `#[cfg(test)] mod name { ... }` blocks and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def top_module(src, path):
    rel = os.path.relpath(path, src).split(os.sep)
    if rel[0] in ("lib.rs", "main.rs"):
        return None, []
    first = rel[0][:-3] if rel[0].endswith(".rs") else rel[0]
    # The module path of this file below the crate root, for resolving `super::`.
    parts = [p[:-3] if p.endswith(".rs") else p for p in rel]
    if parts[-1] == "mod":
        parts = parts[:-1]
    return first, parts


def groups(text, start):
    """The names right after `crate::` / `super::...::` including brace groups."""
    names = []
    if text[start:].startswith("{"):
        depth, j = 0, start
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        for name in re.findall(r"(?:^|[{,\s])([a-z_][a-z0-9_]*)\s*(?:::|[,}]|$)", text[start + 1 : j - 1]):
            names.append(name)
    return names


def edges_of(crate):
    src = os.path.join(ROOT, crate, "src")
    tops = set()
    for entry in os.listdir(src):
        name = entry[:-3] if entry.endswith(".rs") else entry
        if name not in ("lib", "main"):
            tops.add(name)
    edges = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f in ("tests.rs", "proptests.rs"):
                continue
            path = os.path.join(dirpath, f)
            me, parts = top_module(src, path)
            if me is None:
                continue
            text = strip_tests(open(path, encoding="utf-8").read())
            for m in PATH.finditer(text):
                kind, rest = m.group(1), m.group(2)
                if kind == "crate":
                    if rest == "::{":
                        targets = groups(text, m.end() - 1)
                    else:
                        targets = [rest.split("::")[1]]
                else:
                    # `super` is the parent of this file's module; each further `super` one more
                    # level up. Inline modules are not tracked (their `super` is read as the
                    # file's), which can only hide an edge inside one top-level module.
                    here = parts[:-1]
                    segs = rest.split("::")[1:]
                    while segs and segs[0] == "super":
                        segs.pop(0)
                        here = here[:-1]
                    if here or not segs:
                        continue  # still inside this top-level module
                    targets = groups(text, m.end() - 1) if segs[0] == "{" else [segs[0]]
                for t in targets:
                    if t in tops and t != me:
                        edges.setdefault(me, set()).add(t)
    return edges


def find_cycle(edges):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


failed = False
for crate in CRATES:
    if not os.path.isdir(os.path.join(ROOT, crate, "src")):
        continue
    cycle = find_cycle(edges_of(crate))
    if cycle:
        failed = True
        print(f"{crate}: modules in a cycle: {' -> '.join(cycle)}")
if failed:
    sys.exit(1)
print(f"no module cycles in {len(CRATES)} crates")
