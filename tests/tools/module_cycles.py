#!/usr/bin/env python3
"""Fails when a crate's modules import each other in a circle (docs/design.md, "Layers").

usage: module_cycles.py [REPO]

Each file under a crate's src/ is a module (lib.rs, main.rs and mod.rs stand for their folder).
A module depends on another when it names it through `crate::` (in a path or a `use` group) or
`super::`. Test code (`#[cfg(test)]` modules, tests.rs, tests/ folders) and binaries under
src/bin/ are not part of the layering and are skipped. Prints each cycle; exits 1 if any.
"""
import os
import re
import sys


def modules(src):
    found = {}
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in ("bin", "tests")]
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            parts = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if parts[-1] in ("lib", "main", "mod"):
                parts = parts[:-1]
            found[tuple(parts)] = os.path.join(root, f)
    return found


def without_tests(text):
    # Cut every `#[cfg(test)] mod name { ... }` by brace matching.
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def paths(text):
    """Every `crate::a::b` / `super::a` path, with `use x::{a, b::c}` groups expanded."""
    for m in re.finditer(r"\b(crate|super)((?:::\w+)*)::\{([^;]*?)\}", text, re.S):
        for part in re.split(r"[,\s]+", m.group(3)):
            part = part.strip().split(" as ")[0]
            if part and part != "self":
                yield (m.group(1) + m.group(2) + "::" + part.split("::{")[0]).split("::")
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
        yield (m.group(1) + m.group(2)).split("::")


def resolve(mods, here, path, is_dir_module):
    base = () if path[0] == "crate" else (here if is_dir_module else here[:-1])
    rest = [p for p in path[1:] if p != "super"]
    if path[0] == "super" and is_dir_module:
        base = here[:-1]
    best = None
    for n in range(1, len(rest) + 1):
        cand = tuple(base) + tuple(rest[:n])
        if cand in mods:
            best = cand
    return best


def cycles(mods):
    edges = {m: set() for m in mods}
    for m, file in mods.items():
        text = without_tests(open(file, encoding="utf-8").read())
        is_dir = os.path.basename(file) in ("lib.rs", "main.rs", "mod.rs")
        for path in paths(text):
            target = resolve(mods, m, path, is_dir)
            # A module naming its own children (or itself) is not a layering edge.
            if target and target != m and target[: len(m)] != m:
                edges[m].add(target)
    # Tarjan's strongly connected components.
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted("/".join(c) or "(root)" for c in comp))

    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    return out


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    found = 0
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in ("target", ".git", "node_modules", "fuzz")]
        if "Cargo.toml" in files and os.path.isdir(os.path.join(root, "src")):
            for comp in cycles(modules(os.path.join(root, "src"))):
                print(f"{os.path.relpath(root, repo)}: {' <-> '.join(comp)}")
                found += 1
    print(f"{found} module cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
