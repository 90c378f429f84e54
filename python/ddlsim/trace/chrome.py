"""Export an event log to the Chrome / Perfetto JSON Trace Event Format.

Open the file in https://ui.perfetto.dev or chrome://tracing.

Layout:

* one process per rank, ``pid = rank + 1``, named "<role> <index>" where
  index counts the ranks of that role in rank order ("worker 0",
  "server 0"). Sorted by rank.
* one thread per kind of work: tid 1 "compute" (compute rows), 2 "comm"
  (collective), 3 "network" (send rows on the sender, recv rows on the
  receiver), 4 "sync" (barrier and marker). The JSON format wants the
  slices of one thread to nest, so overlapping slices spill onto extra
  lanes: tid ``base + 4*lane`` named e.g. "network (2)".
* every row is a complete event (``"ph": "X"``), ``ts``/``dur`` in
  microseconds (floats from the integer nanoseconds; Perfetto rounds them
  back to whole ns), ``args`` holding id, op, kind, iteration, bytes, peer,
  message, tensor, deps, ready_ns, queue_ns and the other set fields
  (``x_*`` extension columns included).
* a flow arrow (``"ph": "s"`` on the send slice at its start, ``"ph": "f"``
  with ``"bp": "e"`` on the recv slice at its start) joins every send to
  every recv of its message: one arrow for a unicast message, one per copy
  of a multicast, one per contribution to an aggregation.

* queue occupancy (the queues side table, packet level) as counter tracks
  (``"ph": "C"``): one per port and band, named "queue <port> band <b>"
  (the port's name from the metadata's ``network_stats``, e.g. "host 3 ->
  star"), with ``packets`` and ``bytes`` args, on the process of the rank
  that owns the NIC or on a process of its own per switch ("switch 0",
  pid = node + 1, sorted after the ranks). A sample is a change, so the
  value holds until the next one.

Times are the rows' own (each host's clock); clock offsets are not applied.

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


from .parquet import atomic_output
from .schema import COLUMN_NAMES, SCHEMA_VERSION, EventLog, iter_rows, rank_roles, validate_event_log

STREAM_TIDS = {"compute": 1, "collective": 2, "send": 3, "recv": 3, "barrier": 4, "marker": 4}
STREAM_NAMES = {1: "compute", 2: "comm", 3: "network", 4: "sync"}
PID_OFFSET = 1  # pid = rank + PID_OFFSET
_LANE_STRIDE = len(STREAM_NAMES)
_OPTIONAL_ARGS = {
    "name": "", "host": None, "device": "", "stream": "", "layer": -1, "group": -1, "slice": -1, "priority": 0,
    "tenant": 0, "collective": -1, "coll_type": "", "algorithm": "", "step": -1, "rpc": -1,
}


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
    message: int = field(compare=False, default=-1)


def to_chrome_trace(log: EventLog | object) -> dict[str, Any]:
    """The event log as a Trace Event Format dict (``json.dump`` it)."""
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source="event log for Chrome export", check_causality=False)
    extensions = log.extension_columns
    columns = list(COLUMN_NAMES) + extensions
    rows = list(iter_rows(log, columns))
    slices = [_row_slice(row, extensions) for row in rows]
    lanes_used = _assign_lanes(slices)

    events: list[dict[str, Any]] = _process_metadata(log)
    events += _thread_metadata(lanes_used)
    slices.sort(key=lambda s: (s.start_ns, s.pid, s.tid, s.row_id))
    events += [s.event for s in slices]
    events += _flow_events(slices)
    events += queue_counter_events(log.queues, log.metadata, roles=rank_roles(log))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"generator": "ddlsim", "schema_version": SCHEMA_VERSION},
    }


def write_chrome_trace(log: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_chrome_trace` as JSON (gzip-compressed if ``path`` ends in .gz)."""
    path = Path(path)
    trace = to_chrome_trace(log)
    text = json.dumps(trace, allow_nan=False, separators=(",", ":"))
    with atomic_output(path) as temporary:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(temporary, "wt", encoding="utf-8") as stream:
            stream.write(text)
    return path


def _microseconds(ns: int) -> float:
    return ns / 1000.0


