"""PyTorch-profiler (Kineto) JSON traces: export one file per rank, import.

Export (:func:`write_kineto`) writes ``rank<r>.json`` per rank in the layout
the PyTorch profiler writes and Holistic Trace Analysis reads:

* top level: ``schemaVersion``, ``distributedInfo`` (``backend``, ``rank``,
  ``world_size``), ``deviceProperties``, ``traceEvents``,
  ``displayTimeUnit``;
* per iteration a ``ProfilerStep#<i>`` annotation on the CPU thread, from the
  iteration's first launch to its last row's end (clipped at the next step);
* per exported row a ``cpu_op`` and a ``cuda_runtime`` ``cudaLaunchKernel``
  at its launch time (``ready_ns``, else ``start_ns``; zero duration, the
  simulator models no host-side launch cost), a ``kernel`` event on the GPU
  (``pid`` = device, ``tid`` = ``args.stream``) from ``start_ns`` to ``end_ns``,
  ``args.correlation`` / ``args.External id`` shared with the launch, and an
  ``ac2g`` flow (``s`` on the launch, ``f`` with ``bp: e`` on the kernel);
* compute rows are compute kernels on stream 7; collective rows NCCL kernels
  (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``...), send / recv rows NCCL
  ``ncclDevKernel_SendRecv`` kernels, on streams 20, 21... (one stream per
  set of rows that do not overlap, as a GPU stream runs one kernel at a time).

Not exported: barrier and marker rows (no duration on a GPU stream) and the
send / recv steps inside a collective that has its own collective row on
that rank (the collective's kernel covers them, as one NCCL kernel does).
Every kernel's ``args.ddlsim`` holds its row, so :func:`read_kineto` of our
own export gives those rows back exactly.

Import (:func:`read_kineto`) of any Kineto trace, per rank
(``distributedInfo.rank``, else digits in the file name): kernels and memory
copies become rows on ``stream <n>`` of ``cuda:<device>`` - NCCL kernels
(``nccl*``) ``collective`` rows, the others ``compute`` rows; outermost CPU
ops with a duration become ``compute`` rows on ``cpu <tid>``; collective CPU
ops (``gloo:*``, ``nccl:*``, ``c10d::*``, ``record_param_comms``) that did
not launch a kernel (gloo runs on the CPU) ``collective`` rows - except, in a
trace with ``gloo:*`` ops, the others: a real gloo trace (torch 2.x) has
``c10d::allreduce_`` on the calling thread, which only enqueues the work, and
``gloo:all_reduce`` on a ``pt_gloo_runloop`` thread, which is the all-reduce. The
iteration is the ``ProfilerStep#<n>`` holding the op (a kernel: its launch).
Dependencies and ready times are unknown (null).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any, Iterable

from ..errors import TraceError
from ..inputs import input_file
from .jsontext import parse_json, short_repr
from .parquet import atomic_output
from .subset import collective_steps, redirect_deps
from .schema import COLUMN_NAMES, EventLog, empty_event_log, event_log_from_arrays, iter_rows, rows_to_columns, validate_event_log

COMPUTE_STREAM = 7
COMM_STREAM = 20
HOST_PID_BASE = 1000  # CPU process id = HOST_PID_BASE + rank (the GPU's pid is its device index)
MAIN_TID = 1
# HTA 0.5 downcasts the correlation column to the smallest integer type, then writes event indexes into a
# column of that type: below 128 launches (int8) a trace of more than 127 events fails to load under pandas
# >= 2.2 ("Invalid value ... for dtype 'int8'"). Ids from 65536 up keep that column int32.
CORRELATION_BASE = 1 << 16
_NCCL_COLLECTIVE = {
    "allreduce": "AllReduce_Sum_f32_RING_LL", "reduce_scatter": "ReduceScatter_Sum_f32_RING_LL",
    "all_gather": "AllGather_RING_LL", "broadcast": "Broadcast_RING_LL", "reduce": "Reduce_Sum_f32_RING_LL",
    "all_to_all": "SendRecv", "barrier": "AllReduce_Sum_f32_RING_LL", "": "AllReduce_Sum_f32_RING_LL",
}  # fmt: skip
_CPU_COLLECTIVE = {"allreduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather",
                   "broadcast": "broadcast", "reduce": "reduce", "all_to_all": "all_to_all", "barrier": "barrier"}
_COLL_FROM_NAME = (("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("reducescatter", "reduce_scatter"),
                   ("reduce_scatter", "reduce_scatter"), ("allgather", "all_gather"), ("all_gather", "all_gather"),
                   ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("broadcast", "broadcast"),
                   ("barrier", "barrier"), ("reduce", "reduce"))
_COMM_CPU_OP = re.compile(r"^(gloo:|nccl:|c10d::|record_param_comms)")
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d{1,9})$")
_ROW_FIELDS = ("id", "iteration", "rank", "role", "host", "device", "stream", "kind", "op", "name", "layer", "tensor",
               "group", "slice", "peer", "message", "bytes", "priority", "tenant", "collective", "coll_type",
               "algorithm", "step", "rpc", "ready_ns", "start_ns", "end_ns", "deps")


# --------------------------------------------------------------------------
# export


def kineto_paths(out_dir: str | os.PathLike[str], ranks: Iterable[int]) -> dict[int, Path]:
    return {rank: Path(out_dir) / f"rank{rank}.json" for rank in ranks}


def to_kineto(log: Any) -> dict[int, dict[str, Any]]:
    """Rank -> Kineto trace dict (see the module doc)."""
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source="event log for Kineto export", check_causality=False)
    rows = list(iter_rows(log, COLUMN_NAMES))
    if not rows:  # one file per rank, and no rank: nothing a reader would find (tools/fuzz_readers.py)
        raise TraceError("the log has no rows: a Kineto trace is one file per rank, and there is none to write")
    for row in rows:  # what the reader takes back (_MAX_US): a time in ns fits an int64 after ts + dur
        for name, ns in (("start_ns", row.start_ns), ("end_ns", row.end_ns), ("ready_ns", row.ready_ns or 0),
                         ("end_ns - start_ns", row.end_ns - row.start_ns)):
            if abs(ns) > _MAX_US * 1000:
                raise TraceError(f"event log row id={row.id}: {name} = {ns} is beyond the +-{_MAX_US:g} us a Kineto "
                                 "trace holds; export it to Chakra, CSV or Chrome")
    by_rank: dict[int, list[Any]] = {}
    for row in rows:
        by_rank.setdefault(row.rank, []).append(row)
    left_out = collective_steps(by_rank) | {row.id for row in rows if row.kind in ("barrier", "marker")}
    redirected = redirect_deps(rows, left_out)
    exported: dict[int, list[Any]] = {rank: [] for rank in by_rank}
    for row in rows:
        if row.id not in left_out:
            exported[row.rank].append(row._replace(deps=redirected[row.id]) if row.id in redirected else row)
    world = len(by_rank)
    return {rank: _rank_trace(rank, world, rank_rows) for rank, rank_rows in sorted(exported.items())}


def write_kineto(log: Any, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``rank<r>.json`` per rank into ``out_dir`` (created if needed); returns the paths."""
    traces = to_kineto(log)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = kineto_paths(out_dir, traces)
    for rank, trace in traces.items():
        # HTA finds the rank with the pattern '"rank":\s+(\d+)': keep json's ": " separator
        text = json.dumps(trace, allow_nan=False)
        with atomic_output(paths[rank]) as temporary:
            temporary.write_text(text, encoding="utf-8")
    return list(paths.values())


