"""Per-rank capture files: rows appended as JSON lines while the job runs.

A rank's file starts with a header line (``{"header": {...}}``: rank, role,
host name, clock) and ends with ``{"end": {...}}`` when the rank closes its
recorder. Rows are handed to the operating system at every :meth:`RankRecorder.flush`
(the jobs call it once per iteration; no fsync there, which cost 5-10 ms per
iteration in the DDP overhead benchmark, so only a crash of the whole machine
can lose the last iteration's rows), so a rank that crashes or is killed leaves every
completed line readable: :mod:`.merge` drops at most a torn last line and
flags the rank as partial, never producing a corrupt log.

Ids are global without renumbering: row ``id`` and ``message`` ids are
``rank << 32 | sequence`` (the sender makes the message id and hands it to
the receiver with the message), so deps and messages may name rows of other
ranks. Times are ``time.monotonic_ns()``: one clock per host, shared by its
processes; hosts are aligned by the offsets in the header (see
:mod:`.clock`).

Nothing here imports torch. A row's JSON line is made by the engine
extension's encoder (``src/rows.rs``: the bytes ``json.dumps`` gives, encoded
in a third of the time Python's %-templates took, as the rows are formatted
inside the job the capture measures). A row is held as its parts (:meth:`RankRecorder.held_row`: as the
caller hands them over, for the PS capture's rows per RPC) and formatted when it is written, by one call of the
extension for all the rows held (``encode_rows``): at the next flush, or earlier when the job
calls :meth:`RankRecorder.idle` because it would wait anyway (the PS worker
while its responses are on their way: a quarter less capture cost with a
core per process, 2026-11-28, docs/capture-ps.md).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from .._core import encode_row, encode_rows

ID_SHIFT = 32
FILE_SUFFIX = ".rank.jsonl"
_PENDING_LINES = 1024  # rows held before they are written without a flush (a job that never flushes)
# field values held as they are until the row is formatted: none of them can change meanwhile (a row with any other
# value is formatted when it is recorded)
_HELD_AS_IS = frozenset({int, str, float, bool, type(None)})


def now_ns() -> int:
    """The capture clock: monotonic, nanoseconds, shared by the processes of one host."""
    return time.monotonic_ns()


def rank_file(out_dir: str | Path, rank: int) -> Path:
    return Path(out_dir) / f"{rank}{FILE_SUFFIX}"


class RankRecorder:
    """Appends one rank's rows to its file; safe to call from several threads.

    >>> rec = RankRecorder("run/", rank=0, role="worker")              # doctest: +SKIP
    >>> t0 = now_ns(); ...; rec.row("compute", "forward", t0, now_ns(), layer=3)  # doctest: +SKIP
    """

    def __init__(self, out_dir: str | Path, rank: int, role: str, *, host: Optional[str] = None, clock_offset_ns: int = 0,
                 meta: Optional[dict] = None):
        self.rank = int(rank)
        self.role = role
        self.path = rank_file(out_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._id_base = self.rank << ID_SHIFT
        self._message_seq = 0
        self._rows = 0
        self._before_close: list = []
        self._encode = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps's bytes, without a new encoder per row
        self._pending: list[str] = []  # rows formatted, written at the next flush (or when 1024 are held)
        self._file = open(self.path, "w", encoding="utf-8")
        header = {"rank": self.rank, "role": role, "host": host or socket.gethostname(), "pid": os.getpid(),
                  "clock": "monotonic_ns", "clock_offset_ns": int(clock_offset_ns), "started_ns": now_ns(),
                  "started_unix_ns": time.time_ns(),  # the wall clock: which of two captures ran first (plan --apply)
                  **(meta or {})}
        self._write({"header": header})
        self.flush()

    def _write(self, obj: dict) -> None:
        self._file.write(self._encode(obj) + "\n")

    def before_close(self, callback) -> None:
        """`callback()` runs when :meth:`close` is called, before the end mark (e.g. to write rows still held)."""
        self._before_close.append(callback)

    def new_id(self) -> int:
        return self._id_base | next(self._ids)  # itertools.count: atomic under the GIL, no lock needed

    def new_message(self) -> int:
        """A message id unique across ranks (this rank sends it)."""
        with self._lock:
            self._message_seq += 1
            return (self.rank << ID_SHIFT) | self._message_seq

    def row(self, kind: str, op: str, start_ns: int, end_ns: int, *, ready_ns: Optional[int] = None,
            deps: Optional[Iterable[int]] = (), row_id: Optional[int] = None, **fields: Any) -> int:
        """Records one row of this rank and returns its id. ``deps=None``: unknown. The row is written at the next
        :meth:`flush` (as a buffered file write would hold it until then) or :meth:`idle`, and formatted then: its
        deps are copied now, its fields' values are held as they are where they are ints, strings, floats, booleans
        or None (which cannot change meanwhile); a row with any other value is formatted now. A value json cannot
        encode raises where the row is written. (:meth:`held_row` is the same row for a caller that hands over its
        deps and fields as they are, in a fifth of the time.)"""
        rid = self._id_base | next(self._ids) if row_id is None else int(row_id)  # new_id(), without its call
        pending = self._pending  # never rebound: list.append is atomic, _write_pending takes rows off its front
        if deps is not None:
            deps = tuple(deps)
        if _HELD_AS_IS.issuperset(map(type, fields.values())):
            pending.append((kind, op, start_ns, end_ns, ready_ns, deps, rid, fields, None))
        else:
            pending.append(self.format_row(kind, op, start_ns, end_ns, ready_ns=ready_ns, deps=deps, row_id=rid,
                                           **fields))
        if len(pending) >= _PENDING_LINES:
            with self._lock:
                self._write_pending()
        return rid

    def held_row(self, kind: str, op: str, start_ns: int, end_ns: int, deps: list, fields: dict,
                 columns: Optional[dict] = None, row_id: Optional[int] = None) -> int:
        """:meth:`row` for the capture's hot paths (a PS worker's and server's rows per RPC): the same row, with the
        fields of `fields` and then those of `columns` (``row(kind, op, start_ns, end_ns, deps=deps, row_id=row_id,
        **fields, **columns)``), and the same line, but `deps`, `fields` and `columns` are held as they are until the
        row is formatted, neither copied nor checked: the caller hands them over and never changes them, and their
        values are ints, strings, floats, booleans or None (a dict of columns may be shared by many rows). No
        ``ready_ns``; a field named like a row key is written as :meth:`row` writes it. 0.6 us where :meth:`row` takes
        3.4 us with eight fields (``benchmarks/bench_recorder_rows.py``, 2-core machine, 2026-11-28), as no keyword
        arguments are packed and no value is checked."""
        rid = self._id_base | next(self._ids) if row_id is None else row_id
        pending = self._pending
        pending.append((kind, op, start_ns, end_ns, None, deps, rid, fields, columns))
        if len(pending) >= _PENDING_LINES:
            with self._lock:
                self._write_pending()
        return rid

    def format_row(self, kind: str, op: str, start_ns: int, end_ns: int, *, ready_ns: Optional[int] = None,
                   deps: Optional[Iterable[int]] = (), row_id: int, **fields: Any) -> str:
        """The JSON line (without its newline) that :meth:`row` writes for these arguments: the bytes of
        ``json.dumps`` (separators "," and ":") of ``{"id", "kind", "op", "start_ns", "end_ns", "deps"[, "ready_ns"],
        **fields}``, the times, ids and deps taken through ``int()``. The engine's encoder (``src/rows.rs``) writes
        json's bytes for ints, strings, None and booleans and hands every other value to json's encoder; a field named
        like a row key goes through :meth:`_general`."""
        return self._line(kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields, None)

    def _general(self, kind: str, op: str, start_ns: int, end_ns: int, ready_ns: Optional[int],
                 deps: Optional[Iterable[int]], row_id: int, fields: dict) -> str:
        """A row whose field is named like a row key: json's own encoder on the record (the field's value replaces
        the key's, in the key's place)."""
        record = {"id": int(row_id), "kind": kind, "op": op, "start_ns": int(start_ns), "end_ns": int(end_ns),
                  "deps": None if deps is None else [int(d) for d in deps]}
        if ready_ns is not None:
            record["ready_ns"] = int(ready_ns)
        record.update(fields)
        return self._encode(record)

    def _write_pending(self) -> None:
        """Formats and writes the rows held (the caller holds the lock). Takes them off the list's front in one step,
        so a row another thread appends meanwhile stays for the next write."""
        pending = self._pending
        n = len(pending)
        if n:
            held = pending[:n]
            del pending[:n]
            self._file.write(encode_rows(held, self._encode, self._line))
            self._rows += n

    def _line(self, kind: str, op: str, start_ns: int, end_ns: int, ready_ns: Optional[int],
              deps: Optional[Iterable[int]], row_id: int, fields: dict, columns: Optional[dict]) -> str:
        """A held row's JSON line (see :meth:`format_row`): its fields, then its columns (:meth:`held_row`). The
        extension's ``encode_rows`` writes the rows held in one call, and calls this for a row with a field named like
        a row key."""
        if columns is not None:
            fields = {**fields, **columns}
        return (encode_row(kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields, self._encode)
                or self._general(kind, op, start_ns, end_ns, ready_ns, deps, row_id, fields))

    def held(self) -> int:
        """How many rows are held, not yet formatted and written."""
        return len(self._pending)

    def idle(self) -> None:
        """The job would wait now (e.g. for a response): formats the rows held and hands them to the file's buffer,
        which the next :meth:`flush` hands to the operating system. Costs one length check when none are held."""
        if self._pending:
            with self._lock:
                self._write_pending()

    def write_lines(self, lines: list[str]) -> None:
        """Writes rows already formatted (one JSON line each, as :meth:`format_row` makes them) in one call, after
        the rows held."""
        if not lines:
            return
        with self._lock:
            self._write_pending()
            self._file.write("\n".join(lines) + "\n")
            self._rows += len(lines)

    def flush(self) -> None:
        with self._lock:
            self._write_pending()
            self._file.flush()

    def close(self, **summary: Any) -> None:
        """Writes what the :meth:`before_close` callbacks hold, then marks the file complete (a file without this
        mark is a partial trace)."""
        with self._lock:
            if self._file.closed:
                return
        callbacks, self._before_close = self._before_close, []
        for callback in callbacks:
            callback()
        with self._lock:
            if self._file.closed:
                return
            self._write_pending()
            self._write({"end": {"rows": self._rows, "ended_ns": now_ns(), **summary}})
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> "RankRecorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
        else:  # leave the file without its end mark: merge flags it as partial
            with self._lock:
                if not self._file.closed:
                    self._file.flush()
                    self._file.close()
