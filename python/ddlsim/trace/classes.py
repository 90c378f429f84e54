"""Rank classes: a log that holds one worker per class of alike workers.

In the closed-form collective model, workers with the same compute and the
same place in every all-reduce's schedule have the same timeline; the
engine then simulates one worker per class (its *representative*, the
class's lowest rank; crates/ddlsim-core/src/lower/classes.rs). Such a log
holds the representatives' rows of the per-rank log (same ids, same
times; a barrier waits for the representatives only), each with
``class_size``: how many ranks the row stands for (1 for a row that stands
for itself, e.g. the barrier). Its metadata
``rank_classes`` says which rank is in which class:

- ``ranks``: workers of the full run;
- ``representatives`` and ``sizes``: per class;
- ``class_of_rank`` and ``host_of_rank``: per rank, as arithmetic runs
  ``[start, length, first value, step]``;
- ``strides``: per row kind, the id distance between the same op of ranks
  r and r + 1 in the per-rank log.

:func:`expand` turns it back into the per-rank log (``ddlsim convert
--expand``); :func:`rank_weights` gives analyses the ranks each rank of the
log stands for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import TraceError

if TYPE_CHECKING:
    from .schema import EventLog

KEY = "rank_classes"


def runs_of(values: Any) -> list[list[int]]:
    """``values`` as arithmetic runs ``[start, length, first, step]`` (see :func:`values_of`)."""
    v = np.asarray(values, dtype=np.int64)
    n = len(v)
    runs: list[list[int]] = []
    if not n:
        return runs
    d = np.diff(v)
    changes = np.flatnonzero(d[1:] != d[:-1]) + 1 if len(d) > 1 else np.zeros(0, dtype=np.int64)
    i = 0
    while i < n:
        if i == n - 1:
            runs.append([i, 1, int(v[i]), 0])
            break
        k = np.searchsorted(changes, i, side="right")  # first change of the diff after d[i]
        j = int(changes[k]) if k < len(changes) else n - 1  # values i..j share the step d[i]
        runs.append([i, j - i + 1, int(v[i]), int(d[i])])
        i = j + 1
    return runs


def values_of(runs: Any, n: int) -> np.ndarray:
    """The per-rank values ``runs`` encode (:func:`runs_of`), ``n`` of them."""
    out = np.zeros(n, dtype=np.int64)
    covered = 0
    for start, length, first, step in runs:
        start, length = int(start), int(length)
        if start < 0 or length < 0 or start + length > n:
            raise TraceError(f"metadata {KEY}: run {[start, length, first, step]} is outside {n} ranks; "
                             "the log's rank classes are damaged (re-run the simulation)")
        out[start:start + length] = int(first) + int(step) * np.arange(length, dtype=np.int64)
        covered += length
    if covered != n:
        raise TraceError(f"metadata {KEY}: runs cover {covered} of {n} ranks; the log's rank classes are damaged "
                         "(re-run the simulation)")
    return out


def describe(workers: int, class_of: Any, representatives: Any, sizes: Any, host_of_rank: Any,
             kind_strides: Mapping[str, int]) -> dict[str, Any]:
    """The metadata entry of a class run (from the engine's ``rank_classes`` output)."""
    hosts = np.asarray(host_of_rank, dtype=np.int64) if len(host_of_rank) else np.arange(workers, dtype=np.int64)
    return {
        "ranks": int(workers),
        "representatives": [int(x) for x in representatives],
        "sizes": [int(x) for x in sizes],
        "class_of_rank": runs_of(class_of),
        "host_of_rank": runs_of(hosts[:workers]),
        "strides": {k: int(v) for k, v in kind_strides.items()},
    }


def is_class_log(log: Any) -> bool:
    """Whether ``log`` (an EventLog or ArrayLog) holds rank classes."""
    return bool((log.metadata or {}).get(KEY))


def rank_weights(log: Any, ranks: np.ndarray) -> np.ndarray:
    """How many ranks of the full run each of ``ranks`` (ranks of ``log``)
    stands for: its class's size in a class log, else 1."""
    ranks = np.asarray(ranks, dtype=np.int64)
    info = (getattr(log, "metadata", None) or {}).get(KEY)
    if not info:
        return np.ones(len(ranks), dtype=np.int64)
    size = dict(zip((int(r) for r in info["representatives"]), (int(s) for s in info["sizes"])))
    return np.array([size.get(int(r), 1) for r in ranks], dtype=np.int64)


def expand(log: "EventLog") -> "EventLog":
    """The per-rank event log a class log stands for: each row of a class's
    representative once per rank of the class (its rank, host, id and the
    ids of its dependencies moved to that rank's), in id order; a log
    without rank classes is returned as it is."""
    import pyarrow as pa

    from .schema import EventLog

    info = (log.metadata or {}).get(KEY)
    if not info:
        return log
    n = int(info["ranks"])
    class_of = values_of(info["class_of_rank"], n)
    hosts = values_of(info["host_of_rank"], n)
    representatives = np.asarray(info["representatives"], dtype=np.int64)
    strides = {str(k): int(v) for k, v in info["strides"].items()}
    table = log.table
    ids = table.column("id").to_numpy().astype(np.int64)
    rank = table.column("rank").to_numpy().astype(np.int64)
    kind_codes, kind_names = log.codes("kind")
    row_stride = np.array([strides.get(str(k), 0) for k in kind_names], dtype=np.int64)[kind_codes] \
        if len(kind_codes) else np.zeros(0, dtype=np.int64)
    # A row of a per-rank kind stands for its rank's class (of any size); other rows (the barrier) for themselves.
    stands_for_class = row_stride > 0
    # Members of each class in rank order (a stable sort of the ranks by class).
    members_sorted = np.argsort(class_of, kind="stable")
    class_start = np.searchsorted(class_of[members_sorted], np.arange(len(representatives)))
    class_count = np.bincount(class_of, minlength=len(representatives))
    row_class = np.where(stands_for_class & (rank < n), class_of[np.clip(rank, 0, n - 1)], -1)
    copies = np.where(row_class >= 0, class_count[np.clip(row_class, 0, None)], 1)
    source = np.repeat(np.arange(len(ids)), copies)
    # The k-th copy of a class row is the class's k-th member.
    within = np.arange(len(source)) - np.repeat(np.cumsum(copies) - copies, copies)
    member = np.where(row_class[source] >= 0,
                      members_sorted[np.clip(class_start[np.clip(row_class[source], 0, None)] + within, 0, n - 1)],
                      rank[source])
    shift = (member - rank[source]) * np.where(row_class[source] >= 0, row_stride[source], 0)
    new_ids = ids[source] + shift
    # Dependencies: a class row's deps of its own rank move with it (vectorised); a row that
    # stands for itself (the barrier) waits for every member's copy of its class deps, rank by rank.
    deps_array = table.column("deps").combine_chunks() if table.column("deps").num_chunks != 1 \
        else table.column("deps").chunk(0)
    offsets = deps_array.offsets.to_numpy().astype(np.int64)
    values = deps_array.values.to_numpy().astype(np.int64) if len(deps_array.values) else np.zeros(0, np.int64)
    values = values[offsets[0]:offsets[-1]] if len(offsets) else values
    offsets = offsets - (offsets[0] if len(offsets) else 0)
    is_null = np.asarray(deps_array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    id_order = np.argsort(ids, kind="stable")
    where = np.clip(np.searchsorted(ids, values, sorter=id_order), 0, max(len(ids) - 1, 0))
    dep_row = id_order[where] if len(ids) else where
    dep_known = (ids[dep_row] == values) if len(ids) else np.zeros(len(values), dtype=bool)
    dep_class = dep_known & (row_class[dep_row] >= 0)
    dep_stride = np.where(dep_class, row_stride[dep_row], 0)
    lengths = (offsets[1:] - offsets[:-1])[source]
    starts = offsets[:-1][source]
    total = int(lengths.sum())
    index = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(starts, lengths)
    delta = np.where(row_class[source] >= 0, member - rank[source], 0)
    moved = values[index] + np.repeat(delta, lengths) * dep_stride[index]
    out_offsets = np.concatenate([[0], np.cumsum(lengths)])
    pieces: list[np.ndarray] = []
    piece_lengths = lengths.copy()
    cut = 0
    for out_row in np.flatnonzero((row_class[source] < 0) & ~is_null[source]):
        r = int(source[out_row])
        ds = values[offsets[r]:offsets[r + 1]]
        mask = dep_class[offsets[r]:offsets[r + 1]]
        if not mask.any():
            continue
        own = list(ds[~mask])
        grouped: dict[int, list[tuple[int, int]]] = {}
        for d, row, stride in zip(ds[mask], dep_row[offsets[r]:offsets[r + 1]][mask],
                                  dep_stride[offsets[r]:offsets[r + 1]][mask]):
            grouped.setdefault(int(rank[row]), []).append((int(d), int(stride)))
        expanded = own[:]
        for w in range(n):
            rep = int(representatives[class_of[w]])
            expanded.extend(d + (w - rep) * stride for d, stride in grouped.get(rep, ()))
        pieces.append(moved[cut:out_offsets[out_row]])
        pieces.append(np.asarray(expanded, dtype=np.int64))
        cut = int(out_offsets[out_row + 1])
        piece_lengths[out_row] = len(expanded)
    if pieces:
        pieces.append(moved[cut:])
        moved = np.concatenate(pieces)
        out_offsets = np.concatenate([[0], np.cumsum(piece_lengths)])
    deps_out = pa.ListArray.from_arrays(pa.array(out_offsets.astype(np.int32)), pa.array(moved, type=pa.int64()),
                                        type=table.schema.field("deps").type,
                                        mask=pa.array(is_null[source]) if is_null.any() else None)
    order = np.argsort(new_ids, kind="stable")
    columns = {}
    for name in table.column_names:
        if name == "deps":
            continue
        column = table.column(name).take(pa.array(source[order]))
        columns[name] = column
    columns["id"] = pa.array(new_ids[order], type=pa.int64())
    columns["rank"] = pa.array(member[order].astype(np.int32), type=pa.int32())
    host = table.column("host").to_numpy().astype(np.int64)[source]
    host = np.where(row_class[source] >= 0, hosts[np.clip(member, 0, n - 1)], host)
    columns["host"] = pa.array(host[order].astype(np.int32), type=pa.int32())
    if "class_size" in columns:
        columns["class_size"] = pa.array(np.ones(len(source), dtype=np.int32), type=pa.int32())
    columns["deps"] = deps_out.take(pa.array(order))
    expanded_table = pa.table([columns[name] for name in table.column_names], schema=table.schema)
    metadata = {k: v for k, v in log.metadata.items() if k != KEY}
    return EventLog(expanded_table, metadata, groups=log.groups, flows=log.flows, queues=log.queues)
