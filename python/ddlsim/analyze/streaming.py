"""The analyses of a large event-log Parquet file in bounded memory.

:class:`StreamedAnalysis` is an :class:`~ddlsim.analyze.Analysis` whose
whole-log tables are computed from the file read a batch at a time
(:mod:`ddlsim.analyze.scan`), with only the columns they need:

- pass 1: the iteration windows, the rank roles, SketchDLC's phases (first
  and last push, last pull, first row per worker and iteration) and the
  per-collective aggregates - all min / max / sum / count per key, merged
  batch by batch;
- pass 2: the per-rank, per-iteration compute / communication / overlap /
  idle breakdown. A rank's busy intervals are kept merged; a merged interval
  that ends before the batch's watermark (no later row starts before it) is
  closed and its coverage of each window added up. What is held is the
  merged intervals still open, which grows with the gaps in a rank's
  timeline at the log's disorder, not with its rows.

The results are the in-memory :class:`Analysis` results, exactly (integer
nanoseconds throughout; tests compare them on logs cut into small, shuffled
row groups). The analyses that need rows or whole-log state - critical path,
SketchDLC overheads and message sizes, per-RPC latency, connections, hot
keys, offload, the per-layer part of compare - run on one iteration (the
last by default, ``iteration=`` to choose) read into memory, and a note
says so. The critical path of that iteration also reads the rows its
``deps`` name in other iterations, so it is the in-memory one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .analysis import Analysis
from .breakdown import PARTS, covered, merge_intervals
from ..trace.parquet import event_log_file
from .scan import EventLogFile

STREAM_ABOVE_ROWS = 2_000_000  # `ddlsim analyze` streams Parquet logs with more rows than this (unless told)

_PASS1 = ["iteration", "rank", "role", "host", "kind", "op", "start_ns", "end_ns", "collective", "group", "coll_type",
          "algorithm", "bytes", "ready_ns"]
_PASS2 = ["rank", "host", "kind", "start_ns", "end_ns"]


def open_analysis(path: str | Path, *, stream: bool | None = None, iteration: int | None = None,
                  name: str | None = None) -> Analysis:
    """An Analysis of ``path``: streamed (:class:`StreamedAnalysis`) when
    ``stream`` is True, or when it is None and the Parquet file has more than
    :data:`STREAM_ABOVE_ROWS` rows or ``iteration`` is given; in memory
    otherwise (and always for SketchDLC traces)."""
    from ..arguments import path_arg

    path = path_arg(path, "path")
    if path.is_dir() or path.suffix == ".txt":
        if stream or iteration is not None:
            from ..errors import DdlsimError

            raise DdlsimError(f"{path}: SketchDLC traces are read in memory; --stream / --iteration need a Parquet event log")
        return Analysis(path, name=name)
    event_log_file(path)  # before any reader opens it: a FIFO would block pyarrow for ever
    if stream is None:
        stream = iteration is not None or _parquet_rows(path) > STREAM_ABOVE_ROWS
    return StreamedAnalysis(path, iteration=iteration, name=name) if stream else Analysis(path, name=name)


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    from ..trace.parquet import PARQUET_ERRORS

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except PARQUET_ERRORS:
        return 0  # let the in-memory reader name the problem


class _Pass1:
    """Everything the first pass over the file gathers (see the module doc)."""

    def __init__(self, log_file: EventLogFile):
        self.rows = 0
        self.first_start: int | None = None
        self.iteration_end: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.has_ps = False
        self.messages = self.messages_with_length = False
        phase_parts: dict[str, list] = {"ps_push": [], "ps_pull": [], "push": [], "pull": [], "first_row": []}
        collective_parts: dict[str, list] = {"rows": [], "rows_ranks": [], "steps": [], "steps_ranks": []}
        from ..trace.schema import PS_OPS

        for batch in log_file.batches(_PASS1):
            if not len(batch):
                continue
            self.rows += len(batch)
            start, end = batch.aligned()
            iteration, rank = batch.column("iteration"), batch.column("rank")
            least = int(start.min())
            self.first_start = least if self.first_start is None else min(self.first_start, least)
            has = iteration >= 0
            if has.any():
                numbers, inverse = np.unique(iteration[has], return_inverse=True)
                ends = np.full(len(numbers), np.iinfo(np.int64).min)
                np.maximum.at(ends, inverse, end[has])
                for number, value in zip(numbers.tolist(), ends.tolist()):
                    self.iteration_end[number] = max(value, self.iteration_end.get(number, value))
            ranks, first = np.unique(rank, return_index=True)
            roles = batch.column("role")
            for r, i in zip(ranks.tolist(), first.tolist()):
                self.roles.setdefault(r, str(roles[i]))
            raw_start, raw_end = batch.column("start_ns"), batch.column("end_ns")
            message = batch.is_in("kind", ("send", "recv", "collective"))
            self.messages |= bool(message.any())
            self.messages_with_length |= bool((raw_end[message] > raw_start[message]).any())
            send, recv = batch.is_in("kind", ("send",)), batch.is_in("kind", ("recv",))
            self.has_ps |= bool((batch.is_in("op", PS_OPS) & (send | recv)).any())
            # SketchDLC phases, both readings (PS ops, or sends / recvs / collectives); one is chosen at the end
            workers = batch.is_in("role", ("worker",)) & has
            collective = batch.is_in("kind", ("collective",))
            keyed = {"rank": rank, "iteration": iteration}
            phase_parts["ps_push"].append(_min_max(keyed, batch.is_in("op", ("push_request",)) & send, raw_start))
            phase_parts["ps_pull"].append(_max(keyed, batch.is_in("op", ("pull_response",)) & recv, raw_end))
            phase_parts["push"].append(_min_max(keyed, workers & (send | collective), raw_start))
            phase_parts["pull"].append(_max(keyed, workers & (recv | collective), raw_end))
            phase_parts["first_row"].append(_min(keyed, workers, raw_start))
            with_id = batch.column("collective") >= 0
            for label, mask in (("rows", with_id & collective), ("steps", with_id & send)):
                if mask.any():
                    frame, ranks_frame = _collective_batch(batch, mask)
                    collective_parts[label].append(frame)
                    collective_parts[f"{label}_ranks"].append(ranks_frame)
        self.phase_parts = phase_parts
        self.collective_parts = collective_parts

    def windows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :func:`ddlsim.analyze.breakdown.window_arrays`."""
        if not self.iteration_end:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        numbers = np.array(sorted(self.iteration_end), dtype=np.int64)
        ends = np.maximum.accumulate(np.array([self.iteration_end[n] for n in numbers.tolist()], dtype=np.int64))
        starts = np.concatenate([[int(self.first_start)], ends[:-1]]).astype(np.int64)
        return numbers, starts, ends


