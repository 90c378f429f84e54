"""Per-rank capture files -> one event log.

Reads ``<rank>.rank.jsonl`` files (:mod:`.recorder`), checks each line,
and builds a validated :class:`~ddlsim.trace.EventLog` with
``metadata["source"] = "capture"``. A rank whose file has no end mark (it
crashed or was killed) is listed in ``metadata["partial_ranks"]``; a torn
last line is dropped; rows that name rows the crash lost (a recv whose send
was never written, a dep on a missing row) lose those links and are counted
in ``metadata["dropped"]``, so a partial trace is flagged, never corrupt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..errors import TraceError
from .recorder import FILE_SUFFIX

_INT_DEFAULTS = {"iteration": -1, "layer": -1, "tensor": -1, "group": -1, "slice": -1, "peer": -1, "message": -1,
                 "bytes": 0, "priority": 0, "tenant": 0, "collective": -1, "step": -1, "rpc": -1}
_STR_DEFAULTS = {"device": "", "stream": "", "name": "", "coll_type": "", "algorithm": ""}


def rank_files(capture_dir: str | Path) -> list[Path]:
    d = Path(capture_dir)
    if not d.is_dir():
        raise TraceError(f"{d}: no such capture directory; run `ddlsim capture ...` with --out {d} first")
    files = sorted(d.glob(f"*{FILE_SUFFIX}"), key=lambda p: int(p.name.split(".")[0]) if p.name.split(".")[0].isdigit() else -1)
    if not files:
        raise TraceError(f"{d}: no per-rank capture files (*{FILE_SUFFIX}); was the capture started with this --out?")
    return files


def read_rank_file(path: Path) -> tuple[dict, list[dict], Optional[dict], bool]:
    """(header, rows, end mark or None, whether a torn last line was dropped)."""
    header: Optional[dict] = None
    rows: list[dict] = []
    end: Optional[dict] = None
    torn = False
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    last = len(lines) - 1
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number - 1 >= last - 1 and end is None:  # the last line, cut by a crash
                torn = True
                continue
            raise TraceError(f"{path}:{number}: not a JSON object ({exc.msg}); the capture file is damaged") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
        if "header" in obj:
            header = obj["header"]
        elif "end" in obj:
            end = obj["end"]
        else:
            if header is None:
                raise TraceError(f"{path}:{number}: a row before the header line; the capture file is damaged")
            for key in ("id", "kind", "op", "start_ns", "end_ns"):
                if key not in obj:
                    raise TraceError(f"{path}:{number}: row without {key!r}; the capture file is damaged")
            rows.append(obj)
    if header is None:
        raise TraceError(f"{path}: no header line; the rank died before it started recording")
    return header, rows, end, torn


def merge_capture(capture_dir: str | Path, *, metadata: Optional[dict] = None, groups: Any = None):
    """Builds the event log of a capture directory (see the module docstring)."""
    from ..trace import event_log_from_rows

    rows: list[dict] = []
    headers: dict[int, dict] = {}
    partial: list[int] = []
    torn_ranks: list[int] = []
    for path in rank_files(capture_dir):
        header, rank_rows, end, torn = read_rank_file(path)
        rank = int(header["rank"])
        headers[rank] = header
        if end is None:
            partial.append(rank)
        if torn:
            torn_ranks.append(rank)
        for r in rank_rows:
            r.setdefault("rank", rank)
            r.setdefault("role", header["role"])
        rows.extend(rank_rows)
    hosts = {name: i for i, name in enumerate(sorted({h["host"] for h in headers.values()}))}
    clocks = {}
    for rank, h in headers.items():
        host = hosts[h["host"]]
        clocks[str(host)] = {"offset_ns": int(h.get("clock_offset_ns", 0)), "domain": f"{h['host']}-{h.get('clock', 'monotonic_ns')}"}
    ids = {r["id"] for r in rows}
    sent = {r["message"] for r in rows if r["kind"] == "send"}
    dropped = {"deps": 0, "recv_without_send": 0, "send_without_recv": 0}
    kept = []
    for r in rows:
        if r["kind"] == "recv" and r.get("message", -1) not in sent:
            dropped["recv_without_send"] += 1
            continue
        if r.get("deps"):
            good = [d for d in r["deps"] if d in ids]
            dropped["deps"] += len(r["deps"]) - len(good)
            r["deps"] = good
        kept.append(r)
    kept_ids = {r["id"] for r in kept}
    for r in kept:
        if r.get("deps"):
            r["deps"] = [d for d in r["deps"] if d in kept_ids]
        r["host"] = hosts[headers[r["rank"]]["host"]]
        for k, v in _INT_DEFAULTS.items():
            r.setdefault(k, v)
        for k, v in _STR_DEFAULTS.items():
            r.setdefault(k, v)
        r.setdefault("name", "")
    kept.sort(key=lambda r: (r["start_ns"], r["id"]))
    meta = {
        "source": "capture",
        "clocks": clocks,
        "ranks": {str(k): {key: v for key, v in h.items() if key not in ("rank",)} for k, h in sorted(headers.items())},
        "partial": bool(partial or torn_ranks),
        "partial_ranks": sorted(set(partial) | set(torn_ranks)),
        "dropped": dropped,
        **(metadata or {}),
    }
    if not kept:  # every rank died before a complete row (or all its rows named lost ones): an empty, flagged log
        from ..trace import empty_event_log

        return empty_event_log(meta)
    return event_log_from_rows(kept, metadata=meta, groups=groups, source=str(capture_dir))
