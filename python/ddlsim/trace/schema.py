"""The event log, schema version 3: one row per operation that happened.

A simulated run and a captured run both produce an event log, and analysis
reads it without caring which made it. This module is the single definition
of that table: its columns (:data:`COLUMNS`), the Arrow schema
(:data:`EVENT_LOG_SCHEMA`), the :class:`EventLog` container (a
``pyarrow.Table`` plus metadata and optional side tables), the vectorised
builder :func:`event_log_from_arrays` and :func:`validate_event_log`.

Times are integer nanoseconds on the clock of the row's ``host``; the
metadata's ``clocks`` give each host's offset to the reference clock (see
:func:`aligned_times` and ``docs/event-log.md``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceError
from .columns import BREAKDOWN_COLUMNS, COLL_TYPES, EXTENSION_PREFIX, KINDS, PS_OPS, ROLES, ArrayLog, aligned_times, host_offsets
from .jsontext import short_repr

SCHEMA_VERSION = 3
"""Version of the event-log layout; bump it when columns change meaning."""

METADATA_VERSION_KEY = "ddlsim.schema_version"
METADATA_KEY = "ddlsim.metadata"
SIDE_TABLES_KEY = "ddlsim.side_tables"

STRING = pa.dictionary(pa.int32(), pa.string())
DEPS_TYPE = pa.list_(pa.int64())

_INT_BOUNDS = {
    pa.int32(): (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)),
    pa.int64(): (int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)),
}


@dataclass(frozen=True)
class Column:
    """One event-log column: type, null-ability, smallest legal value, default."""

    name: str
    arrow_type: pa.DataType
    meaning: str
    unit: str = ""
    nullable: bool = False
    minimum: int | None = None
    default: Any = None  # filled in by event_log_from_arrays when omitted; None: required
    choices: tuple[str, ...] | None = None  # closed vocabulary of a string column
    non_empty: bool = False
    always: bool = False  # required even though nullable (a side table's end_ns: present, null where unknown)

    @property
    def is_integer(self) -> bool:
        return pa.types.is_integer(self.arrow_type)

    @property
    def is_string(self) -> bool:
        return pa.types.is_dictionary(self.arrow_type)

    @property
    def is_list(self) -> bool:
        return pa.types.is_list(self.arrow_type)

    @property
    def required(self) -> bool:
        return self.always or (self.default is None and not self.nullable)


def _int(name, type_, meaning, minimum=-1, default=-1, **kw) -> Column:
    return Column(name, type_, meaning, minimum=minimum, default=default, **kw)


def _str(name, meaning, default="", **kw) -> Column:
    return Column(name, STRING, meaning, default=default, **kw)


_I32, _I64 = pa.int32(), pa.int64()
_HOST_DEFAULT = "rank"  # marker: host defaults to the row's rank

COLUMNS: tuple[Column, ...] = (
    _int("id", _I64, "unique row id within the log", minimum=0, default=None),
    _int("iteration", _I32, "training iteration (0-based), -1 if none"),
    _int("rank", _I32, "executing rank (send: the sender, recv: the receiver)", minimum=0, default=None),
    _str("role", "worker / server / switch / host; one per rank", default=None, choices=ROLES),
    _int("host", _I32, "host (machine) of the rank; its clock domain", minimum=0, default=_HOST_DEFAULT),
    _str("device", "device, e.g. 'cuda:0', '' if none"),
    _str("stream", "stream / queue the row ran on, '' if none"),
    _str("kind", "compute / send / recv / collective / barrier / marker", default=None, choices=KINDS),
    _str("op", "open operation name: forward, push_request, ring_step, a kernel name...", default=None, non_empty=True),
    _str("name", "layer or tensor name, '' if none"),
    _int("layer", _I32, "layer index, -1 if none"),
    _int("tensor", _I32, "tensor (key) index, -1 if none"),
    _int("group", _I32, "bucket / fusion group id (groups side table), -1 if none"),
    _int("slice", _I32, "slice index within the tensor or group, -1 if none"),
    _int("peer", _I32, "send: the receiver rank, recv: the sender rank, else -1"),
    _int("message", _I64, "message id shared by a send and its recv rows, -1 if none"),
    _int("bytes", _I64, "payload bytes (0 for compute)", unit="bytes", minimum=0, default=0),
    _int("priority", _I32, "priority (0 default; lower runs first)", minimum=None, default=0),
    _int("tenant", _I32, "background tenant: 0 = the training job(s), >= 1 a [[tenant]] (docs/tenants.md)", minimum=0,
         default=0),
    # v3; read as 0 from v2 files (one job)
    _int("job", _I32, "training job of the row: its [[job]] table's index, 0 in a run of one job (docs/jobs.md)",
         minimum=0, default=0),
    _int("collective", _I64, "collective instance id, -1 if none"),
    _str("coll_type", "collective type, '' unless collective-related", choices=("",) + COLL_TYPES),
    _str("algorithm", "collective algorithm, e.g. ring, halving_doubling; '' if none"),
    _int("step", _I32, "step within the collective, -1 if none"),
    _int("rpc", _I64, "id shared by the rows of one RPC, -1 if none"),
    Column("ready_ns", _I64, "when all its dependencies had finished; null if unknown", "ns", nullable=True),
    Column("start_ns", _I64, "when it started (>= ready_ns)", "ns"),
    Column("end_ns", _I64, "when it ended (>= start_ns)", "ns"),
    Column("deps", DEPS_TYPE, "ids of the rows it waited for; null if unknown, [] for none", nullable=True),
    _int("class_size", _I32, "ranks this row stands for: its rank class's size (closed form; 1: itself)", minimum=1,
         default=1),
)
COLUMN_NAMES: tuple[str, ...] = tuple(column.name for column in COLUMNS)
COLUMN_BY_NAME: Mapping[str, Column] = {column.name: column for column in COLUMNS}
REQUIRED_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.required)
# Columns added to schema v2 later: a log without them reads with their default.
ADDED_COLUMNS: tuple[str, ...] = ("class_size",)

EVENT_LOG_SCHEMA = pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in COLUMNS])


# --------------------------------------------------------------------------
# side tables


@dataclass(frozen=True)
class SideTable:
    """A table stored beside the event log (groups, flows, queues)."""

    name: str
    columns: tuple[Column, ...]
    meaning: str

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns])


SIDE_TABLES: Mapping[str, SideTable] = {
    "groups": SideTable(
        "groups",
        (
            _int("group", _I32, "group id, as in the event log's group column", minimum=0, default=None),
            _int("tensor", _I32, "a tensor in the group", minimum=0, default=None),
            _str("kind", "bucket / fusion / merge / ... ('' if unknown)"),
            _int("offset", _I64, "byte offset of the tensor within the group's buffer", minimum=0, default=0),
            _int("bytes", _I64, "bytes of the tensor in the group", minimum=0, default=0),
            _int("job", _I32, "job the group belongs to (group ids are per job; 0 in a run of one job)", minimum=0, default=0),
        ),
        "one row per (group, tensor): DDP buckets, Horovod fusion buffers, merged gradients",
    ),
    "flows": SideTable(
        "flows",
        (
            _int("flow", _I64, "flow id", minimum=0, default=None),
            _int("message", _I64, "event-log message it carries, -1 if none"),
            _int("src", _I32, "sending rank, -1 for a host-only endpoint (a background tenant's flow)", default=None),
            _int("dst", _I32, "receiving rank, -1 for a host-only endpoint (a background tenant's flow)", default=None),
            _int("bytes", _I64, "bytes", minimum=0, default=0),
            _int("band", _I32, "priority band (0 = highest)", minimum=0, default=0),
            _int("tenant", _I32, "background tenant: 0 = a training job's flow, >= 1 a [[tenant]]'s", minimum=0, default=0),
            # v3; from v2 files: 0 for tenant 0, else -1
            _int("job", _I32, "training job whose flow it is, -1 for a background tenant's flow"),
            Column("start_ns", _I64, "first byte enters the network", "ns"),
            Column("end_ns", _I64, "last byte delivered; FCT = end_ns - start_ns; null: not finished when the run ended",
                   "ns", nullable=True, always=True),
            # packet level; 0 at analytic and flow fidelity and in files written before these columns
            _int("retransmits", _I64, "segments of this message retransmitted (packet level)", minimum=0, default=0),
            _int("timeouts", _I64, "retransmission timeouts while it was in flight on its connection (packet level)",
                 minimum=0, default=0),
            _int("drops", _I64, "packets of this message dropped (packet level)", minimum=0, default=0),
            _int("ecn_marks", _I64, "packets of this message CE-marked (packet level)", minimum=0, default=0),
            # hosts of both ends; -1 (unknown) in files written before these columns: the ranks' hosts then
            _int("src_host", _I32, "sending host, -1 if unknown (files written before this column)"),
            _int("dst_host", _I32, "receiving host, -1 if unknown (files written before this column)"),
        ),
        "one row per network flow (flow-level and packet-level models)",
    ),
    "queues": SideTable(
        "queues",
        (
            Column("time_ns", _I64, "sample time", "ns"),
            _int("node", _I32, "rank or switch owning the queue", minimum=0, default=None),
            _int("port", _I32, "egress port, -1 if none"),
            _int("band", _I32, "priority band (0 = highest)", minimum=0, default=0),
            _int("bytes", _I64, "bytes queued", minimum=0, default=0),
            _int("packets", _I64, "packets queued, -1 if not counted"),
        ),
        "queue occupancy samples (packet-level models)",
    ),
}


# --------------------------------------------------------------------------
# the container


class EventLog:
    """An event log: a ``pyarrow.Table`` in schema order plus metadata.

    ``table``: the rows (string columns dictionary-encoded, ``deps`` a
    list<int64>); ``metadata``: a JSON-able dict with ``schema_version``,
    ``source``, ``scenario``, ``clocks``...; ``groups``/``flows``/``queues``:
    optional side tables (``pa.Table`` or None).

    Build one with :func:`event_log_from_arrays` or :func:`validate_event_log`
    (the constructor does not validate).
    """

    __slots__ = ("table", "metadata", "groups", "flows", "queues", "_validated")

    def __init__(
        self,
        table: pa.Table,
        metadata: Mapping[str, Any] | None = None,
        groups: pa.Table | None = None,
        flows: pa.Table | None = None,
        queues: pa.Table | None = None,
    ):
        self.table = table
        self.metadata = dict(metadata or {})
        self.metadata.setdefault("schema_version", SCHEMA_VERSION)
        self.groups = groups
        self.flows = flows
        self.queues = queues
        self._validated: Any = None  # the table object validation passed, if any

    @property
    def is_validated(self) -> bool:
        """True if ``table`` is the one :func:`validate_event_log` /
        :func:`event_log_from_arrays` checked (writers then skip re-checking)."""
        return self._validated is not None and self._validated is self.table

    def __len__(self) -> int:
        return self.table.num_rows

    def __repr__(self) -> str:
        sides = [name for name in SIDE_TABLES if getattr(self, name) is not None]
        extra = f", side tables {sides}" if sides else ""
        return f"EventLog({len(self):,} rows, {self.table.num_columns} columns{extra})"

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    @property
    def extension_columns(self) -> list[str]:
        return [name for name in self.table.column_names if name.startswith(EXTENSION_PREFIX)]

    def side_tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in SIDE_TABLES if getattr(self, name) is not None}

    def column(self, name: str) -> np.ndarray:
        """One column as numpy: integers as int32/int64; strings decoded to an
        object array of ``str``; a nullable integer column with nulls as a
        ``numpy.ma.MaskedArray``; ``deps`` as an object array of lists (None
        where unknown)."""
        return column_values(self.table.column(name))

    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A string column as (int32 codes, object array of the dictionary)."""
        array = _combined(self.table.column(name))
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        return (
            array.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
            np.asarray(array.dictionary.to_pylist(), dtype=object),
        )

    def filter(self, mask: Any) -> "EventLog":
        """The rows where ``mask`` is true (metadata and side tables kept; not
        re-validated: ``deps`` may then name rows that were left out)."""
        if isinstance(mask, (pa.Array, pa.ChunkedArray)):
            selection = mask
        else:
            selection = pa.array(np.asarray(mask, dtype=bool))
        return self.replace(table=self.table.filter(selection))

    def replace(self, **changes: Any) -> "EventLog":
        fields = {name: getattr(self, name) for name in ("table", "metadata", "groups", "flows", "queues")}
        fields.update(changes)
        return EventLog(**fields)

    def to_pandas(self, columns: Sequence[str] | None = None, *, categories: bool = False):
        """The rows as a pandas DataFrame (pandas is imported here, on request).

        ``columns``: only these (e.g. leave out ``deps``, the slowest to
        convert). Strings become pandas ``str`` columns (``categories=True``:
        categoricals), ``ready_ns`` a nullable ``Int64``, ``deps`` Python lists
        of ids (None where unknown)."""
        import pandas as pd

        data = {}
        for name in self.table.column_names if columns is None else columns:
            chunked = self.table.column(name)
            array = _combined(chunked)
            spec = COLUMN_BY_NAME.get(name)
            if pa.types.is_dictionary(array.type):
                data[name] = array.to_pandas() if categories else array.cast(pa.string()).to_pandas()
            elif pa.types.is_list(array.type):
                values = np.empty(len(array), dtype=object)
                values[:] = array.to_pylist()
                data[name] = pd.Series(values, dtype=object)
            elif pa.types.is_integer(array.type) and (array.null_count or (spec is not None and spec.nullable)):
                data[name] = array.to_pandas(types_mapper={array.type: pd.Int64Dtype()}.get)
            else:
                data[name] = array.to_pandas()
        return pd.DataFrame(data)


