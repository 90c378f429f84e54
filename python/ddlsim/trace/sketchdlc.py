"""SketchDLC text traces (Xu et al., "SketchDLC: A Sketch on Distributed Deep
Learning Communication via Trace Capturing", Table 1 and section 4.1).

A SketchDLC trace is one tab-separated file per node of a parameter-server
job, one record per message sent or received by that node, with the columns

    id src dst length num_pp operation op_id dep_type d_time time_sec time_usec id_dep

Mapping from the event log (schema v2). The send and recv rows of the PS
ops (push_request, push_response, pull_request, pull_response) map one to
one onto SketchDLC's 8 operations: a send row is the Send record in its
rank's file, a recv row the Recv record in its rank's file.

=============  ==================  ==================  ==============
event-log op   send row's record   recv row's record   operation_num
=============  ==================  ==================  ==============
push_request   Push_Send_Worker    Push_Recv_Server    4*iteration+0
push_response  Push_Send_Server    Push_Recv_Worker    4*iteration+1
pull_request   Pull_Send_Worker    Pull_Recv_Server    4*iteration+2
pull_response  Pull_Send_Server    Pull_Recv_Worker    4*iteration+3
=============  ==================  ==================  ==============

* ``src``/``dst``: node numbers of the paper's eqs. 2-3 - the worker ranks,
  in rank order, are nodes 0..W-1 and the server ranks W..W+S-1 (eq. 3's
  ``numWorkers + [0, numWorkers)`` is read as ``[0, numServers)``). Files are
  named after the node: ``w0.txt``, ``s0.txt`` (w<i> is node i, s<j> node W+j).
* ``length``: the row's ``bytes`` (payload only; the paper also counts the
  message's meta data).
* ``num_pp``: the dispatch order of push / pull operations of the worker
  involved, counted from 1 in order of the request's start (0 is the paper's
  connection-setup value, which we never emit). The request and response of
  one operation share it (matched by ``rpc``, tensor, iteration and peers),
  and the server's records carry the worker's number.
* ``op_id``: ``key-operation_num-peer`` with key = ``tensor`` and peer the
  node at the other end, as in the paper's Fig. 8 (``4-7-s0`` in worker 0's
  file). Both records of one message carry the same key and operation_num.
* ``dep_type`` (0 independent, 1 Push_on_Push, 2 Pull_on_Push, 3
  Pull_on_Pull, 4 Push_on_Pull) follows section 3.2.3; the record depended on
  is on the same node with operation_num one less:
  Push_Recv/Pull_Send/Pull_Recv_Worker on the previous record of the same key
  and server; Push_Send_Worker on the Pull_Recv_Worker records of the previous
  iteration (any key and server); Push_Recv_Server on the Pull_Send_Server
  records of the previous iteration to that worker (any key);
  Push_Send_Server on the Push_Recv_Server records of that key (any worker);
  Pull_Recv/Pull_Send_Server on the previous record of the same key and worker.
  Of the candidates, the latest one not after the record is taken; when there
  is none the record is independent (dep_type 0, d_time 0, id_dep -1).
* ``d_time``: microseconds since the record depended on; ``time_sec`` /
  ``time_usec``: the record's time, a Send at the send row's ``start_ns``, a
  Recv at the recv row's ``end_ns``, on that node's own clock (no clock
  offsets applied, as SketchDLC records them), truncated to microseconds
  (d_time is the difference of the truncated times).
* ``id``: 0, 1, 2 ... in time order within the file.

What is not reproduced exactly:

* no connection-setup / scheduler records (``SendCom_To_Servers``) and no
  initialization records (the ``num_pp = -15`` pushes of worker 0 and the
  initial pull): the event log has no such rows. Hence operation_num is
  ``4*iteration + k`` on every node, where the paper starts non-zero workers'
  training at 2, worker 0's at 4 and the servers' at -2 (rows with iteration
  -1 get negative operation_nums).
* one-to-many dependencies: the paper writes the operation_num of the whole
  set (e.g. ``(3-s0.)``); we write the op_id of the latest record of the set,
  the one that released the record, and d_time relative to it.
* the file header block of the paper's Fig. 8 is replaced by ``#`` comment
  lines followed by one line of column names.

Reading (:func:`read_sketchdlc`) accepts these files and the paper's record
layout (an ``OP:=`` prefix on the operation, setup records, which are
skipped), pairs each Send record with the Recv record on its peer having the
same operation, key, operation_num, src and dst (in time order when several
do), and returns per message a send row (at the Send record's time,
``start_ns = end_ns``) and a recv row (at the Recv record's time) sharing a
message id, iteration = operation_num // 4, ``ready_ns`` null (SketchDLC
does not say when a message became ready), ``host`` = node number with one
clock domain per node in the metadata's ``clocks`` (offsets 0), and
``deps`` from each record's ``id_dep`` where it names an earlier record of
the same node (``[]`` for an independent record).
"""

