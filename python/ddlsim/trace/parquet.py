"""The native event-log files: Parquet with the schema version and metadata.

The events file's Parquet key-value metadata holds:

``ddlsim.schema_version``
    :data:`~ddlsim.trace.schema.SCHEMA_VERSION` as a decimal string.
``ddlsim.metadata``
    a JSON object describing the run, e.g. ``{"source": "simulate",
    "scenario": {...}, "clocks": {...}}``.
``ddlsim.side_tables``
    a JSON object naming the side tables written beside it, e.g.
    ``{"flows": "flows.parquet"}`` (file names in the same directory).

Side tables: the events file ``<prefix>events.parquet`` has its side tables
in ``<prefix>groups.parquet``, ``<prefix>flows.parquet`` and
``<prefix>queues.parquet``; an events file with any other name
``<stem>.parquet`` has them in ``<stem>.groups.parquet`` etc. Only the files
the events file names are read back, so a stale side file is never picked up.

Writes are atomic per file: all files are first written to temporaries, then
moved into place (side tables before the events file that names them); a
failed write leaves the previous files as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TraceError
from ..inputs import input_file
from ..safe_io import atomic_file
from .jsontext import parse_json
from .schema import (
    DEPS_TYPE,
    METADATA_KEY,
    METADATA_VERSION_KEY,
    SCHEMA_VERSION,
    SIDE_TABLES,
    SIDE_TABLES_KEY,
    EventLog,
    column_values,
    event_log_from_arrays,
    validate_event_log,
)

# what pyarrow raises on a damaged Parquet file: its own errors, I/O errors, and the UnicodeDecodeError of a name in
# the file's schema that is not UTF-8 (decoded when the file is opened)
PARQUET_ERRORS = (pa.ArrowException, OSError, UnicodeDecodeError)



@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` on success.

    :func:`ddlsim.safe_io.atomic_file` with :class:`TraceError`: the target
    must be a regular file or absent (never a directory, device or FIFO); if
    the body raises, the temporary file is removed and ``path`` is left
    exactly as it was.
    """
    with atomic_file(path, error=TraceError) as temporary:
        yield temporary


def write_json(path: str | os.PathLike[str], data) -> None:
    """`data` as indented JSON at `path`, complete or absent (:func:`atomic_output`)."""
    import json

    with atomic_output(path) as temporary:
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def with_side_tables(*paths: str | os.PathLike[str] | None) -> list[Path]:
    """``paths`` and, for each events file among them, its side tables: the
    files a command reading them depends on (an output must be none of them)."""
    files = []
    for path in paths:
        if path is None:
            continue
        path = Path(path)
        files.append(path)
        if path.name.endswith(".parquet"):
            files += side_table_paths(path).values()
    return files


def _metadata_json(metadata: Mapping[str, Any] | None, path: Path) -> str:
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise TraceError(f"cannot write {path}: metadata must be a dict, got {type(metadata).__name__}")
    bad_keys = [key for key in metadata if not isinstance(key, str)]
    if bad_keys:
        raise TraceError(f"cannot write {path}: metadata keys must be strings, got {bad_keys!r}")
    try:
        return json.dumps(dict(metadata), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TraceError(
            f"cannot write {path}: metadata is not JSON-serialisable ({err}); "
            "use str/int/float/bool/None, lists and dicts"
        ) from None


def side_table_paths(path: str | os.PathLike[str]) -> dict[str, Path]:
    """Where the side tables of the events file ``path`` go (see module doc)."""
    path = Path(path)
    name = path.name
    if name.endswith("events.parquet"):
        prefix = name[: -len("events.parquet")]
        return {table: path.with_name(f"{prefix}{table}.parquet") for table in SIDE_TABLES}
    stem = name[: -len(".parquet")] if name.endswith(".parquet") else name
    return {table: path.with_name(f"{stem}.{table}.parquet") for table in SIDE_TABLES}


def write_event_log(
    log: Any, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None
) -> Path:
    """Write ``log`` (an :class:`EventLog`, or a table / DataFrame, which is
    validated first) to ``path`` as Parquet, atomically, with its side tables
    beside it (see :func:`side_table_paths`).

    ``metadata`` (a JSON-serialisable dict) is merged over ``log.metadata``;
    :func:`read_event_log` returns it as ``log.metadata``. Nothing is written
    if validation fails. An EventLog that came from
    :func:`~ddlsim.trace.event_log_from_arrays` or
    :func:`~ddlsim.trace.validate_event_log` unchanged is not checked again.
    """
    path = Path(path)
    source = f"event log for {path}"
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source=source)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TraceError(f"cannot write {path}: metadata must be a dict, got {type(metadata).__name__}")
    merged = {**log.metadata, **(dict(metadata) if metadata is not None else {})}
    if (metadata or {}).get("clocks", log.metadata.get("clocks")) != log.metadata.get("clocks"):
        # new clock offsets change the cross-host checks: validate against them
        merged = validate_event_log(log.replace(metadata=merged), source=source).metadata
    merged["schema_version"] = SCHEMA_VERSION
    metadata_json = _metadata_json(merged, path)
    sides = log.side_tables()
    targets = side_table_paths(path)
    written = {name: targets[name].name for name in sides}
    table = log.table.replace_schema_metadata(
        {
            METADATA_VERSION_KEY: str(SCHEMA_VERSION),
            METADATA_KEY: metadata_json,
            SIDE_TABLES_KEY: json.dumps(written, sort_keys=True),
        }
    )
    strings = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    integers = {f.name: "DELTA_BINARY_PACKED" for f in table.schema if pa.types.is_integer(f.type)}
    # Every file is written to a temporary first; only when all are complete are
    # they moved into place, side tables before the events file that names them.
    with contextlib.ExitStack() as stack:
        events_temporary = stack.enter_context(atomic_output(path))
        for name, side in sides.items():
            pq.write_table(side, stack.enter_context(atomic_output(targets[name])))
        # Parquet dictionaries only for the (already dictionary-encoded) strings; integers
        # delta-encoded (ids and times are near-sorted: a third of the size, no slower);
        # statistics only where readers filter.
        pq.write_table(table, events_temporary, use_dictionary=strings, column_encoding=integers,
                       write_statistics=["iteration", "rank", "start_ns", "end_ns"])
    return path


