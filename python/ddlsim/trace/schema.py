"""The event log schema: one row per operation that happened.

A simulated run and a captured run both produce an event log, and analysis
reads it without caring which made it. This module is the single definition
of that table: its columns (:data:`COLUMNS`), the matching Arrow schema
(:data:`EVENT_LOG_SCHEMA`), and :func:`validate_event_log`, which checks a
DataFrame against it and returns a normalised copy with the exact dtypes.

All times are integer nanoseconds on one clock. See ``docs/event-log.md``.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import TraceError

SCHEMA_VERSION = 1
"""Version of the event-log layout; bump it when columns change meaning."""

METADATA_VERSION_KEY = "ddlsim.schema_version"
METADATA_KEY = "ddlsim.metadata"

KINDS = ("compute", "transfer", "collective", "barrier")
ROLES = ("worker", "server", "switch")
OPS_BY_KIND: Mapping[str, tuple[str, ...]] = {
    "compute": ("forward", "backward", "update"),
    "transfer": (
        "push_request",
        "push_response",
        "pull_request",
        "pull_response",
        "ring_step",
        "hd_step",
        "send",
    ),
    "collective": ("allreduce",),
    "barrier": ("barrier",),
}
PS_OPS = ("push_request", "push_response", "pull_request", "pull_response")
BREAKDOWN_COLUMNS = ("w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns")

_INT32 = (np.iinfo(np.int32).min, np.iinfo(np.int32).max)
_INT64 = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)


@dataclass(frozen=True)
class Column:
    """One event-log column: its type, null-ability, smallest legal value."""

    name: str
    arrow_type: pa.DataType
    meaning: str
    unit: str = ""
    nullable: bool = False
    minimum: int | None = None
    default: Any = None  # value used by event_log_from_rows when omitted

    @property
    def is_integer(self) -> bool:
        return pa.types.is_integer(self.arrow_type)

    @property
    def is_string(self) -> bool:
        return pa.types.is_string(self.arrow_type)

    @property
    def pandas_dtype(self) -> Any:
        if self.nullable:
            return pd.Int64Dtype()
        if self.is_string:
            return "str"
        if self.is_integer:
            return np.dtype(self.arrow_type.to_pandas_dtype())
        return np.dtype(object)  # deps: a list per row


def _breakdown(name: str, meaning: str) -> Column:
    return Column(name, pa.int64(), meaning, "ns", nullable=True, minimum=0, default=None)


COLUMNS: tuple[Column, ...] = (
    Column("id", pa.int64(), "unique row id within the log", minimum=0),
    Column("iteration", pa.int32(), "training iteration (0-based), -1 if none", minimum=-1, default=-1),
    Column("rank", pa.int32(), "executing rank; for a transfer, the sender", minimum=0),
    Column("role", pa.string(), "role of `rank`: worker / server / switch"),
    Column("kind", pa.string(), "compute / transfer / collective / barrier"),
    Column("op", pa.string(), "operation within the kind (see OPS_BY_KIND)"),
    Column("name", pa.string(), "layer or tensor name, '' if none", default=""),
    Column("layer", pa.int32(), "layer index, -1 if none", minimum=-1, default=-1),
    Column("tensor", pa.int32(), "tensor (key) index, -1 if none", minimum=-1, default=-1),
    Column("peer", pa.int32(), "receiver rank of a transfer, else -1", minimum=-1, default=-1),
    Column("bytes", pa.int64(), "payload bytes (0 for compute)", "bytes", minimum=0, default=0),
    Column("priority", pa.int32(), "transfer priority (0 default)", default=0),
    Column("collective", pa.int64(), "collective instance id, -1 if none", minimum=-1, default=-1),
    Column("step", pa.int32(), "step within the collective (ring step), -1 if none", minimum=-1, default=-1),
    Column("rpc", pa.int64(), "id grouping the rows of one RPC, -1 if none", minimum=-1, default=-1),
    Column("ready_ns", pa.int64(), "when all its dependencies had finished", "ns"),
    Column("start_ns", pa.int64(), "when it started (>= ready_ns)", "ns"),
    Column("end_ns", pa.int64(), "when it ended; a transfer: delivered at the receiver", "ns"),
    Column("deps", pa.list_(pa.int64()), "ids of the rows it depended on", default=()),
    _breakdown("w_proc_ns", "RPC: worker processing of the response"),
    _breakdown("w_queue_ns", "RPC: response waiting in the worker's receive queue"),
    _breakdown("ps_proc_ns", "RPC: server processing of the request"),
    _breakdown("ps_queue_ns", "RPC: request waiting in the server's receive queue"),
    _breakdown("n_tx_ns", "RPC: network transmission incl. network stacks"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(column.name for column in COLUMNS)
COLUMN_BY_NAME: Mapping[str, Column] = {column.name: column for column in COLUMNS}

EVENT_LOG_SCHEMA = pa.schema(
    [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in COLUMNS]
)


def empty_event_log() -> pd.DataFrame:
    """An event log with no rows and the exact column dtypes."""
    return pd.DataFrame(
        {c.name: pd.Series([], dtype=c.pandas_dtype) for c in COLUMNS}
    )


def event_log_from_rows(rows: Iterable[Mapping[str, Any]], source: str = "rows") -> pd.DataFrame:
    """Build a validated event log from dicts, filling omitted optional columns.

    Required keys: id, rank, role, kind, op, ready_ns, start_ns, end_ns.
    Others default to -1 / 0 / "" / [] / null as the schema says.
    """
    rows = list(rows)
    if not rows:
        return empty_event_log()
    unknown = sorted({key for row in rows for key in row} - set(COLUMN_NAMES))
    if unknown:
        raise TraceError(f"{source}: unknown column(s) {unknown}; event-log columns are {list(COLUMN_NAMES)}")
    data: dict[str, list[Any]] = {}
    for column in COLUMNS:
        values = []
        for position, row in enumerate(rows):
            if column.name in row:
                values.append(row[column.name])
            elif column.default is not None or column.nullable:
                default = column.default
                values.append(list(default) if isinstance(default, tuple) else default)
            else:
                raise TraceError(
                    f"{source}: row {position} has no {column.name!r}; "
                    f"every row needs {', '.join(_required_names())}"
                )
        data[column.name] = values
    frame = pd.DataFrame({name: pd.Series(values, dtype=object) for name, values in data.items()})
    return validate_event_log(frame, source)


def _required_names() -> list[str]:
    return [c.name for c in COLUMNS if c.default is None and not c.nullable]


def iter_rows(log: pd.DataFrame, columns: Sequence[str] = COLUMN_NAMES) -> Iterator[Any]:
    """Rows of ``log`` as namedtuples of plain Python values (fast, unlike itertuples on
    Arrow-backed strings); nulls of the breakdown columns come as ``pd.NA``."""
    row_type = namedtuple("Row", columns)  # type: ignore[misc]
    return map(row_type._make, zip(*(log[column].tolist() for column in columns)))


def rank_roles(log: pd.DataFrame) -> dict[int, str]:
    """Role of every rank that executes at least one row of a validated log."""
    pairs = log[["rank", "role"]].drop_duplicates()
    return {int(rank): str(role) for rank, role in zip(pairs["rank"], pairs["role"])}


# --------------------------------------------------------------------------
# validation


class _Problem:
    """Builds error messages that name the source, column and row."""

    def __init__(self, source: str):
        self.source = source
        self.ids: np.ndarray | None = None

    def row(self, position: int) -> str:
        if self.ids is not None:
            return f"row {position} (id={self.ids[position]})"
        return f"row {position}"

    def at(self, column: str, position: int, problem: str, fix: str) -> TraceError:
        return TraceError(f"{self.source}: column {column!r}, {self.row(position)}: {problem}; {fix}")

    def column(self, column: str, problem: str, fix: str) -> TraceError:
        return TraceError(f"{self.source}: column {column!r}: {problem}; {fix}")


def validate_event_log(
    df: pd.DataFrame, source: str = "event log", *, check_causality: bool = True
) -> pd.DataFrame:
    """Check ``df`` against the event-log schema; return a normalised copy.

    The copy has exactly the schema's columns in schema order, a fresh
    RangeIndex and the exact dtypes (int32/int64, ``str``, lists of int for
    ``deps``, nullable ``Int64`` for the RPC breakdown). Any integer dtype is
    accepted on input as long as the values fit.

    Raises :class:`TraceError` naming ``source``, the column, the row and
    the fix at the first problem found. ``check_causality`` also checks that
    no row is ready before a row it depends on has ended.
    """
    problem = _Problem(source)
    if not isinstance(df, pd.DataFrame):
        raise TraceError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    _check_column_names(df, source)

    columns: dict[str, Any] = {}
    for column in COLUMNS:  # "id" comes first, so later messages can cite it
        columns[column.name] = _convert_column(df[column.name], column, problem)
        if column.name == "id":
            problem.ids = columns["id"]
    _check_unique_ids(columns["id"], problem)
    _check_categories(columns, problem)
    _check_times(columns, problem)
    _check_peers(columns, problem)
    _check_roles_per_rank(columns, problem)
    _check_deps(columns, problem, check_causality)

    out = pd.DataFrame(
        {name: pd.Series(values, dtype=COLUMN_BY_NAME[name].pandas_dtype) for name, values in columns.items()}
    )
    return out


def _check_column_names(df: pd.DataFrame, source: str) -> None:
    names = [str(name) for name in df.columns]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise TraceError(f"{source}: duplicated column(s) {duplicated}; keep one of each")
    missing = [name for name in COLUMN_NAMES if name not in names]
    if missing:
        raise TraceError(
            f"{source}: missing column(s) {missing}; an event log needs all of "
            f"{list(COLUMN_NAMES)} (see docs/event-log.md)"
        )
    unexpected = [name for name in names if name not in COLUMN_BY_NAME]
    if unexpected:
        raise TraceError(
            f"{source}: unexpected column(s) {unexpected}; drop them (run-level facts "
            f"belong in the metadata dict) — event-log columns are {list(COLUMN_NAMES)}"
        )


def _convert_column(series: pd.Series, column: Column, problem: _Problem) -> Any:
    if column.nullable:
        return _nullable_integers(series, column, problem)
    if column.is_integer:
        return _integers(series, column, problem)
    if column.is_string:
        return _strings(series, column, problem)
    return _id_lists(series, column, problem)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _is_int_value(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _integers(series: pd.Series, column: Column, problem: _Problem) -> np.ndarray:
    dtype = series.dtype
    fix = f"{column.name} holds integers" + (" nanoseconds" if column.unit == "ns" else "")
    if pd.api.types.is_bool_dtype(dtype):
        raise problem.column(column.name, "has boolean values", f"{fix}; convert it explicitly")
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and pd.api.types.is_integer_dtype(dtype):
        nulls = series.isna().to_numpy()
        if nulls.any():
            raise problem.at(column.name, _first(nulls), "is null", f"{fix} and may not be null")
        values = series.to_numpy(dtype=dtype.numpy_dtype)
    elif dtype.kind in "iu":
        values = series.to_numpy()
    elif dtype == object:
        values = _object_integers(series, column, problem, fix)
    else:
        raise problem.column(
            column.name,
            f"has dtype {dtype}",
            f"{fix}; convert with .round().astype('int64') if the values are whole numbers",
        )
    return _in_range(values, column, problem).astype(column.pandas_dtype)


def _object_integers(series: pd.Series, column: Column, problem: _Problem, fix: str) -> np.ndarray:
    if pd.api.types.infer_dtype(series, skipna=False) not in ("integer", "empty"):
        for position, value in enumerate(series.tolist()):
            if not _is_int_value(value):
                raise problem.at(column.name, position, f"has {value!r} ({type(value).__name__})", fix)
    try:
        return np.array(series.tolist(), dtype=np.int64)
    except OverflowError:
        raise problem.column(column.name, "has a value outside the int64 range", fix) from None


def _in_range(values: np.ndarray, column: Column, problem: _Problem) -> np.ndarray:
    low, high = _INT32 if column.arrow_type == pa.int32() else _INT64
    if column.minimum is not None:
        low = max(low, column.minimum)
    if values.size == 0:
        return values
    bad = (values < low) | (values > high)
    if bad.any():
        position = _first(bad)
        if column.minimum is not None and values[position] < column.minimum:
            fix = f"{column.name} must be >= {column.minimum}"
            if column.minimum == -1:
                fix += " (-1 means none)"
        else:
            fix = f"{column.name} is {column.arrow_type} and must lie in [{low}, {high}]"
        raise problem.at(column.name, position, f"value {values[position]} is out of range", fix)
    return values


def _nullable_integers(series: pd.Series, column: Column, problem: _Problem) -> pd.arrays.IntegerArray:
    fix = f"{column.name} holds integer nanoseconds or null where not measured"
    if pd.api.types.is_bool_dtype(series.dtype):
        raise problem.column(column.name, "has boolean values", fix)
    if series.dtype == object:
        for position, value in enumerate(series.tolist()):
            if not (value is None or value is pd.NA or _is_float_nan(value) or _is_int_value(value)):
                raise problem.at(column.name, position, f"has {value!r} ({type(value).__name__})", fix)
    elif not (pd.api.types.is_integer_dtype(series.dtype) or pd.api.types.is_float_dtype(series.dtype)):
        raise problem.column(column.name, f"has dtype {series.dtype}", fix)
    try:
        values = pd.array(series.to_numpy(dtype=object), dtype="Int64")
    except (TypeError, ValueError, OverflowError):
        raise problem.column(column.name, "has non-integer values", fix) from None
    negative = (values < 0).fillna(False).to_numpy(dtype=bool)
    if negative.any():
        position = _first(negative)
        raise problem.at(column.name, position, f"value {values[position]} is negative", "durations are >= 0")
    return values


def _is_float_nan(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and np.isnan(value)


def _strings(series: pd.Series, column: Column, problem: _Problem) -> pd.Series:
    fix = f"{column.name} holds text" + (" (use '' for none)" if column.default == "" else "")
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    if isinstance(series.dtype, pd.StringDtype):
        nulls = series.isna().to_numpy()
        if nulls.any():
            raise problem.at(column.name, _first(nulls), "is null", fix)
    elif series.dtype == object:
        if pd.api.types.infer_dtype(series, skipna=False) not in ("string", "empty"):
            for position, value in enumerate(series.tolist()):
                if not isinstance(value, str):
                    raise problem.at(column.name, position, f"has {value!r} ({type(value).__name__})", fix)
    else:
        raise problem.column(column.name, f"has dtype {series.dtype}", fix)
    return series.astype("str").reset_index(drop=True)


def _id_lists(series: pd.Series, column: Column, problem: _Problem) -> list[list[int]]:
    fix = f"{column.name} holds a list of row ids per row ([] for none)"
    lists: list[list[int]] = []
    for position, value in enumerate(series.tolist()):
        if isinstance(value, np.ndarray) and value.ndim == 1 and (value.dtype.kind in "iu" or value.size == 0):
            lists.append([int(item) for item in value])
        elif isinstance(value, (list, tuple)) and all(_is_int_value(item) for item in value):
            lists.append([int(item) for item in value])
        else:
            raise problem.at(column.name, position, f"has {value!r}", fix)
    return lists


def _check_unique_ids(ids: np.ndarray, problem: _Problem) -> None:
    duplicated = pd.Series(ids).duplicated().to_numpy()
    if duplicated.any():
        position = _first(duplicated)
        raise problem.at("id", position, f"id {ids[position]} appears more than once", "ids must be unique")


def _check_categories(columns: dict[str, Any], problem: _Problem) -> None:
    kinds = np.asarray(columns["kind"], dtype=object)
    roles = np.asarray(columns["role"], dtype=object)
    ops = np.asarray(columns["op"], dtype=object)
    bad_kind = ~np.isin(kinds, KINDS)
    if bad_kind.any():
        position = _first(bad_kind)
        raise problem.at("kind", position, f"unknown kind {kinds[position]!r}", f"kind is one of {list(KINDS)}")
    bad_role = ~np.isin(roles, ROLES)
    if bad_role.any():
        position = _first(bad_role)
        raise problem.at("role", position, f"unknown role {roles[position]!r}", f"role is one of {list(ROLES)}")
    for kind, allowed in OPS_BY_KIND.items():
        bad_op = (kinds == kind) & ~np.isin(ops, allowed)
        if bad_op.any():
            position = _first(bad_op)
            raise problem.at(
                "op", position, f"op {ops[position]!r} is not a {kind} op", f"a {kind} op is one of {list(allowed)}"
            )


def _check_times(columns: dict[str, Any], problem: _Problem) -> None:
    ready, start, end = columns["ready_ns"], columns["start_ns"], columns["end_ns"]
    early = start < ready
    if early.any():
        position = _first(early)
        raise problem.at(
            "start_ns",
            position,
            f"start_ns={start[position]} is before ready_ns={ready[position]}",
            "nothing starts before it is ready; set ready_ns <= start_ns",
        )
    backwards = end < start
    if backwards.any():
        position = _first(backwards)
        raise problem.at(
            "end_ns",
            position,
            f"end_ns={end[position]} is before start_ns={start[position]}",
            "end_ns must be >= start_ns",
        )


def _check_peers(columns: dict[str, Any], problem: _Problem) -> None:
    is_transfer = np.asarray(columns["kind"], dtype=object) == "transfer"
    peer, rank = columns["peer"], columns["rank"]
    no_receiver = is_transfer & ((peer < 0) | (peer == rank))
    if no_receiver.any():
        position = _first(no_receiver)
        raise problem.at(
            "peer",
            position,
            f"transfer from rank {rank[position]} has peer {peer[position]}",
            "a transfer's peer is its receiver rank, different from the sender",
        )
    stray_peer = ~is_transfer & (peer != -1)
    if stray_peer.any():
        position = _first(stray_peer)
        raise problem.at(
            "peer", position, f"peer {peer[position]} on a non-transfer row", "peer is -1 except for transfers"
        )


def _check_roles_per_rank(columns: dict[str, Any], problem: _Problem) -> None:
    pairs = pd.DataFrame({"rank": columns["rank"], "role": np.asarray(columns["role"], dtype=object)})
    first_rows = pairs.drop_duplicates()
    conflicting = first_rows[first_rows["rank"].duplicated(keep=False)]
    if len(conflicting):
        rank = int(conflicting["rank"].iloc[0])
        roles = sorted(conflicting.loc[conflicting["rank"] == rank, "role"])
        position = int(conflicting.index[conflicting["rank"] == rank][1])
        raise problem.at(
            "role", position, f"rank {rank} appears with roles {roles}", "each rank has exactly one role"
        )


def _check_deps(columns: dict[str, Any], problem: _Problem, check_causality: bool) -> None:
    deps: list[list[int]] = columns["deps"]
    ids: np.ndarray = columns["id"]
    counts = np.fromiter((len(d) for d in deps), dtype=np.int64, count=len(deps))
    if counts.sum() == 0:
        return
    owners = np.repeat(np.arange(len(deps)), counts)
    targets = np.fromiter((t for d in deps for t in d), dtype=np.int64, count=int(counts.sum()))

    order = np.argsort(ids, kind="stable")
    slots = np.searchsorted(ids[order], targets).clip(max=len(ids) - 1)
    found = ids[order][slots] == targets
    if not found.all():
        bad = _first(~found)
        raise problem.at(
            "deps", int(owners[bad]), f"depends on id {targets[bad]}, which is not in the log", "deps list ids of rows in this log"
        )
    self_dep = targets == ids[owners]
    if self_dep.any():
        raise problem.at("deps", int(owners[_first(self_dep)]), "depends on itself", "remove its own id from deps")
    if not check_causality:
        return
    # deps hold every reason a row waited (graph edges, the stream it queued
    # on, a collective's rendezvous), so the bound is on the start.
    dep_end = columns["end_ns"][order[slots]]
    owner_start = columns["start_ns"][owners]
    acausal = dep_end > owner_start
    if acausal.any():
        bad = _first(acausal)
        raise problem.at(
            "start_ns",
            int(owners[bad]),
            f"start_ns={owner_start[bad]} but it depends on id {targets[bad]}, which ends at {dep_end[bad]}",
            "a row starts only after every row in its deps has ended (start_ns >= their end_ns)",
        )
