"""Traces of the network-operator simulator paper (section 5): one send per line.

The paper's TensorFlow instrumentation records, for every send along the
dataflow graph, five attributes: (1) the event time, (2) the parameter name
(an edge name such as ``conv1/weights/read``), (3) the size of the parameter
queued onto the network, (4) the source device and (5) the destination
device. The paper gives no file syntax; ddlsim reads one record per line,
the five fields separated by commas or whitespace, in that order:

    # time_s, parameter, bytes, source, destination
    0.000000, conv1/weights/read, 37632, worker0, ps0

* time: seconds (a decimal number, relative to the trace's first event as
  in the paper), kept to the nanosecond;
* bytes: an integer;
* devices: ``worker<N>`` / ``ps<N>`` (also ``server<N>``), or TensorFlow
  device names ``/job:worker/replica:0/task:<N>/device:GPU:0`` and
  ``/job:ps/task:<N>...``.

Lines that are empty or start with ``#`` are skipped, and so is a first
line naming the columns (``time, name, size, src, dst``).

Each record becomes one ``send`` row on the source (``start_ns = end_ns =
ready_ns`` = the event time: the trace says when a parameter was queued,
not when it arrived, so there is no recv row), ``peer`` the destination,
its own ``message`` id, ``name`` the parameter and ``tensor`` a number per
parameter name in order of first appearance; op ``push_request`` from a
worker to a PS (the aggregation trace), ``pull_response`` from a PS to a
worker (the distribution trace), ``send`` otherwise. Ranks: workers
0..W-1 by their number, then the PSes W..W+S-1. Several files (e.g. the
aggregation and the distribution trace) are read into one log with
``x_trace_file`` saying which file each row came from; their times keep
their own origins.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable

from ..errors import TraceError
from ..inputs import input_file
from .schema import EventLog, event_log_from_arrays, rows_to_columns

_SHORT_DEVICE = re.compile(r"^(?P<job>worker|ps|server)[_:-]?(?P<task>\d{1,9})$", re.IGNORECASE)
_TF_DEVICE = re.compile(r"^/job:(?P<job>worker|ps)(?:/replica:\d+)?/task:(?P<task>\d{1,9})(?:/device:[A-Za-z]+:\d+)?$")
_HEADER = ("time", "name", "size", "src", "dst")
_MAX_SECONDS = 9_000_000_000  # nanoseconds fit an int64


def _device(text: str, where: str, field: str) -> tuple[str, int]:
    match = _SHORT_DEVICE.match(text) or _TF_DEVICE.match(text)
    if match is None:
        raise TraceError(f"{where}: {field} device {text!r} is not worker<N>, ps<N> or /job:worker|ps/.../task:<N>")
    return ("worker" if match.group("job").lower() == "worker" else "server"), int(match.group("task"))


def _records(path: Path) -> list[dict[str, Any]]:
    input_file(path, "trace file", "give the simulator's trace text file", error=TraceError,
               missing=f"{path}: no such trace file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}: cannot read as UTF-8 text ({err})") from None
    records = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = [f for f in re.split(r"\s*,\s*|\s+", text) if f]
        if not records and tuple(f.lower() for f in fields) == _HEADER:
            continue
        where = f"{path}:{number}"
        if len(fields) != 5:
            raise TraceError(f"{where}: expected 5 fields (time, parameter, bytes, source, destination), found {len(fields)}")
        time_text, name, size_text, src_text, dst_text = fields
        try:
            seconds = Decimal(time_text)
        except InvalidOperation:
            raise TraceError(f"{where}: time {time_text!r} is not a number of seconds") from None
        if not seconds.is_finite() or seconds < 0:
            raise TraceError(f"{where}: time {time_text[:40]!r} must be a number of seconds >= 0")
        if seconds > _MAX_SECONDS:
            raise TraceError(f"{where}: time {time_text[:40]!r} is too large (at most {_MAX_SECONDS} seconds)")
        if not re.fullmatch(r"\d{1,18}", size_text):
            raise TraceError(f"{where}: size {size_text[:40]!r} is not a whole number of bytes (at most 18 digits)")
        src, dst = _device(src_text, where, "source"), _device(dst_text, where, "destination")
        if src == dst:
            raise TraceError(f"{where}: source and destination are both {src_text}")
        records.append({"where": where, "path": path, "time_ns": int((seconds * 1_000_000_000).to_integral_value()),
                        "name": name, "bytes": int(size_text), "src": src, "dst": dst})
    return records


def read_netop_trace(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> EventLog:
    """Read one or more send traces (see the module doc) into an event log of send rows."""
    files = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    if not files:
        raise TraceError("no trace files given")
    records = [record for path in files for record in _records(path)]
    metadata = {"source": "netop", "files": [str(p) for p in files]}
    if not records:
        names = ", ".join(str(p) for p in files)
        raise TraceError(f"{names}: no send records (only empty, comment or header lines); "
                         "nothing to convert - each line is: time_s, parameter, bytes, source, destination")
    devices = {record[end] for record in records for end in ("src", "dst")}
    workers = sorted(task for role, task in devices if role == "worker")
    servers = sorted(task for role, task in devices if role == "server")
    rank_of = {("worker", task): i for i, task in enumerate(workers)}
    rank_of.update({("server", task): len(workers) + i for i, task in enumerate(servers)})
    tensors: dict[str, int] = {}
    rows = []
    for message, record in enumerate(records):
        src, dst = record["src"], record["dst"]
        op = ("push_request" if (src[0], dst[0]) == ("worker", "server")
              else "pull_response" if (src[0], dst[0]) == ("server", "worker") else "send")
        time_ns = record["time_ns"]
        rows.append({"id": message, "rank": rank_of[src], "role": src[0], "kind": "send", "op": op,
                     "name": record["name"], "tensor": tensors.setdefault(record["name"], len(tensors)),
                     "peer": rank_of[dst], "message": message, "bytes": record["bytes"], "ready_ns": time_ns,
                     "start_ns": time_ns, "end_ns": time_ns, "deps": None, "x_trace_file": record["path"].name})
    columns = rows_to_columns(rows)
    columns["x_trace_file"] = [row["x_trace_file"] for row in rows]
    # a rank that only receives still needs its role: it has no row, so rank_roles never asks
    return event_log_from_arrays(columns, metadata=metadata, source=", ".join(str(p) for p in files),
                                 check_causality=False)