def _device_index(row: Any) -> int:
    match = re.match(r"^cuda:(\d+)$", row.device or "")
    return int(match.group(1)) if match else 0


def _us(ns: int) -> float:
    return ns / 1000.0


def _rank_trace(rank: int, world: int, rank_rows: list[Any]) -> dict[str, Any]:
    pid = HOST_PID_BASE + rank
    rows = sorted(rank_rows, key=lambda r: (r.start_ns, r.id))
    streams = _assign_streams(rows)
    devices = sorted({_device_index(row) for row in rows}) or [0]
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": MAIN_TID, "args": {"name": "main thread"}},
    ]
    for device in devices:
        events.append({"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": f"GPU {device}"}})
    for (device, stream) in sorted(set((_device_index(r), streams[r.id]) for r in rows)):
        events.append({"ph": "M", "name": "thread_name", "pid": device, "tid": stream, "args": {"name": f"stream {stream}"}})
    events += _profiler_steps(rows, pid)
    for correlation, row in enumerate(rows, start=CORRELATION_BASE):
        launch = row.ready_ns if row.ready_ns is not None and row.ready_ns <= row.start_ns else row.start_ns
        device, stream = _device_index(row), streams[row.id]
        cpu_name, kernel_name = _names(row)
        common_cpu = {"pid": pid, "tid": MAIN_TID, "ts": _us(launch), "dur": 0.0}
        events.append({"ph": "X", "cat": "cpu_op", "name": cpu_name, **common_cpu,
                       "args": {"External id": correlation, "ddlsim id": row.id}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **common_cpu,
                       "args": {"External id": correlation, "correlation": correlation}})
        events.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": device, "tid": stream,
                       "ts": _us(row.start_ns), "dur": _us(row.end_ns - row.start_ns),
                       "args": {"External id": correlation, "device": device, "stream": stream,
                                "correlation": correlation, "ddlsim": _row_dict(row)}})
        events.append({"ph": "s", "id": correlation, "pid": pid, "tid": MAIN_TID, "ts": _us(launch),
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": correlation, "pid": device, "tid": stream, "ts": _us(row.start_ns),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "deviceProperties": [{"id": d, "name": "ddlsim simulated GPU"} for d in devices],
        "traceEvents": events,
        "traceName": f"ddlsim rank {rank}",
        "displayTimeUnit": "ms",
    }


def _names(row: Any) -> tuple[str, str]:
    label = f"{row.op} {row.name}" if row.name else row.op
    if row.kind == "compute":
        return f"ddlsim::{label}", f"ddlsim_{row.op}_kernel"
    if row.kind == "collective":
        return f"nccl:{_CPU_COLLECTIVE.get(row.coll_type, 'all_reduce')}", f"ncclDevKernel_{_NCCL_COLLECTIVE[row.coll_type]}"
    return f"nccl:{row.kind}", "ncclDevKernel_SendRecv"


def _assign_streams(rows: list[Any]) -> dict[int, int]:
    """Compute rows on stream 7; communication rows on the lowest of 20, 21... that is free."""
    import heapq

    out: dict[int, int] = {}
    busy: list[tuple[int, int]] = []  # (end_ns, stream)
    free: list[int] = []
    count = 0
    for row in rows:  # sorted by start
        if row.kind == "compute":
            out[row.id] = COMPUTE_STREAM
            continue
        while busy and busy[0][0] <= row.start_ns:
            heapq.heappush(free, heapq.heappop(busy)[1])
        stream = heapq.heappop(free) if free else COMM_STREAM + count
        count += stream == COMM_STREAM + count
        heapq.heappush(busy, (row.end_ns, stream))
        out[row.id] = stream
    return out


def _profiler_steps(rows: list[Any], pid: int) -> list[dict[str, Any]]:
    spans: dict[int, list[int]] = {}
    for row in rows:
        if row.iteration < 0:
            continue
        launch = row.ready_ns if row.ready_ns is not None and row.ready_ns <= row.start_ns else row.start_ns
        span = spans.setdefault(row.iteration, [launch, row.end_ns])
        span[0], span[1] = min(span[0], launch), max(span[1], row.end_ns)
    iterations = sorted(spans)
    events = []
    for index, iteration in enumerate(iterations):
        start, end = spans[iteration]
        if index + 1 < len(iterations):
            end = min(end, spans[iterations[index + 1]][0])
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{iteration}", "pid": pid,
                       "tid": MAIN_TID, "ts": _us(start), "dur": _us(max(end - start, 0)), "args": {}})
    return events


