"""Where the time of an iteration goes, per worker.

For each iteration window (end of the previous iteration to the end of this
one, where an iteration ends with its last operation) and each worker:
- compute: time the worker computes (union of its compute intervals);
- communication: time the worker has communication in progress (its
  transfers, either direction, and its collective operations);
- overlap: both at once (SketchDLC's phase 2);
- exposed communication: communication while not computing (phase 3);
- idle: neither.
Means over workers are reported; SketchDLC's overlap ratio is
overlap / iteration time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by the intervals [starts, ends)."""
    keep = ends > starts
    if not keep.any():
        return 0
    s, e = starts[keep], ends[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    group_start = s[new_group]
    last_of_group = np.append(np.flatnonzero(new_group)[1:] - 1, len(s) - 1)
    return int((reach[last_of_group] - group_start).sum())


def _clip(starts: np.ndarray, ends: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    return np.clip(starts, a, b), np.clip(ends, a, b)


def iteration_windows(events: pd.DataFrame) -> pd.DataFrame:
    """iteration, start_ns, end_ns: each iteration ends with its last operation."""
    ends = events[events["iteration"] >= 0].groupby("iteration")["end_ns"].max().sort_index()
    starts = ends.shift(1, fill_value=int(events["start_ns"].min()) if len(events) else 0)
    return pd.DataFrame({"iteration": ends.index.astype(int), "start_ns": starts.to_numpy(), "end_ns": ends.to_numpy()})


def iteration_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per iteration: time and its breakdown (seconds, mean over workers)."""
    windows = iteration_windows(events)
    workers = np.sort(events.loc[events["role"] == "worker", "rank"].unique())
    kind = events["kind"].to_numpy()
    rank = events["rank"].to_numpy()
    peer = events["peer"].to_numpy()
    start = events["start_ns"].to_numpy()
    end = events["end_ns"].to_numpy()
    is_compute = kind == "compute"
    is_transfer = kind == "transfer"
    is_collective = kind == "collective"
    # Ring steps are the inside of collectives: count the collective once.
    if is_collective.any():
        is_transfer &= events["op"].to_numpy() != "ring_step"
    rows = []
    for w in workers:
        c_mask = is_compute & (rank == w)
        m_mask = (is_transfer & ((rank == w) | (peer == w))) | (is_collective & (rank == w))
        cs, ce = start[c_mask], end[c_mask]
        ms, me = start[m_mask], end[m_mask]
        for it, a, b in windows.itertuples(index=False):
            c = _clip(cs, ce, a, b)
            m = _clip(ms, me, a, b)
            compute = union_length(*c)
            comm = union_length(*m)
            both = union_length(np.concatenate([c[0], m[0]]), np.concatenate([c[1], m[1]]))
            rows.append((it, w, compute, comm, compute + comm - both, b - a - both))
    per_worker = pd.DataFrame(rows, columns=["iteration", "rank", "compute", "communication", "overlap", "idle"])
    mean = per_worker.groupby("iteration")[["compute", "communication", "overlap", "idle"]].mean()
    table = windows.set_index("iteration").join(mean)
    out = pd.DataFrame(
        {
            "iteration": table.index.astype(int),
            "start_s": table["start_ns"].to_numpy() / 1e9,
            "end_s": table["end_ns"].to_numpy() / 1e9,
            "time_s": (table["end_ns"] - table["start_ns"]).to_numpy() / 1e9,
            "compute_s": table["compute"].to_numpy() / 1e9,
            "communication_s": table["communication"].to_numpy() / 1e9,
            "overlap_s": table["overlap"].to_numpy() / 1e9,
            "exposed_communication_s": (table["communication"] - table["overlap"]).to_numpy() / 1e9,
            "idle_s": table["idle"].to_numpy() / 1e9,
        }
    )
    out["overlap_ratio"] = np.where(out["time_s"] > 0, out["overlap_s"] / out["time_s"].where(out["time_s"] > 0, 1), 0.0)
    return out
