"""Export an event log to the Chrome / Perfetto JSON Trace Event Format.

Open the file in https://ui.perfetto.dev or chrome://tracing.

Layout:

* one process per rank, ``pid = rank + 1``, named "<role> <index>" where
  index counts the ranks of that role in rank order ("worker 0",
  "server 0"); ranks that only receive get "rank <n>". Sorted by rank.
* one thread per stream: tid 1 "compute" (kind compute), 2 "comm"
  (collective), 3 "network" (transfer, on the sender), 4 "sync" (barrier).
  The JSON format wants the slices of one thread to nest, so overlapping
  slices of a stream spill onto extra lanes: tid ``base + 4*lane`` named
  e.g. "network (2)".
* every row is a complete event (``"ph": "X"``), ``ts``/``dur`` in
  microseconds (floats from the integer nanoseconds; Perfetto rounds them
  back to whole ns), ``args`` holding id, op, iteration, bytes, peer,
  tensor, deps and the other set fields.
* every transfer also gets a zero-length "recv <op>" slice on the
  receiver's network thread at its ``end_ns`` and a flow arrow
  (``"ph": "s"`` / ``"f"``, flow id = row id) from sender to receiver.

Why pid and tid start at 1: Perfetto's JSON importer treats pid 0 as the
kernel's swapper process, and a tid of 0 as "no tid" (it substitutes the
pid), which would merge a rank's compute thread with another stream.
Timestamps far from 0 (e.g. epoch-based captures, ~1.7e15 us) keep only
microsecond precision in a float.
"""

from __future__ import annotations

import gzip
import heapq
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .parquet import atomic_output
from .schema import BREAKDOWN_COLUMNS, SCHEMA_VERSION, iter_rows, rank_roles, validate_event_log

STREAM_TIDS = {"compute": 1, "collective": 2, "transfer": 3, "barrier": 4}
STREAM_NAMES = {1: "compute", 2: "comm", 3: "network", 4: "sync"}
PID_OFFSET = 1  # pid = rank + PID_OFFSET
_LANE_STRIDE = len(STREAM_NAMES)
_OPTIONAL_ARGS = ("name", "layer", "priority", "collective", "step", "rpc")


@dataclass(order=True)
class _Slice:
    start_ns: int
    neg_end_ns: int  # longer slices first at equal start, so nested ones follow
    row_id: int
    pid: int = field(compare=False)
    stream: int = field(compare=False)
    end_ns: int = field(compare=False)
    event: dict[str, Any] = field(compare=False)
    is_receive: bool = field(compare=False, default=False)
    tid: int = field(compare=False, default=-1)


def to_chrome_trace(df: pd.DataFrame) -> dict[str, Any]:
    """The event log as a Trace Event Format dict (``json.dump`` it)."""
    log = validate_event_log(df, source="event log for Chrome export", check_causality=False)
    rows = list(iter_rows(log))
    slices = [_row_slice(row) for row in rows]
    slices += [_receive_slice(row) for row in rows if row.kind == "transfer"]
    lanes_used = _assign_lanes(slices)

    events: list[dict[str, Any]] = _process_metadata(log)
    events += _thread_metadata(lanes_used)
    slices.sort(key=lambda s: (s.start_ns, s.pid, s.tid, s.row_id))
    events += [s.event for s in slices]
    events += _flow_events(slices)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"generator": "ddlsim", "schema_version": SCHEMA_VERSION},
    }


