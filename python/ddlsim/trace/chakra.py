"""Chakra execution traces (MLCommons): one ``<prefix>.<rank>.et`` file per rank.

A file is a sequence of length-delimited protobuf messages (each a varint
byte count, then the message): one ``GlobalMetadata``, then one ``Node`` per
operation. The messages follow the public schema ``et_def.proto`` of
mlcommons/chakra (package ``ChakraProtoMsg``); :func:`_message_classes`
builds them from that schema's field numbers with protobuf's descriptor
API, so neither protoc nor Chakra's code is needed.

Writing (:func:`write_chakra`), per event-log row of the rank:

=============  =================  ==============================================
kind           node type          attributes
=============  =================  ==============================================
compute        COMP_NODE          ``is_cpu_op`` false
send           COMM_SEND_NODE     ``comm_src`` = rank, ``comm_dst`` = peer,
                                  ``comm_size`` = bytes (at least 1: ASTRA-sim
                                  aborts on 0; ``ddlsim_bytes`` keeps the true
                                  size), ``comm_tag`` = message (or its
                                  number among the log's messages where an
                                  id does not fit int32, e.g. a capture's)
recv           COMM_RECV_NODE     ``comm_src`` = peer, ``comm_dst`` = rank, ...
collective     COMM_COLL_NODE     ``comm_type`` (ALL_REDUCE...), ``comm_size``
barrier        (left out)         a row that waited for it waits for its rank's rows
                                  among the barrier's deps; the barrier row is kept
                                  in GlobalMetadata ``ddlsim_barriers``
marker         METADATA_NODE
=============  =================  ==============================================

``start_time_micros`` / ``duration_micros`` hold the row's times in whole
microseconds (start and end each rounded half up; duration = rounded end
minus rounded start, so the durations of back-to-back rows add up exactly); ``data_deps`` the row's dependencies on the same rank (a
Chakra graph is per rank: a dependency on another rank is what a
send/recv pair expresses). The send and recv rows of a step inside a
collective that has its own COMM_COLL_NODE on that rank are left out (the
collective node stands for them, as a Chakra consumer would replay it);
a dependency on a left-out row is moved to what that row waited for.
Each send, recv and collective node also depends on its rank's
communication node before it (in ddlsim's order): ASTRA-sim runs one
communication node per rank at a time, and a receive issued early would
hold that slot (see :func:`_one_communication_at_a_time`).

Every node also carries ``ddlsim_*`` attributes (the row's id, op,
iteration, exact nanosecond times, deps on other ranks...) so that
:func:`read_chakra` restores our own files row for row; Chakra tools ignore
attributes they do not know. Files written by other tools are read from
the Chakra fields alone (see :func:`read_chakra`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import TraceError
from ..inputs import input_file
from .parquet import atomic_output
from .subset import collective_steps, redirect_deps
from .schema import COLUMN_NAMES, EventLog, event_log_from_arrays, iter_rows, rows_to_columns, validate_event_log

CHAKRA_VERSION = "0.0.4"
NODE_TYPES = {
    "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
    "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
}  # fmt: skip
COMM_TYPES = {
    "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
    "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9,
}  # fmt: skip
_COLL_TYPE_TO_COMM = {
    "allreduce": "ALL_REDUCE", "reduce": "REDUCE", "all_gather": "ALL_GATHER", "broadcast": "BROADCAST",
    "all_to_all": "ALL_TO_ALL", "reduce_scatter": "REDUCE_SCATTER", "barrier": "BARRIER",
}  # fmt: skip
_COMM_TO_COLL_TYPE = {**{v: k for k, v in _COLL_TYPE_TO_COMM.items()}, "REDUCE_SCATTER_BLOCK": "reduce_scatter",
                      "GATHER": "", "SCATTER": ""}
_KIND_TO_NODE = {"compute": "COMP_NODE", "send": "COMM_SEND_NODE", "recv": "COMM_RECV_NODE",
                 "collective": "COMM_COLL_NODE", "barrier": "COMM_COLL_NODE", "marker": "METADATA_NODE"}
_INT32_MAX = 2**31 - 1
_FILE_NAME = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.et$")

# Row fields kept as ddlsim_<column> attributes (beside what Chakra's own fields hold).
_INT_COLUMNS = ("id", "iteration", "host", "layer", "tensor", "group", "slice", "peer", "message", "bytes", "priority",
                "tenant", "collective", "step", "rpc", "start_ns", "end_ns")
_STRING_COLUMNS = ("role", "device", "stream", "kind", "op", "name", "coll_type", "algorithm")

# AttributeProto's value oneof: (field name, number, scalar type) per et_def.proto; the *_list
# fields are messages with one repeated field `values` (1) of that type.
_ATTRIBUTE_VALUES = (
    ("double", 3, "TYPE_DOUBLE"), ("float", 5, "TYPE_FLOAT"), ("int32", 7, "TYPE_INT32"), ("int64", 9, "TYPE_INT64"),
    ("uint32", 11, "TYPE_UINT32"), ("uint64", 13, "TYPE_UINT64"), ("sint32", 15, "TYPE_SINT32"),
    ("sint64", 17, "TYPE_SINT64"), ("fixed32", 19, "TYPE_FIXED32"), ("fixed64", 21, "TYPE_FIXED64"),
    ("sfixed32", 23, "TYPE_SFIXED32"), ("sfixed64", 25, "TYPE_SFIXED64"), ("bool", 27, "TYPE_BOOL"),
    ("string", 29, "TYPE_STRING"), ("bytes", 31, "TYPE_BYTES"),
)  # fmt: skip

_CLASSES: dict[str, Any] = {}


def _message_classes() -> dict[str, Any]:
    """GlobalMetadata, Node, AttributeProto... built from et_def.proto's field numbers."""
    if _CLASSES:
        return _CLASSES
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise TraceError("Chakra ET files need the protobuf package: pip install 'ddlsim[interop]' "
                         "(or pip install protobuf)") from None

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="ddlsim_chakra_et_def.proto", package="ChakraProtoMsg", syntax="proto3")

    def message(name: str, fields: Iterable[tuple]) -> descriptor_pb2.DescriptorProto:
        proto = file.message_type.add(name=name)
        for field_name, number, type_name, *rest in fields:
            label = rest[0] if rest else F.LABEL_OPTIONAL
            field = proto.field.add(name=field_name, number=number, label=label)
            if type_name.startswith("."):
                is_enum = type_name.rsplit(".", 1)[1] in ("NodeType", "CollectiveCommType")
                field.type = F.TYPE_ENUM if is_enum else F.TYPE_MESSAGE
                field.type_name = type_name
            else:
                field.type = getattr(F, type_name)
        return proto

    for name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COMM_TYPES)):
        enum = file.enum_type.add(name=name)
        for value_name, number in values.items():
            enum.value.add(name=value_name, number=number)
    for scalar, _, type_name in _ATTRIBUTE_VALUES:
        message(f"{scalar.capitalize()}List", [("values", 1, type_name, F.LABEL_REPEATED)])
    attribute = message("AttributeProto", [("name", 1, "TYPE_STRING"), ("doc_string", 2, "TYPE_STRING")])
    attribute.oneof_decl.add(name="value")
    for scalar, number, type_name in _ATTRIBUTE_VALUES:
        for field_name, field_number, field_type in ((f"{scalar}_val", number, type_name),
                                                     (f"{scalar}_list", number + 1, f".ChakraProtoMsg.{scalar.capitalize()}List")):
            field = attribute.field.add(name=field_name, number=field_number, label=F.LABEL_OPTIONAL, oneof_index=0)
            if field_type.startswith("."):
                field.type, field.type_name = F.TYPE_MESSAGE, field_type
            else:
                field.type = getattr(F, field_type)
    repeated_attr = ("attr", 2, ".ChakraProtoMsg.AttributeProto", F.LABEL_REPEATED)
    message("GlobalMetadata", [("version", 1, "TYPE_STRING"), repeated_attr])
    message("IOInfo", [("values", 1, "TYPE_STRING"), ("shapes", 2, "TYPE_STRING"), ("types", 3, "TYPE_STRING")])
    message("Node", [
        ("id", 1, "TYPE_UINT64"), ("name", 2, "TYPE_STRING"), ("type", 3, ".ChakraProtoMsg.NodeType"),
        ("ctrl_deps", 4, "TYPE_UINT64", F.LABEL_REPEATED), ("data_deps", 5, "TYPE_UINT64", F.LABEL_REPEATED),
        ("start_time_micros", 6, "TYPE_UINT64"), ("duration_micros", 7, "TYPE_UINT64"),
        ("inputs", 8, ".ChakraProtoMsg.IOInfo"), ("outputs", 9, ".ChakraProtoMsg.IOInfo"),
        ("attr", 10, ".ChakraProtoMsg.AttributeProto", F.LABEL_REPEATED),
    ])  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    for name in ("GlobalMetadata", "Node", "AttributeProto"):
        _CLASSES[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
    return _CLASSES


# --------------------------------------------------------------------------
# length-delimited stream


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _delimited(message: Any) -> bytes:
    payload = message.SerializeToString()
    return _varint(len(payload)) + payload


def _split_delimited(data: bytes, path: Path) -> list[tuple[int, bytes]]:
    """(offset, payload) of every length-delimited message in ``data``."""
    out, position = [], 0
    while position < len(data):
        start, length, shift = position, 0, 0
        while True:
            if position >= len(data):
                raise TraceError(f"{path}: record {len(out)} at byte {start}: the length prefix is cut off; "
                                 "the file is truncated or not a Chakra .et file")
            byte = data[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift > 63:
                raise TraceError(f"{path}: record {len(out)} at byte {start}: length prefix is not a varint")
        if position + length > len(data):
            raise TraceError(f"{path}: record {len(out)} at byte {start}: says {length} bytes but only "
                             f"{len(data) - position} remain; the file is truncated or not a Chakra .et file")
        out.append((start, data[position:position + length]))
        position += length
    return out


# --------------------------------------------------------------------------
# writing


def chakra_paths(prefix: str | os.PathLike[str], ranks: Iterable[int]) -> dict[int, Path]:
    """Where each rank's file goes: ``<prefix>.<rank>.et``."""
    prefix = Path(prefix)
    return {rank: prefix.with_name(f"{prefix.name}.{rank}.et") for rank in ranks}


def write_chakra(log: Any, prefix: str | os.PathLike[str]) -> list[Path]:
    """Write one Chakra ET file per rank, ``<prefix>.<rank>.et``; returns the paths.

    ``prefix`` may name a directory entry (``out/trace`` gives
    ``out/trace.0.et``...). Each file is written atomically.
    """
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source="event log for Chakra export", check_causality=False)
    classes = _message_classes()
    rows = list(iter_rows(log, COLUMN_NAMES))
    if not rows:  # one file per rank, and no rank: nothing a reader would find (tools/fuzz_readers.py)
        raise TraceError("the log has no rows: a Chakra trace is one file per rank, and there is none to write")
    tags = _comm_tags(rows)
    by_rank: dict[int, list[Any]] = {}
    for row in rows:
        by_rank.setdefault(row.rank, []).append(row)
    left_out = collective_steps(by_rank)
    redirected = redirect_deps(rows, left_out)
    # The barrier is left out too (ASTRA-sim runs no BARRIER collective, and a barrier node on one rank that the
    # others reach only through ddlsim_remote_deps stalls them): a row that waited for it waits for its own
    # rank's rows among the barrier's dependencies. The barrier rows and the exact deps go in ddlsim_* attributes.
    barriers = {row.id for row in rows if row.kind == "barrier"}
    around_barrier = redirect_deps(rows, left_out | barriers) if barriers else {}
    rank_of = {row.id: row.rank for row in rows}
    world = len(by_rank)
    paths = chakra_paths(prefix, sorted(by_rank))
    for rank, rank_rows in sorted(by_rank.items()):
        kept_barriers = [row for row in rank_rows if row.id in barriers]
        chunks = [_delimited(_metadata(classes, rank, world, log, kept_barriers, redirected))]
        planned = []  # (row, the deps Chakra sees, the exact deps when they differ)
        for row in rank_rows:
            if row.id in left_out or row.id in barriers:
                continue
            exact = redirected.get(row.id, row.deps)
            if row.id in around_barrier and exact is not None and any(dep in barriers for dep in exact):
                local = [dep for dep in around_barrier[row.id] if rank_of.get(dep) == rank]
                planned.append((row, local, exact))
            else:
                planned.append((row, exact, None))
        for row, deps, exact in _one_communication_at_a_time(planned):
            chunks.append(_delimited(_node(classes, row, deps, rank_of, tags, exact_deps=exact)))
        with atomic_output(paths[rank]) as temporary:
            temporary.write_bytes(b"".join(chunks))
    return [paths[rank] for rank in sorted(by_rank)]


_COMM_KINDS = ("send", "recv", "collective")


def _one_communication_at_a_time(planned: list[tuple[Any, list[int] | None, list[int] | None]]
                                 ) -> list[tuple[Any, list[int] | None, list[int] | None]]:
    """Each send, recv and collective node of a rank also depends on the rank's communication node before it.

    ASTRA-sim issues a node as soon as its data_deps are done, but runs one communication node per rank at a time
    (HardwareResource::is_available): a receive that depends on nothing on its rank (its message comes from another
    rank) is issued at time 0 and holds the rank's communication until the message arrives, while the send that
    brings that message about waits behind it on its own rank. A parameter-server export then ran no rank to the
    end (exit 0). The order is ddlsim's: by (start, end, id) among the rank's nodes in dependency order, so the
    added dependencies hold in ddlsim's own schedule; the exact deps go in ``ddlsim_deps``. Rows whose deps are
    unknown are left as they are.
    """
    import heapq

    by_id = {row.id: index for index, (row, _, _) in enumerate(planned)}
    parents = {row.id: {dep for dep in deps or [] if dep in by_id} for row, deps, _ in planned}
    children: dict[int, list[int]] = {}
    for child, deps in parents.items():
        for dep in deps:
            children.setdefault(dep, []).append(child)
    waiting = {row_id: len(deps) for row_id, deps in parents.items()}
    ready = [(row.start_ns, row.end_ns, row.id) for row, _, _ in planned if not waiting[row.id]]
    heapq.heapify(ready)
    out = list(planned)
    previous = None
    while ready:
        *_, row_id = heapq.heappop(ready)
        row, deps, exact = planned[by_id[row_id]]
        if row.kind in _COMM_KINDS:
            if previous is not None and deps is not None and previous not in parents[row_id]:
                out[by_id[row_id]] = (row, [*deps, previous], deps if exact is None else exact)
            previous = row_id
        for child in children.get(row_id, ()):
            waiting[child] -= 1
            if not waiting[child]:
                child_row = planned[by_id[child]][0]
                heapq.heappush(ready, (child_row.start_ns, child_row.end_ns, child))
    return out


def _attr(classes: dict[str, Any], name: str, **value: Any) -> Any:
    return classes["AttributeProto"](name=name, **value)


def _metadata(classes: dict[str, Any], rank: int, world: int, log: EventLog, barriers: list[Any] = (),
              redirected: dict[int, list[int] | None] | None = None) -> Any:
    import json

    attrs = [
        _attr(classes, "ddlsim_rank", int64_val=rank),
        _attr(classes, "ddlsim_world_size", int64_val=world),
        _attr(classes, "ddlsim_source", string_val=str(log.metadata.get("source", ""))),
        _attr(classes, "ddlsim_metadata", string_val=json.dumps(log.metadata, sort_keys=True, default=str)),
    ]
    if barriers:  # the rank's barrier rows, left out of the nodes (see write_chakra)
        kept = [{**{column: getattr(row, column) for column in _INT_COLUMNS + _STRING_COLUMNS},
                 "ready_ns": row.ready_ns, "deps": (redirected or {}).get(row.id, row.deps)} for row in barriers]
        attrs.append(_attr(classes, "ddlsim_barriers", string_val=json.dumps(kept, sort_keys=True)))
    return classes["GlobalMetadata"](version=CHAKRA_VERSION, attr=attrs)


def _comm_tags(rows: list[Any]) -> Optional[dict[int, int]]:
    """Each message id's ``comm_tag``: None (the id itself) where every id of the log fits Chakra's int32; else
    the message's number among the log's messages, in id order (a capture's ids, ``rank << 32 | n``, do not fit;
    before 2026-11-28 such a log was refused). The tag only pairs a send with its receives, on both ends alike;
    ``ddlsim_message`` keeps the id."""
    messages = sorted({row.message for row in rows if row.kind in ("send", "recv")})
    if not messages or messages[-1] <= _INT32_MAX:
        return None
    if len(messages) > _INT32_MAX + 1:
        raise TraceError(f"the log has {len(messages):,} messages, more than Chakra's int32 comm_tag can number")
    return {message: number for number, message in enumerate(messages)}


def _node(classes: dict[str, Any], row: Any, deps: list[int] | None, rank_of: dict[int, int],
          tags: Optional[dict[int, int]], exact_deps: list[int] | None = None) -> Any:
    """``deps``: what the node waits for; ``tags``: the messages' ``comm_tag`` (:func:`_comm_tags`); ``exact_deps``
    (a row that waited for a left-out barrier): the row's own deps, kept in ``ddlsim_deps`` for
    :func:`read_chakra`."""
    node_type = _KIND_TO_NODE[row.kind]
    local = [dep for dep in deps or [] if rank_of.get(dep) == row.rank]
    remote = [dep for dep in deps or [] if rank_of.get(dep) != row.rank]
    attrs = [_attr(classes, "is_cpu_op", bool_val=False)]
    if row.kind in ("send", "recv"):
        src, dst = (row.rank, row.peer) if row.kind == "send" else (row.peer, row.rank)
        attrs += [_attr(classes, "comm_src", int32_val=src), _attr(classes, "comm_dst", int32_val=dst),
                  _attr(classes, "comm_size", int64_val=max(row.bytes, 1)),  # ASTRA-sim aborts on 0; ddlsim_bytes is exact
                  _attr(classes, "comm_tag", int32_val=row.message if tags is None else tags[row.message])]
    elif node_type == "COMM_COLL_NODE":
        comm = _COLL_TYPE_TO_COMM.get(row.coll_type or ("barrier" if row.kind == "barrier" else "allreduce"))
        attrs += [_attr(classes, "comm_type", int64_val=COMM_TYPES[comm]), _attr(classes, "comm_size", int64_val=row.bytes)]
    for column in _INT_COLUMNS:
        attrs.append(_attr(classes, f"ddlsim_{column}", int64_val=getattr(row, column)))
    for column in _STRING_COLUMNS:
        if getattr(row, column):
            attrs.append(_attr(classes, f"ddlsim_{column}", string_val=getattr(row, column)))
    if row.ready_ns is not None:
        attrs.append(_attr(classes, "ddlsim_ready_ns", int64_val=row.ready_ns))
    if exact_deps is not None:
        attrs.append(_attr(classes, "ddlsim_deps", int64_list={"values": exact_deps}))
    elif deps is None:
        attrs.append(_attr(classes, "ddlsim_deps_unknown", bool_val=True))
    elif remote:
        attrs.append(_attr(classes, "ddlsim_remote_deps", int64_list={"values": remote}))
    return classes["Node"](
        id=row.id, name=f"{row.op} {row.name}" if row.name else row.op, type=NODE_TYPES[node_type],
        data_deps=local, start_time_micros=_micros(row.start_ns),
        duration_micros=max(_micros(row.end_ns) - _micros(row.start_ns), 0), attr=attrs,
    )


def _micros(ns: int) -> int:
    """Nanoseconds to whole microseconds, rounded half up (negative times as 0). A node's duration is its
    rounded end minus its rounded start, so back-to-back nodes' durations add up without drift."""
    return (max(ns, 0) + 500) // 1000


# --------------------------------------------------------------------------
# reading


def find_chakra_files(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[int, Path]:
    """Rank -> file for a prefix (``out/trace`` or ``out/trace.et`` -> ``out/trace.<rank>.et``, as
    ``write_trace(log, "out/trace.et")`` names them), a directory holding one prefix's files, or a list of files."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            files = sorted(path.glob("*.et"))
            prefixes = {_FILE_NAME.match(f.name).group("prefix") for f in files if _FILE_NAME.match(f.name)}
            if len(prefixes) > 1:
                raise TraceError(f"{path}: holds Chakra files of several prefixes {sorted(prefixes)}; "
                                 f"name one prefix (e.g. {path}/{sorted(prefixes)[0]})")
        elif path.is_file():
            files = [path]
        else:  # a prefix: out/trace, or out/trace.et as the export names its output (out/trace.<rank>.et)
            prefix = path.name[:-3] if path.name.endswith(".et") else path.name
            files = sorted(path.parent.glob(f"{glob_escape(prefix)}.*.et"))
            files = [f for f in files if (m := _FILE_NAME.match(f.name)) and m.group("prefix") == prefix]
        if not files:
            raise TraceError(f"{path}: no Chakra files (<prefix>.<rank>.et) found")
    else:
        files = [Path(p) for p in source]
        if not files:
            raise TraceError("no Chakra files given; pass <prefix>.<rank>.et files, a prefix or a directory")
    out: dict[int, Path] = {}
    for file in files:
        match = _FILE_NAME.match(file.name)
        if match is None:
            raise TraceError(f"{file}: a Chakra file is named <prefix>.<rank>.et (e.g. trace.0.et)")
        rank = int(match.group("rank"))
        if rank in out:
            raise TraceError(f"{file}: rank {rank} again (also {out[rank]}); pass one file per rank")
        out[rank] = file
    return dict(sorted(out.items()))


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)


def _attr_value(attribute: Any) -> Any:
    which = attribute.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attribute, which)
    return list(value.values) if which.endswith("_list") else value


def _decode(cls: Any, payload: bytes, path: Path, index: int, offset: int, what: str) -> Any:
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(payload)
    except DecodeError as err:
        raise TraceError(f"{path}: record {index} at byte {offset}: not a Chakra {what} ({err})") from None
    return message


def read_chakra(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> EventLog:
    """Read Chakra ET files back into an event log.

    ``source``: a prefix (``out/trace``), a directory, or a list of
    ``<prefix>.<rank>.et`` files; the rank comes from the file name. Files
    that :func:`write_chakra` wrote come back row for row (the left-out
    collective steps excepted). Other files: node -> row with kind from the
    node type, ``op`` the node's name, ``bytes`` = comm_size, times from
    ``start_time_micros`` / ``duration_micros``, ``deps`` = data + control
    deps; every send is paired with the receive of the same (src, dst, tag)
    in order and the pair shares a message id (a send's missing ``comm_src``,
    a receive's missing ``comm_dst``, is the file's rank); role ``worker``;
    compute nodes named after a layer and a phase become layer rows, iterations
    and collective ids are numbered per rank (:func:`_number_foreign_rows`).
    Files without start times are scheduled by their dependencies (see
    :func:`_schedule_by_deps`). Raises :class:`TraceError` naming the file and record.
    """
    classes = _message_classes()
    files = find_chakra_files(source)
    rows: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {"source": "chakra", "files": [str(p) for p in files.values()]}
    for rank, path in files.items():
        input_file(path, "Chakra file", "give the <prefix>.<rank>.et files an exporter wrote", error=TraceError)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise TraceError(f"{path}: cannot read ({err.strerror or err})") from None
        records = _split_delimited(data, path)
        if not records:
            raise TraceError(f"{path}: empty; a Chakra file starts with a GlobalMetadata record")
        meta = _decode(classes["GlobalMetadata"], records[0][1], path, 0, 0, "GlobalMetadata")
        meta_attrs = {a.name: _attr_value(a) for a in meta.attr}
        if "ddlsim_metadata" in meta_attrs:
            metadata = {**_ddlsim_metadata(meta_attrs["ddlsim_metadata"], path), **{"files": metadata["files"]}}
        file_rows = _barrier_rows(meta_attrs.get("ddlsim_barriers"), rank, path) if "ddlsim_barriers" in meta_attrs else []
        for index, (offset, payload) in enumerate(records[1:], start=1):
            node = _decode(classes["Node"], payload, path, index, offset, "Node")
            file_rows.append(_node_row(node, rank, path, index))
        if file_rows and all(row["start_ns"] == 0 and "ddlsim_id" not in row["_attrs"] for row in file_rows):
            for row in file_rows:
                row["_unscheduled"] = True
        rows += file_rows
    for row in rows:
        if "ddlsim_id" not in row.pop("_attrs"):
            row["_foreign"] = True
        else:
            row.pop("_name", None)
    _schedule_by_deps(rows)
    _number_foreign_rows(rows)
    return _rows_to_log(rows, metadata, files)


# A compute node's name as trace generators write it: Chakra's text-to-ET converter "COMP_NODE_<layer>_FWD",
# "..._BWD_WG" / "..._BWD_IG" (weight and input gradient: both backward), or "<layer>.fwd", "forward <layer>"
# (ddlsim's own node names), "fwd_<layer>"...
_PHASE_LAST = re.compile(r"^(?:COMP_NODE_)?(?P<layer>.+?)[\s_.:/-]+(?P<phase>fwd|forward|bwd(?:_wg|_ig)?|backward(?:_wg|_ig)?)$",
                         re.IGNORECASE)
_PHASE_FIRST = re.compile(r"^(?:COMP_NODE_)?(?P<phase>fwd|forward|bwd|backward)[\s_.:/-]+(?P<layer>.+)$", re.IGNORECASE)


def layer_of_node_name(name: str) -> tuple[str, str] | None:
    """(``forward`` or ``backward``, layer name) that a compute node's name spells, or None."""
    match = _PHASE_LAST.match(name) or _PHASE_FIRST.match(name)
    if match is None:
        return None
    phase = "forward" if match.group("phase").lower() in ("fwd", "forward") else "backward"
    return phase, match.group("layer")


def _number_foreign_rows(rows: list[dict[str, Any]]) -> None:
    """Rows of files that other tools wrote (no ddlsim attributes):

    - a compute node named after a layer and a phase (:func:`layer_of_node_name`) becomes a layer row: ``op``
      forward / backward, ``name`` the layer (what ``replay`` reads layer times from);
    - iterations: where every node name of every rank occurs the same number of times P (a generator's P
      passes over the same graph), the k-th node of a name on a rank is in iteration k; where some names
      occur another number of times (a one-off node), the same for the names that occur as often as the
      layer rows' names do (all alike), the others without an iteration (-1); else none (-1);
    - collectives: the k-th collective node of each rank (by start, then file order) is collective k on
      every rank, so ``analyze`` sees one instance over the ranks.
    """
    foreign = [row for row in rows if row.get("_foreign")]
    if not foreign:
        return
    for row in foreign:
        if row["kind"] == "compute":
            parsed = layer_of_node_name(row["op"])
            if parsed is not None:
                row["op"], row["name"] = parsed
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for position, row in enumerate(foreign):
        row["_position"] = position
        by_rank.setdefault(row["rank"], []).append(row)
    counts: dict[tuple[int, str], int] = {}
    for row in foreign:
        key = (row["rank"], row["_name"])
        counts[key] = counts.get(key, 0) + 1
    passes = set(counts.values())
    if len(passes) > 1:  # a one-off node beside the passes: number the names that repeat like the layer rows do
        layer_passes = {counts[(r["rank"], r["_name"])] for r in foreign if r["kind"] == "compute" and r.get("name")}
        passes = layer_passes if len(layer_passes) == 1 else set()
    if len(passes) == 1:
        (p,) = passes
        seen: dict[tuple[int, str], int] = {}
        for rank_rows in by_rank.values():
            for row in sorted(rank_rows, key=lambda r: (r["start_ns"], r["_position"])):
                key = (row["rank"], row["_name"])
                if counts[key] == p:
                    row["iteration"] = seen.get(key, 0)
                    seen[key] = row["iteration"] + 1
    for rank_rows in by_rank.values():
        collectives = sorted((r for r in rank_rows if r["kind"] == "collective"), key=lambda r: (r["start_ns"], r["_position"]))
        for k, row in enumerate(collectives):
            row["collective"] = k
    for row in foreign:
        del row["_foreign"], row["_position"], row["_name"]


def _schedule_by_deps(rows: list[dict[str, Any]]) -> None:
    """Files without start times (every ``start_time_micros`` 0, as trace generators write them): each node
    starts as soon as its dependencies on its rank have ended (at 0 without any) and lasts its duration; a
    receive also starts no earlier than its send (the send of the same (src, dst, tag), in order) and ends
    no earlier than the send ends."""
    if not any(row.get("_unscheduled") for row in rows):
        return
    by_key = {(row["rank"], row["_node"]): row for row in rows}
    sends: dict[tuple, list[tuple[int, int]]] = {}
    recvs: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if "_tag" in row:
            key = (row["rank"], row["_node"])
            if row["kind"] == "send":
                sends.setdefault(row["_tag"], []).append(key)
            else:
                recvs.setdefault(row["_tag"], []).append(row)
    send_of: dict[tuple[int, int], tuple[int, int]] = {}
    for tag, recv_rows in recvs.items():
        for recv, send in zip(recv_rows, sends.get(tag, [])):
            send_of[(recv["rank"], recv["_node"])] = send

    def waits_for(key: tuple[int, int]) -> list[tuple[int, int]]:
        deps = [(key[0], dep) for dep in by_key[key]["_local_deps"] if (key[0], dep) in by_key]
        return deps + ([send_of[key]] if key in send_of else [])

    state = {key: 2 for key, row in by_key.items() if not row.get("_unscheduled")}  # 1 = on the stack, 2 = done
    for root in by_key:
        stack = [root]
        while stack:
            key = stack[-1]
            if state.get(key) == 2:
                stack.pop()
                continue
            state[key] = 1
            waiting = [dep for dep in waits_for(key) if state.get(dep) != 2]
            for dep in waiting:
                if state.get(dep) == 1:
                    raise TraceError(f"{by_key[key]['_where']}: waits for node {dep[1]} of rank {dep[0]}, which "
                                     "waits for it (a cycle); a Chakra graph must be acyclic")
            if waiting:
                stack += waiting
                continue
            row = by_key[key]
            duration = row["end_ns"] - row["start_ns"]
            local = [by_key[(key[0], dep)]["end_ns"] for dep in row["_local_deps"] if (key[0], dep) in by_key]
            send = by_key[send_of[key]] if key in send_of else None
            row["start_ns"] = max(local + ([send["start_ns"]] if send else []), default=0)
            row["end_ns"] = max([row["start_ns"] + duration] + ([send["end_ns"]] if send else []))
            state[key] = 2
            stack.pop()
    for row in rows:
        row.pop("_unscheduled", None)


def _ddlsim_metadata(text: Any, path: Path) -> dict[str, Any]:
    """The event log's metadata that write_chakra keeps in the GlobalMetadata record."""
    from .jsontext import parse_json

    where = f"{path}: record 0 (GlobalMetadata) attribute ddlsim_metadata"
    if not isinstance(text, str):
        raise TraceError(f"{where}: is a {type(text).__name__}, expected a JSON string")
    metadata = parse_json(text, where)
    if not isinstance(metadata, dict):
        raise TraceError(f"{where}: is a JSON {type(metadata).__name__}, expected a JSON object")
    return metadata


def _barrier_rows(text: Any, rank: int, path: Path) -> list[dict[str, Any]]:
    """The barrier rows that write_chakra keeps in the GlobalMetadata record (they are no nodes)."""
    from .jsontext import parse_json

    where = f"{path}: record 0 (GlobalMetadata) attribute ddlsim_barriers"
    rows = parse_json(text, where) if isinstance(text, str) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TraceError(f"{where}: expected a JSON list of rows")
    out = []
    for index, row in enumerate(rows):
        deps = row.get("deps")
        if type(row.get("id")) is not int or (deps is not None and not (isinstance(deps, list)
                                                                         and all(type(d) is int for d in deps))):
            raise TraceError(f"{where}: row {index} needs an integer id and a list of integer deps")
        absent = [k for k in ("kind", "start_ns", "end_ns") if k not in row]
        if absent:
            raise TraceError(f"{where}: row {index} has no {', '.join(absent)}")
        wrong = [k for k in _INT_COLUMNS if k in row and type(row[k]) is not int]
        wrong += [k for k in _STRING_COLUMNS if k in row and not isinstance(row[k], str)]
        wrong += ["ready_ns"] if row.get("ready_ns") is not None and type(row["ready_ns"]) is not int else []
        if wrong:
            raise TraceError(f"{where}: row {index}: {', '.join(wrong)} of the wrong type (integers; op, kind... strings)")
        out.append({**{k: v for k, v in row.items() if k != "deps" and (k in _INT_COLUMNS + _STRING_COLUMNS
                                                                        or k == "ready_ns")},
                    "rank": rank, "_where": f"{where} row {index}", "_node": ("barrier", row["id"]), "_attrs": {"ddlsim_id": row["id"]},
                    "_local_deps": [], "_remote_deps": deps or [], "_deps_unknown": deps is None})
    return out


def _int_list(value: Any, where: str, name: str) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        from .jsontext import short_repr

        raise TraceError(f"{where}: attribute {name} is {short_repr(value)}, expected a list of integers")
    return value


def _node_row(node: Any, rank: int, path: Path, index: int) -> dict[str, Any]:
    where = f"{path}: record {index} (node {node.id})"
    attrs = {a.name: _attr_value(a) for a in node.attr}
    type_name = {v: k for k, v in NODE_TYPES.items()}.get(node.type)
    kind = {"COMP_NODE": "compute", "COMM_SEND_NODE": "send", "COMM_RECV_NODE": "recv", "COMM_COLL_NODE": "collective",
            "METADATA_NODE": "marker", "MEM_LOAD_NODE": "compute", "MEM_STORE_NODE": "compute"}.get(type_name or "")
    if kind is None:
        raise TraceError(f"{where}: node type {node.type} is not one ddlsim reads "
                         "(COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE, METADATA_NODE, MEM_*)")
    row: dict[str, Any] = {"_where": where, "_node": node.id, "rank": rank, "kind": kind, "_attrs": attrs}
    start = int(node.start_time_micros) * 1000
    row.update(start_ns=start, end_ns=start + int(node.duration_micros) * 1000, op=node.name or kind, _name=node.name)
    row["_local_deps"] = [int(d) for d in list(node.data_deps) + list(node.ctrl_deps)]
    if kind in ("send", "recv"):
        # the end on this rank may be left out (ASTRA-sim takes the file's rank): a send's src, a recv's dst
        attrs.setdefault("comm_src" if kind == "send" else "comm_dst", rank)
        missing = [name for name in ("comm_src", "comm_dst") if type(attrs.get(name)) is not int]
        if missing:
            raise TraceError(f"{where}: a {type_name} needs integer attributes comm_src and comm_dst; missing {missing}")
        src, dst = attrs["comm_src"], attrs["comm_dst"]
        if (src if kind == "send" else dst) != rank:
            raise TraceError(f"{where}: {type_name} from {src} to {dst} in the file of rank {rank}")
        row["peer"] = dst if kind == "send" else src
        tag = attrs.get("comm_tag", 0)
        if type(tag) is not int:
            raise TraceError(f"{where}: comm_tag {tag!r} is not an integer")
        row["_tag"] = (src, dst, tag)
    if kind == "collective":
        comm_type = attrs.get("comm_type", 0)
        comm = {v: k for k, v in COMM_TYPES.items()}.get(comm_type) if type(comm_type) is int else None
        if comm is None:
            raise TraceError(f"{where}: comm_type {attrs.get('comm_type')} is not a CollectiveCommType (0..9)")
        row["coll_type"] = _COMM_TO_COLL_TYPE[comm]
        if comm == "BARRIER" and attrs.get("ddlsim_kind") in (None, "barrier"):
            row["kind"] = "barrier"
    size = attrs.get("comm_size")
    if size is not None:
        if type(size) is not int or size < 0:
            raise TraceError(f"{where}: comm_size {size!r} is not a byte count")
        row["bytes"] = size
    for column in _INT_COLUMNS + _STRING_COLUMNS + ("ready_ns",):
        if f"ddlsim_{column}" in attrs:
            row[column] = attrs[f"ddlsim_{column}"]
    if "ddlsim_id" in attrs:  # our own file: its attributes are the row (an absent string is ''), exact times, remote deps
        row.update({column: attrs.get(f"ddlsim_{column}", "") for column in _STRING_COLUMNS})
        row["_remote_deps"] = _int_list(attrs.get("ddlsim_remote_deps", []), where, "ddlsim_remote_deps")
        row["_deps_unknown"] = bool(attrs.get("ddlsim_deps_unknown", False))
        if "ddlsim_deps" in attrs:  # it waited for a barrier: its exact deps, the data_deps are what Chakra sees
            row["_exact_deps"] = _int_list(attrs["ddlsim_deps"], where, "ddlsim_deps")
    return row


def _rows_to_log(rows: list[dict[str, Any]], metadata: dict[str, Any], files: dict[int, Path]) -> EventLog:
    ours = all("id" in row for row in rows)
    node_ids: dict[tuple[int, int], int] = {}
    for position, row in enumerate(rows):
        if not ours:
            row["id"] = position
        key = (row["rank"], row["_node"])
        if key in node_ids:
            raise TraceError(f"{row['_where']}: node id {row['_node']} appears twice in the file of rank {row['rank']}")
        node_ids[key] = row["id"]
    for row in rows:
        local = []
        for dep in row.pop("_local_deps"):
            if (row["rank"], dep) not in node_ids:
                raise TraceError(f"{row['_where']}: depends on node {dep}, which is not in {files[row['rank']]}")
            local.append(node_ids[(row["rank"], dep)])
        row["deps"] = None if row.pop("_deps_unknown", False) else local + row.pop("_remote_deps", [])
        if "_exact_deps" in row:
            row["deps"] = row.pop("_exact_deps")
        row.setdefault("host", row["rank"])
    if not ours:
        _pair_messages(rows)
    ranks = sorted({row["rank"] for row in rows})
    if not ours:
        for row in rows:
            row.setdefault("role", "worker")
    columns = rows_to_columns(rows)
    source = "Chakra files " + ", ".join(str(files[r]) for r in ranks if r in files)
    return event_log_from_arrays(columns, metadata=metadata, source=source, check_causality=False)


def _pair_messages(rows: list[dict[str, Any]]) -> None:
    """Sends and receives of the same (src, dst, tag), in order, share a message id."""
    sends: dict[tuple, list[dict[str, Any]]] = {}
    recvs: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if "_tag" in row:
            (sends if row["kind"] == "send" else recvs).setdefault(row["_tag"], []).append(row)
    message = 0
    for tag in sorted(set(sends) | set(recvs)):
        send_rows, recv_rows = sends.get(tag, []), recvs.get(tag, [])
        if len(recv_rows) > len(send_rows):
            extra = recv_rows[len(send_rows)]
            raise TraceError(f"{extra['_where']}: COMM_RECV_NODE from {tag[0]} (tag {tag[2]}) has no matching "
                             f"COMM_SEND_NODE in the file of rank {tag[0]}; pass the files of all ranks")
        for index, send in enumerate(send_rows):
            send["message"] = message
            if index < len(recv_rows):
                recv_rows[index]["message"] = message
            message += 1
    for row in rows:
        row.pop("_tag", None)
