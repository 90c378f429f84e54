"""The all-reduce cost a DDP capture measured: T_ar(M) = a + b M per all-reduce call (the planner's
:mod:`ddlsim.plan.capture_cost` and replay's training ring rate, :func:`ddlsim.simulation.overheads.training_ring_rate`).

Two kinds of measurement in the capture go into it:

* the **small all-reduce** (``allreduce_small_ns`` in the metadata: the median of 40 four-byte all-reduces after
  training, 15 before 2026-11-27, :func:`ddlsim.capture.ddp.small_allreduce_ns`): one call of 4 bytes, almost
  nothing but the per-call cost a;
* the **training all-reduces** (the capture's ``collective`` rows): per counted iteration (warm-up left out, as
  everywhere), the time the all-reduces were in progress once every rank had launched them, i.e. the length of the
  union over the iteration's buckets of [the last rank's launch, the last rank's end]. For k buckets of M bytes in
  all that are served one after another, that union is k a + b M whether a bucket waits behind the previous one
  or for its gradients (it then starts on an idle link); buckets that run side by side (gloo's two threads) are
  counted once.

(a, b) is the least-squares solution of ``calls * a + bytes * b = time`` over those points (the small all-reduce
is one point, each counted iteration one). With the small all-reduce and training buckets of another size the two
are both determined; b is the effective time per byte the all-reduces got while training (the link, its headers
and whatever else slowed them), a the per-call cost. The planner takes a from here when it plans from a capture
(:func:`capture_alpha`): the ring's 2 (N - 1) steps each get a / (2 (N - 1)) as their latency, as replay does.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def allreduce_points(log, metadata: Optional[dict[str, Any]] = None) -> list[tuple[int, int, float]]:
    """(calls, bytes, ns) per measured point of a DDP capture (see the module docstring): the small all-reduce
    first (when recorded), then one per counted iteration."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.coerce import as_columns

    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    points: list[tuple[int, int, float]] = []
    small = meta.get("allreduce_small_ns")
    if isinstance(small, (int, float)) and not isinstance(small, bool) and small > 0:
        points.append((1, 4, float(small)))
    cols = as_columns(log)
    kind = np.asarray(cols.column("kind"))
    role = np.asarray(cols.column("role"))
    sel = (kind == "collective") & (role == "worker")
    rank = np.asarray(cols.column("rank"))[sel]
    iteration = np.asarray(cols.column("iteration"))[sel]
    group = np.asarray(cols.column("group"))[sel]
    size = np.asarray(cols.column("bytes"))[sel]
    start = np.asarray(cols.column("start_ns"))[sel].astype(np.int64)
    end = np.asarray(cols.column("end_ns"))[sel].astype(np.int64)
    iterations = np.unique(iteration[iteration >= 0])
    for it in iterations[warmup_iterations(meta, len(iterations)):]:
        mine = iteration == it
        spans = []
        total = 0
        for g in np.unique(group[mine]):
            rows = mine & (group == g)
            spans.append((int(start[rows].max()), int(end[rows].max())))
            total += int(size[rows][0])
        spans.sort()
        busy, (lo, hi) = 0, spans[0]
        for s, e in spans[1:]:
            if s > hi:
                busy += hi - lo
                lo, hi = s, e
            else:
                hi = max(hi, e)
        busy += hi - lo
        points.append((len(spans), total, float(busy)))
    return points


def fit_allreduce(points: list[tuple[int, int, float]]) -> Optional[tuple[float, float]]:
    """(a ns per call, b ns per byte) of ``calls * a + bytes * b = ns``, least squares over `points`; None when the
    points do not determine both (fewer than two kinds of point)."""
    if len(points) < 2:
        return None
    x = np.array([[float(k), float(m)] for k, m, _ in points])
    y = np.array([t for _, _, t in points])
    if np.linalg.matrix_rank(x) < 2:
        return None
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(a), float(b)