def read_event_log(path: str | os.PathLike[str], *, check_causality: bool = True) -> EventLog:
    """Read and validate an event log written by :func:`write_event_log`.

    Returns an :class:`EventLog` (metadata and side tables included). A schema
    v1 file is converted: each transfer row becomes a send row (same id) and a
    recv row (a new id) sharing a message id, and the v1 RPC breakdown
    columns are dropped (``ddlsim.analyze.rpc_table`` recomputes them). Files
    without ddlsim metadata (e.g. ``DataFrame.to_parquet``) are accepted if
    their columns validate; their metadata is ``{}`` plus the version.
    Raises :class:`TraceError` naming the file otherwise.
    """
    from ..arguments import path_arg

    path = path_arg(path, "path")
    table = _read_table(path)
    raw = table.schema.metadata or {}
    metadata = _parse_metadata(raw, path)
    version = _check_version(raw, path, table)
    table = table.replace_schema_metadata(None)
    if version == 1:
        log = _from_v1(table, metadata, path, check_causality)
        log.metadata["converted_from_schema_version"] = 1
        return log
    sides = {name: _read_side(path, name, file) for name, file in _parse_side_tables(raw, path).items()}
    if version == 2:
        table, sides = _from_v2(table, sides)
        metadata["converted_from_schema_version"] = 2
        metadata["schema_version"] = SCHEMA_VERSION
    return validate_event_log(
        EventLog(table, metadata, **sides), source=str(path), check_causality=check_causality
    )


def read_side_table(path: str | os.PathLike[str], name: str) -> pa.Table | None:
    """The side table ``name`` (groups, flows, queues) of the events file
    ``path``, validated, without reading the events; None when the file
    names none."""
    from .schema import _side_table

    path = event_log_file(path)
    raw = pq.read_schema(path).metadata or {}
    file = _parse_side_tables(raw, path).get(name)
    if file is None:
        return None
    return _side_table(_read_side(path, name, file), SIDE_TABLES[name], str(path.with_name(file)))


def _read_side(path: Path, name: str, file: str) -> pa.Table:
    side_path = input_file(path.with_name(file), f"{name} table", "copy the side tables along with the events file",
                           error=TraceError, missing=f"{path}: names its {name} table {file}, but "
                           f"{path.with_name(file)} does not exist; copy the side tables along with the events file")
    try:
        return _names_checked(pq.read_table(side_path).replace_schema_metadata(None), side_path)
    except PARQUET_ERRORS as err:
        raise TraceError(f"{side_path}: not a readable Parquet file ({err})") from None


def _names_checked(table: pa.Table, path: Path) -> pa.Table:
    """``table`` if its column names and strings are UTF-8 and its arrays consistent (pyarrow does not check
    on reading: a damaged file would raise UnicodeDecodeError or worse on first use)."""
    try:
        table.column_names
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: a column name is not UTF-8 ({err.reason} at byte {err.start}); "
                         "the file is damaged") from None
    try:
        table.validate(full=True)
    except pa.ArrowException as err:
        raise TraceError(f"{path}: damaged Parquet data ({str(err).splitlines()[0][:200]})") from None
    return table