def write_chrome_trace(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_chrome_trace` as JSON (gzip-compressed if ``path`` ends in .gz)."""
    path = Path(path)
    trace = to_chrome_trace(df)
    text = json.dumps(trace, allow_nan=False, separators=(",", ":"))
    with atomic_output(path) as temporary:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(temporary, "wt", encoding="utf-8") as stream:
            stream.write(text)
    return path


def _microseconds(ns: int) -> float:
    return ns / 1000.0


def _row_args(row: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "id": row.id,
        "op": row.op,
        "iteration": row.iteration,
        "bytes": row.bytes,
        "peer": row.peer,
        "tensor": row.tensor,
        "deps": list(row.deps),
        "ready_ns": row.ready_ns,
        "queue_ns": row.start_ns - row.ready_ns,
    }
    defaults = {"name": "", "priority": 0}
    for name in _OPTIONAL_ARGS:
        value = getattr(row, name)
        if value != defaults.get(name, -1):
            args[name] = value
    for name in BREAKDOWN_COLUMNS:
        value = getattr(row, name)
        if value is not pd.NA:
            args[name] = value
    return args


def _row_slice(row: Any) -> _Slice:
    event = {
        "ph": "X",
        "name": f"{row.op} {row.name}" if row.name else row.op,
        "cat": row.kind,
        "pid": row.rank + PID_OFFSET,
        "ts": _microseconds(row.start_ns),
        "dur": _microseconds(row.end_ns - row.start_ns),
        "args": _row_args(row),
    }
    stream = STREAM_TIDS[row.kind]
    return _Slice(row.start_ns, -row.end_ns, row.id, row.rank + PID_OFFSET, stream, row.end_ns, event)


def _receive_slice(row: Any) -> _Slice:
    """A zero-length slice on the receiver, for the transfer's flow arrow to land on."""
    event = {
        "ph": "X",
        "name": f"recv {row.op}",
        "cat": "transfer_recv",
        "pid": row.peer + PID_OFFSET,
        "ts": _microseconds(row.end_ns),
        "dur": 0.0,
        "args": {"id": row.id, "from": row.rank, "bytes": row.bytes, "tensor": row.tensor},
    }
    end = row.end_ns
    return _Slice(end, -end, row.id, row.peer + PID_OFFSET, STREAM_TIDS["transfer"], end, event, is_receive=True)


def _assign_lanes(slices: list[_Slice]) -> set[tuple[int, int]]:
    """Give every slice a tid so that slices on one (pid, tid) never overlap."""
    by_stream: dict[tuple[int, int], list[_Slice]] = {}
    for slice_ in slices:
        by_stream.setdefault((slice_.pid, slice_.stream), []).append(slice_)
    used: set[tuple[int, int]] = set()
    for (pid, stream), members in by_stream.items():
        members.sort()
        busy: list[tuple[int, int]] = []  # heap of (end_ns, lane)
        free: list[int] = []  # heap of lanes; the lowest free lane is reused first
        lanes = 0
        for slice_ in members:
            while busy and busy[0][0] <= slice_.start_ns:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, lanes = lanes, lanes + 1
            heapq.heappush(busy, (slice_.end_ns, lane))
            slice_.tid = stream + _LANE_STRIDE * lane
            slice_.event["tid"] = slice_.tid
            used.add((pid, slice_.tid))
    return used


def _process_metadata(log: pd.DataFrame) -> list[dict[str, Any]]:
    roles = rank_roles(log)
    receivers = set(int(peer) for peer in log.loc[log["kind"] == "transfer", "peer"])
    events = []
    index_in_role: dict[str, int] = {}
    for rank in sorted(set(roles) | receivers):
        role = roles.get(rank)
        if role is None:
            name = f"rank {rank}"
        else:
            name = f"{role} {index_in_role.get(role, 0)}"
            index_in_role[role] = index_in_role.get(role, 0) + 1
        pid = rank + PID_OFFSET
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": rank}})
    return events


def _thread_metadata(lanes_used: set[tuple[int, int]]) -> list[dict[str, Any]]:
    events = []
    for pid, tid in sorted(lanes_used):
        lane, stream = divmod(tid - 1, _LANE_STRIDE)
        stream += 1
        name = STREAM_NAMES[stream] if lane == 0 else f"{STREAM_NAMES[stream]} ({lane + 1})"
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": stream * 1000 + lane}}
        )
    return events


def _flow_events(slices: list[_Slice]) -> list[dict[str, Any]]:
    """One arrow per transfer, from its slice on the sender to its receive slice."""
    flows = []
    for slice_ in slices:
        if slice_.stream != STREAM_TIDS["transfer"]:
            continue
        receive = slice_.is_receive
        flows.append(
            {
                "ph": "f" if receive else "s",
                "id": slice_.row_id,
                "name": "transfer",
                "cat": "transfer",
                "pid": slice_.pid,
                "tid": slice_.tid,
                "ts": _microseconds(slice_.end_ns if receive else slice_.start_ns),
                **({"bp": "e"} if receive else {}),
            }
        )
    return flows
