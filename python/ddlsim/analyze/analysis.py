"""One object, one method per analysis, each returning a pandas DataFrame.

``Analysis(log)`` takes an :class:`ddlsim.trace.EventLog` (simulated or
captured: the analyses cannot tell them apart) or the path of an event-log
Parquet file. Every method returns a DataFrame a person keeps working with
in a notebook; where the log cannot answer (no PS rows, one iteration,
unknown deps) the frame is empty or partial and ``frame.attrs["note"]`` says
why (the same sentence is kept in ``Analysis.notes``) - never an exception.

Definitions (details in each method's docstring):

- SketchDLC (Xu et al., section 6): the eight operations are the send and
  recv rows of ``push_request``, ``push_response``, ``pull_request``,
  ``pull_response``; a Send record's time is its row's ``start_ns``, a
  Recv record's its row's ``end_ns`` (as in ``to_sketchdlc``).
- RPC paper (Pan et al., IMC '20, sections 3-4): the per-RPC breakdown of
  :func:`ddlsim.analyze.rpc_table`, intervals, concurrent connections per PS
  per window, hot-parameter skew, in-network offload estimate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..trace.schema import EventLog, as_event_log
from .breakdown import breakdown_mask, collective_iterations, iteration_arrays, iteration_mean, rank_iteration_arrays
from .rpc import rpc_table

US = 1e3  # ns per microsecond

# SketchDLC's eight operations: (op, kind, role of the row's rank) -> name
OPERATIONS = {
    ("push_request", "send"): "Push_Send_Worker",
    ("push_request", "recv"): "Push_Recv_Server",
    ("push_response", "send"): "Push_Send_Server",
    ("push_response", "recv"): "Push_Recv_Worker",
    ("pull_request", "send"): "Pull_Send_Worker",
    ("pull_request", "recv"): "Pull_Recv_Server",
    ("pull_response", "send"): "Pull_Send_Server",
    ("pull_response", "recv"): "Pull_Recv_Worker",
}
OVERHEADS = ("computation", "search", "update", "synchronization", "wait")
# bus bandwidth = algorithm bandwidth x this factor (n ranks), as nccl-tests report it
BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
_STRINGS = {"role", "kind", "op", "name", "stream", "device", "coll_type", "algorithm"}


#: the most windows `concurrent_connections` lists with their zeros (beyond: the windows with requests only)
MAX_CONNECTION_WINDOWS = 1_000_000


def _noted(frame: pd.DataFrame, note: str | None) -> pd.DataFrame:
    if note:
        frame.attrs["note"] = note
    return frame


def cdf(values: Any, name: str = "value") -> pd.DataFrame:
    """Empirical CDF: the sorted values and the fraction of values <= each."""
    v = np.sort(np.asarray(pd.Series(values).dropna(), dtype=float))
    return pd.DataFrame({name: v, "fraction": np.arange(1, len(v) + 1) / max(len(v), 1)})


EXPAND_CLASSES_ROWS = 2_000_000  # a rank-class log with at most this many per-rank rows is analysed expanded


class Analysis:
    """The analyses of one event log (see the module docstring). ``log``: an
    EventLog, anything :func:`ddlsim.trace.as_event_log` takes, the path of
    an event-log Parquet file, or a directory / ``.txt`` file of SketchDLC
    per-node traces (``w0.txt``, ``s0.txt``...)."""

    def __init__(self, log: EventLog | str | Path | Any, name: str | None = None):
        if isinstance(log, (str, Path)):
            path = Path(log)
            name = name or (f"{path.parent.name}/{path.name}" if path.parent.name else path.name)
            if path.is_dir() or path.suffix == ".txt":  # SketchDLC per-node traces (a capture)
                from ..trace.sketchdlc import read_sketchdlc

                log = read_sketchdlc(path)
            else:
                from ..trace.parquet import read_event_log

                log = read_event_log(path)
        self.log = as_event_log(log)
        self.name = name or str(self.log.metadata.get("source", "log"))
        self.notes: list[str] = []
        self._cache: dict[str, Any] = {}
        self._expand_rank_classes()
        self._note_sampled_layers()

    def _note_sampled_layers(self) -> None:
        """A capture with sampled layer rows (``capture ddp --layer-every K``) says so: its other iterations' compute
        is each pass as one row, framework gaps included, where the sampled ones count the layers' rows only."""
        every, sampled = self.log.metadata.get("layer_every"), self.log.metadata.get("layer_iterations")
        if isinstance(every, int) and every > 1 and isinstance(sampled, list):
            shown = ", ".join(str(i) for i in sampled[:8]) + (", ..." if len(sampled) > 8 else "")
            self.notes.append(f"layer rows on {len(sampled)} iterations only ({shown}; --layer-every {every}); in the "
                              "others compute is the forward and the backward pass as one row each, the gaps between "
                              "layers included (idle in the sampled iterations)")
        carried = collective_iterations(self.log.metadata)
        if carried is not None:
            shown = ", ".join(str(i) for i in sorted(carried)[:8]) + (", ..." if len(carried) > 8 else "")
            self.notes.append(f"all-reduce rows on {len(carried)} iterations only ({shown}); the others ran DDP's own "
                              "all-reduce, unrecorded: the breakdown of compute and communication, the critical path, "
                              "the collectives and the bucket tables are over the iterations with all-reduce rows, the "
                              "iteration time over every counted iteration")

    def _expand_rank_classes(self) -> None:
        """A log of rank classes (ddlsim.trace.classes) is analysed as the
        per-rank log it stands for, so that every per-rank count is the
        per-rank run's; above EXPAND_CLASSES_ROWS rows it stays one rank per
        class (the iteration breakdown is weighted by class size)."""
        from ..trace.classes import KEY, expand

        info = self.log.metadata.get(KEY)
        if not info:
            return
        sizes = np.asarray(info["sizes"], dtype=np.int64)
        if "class_size" in self.log.column_names:
            rows = int(self.log.column("class_size").astype(np.int64).sum())
        else:
            rows = len(self.log)
        if rows <= EXPAND_CLASSES_ROWS:
            self.log = expand(self.log)
            self.notes.append(f"rank classes: {len(sizes):,} classes of {int(sizes.sum()):,} workers expanded to "
                              f"{len(self.log):,} per-rank rows for the analysis")
        else:
            self.notes.append(f"rank classes: {len(sizes):,} classes of {int(sizes.sum()):,} workers, one rank per "
                              f"class analysed ({rows:,} per-rank rows would be over {EXPAND_CLASSES_ROWS:,}); "
                              "per-rank tables list each class's representative")

    def __repr__(self) -> str:
        return f"Analysis({self.name!r}, {len(self.log):,} rows)"

    # ------------------------------------------------------------ helpers
    def _note(self, frame: pd.DataFrame, note: str | None) -> pd.DataFrame:
        if note and note not in self.notes:
            self.notes.append(note)
        return _noted(frame, note)

    def _col(self, name: str) -> np.ndarray:
        """A column as numpy (strings decoded once, cached)."""
        key = "col:" + name
        if key not in self._cache:
            if name in _STRINGS:
                codes, dictionary = self.log.codes(name)
                values = dictionary[codes] if len(dictionary) else np.full(len(codes), "", dtype=object)
            elif name == "ready_ns":
                values = self.log.column("ready_ns")
            else:
                values = self.log.column(name)
            self._cache[key] = values
        return self._cache[key]

    def _rank_arrays(self) -> dict:
        if "rank_arrays" not in self._cache:
            self._cache["rank_arrays"] = rank_iteration_arrays(self.log)
        return self._cache["rank_arrays"]

    def _iteration_arrays(self) -> dict:
        if "iteration_arrays" not in self._cache:
            self._cache["iteration_arrays"] = iteration_arrays(self.log, self._rank_arrays())
        return self._cache["iteration_arrays"]

    def _aligned(self) -> tuple[np.ndarray, np.ndarray]:
        if "aligned" not in self._cache:
            from ..trace.schema import aligned_times

            self._cache["aligned"] = aligned_times(self.log)
        return self._cache["aligned"]

    def _mask(self, column: str, values: tuple[str, ...] | list[str]) -> np.ndarray:
        codes, dictionary = self.log.codes(column)
        wanted = [i for i, v in enumerate(dictionary) if v in values]
        return np.isin(codes, wanted)

    def _frame(self, mask: np.ndarray, columns: list[str]) -> pd.DataFrame:
        data = {}
        for c in columns:
            if c == "a_start":
                data[c] = self._aligned()[0][mask]
            elif c == "a_end":
                data[c] = self._aligned()[1][mask]
            elif c == "ready_ns":
                ready = self._col("ready_ns")
                if isinstance(ready, np.ma.MaskedArray):
                    data[c] = pd.arrays.IntegerArray(ready.data[mask].astype(np.int64), np.ma.getmaskarray(ready)[mask])
                else:
                    data[c] = pd.array(ready[mask].astype(np.int64), dtype="Int64")
            else:
                data[c] = self._col(c)[mask]
        return pd.DataFrame(data)

    def _ps_rows(self) -> pd.DataFrame:
        """The send/recv rows of the PS ops, with their SketchDLC operation
        name and record time (send: start, recv: end; the row's own clock)."""
        if "ps" not in self._cache:
            mask = self._mask("op", tuple(op for op, _ in OPERATIONS)) & self._mask("kind", ("send", "recv"))
            rows = self._frame(mask, ["id", "iteration", "rank", "role", "kind", "op", "name", "tensor", "peer",
                                      "message", "bytes", "rpc", "start_ns", "end_ns", "a_start", "a_end"])
            rows["operation"] = [OPERATIONS[(o, k)] for o, k in zip(rows["op"], rows["kind"])] if len(rows) else []
            rows["time_ns"] = np.where(rows["kind"].to_numpy() == "send", rows["start_ns"], rows["end_ns"])
            self._cache["ps"] = rows
        return self._cache["ps"]

    def _no_ps(self) -> str:
        return (f"{self.name}: no parameter-server rows (send/recv rows of push_request, push_response, pull_request, "
                "pull_response); the SketchDLC and RPC analyses need a PS log")

    # ---------------------------------------------------- several jobs (docs/jobs.md)
    def jobs(self) -> pd.DataFrame:
        """Per job of a log of several jobs: iteration time with the others, alone and the slowdown, placement
        and shared links (:func:`ddlsim.analyze.jobs.job_table`); empty for a log of one job."""
        from .jobs import job_table

        table = job_table(self.log)
        if len(table):
            self._note(table, f"{self.name}: the log holds {len(table)} jobs (docs/jobs.md); the whole-log iteration "
                              "numbers mix them: read the per-job table (jobs)")
            if hasattr(self, "file"):  # streamed: self.log is one iteration's rows
                self._note(table, f"{self.name}: streamed, so the per-job table covers the rows of one iteration "
                                  "(--iteration); analyse in memory (--in-memory) for every iteration of every job")
        return table

    def job_contention(self) -> pd.DataFrame:
        """Per link that carried flows of two or more jobs and per owner: bytes, flows, busy and shared time."""
        from .jobs import contention_frame

        return contention_frame(self.log.metadata.get("contention") or [],
                                {int(m["job"]): m["name"] for m in self.log.metadata.get("jobs") or []})

    # ---------------------------------------------------- iterations
    def iterations(self) -> pd.DataFrame:
        """Per iteration and rank, then the mean over workers (rank -1, role
        ``mean``): window, time and breakdown in seconds (compute,
        communication, overlap, exposed communication, idle; see
        :mod:`ddlsim.analyze.breakdown`), the overlap ratio (overlap / time),
        and SketchDLC's phases 1-3 and overlap ratio for workers
        (:meth:`phases`)."""
        if "iterations" not in self._cache:
            self._cache["iterations"] = self._iterations()
        return self._cache["iterations"].copy()

    def _iterations(self) -> pd.DataFrame:
        arrays = self._rank_arrays()
        iterations = arrays["iterations"]
        if not len(iterations):
            return self._note(pd.DataFrame(columns=["iteration", "rank", "role", "time_s"]),
                              f"{self.name}: no row has an iteration number (iteration >= 0); no iteration table")
        r, i = len(arrays["ranks"]), len(iterations)
        time_ns = arrays["end_ns"] - arrays["start_ns"]
        per_rank = pd.DataFrame({
            "iteration": np.tile(iterations.astype(int), r),
            "rank": np.repeat(arrays["ranks"].astype(int), i),
            "role": np.repeat(arrays["roles"], i),
            "start_s": np.tile(arrays["start_ns"], r) / 1e9,
            "time_s": np.tile(time_ns, r) / 1e9,
            **{p.replace("_ns", "_s"): arrays[p].reshape(-1) / 1e9
               for p in ("compute_ns", "communication_ns", "overlap_ns", "exposed_communication_ns", "idle_ns")},
        })
        per_rank["overlap_ratio"] = np.where(per_rank["time_s"] > 0, per_rank["overlap_s"] / per_rank["time_s"].where(
            per_rank["time_s"] > 0, 1), 0.0)
        mean = pd.DataFrame(self._iteration_arrays()).drop(columns=["end_s"])
        mean.insert(1, "rank", -1)
        mean.insert(2, "role", "mean")
        phases = self.phases()
        frame = pd.concat([per_rank, mean], ignore_index=True)
        if len(phases):
            cols = ["phase1_s", "phase2_s", "phase3_s", "sketchdlc_overlap_ratio"]
            means = phases.groupby("iteration")[cols].mean().reset_index().assign(rank=-1)
            both = pd.concat([phases[["iteration", "rank", *cols]], means], ignore_index=True)
            frame = frame.merge(both, on=["iteration", "rank"], how="left")
        frame = frame.sort_values(["iteration", "rank"], kind="stable").reset_index(drop=True)
        notes = []
        if i == 1:
            notes.append(f"{self.name}: one iteration only; no iteration-to-iteration variation, and SketchDLC phase 1 "
                         "uses the worker's first row")
        if self._messages_are_point_records():
            notes.append(f"{self.name}: every message row is a point record (start = end, as in SketchDLC traces); "
                         "communication time is 0 in the breakdown: use SketchDLC's phases and overheads")
        return self._note(frame, "; ".join(notes) or None)

    def _messages_are_point_records(self) -> bool:
        """True if the log has message rows and every one has start = end."""
        comm = self._mask("kind", ("send", "recv", "collective"))
        return bool(comm.any() and not (self._col("end_ns")[comm] > self._col("start_ns")[comm]).any())

    def phases(self) -> pd.DataFrame:
        """SketchDLC's three phases per worker and iteration (Fig. 5, section 5.3.1):
        phase 1 = first Push_Send_Worker(i) - last Pull_Recv_Worker(i-1) (for
        the first iteration: from the worker's first row); phase 2 = last -
        first Push_Send_Worker(i); phase 3 = last Pull_Recv_Worker(i) - first
        Push_Send_Worker(i); overlap ratio = phase 2 / (phase 1 + phase 3).
        In a log without PS ops, the worker's sends and collectives stand for
        Push_Send_Worker and the ends of its recvs and collectives for
        Pull_Recv_Worker."""
        if "phases" in self._cache:
            return self._cache["phases"].copy()
        aggregates = self._phase_aggregates()
        if aggregates is None:
            out = pd.DataFrame(columns=["iteration", "rank", "phase1_s", "phase2_s", "phase3_s", "sketchdlc_overlap_ratio"])
            self._cache["phases"] = out
            return out
        p, q, first_row = aggregates
        t = p.join(q, how="inner").join(first_row.rename("first_row"), how="left").reset_index()
        t = t.sort_values(["rank", "iteration"])
        previous = t.groupby("rank")["last_pull"].shift(1)
        begin = previous.where(previous.notna() & (t["iteration"] == t.groupby("rank")["iteration"].shift(1) + 1),
                               t["first_row"])
        t["phase1_s"] = (t["first_push"] - begin) / 1e9
        t["phase2_s"] = (t["last_push"] - t["first_push"]) / 1e9
        t["phase3_s"] = (t["last_pull"] - t["first_push"]) / 1e9
        total = t["phase1_s"] + t["phase3_s"]
        t["sketchdlc_overlap_ratio"] = (t["phase2_s"] / total.where(total > 0)).astype(float)
        out = t[["iteration", "rank", "phase1_s", "phase2_s", "phase3_s", "sketchdlc_overlap_ratio"]].reset_index(drop=True)
        out["iteration"] = out["iteration"].astype(int)
        out["rank"] = out["rank"].astype(int)
        self._cache["phases"] = out
        return out

    def _phase_aggregates(self) -> tuple[pd.DataFrame, pd.Series, pd.Series] | None:
        """Per (rank, iteration): first and last push (frame), last pull and
        the worker's first row start (series); None if no push or pull."""
        ps = self._ps_rows()
        workers = self._mask("role", ("worker",)) & (self._col("iteration") >= 0)
        if len(ps):
            push = ps[ps.operation == "Push_Send_Worker"].rename(columns={"time_ns": "t"})
            pull = ps[ps.operation == "Pull_Recv_Worker"].rename(columns={"time_ns": "t"})
        else:
            send = self._frame(workers & self._mask("kind", ("send", "collective")), ["iteration", "rank", "start_ns"])
            recv = self._frame(workers & self._mask("kind", ("recv", "collective")), ["iteration", "rank", "end_ns"])
            push, pull = send.rename(columns={"start_ns": "t"}), recv.rename(columns={"end_ns": "t"})
        if push.empty or pull.empty:
            return None
        p = push.groupby(["rank", "iteration"])["t"].agg(first_push="min", last_push="max")
        q = pull.groupby(["rank", "iteration"])["t"].max().rename("last_pull")
        first_row = self._frame(workers, ["rank", "iteration", "start_ns"]).groupby(["rank", "iteration"])["start_ns"].min()
        return p, q, first_row

    # ---------------------------------------------------- critical path
    def critical_path(self) -> pd.DataFrame:
        """Per iteration, the chain of rows that set its end: from the row
        that ends last (reference clock) walk the recorded ``deps`` back,
        each time to the dependency that finished last (the one the row
        waited for), until a row with no deps, unknown deps (null) or a row of
        an earlier iteration. One row per step, first on the path first:
        the row's fields, its duration, ``wait_ns`` (its start - the end of
        the dependency it waited for: queueing on its stream or link) and
        ``share`` of the iteration time."""
        if "critical_path" not in self._cache:
            self._cache["critical_path"] = self._critical_path()
        return self._cache["critical_path"].copy()  # a copy: the caller may change it

    def _critical_path(self) -> pd.DataFrame:
        start, end = self._aligned()
        iteration = self._col("iteration")
        ids = self._col("id")
        if not (iteration >= 0).any():
            return self._note(pd.DataFrame(columns=["iteration", "step", "id"]),
                              f"{self.name}: no row has an iteration number; no critical path")
        deps = self.log.table.column("deps")
        deps = deps.combine_chunks() if isinstance(deps, pa.ChunkedArray) else deps
        offsets = deps.offsets.to_numpy()
        values = deps.values.to_numpy()
        unknown = deps.is_null().to_numpy(zero_copy_only=False)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        its = np.unique(iteration[iteration >= 0])
        # last-ending row of each iteration (ties: the larger id); a marker spanning the iteration (a capture's
        # iteration marker) marks time and waits for nothing, so the path starts from the last real operation
        kind = self._col("kind")
        operations = (iteration >= 0) & (kind != "marker")
        sel = np.flatnonzero(operations if np.isin(its, iteration[operations]).all() else iteration >= 0)
        key = np.lexsort((ids[sel], end[sel], iteration[sel]))
        last = sel[key][np.append(np.flatnonzero(np.diff(iteration[sel][key])), len(sel) - 1)]
        windows = dict(zip(*self._windows()))
        # A recv row that records no deps (a capture's: the message joins it to its send) waited for its message:
        # the path goes on at the latest-ending send of that message, which may be on another rank.
        message = self._col("message")
        sends = np.flatnonzero((kind == "send") & (message >= 0))
        sender_of: dict[int, int] = {}
        for i in sends[np.argsort(end[sends], kind="stable")]:
            sender_of[int(message[i])] = int(i)
        records, stops = [], []
        for it, row in zip(its, last):
            path, waits, reason = [], [], "row with no dependencies"
            seen = set()
            while True:
                path.append(row)
                seen.add(row)
                if unknown[row]:
                    reason = "deps unknown (null)"
                    waits.append(np.nan)
                    break
                targets = values[offsets[row]:offsets[row + 1]]
                slot = np.searchsorted(sorted_ids, targets).clip(max=len(ids) - 1)
                found = order[slot][sorted_ids[slot] == targets]
                if not len(targets) and kind[row] == "recv" and int(message[row]) in sender_of:
                    found = np.array([sender_of[int(message[row])]])
                if not len(found):
                    waits.append(np.nan)
                    break
                gate = found[np.argmax(end[found])]
                waits.append(float(start[row] - end[gate]))
                if iteration[gate] != it and iteration[gate] >= 0:
                    reason = f"dependency {int(ids[gate])} is in iteration {int(iteration[gate])}"
                    break
                if gate in seen:
                    reason = "cycle in deps"
                    break
                row = gate
            stops.append(reason)
            window = windows.get(int(it), (start[path[-1]], end[path[0]]))
            length = max(int(window[1] - window[0]), 1)
            for step, (r, w) in enumerate(zip(reversed(path), reversed(waits))):
                records.append((int(it), step, r, w, length))
        if not records:
            return pd.DataFrame(columns=["iteration", "step", "id"])
        it_, step_, rows, waits, lengths = (np.array(x) for x in zip(*records))
        mask = np.zeros(len(ids), dtype=bool)
        frame = pd.DataFrame({"iteration": it_, "step": step_})
        for c in ("id", "rank", "role", "kind", "op", "name", "layer", "tensor", "group"):
            frame[c] = self._col(c)[rows]
        frame["start_ns"] = start[rows]
        frame["end_ns"] = end[rows]
        frame["duration_ns"] = end[rows] - start[rows]
        frame["wait_ns"] = pd.array(np.nan_to_num(waits).astype(np.int64), dtype="Int64")
        frame.loc[np.isnan(waits), "wait_ns"] = pd.NA
        frame["share"] = frame["duration_ns"] / lengths
        del mask
        note = None
        unknown_stops = [s for s in stops if s.startswith("deps unknown")]
        if unknown_stops:
            note = (f"{self.name}: the critical path of {len(unknown_stops)} iteration(s) stops at a row whose deps are "
                    "unknown (null); the path shown is the part the log records")
        frame.attrs["stops"] = stops
        return self._note(frame, note)

    def critical_path_summary(self, top: int = 10) -> pd.DataFrame:
        """The rows on the critical paths grouped by (kind, op, name): total
        time on the path, share of all iteration time, count."""
        path = self.critical_path()
        if path.empty:
            return _noted(pd.DataFrame(columns=["kind", "op", "name", "time_ns", "share", "count"]),
                          path.attrs.get("note"))
        windows = self._windows()
        spans = windows[1][:, 1] - windows[1][:, 0] if len(windows[0]) else np.zeros(0)
        carried = collective_iterations(self.log.metadata)
        if carried is not None and "iteration" in path.columns and path["iteration"].isin(sorted(carried)).any():
            # all-reduce rows on some iterations only: the paths of those (the others' paths miss their all-reduces)
            path = path[path["iteration"].isin(sorted(carried))]
            spans = spans[np.isin(np.asarray(windows[0], dtype=np.int64), sorted(carried))]
        total = float(np.sum(spans)) if len(spans) else 1.0
        g = path.groupby(["kind", "op", "name"], observed=True).agg(time_ns=("duration_ns", "sum"), count=("id", "size"))
        g["share"] = g["time_ns"] / max(total, 1.0)
        return g.sort_values("time_ns", ascending=False).head(top).reset_index()[["kind", "op", "name", "time_ns", "share",
                                                                                  "count"]]

    def _windows(self) -> tuple[list[int], np.ndarray]:
        from .breakdown import window_arrays

        if "windows" not in self._cache:
            numbers, a, b = window_arrays(self.log)
            self._cache["windows"] = ([int(x) for x in numbers], np.stack([a, b], axis=1) if len(a) else np.zeros((0, 2)))
        return self._cache["windows"]

    # ---------------------------------------------------- SketchDLC
    def overhead_samples(self) -> pd.DataFrame:
        """Every overhead sample of SketchDLC section 4.2 / 5.3.2, in ns:

        - computation (per worker, iteration i >= 1): last Push_Send_Worker(i)
          - last Pull_Recv_Worker(i-1);
        - search (per pull RPC): Pull_Send_Server - Pull_Recv_Server of the
          same pull (same rpc; without rpc ids: same server, worker, key,
          iteration);
        - update (per server, key, iteration): first Push_Send_Server - last
          Push_Recv_Server;
        - synchronization (per server, key, iteration): last - first
          Push_Recv_Server;
        - wait (per worker, iteration): last - first Pull_Recv_Worker.

        Columns: overhead, rank (worker or server), key (-1 where not per
        key), iteration, value_ns."""
        if "overheads" in self._cache:
            return self._cache["overheads"].copy()
        ps = self._ps_rows()
        columns = ["overhead", "rank", "key", "iteration", "value_ns"]
        if ps.empty:
            return self._note(pd.DataFrame(columns=columns), self._no_ps())
        parts = []

        def add(name, frame):
            frame = frame.assign(overhead=name)
            parts.append(frame[columns])

        push_send_worker = ps[ps.operation == "Push_Send_Worker"]
        pull_recv_worker = ps[ps.operation == "Pull_Recv_Worker"]
        push_recv_server = ps[ps.operation == "Push_Recv_Server"]
        push_send_server = ps[ps.operation == "Push_Send_Server"]
        if len(push_send_worker) and len(pull_recv_worker):
            last_push = push_send_worker.groupby(["rank", "iteration"])["time_ns"].max()
            last_pull = pull_recv_worker.groupby(["rank", "iteration"])["time_ns"].max().reset_index()
            last_pull["iteration"] += 1
            both = last_pull.set_index(["rank", "iteration"])["time_ns"].rename("pull").to_frame().join(
                last_push.rename("push"), how="inner").reset_index()
            add("computation", both.assign(key=-1, value_ns=both["push"] - both["pull"]))
        pull_recv_server = ps[ps.operation == "Pull_Recv_Server"][["rank", "peer", "tensor", "iteration", "rpc", "time_ns"]]
        pull_send_server = ps[ps.operation == "Pull_Send_Server"][["rank", "peer", "tensor", "iteration", "rpc", "time_ns"]]
        if len(pull_recv_server) and len(pull_send_server):
            on = ["rank", "peer", "tensor", "iteration", "rpc"]
            m = pull_recv_server.drop_duplicates(on).merge(pull_send_server.drop_duplicates(on), on=on,
                                                         suffixes=("_recv", "_send"))
            add("search", m.assign(key=m["tensor"], value_ns=m["time_ns_send"] - m["time_ns_recv"]))
        if len(push_recv_server):
            g = push_recv_server.groupby(["rank", "tensor", "iteration"])["time_ns"].agg(["min", "max"]).reset_index()
            add("synchronization", g.assign(key=g["tensor"], value_ns=g["max"] - g["min"]))
            if len(push_send_server):
                first = push_send_server.groupby(["rank", "tensor", "iteration"])["time_ns"].min().rename("first")
                u = g.set_index(["rank", "tensor", "iteration"]).join(first, how="inner").reset_index()
                add("update", u.assign(key=u["tensor"], value_ns=u["first"] - u["max"]))
        if len(pull_recv_worker):
            w = pull_recv_worker.groupby(["rank", "iteration"])["time_ns"].agg(["min", "max"]).reset_index()
            add("wait", w.assign(key=-1, value_ns=w["max"] - w["min"]))
        out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
        out = out.astype({"rank": np.int64, "key": np.int64, "iteration": np.int64, "value_ns": np.int64})
        note = None
        if not (out["overhead"] == "computation").any():
            note = f"{self.name}: no computation overhead: it needs two consecutive iterations with pushes and pulls"
        self._cache["overheads"] = _noted(out, note)
        return self._note(out, note)

    def sketchdlc_overheads(self) -> pd.DataFrame:
        """Per overhead and key (key -1: computation and wait, which are per
        worker and iteration): count, min / mean / median / max in
        microseconds (Figs 11, 13, 15, 17)."""
        samples = self.overhead_samples()
        if samples.empty:
            return _noted(pd.DataFrame(columns=["overhead", "key", "count", "min_us", "mean_us", "median_us", "max_us"]),
                          samples.attrs.get("note"))
        g = samples.groupby(["overhead", "key"])["value_ns"]
        out = g.agg(count="size", min_us="min", mean_us="mean", median_us="median", max_us="max").reset_index()
        for c in ("min_us", "mean_us", "median_us", "max_us"):
            out[c] = out[c].astype(float) / US
        out["overhead"] = pd.Categorical(out["overhead"], categories=OVERHEADS, ordered=True)
        out = out.sort_values(["overhead", "key"]).reset_index(drop=True)
        out["overhead"] = out["overhead"].astype(str)
        return _noted(out, samples.attrs.get("note"))

    def sketchdlc_global(self) -> dict[str, float]:
        """Global average of each overhead in microseconds, as the paper
        computes it: the mean over keys of the per-key means."""
        table = self.sketchdlc_overheads()
        return {str(k): float(v) for k, v in table.groupby("overhead")["mean_us"].mean().items()} if len(table) else {}

    def message_sizes(self, by: str = "key") -> pd.DataFrame:
        """SketchDLC Tables 5-7 from the workers' rows.

        ``by="key"`` (Tables 6, 7): per key, the message length in bytes of
        Push_Send, Push_Recv, Pull_Send, Pull_Recv on the worker (largest
        seen) and the key's name. ``by="iteration"`` (Table 5): bytes per
        worker per iteration (mean over workers) of each of the four, in
        MB. ``by="node"``: per node and operation (all eight), messages and
        bytes per iteration (mean over iterations)."""
        ps = self._ps_rows()
        if ps.empty:
            return self._note(pd.DataFrame(), self._no_ps())
        worker_view = {"Push_Send_Worker": "Push_Send", "Push_Recv_Worker": "Push_Recv",
                       "Pull_Send_Worker": "Pull_Send", "Pull_Recv_Worker": "Pull_Recv"}
        mine = ps[ps.operation.isin(list(worker_view))].assign(column=lambda f: f.operation.map(worker_view))
        if by == "key":
            t = mine.pivot_table(index="tensor", columns="column", values="bytes", aggfunc="max")
            t = t.reindex(columns=list(worker_view.values())).rename(columns=lambda c: f"{c}_bytes")
            names = mine.groupby("tensor")["name"].first()
            t.insert(0, "name", names)
            t = t.reset_index().rename(columns={"tensor": "key"})
            sort = "Push_Send_bytes" if t["Push_Send_bytes"].notna().any() else "key"
            return t.sort_values([sort, "key"]).reset_index(drop=True)
        if by == "iteration":
            t = mine.groupby(["iteration", "rank", "column"])["bytes"].sum().unstack("column", fill_value=0)
            t = t.groupby("iteration").mean().reindex(columns=list(worker_view.values()), fill_value=0.0) / 1e6
            return t.rename(columns=lambda c: f"{c}_MB").reset_index()
        if by == "node":
            t = ps.groupby(["rank", "role", "operation", "iteration"]).agg(messages=("id", "size"), bytes=("bytes", "sum"))
            t = t.groupby(["rank", "role", "operation"]).mean().reset_index()
            return t.rename(columns={"messages": "messages_per_iteration", "bytes": "bytes_per_iteration"})
        raise ValueError(f"by={by!r}: choose key, iteration or node")

    # ---------------------------------------------------- RPC paper
    def rpc_latency(self) -> pd.DataFrame:
        """:func:`ddlsim.analyze.rpc_table`: one row per RPC with t0, t1 and
        total, W_proc, W_queue, PS_proc, PS_queue, N_tx (ns)."""
        if "rpc" not in self._cache:
            table = rpc_table(self.log)
            if table.empty:
                self._note(table, self._no_ps() if self._ps_rows().empty else
                           f"{self.name}: no RPCs (rows with rpc >= 0 and a *_request send); no RPC analysis")
            self._cache["rpc"] = table
        return self._cache["rpc"].copy()

    def rpc_shares(self) -> pd.DataFrame:
        """Per kind (push, pull, all): RPC count, mean total (us) and each
        component's share of the summed latency (Fig. 3 of the RPC paper)."""
        table = self.rpc_latency()
        comps = ["w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns"]
        if table.empty:
            return _noted(pd.DataFrame(columns=["kind", "rpcs", "mean_total_us", *[c.replace("_ns", "_share") for c in comps]]),
                          table.attrs.get("note"))
        complete = table.dropna(subset=comps + ["total_ns"])
        rows = []
        for kind, part in [*complete.groupby("kind"), ("all", complete)]:
            total = float(part["total_ns"].sum())
            row = {"kind": kind, "rpcs": len(part), "mean_total_us": float(part["total_ns"].mean()) / US if len(part) else np.nan}
            for c in comps:
                row[c.replace("_ns", "_share")] = float(part[c].sum()) / total if total > 0 else np.nan
                row[c.replace("_ns", "_mean_us")] = float(part[c].mean()) / US if len(part) else np.nan
            rows.append(row)
        return pd.DataFrame(rows)

    def rpc_cdf(self, metric: str = "total_ns") -> pd.DataFrame:
        """CDF of one RPC column (``total_ns``, a component, ``request_bytes``,
        ``response_bytes``) per RPC kind: kind, value, fraction."""
        table = self.rpc_latency()
        if table.empty:
            return _noted(pd.DataFrame(columns=["kind", metric, "fraction"]), table.attrs.get("note"))
        parts = [cdf(part[metric], metric).assign(kind=kind) for kind, part in table.groupby("kind")]
        return pd.concat(parts, ignore_index=True)[["kind", metric, "fraction"]]

    def rpc_intervals(self) -> pd.DataFrame:
        """Intervals between consecutive RPCs of each worker-PS pair (t0 to
        the next t0, ns; Fig. 7a): worker, server, rpc, kind, t0_ns, interval_ns."""
        table = self.rpc_latency()
        if table.empty:
            return _noted(pd.DataFrame(columns=["worker", "server", "rpc", "kind", "t0_ns", "interval_ns"]),
                          table.attrs.get("note"))
        t = table[["worker", "server", "rpc", "kind", "t0_ns"]].sort_values(["worker", "server", "t0_ns", "rpc"])
        t["interval_ns"] = t.groupby(["worker", "server"])["t0_ns"].diff()
        return t.dropna(subset=["interval_ns"]).astype({"interval_ns": np.int64}).reset_index(drop=True)

    def concurrent_connections(self, t_window_ns: int = 1_000_000) -> pd.DataFrame:
        """Per PS and window of ``t_window_ns`` (1 ms default, Fig. 7b): the
        number of distinct workers whose requests arrived at the PS in the
        window (request recv rows on the server, their ``end_ns`` on the
        reference clock), and the requests. Windows are counted from the
        log's first row; windows without requests between a PS's first and
        last request count 0."""
        t_window_ns = int(t_window_ns)
        if t_window_ns <= 0:
            raise ValueError("t_window_ns must be > 0")
        ps = self._ps_rows()
        req = ps[(ps.kind == "recv") & ps.op.str.endswith("_request")] if len(ps) else ps
        columns = ["server", "window", "window_start_ns", "connections", "requests"]
        if req.empty:
            return self._note(pd.DataFrame(columns=columns), self._no_ps())
        origin = int(self._aligned()[0].min())
        w = (req["a_end"].to_numpy() - origin) // t_window_ns
        frame = pd.DataFrame({"server": req["rank"].to_numpy(), "window": w, "worker": req["peer"].to_numpy()})
        g = frame.groupby(["server", "window"]).agg(connections=("worker", "nunique"), requests=("worker", "size"))
        spans = {server: int(part.index.get_level_values("window").max() - part.index.get_level_values("window").min()) + 1
                 for server, part in g.groupby(level="server")}
        total = sum(spans.values())
        parts = []
        for server, part in g.groupby(level="server"):
            part = part.droplevel("server")
            if total <= MAX_CONNECTION_WINDOWS:  # the empty windows as rows of 0
                windows = part.index
                part = part.reindex(pd.RangeIndex(int(windows.min()), int(windows.max()) + 1, name="window"), fill_value=0)
            parts.append(part.reset_index().assign(server=server))
        out = pd.concat(parts, ignore_index=True)
        out["window_start_ns"] = origin + out["window"] * t_window_ns
        out = out[columns].astype({"connections": np.int64, "requests": np.int64})
        empty = total - len(out)
        out.attrs["empty_windows"] = empty  # windows without requests that the table leaves out (0 when none)
        if empty:  # a long run in short windows (found by tools/fuzz_readers.py: 1.9e9 windows, a MemoryError)
            return self._note(out, f"concurrent connections: {total:,} windows of {t_window_ns / 1e6:g} ms between "
                                   f"each PS's first and last request; the table lists the {len(out):,} with requests, "
                                   f"the other {empty:,} count 0 connections (attrs['empty_windows']); a longer "
                                   "window (--t-window) lists them all")
        return out

    def _key_ops(self) -> pd.DataFrame:
        """Per key: server writes (push requests received), reads (pull
        requests received), bytes through the server, parameter size
        (worked out once per analysis: hot keys, the offload estimate and
        the figures all ask; each caller gets its own copy)."""
        if "key_ops" not in self._cache:
            self._cache["key_ops"] = self._key_ops_table()
        return self._cache["key_ops"].copy()

    def _key_ops_table(self) -> pd.DataFrame:
        ps = self._ps_rows()
        at_server = ps[ps.role == "server"]
        writes = at_server[at_server.operation == "Push_Recv_Server"].groupby("tensor").agg(
            updates=("id", "size"), push_bytes=("bytes", "sum"), size_bytes=("bytes", "max"))
        reads = at_server[at_server.operation == "Pull_Recv_Server"].groupby("tensor").agg(reads=("id", "size"))
        sent = at_server[at_server.operation == "Pull_Send_Server"].groupby("tensor").agg(
            pull_bytes=("bytes", "sum"), pull_size=("bytes", "max"))
        t = writes.join(reads, how="outer").join(sent, how="outer").fillna(0)
        t["size_bytes"] = np.maximum(t["size_bytes"], t["pull_size"])
        names = ps.groupby("tensor")["name"].first()
        t["name"] = names.reindex(t.index).fillna("")
        t["bytes"] = t["push_bytes"] + t["pull_bytes"]
        t = t.drop(columns=["pull_size", "push_bytes", "pull_bytes"]).reset_index().rename(columns={"tensor": "key"})
        return t.astype({"updates": np.int64, "reads": np.int64, "size_bytes": np.int64, "bytes": np.int64})

    def hot_keys(self) -> pd.DataFrame:
        """Keys ranked by updates (push requests received by a server; Fig.
        10): key, name, updates, reads, update_share, cumulative_share (the
        share of all updates taken by the top K keys at row K)."""
        ps = self._ps_rows()
        if ps.empty:
            return self._note(pd.DataFrame(columns=["rank", "key", "name", "updates", "update_share", "cumulative_share"]),
                              self._no_ps())
        t = self._key_ops().sort_values(["updates", "key"], ascending=[False, True]).reset_index(drop=True)
        total = max(int(t["updates"].sum()), 1)
        t["update_share"] = t["updates"] / total
        t["cumulative_share"] = t["update_share"].cumsum()
        t.insert(0, "rank", np.arange(1, len(t) + 1))
        return t[["rank", "key", "name", "updates", "reads", "size_bytes", "update_share", "cumulative_share"]]

    def top_k_share(self, k: int) -> float:
        """Share of all updates taken by the k most updated keys."""
        t = self.hot_keys()
        return float(t["update_share"].head(int(k)).sum()) if len(t) else float("nan")

    def offload_estimate(self, switch_memory_bytes: int) -> pd.DataFrame:
        """In-network offload (RPC paper section 4): keys in order of server
        operations (reads + writes) per byte of parameter, taken while they
        fit in ``switch_memory_bytes`` (a key larger than what is left is
        skipped). Per key: size, operations, bytes through the server,
        ``offloaded``; ``attrs["summary"]``: keys offloaded, memory used,
        share of server operations and of server bytes removed."""
        ps = self._ps_rows()
        if ps.empty:
            frame = self._note(pd.DataFrame(columns=["key", "name", "size_bytes", "operations", "bytes", "offloaded"]),
                               self._no_ps())
            frame.attrs["summary"] = {}
            return frame
        t = self._key_ops()
        t["operations"] = t["updates"] + t["reads"]
        t["ops_per_byte"] = t["operations"] / t["size_bytes"].clip(lower=1)
        t = t.sort_values(["ops_per_byte", "operations", "key"], ascending=[False, False, True]).reset_index(drop=True)
        left, taken = int(switch_memory_bytes), []
        for size in t["size_bytes"].to_numpy():
            fits = size <= left
            taken.append(bool(fits))
            left -= int(size) if fits else 0
        t["offloaded"] = taken
        ops, volume = max(int(t["operations"].sum()), 1), max(int(t["bytes"].sum()), 1)
        summary = {
            "switch_memory_bytes": int(switch_memory_bytes),
            "keys": int(len(t)),
            "keys_offloaded": int(t["offloaded"].sum()),
            "memory_used_bytes": int(t.loc[t["offloaded"], "size_bytes"].sum()),
            "operations_removed_share": float(t.loc[t["offloaded"], "operations"].sum()) / ops,
            "bytes_removed_share": float(t.loc[t["offloaded"], "bytes"].sum()) / volume,
        }
        out = t[["key", "name", "size_bytes", "updates", "reads", "operations", "bytes", "ops_per_byte", "offloaded"]]
        out.attrs["summary"] = summary
        return out

    # ---------------------------------------------------- collectives
    def link_rate_bps(self) -> float | None:
        """The host link rate (bits/s) from the metadata's scenario, or the shaped link of a capture, if any."""
        network = (self.log.metadata.get("scenario") or {}).get("network") or {}
        value = network.get("bandwidth_bps", network.get("bandwidth", self.log.metadata.get("bandwidth")))
        if value is None:
            return None
        try:
            from ..units import parse_bandwidth

            return float(parse_bandwidth(value))
        except Exception:  # noqa: BLE001 - a captured log's free-form metadata
            return None

    def collectives(self) -> pd.DataFrame:
        """Per collective instance: group, type, algorithm, ranks, bytes,
        time (first start to last end over its ranks, reference clock),
        algorithm bandwidth bytes/time, bus bandwidth (x 2(n-1)/n for
        all-reduce, (n-1)/n for reduce-scatter / all-gather / all-to-all, as
        nccl-tests), its ratio to the link rate (metadata scenario), and
        stream queueing delay = start - ready per rank (mean, max; null when
        ``ready_ns`` is unknown). From the ``collective`` rows, or from the
        step rows when the log has none."""
        columns = ["collective", "group", "iteration", "coll_type", "algorithm", "ranks", "bytes", "time_ns",
                   "algbw_Gbps", "busbw_Gbps", "link_Gbps", "busbw_over_link", "queue_mean_ns", "queue_max_ns"]
        g = self._collective_aggregates()
        if g is None:
            return self._note(pd.DataFrame(columns=columns), f"{self.name}: no collective rows; no collective analysis")
        g["time_ns"] = g["t1"] - g["t0"]
        n = g["ranks"].to_numpy()
        factor = np.array([BUS_FACTORS.get(t, lambda n: 1.0)(k) if k > 1 else 0.0 for t, k in zip(g["coll_type"], n)])
        seconds = g["time_ns"].to_numpy() / 1e9
        algbw = np.where(seconds > 0, g["bytes"].to_numpy() * 8 / np.where(seconds > 0, seconds, 1), np.nan) / 1e9
        g["algbw_Gbps"] = algbw
        g["busbw_Gbps"] = algbw * factor
        link = self.link_rate_bps()
        g["link_Gbps"] = link / 1e9 if link else np.nan
        g["busbw_over_link"] = g["busbw_Gbps"] / g["link_Gbps"]
        out = g.reset_index()[columns]
        note = None
        if out["queue_mean_ns"].isna().all():
            note = f"{self.name}: ready_ns unknown on the collective rows; no stream queueing delay"
        if link is None:
            extra = f"{self.name}: no link rate in the metadata (scenario.network.bandwidth); bus bandwidth not compared"
            note = f"{note}; {extra}" if note else extra
        return self._note(out, note)

    def _collective_aggregates(self) -> pd.DataFrame | None:
        """Per collective id: group, iteration, coll_type, algorithm (first
        row's), ranks, t0 / t1 (first start, last end, reference clock),
        queueing mean / max and bytes; None without collective rows."""
        coll = self._col("collective") >= 0
        rows = coll & self._mask("kind", ("collective",))
        from_steps = False
        if not rows.any():
            rows = coll & self._mask("kind", ("send",))
            from_steps = True
        if not rows.any():
            return None
        f = self._frame(rows, ["collective", "group", "iteration", "rank", "coll_type", "algorithm", "bytes", "a_start",
                               "a_end", "ready_ns", "start_ns"])
        f["queue"] = (f["start_ns"] - f["ready_ns"]).astype("Float64")
        agg = {"group": ("group", "first"), "iteration": ("iteration", "first"), "coll_type": ("coll_type", "first"),
               "algorithm": ("algorithm", "first"), "ranks": ("rank", "nunique"), "t0": ("a_start", "min"),
               "t1": ("a_end", "max"), "queue_mean_ns": ("queue", "mean"), "queue_max_ns": ("queue", "max")}
        if from_steps:
            per_rank = f.groupby(["collective", "rank"])["bytes"].sum().groupby("collective").max()
            g = f.groupby("collective").agg(**agg).join(per_rank.rename("sent"))
            # a ring all-reduce sends 2(n-1)/n of the buffer per rank
            n = g["ranks"].clip(lower=1)
            factor = np.array([BUS_FACTORS.get(t, lambda n: 1.0)(k) if k > 1 else 1.0 for t, k in zip(g["coll_type"], n)])
            g["bytes"] = (g["sent"] / np.where(factor > 0, factor, 1)).round().astype(np.int64)
        else:
            g = f.groupby("collective").agg(bytes=("bytes", "max"), **agg)
        return g

    def collectives_by_group(self) -> pd.DataFrame:
        """Per group (bucket / fusion buffer): instances, mean bytes, mean and
        max all-reduce time, mean bus bandwidth and its ratio to the link,
        mean queueing delay."""
        c = self.collectives()
        if c.empty:
            return _noted(pd.DataFrame(columns=["group", "instances"]), c.attrs.get("note"))
        g = c.groupby(["group", "coll_type"]).agg(
            instances=("collective", "size"), bytes=("bytes", "mean"), time_mean_ns=("time_ns", "mean"),
            time_max_ns=("time_ns", "max"), busbw_Gbps=("busbw_Gbps", "mean"), busbw_over_link=("busbw_over_link", "mean"),
            queue_mean_ns=("queue_mean_ns", "mean"))
        return g.reset_index()

    # ---------------------------------------------------- compare
    def _group_members(self) -> dict[int, tuple[int, ...]]:
        """Group id -> its tensor ids (sorted), from the log's groups side table."""
        groups = getattr(self.log, "groups", None)
        if groups is None or not len(groups):
            return {}
        members: dict[int, list[int]] = {}
        for g, t in zip(groups.column("group").to_pylist(), groups.column("tensor").to_pylist()):
            members.setdefault(int(g), []).append(int(t))
        return {g: tuple(sorted(ts)) for g, ts in members.items()}

    def _tensor_names(self) -> dict[int, str]:
        """Tensor id -> name: a capture's parameter list, else the zoo model the metadata names (else none)."""
        params = self.log.metadata.get("parameters")
        if isinstance(params, list) and params:
            return {i: str(p.get("name", "")) for i, p in enumerate(params) if isinstance(p, dict)}
        name = self.log.metadata.get("model")
        if isinstance(name, str) and name:
            try:
                from ..workload import load_model

                return {i: t.name for i, t in enumerate(load_model(name).tensors)}
            except Exception:  # noqa: BLE001 - a foreign log's model name: labels fall back to tensor ids
                return {}
        return {}

    def _per_item(self) -> pd.DataFrame:
        """Time per worker and iteration of each compute layer and each
        communication item (for :meth:`compare`): scope, key, item, t.

        Items are paired between logs by identity, not by position: a layer by
        (op, name); gradient traffic by the set of tensors its group carries
        (the groups side table) and its collective type or PS op, so bucket 1
        of one log meets the bucket holding the same tensors in the other,
        whatever its number; rows without a group by (op, name). An item's
        time is the union of its rows' intervals on each rank (a collective
        row and its own steps, or concurrent chunks, count once), summed over
        the workers and divided by workers x iterations."""
        workers = self._mask("role", ("worker",))
        if not workers.any():
            workers = np.ones(len(self.log), dtype=bool)
        n_workers = max(len(np.unique(self._col("rank")[workers])), 1)
        its = self._col("iteration")
        n_its = max(len(np.unique(its[its >= 0])), 1)
        carried = collective_iterations(self.log.metadata)  # communication recorded on these iterations only
        n_comm = max(len(np.unique(its[(its >= 0) & np.isin(its, sorted(carried))])), 1) if carried is not None else n_its
        start, end = self._aligned()
        kind = self._col("kind")
        members = self._group_members()
        names = self._tensor_names() if members else {}
        parts = []
        for scope, mask in (("layer", workers & (kind == "compute")),
                            ("communication", workers & np.isin(kind, ("send", "collective")))):
            if not mask.any():
                continue
            op, name = self._col("op")[mask].astype(str), self._col("name")[mask].astype(str)
            keys, labels = op + "\x00" + name, np.where(name != "", op + " " + name, op)
            if scope == "communication" and members:
                group, coll = self._col("group")[mask], self._col("coll_type")[mask].astype(str)
                keys, labels = keys.astype(object), labels.astype(object)
                for g in np.unique(group[group >= 0]):
                    tensors = members.get(int(g))
                    if tensors is None:
                        continue
                    rows = group == g
                    what = np.where(coll[rows] != "", coll[rows], op[rows])
                    keys[rows] = [f"{w}\x00{tensors}" for w in what]
                    labels[rows] = [f"{w} {_tensor_label(tensors, names)}" for w in what]
            frame = pd.DataFrame({"key": keys, "item": labels, "rank": self._col("rank")[mask],
                                  "s": start[mask].astype(np.int64), "e": end[mask].astype(np.int64)})
            frame["ns"] = _union_by(frame, ["key", "rank"])
            g = frame.groupby("key", sort=True).agg(item=("item", "first"), ns=("ns", "sum")).reset_index()
            g["t"] = g["ns"].astype(float) / 1e9 / (n_workers * (n_comm if scope == "communication" else n_its))
            parts.append(g.assign(scope=scope)[["scope", "key", "item", "t"]])
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["scope", "key", "item", "t"])

    def compare(self, other: "Analysis | EventLog | str | Path", top: int = 5) -> pd.DataFrame:
        """This log (a) against another (b): per iteration (time), the mean
        breakdown (over the iterations :func:`~ddlsim.analyze.breakdown.iteration_mean`
        averages, as the headline), per layer (compute time) and per
        communication item (time; paired by identity, see :meth:`_per_item`),
        in seconds per worker and iteration: scope, item, a_s, b_s,
        diff_s = b - a, rel_diff. Rows sorted by scope, then |diff|;
        ``attrs["largest"]``: the ``top`` layers / transfers with the
        largest |diff| (what explains the difference)."""
        other = other if isinstance(other, Analysis) else Analysis(other)
        a_it, b_it = self._iteration_arrays(), other._iteration_arrays()
        parts = []
        ia = pd.DataFrame({"item": a_it["iteration"], "a_s": a_it["time_s"]})
        ib = pd.DataFrame({"item": b_it["iteration"], "b_s": b_it["time_s"]})
        it = ia.merge(ib, on="item", how="outer").sort_values("item")
        it["item"] = "iteration " + it["item"].astype(str)
        parts.append(it.assign(scope="iteration"))
        rows = []
        # the breakdown averages the iterations the headline does (a measured log's warm-up left out)
        a_mask = iteration_mean(a_it, self.log.metadata)["mask"]
        b_mask = iteration_mean(b_it, other.log.metadata)["mask"]
        # the parts of a capture with all-reduce rows on some iterations only: over those (as the headline)
        a_parts, b_parts = breakdown_mask(a_it, self.log.metadata, a_mask), breakdown_mask(b_it, other.log.metadata, b_mask)
        for part in ("time_s", "compute_s", "communication_s", "overlap_s", "exposed_communication_s", "idle_s"):
            am, bm = (a_mask, b_mask) if part == "time_s" else (a_parts, b_parts)
            av = float(np.mean(np.asarray(a_it[part])[am])) if am.any() else np.nan
            bv = float(np.mean(np.asarray(b_it[part])[bm])) if bm.any() else np.nan
            rows.append({"item": part.replace("_s", ""), "a_s": av, "b_s": bv})
        parts.append(pd.DataFrame(rows).assign(scope="breakdown"))
        pa_, pb_ = self._per_item(), other._per_item()
        items = pa_.rename(columns={"t": "a_s", "item": "a_item"}).merge(
            pb_.rename(columns={"t": "b_s", "item": "b_item"}), on=["scope", "key"], how="outer")
        items["item"] = items["a_item"].where(items["a_item"].notna(), items["b_item"])
        parts.append(items.drop(columns=["key", "a_item", "b_item"]))
        out = pd.concat(parts, ignore_index=True)
        out[["a_s", "b_s"]] = out[["a_s", "b_s"]].astype(float)
        filled = out[["a_s", "b_s"]].fillna(0.0) if len(items) else out[["a_s", "b_s"]]
        out["diff_s"] = filled["b_s"] - filled["a_s"]
        out["rel_diff"] = out["diff_s"] / out["a_s"].where(out["a_s"] > 0)
        order = {"iteration": 0, "breakdown": 1, "layer": 2, "communication": 3}
        out["_o"] = out["scope"].map(order)
        out["_a"] = -out["diff_s"].abs()
        out.loc[out.scope == "iteration", "_a"] = 0
        out = out.sort_values(["_o", "_a"], kind="stable").drop(columns=["_o", "_a"]).reset_index(drop=True)
        out = out[["scope", "item", "a_s", "b_s", "diff_s", "rel_diff"]]
        contributors = out[out.scope.isin(["layer", "communication"])]
        contributors = contributors.reindex(contributors["diff_s"].abs().sort_values(ascending=False).index).head(top)
        out.attrs["largest"] = [
            {"scope": s, "item": i, "diff_s": float(d)} for s, i, d in
            zip(contributors["scope"], contributors["item"], contributors["diff_s"])]
        out.attrs["names"] = (self.name, other.name)
        return out

    # ---------------------------------------------------- network queues (packet level)
    def queue_samples(self) -> pd.DataFrame:
        """The queues side table (occupancy of each port and band over time,
        packet level) with the port's name from the metadata; empty when the
        log has none (``network.packet.queue_sample`` unset, other fidelities)."""
        queues = getattr(self.log, "queues", None)
        columns = ["time_ns", "node", "port", "band", "bytes", "packets", "port_name"]
        if queues is None or queues.num_rows == 0:
            return pd.DataFrame({c: pd.Series([], dtype=object if c == "port_name" else np.int64) for c in columns})
        frame = pd.DataFrame({c: queues.column(c).to_numpy() for c in columns[:-1]})
        names = port_names(self.log.metadata)
        frame["port_name"] = [names.get(int(p), f"port {int(p)}") for p in frame["port"]]
        return frame.sort_values(["time_ns", "node", "port", "band"], kind="stable").reset_index(drop=True)

    def queue_occupancy(self) -> pd.DataFrame:
        """Per port and band: samples, peak and time-weighted mean occupancy
        (packets and bytes) between its first and last sample (a sample holds
        until the next one)."""
        q = self.queue_samples()
        rows = []
        for (node, port, band), g in q.groupby(["node", "port", "band"], sort=True):
            t = g["time_ns"].to_numpy(dtype=np.int64)
            span = int(t[-1] - t[0])
            weights = np.diff(t).astype(float)
            mean = (lambda v: float((v[:-1] * weights).sum() / span) if span > 0 else float(v[-1]))
            rows.append({"node": int(node), "port": int(port), "band": int(band), "port_name": g["port_name"].iloc[0],
                         "samples": int(len(g)), "max_packets": int(g["packets"].max()), "max_bytes": int(g["bytes"].max()),
                         "mean_packets": mean(g["packets"].to_numpy(dtype=float)),
                         "mean_bytes": mean(g["bytes"].to_numpy(dtype=float)),
                         "first_ns": int(t[0]), "last_ns": int(t[-1])})
        columns = ["node", "port", "band", "port_name", "samples", "max_packets", "max_bytes", "mean_packets", "mean_bytes",
                   "first_ns", "last_ns"]
        return pd.DataFrame(rows, columns=columns)

    # ---------------------------------------------------- flow completion times
    def flow_completion(self) -> pd.DataFrame:
        """Per flow of the flows table (``--record-flows``; background tenants'
        flows too): FCT, ideal time, slowdown, size class
        (:func:`ddlsim.analyze.fct.flow_table`); empty when the log has none."""
        if "fct_flows" not in self._cache:
            from .fct import flow_table

            self._cache["fct_flows"] = flow_table(self)
        return self._cache["fct_flows"]

    def fct_summary(self, warmup_ns: int = 0, cooldown_ns: int = 0, buckets: int | None = None) -> pd.DataFrame:
        """FCT and slowdown per tenant and size class over the flows that start
        in ``[start + warmup, end - cooldown]`` (:func:`ddlsim.analyze.fct.fct_summary`)."""
        from .fct import fct_summary

        flows = self.flow_completion()
        return fct_summary(flows, warmup_ns=warmup_ns, cooldown_ns=cooldown_ns, buckets=buckets)

    def fct_cdf(self, warmup_ns: int = 0, cooldown_ns: int = 0) -> pd.DataFrame:
        """The empirical CDF of the finished flows' FCT per tenant and size class, in the window."""
        from .fct import fct_cdf

        return fct_cdf(self.flow_completion(), warmup_ns=warmup_ns, cooldown_ns=cooldown_ns)

    # ---------------------------------------------------- headline
    def headline(self, t_window_ns: int = 1_000_000, switch_memory_bytes: int | None = None,
                 fct_window: tuple[int, int] = (0, 0)) -> dict[str, Any]:
        """The numbers worth printing, JSON-able (NaN as None). ``fct_window``:
        (warm-up, cool-down) ns of the FCT measurement window."""
        roles = pd.Series(self._col("role")).groupby(self._col("rank")).first() if len(self.log) else pd.Series([], dtype=object)
        out: dict[str, Any] = {
            "log": self.name, "source": self.log.metadata.get("source"), "rows": len(self.log),
            "workers": int((roles == "worker").sum()), "servers": int((roles == "server").sum()),
        }
        it = self._iteration_arrays() if (self._col("iteration") >= 0).any() else None
        if it is not None:
            mean = iteration_mean(it, self.log.metadata)
            out["iterations"] = int(len(it["iteration"]))
            out["iteration_time_s"] = mean["mean_s"]
            out["iteration_mean"] = mean["definition"]
            out["iterations_averaged"] = mean["iterations"]
            # a capture with all-reduce rows on some iterations only: the breakdown over those (the others' communication
            # is unrecorded, so it would count as idle there)
            parts = breakdown_mask(it, self.log.metadata, mean["mask"])
            if not np.array_equal(parts, mean["mask"]):
                out["breakdown_iterations"] = [int(i) for i in np.asarray(it["iteration"])[parts]]
            for part in ("compute_s", "communication_s", "overlap_s", "exposed_communication_s", "idle_s", "overlap_ratio"):
                out[part] = float(np.mean(np.asarray(it[part])[parts]))
        jobs = self.jobs()
        if len(jobs):
            out["jobs"] = [{k: _jsonable(v) for k, v in row.items()} for row in jobs.to_dict(orient="records")]
        ph = self.phases()
        if len(ph):
            out["sketchdlc_overlap_ratio"] = float(ph["sketchdlc_overlap_ratio"].mean())
        summary = self.critical_path_summary(top=3)
        if len(summary):
            out["critical_path_top"] = [
                {"kind": k, "op": o, "name": n, "share": float(s)}
                for k, o, n, s in zip(summary["kind"], summary["op"], summary["name"], summary["share"])]
        if len(self._ps_rows()):
            out["sketchdlc_global_mean_us"] = self.sketchdlc_global()
            shares = self.rpc_shares()
            if len(shares):
                out["rpcs"] = int(shares.loc[shares.kind == "all", "rpcs"].iloc[0])
                out["rpc_latency"] = shares.set_index("kind").drop(columns=["rpcs"]).to_dict(orient="index")
            cc = self.concurrent_connections(t_window_ns)
            if len(cc):
                windows = len(cc) + cc.attrs.get("empty_windows", 0)  # the windows left out count 0
                out["concurrent_connections"] = {"t_window_ns": int(t_window_ns),
                                                 "mean": float(cc["connections"].sum()) / windows,
                                                 "max": int(cc["connections"].max())}
            hot = self.hot_keys()
            if len(hot):
                k = max(1, len(hot) // 10)
                out["hot_keys"] = {"keys": int(len(hot)), "top_10pct_keys": k, "top_10pct_update_share": self.top_k_share(k)}
            if switch_memory_bytes:
                out["offload"] = self.offload_estimate(switch_memory_bytes).attrs["summary"]
        else:
            self._note(pd.DataFrame(), self._no_ps())
        coll = self.collectives()
        if len(coll):
            out["collectives"] = {"instances": int(len(coll)), "mean_time_s": float(coll["time_ns"].mean()) / 1e9,
                                  "mean_busbw_Gbps": float(coll["busbw_Gbps"].mean()),
                                  "busbw_over_link": float(coll["busbw_over_link"].mean())}
        if getattr(self.log, "flows", None) is not None or hasattr(self, "file"):
            flows = self.flow_completion()
            if len(flows):
                out["fct"] = fct_headline(self.fct_summary(*fct_window))
        stats = self.log.metadata.get("network_stats")
        if isinstance(stats, dict) and stats.get("counters"):
            out["packet_network"] = dict(stats["counters"])
        if self.notes:
            out["notes"] = list(self.notes)
        return _jsonable(out)


def fct_headline(summary: pd.DataFrame) -> dict[str, Any]:
    """The FCT numbers of the headline: the window and, per tenant, its flows,
    unfinished flows, mean / p99 FCT (us) and mean slowdown, all sizes and per class."""
    out: dict[str, Any] = {"window_ns": [int(x) for x in summary.attrs.get("window_ns", (0, 0))], "tenants": {}}
    for row in summary.itertuples(index=False):
        if not row.flows:
            continue
        tenant = out["tenants"].setdefault(str(int(row.tenant)), {})
        tenant[str(row.size_class)] = {"flows": int(row.flows), "unfinished": int(row.unfinished),
                                       "fct_mean_us": float(row.fct_mean_us), "fct_p99_us": float(row.fct_p99_us),
                                       "slowdown_mean": float(row.slowdown_mean)}
    return out


def port_names(metadata: Any) -> dict[int, str]:
    """Port (link index) -> name ("host 3 -> star") from the metadata's ``network_stats``; {} when absent."""
    stats = (metadata or {}).get("network_stats") or {}
    ports = stats.get("ports") or {}
    if not isinstance(ports, dict):
        return {}
    return {int(p): str(n) for p, n in zip(ports.get("port", []), ports.get("name", []))}


def _tensor_label(tensors: tuple[int, ...], names: dict[int, str]) -> str:
    """A group's tensors in words: its one tensor's name, or "6 tensors fc1.weight..fc3.bias"."""
    def one(t: int) -> str:
        return names.get(t) or f"tensor {t}"

    if len(tensors) == 1:
        return one(tensors[0])
    return f"{len(tensors)} tensors {one(tensors[0])}..{one(tensors[-1])}"


def _union_by(frame: pd.DataFrame, by: list[str]) -> np.ndarray:
    """Per row, what it adds to the union of the intervals [s, e) of its group
    (rows grouped by `by`): summed per group, the union's length (time covered
    by several rows counts once). Integer arithmetic throughout (epoch
    nanoseconds do not fit a float)."""
    if not len(frame):
        return np.zeros(0, dtype=np.int64)
    codes = frame.groupby(by, sort=False).ngroup().to_numpy()
    s, e = frame["s"].to_numpy(dtype=np.int64), frame["e"].to_numpy(dtype=np.int64)
    order = np.lexsort((s, codes))
    c, so, eo = codes[order], s[order], e[order]
    reach = pd.Series(eo).groupby(c).cummax().to_numpy(dtype=np.int64)
    first = np.concatenate([[True], c[1:] != c[:-1]])
    before = np.empty_like(reach)
    before[1:] = reach[:-1]
    before[first] = np.iinfo(np.int64).min
    added = np.empty(len(frame), dtype=np.int64)
    added[order] = np.maximum(reach - np.maximum(so, before), 0)
    return added


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if value is pd.NA:
        return None
    return value