def _parse_side_tables(raw: Mapping[bytes, bytes], path: Path) -> dict[str, str]:
    text = raw.get(SIDE_TABLES_KEY.encode())
    if text is None:
        return {}
    value = parse_json(text, f"{path}: {SIDE_TABLES_KEY}")
    if not isinstance(value, dict) or any(k not in SIDE_TABLES or not isinstance(v, str) or "/" in v or "\0" in v
                                          or v in ("", ".", "..") for k, v in value.items()):
        raise TraceError(f"{path}: {SIDE_TABLES_KEY} is {value!r}; expected {{table: file name}} "
                         f"with tables from {list(SIDE_TABLES)}")
    return value


def event_log_file(path: str | os.PathLike[str]) -> Path:
    """`path` if it is a regular file; a TraceError naming what it is otherwise (missing, a directory, a FIFO...:
    :func:`ddlsim.inputs.input_file`)."""
    return input_file(path, "event-log Parquet file", "give the events.parquet of a run (ddlsim simulate --out, a "
                      "capture, or ddlsim convert)", error=TraceError, missing=f"{path}: no such event log file")


def _read_table(path: Path) -> pa.Table:
    event_log_file(path)
    try:
        return _names_checked(pq.read_table(path), path)
    except PARQUET_ERRORS as err:
        raise TraceError(
            f"{path}: not a readable Parquet file ({err}); event logs are written by "
            "ddlsim (simulate/capture) or ddlsim.trace.write_event_log"
        ) from None


def _check_version(raw: Mapping[bytes, bytes], path: Path, table: pa.Table) -> int:
    text = raw.get(METADATA_VERSION_KEY.encode())
    if text is None:  # a plain Parquet file: v2 has message ids, v1 had none
        return (SCHEMA_VERSION if "job" in table.column_names else 2) if "message" in table.column_names else 1
    try:
        version = int(text.decode())
    except (UnicodeDecodeError, ValueError):
        raise TraceError(f"{path}: {METADATA_VERSION_KEY} is {text!r}, expected an integer") from None
    if version > SCHEMA_VERSION:
        raise TraceError(
            f"{path}: written with event-log schema version {version}, but this ddlsim "
            f"reads versions up to {SCHEMA_VERSION}; upgrade ddlsim to read it"
        )
    if version < 1:
        raise TraceError(f"{path}: {METADATA_VERSION_KEY} is {version}, expected 1..{SCHEMA_VERSION}")
    return version