from __future__ import annotations

import bisect
import os
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..inputs import input_file
from .parquet import atomic_output
from .schema import (
    PS_OPS,
    EventLog,
    empty_event_log,
    event_log_from_arrays,
    iter_rows,
    rank_roles,
    validate_event_log,
)

SKETCHDLC_COLUMNS = (
    "id", "src", "dst", "length", "num_pp", "operation",
    "op_id", "dep_type", "d_time", "time_sec", "time_usec", "id_dep",
)  # fmt: skip

DEP_INDEPENDENT = 0
DEP_PUSH_ON_PUSH = 1
DEP_PULL_ON_PUSH = 2
DEP_PULL_ON_PULL = 3
DEP_PUSH_ON_PULL = 4


@dataclass(frozen=True)
class _Message:
    """How one PS transfer (event-log op) appears in SketchDLC."""

    op: str
    send: str
    recv: str
    offset: int  # operation_num = 4 * iteration + offset
    sender_role: str
    receiver_role: str

    @property
    def family(self) -> str:
        return self.op.split("_")[0]


MESSAGES = {
    m.op: m
    for m in (
        _Message("push_request", "Push_Send_Worker", "Push_Recv_Server", 0, "worker", "server"),
        _Message("push_response", "Push_Send_Server", "Push_Recv_Worker", 1, "server", "worker"),
        _Message("pull_request", "Pull_Send_Worker", "Pull_Recv_Server", 2, "worker", "server"),
        _Message("pull_response", "Pull_Send_Server", "Pull_Recv_Worker", 3, "server", "worker"),
    )
}
_BY_OPERATION: dict[str, tuple[_Message, bool]] = {}
for _message in MESSAGES.values():
    _BY_OPERATION[_message.send] = (_message, True)
    _BY_OPERATION[_message.recv] = (_message, False)
OPERATIONS = tuple(_BY_OPERATION)


@dataclass(frozen=True)
class _DepRule:
    """A record depends on records of operation ``on`` with operation_num - 1."""

    dep_type: int
    on: str
    same_key: bool
    same_peer: bool


_DEP_RULES = {
    "Push_Send_Worker": _DepRule(DEP_PUSH_ON_PULL, "Pull_Recv_Worker", same_key=False, same_peer=False),
    "Push_Recv_Worker": _DepRule(DEP_PUSH_ON_PUSH, "Push_Send_Worker", same_key=True, same_peer=True),
    "Pull_Send_Worker": _DepRule(DEP_PULL_ON_PUSH, "Push_Recv_Worker", same_key=True, same_peer=True),
    "Pull_Recv_Worker": _DepRule(DEP_PULL_ON_PULL, "Pull_Send_Worker", same_key=True, same_peer=True),
    "Push_Recv_Server": _DepRule(DEP_PUSH_ON_PULL, "Pull_Send_Server", same_key=False, same_peer=True),
    "Push_Send_Server": _DepRule(DEP_PUSH_ON_PUSH, "Push_Recv_Server", same_key=True, same_peer=False),
    "Pull_Recv_Server": _DepRule(DEP_PULL_ON_PUSH, "Push_Send_Server", same_key=True, same_peer=True),
    "Pull_Send_Server": _DepRule(DEP_PULL_ON_PULL, "Pull_Recv_Server", same_key=True, same_peer=True),
}

_OP_ID = re.compile(r"^(-?\d+)-(-?\d+)-([ws])(\d+)$")
_SETUP_PREFIX = "SendCom"


def _op_id(key: int, operation_num: int, peer_name: str) -> str:
    return f"{key}-{operation_num}-{peer_name}"


def _split_us(time_us: int) -> tuple[int, int]:
    return time_us // 1_000_000, time_us % 1_000_000


# --------------------------------------------------------------------------
# export


@dataclass
class _Record:
    node: int
    peer: int
    operation: str
    key: int
    operation_num: int
    length: int
    num_pp: int
    time_ns: int
    row_id: int

    @property
    def time_us(self) -> int:
        return self.time_ns // 1000


@dataclass
class _Nodes:
    """Paper node numbers (eqs. 2-3) of the worker and server ranks."""

    number: dict[int, int]  # rank -> node number
    name: dict[int, str]  # rank -> "w0" / "s0"
    num_workers: int
    num_servers: int


def to_sketchdlc(log: Any) -> dict[str, pd.DataFrame]:
    """One SketchDLC table per node ("w0", "w1", "s0", ...), workers first."""
    tables, _ = _export(log)
    return tables