def _row_args(row: Any, extensions: list[str]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "id": row.id,
        "op": row.op,
        "kind": row.kind,
        "iteration": row.iteration,
        "bytes": row.bytes,
        "peer": row.peer,
        "message": row.message,
        "tensor": row.tensor,
        "deps": None if row.deps is None else list(row.deps),
        "ready_ns": row.ready_ns,
    }
    if row.ready_ns is not None:
        args["queue_ns"] = row.start_ns - row.ready_ns
    for name, default in _OPTIONAL_ARGS.items():
        value = getattr(row, name)
        if value != (row.rank if name == "host" else default):
            args[name] = value
    for name in extensions:
        value = getattr(row, name)
        if value is not None and value == value:  # not null, not NaN (JSON has no NaN)
            args[name] = value
    return args


def _row_slice(row: Any, extensions: list[str]) -> _Slice:
    event = {
        "ph": "X",
        "name": f"{row.op} {row.name}" if row.name else row.op,
        "cat": row.kind,
        "pid": row.rank + PID_OFFSET,
        "ts": _microseconds(row.start_ns),
        "dur": _microseconds(row.end_ns - row.start_ns),
        "args": _row_args(row, extensions),
    }
    slice_ = _Slice(row.start_ns, -row.end_ns, row.id, row.rank + PID_OFFSET, STREAM_TIDS[row.kind], row.end_ns, event)
    slice_.is_receive = row.kind == "recv"
    slice_.message = row.message if row.kind in ("send", "recv") else -1
    return slice_


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


def _process_metadata(log: EventLog) -> list[dict[str, Any]]:
    roles = rank_roles(log)
    events = []
    index_in_role: dict[str, int] = {}
    for rank in sorted(roles):
        role = roles[rank]
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
    """One arrow from every send to every recv of its message."""
    sends: dict[int, list[_Slice]] = {}
    recvs: dict[int, list[_Slice]] = {}
    for slice_ in slices:
        if slice_.message >= 0:
            (recvs if slice_.is_receive else sends).setdefault(slice_.message, []).append(slice_)
    flows = []
    flow_id = 0
    for message in sorted(sends):
        for send in sends[message]:
            for recv in recvs.get(message, []):
                flow_id += 1
                common = {"id": flow_id, "name": "message", "cat": "message"}
                flows.append({"ph": "s", **common, "pid": send.pid, "tid": send.tid, "ts": _microseconds(send.start_ns)})
                flows.append({"ph": "f", "bp": "e", **common, "pid": recv.pid, "tid": recv.tid,
                              "ts": _microseconds(recv.start_ns)})
    return flows


def queue_counter_events(queues: Any, metadata: Any = None, roles: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """Counter events (``"ph": "C"``) of a queues side table (a pyarrow Table
    or a dict of columns): one track per (node, port, band), plus the
    process names of switch nodes (see the module doc). [] for no table."""
    if queues is None:
        return []
    import numpy as np

    def column(name: str):
        if hasattr(queues, "column_names"):
            return queues.column(name).to_numpy() if name in queues.column_names else None
        return np.asarray(queues[name]) if name in queues else None

    time_ns = column("time_ns")
    if time_ns is None or not len(time_ns):
        return []
    node, port, band = column("node"), column("port"), column("band")
    nbytes, packets = column("bytes"), column("packets")
    zeros = np.zeros(len(time_ns), dtype=np.int64)
    port = zeros - 1 if port is None else port
    band = zeros if band is None else band
    stats = (metadata or {}).get("network_stats") or {}
    ports = stats.get("ports") or {}
    names = dict(zip(ports.get("port", []), ports.get("name", []))) if isinstance(ports, dict) else {}
    roles = roles or {}
    ranks = int(stats.get("ranks", max(roles, default=-1) + 1))
    events: list[dict[str, Any]] = []
    for n in sorted({int(x) for x in node}):
        if n >= ranks and n not in roles:
            pid = n + PID_OFFSET
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"switch {n - ranks}"}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": n}})
    order = np.lexsort((band, port, node, time_ns))
    for i in order:
        p = int(port[i])
        label = names.get(p, f"port {p}")
        args: dict[str, Any] = {}
        if packets is not None and int(packets[i]) >= 0:
            args["packets"] = int(packets[i])
        if nbytes is not None:
            args["bytes"] = int(nbytes[i])
        events.append({"ph": "C", "name": f"queue {label} band {int(band[i])}", "cat": "queue",
                       "pid": int(node[i]) + PID_OFFSET, "ts": _microseconds(int(time_ns[i])), "args": args})
    return events
