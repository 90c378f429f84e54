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
from ..inputs import input_file
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
    input_file(path, "capture file", "remove it, or capture again", error=TraceError)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); the capture file is damaged") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
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
        except RecursionError:
            raise TraceError(f"{path}:{number}: JSON nested too deeply; the capture file is damaged") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise TraceError(f"{path}:{number}: not a JSON object ({exc}); the capture file is damaged") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
        if "header" in obj:
            header = _checked_header(obj["header"], f"{path}:{number}")
        elif "end" in obj:
            end = obj["end"]
        else:
            if header is None:
                raise TraceError(f"{path}:{number}: a row before the header line; the capture file is damaged")
            _check_row(obj, f"{path}:{number}")
            rows.append(obj)
    if header is None:
        raise TraceError(f"{path}: no header line; the rank died before it started recording")
    return header, rows, end, torn


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _is_int(value: Any) -> bool:
    return type(value) is int and _INT64[0] <= value <= _INT64[1]


def _damaged(where: str, what: str, value: Any) -> TraceError:
    from ..trace.jsontext import short_repr

    return TraceError(f"{where}: {what} is {short_repr(value)}; the capture file is damaged")


def _checked_header(header: Any, where: str) -> dict:
    """The header line's fields that merging uses, with their types checked."""
    if not isinstance(header, dict):
        raise _damaged(where, "the header", header)
    if not _is_int(header.get("rank")) or header["rank"] < 0:
        raise _damaged(where, "header field 'rank' (an integer >= 0)", header.get("rank"))
    for key in ("role", "host"):
        if not isinstance(header.get(key), str):
            raise _damaged(where, f"header field {key!r} (a string)", header.get(key))
    if "clock_offset_ns" in header and not _is_int(header["clock_offset_ns"]):
        raise _damaged(where, "header field 'clock_offset_ns' (an integer)", header["clock_offset_ns"])
    if "clock" in header and not isinstance(header["clock"], str):
        raise _damaged(where, "header field 'clock' (a string)", header["clock"])
    return header


def _check_row(row: dict, where: str) -> None:
    """The fields of a row that merging itself reads; event_log_from_rows checks the rest."""
    for key in ("id", "kind", "op", "start_ns", "end_ns"):
        if key not in row:
            raise TraceError(f"{where}: row without {key!r}; the capture file is damaged")
    for key in ("id", "start_ns", "end_ns"):
        if not _is_int(row[key]):
            raise _damaged(where, f"row field {key!r} (an integer)", row[key])
    for key in ("message", "rank"):
        if key in row and not _is_int(row[key]):
            raise _damaged(where, f"row field {key!r} (an integer)", row[key])
    for key in ("kind", "op", "role"):
        if key in row and not isinstance(row[key], str):
            raise _damaged(where, f"row field {key!r} (a string)", row[key])
    deps = row.get("deps")
    if deps is not None and (not isinstance(deps, list) or not all(_is_int(d) for d in deps)):
        raise _damaged(where, "row field 'deps' (a list of row ids, or null)", deps)


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
        if rank in headers:
            raise TraceError(f"{path}: rank {rank} again (also {headers[rank]['_file']}); a capture holds one file per rank")
        headers[rank] = {**header, "_file": path.name}
        if end is None:
            partial.append(rank)
        if torn:
            torn_ranks.append(rank)
        for r in rank_rows:
            r.setdefault("rank", rank)
            r.setdefault("role", header["role"])
            r["_host"] = header["host"]  # the host of the file it came from
        rows.extend(rank_rows)
    hosts = {name: i for i, name in enumerate(sorted({h["host"] for h in headers.values()}))}
    clocks = {}
    for rank, h in headers.items():
        host = hosts[h["host"]]
        clocks[str(host)] = {"offset_ns": int(h.get("clock_offset_ns", 0)), "domain": f"{h['host']}-{h.get('clock', 'monotonic_ns')}"}
    ids = {r["id"] for r in rows}
    sent = {r.get("message", -1) for r in rows if r["kind"] == "send"}
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
        r["host"] = hosts[r.pop("_host")]
        for k, v in _INT_DEFAULTS.items():
            r.setdefault(k, v)
        for k, v in _STR_DEFAULTS.items():
            r.setdefault(k, v)
        r.setdefault("name", "")
    kept.sort(key=lambda r: (r["start_ns"], r["id"]))
    meta = {
        "source": "capture",
        "clocks": clocks,
        "ranks": {str(k): {key: v for key, v in h.items() if key not in ("rank", "_file")} for k, h in sorted(headers.items())},
        "partial": bool(partial or torn_ranks),
        "partial_ranks": sorted(set(partial) | set(torn_ranks)),
        "dropped": dropped,
        **(metadata or {}),
    }
    if not kept:  # every rank died before a complete row (or all its rows named lost ones): an empty, flagged log
        from ..trace import empty_event_log

        return empty_event_log(meta)
    return event_log_from_rows(kept, metadata=meta, groups=groups, source=str(capture_dir))