def _grouped(keyed: dict[str, np.ndarray], mask: np.ndarray, values: np.ndarray) -> Any:
    frame = pd.DataFrame({"rank": keyed["rank"][mask], "iteration": keyed["iteration"][mask], "t": values[mask]})
    return frame.groupby(["rank", "iteration"])["t"]


def _min_max(keyed, mask, values) -> pd.DataFrame:
    return _grouped(keyed, mask, values).agg(first_push="min", last_push="max")


def _max(keyed, mask, values) -> pd.Series:
    return _grouped(keyed, mask, values).max()


def _min(keyed, mask, values) -> pd.Series:
    return _grouped(keyed, mask, values).min()


def _collective_batch(batch, mask: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One batch's part of the per-collective aggregates: per collective the
    first row's fields, t0 / t1, queueing sum / count / max, largest bytes;
    per (collective, rank) the bytes sent."""
    start, end = batch.aligned()
    ready = batch.column("ready_ns")
    ready_known = ~np.ma.getmaskarray(ready)[mask] if isinstance(ready, np.ma.MaskedArray) else np.ones(int(mask.sum()), bool)
    queue = batch.column("start_ns")[mask] - np.asarray(np.ma.getdata(ready))[mask]
    f = pd.DataFrame({name: batch.column(name)[mask] for name in ("collective", "group", "iteration", "rank", "coll_type",
                                                                     "algorithm", "bytes")})
    f["a_start"], f["a_end"] = start[mask], end[mask]
    f["queue"] = np.where(ready_known, queue, 0)
    f["known"] = ready_known.astype(np.int64)
    f["queue_max"] = pd.arrays.IntegerArray(queue.astype(np.int64), ~ready_known)
    g = f.groupby("collective").agg(group=("group", "first"), iteration=("iteration", "first"),
                                    coll_type=("coll_type", "first"), algorithm=("algorithm", "first"),
                                    t0=("a_start", "min"), t1=("a_end", "max"), queue_sum=("queue", "sum"),
                                    queue_count=("known", "sum"), queue_max=("queue_max", "max"), bytes=("bytes", "max"))
    per_rank = f.groupby(["collective", "rank"])["bytes"].sum().rename("sent").reset_index()
    return g, per_rank


def _combine_collectives(parts: list[pd.DataFrame], rank_parts: list[pd.DataFrame], from_steps: bool) -> pd.DataFrame:
    """The batch parts merged into what ``Analysis._collective_aggregates`` returns."""
    from .analysis import BUS_FACTORS

    f = pd.concat(parts)
    g = f.groupby(level="collective").agg(group=("group", "first"), iteration=("iteration", "first"),
                                          coll_type=("coll_type", "first"), algorithm=("algorithm", "first"),
                                          t0=("t0", "min"), t1=("t1", "max"), queue_sum=("queue_sum", "sum"),
                                          queue_count=("queue_count", "sum"), queue_max=("queue_max", "max"),
                                          bytes=("bytes", "max"))
    sent = pd.concat(rank_parts).groupby(["collective", "rank"])["sent"].sum()
    g["ranks"] = sent.groupby(level="collective").size().reindex(g.index).astype(np.int64)
    count = g["queue_count"].to_numpy()
    mean = g["queue_sum"].to_numpy().astype(float) / np.where(count > 0, count, 1)
    g["queue_mean_ns"] = pd.array(np.where(count > 0, mean, 0.0), dtype="Float64")
    g.loc[count == 0, "queue_mean_ns"] = pd.NA
    g["queue_max_ns"] = g["queue_max"].astype("Float64")
    if from_steps:
        per_collective = sent.groupby(level="collective").max()
        n = g["ranks"].clip(lower=1)
        factor = np.array([BUS_FACTORS.get(t, lambda n: 1.0)(k) if k > 1 else 1.0 for t, k in zip(g["coll_type"], n)])
        g["bytes"] = (per_collective.reindex(g.index) / np.where(factor > 0, factor, 1)).round().astype(np.int64)
    return g.drop(columns=["queue_sum", "queue_count", "queue_max"])


def rank_iteration_arrays_streamed(log_file: EventLogFile, ranks: np.ndarray, roles: np.ndarray,
                                   windows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict:
    """As :func:`ddlsim.analyze.breakdown.rank_iteration_arrays`, from the
    file read a batch at a time (see the module doc)."""
    numbers, a, b = windows
    out = {part: np.zeros((len(ranks), len(numbers)), dtype=np.int64) for part in PARTS}
    totals = {"compute": np.zeros((len(ranks), len(numbers)), dtype=np.int64),
              "communication": np.zeros((len(ranks), len(numbers)), dtype=np.int64),
              "busy": np.zeros((len(ranks), len(numbers)), dtype=np.int64)}
    empty = np.zeros(0, dtype=np.int64)
    open_intervals = {(r, c): (empty, empty) for r in range(len(ranks)) for c in totals}

    def close(index: int, klass: str, starts: np.ndarray, ends: np.ndarray, watermark: int | None) -> None:
        s, e = merge_intervals(starts, ends)
        done = np.ones(len(s), dtype=bool) if watermark is None else e <= watermark
        if done.any() and len(numbers):
            totals[klass][index] += covered(s[done], e[done], a, b)
        open_intervals[index, klass] = (s[~done], e[~done])

    for batch in log_file.batches(_PASS2):
        if not len(batch):
            continue
        start, end = batch.aligned()
        compute = batch.is_in("kind", ("compute",))
        communication = batch.is_in("kind", ("send", "recv", "collective"))
        busy = compute | communication
        rows = np.flatnonzero(busy)
        index_of_row = np.searchsorted(ranks, batch.column("rank")[rows])
        order = np.argsort(index_of_row, kind="stable")
        rows, index_of_row = rows[order], index_of_row[order]
        bounds = np.searchsorted(index_of_row, np.arange(len(ranks) + 1))
        watermark = batch.watermark
        for index in range(len(ranks)):
            mine = rows[bounds[index]:bounds[index + 1]]
            for klass, mask in (("compute", compute), ("communication", communication), ("busy", busy)):
                held_s, held_e = open_intervals[index, klass]
                new = mine[mask[mine]]
                if not len(new) and not len(held_s):
                    continue
                close(index, klass, np.concatenate([held_s, start[new]]), np.concatenate([held_e, end[new]]), watermark)
    for (index, klass), (held_s, held_e) in list(open_intervals.items()):
        if len(held_s):
            close(index, klass, held_s, held_e, None)
    overlap = totals["compute"] + totals["communication"] - totals["busy"]
    out["compute_ns"] = totals["compute"]
    out["communication_ns"] = totals["communication"]
    out["overlap_ns"] = overlap
    out["exposed_communication_ns"] = totals["communication"] - overlap
    out["idle_ns"] = (b - a)[None, :] - totals["busy"] if len(ranks) else out["idle_ns"]
    out.update(ranks=ranks, roles=roles, iterations=numbers, start_ns=a, end_ns=b)
    return out


class StreamedAnalysis(Analysis):
    """The analyses of a large event-log Parquet file in bounded memory (see
    the module doc). ``iteration``: the iteration the row-level analyses
    read (default: the last)."""

    def __init__(self, path: str | Path, iteration: int | None = None, name: str | None = None):
        path = Path(path)
        self.file = EventLogFile(path)
        self.pass1 = _Pass1(self.file)
        numbers, starts, ends = self.pass1.windows()
        if iteration is None:
            iteration = int(numbers[-1]) if len(numbers) else None
        elif int(iteration) not in set(numbers.tolist()):
            from ..errors import DdlsimError

            shown = f"{int(numbers[0])}..{int(numbers[-1])}" if len(numbers) else "none"
            raise DdlsimError(f"{path}: no rows of iteration {iteration} (iterations in the log: {shown}); choose another --iteration")
        self.iteration = iteration
        if iteration is None:
            from ..trace.schema import empty_event_log

            log = empty_event_log(self.file.metadata)
        else:
            # read once: the iteration's rows and the rows their deps name (for the critical path)
            self._with_dependencies = self.file.slice(iteration, with_dependencies=True)
            log = self._with_dependencies.filter(self._with_dependencies.column("iteration") == iteration)
        super().__init__(log, name=name or (f"{path.parent.name}/{path.name}" if path.parent.name else path.name))
        if iteration is not None:
            self.notes.append(
                f"{self.name}: streamed: iterations, phases and collectives cover all {self.pass1.rows:,} rows; the critical "
                f"path, SketchDLC overheads, message sizes, RPC, connection, hot-key and offload tables and the per-layer "
                f"comparison cover iteration {iteration} only ({len(self.log):,} rows; --iteration chooses another)")

    def __repr__(self) -> str:
        return f"StreamedAnalysis({self.name!r}, {self.pass1.rows:,} rows, iteration {self.iteration})"

    @property
    def rows(self) -> int:
        return self.pass1.rows

    def _rank_arrays(self) -> dict:
        if "rank_arrays" not in self._cache:
            ranks = np.array(sorted(self.pass1.roles), dtype=np.int32)
            roles = np.array([self.pass1.roles[r] for r in ranks.tolist()], dtype=object)
            self._cache["rank_arrays"] = rank_iteration_arrays_streamed(self.file, ranks, roles, self.pass1.windows())
        return self._cache["rank_arrays"]

    def _windows(self) -> tuple[list[int], np.ndarray]:
        """The window of the slice's iteration, from the whole log."""
        numbers, starts, ends = self.pass1.windows()
        keep = numbers == self.iteration
        return [int(x) for x in numbers[keep]], np.stack([starts[keep], ends[keep]], axis=1)

    def _messages_are_point_records(self) -> bool:
        return self.pass1.messages and not self.pass1.messages_with_length

    def _phase_aggregates(self):
        parts = self.pass1.phase_parts
        push_key, pull_key = ("ps_push", "ps_pull") if self.pass1.has_ps else ("push", "pull")
        pushes = [p for p in parts[push_key] if len(p)]
        pulls = [p for p in parts[pull_key] if len(p)]
        if not pushes or not pulls:
            return None
        p = pd.concat(pushes).groupby(level=["rank", "iteration"]).agg(first_push=("first_push", "min"),
                                                                      last_push=("last_push", "max"))
        q = pd.concat(pulls).groupby(level=["rank", "iteration"]).max().rename("last_pull")
        rows = [p for p in parts["first_row"] if len(p)]
        first_row = (pd.concat(rows).groupby(level=["rank", "iteration"]).min() if rows
                     else pd.Series([], dtype=np.int64, index=pd.MultiIndex.from_arrays([[], []], names=["rank", "iteration"])))
        return p, q, first_row.rename("start_ns")

    def _collective_aggregates(self):
        parts = self.pass1.collective_parts
        if "collectives" not in self._cache:
            if parts["rows"]:
                g = _combine_collectives(parts["rows"], parts["rows_ranks"], from_steps=False)
            elif parts["steps"]:
                g = _combine_collectives(parts["steps"], parts["steps_ranks"], from_steps=True)
            else:
                g = None
            self._cache["collectives"] = g
        g = self._cache["collectives"]
        return None if g is None else g.copy()

    def _critical_path(self) -> pd.DataFrame:
        if self.iteration is None:
            return super()._critical_path()
        inner = Analysis(self._with_dependencies, name=self.name)
        inner._cache["windows"] = self._windows()
        path = inner.critical_path()
        its = sorted(set(int(x) for x in path["iteration"])) if len(path) else []
        stops = path.attrs.get("stops", [])
        frame = path[path["iteration"] == self.iteration].reset_index(drop=True)
        frame.attrs["stops"] = [stop for it, stop in zip(its, stops) if it == self.iteration]
        note = None
        if any(s.startswith("deps unknown") for s in frame.attrs["stops"]):
            note = (f"{self.name}: the critical path of 1 iteration(s) stops at a row whose deps are unknown (null); "
                    "the path shown is the part the log records")
        return self._note(frame, note)

    def headline(self, t_window_ns: int = 1_000_000, switch_memory_bytes: int | None = None,
                 fct_window: tuple[int, int] = (0, 0)) -> dict[str, Any]:
        out = super().headline(t_window_ns, switch_memory_bytes, fct_window)
        roles = list(self.pass1.roles.values())
        out.update(rows=self.pass1.rows, workers=roles.count("worker"), servers=roles.count("server"))
        out["streamed"] = {"row_level_iteration": self.iteration, "row_level_rows": len(self.log)}
        if self.notes:
            out["notes"] = list(self.notes)
        return out