def read_log_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of an event log file (its footer only; no rows are read)."""
    path = event_log_file(path)
    try:
        schema = pq.read_schema(path)
    except PARQUET_ERRORS as err:
        raise TraceError(f"{path}: not a readable Parquet event log ({err})") from None
    return _parse_metadata(schema.metadata or {}, path)


def _parse_metadata(raw: Mapping[bytes, bytes], path: Path) -> dict[str, Any]:
    text = raw.get(METADATA_KEY.encode())
    if text is None:
        return {}
    metadata = parse_json(text, f"{path}: {METADATA_KEY}")
    if not isinstance(metadata, dict):
        raise TraceError(f"{path}: {METADATA_KEY} must be a JSON object, got {type(metadata).__name__}")
    from .log_facts import check_log_facts

    return check_log_facts(metadata, path)


# --------------------------------------------------------------------------
# schema v1

V1_COLUMNS = (
    "id", "iteration", "rank", "role", "kind", "op", "name", "layer", "tensor", "peer", "bytes",
    "priority", "collective", "step", "rpc", "ready_ns", "start_ns", "end_ns", "deps",
)  # fmt: skip
V1_KINDS = ("compute", "transfer", "collective", "barrier")
def _from_v2(table: pa.Table, sides: dict[str, pa.Table]) -> tuple[pa.Table, dict[str, pa.Table]]:
    """A schema v2 log in v3 form: v2 logs hold one job, so every row (and group) gets job 0 and
    every flow job 0 when it is the job's (tenant 0), else -1 (a background tenant's)."""
    if "job" not in table.column_names:
        at = table.column_names.index("tenant") + 1 if "tenant" in table.column_names else table.num_columns
        table = table.add_column(at, "job", pa.array(np.zeros(table.num_rows, dtype=np.int32)))
    return table, sides  # groups and flows: their validation fills job in (flows: -1 for tenants' flows)


_V1_ALGORITHM = {"ring_step": "ring", "hd_step": "halving_doubling"}


def _from_v1(table: pa.Table, metadata: dict[str, Any], path: Path, check_causality: bool) -> EventLog:
    source = f"{path} (schema v1)"
    missing = [name for name in V1_COLUMNS if name not in table.column_names]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {missing}; a schema v1 event log has all of {list(V1_COLUMNS)} "
            "(was this file written by ddlsim?)"
        )
    for name in V1_COLUMNS:
        if name in ("role", "kind", "op", "name", "deps"):
            continue
        array = table.column(name)
        if not pa.types.is_integer(array.type):
            raise TraceError(f"{source}: column {name!r}: has type {array.type}; {name} holds integers")
        if array.null_count:
            row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise TraceError(f"{source}: column {name!r}, row {row}: is null; {name} may not be null")
    columns = {}
    for name in V1_COLUMNS:
        if name == "deps":
            continue
        if name in ("role", "kind", "op", "name"):
            array = table.column(name)
            if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
                    or pa.types.is_dictionary(array.type)):
                raise TraceError(f"{source}: column {name!r}: has type {array.type}; {name} holds text")
        columns[name] = column_values(table.column(name))
    kind = columns["kind"]
    bad = ~np.isin(kind, V1_KINDS)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{source}: column 'kind', row {row}: unknown v1 kind {kind[row]!r}; v1 kinds are {list(V1_KINDS)}")
    ids = columns["id"].astype(np.int64)
    transfer = np.flatnonzero(kind == "transfer")
    n, t = len(ids), len(transfer)
    recv_ids = (int(ids.max()) + 1 if n else 0) + np.arange(t, dtype=np.int64)

    op = columns["op"]
    rank, peer = columns["rank"], columns["peer"]
    # the receiver's role: its own where it ran rows, else by the op (a request goes to a server)
    recv_role = np.where(np.char.endswith(op[transfer].astype(str), "_request"), "server", "worker").astype(object)
    if n:
        role_of = np.full(int(max(rank.max(), peer.max())) + 1, None, dtype=object)
        role_of[rank] = columns["role"]
        known = role_of[peer[transfer]]
        recv_role = np.where(known != None, known, recv_role)  # noqa: E711 (element-wise)
    new_kind = kind.copy()
    new_kind[transfer] = "send"
    is_collective_related = (columns["collective"] >= 0) | (op == "allreduce")
    coll_type = np.where(is_collective_related, "allreduce", "").astype(object)
    algorithm = np.full(n, "", dtype=object)
    for step_op, name in _V1_ALGORITHM.items():
        algorithm[op == step_op] = name
    message = np.full(n, -1, dtype=np.int64)
    message[transfer] = ids[transfer]

    def both(values, recv_values):
        return np.concatenate([values, recv_values])

    out = {
        "id": both(ids, recv_ids),
        "iteration": both(columns["iteration"], columns["iteration"][transfer]),
        "rank": both(rank, peer[transfer]),
        "role": both(columns["role"], recv_role),
        "kind": both(new_kind, np.full(t, "recv", dtype=object)),
        "op": both(op, op[transfer]),
        "name": both(columns["name"], columns["name"][transfer]),
        "peer": both(peer, rank[transfer]),
        "message": both(message, ids[transfer]),
        "coll_type": both(coll_type, coll_type[transfer]),
        "algorithm": both(algorithm, algorithm[transfer]),
    }
    for name in ("layer", "tensor", "bytes", "priority", "collective", "step", "rpc", "start_ns", "end_ns"):
        out[name] = both(columns[name], columns[name][transfer])
    out["host"] = out["rank"]
    out["ready_ns"] = pa.concat_arrays([pa.array(columns["ready_ns"].astype(np.int64)), pa.nulls(t, pa.int64())])
    # deps on a transfer meant "after it was delivered": point them at its recv row
    deps = table.column("deps")
    deps = deps.combine_chunks() if isinstance(deps, pa.ChunkedArray) else deps
    if not (pa.types.is_list(deps.type) or pa.types.is_large_list(deps.type)):
        raise TraceError(f"{source}: column 'deps': has type {deps.type}; deps holds a list of row ids per row")
    deps = deps.cast(DEPS_TYPE)
    raw_offsets = deps.offsets.to_numpy().astype(np.int64)
    flat = deps.values.to_numpy(zero_copy_only=False).astype(np.int64)[raw_offsets[0]: raw_offsets[-1]]
    offsets = raw_offsets - raw_offsets[0]
    if t and len(flat):
        order = np.argsort(ids[transfer])
        sorted_ids = ids[transfer][order]
        slot = np.searchsorted(sorted_ids, flat).clip(max=t - 1)
        hit = sorted_ids[slot] == flat
        flat = np.where(hit, recv_ids[order][slot], flat)
    remapped = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, type=pa.int64()),
                                        mask=deps.is_null() if deps.null_count else None)
    out["deps"] = pa.concat_arrays([remapped, pa.nulls(t, DEPS_TYPE)])
    extensions = {name: table.column(name) for name in table.column_names if name.startswith("x_")}
    for name, values in extensions.items():
        out[name] = pa.concat_arrays([values.combine_chunks(), pa.nulls(t, values.type)])
    return event_log_from_arrays(out, metadata=metadata, source=source, check_causality=check_causality)