def _combined(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            return array.chunk(0)
        if array.num_chunks == 0:
            return pa.array([], type=array.type)
        if pa.types.is_dictionary(array.type):
            return pa.chunked_array(array.unify_dictionaries().chunks).combine_chunks()
        return array.combine_chunks()
    return array


def column_values(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """numpy view of an Arrow column, as :meth:`EventLog.column` describes."""
    array = _combined(array)
    if array.null_count and not pa.types.is_integer(array.type):  # e.g. an x_ text column with gaps
        out = np.empty(len(array), dtype=object)
        out[:] = array.to_pylist()
        return out
    if pa.types.is_dictionary(array.type):
        dictionary = np.asarray(array.dictionary.to_pylist(), dtype=object)
        indices = array.indices.to_numpy(zero_copy_only=False)
        if len(dictionary) == 0:
            return np.empty(len(array), dtype=object)
        return dictionary[indices]
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        out = np.empty(len(array), dtype=object)
        out[:] = array.to_pylist()
        return out
    if pa.types.is_integer(array.type) and array.null_count:
        values = array.fill_null(0).to_numpy()
        return np.ma.masked_array(values, mask=array.is_null().to_numpy(zero_copy_only=False))
    return array.to_numpy(zero_copy_only=False)


def rank_roles(log: EventLog) -> dict[int, str]:
    """Role of every rank that executes at least one row of a validated log."""
    ranks = log.column("rank")
    codes, dictionary = log.codes("role")
    if not len(ranks):
        return {}
    keys = np.unique(ranks.astype(np.int64) * max(len(dictionary), 1) + codes)
    return {int(key // len(dictionary)): str(dictionary[key % len(dictionary)]) for key in keys}


# --------------------------------------------------------------------------
# building


def empty_event_log(metadata: Mapping[str, Any] | None = None) -> EventLog:
    """An event log with no rows."""
    return EventLog(EVENT_LOG_SCHEMA.empty_table(), metadata)


def event_log_from_arrays(
    columns: Mapping[str, Any],
    *,
    deps_offsets: Any = None,
    deps_values: Any = None,
    metadata: Mapping[str, Any] | None = None,
    groups: Any = None,
    flows: Any = None,
    queues: Any = None,
    source: str = "arrays",
    check_causality: bool = True,
) -> EventLog:
    """Build and validate an event log from columns (vectorised, no per-row loop).

    ``columns`` maps column names to numpy arrays, Arrow arrays, pandas
    Series, lists or scalars (broadcast). Omitted optional columns take their
    defaults (-1 / 0 / "" ; ``host`` = ``rank``; ``ready_ns`` and ``deps``
    null). A string column may also be given as a ``(codes, dictionary)``
    pair (code -1 meaning "") or a ``pa.DictionaryArray``. ``deps`` comes either as a column (a
    list array, lists, None for all-unknown) or as CSR ``deps_offsets``
    (length n+1) and ``deps_values``. Columns named ``x_*`` are kept.
    Raises :class:`TraceError` naming source, column, row and fix.
    """
    problem = _Problem(source)
    if not isinstance(columns, Mapping):
        raise TraceError(f"{source}: columns must be a mapping of column name to array, got {type(columns).__name__}")
    names = [str(name) for name in columns]
    _check_names(names, problem, fill_defaults=True)
    n = _row_count(columns, problem)
    arrays: dict[str, pa.Array] = {}
    for column in COLUMNS:
        if column.name == "deps":
            arrays["deps"] = _deps_input(columns, deps_offsets, deps_values, n, problem)
        elif column.name in columns:
            arrays[column.name] = _convert(columns[column.name], column, n, problem)
        elif column.default == _HOST_DEFAULT:
            arrays[column.name] = arrays["rank"]
        elif column.nullable:
            arrays[column.name] = pa.nulls(n, column.arrow_type)
        else:
            arrays[column.name] = _constant(column, n)
        if column.name == "id":
            problem.ids = arrays["id"].to_numpy()
    for name in names:
        if name.startswith(EXTENSION_PREFIX):
            arrays[name] = _extension(columns[name], name, n, problem)
    table = pa.Table.from_arrays(list(arrays.values()), schema=_schema_with_extensions(arrays))
    sides = {name: _side_table(value, SIDE_TABLES[name], source) for name, value in
             (("groups", groups), ("flows", flows), ("queues", queues))}
    log = EventLog(table, _metadata(metadata, problem), **sides)
    _check_rows(log, problem, check_causality)
    if check_causality:
        log._validated = log.table
    return log


def event_log_from_rows(
    rows: Iterable[Mapping[str, Any]], source: str = "rows", **kwargs: Any
) -> EventLog:
    """Build a validated event log from dicts (small logs, tests); omitted
    optional keys take their defaults. Other keyword arguments go to
    :func:`event_log_from_arrays`."""
    rows = list(rows)
    keys: list[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys]
    columns: dict[str, Any] = {}
    for key in keys:
        column = COLUMN_BY_NAME.get(key)
        values = []
        for position, row in enumerate(rows):
            if key in row:
                values.append(row[key])
            elif column is None:
                values.append(None)  # an extension column: null where not given
            elif column.required:
                raise TraceError(f"{source}: row {position} has no {key!r}; every row needs the required column {key!r}")
            elif column.default == _HOST_DEFAULT:
                values.append(row.get("rank"))
            else:
                values.append(column.default)
        if key == "deps":
            columns[key] = pa.array(values, type=DEPS_TYPE) if _all_lists(values) else values
        elif column is not None and column.is_string:
            columns[key] = np.array(values + [None], dtype=object)[:-1]
        else:
            columns[key] = values
    if not rows:
        columns = {name: [] for name in REQUIRED_COLUMNS}
    return event_log_from_arrays(columns, source=source, **kwargs)


def _all_lists(values: list[Any]) -> bool:
    return all(v is None or (isinstance(v, (list, tuple)) and all(_is_int(x) for x in v)) for v in values)


_MAX_CLOCK_OFFSET_NS = 1 << 62


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def validate_event_log(
    log: Any, source: str = "event log", *, check_causality: bool = True, metadata: Mapping[str, Any] | None = None
) -> EventLog:
    """Check ``log`` (an :class:`EventLog`, a ``pa.Table`` or a pandas
    DataFrame) against schema v2; return a normalised :class:`EventLog`.

    Every schema column must be present (``x_*`` extension columns are kept,
    any other column is an error). Integer columns may have any integer
    type that holds the values; strings may be plain or dictionary-encoded.
    Raises :class:`TraceError` naming the source, column, row (and id) and
    the fix at the first problem.
    """
    sides: dict[str, Any] = {}
    if isinstance(log, EventLog):
        table, meta = log.table, {**log.metadata, **(metadata or {})}
        sides = log.side_tables()
    elif isinstance(log, pa.Table):
        table, meta = log, dict(metadata or {})
    elif type(log).__name__ == "DataFrame" and hasattr(log, "columns"):
        table, meta = _table_from_pandas(log, source), dict(metadata or {})
    else:
        raise TraceError(
            f"{source}: expected an EventLog, a pyarrow Table or a pandas DataFrame, got {type(log).__name__}"
        )
    problem = _Problem(source)
    names = [str(name) for name in table.column_names]
    # Logs written before rank classes have no class_size: every row stands for itself.
    added = [name for name in ADDED_COLUMNS if name not in names]
    _check_names(names + added, problem, fill_defaults=False)
    columns = {name: table.column(name) for name in names}  # event_log_from_arrays fills in `added`
    return event_log_from_arrays(
        columns, metadata=meta, source=source, check_causality=check_causality, **sides
    )


def event_log_from_array_log(log: ArrayLog, check_causality: bool = True) -> EventLog:
    """The validated EventLog of an :class:`ArrayLog`'s columns."""
    return event_log_from_arrays(log.columns, deps_offsets=log.deps_offsets, deps_values=log.deps_values, metadata=log.metadata,
                                 groups=log.groups, flows=log.flows, queues=getattr(log, "queues", None), source=log.source,
                                 check_causality=check_causality)


def as_event_log(log: Any, source: str = "event log") -> EventLog:
    """``log`` itself if it is an EventLog, else validated into one (no
    causality check): lets analysis take a table or DataFrame too."""
    if isinstance(log, EventLog):
        return log
    return validate_event_log(log, source=source, check_causality=False)


def _table_from_pandas(frame: Any, source: str) -> pa.Table:
    import pandas as pd

    names = [str(name) for name in frame.columns]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise TraceError(f"{source}: duplicated column(s) {duplicated}; keep one of each")
    arrays, fields = [], []
    for name in names:
        series = frame[name]
        if isinstance(series.dtype, pd.CategoricalDtype):
            codes = series.cat.codes.to_numpy()
            if (codes < 0).any():
                row = int(np.flatnonzero(codes < 0)[0])
                raise TraceError(f"{source}: column {name!r}, row {row}: is null; {name} holds text")
            array = pa.DictionaryArray.from_arrays(
                pa.array(codes.astype(np.int32)), pa.array(list(series.cat.categories), type=pa.string())
            )
        elif series.dtype == object or name == "deps":
            array = _ObjectColumn(series.to_numpy(dtype=object))
        else:
            try:
                array = pa.Array.from_pandas(series.reset_index(drop=True))
            except (pa.ArrowException, TypeError, ValueError) as err:
                raise TraceError(f"{source}: column {name!r}: cannot be read ({err})") from None
        arrays.append(array)
        fields.append(name)
    return _LazyTable(dict(zip(fields, arrays)))  # type: ignore[return-value]


class _ObjectColumn:
    """A pandas object column, converted by the column's own rules."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def __len__(self) -> int:
        return len(self.values)


class _LazyTable:
    """Just enough of pa.Table for validate_event_log (pandas input)."""

    def __init__(self, columns: dict[str, Any]):
        self._columns = columns
        self.column_names = list(columns)

    def column(self, name: str) -> Any:
        return self._columns[name]


# --------------------------------------------------------------------------
# conversion of one column


class _Problem:
    """Builds error messages that name the source, column and row."""

    def __init__(self, source: str):
        self.source = source
        self.ids: np.ndarray | None = None

    def row(self, position: int) -> str:
        if self.ids is not None and 0 <= position < len(self.ids):
            return f"row {position} (id={self.ids[position]})"
        return f"row {position}"

    def at(self, column: str, position: int, problem: str, fix: str) -> TraceError:
        return TraceError(f"{self.source}: column {column!r}, {self.row(position)}: {problem}; {fix}")

    def column(self, column: str, problem: str, fix: str) -> TraceError:
        return TraceError(f"{self.source}: column {column!r}: {problem}; {fix}")

    def general(self, problem: str, fix: str) -> TraceError:
        return TraceError(f"{self.source}: {problem}; {fix}")


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_names(names: Sequence[str], problem: _Problem, *, fill_defaults: bool) -> None:
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise problem.general(f"duplicated column(s) {duplicated}", "keep one of each")
    unknown = [n for n in names if n not in COLUMN_BY_NAME and not n.startswith(EXTENSION_PREFIX)]
    if unknown:
        raise problem.general(
            f"unknown column(s) {unknown}",
            f"extra columns must be named '{EXTENSION_PREFIX}<name>' (kept and ignored by validation; "
            f"run-level facts belong in the metadata) - event-log columns are {list(COLUMN_NAMES)}",
        )
    wanted = REQUIRED_COLUMNS if fill_defaults else COLUMN_NAMES
    missing = [name for name in wanted if name not in names]
    if missing:
        raise problem.general(
            f"missing column(s) {missing}",
            f"an event log needs {list(wanted)} (see docs/event-log.md)",
        )


def _length(value: Any) -> int | None:
    if isinstance(value, tuple) and len(value) == 2:
        return len(value[0])
    if isinstance(value, (str, bytes, numbers.Number, np.generic)) or value is None:
        return None
    return len(value)


def _row_count(columns: Mapping[str, Any], problem: _Problem) -> int:
    lengths = {}
    for name, value in columns.items():
        if name == "deps":
            continue
        length = _length(value)
        if length is not None:
            lengths[name] = length
    if not lengths:
        raise problem.general("no column has a length", "give at least the id column as an array")
    first_name, n = next(iter(lengths.items()))
    for name, length in lengths.items():
        if length != n:
            raise problem.column(name, f"has {length} rows, but {first_name!r} has {n}", "all columns have one value per row")
    return n


def _constant(column: Column, n: int) -> pa.Array:
    if column.is_string:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([column.default], pa.string()))
    return pa.array(np.full(n, column.default, dtype=column.arrow_type.to_pandas_dtype()))


def _as_arrow(value: Any, name: str, n: int, problem: _Problem) -> pa.Array | _ObjectColumn:
    """Any supported input as an Arrow array (or an object column to inspect)."""
    if isinstance(value, pa.ChunkedArray):
        return _combined(value)
    if isinstance(value, pa.Array) or isinstance(value, _ObjectColumn):
        return value
    if isinstance(value, (str, numbers.Number, np.generic)) and not isinstance(value, (bool, np.bool_)):
        return pa.array([value] * n) if isinstance(value, str) else pa.array(np.full(n, value))
    if hasattr(value, "to_numpy") and hasattr(value, "dtype"):  # pandas Series
        import pandas as pd

        if isinstance(value.dtype, pd.CategoricalDtype):
            codes = value.cat.codes.to_numpy()
            return pa.DictionaryArray.from_arrays(
                pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(list(value.cat.categories))
            )
        if value.dtype == object:
            return _ObjectColumn(value.to_numpy(dtype=object))
        try:
            return pa.Array.from_pandas(value.reset_index(drop=True) if hasattr(value, "reset_index") else value)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise problem.column(name, f"cannot be read ({err})", "give a numpy or Arrow array") from None
    if isinstance(value, (list, tuple)):
        array = np.empty(len(value), dtype=object)
        array[:] = value
        if all(isinstance(v, str) for v in value):
            return pa.array(array, type=pa.string())
    else:
        array = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if array.dtype == object:
        return _ObjectColumn(array)
    if array.ndim != 1:
        raise problem.column(name, f"has shape {array.shape}", "give one value per row (a 1-D array)")
    if array.dtype.kind in "US":
        return pa.array(array.astype(object))
    try:
        return pa.array(array)
    except (pa.ArrowException, TypeError, ValueError) as err:
        raise problem.column(name, f"cannot be read ({err})", "give a numpy or Arrow array") from None


def _convert(value: Any, column: Column, n: int, problem: _Problem) -> pa.Array:
    if column.is_string:
        return _strings(value, column, n, problem)
    return _integers(_as_arrow(value, column.name, n, problem), column, problem)


def _fix_for(column: Column) -> str:
    return f"{column.name} holds integers" + (" nanoseconds" if column.unit == "ns" else "")


def _integers(array: Any, column: Column, problem: _Problem) -> pa.Array:
    fix = _fix_for(column)
    if isinstance(array, _ObjectColumn):
        array = _object_integers(array.values, column, problem, fix)
    kind = array.type
    if pa.types.is_null(kind):
        if column.nullable or len(array) == 0:
            return pa.nulls(len(array), column.arrow_type)
        raise problem.at(column.name, 0, "is null", f"{fix} and may not be null")
    if pa.types.is_boolean(kind):
        raise problem.column(column.name, "has boolean values", f"{fix}; convert it explicitly")
    if pa.types.is_dictionary(kind) or not pa.types.is_integer(kind):
        hint = "; convert with .round().astype('int64') if the values are whole numbers" if pa.types.is_floating(kind) else ""
        raise problem.column(column.name, f"has type {kind}", fix + hint)
    if array.null_count:
        if not column.nullable:
            nulls = array.is_null().to_numpy(zero_copy_only=False)
            raise problem.at(column.name, _first(nulls), "is null", f"{fix} and may not be null")
    if len(array) == 0:
        return pa.array([], type=column.arrow_type)
    low, high = _INT_BOUNDS[column.arrow_type]
    if column.minimum is not None:
        low = max(low, column.minimum)
    smallest, largest = pc.min_max(array).values()
    if smallest.is_valid and (smallest.as_py() < low or largest.as_py() > high):
        values = array.to_numpy(zero_copy_only=False) if not array.null_count else array.fill_null(low).to_numpy()
        bad = (values < low) | (values > high)
        position = _first(bad)
        if column.minimum is not None and values[position] < column.minimum:
            fix = f"{column.name} must be >= {column.minimum}" + (" (-1 means none)" if column.minimum == -1 else "")
        else:
            fix = f"{column.name} is {column.arrow_type} and must lie in [{low}, {high}]"
        raise problem.at(column.name, position, f"value {values[position]} is out of range", fix)
    if array.type != column.arrow_type:
        array = array.cast(column.arrow_type)
    return array


def _object_integers(values: np.ndarray, column: Column, problem: _Problem, fix: str) -> pa.Array:
    from pandas.api.types import infer_dtype  # a compiled scan, no Python loop per row

    if infer_dtype(values, skipna=True) in ("integer", "empty"):
        try:
            return pa.array(values, type=pa.int64(), from_pandas=True)
        except (pa.ArrowException, OverflowError):
            raise problem.column(column.name, "has a value outside the int64 range", fix) from None
    if column.nullable:
        good = [v is None or _is_int(v) or (isinstance(v, float) and np.isnan(v)) for v in values]
    else:
        good = [_is_int(v) for v in values]
    if not all(good):
        position = good.index(False)
        value = values[position]
        raise problem.at(column.name, position, f"has {value!r} ({type(value).__name__})", fix)
    try:
        return pa.array(values, type=pa.int64(), from_pandas=True)
    except (pa.ArrowException, OverflowError):
        raise problem.column(column.name, "has a value outside the int64 range", fix) from None


def _strings(value: Any, column: Column, n: int, problem: _Problem) -> pa.Array:
    fix = f"{column.name} holds text" + (" ('' for none)" if column.default == "" else "")
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value[0], str):
        codes = np.asarray(value[0])
        dictionary = value[1]
        if codes.dtype.kind not in "iu":
            raise problem.column(column.name, f"codes have dtype {codes.dtype}", "(codes, dictionary): codes are integers")
        try:
            dictionary = _combined(dictionary) if isinstance(dictionary, (pa.Array, pa.ChunkedArray)) else \
                pa.array(list(dictionary), type=pa.string())
        except (pa.ArrowException, TypeError) as err:
            raise problem.column(column.name, f"dictionary is not text ({err})", "(codes, dictionary): the dictionary holds str") from None
        if len(codes) and codes.min() == -1:  # -1: none, i.e. ""
            codes = np.where(codes == -1, len(dictionary), codes)
            dictionary = pa.concat_arrays([dictionary.cast(pa.string()), pa.array([""], pa.string())])
        if len(codes) and (codes.min() < 0 or codes.max() >= len(dictionary)):
            position = _first((codes < 0) | (codes >= len(dictionary)))
            raise problem.at(
                column.name, position, f"code {codes[position]} is outside the dictionary of {len(dictionary)} values",
                "(codes, dictionary): every code indexes the dictionary (or is -1 for '')",
            )
        array = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32, copy=False)), dictionary)
    else:
        array = _as_arrow(value, column.name, n, problem)
    if isinstance(array, _ObjectColumn):
        values = array.values
        try:
            array = pa.array(values, type=pa.string())
        except (pa.ArrowException, TypeError):
            position = next(i for i, v in enumerate(values) if not isinstance(v, str))
            raise problem.at(column.name, position, f"has {values[position]!r} ({type(values[position]).__name__})", fix) from None
    kind = array.type
    if pa.types.is_dictionary(kind):
        if not (pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)):
            raise problem.column(column.name, f"has type {kind}", fix)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        pass
    elif pa.types.is_null(kind) and len(array) == 0:
        array = pa.array([], type=pa.string())
    else:
        raise problem.column(column.name, f"has type {kind}", fix)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        raise problem.at(column.name, _first(nulls), "is null", fix)
    if not pa.types.is_dictionary(array.type):
        array = array.cast(pa.string()).dictionary_encode()
    dictionary = array.dictionary
    if dictionary.null_count or not pa.types.is_string(dictionary.type):
        dictionary = dictionary.cast(pa.string()).fill_null("")
    indices = array.indices
    if indices.type != pa.int32():
        indices = indices.cast(pa.int32())
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def _extension(value: Any, name: str, n: int, problem: _Problem) -> pa.Array:
    array = _as_arrow(value, name, n, problem)
    if isinstance(array, _ObjectColumn):
        try:
            array = pa.array(array.values, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise problem.column(name, f"cannot be stored ({err})", "an x_ column holds one Arrow type") from None
    return array


def _deps_input(columns: Mapping[str, Any], offsets: Any, values: Any, n: int, problem: _Problem) -> pa.Array:
    given = columns.get("deps")
    if offsets is not None or values is not None:
        if given is not None:
            raise problem.general("deps given twice (a deps column and deps_offsets/deps_values)", "give one of them")
        if offsets is None or values is None:
            raise problem.general("deps_offsets and deps_values come together", "give both (CSR) or neither")
        offsets = np.asarray(offsets)
        values = np.asarray(values)
        if values.size == 0:
            values = values.astype(np.int64)
        if offsets.dtype.kind not in "iu" or values.dtype.kind not in "iu":
            raise problem.column("deps", "deps_offsets/deps_values are not integers", "CSR arrays hold integers")
        if len(offsets) != n + 1:
            raise problem.column("deps", f"deps_offsets has {len(offsets)} entries for {n} rows", "CSR offsets have n + 1 entries")
        steps = np.diff(offsets)
        if len(offsets) and (offsets[0] < 0 or offsets[-1] > len(values) or (steps < 0).any()):
            position = _first(steps < 0) if (steps < 0).any() else 0
            raise problem.at(
                "deps", position, "deps_offsets is not a non-decreasing index into deps_values",
                "row i's deps are deps_values[deps_offsets[i]:deps_offsets[i+1]]",
            )
        if offsets[-1] > np.iinfo(np.int32).max:
            raise problem.column("deps", "more than 2**31 deps", "split the log")
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int64, copy=False)))
    if given is None:
        return pa.nulls(n, DEPS_TYPE)
    fix = "deps holds a list of row ids per row ([] for none, null if unknown)"
    array = given
    if isinstance(array, pa.ChunkedArray):
        array = _combined(array)
    if not isinstance(array, pa.Array):
        raw = array.values if isinstance(array, _ObjectColumn) else (
            array.to_numpy(dtype=object) if hasattr(array, "to_numpy") else list(array))
        items = [list(v) if isinstance(v, np.ndarray) else v for v in raw]
        try:
            array = pa.array(items, type=DEPS_TYPE, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            for position, v in enumerate(items):
                if not (v is None or (isinstance(v, (list, tuple)) and all(_is_int(x) for x in v))):
                    raise problem.at("deps", position, f"has {v!r}", fix) from None
            raise problem.column("deps", "has ids outside the int64 range", fix) from None
    kind = array.type
    if pa.types.is_null(kind):
        return pa.nulls(len(array), DEPS_TYPE)
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not (
        pa.types.is_integer(kind.value_type) or pa.types.is_null(kind.value_type)
    ):
        raise problem.column("deps", f"has type {kind}", fix)
    if len(array) != n:
        raise problem.column("deps", f"has {len(array)} rows, the log {n}", "one list per row")
    flat = pc.list_flatten(array)
    if flat.null_count:
        owners = pc.list_parent_indices(array).to_numpy()
        raise problem.at("deps", int(owners[_first(flat.is_null().to_numpy(zero_copy_only=False))]),
                         "has a null id", fix)
    return array.cast(DEPS_TYPE) if array.type != DEPS_TYPE else array


def _schema_with_extensions(arrays: Mapping[str, pa.Array]) -> pa.Schema:
    fields = [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in COLUMNS]
    fields += [pa.field(name, array.type) for name, array in arrays.items() if name not in COLUMN_BY_NAME]
    return pa.schema(fields)


def _metadata(metadata: Mapping[str, Any] | None, problem: _Problem) -> dict[str, Any]:
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise problem.general(f"metadata must be a dict, got {type(metadata).__name__}", "pass a JSON-able dict")
    out = dict(metadata)
    out["schema_version"] = SCHEMA_VERSION
    clocks = out.get("clocks")
    if clocks is not None:
        fix = 'clocks is {"<host>": {"offset_ns": <int>, "domain": "<name>"}}'
        if not isinstance(clocks, Mapping):
            raise problem.general(f"metadata 'clocks' is a {type(clocks).__name__}", fix)
        normal = {}
        for host, clock in clocks.items():
            try:
                host_number = int(host)
            except (TypeError, ValueError):
                host_number = -1
            if not 0 <= host_number < 1 << 31:
                raise problem.general(f"metadata 'clocks' has host {short_repr(host)}",
                                      fix + " with integer hosts >= 0") from None
            offset = clock.get("offset_ns", 0) if isinstance(clock, Mapping) else None
            if not _is_int(offset) or not abs(offset) <= _MAX_CLOCK_OFFSET_NS or not isinstance(
                clock.get("domain", ""), str
            ):
                raise problem.general(f"metadata 'clocks' entry for host {short_repr(host)} is {short_repr(clock)}",
                                      fix + " (|offset_ns| <= 2**62)")
            normal[str(host_number)] = {"offset_ns": int(clock.get("offset_ns", 0)), "domain": clock.get("domain", "")}
        out["clocks"] = normal
    return out


def _side_table(value: Any, spec: SideTable, source: str) -> pa.Table | None:
    if value is None:
        return None
    problem = _Problem(f"{source}, {spec.name} table")
    if isinstance(value, pa.Table):
        columns = {name: value.column(name) for name in value.column_names}
    elif isinstance(value, Mapping):
        columns = dict(value)
    elif type(value).__name__ == "DataFrame":
        columns = {str(name): value[name] for name in value.columns}
    else:
        raise problem.general(f"is a {type(value).__name__}", "give a pyarrow Table, a DataFrame or a dict of arrays")
    by_name = {c.name: c for c in spec.columns}
    unknown = [n for n in columns if n not in by_name and not n.startswith(EXTENSION_PREFIX)]
    if unknown:
        raise problem.general(
            f"unknown column(s) {unknown}",
            f"extra columns must be named '{EXTENSION_PREFIX}<name>' - {spec.name} columns are {list(by_name)}",
        )
    missing = [c.name for c in spec.columns if c.required and c.name not in columns]
    if missing:
        raise problem.general(f"missing column(s) {missing}", f"the {spec.name} table needs {[c.name for c in spec.columns if c.required]}")
    n = _row_count(columns, problem) if columns else 0
    arrays = {}
    for column in spec.columns:
        if column.name in columns:
            arrays[column.name] = _convert(columns[column.name], column, n, problem)
        elif spec.name == "flows" and column.name == "job":  # v2 and builders without it: tenant 0's flows are job 0's
            tenant = _combined(arrays["tenant"]).to_numpy(zero_copy_only=False)
            arrays[column.name] = pa.array(np.where(tenant == 0, 0, -1).astype(np.int32))
        else:
            arrays[column.name] = _constant(column, n)
    for name in columns:
        if name.startswith(EXTENSION_PREFIX):
            arrays[name] = _extension(columns[name], name, n, problem)
    fields = [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in spec.columns]
    fields += [pa.field(name, arrays[name].type) for name in arrays if name not in by_name]
    table = pa.Table.from_arrays(list(arrays.values()), schema=pa.schema(fields))
    if "start_ns" in by_name:
        start = _combined(table.column("start_ns")).to_numpy(zero_copy_only=False)
        end_array = _combined(table.column("end_ns"))
        finished = ~end_array.is_null().to_numpy(zero_copy_only=False)
        end = end_array.fill_null(0).to_numpy(zero_copy_only=False) if end_array.null_count else end_array.to_numpy(zero_copy_only=False)
        backwards = finished & (end < start)
        if backwards.any():
            position = _first(backwards)
            raise problem.at("end_ns", position, f"end_ns={end[position]} is before start_ns={start[position]}", "end_ns >= start_ns")
    if "src_host" in by_name:
        for rank, host in (("src", "src_host"), ("dst", "dst_host")):
            neither = (table.column(rank).to_numpy() < 0) & (table.column(host).to_numpy() < 0)
            if neither.any():
                raise problem.at(host, _first(neither), f"{rank} and {host} are both -1",
                                 f"a flow's ends need a rank ({rank}) or a host ({host})")
    return table


# --------------------------------------------------------------------------
# row checks (vectorised)


def _codes(log: EventLog, name: str) -> tuple[np.ndarray, np.ndarray]:
    return log.codes(name)


def _check_rows(log: EventLog, problem: _Problem, check_causality: bool) -> None:
    n = len(log)
    ids = log.table.column("id").to_numpy()
    problem.ids = ids
    for column in COLUMNS:
        if column.is_string and (column.choices is not None or column.non_empty):
            codes, dictionary = _codes(log, column.name)
            if column.choices is not None:
                bad_value = ~np.isin(dictionary, column.choices)
                what, fix = "unknown {} {!r}", f"{column.name} is one of {list(column.choices)}"
            else:
                bad_value = dictionary == ""
                what, fix = "empty {} {!r}", f"{column.name} names the operation (e.g. forward, push_request, a kernel)"
            if bad_value.any():
                bad = bad_value[codes]
                if bad.any():
                    position = _first(bad)
                    raise problem.at(column.name, position, what.format(column.name, dictionary[codes[position]]), fix)
    if n == 0:
        return
    lookup = _check_unique_ids(ids, problem)
    start = log.table.column("start_ns").to_numpy()
    end = log.table.column("end_ns").to_numpy()
    backwards = end < start
    if backwards.any():
        position = _first(backwards)
        raise problem.at("end_ns", position, f"end_ns={end[position]} is before start_ns={start[position]}",
                         "end_ns must be >= start_ns")
    ready_array = _combined(log.table.column("ready_ns"))
    if check_causality:
        ready = ready_array.fill_null(np.iinfo(np.int64).min).to_numpy() if ready_array.null_count else ready_array.to_numpy()
        early = start < ready
        if early.any():
            position = _first(early)
            raise problem.at("start_ns", position, f"start_ns={start[position]} is before ready_ns={ready[position]}",
                             "nothing starts before it is ready; set ready_ns <= start_ns (or null if unknown)")
    kind_codes, kind_dictionary = _codes(log, "kind")
    kind_index = _lookup(kind_dictionary, KINDS)[kind_codes]
    rank = log.table.column("rank").to_numpy()
    _check_roles_per_rank(log, rank, problem)
    _check_peers(log, kind_index, rank, problem)
    offset = host_offsets(log.metadata, log.table.column("host").to_numpy())
    _check_messages(log, kind_index, start, end, offset, problem)
    _check_groups(log, problem)
    _check_deps(log, ids, lookup, start, end, offset, problem, check_causality)


def _lookup(dictionary: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    """Index of each dictionary value in ``vocabulary`` (-1 if absent)."""
    position = {value: index for index, value in enumerate(vocabulary)}
    return np.array([position.get(value, -1) for value in dictionary], dtype=np.int64)


_SEND, _RECV = KINDS.index("send"), KINDS.index("recv")


def _dense(values: np.ndarray) -> bool:
    """Small non-negative integers: index tables beat sorting."""
    return len(values) > 0 and int(values.min()) >= 0 and int(values.max()) < 4 * len(values) + 1024


def _check_unique_ids(ids: np.ndarray, problem: _Problem) -> np.ndarray | None:
    """Checks ids are unique; returns id -> row position (-1: none) when ids are dense."""
    if _dense(ids):
        lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
        lookup[ids] = np.arange(len(ids))
        if (lookup >= 0).sum() == len(ids):
            return lookup
        # a duplicate: the first row whose id's slot holds a later row
        position = int(np.flatnonzero(lookup[ids] != np.arange(len(ids)))[0])
        raise problem.at("id", int(lookup[ids[position]]) if lookup[ids[position]] > position else position,
                         f"id {ids[position]} appears more than once", "ids must be unique")
    if len(ids) > 1 and np.all(ids[1:] > ids[:-1]):
        return None
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    same = ordered[1:] == ordered[:-1]
    if same.any():
        position = int(order[1:][same].min())
        raise problem.at("id", position, f"id {ids[position]} appears more than once", "ids must be unique")
    return None


def _check_roles_per_rank(log: EventLog, rank: np.ndarray, problem: _Problem) -> None:
    codes, dictionary = _codes(log, "role")
    role = _lookup(dictionary, ROLES)[codes]
    keys = rank.astype(np.int64) * len(ROLES) + role
    if _dense(rank):
        per_rank = (np.bincount(keys, minlength=(int(rank.max()) + 1) * len(ROLES)) > 0).reshape(-1, len(ROLES))
        if (per_rank.sum(axis=1) <= 1).all():
            return
    pairs, first_rows = np.unique(keys, return_index=True)
    ranks_of_pairs = pairs // len(ROLES)
    clash = ranks_of_pairs[1:] == ranks_of_pairs[:-1]
    if clash.any():
        at = _first(clash)
        bad_rank = int(ranks_of_pairs[at])
        roles = sorted(ROLES[int(k % len(ROLES))] for k in pairs[ranks_of_pairs == bad_rank])
        position = int(max(first_rows[at], first_rows[at + 1]))
        raise problem.at("role", position, f"rank {bad_rank} appears with roles {roles}", "each rank has exactly one role")


def _check_peers(log: EventLog, kind: np.ndarray, rank: np.ndarray, problem: _Problem) -> None:
    peer = log.table.column("peer").to_numpy()
    is_message = (kind == _SEND) | (kind == _RECV)
    no_peer = is_message & ((peer < 0) | (peer == rank))
    if no_peer.any():
        position = _first(no_peer)
        what = KINDS[kind[position]]
        other = "receiver" if what == "send" else "sender"
        raise problem.at("peer", position, f"{what} on rank {rank[position]} has peer {peer[position]}",
                         f"a {what}'s peer is its {other} rank, different from its own rank")
    stray = ~is_message & (peer != -1)
    if stray.any():
        position = _first(stray)
        raise problem.at("peer", position, f"peer {peer[position]} on a {KINDS[kind[position]]} row",
                         "peer is -1 except on send and recv rows")


def _check_messages(log, kind, start, end, offset, problem: _Problem) -> None:
    message = log.table.column("message").to_numpy()
    is_send, is_recv = kind == _SEND, kind == _RECV
    unnamed = (is_send | is_recv) & (message < 0)
    if unnamed.any():
        position = _first(unnamed)
        raise problem.at("message", position, f"{KINDS[kind[position]]} row has message {message[position]}",
                         "send and recv rows carry a message id >= 0 that joins a send to its recv rows")
    recv_rows = np.flatnonzero(is_recv)
    if not len(recv_rows):
        return
    send_rows = np.flatnonzero(is_send)
    if not len(send_rows):  # no send at all: the first recv has none (the lookups below need one send)
        _message_problems(np.zeros(len(recv_rows), dtype=bool), None, None, recv_rows, message, offset, problem)
    send_start = start[send_rows] if offset is None else start[send_rows] + offset[send_rows]
    recv_end = end[recv_rows] if offset is None else end[recv_rows] + offset[recv_rows]
    if _dense(message[send_rows]) and int(message[recv_rows].max()) < 4 * len(send_rows) + 1024:
        top = max(int(message[send_rows].max()), int(message[recv_rows].max())) + 1
        latest = np.full(top, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, message[send_rows], send_start)
        has_send = np.zeros(top, dtype=bool)
        has_send[message[send_rows]] = True
        found = has_send[message[recv_rows]]
        _message_problems(found, recv_end, latest[message[recv_rows]], recv_rows, message, offset, problem)
        return
    order = np.lexsort((send_start, message[send_rows]))
    send_messages = message[send_rows][order]
    # latest start of the sends of each message (aggregation: several sends)
    unique, last = np.unique(send_messages[::-1], return_index=True)
    latest_start = send_start[order][::-1][last]
    slot = np.searchsorted(unique, message[recv_rows]).clip(max=max(len(unique) - 1, 0))
    found = (unique[slot] == message[recv_rows]) if len(unique) else np.zeros(len(recv_rows), bool)
    _message_problems(found, recv_end, latest_start[slot], recv_rows, message, offset, problem)


def _message_problems(found, recv_end, send_start, recv_rows, message, offset, problem: _Problem) -> None:
    if not found.all():
        position = int(recv_rows[_first(~found)])
        raise problem.at("message", position, f"recv of message {message[position]} has no send row with that message",
                         "every recv row needs the send row of its message in the log")
    early = recv_end < send_start
    if early.any():
        at = _first(early)
        position = int(recv_rows[at])
        raise problem.at(
            "end_ns", position,
            f"recv of message {message[position]} ends at {recv_end[at]}, before its send starts at {send_start[at]}"
            + (" (clock offsets applied)" if offset is not None else ""),
            "a message is received after it is sent; check the hosts' clock offsets in metadata['clocks']",
        )


def _check_groups(log: EventLog, problem: _Problem) -> None:
    if log.groups is None:
        return
    group = log.table.column("group").to_numpy()
    known = np.unique(log.groups.column("group").to_numpy())
    used = group >= 0
    missing = used & ~np.isin(group, known)
    if missing.any():
        position = _first(missing)
        raise problem.at("group", position, f"group {group[position]} is not in the groups table",
                         "every group id used by a row has its tensors listed in the groups table")


def _check_deps(log, ids, lookup, start, end, offset, problem: _Problem, check_causality: bool) -> None:
    deps = _combined(log.table.column("deps"))
    targets = pc.list_flatten(deps).to_numpy()
    if not len(targets):
        return
    owners = pc.list_parent_indices(deps).to_numpy()
    n = len(ids)
    if lookup is not None:
        inside = (targets >= 0) & (targets < len(lookup))
        slots = lookup[np.where(inside, targets, 0)]
        found = inside & (slots >= 0)
    else:
        order = np.argsort(ids, kind="stable")
        position = np.searchsorted(ids[order], targets).clip(max=n - 1)
        found = ids[order][position] == targets
        slots = order[position]
    if not found.all():
        bad = _first(~found)
        raise problem.at("deps", int(owners[bad]), f"depends on id {targets[bad]}, which is not in the log",
                         "deps list ids of rows in this log")
    self_dep = slots == owners
    if self_dep.any():
        raise problem.at("deps", int(owners[_first(self_dep)]), "depends on itself", "remove its own id from deps")
    if not check_causality:
        return
    # deps hold every reason a row waited (graph edges, the stream it queued
    # on, a collective's rendezvous), so the bound is on the start.
    if offset is None:
        dep_end, owner_start = end[slots], start[owners]
    else:
        dep_end, owner_start = end[slots] + offset[slots], start[owners] + offset[owners]
    acausal = dep_end > owner_start
    if acausal.any():
        bad = _first(acausal)
        raise problem.at(
            "start_ns", int(owners[bad]),
            f"start_ns={start[owners[bad]]} but it depends on id {targets[bad]}, which ends at {end[slots[bad]]}"
            + (" (before clock offsets)" if offset is not None else ""),
            "a row starts only after every row in its deps has ended (start_ns >= their end_ns)",
        )


def rows_to_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Column lists for :func:`event_log_from_arrays` from row dicts that may each
    leave out optional columns (each missing value takes the column's default;
    ``host`` defaults to the row's rank, ``ready_ns`` and ``deps`` to unknown)."""
    columns: dict[str, list[Any]] = {}
    for column in COLUMNS:
        if not any(column.name in row for row in rows):
            continue
        if column.name == "host":
            columns["host"] = [row.get("host", row.get("rank")) for row in rows]
        else:
            columns[column.name] = [row.get(column.name, column.default) for row in rows]
    return columns


def iter_rows(log: EventLog, columns: Sequence[str] = COLUMN_NAMES) -> Iterable[Any]:
    """Rows of ``log`` as namedtuples of plain Python values (for exporters;
    nulls come as None)."""
    from collections import namedtuple

    row_type = namedtuple("Row", columns)  # type: ignore[misc]
    values = []
    for name in columns:
        array = _combined(log.table.column(name))
        values.append(column_values(array).tolist() if not array.null_count else array.to_pylist())
    return map(row_type._make, zip(*values))
