"""Rows that a per-rank format leaves out, and the dependencies that go around them.

Chakra and Kineto describe a collective by one node / kernel per rank; the
send and recv steps inside it are then left out, and a row that waited for
a left-out row waits for what that row waited for instead.
"""

from __future__ import annotations

from typing import Any


def collective_steps(by_rank: dict[int, list[Any]]) -> set[int]:
    """Ids of send/recv rows of a collective that has its own collective row on their rank."""
    candidates, by_message = set(), {}
    for rank_rows in by_rank.values():
        spans = {row.collective for row in rank_rows if row.kind == "collective" and row.collective >= 0}
        candidates.update(row.id for row in rank_rows if row.kind in ("send", "recv") and row.collective in spans)
        for row in rank_rows:
            if row.kind in ("send", "recv"):
                by_message.setdefault(row.message, []).append(row.id)
    # a message goes only as a whole, so that no receive is left without its send
    return {i for ids in by_message.values() if all(j in candidates for j in ids) for i in ids}


def redirect_deps(rows: list[Any], left_out: set[int]) -> dict[int, list[int] | None]:
    """New deps of the kept rows that waited for a left-out row: what that row waited for, transitively."""
    if not left_out:
        return {}
    deps_of = {row.id: row.deps for row in rows}
    resolved: dict[int, list[int]] = {}

    def resolve(row_id: int) -> list[int]:
        stack, seen, out = [row_id], set(), []
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in left_out:
                stack.extend(deps_of.get(current) or [])
            else:
                out.append(current)
        return out

    changed = {}
    for row in rows:
        if row.id in left_out or not row.deps or not any(dep in left_out for dep in row.deps):
            continue
        new: list[int] = []
        for dep in row.deps:
            if dep not in resolved:
                resolved[dep] = resolve(dep)
            new.extend(d for d in resolved[dep] if d not in new)
        changed[row.id] = new
    return changed