def _row_dict(row: Any) -> dict[str, Any]:
    return {name: getattr(row, name) for name in _ROW_FIELDS}


# --------------------------------------------------------------------------
# import


def find_kineto_files(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
            if not files:
                raise TraceError(f"{path}: directory holds no Kineto traces (*.json, *.json.gz)")
            return files
        return [path]
    files = [Path(p) for p in source]
    if not files:
        raise TraceError("no Kineto trace files given")
    return files


def _load_json(path: Path) -> Any:
    input_file(path, "Kineto trace file", "give the JSON traces torch.profiler wrote (or a directory of them)",
               error=TraceError, missing=f"{path}: no such Kineto trace file")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as stream:
                text = stream.read()
        else:
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as err:  # zlib.error: a damaged .gz
        raise TraceError(f"{path}: cannot read as UTF-8 text ({err})") from None
    return parse_json(text, str(path))


def read_kineto(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> EventLog:
    """Read PyTorch-profiler (Kineto) JSON traces, one per rank, into an event log (see the module doc)."""
    files = find_kineto_files(source)
    rows: list[dict[str, Any]] = []
    seen: dict[int, Path] = {}
    for path in files:
        trace = _load_json(path)
        rank = _rank_of(trace, path, single=len(files) == 1)
        if rank in seen:
            raise TraceError(f"{path}: rank {rank} again (also {seen[rank]}); pass one trace per rank")
        seen[rank] = path
        rows += _trace_rows(trace, rank, path)
    metadata = {"source": "kineto", "files": [str(p) for p in files]}
    if not rows:
        return empty_event_log(metadata)
    ours = all([row.pop("_ours") for row in rows])
    if not ours:
        for index, row in enumerate(rows):
            row["id"] = index
    else:
        _check_messages(rows, seen)
    source_name = "Kineto traces " + ", ".join(str(p) for p in files)
    return event_log_from_arrays(rows_to_columns(rows), metadata=metadata, source=source_name, check_causality=False)


def _check_messages(rows: list[dict[str, Any]], files: dict[int, Path]) -> None:
    """Rows of our own export: every recv needs its send, i.e. the trace of the sender's rank."""
    sent = {row["message"] for row in rows if row["kind"] == "send"}
    for row in rows:
        if row["kind"] == "recv" and row["message"] not in sent:
            raise TraceError(f"{files[row['rank']]}: row {row['id']} receives message {row['message']} from rank "
                             f"{row['peer']}, whose trace was not given; pass the traces of all ranks (their directory)")


def _rank_of(trace: Any, path: Path, single: bool) -> int:
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{path}: a Kineto trace is a JSON object with a 'traceEvents' list")
    other = trace.get("otherData")
    if isinstance(other, dict) and other.get("generator") == "ddlsim" and "distributedInfo" not in trace:
        raise TraceError(f"{path}: is ddlsim's Chrome / Perfetto export, which is write-only; convert the event "
                         "log it came from instead")
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and "rank" in info:
        if not isinstance(info["rank"], int) or isinstance(info["rank"], bool) or not 0 <= info["rank"] <= _MAX_RANK:
            raise TraceError(f"{path}: distributedInfo.rank is {short_repr(info['rank'])}, expected a rank >= 0")
        return info["rank"]
    digits = re.findall(r"\d+", path.name.split(".")[0])
    if digits:
        if len(digits[-1]) > 9:
            raise TraceError(f"{path}: rank {digits[-1]} from the file name is too large; add "
                             '"distributedInfo": {"rank": N}')
        return int(digits[-1])
    if single:
        return 0
    raise TraceError(f"{path}: no distributedInfo.rank and no rank number in the file name; add "
                     '"distributedInfo": {"rank": N} or name the files rank<N>.json')


_MAX_RANK = (1 << 31) - 1
_MAX_US = 4.6e15  # |ts| and |dur| in microseconds: ts + dur in nanoseconds fits an int64


def _number(event: dict[str, Any], name: str, where: str) -> float:
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where}: '{name}' is {short_repr(value)}, expected a number (microseconds)")
    if not -_MAX_US <= value <= _MAX_US:  # NaN fails this too
        raise TraceError(f"{where}: '{name}' is {value}, expected a finite number of microseconds "
                         f"within +-{_MAX_US:g}")
    if name == "dur" and value < 0:
        raise TraceError(f"{where}: 'dur' is {value}, a duration cannot be negative")
    return value


def _key(value: Any) -> Any:
    """An id from a trace (correlation, External id) usable as a key: an int or string, else None."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _trace_rows(trace: dict[str, Any], rank: int, path: Path) -> list[dict[str, Any]]:
    complete = []
    for index, event in enumerate(trace["traceEvents"]):
        where = f"{path}: traceEvents[{index}]"
        if not isinstance(event, dict):
            raise TraceError(f"{where}: is {type(event).__name__}, expected an event object")
        if event.get("ph") != "X":
            continue
        if not isinstance(event.get("name"), str):
            raise TraceError(f"{where}: complete event without a 'name' string")
        for name in ("pid", "tid"):
            if name in event and not isinstance(event[name], (int, str, type(None))):
                raise TraceError(f"{where}: '{name}' is {short_repr(event[name])}, expected an integer or string")
        ts, dur = _number(event, "ts", where), _number(event, "dur", where)
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        complete.append((index, where, event, round(ts * 1000), round((ts + dur) * 1000), args))
    steps = sorted((start, end, int(_STEP.match(e["name"]).group(1))) for _, _, e, start, end, _ in complete
                   if _STEP.match(e["name"]))
    launches = {}
    for _, _, event, start, _, args in complete:
        if event.get("cat") == "cuda_runtime" and _key(args.get("correlation")) is not None:
            launches[args["correlation"]] = start
    launched = {_key(args.get("External id")) for _, _, e, _, _, args in complete if e.get("cat") in _GPU_CATEGORIES}
    rows: list[dict[str, Any]] = []
    cpu_ops = [(i, w, e, s, t, a) for i, w, e, s, t, a in complete
               if e.get("cat") in ("cpu_op", "user_annotation") and not _STEP.match(e["name"])]
    # gloo runs each collective on its own thread ("gloo:all_reduce" on pt_gloo_runloop); the c10d:: op on the
    # calling thread only enqueues it, like a kernel launch, and the trace links the two by nothing but time.
    gloo_work = any(e["name"].startswith("gloo:") for _, _, e, _, _, _ in cpu_ops)
    for index, where, event, start, end, args in complete:
        category = event.get("cat")
        if category in _GPU_CATEGORIES:
            rows.append(_gpu_row(event, args, rank, start, end, where, _iteration(steps, launches.get(_key(args.get("correlation")), start))))
    for index, where, event, start, end, args in _outermost(cpu_ops):
        name = event["name"]
        if _COMM_CPU_OP.match(name):
            if _key(args.get("External id")) in launched or end <= start:
                continue  # an NCCL launch: its kernel is the communication
            if gloo_work and not name.startswith("gloo:"):
                continue  # enqueues gloo work: the gloo: op is the communication
            kind = "collective"
        elif end > start:
            kind = "compute"
        else:
            continue
        rows.append({"_ours": False, "rank": rank, "role": "worker", "kind": kind, "op": name, "stream": f"cpu {event.get('tid')}",
                     "iteration": _iteration(steps, start), "start_ns": start, "end_ns": end,
                     "coll_type": _coll_type(name) if kind == "collective" else "", "ready_ns": None, "deps": None})
    return rows


def _outermost(cpu_ops: list[tuple]) -> list[tuple]:
    """Per (pid, tid): compute ops not inside another op; collective ops not inside another collective op."""
    out = []
    by_thread: dict[tuple, list[tuple]] = {}
    for item in cpu_ops:
        by_thread.setdefault((item[2].get("pid"), item[2].get("tid")), []).append(item)
    for items in by_thread.values():
        items.sort(key=lambda item: (item[3], -item[4]))
        reach_any = reach_comm = None
        for item in items:
            start, end = item[3], item[4]
            is_comm = bool(_COMM_CPU_OP.match(item[2]["name"]))
            limit = reach_comm if is_comm else reach_any
            if limit is None or start >= limit:
                out.append(item)
            reach_any = end if reach_any is None else max(reach_any, end)
            if is_comm:
                reach_comm = end if reach_comm is None else max(reach_comm, end)
    return out


def _iteration(steps: list[tuple[int, int, int]], time_ns: int) -> int:
    for start, end, number in steps:
        if start <= time_ns < end or start == time_ns:
            return number
    return -1


def _coll_type(name: str) -> str:
    lowered = name.lower()
    for needle, coll_type in _COLL_FROM_NAME:
        if needle in lowered:
            return coll_type
    return ""


def _gpu_row(event: dict[str, Any], args: dict[str, Any], rank: int, start: int, end: int, where: str,
             iteration: int) -> dict[str, Any]:
    ours = args.get("ddlsim")
    if isinstance(ours, dict):
        missing = [name for name in _ROW_FIELDS if name not in ours]
        if missing:
            raise TraceError(f"{where}: args.ddlsim lacks {missing}; it was not written by ddlsim's Kineto export")
        for name in ("id", "rank", "message", "peer"):
            if type(ours[name]) is not int:
                raise TraceError(f"{where}: args.ddlsim.{name} is {short_repr(ours[name])}, expected an integer")
        if ours["rank"] != rank:
            raise TraceError(f"{where}: args.ddlsim.rank is {ours['rank']}, but this is the trace of rank {rank}")
        return {"_ours": True, **ours}
    device, stream = args.get("device", event.get("pid")), args.get("stream", event.get("tid"))
    for name, value in (("device", device), ("stream", stream)):
        if not isinstance(value, (int, str, type(None))):
            raise TraceError(f"{where}: args.{name} is {short_repr(value)}, expected an integer or string")
    name = event["name"]
    is_comm = name.startswith("nccl")
    return {"_ours": False, "rank": rank, "role": "worker", "kind": "collective" if is_comm else "compute", "op": name,
            "device": f"cuda:{device}", "stream": f"stream {stream}", "iteration": iteration,
            "coll_type": _coll_type(name) if is_comm else "", "start_ns": start, "end_ns": end, "ready_ns": None,
            "deps": None}