def write_sketchdlc(log: Any, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write one tab-separated SketchDLC file per node into ``out_dir``.

    Files are ``<node>.txt`` (``w0.txt``, ``s0.txt``...), each written
    atomically; returns their paths in node order.
    """
    tables, nodes = _export(log)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TraceError(f"cannot create directory {out}: {err.strerror or err}") from None
    paths = []
    for name, table in tables.items():
        path = out / f"{name}.txt"
        text = _file_header(name, nodes) + _table_text(table)
        with atomic_output(path) as temporary:
            temporary.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


_PS_COLUMNS = ("id", "iteration", "rank", "role", "kind", "op", "tensor", "peer", "bytes", "rpc", "message",
               "start_ns", "end_ns")


def _export(log: Any) -> tuple[dict[str, pd.DataFrame], _Nodes]:
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source="event log for SketchDLC export", check_causality=False)
    kind, op = log.column("kind"), log.column("op")
    ps = log.filter(np.isin(kind, ("send", "recv")) & np.isin(op, PS_OPS))
    if not len(ps):
        raise TraceError(
            "event log has no parameter-server send/recv rows (push_request/push_response/"
            "pull_request/pull_response); SketchDLC describes PS communication only"
        )
    rows = list(iter_rows(ps, _PS_COLUMNS))
    _check_pairs(rows)
    nodes = _number_nodes(log, rows)
    num_pp = _dispatch_numbers([row for row in rows if row.kind == "send"])
    records = _records(rows, num_pp)
    tables = {}
    for rank in sorted(records, key=lambda r: nodes.number[r]):
        tables[nodes.name[rank]] = _node_table(records[rank], nodes)
    return tables, nodes


def _check_pairs(rows: list[Any]) -> None:
    """Every PS message a send and a recv that agree: the recv on the send's peer, from the send's rank, of the same
    operation, tensor and iteration. SketchDLC pairs each send with its recv on the peer, so a file written from
    other rows does not read back (an event log allows them: a capture whose receiver stopped keeps its sends).
    Found by tools/fuzz_readers.py's ``convert`` target."""
    sends: dict[int, Any] = {}
    recvs: dict[int, Any] = {}
    for row in rows:
        mine = sends if row.kind == "send" else recvs
        if row.message in mine:
            why = " (switch aggregation: several workers' pushes arrive as one)" if row.kind == "send" else ""
            raise TraceError(f"event log row id={row.id}: message {row.message} has two {row.kind} rows (the other is "
                             f"id={mine[row.message].id}){why}; SketchDLC pairs one send with one recv per message, "
                             "worker to server: export such a run to Chakra, Kineto or CSV")
        mine[row.message] = row
    for message, send in sends.items():
        recv = recvs.get(message)
        if recv is None:
            raise TraceError(f"event log row id={send.id}: the {send.op} message {message} was never received (no recv "
                             "row); SketchDLC pairs every send with its recv: export a log whose messages all arrived")
        same = (recv.rank, recv.peer, recv.op, recv.tensor, recv.iteration) == (send.peer, send.rank, send.op,
                                                                               send.tensor, send.iteration)
        if not same:
            raise TraceError(f"event log row id={recv.id}: the recv of message {message} (rank {recv.rank}, from "
                             f"{recv.peer}, {recv.op}, tensor {recv.tensor}, iteration {recv.iteration}) does not match "
                             f"its send id={send.id} (to {send.peer}, from {send.rank}, {send.op}, tensor {send.tensor}, "
                             f"iteration {send.iteration}); SketchDLC pairs a send with the recv on its peer")


def _number_nodes(log: EventLog, rows: list[Any]) -> _Nodes:
    roles = rank_roles(log)
    for row in rows:
        message = MESSAGES[row.op]
        own, other = (message.sender_role, message.receiver_role) if row.kind == "send" else (
            message.receiver_role, message.sender_role)
        if row.role != own:
            raise TraceError(
                f"event log row id={row.id}: the {row.kind} of a {row.op} is on a {own}, "
                f"but its rank {row.rank} is a {row.role}"
            )
        peer_role = roles.setdefault(row.peer, other)
        if peer_role != other:
            raise TraceError(
                f"event log row id={row.id}: the {row.kind} of a {row.op} has a {other} as peer, "
                f"but its peer {row.peer} is a {peer_role}"
            )
    workers = sorted(rank for rank, role in roles.items() if role == "worker")
    servers = sorted(rank for rank, role in roles.items() if role == "server")
    number = {rank: index for index, rank in enumerate(workers)}
    number.update({rank: len(workers) + index for index, rank in enumerate(servers)})
    name = {rank: f"w{index}" for index, rank in enumerate(workers)}
    name.update({rank: f"s{index}" for index, rank in enumerate(servers)})
    return _Nodes(number, name, len(workers), len(servers))


def _dispatch_numbers(sends: list[Any]) -> dict[int, int]:
    """num_pp of every PS message (by message id): the worker's push/pull
    operations in dispatch order."""
    operations: dict[tuple, list[list[Any]]] = defaultdict(list)  # match key -> open operations
    per_worker: dict[int, list[list[Any]]] = defaultdict(list)  # worker -> operations
    for row in sorted(sends, key=lambda r: (r.start_ns, r.id)):
        message = MESSAGES[row.op]
        worker, server = (row.rank, row.peer) if message.sender_role == "worker" else (row.peer, row.rank)
        match_key = (worker, server, row.tensor, row.iteration, message.family, row.rpc)
        waiting = operations[match_key]
        if row.op.endswith("_response") and waiting:
            waiting.pop(0).append(row)
            continue
        operation = [row]
        if row.op.endswith("_request"):
            waiting.append(operation)
        per_worker[worker].append(operation)
    numbers = {}
    for worker_operations in per_worker.values():
        # already in order of their first row's (start_ns, id)
        for number, operation in enumerate(worker_operations, start=1):
            for row in operation:
                numbers.setdefault(row.message, number)
    return numbers


def _records(rows: list[Any], num_pp: dict[int, int]) -> dict[int, list[_Record]]:
    records: dict[int, list[_Record]] = defaultdict(list)
    for row in rows:
        message = MESSAGES[row.op]
        operation_num = 4 * row.iteration + message.offset
        if row.message not in num_pp:
            raise TraceError(f"event log row id={row.id}: recv of message {row.message} has no send row")
        is_send = row.kind == "send"
        records[row.rank].append(
            _Record(row.rank, row.peer, message.send if is_send else message.recv, row.tensor, operation_num,
                    row.bytes, num_pp[row.message], row.start_ns if is_send else row.end_ns, row.id)
        )
    return records


class _DependencyIndex:
    """Records of one node, searchable by (operation, operation_num, key?, peer?)."""

    def __init__(self, records: Sequence[_Record]):
        self._times: dict[tuple, list[int]] = defaultdict(list)
        self._records: dict[tuple, list[_Record]] = defaultdict(list)
        for record in records:  # already in time order
            for key in (record.key, None):
                for peer in (record.peer, None):
                    slot = (record.operation, record.operation_num, key, peer)
                    self._times[slot].append(record.time_ns)
                    self._records[slot].append(record)

    def depended_on(self, record: _Record) -> tuple[int, _Record | None]:
        rule = _DEP_RULES[record.operation]
        slot = (
            rule.on,
            record.operation_num - 1,
            record.key if rule.same_key else None,
            record.peer if rule.same_peer else None,
        )
        position = bisect.bisect_right(self._times.get(slot, []), record.time_ns)
        if position == 0:
            return DEP_INDEPENDENT, None
        return rule.dep_type, self._records[slot][position - 1]


def _node_table(records: list[_Record], nodes: _Nodes) -> pd.DataFrame:
    records = sorted(records, key=lambda r: (r.time_ns, r.operation_num, r.row_id))
    index = _DependencyIndex(records)
    columns: dict[str, list[Any]] = {name: [] for name in SKETCHDLC_COLUMNS}
    for record_id, record in enumerate(records):
        dep_type, dep = index.depended_on(record)
        _, is_send = _BY_OPERATION[record.operation]
        src, dst = (record.node, record.peer) if is_send else (record.peer, record.node)
        time_sec, time_usec = _split_us(record.time_us)
        values = (
            record_id,
            nodes.number[src],
            nodes.number[dst],
            record.length,
            record.num_pp,
            record.operation,
            _op_id(record.key, record.operation_num, nodes.name[record.peer]),
            dep_type,
            0 if dep is None else record.time_us - dep.time_us,
            time_sec,
            time_usec,
            "-1" if dep is None else _op_id(dep.key, dep.operation_num, nodes.name[dep.peer]),
        )
        for name, value in zip(SKETCHDLC_COLUMNS, values):
            columns[name].append(value)
    text_columns = ("operation", "op_id", "id_dep")
    return pd.DataFrame(
        {name: pd.Series(values, dtype="str" if name in text_columns else "int64") for name, values in columns.items()}
    )


def _file_header(name: str, nodes: _Nodes) -> str:
    role = "worker" if name.startswith("w") else "server"
    last_worker, last_server = nodes.num_workers - 1, nodes.num_workers + nodes.num_servers - 1
    lines = [
        f"SketchDLC trace of node {name} ({role}), written by ddlsim",
        f"num_workers:= {nodes.num_workers} num_servers:= {nodes.num_servers} "
        f"(workers are nodes 0..{last_worker}, servers {nodes.num_workers}..{last_server})",
        "op_id:= key-operation_num-peer; operation_num = 4*iteration + "
        "(0 push_send, 1 push_recv, 2 pull_send, 3 pull_recv)",
        "dep_type:= 0 independent, 1 push_on_push, 2 pull_on_push, 3 pull_on_pull, 4 push_on_pull",
        "d_time, time_usec in microseconds; time_sec in seconds",
    ]
    return "".join(f"# {line}\n" for line in lines)


def _table_text(table: pd.DataFrame) -> str:
    return table.to_csv(sep="\t", index=False, lineterminator="\n")


# --------------------------------------------------------------------------
# import


@dataclass
class _Parsed:
    """One record read from a file."""

    path: Path
    line: int
    node: int
    peer: int
    peer_name: str
    operation: str
    message: _Message
    is_send: bool
    length: int
    num_pp: int
    key: int
    operation_num: int
    time_ns: int
    id_dep: str
    row_id: int = -1  # event-log row of its message, once paired

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def op_id(self) -> str:
        return _op_id(self.key, self.operation_num, self.peer_name)


@dataclass
class _NodeFile:
    path: Path
    records: list[_Parsed] = field(default_factory=list)
    node: int | None = None
    role: str | None = None


def read_sketchdlc(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> EventLog:
    """Turn SketchDLC files (one per node) back into event-log send/recv rows.

    ``paths`` is a list of files, one file, or a directory (all its ``*.txt``).
    Every Send record must have its Recv record in the peer's file and vice
    versa, except in one node's file read alone (the paper's Fig. 8 prints
    worker 0's): a receive then gets its send inferred on the peer at the
    receive's time, a send has no receive, and the metadata's
    ``single_node`` says so. Raises :class:`TraceError` naming the file and line at fault.
    """
    files = [_parse_file(path) for path in _expand_paths(paths)]
    _check_one_file_per_node(files)
    records = [record for node_file in files for record in node_file.records]
    if not records:
        names = ", ".join(str(f.path) for f in files)
        raise TraceError(f"{names}: no SketchDLC push/pull records (only comments, headers or setup records); "
                         "nothing to convert - pass the files of a traced run")
    _check_node_names(records)
    messages = _pair_messages(records, files)
    source = "SketchDLC files " + ", ".join(str(f.path) for f in files)
    return _message_rows(messages, files, source)


def read_sketchdlc_records(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The records of one node's file as they stand, without pairing them with
    other nodes' files: one row per PS record (setup records skipped) with the
    file's line, the Table-1 fields (``time_ns`` from time_sec / time_usec,
    ``key`` and ``operation_num`` from op_id) and ``dep_line``: the line of the
    record that ``id_dep`` names in this file (the latest such record not
    after this one), -1 for none or a one-to-many dependency such as ``(3-s0.)``.
    Raises :class:`TraceError` naming the file and line of a malformed record."""
    node_file = _parse_file(Path(path))
    resolver = _DepResolver([node_file])
    rows = []
    for record in node_file.records:
        values = _raw_fields(record)
        dep = resolver.record_of(record)
        rows.append({"line": record.line, **values, "operation": record.operation, "key": record.key,
                     "operation_num": record.operation_num, "time_ns": record.time_ns, "id_dep": record.id_dep,
                     "dep_line": dep.line if dep is not None else -1})
    return pd.DataFrame(rows, columns=["line", "id", "src", "dst", "length", "num_pp", "operation", "op_id", "dep_type",
                                       "d_time", "time_ns", "id_dep", "key", "operation_num", "dep_line"])


def _raw_fields(record: _Parsed) -> dict[str, Any]:
    fields = [value.strip() for value in record.path.read_text(encoding="utf-8").splitlines()[record.line - 1].split("\t")]
    values = dict(zip(SKETCHDLC_COLUMNS, fields))
    out: dict[str, Any] = {name: int(values[name]) for name in ("id", "src", "dst", "length", "num_pp", "dep_type", "d_time")}
    out["op_id"] = values["op_id"]
    return out


def _expand_paths(paths: Any) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        path = Path(paths)
        if path.is_dir():
            found = sorted(path.glob("*.txt"))
            if not found:
                raise TraceError(f"{path}: directory holds no SketchDLC files (*.txt)")
            return found
        return [path]
    expanded = [Path(path) for path in paths]
    if not expanded:
        raise TraceError("no SketchDLC files given; pass one file per node")
    return expanded


def _parse_file(path: Path) -> _NodeFile:
    input_file(path, "SketchDLC file", "give one text file per node (w0.txt, s0.txt, ...) or their directory",
               error=TraceError, missing=f"{path}: no such SketchDLC file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}: cannot read as UTF-8 text ({err})") from None
    node_file = _NodeFile(path)
    header_seen = False
    for line_number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = [value.strip() for value in line.split("\t")]
        if not header_seen and len(fields) == 1:
            continue  # the paper's free-text header block ("== num_workers:= 2 ...") before the records
        if not header_seen and fields[0] == "id":
            if tuple(fields) != SKETCHDLC_COLUMNS:
                raise TraceError(
                    f"{path}:{line_number}: header is {fields}, expected the tab-separated "
                    f"columns {list(SKETCHDLC_COLUMNS)}"
                )
            header_seen = True
            continue
        header_seen = True
        record = _parse_record(fields, path, line_number)
        if record is not None:
            _add_to_file(node_file, record)
    return node_file


def _operation_name(field_text: str) -> str:
    return field_text.removeprefix("OP:=").strip()


def _parse_record(fields: list[str], path: Path, line_number: int) -> _Parsed | None:
    where = f"{path}:{line_number}"
    if len(fields) > 5 and _operation_name(fields[5]).startswith(_SETUP_PREFIX):
        return None  # connection setup with the scheduler / servers: not a PS message
    if len(fields) != len(SKETCHDLC_COLUMNS):
        raise TraceError(
            f"{where}: expected {len(SKETCHDLC_COLUMNS)} tab-separated fields "
            f"({', '.join(SKETCHDLC_COLUMNS)}), found {len(fields)}"
        )
    values = dict(zip(SKETCHDLC_COLUMNS, fields))
    numbers = {name: _integer(values, name, where) for name in SKETCHDLC_COLUMNS if name not in ("operation", "op_id", "id_dep")}
    operation = _operation_name(values["operation"])
    if operation not in _BY_OPERATION:
        raise TraceError(f"{where}: unknown operation {values['operation']!r}; expected one of {list(OPERATIONS)}")
    message, is_send = _BY_OPERATION[operation]
    match = _OP_ID.match(values["op_id"])
    if match is None:
        raise TraceError(f"{where}: op_id {values['op_id']!r} is not key-operation_num-node (e.g. 3-4-s0)")
    key, operation_num, peer_letter, peer_index = match.groups()
    if any(len(part.lstrip("-")) > 18 for part in (key, operation_num, peer_index)):
        raise TraceError(f"{where}: op_id {values['op_id'][:60]!r} holds a number of more than 18 digits")
    dep = _OP_ID.match(values["id_dep"])
    if dep is not None and any(len(part.lstrip("-")) > 18 for part in dep.groups()):
        raise TraceError(f"{where}: id_dep {values['id_dep'][:60]!r} holds a number of more than 18 digits")
    _check_record(numbers, operation, message, is_send, peer_letter, int(operation_num), where)
    time_ns = (numbers["time_sec"] * 1_000_000 + numbers["time_usec"]) * 1000
    if abs(time_ns) > _INT64_MAX:
        raise TraceError(f"{where}: time_sec {numbers['time_sec']} is out of range (at most "
                         f"{_INT64_MAX // 10 ** 9 - 1} seconds either side of 0)")
    src, dst = numbers["src"], numbers["dst"]
    return _Parsed(
        path=path,
        line=line_number,
        node=src if is_send else dst,
        peer=dst if is_send else src,
        peer_name=f"{peer_letter}{int(peer_index)}",
        operation=operation,
        message=message,
        is_send=is_send,
        length=numbers["length"],
        num_pp=numbers["num_pp"],
        key=int(key),
        operation_num=int(operation_num),
        time_ns=time_ns,
        id_dep=values["id_dep"],
    )


_INT64_MAX = (1 << 63) - 1


def _integer(values: dict[str, str], name: str, where: str) -> int:
    text = values[name]
    if not re.fullmatch(r"[-+]?[0-9]{1,19}", text) or abs(int(text)) > _INT64_MAX:
        raise TraceError(f"{where}: field {name!r} is {text[:40]!r}, expected an integer "
                         f"(at most {len(str(_INT64_MAX))} digits)")
    return int(text)


def _check_record(
    numbers: dict[str, int],
    operation: str,
    message: _Message,
    is_send: bool,
    peer_letter: str,
    operation_num: int,
    where: str,
) -> None:
    if not 0 <= numbers["time_usec"] < 1_000_000:
        raise TraceError(f"{where}: time_usec {numbers['time_usec']} is not in [0, 999999]")
    if numbers["length"] < 0:
        raise TraceError(f"{where}: length {numbers['length']} is negative")
    if not DEP_INDEPENDENT <= numbers["dep_type"] <= DEP_PUSH_ON_PULL:
        raise TraceError(f"{where}: dep_type {numbers['dep_type']} is not 0..4")
    if numbers["src"] == numbers["dst"]:
        raise TraceError(f"{where}: src and dst are both {numbers['src']}")
    own_role = message.sender_role if is_send else message.receiver_role
    expected_letter = "s" if own_role == "worker" else "w"
    if peer_letter != expected_letter:
        raise TraceError(
            f"{where}: op_id names node {peer_letter}..., but the peer of a {operation} "
            f"is a {'server' if expected_letter == 's' else 'worker'} ({expected_letter}<n>)"
        )
    if operation_num % 4 != message.offset:
        raise TraceError(
            f"{where}: operation_num {operation_num} of a {operation} should be "
            f"4*iteration + {message.offset}"
        )


def _add_to_file(node_file: _NodeFile, record: _Parsed) -> None:
    role = record.message.sender_role if record.is_send else record.message.receiver_role
    if node_file.node is None:
        node_file.node, node_file.role = record.node, role
    elif (record.node, role) != (node_file.node, node_file.role):
        raise TraceError(
            f"{record.where}: record of {role} node {record.node}, but the file's earlier records are "
            f"of {node_file.role} node {node_file.node}; a SketchDLC file holds one node's records"
        )
    node_file.records.append(record)


def _check_one_file_per_node(files: list[_NodeFile]) -> None:
    seen: dict[int, Path] = {}
    for node_file in files:
        if node_file.node is None:
            continue
        if node_file.node in seen:
            raise TraceError(
                f"{node_file.path}: holds node {node_file.node}, like {seen[node_file.node]}; pass one file per node"
            )
        seen[node_file.node] = node_file.path


def _check_node_names(records: list[_Parsed]) -> None:
    """The op_id peer names ("s0") must map one-to-one onto node numbers."""
    number_of: dict[str, tuple[int, _Parsed]] = {}
    name_of: dict[int, tuple[str, _Parsed]] = {}
    for record in records:
        known = number_of.setdefault(record.peer_name, (record.peer, record))
        if known[0] != record.peer:
            raise TraceError(
                f"{record.where}: op_id calls node {record.peer} {record.peer_name}, but "
                f"{known[1].where} calls node {known[0]} {record.peer_name}"
            )
        known_name = name_of.setdefault(record.peer, (record.peer_name, record))
        if known_name[0] != record.peer_name:
            raise TraceError(
                f"{record.where}: op_id calls node {record.peer} {record.peer_name}, but "
                f"{known_name[1].where} calls it {known_name[0]}"
            )


def _pair_messages(records: list[_Parsed], files: list[_NodeFile]) -> list[tuple[_Parsed, _Parsed]]:
    """Match every Send record with the Recv record of the same message."""
    sends: dict[tuple, deque[_Parsed]] = defaultdict(deque)
    recvs: dict[tuple, deque[_Parsed]] = defaultdict(deque)
    for record in sorted(records, key=lambda r: (r.time_ns, str(r.path), r.line)):
        src, dst = (record.node, record.peer) if record.is_send else (record.peer, record.node)
        key = (record.message.op, src, dst, record.key, record.operation_num)
        (sends if record.is_send else recvs)[key].append(record)
    file_of_node = {f.node: f.path for f in files if f.node is not None}
    pairs, unmatched = [], []
    for key in sorted(set(sends) | set(recvs)):
        send_queue, recv_queue = sends.get(key, deque()), recvs.get(key, deque())
        while send_queue and recv_queue:
            pairs.append((send_queue.popleft(), recv_queue.popleft()))
        unmatched += [*send_queue, *recv_queue]
    # One node's file alone (as the paper's Fig. 8 prints worker 0's): its records stand alone, without the other
    # end. With several files, every record must match in its peer's file (a missing file is a mistake).
    single = len(file_of_node) == 1
    missing = [r for r in unmatched if r.peer in file_of_node or not single]
    if missing:
        first = min(missing, key=lambda r: (r.time_ns, str(r.path), r.line))
        raise TraceError(_unmatched_message(first, file_of_node))
    pairs += [(r, None) if r.is_send else (None, r) for r in unmatched]
    return pairs


def _unmatched_message(record: _Parsed, file_of_node: dict[int, Path]) -> str:
    message = record.message
    partner = message.recv if record.is_send else message.send
    peer_file = file_of_node.get(record.peer)
    where_to_look = (
        f"in {peer_file}"
        if peer_file is not None
        else f"because no file of node {record.peer} ({record.peer_name}) was given; pass the files of all nodes"
    )
    return f"{record.where}: {record.operation} {record.op_id} has no matching {partner} record {where_to_look}"


def _message_rows(pairs: list[tuple[_Parsed, _Parsed]], files: list[_NodeFile], source: str) -> EventLog:
    clocks = {
        str(f.node): {"offset_ns": 0, "domain": f"{'w' if f.role == 'worker' else 's'}{f.node}:{f.path.name}"}
        for f in files if f.node is not None
    }
    metadata = {"source": "sketchdlc", "files": [str(f.path) for f in files], "clocks": clocks}
    if not pairs:
        return empty_event_log(metadata)
    for send, recv in pairs:
        if send is not None and recv is not None and recv.time_ns < send.time_ns:
            raise TraceError(
                f"{recv.where}: {recv.operation} at {recv.time_ns // 1000} us is before its "
                f"{send.operation} at {send.where} ({send.time_ns // 1000} us); the nodes' clocks "
                "disagree - correct the clock offset before reading these files"
            )
    def first(pair: tuple) -> _Parsed:
        return pair[0] if pair[0] is not None else pair[1]

    pairs = sorted(pairs, key=lambda p: (first(p).time_ns, p[0] is None, first(p).node if p[0] is not None else first(p).peer,
                                         first(p).peer if p[0] is not None else first(p).node, first(p).operation_num,
                                         first(p).key))
    row_id = 0
    time_of_row = {}
    inferred: dict[int, int] = {}  # message index -> row id of the send inferred for a lone receive
    for index, pair in enumerate(pairs):
        if pair[0] is None:
            inferred[index] = row_id
            row_id += 1
        for record in pair:
            if record is not None:
                record.row_id, time_of_row[row_id] = row_id, record.time_ns
                row_id += 1
    dependency = _DepResolver(files)
    rpc_ids: dict[tuple, int] = {}
    rows: dict[str, list[Any]] = defaultdict(list)
    for index, (send, recv) in enumerate(pairs):
        one = send if send is not None else recv
        message = one.message
        sender = one.node if one is send else one.peer
        worker, server = (sender, one.node + one.peer - sender)
        if message.sender_role != "worker":
            worker, server = server, worker
        iteration = one.operation_num // 4
        rpc = rpc_ids.setdefault((worker, server, one.key, iteration, message.family, one.num_pp), len(rpc_ids))
        if send is None:
            # a receive whose sender's file was not given: the send is inferred, at the receive's time (the
            # latest it can have been; the sender's own time is not in the file), so that the message is whole
            for name, value in (("id", inferred[index]), ("iteration", iteration), ("rank", recv.peer),
                                ("role", message.sender_role), ("kind", "send"), ("op", message.op), ("tensor", recv.key),
                                ("peer", recv.node), ("message", index), ("bytes", recv.length), ("rpc", rpc),
                                ("start_ns", recv.time_ns), ("end_ns", recv.time_ns), ("deps", [])):
                rows[name].append(value)
        for record, kind, role in ((send, "send", message.sender_role), (recv, "recv", message.receiver_role)):
            if record is None:
                continue
            dep = dependency.resolve(record)
            rows["id"].append(record.row_id)
            rows["iteration"].append(iteration)
            rows["rank"].append(record.node)
            rows["role"].append(role)
            rows["kind"].append(kind)
            rows["op"].append(message.op)
            rows["tensor"].append(record.key)
            rows["peer"].append(record.peer)
            rows["message"].append(index)
            rows["bytes"].append(record.length)
            rows["rpc"].append(rpc)
            rows["start_ns"].append(record.time_ns)
            rows["end_ns"].append(record.time_ns)
            rows["deps"].append([dep] if dep is not None and time_of_row[dep] <= record.time_ns else [])
    if inferred:
        lone = sorted({pair[1].peer for pair in pairs if pair[0] is None})
        metadata["single_node"] = (f"the files of node(s) {', '.join(map(str, lone))} were not given: each receive from "
                                   "them has its send inferred at the receive's time, each send to them has no receive")
        for node in lone:  # the inferred sends are on the receiver's clock
            receiver = next(pair[1] for pair in pairs if pair[0] is None and pair[1].peer == node)
            clocks.setdefault(str(node), dict(clocks[str(receiver.node)]))
    columns: dict[str, Any] = {name: np.asarray(values, dtype=object if name in ("role", "kind", "op") else np.int64)
                               for name, values in rows.items() if name != "deps"}
    columns["host"] = columns["rank"]
    columns["deps"] = rows["deps"]
    return event_log_from_arrays(columns, metadata=metadata, source=source)


class _DepResolver:
    """Finds the event-log row that a record's id_dep names (a record of the same node)."""

    def __init__(self, files: list[_NodeFile]):
        self._by_op_id: dict[tuple[int, str], list[_Parsed]] = defaultdict(list)
        for node_file in files:
            for record in sorted(node_file.records, key=lambda r: r.time_ns):
                self._by_op_id[(record.node, record.op_id)].append(record)

    def record_of(self, record: _Parsed, paired_only: bool = False) -> _Parsed | None:
        """The record of the same node that ``record.id_dep`` names (the latest not after it)."""
        match = _OP_ID.match(record.id_dep)
        if match is None:  # "-1" or the paper's one-to-many form "(3-s0.)"
            return None
        key, operation_num, letter, index = match.groups()
        op_id = _op_id(int(key), int(operation_num), f"{letter}{int(index)}")
        candidates = [
            r for r in self._by_op_id.get((record.node, op_id), [])
            if r is not record and r.time_ns <= record.time_ns and (r.row_id >= 0 or not paired_only)
        ]
        return candidates[-1] if candidates else None

    def resolve(self, record: _Parsed) -> int | None:
        found = self.record_of(record, paired_only=True)
        return found.row_id if found is not None else None
