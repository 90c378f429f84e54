#!/usr/bin/env python3
"""Fails on a dependency cycle between the files of a Rust crate.

    python tools/rust_cycles.py [CRATE_SRC_DIR]   (default: crates/ddlsim-core/src)

Every file of the crate is a node (`lib.rs` and `a/mod.rs` stand for their
module, `a/b.rs` for `a::b`). A file depends on another when it names a
path into it: any `crate::`, `super::` or `self::` path, wherever it stands
(a `use` line, a `use` group such as `use crate::{a, b::{c, d}}`, or inline
in a type, an expression or an attribute), resolved to the longest module
prefix that is a file. Comments, string and character literals are ignored;
code in test modules counts like any other. `super::` is resolved from the
module it is written in, inline `mod name { ... }` blocks included.

Exit status 0 when the file graph has no cycle; 1 when it has one, printed
with the path that makes each edge; 2 when the directory holds no `.rs` file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

Module = tuple[str, ...]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = ("crate", "super", "self")


def blank_comments_and_literals(text: str) -> str:
    """`text` with comments, strings and char literals replaced by spaces (newlines kept)."""
    out: list[str] = []
    i, n = 0, len(text)

    def blank(chunk: str) -> str:
        return "".join("\n" if c == "\n" else " " for c in chunk)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'" and (m := re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'").match(text, i)):
            out.append(blank(m.group(0)))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src: Path, file: Path) -> Module:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def _parse_tree(text: str, i: int) -> tuple[list[list[str]], int]:
    """Expands the path tail at `text[i:]` (after a leading `::`): idents
    joined by `::`, ending in an ident, `*` or a `{...}` group; returns the
    paths (lists of segments) and the index after them."""
    ws = re.compile(r"\s*")
    i = ws.match(text, i).end()
    if text.startswith("{", i):
        paths: list[list[str]] = []
        i += 1
        while True:
            i = ws.match(text, i).end()
            if text.startswith("}", i):
                return paths, i + 1
            sub, i = _parse_tree(text, i)
            paths.extend(sub)
            i = ws.match(text, i).end()
            if text.startswith(" as", i - 1) or text.startswith("as ", i):
                m = re.compile(r"as\s+[A-Za-z_][A-Za-z0-9_]*").match(text, i)
                if m:
                    i = ws.match(text, m.end()).end()
            if text.startswith(",", i):
                i += 1
            elif not text.startswith("}", i):
                return paths, i  # malformed group: keep what was read
    if text.startswith("*", i):
        return [[]], i + 1
    m = _IDENT.match(text, i)
    if not m:
        return [[]], i
    head, j = m.group(0), m.end()
    k = ws.match(text, j).end()
    if text.startswith("::", k) and not text.startswith("::<", k):
        tails, j = _parse_tree(text, k + 2)
        return [[head] + t for t in tails], j
    return [[head]], j


def paths_in(code: str) -> list[tuple[int, str, list[str]]]:
    """Every `crate::`/`super::`/`self::` path: (offset, keyword, segments after it)."""
    found = []
    for m in re.finditer(r"(?<![A-Za-z0-9_$])(crate|super|self)\s*::(?!<)", code):
        tails, _ = _parse_tree(code, m.end())
        for tail in tails:
            found.append((m.start(), m.group(1), tail))
    return found


def scopes(code: str, base: Module) -> list[tuple[int, int, Module]]:
    """Inline `mod name { ... }` blocks as (start, end, module path), innermost last."""
    out = []
    for m in re.finditer(r"(?<![A-Za-z0-9_])mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        out.append((m.start(), j, m.group(1)))
    result = []
    for start, end, name in out:
        enclosing = [s for s in out if s[0] < start and end <= s[1]]
        enclosing.sort()
        result.append((start, end, base + tuple(s[2] for s in enclosing) + (name,)))
    return result


def module_at(offset: int, base: Module, blocks: list[tuple[int, int, Module]]) -> tuple[Module, bool]:
    """The module that code at `offset` is in, and whether that is an inline block."""
    inside = [b for b in blocks if b[0] <= offset < b[1]]
    if not inside:
        return base, False
    return max(inside, key=lambda b: len(b[2]))[2], True


def resolve(keyword: str, tail: list[str], here: Module) -> Module:
    if keyword == "crate":
        path: list[str] = []
    elif keyword == "super":
        path = list(here[:-1])
    else:
        path = list(here)
    for seg in tail:
        if seg == "super":
            path = path[:-1]
        elif seg == "self":
            continue
        else:
            path.append(seg)
    return tuple(path)


def file_graph(src: Path) -> tuple[dict[Path, dict[Path, str]], dict[Module, Path]]:
    files = sorted(src.rglob("*.rs"))
    mods = {module_of(src, f): f for f in files}
    edges: dict[Path, dict[Path, str]] = {f: {} for f in files}
    for f in files:
        text = f.read_text(encoding="utf-8")
        code = blank_comments_and_literals(text)
        base = module_of(src, f)
        blocks = scopes(code, base)
        for offset, keyword, tail in paths_in(code):
            here, _ = module_at(offset, base, blocks)
            target = resolve(keyword, tail, here)
            for k in range(len(target), -1, -1):
                dst = mods.get(target[:k])
                if dst is not None:
                    if dst != f and dst not in edges[f]:
                        line = code.count("\n", 0, offset) + 1
                        shown = "::".join([keyword] + tail)
                        edges[f][dst] = f"{f.relative_to(src)}:{line}: {shown}"
                    break
    return edges, mods


def find_cycles(edges: dict[Path, dict[Path, str]]) -> list[list[Path]]:
    """One cycle per strongly connected component of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    comps: list[list[Path]] = []
    counter = [0]

    def strong(v: Path) -> None:
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = comp[0]
        # Shortest way back to `start` inside the component (breadth first).
        prev: dict[Path, Path] = {}
        frontier, seen, back = [start], {start}, None
        while frontier and back is None:
            nxt = []
            for v in frontier:
                for w in sorted(edges[v]):
                    if w == start:
                        back = v
                        break
                    if w in members and w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if back is not None:
                    break
            frontier = nxt
        path = [back]
        while path[-1] != start:
            path.append(prev[path[-1]])
        cycles.append(list(reversed(path)))
    return cycles


def main(argv: list[str]) -> int:
    src = Path(argv[1] if len(argv) > 1 else "crates/ddlsim-core/src")
    if not src.is_dir() or not any(src.rglob("*.rs")):
        print(f"rust_cycles: {src} holds no .rs file; name a crate's src directory", file=sys.stderr)
        return 2
    edges, _ = file_graph(src)
    cycles = find_cycles(edges)
    if not cycles:
        print(f"no dependency cycle between the {len(edges)} files of {src}")
        return 0
    for cycle in cycles:
        names = [str(p.relative_to(src)) for p in cycle]
        print(f"dependency cycle between files of {src}: {' -> '.join(names + names[:1])}")
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            print(f"    {edges[a][b]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
