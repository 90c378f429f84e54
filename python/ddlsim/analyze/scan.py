"""Reading an event-log Parquet file piece by piece, for analyses whose
memory must not grow with the log.

:class:`EventLogFile` opens the file's footer only (schema, metadata, row
groups and their statistics) and hands out batches of the columns asked
for, row group by row group. With each batch comes a *watermark*: the
smallest ``start_ns`` (reference clock) any row after the batch can have,
taken from the row groups' ``start_ns`` statistics, so a streaming
aggregate can close whatever ends before it. :meth:`EventLogFile.slice`
reads the rows of one iteration (plus the rows their ``deps`` name) as an
in-memory :class:`~ddlsim.trace.EventLog`.

Rows are not validated here (that needs the whole log): the columns are
checked against the schema, and the schema version against this reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import TraceError

BATCH_ROWS = 262_144  # rows per batch: ~10 MB per int64 column read


class Batch:
    """Some consecutive rows of the file: columns as numpy (``str_mask`` for
    string tests on the dictionary codes), the row offset and the watermark."""

    def __init__(self, record_batch: Any, first_row: int, watermark: int | None, offsets: dict[int, int]):
        self.record_batch = record_batch
        self.first_row = first_row
        self.watermark = watermark  # None: no row follows
        self._offsets = offsets
        self._cache: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return self.record_batch.num_rows

    def column(self, name: str) -> np.ndarray:
        """An integer column as numpy, a string column decoded (object array),
        a nullable integer column as a MaskedArray (as ``EventLog.column``)."""
        if name not in self._cache:
            from ..trace.schema import column_values

            self._cache[name] = column_values(self.record_batch.column(name))
        return self._cache[name]

    def is_in(self, name: str, values: tuple[str, ...] | list[str]) -> np.ndarray:
        """Rows whose string column ``name`` is one of ``values`` (on the codes)."""
        import pyarrow as pa

        array = self.record_batch.column(name)
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        wanted = [i for i, v in enumerate(array.dictionary.to_pylist()) if v in values]
        return np.isin(array.indices.to_numpy(zero_copy_only=False), wanted)

    def aligned(self) -> tuple[np.ndarray, np.ndarray]:
        """(start_ns, end_ns) on the reference clock (as ``aligned_times``)."""
        if "a_start" not in self._cache:
            start, end = self.column("start_ns"), self.column("end_ns")
            offset = _row_offsets(self._offsets, self.column("host")) if self._offsets else None
            self._cache["a_start"] = start if offset is None else start + offset
            self._cache["a_end"] = end if offset is None else end + offset
        return self._cache["a_start"], self._cache["a_end"]


def _row_offsets(offsets: dict[int, int], hosts: np.ndarray) -> np.ndarray | None:
    from ..trace.schema import host_offsets

    return host_offsets({"clocks": {h: {"offset_ns": o} for h, o in offsets.items()}}, hosts)


class EventLogFile:
    """An event-log Parquet file, opened for streaming (see the module doc)."""

    def __init__(self, path: str | Path):
        import pyarrow.parquet as pq

        from ..trace.parquet import PARQUET_ERRORS, _check_version, _parse_metadata, event_log_file
        from ..trace.schema import COLUMNS, EXTENSION_PREFIX

        self.path = event_log_file(path)
        try:
            self.parquet = pq.ParquetFile(self.path)
        except PARQUET_ERRORS as err:
            raise TraceError(f"{self.path}: not a readable Parquet file ({err}); event logs are written by "
                             "ddlsim (simulate/capture) or ddlsim.trace.write_event_log") from None
        schema = self.parquet.schema_arrow
        raw = schema.metadata or {}
        self.metadata = _parse_metadata(raw, self.path)
        names = schema.names
        version = _check_version(raw, self.path, schema.empty_table())
        if version not in (2, 3):
            raise TraceError(f"{self.path}: event-log schema version {version}; streaming reads versions 2 and 3 only: "
                             "convert it with read_event_log + write_event_log, or analyse it in memory (--in-memory)")
        missing = [c.name for c in COLUMNS if c.name not in names and not (version == 2 and c.name == "job")]  # v2: one job
        unknown = [n for n in names if n not in {c.name for c in COLUMNS} and not n.startswith(EXTENSION_PREFIX)]
        if missing or unknown:
            raise TraceError(f"{self.path}: " + (f"missing column(s) {missing}" if missing else f"unknown column(s) {unknown}")
                             + "; an event log has the columns of docs/event-log.md (extensions named x_...)")
        self.metadata.setdefault("schema_version", version)
        clocks = self.metadata.get("clocks") or {}
        self.offsets = {int(h): int(c.get("offset_ns", 0)) for h, c in clocks.items() if int(c.get("offset_ns", 0))}
        self.num_rows = self.parquet.metadata.num_rows
        self._watermarks = self._row_group_watermarks()

    def _row_group_watermarks(self) -> list[int | None]:
        """Per row group: the least start_ns (reference clock, every clock's
        offset applied at its most negative) of it and all later groups;
        None when a group has no statistics (then nothing closes early)."""
        meta = self.parquet.metadata
        column = self.parquet.schema_arrow.get_field_index("start_ns")
        least_offset = min([0, *self.offsets.values()])
        mins: list[int | None] = []
        for index in range(meta.num_row_groups):
            group = meta.row_group(index)
            stats = group.column(column).statistics if group.num_rows else None
            if group.num_rows == 0:
                mins.append(np.iinfo(np.int64).max)
            elif stats is None or not stats.has_min_max:
                mins.append(None)
            else:
                mins.append(int(stats.min) + least_offset)
        out: list[int | None] = [None] * len(mins)
        running: int | None = np.iinfo(np.int64).max
        for index in range(len(mins) - 1, -1, -1):
            running = None if running is None or mins[index] is None else min(running, mins[index])
            out[index] = running
        return out

    def batches(self, columns: list[str], batch_rows: int = BATCH_ROWS, iteration: int | None = None) -> Iterator[Batch]:
        """The rows in file order, ``columns`` only, a batch at a time;
        ``iteration``: skip the row groups whose statistics say they hold no
        row of it (the batches then do not cover the file)."""
        first_row = 0
        groups = self.parquet.metadata.num_row_groups
        for index in range(groups):
            if iteration is not None and not self._may_hold(index, iteration):
                first_row += self.parquet.metadata.row_group(index).num_rows
                continue
            after = self._watermarks[index + 1] if index + 1 < groups else None
            pending = None
            # within a group the group's own minimum bounds what follows; after its last batch, the next groups'
            for record_batch in self.parquet.iter_batches(batch_size=batch_rows, row_groups=[index], columns=columns,
                                                          use_threads=False):
                if pending is not None:
                    yield Batch(pending, first_row, self._watermarks[index], self.offsets)
                    first_row += pending.num_rows
                pending = record_batch
            if pending is not None:
                last_group = index + 1 == groups
                yield Batch(pending, first_row, None if last_group else after, self.offsets)
                first_row += pending.num_rows

    def _may_hold(self, index: int, iteration: int) -> bool:
        group = self.parquet.metadata.row_group(index)
        stats = group.column(self.parquet.schema_arrow.get_field_index("iteration")).statistics
        return stats is None or not stats.has_min_max or stats.min <= iteration <= stats.max

    def slice(self, iteration: int, with_dependencies: bool = False):
        """The rows of ``iteration`` as an EventLog (file order, metadata kept,
        not validated); ``with_dependencies``: also the rows of other
        iterations that those rows' ``deps`` name (for a critical path)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from ..trace.schema import EventLog

        parts = []
        for batch in self.batches(self.parquet.schema_arrow.names, iteration=iteration):
            table = pa.Table.from_batches([batch.record_batch])
            parts.append(table.filter(pc.equal(table.column("iteration"), iteration)))
        table = _concat(parts, self.parquet.schema_arrow)
        if with_dependencies and table.num_rows:
            inside = table.column("id")
            wanted = pc.unique(pc.list_flatten(table.column("deps")))
            outside = pc.filter(wanted, pc.invert(pc.is_in(wanted, value_set=inside.combine_chunks())))
            if len(outside):
                extra = []
                for batch in self.batches(self.parquet.schema_arrow.names):
                    part = pa.Table.from_batches([batch.record_batch])
                    extra.append(part.filter(pc.is_in(part.column("id"), value_set=outside)))
                table = _concat([table, *extra], self.parquet.schema_arrow)
        return EventLog(table.replace_schema_metadata(None), dict(self.metadata))


def _concat(tables: list, schema: Any):
    import pyarrow as pa

    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    table = pa.concat_tables(tables, promote_options="permissive")
    return table.unify_dictionaries().combine_chunks()
