"""Where a parameter-server capture's pushes wait at the server, and the
server's update cost, measured from the capture's own rows
(docs/validation.md, "PS: where the pushes wait at the server").

The capture's server (:mod:`.ps_server`) is one thread: TensorPipe's handler
threads only stamp a request's arrival (its ``recv`` row) and queue it; the
one processing thread takes the queue in arrival order, runs each key's
update once every worker's push of that key is in (synchronous mode), then
answers the pushes (``send`` rows) and serves the pulls (``read`` rows).
A push's server queue (the RPC breakdown's PS_queue, arrival to its update's
start) is then two waits, told apart by the rows:

* ``barrier_ns``: from its arrival to the arrival of the key's last push
  (the wait for the other workers: zero for the last push);
* ``serial_ns``: from that last arrival to the update's start (the one
  thread working through the requests and updates ahead of it).

The update itself holds the same thread: :func:`server_update_fit` fits the
``update`` rows' durations as ``a + b * bytes`` (the key's payload), which
``ddlsim replay`` simulates as the server's serial update
(``strategy.server_cost.update`` / ``update_ns_per_byte``; the per-request
part a + b C comes from the connection-scaling run, :mod:`.connections`).
Only the counted iterations are used
(:func:`ddlsim.analyze.breakdown.warmup_iterations`).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

_NAMES = ("rank", "role", "iteration", "kind", "op", "tensor", "bytes", "start_ns", "end_ns")


def _counted(log) -> tuple[dict[str, np.ndarray], np.ndarray, dict]:
    from ..analyze.breakdown import warmup_iterations
    from ..trace.coerce import as_columns

    log = as_columns(log)
    meta = getattr(log, "metadata", {}) or {}
    c = {k: np.asarray(log.column(k)) for k in _NAMES}
    iterations = np.unique(c["iteration"][(c["role"] == "worker") & (c["iteration"] >= 0)])
    counted = iterations[warmup_iterations(meta, len(iterations)):]
    return c, np.isin(c["iteration"], counted) & (c["role"] == "server"), {"iterations": [int(i) for i in counted]}


def _pushes(c: dict[str, np.ndarray], mine: np.ndarray) -> dict[tuple[int, int, int], list[tuple[int, int]]]:
    """(server, iteration, tensor) -> [(arrival, bytes)] of the push requests that reached the server."""
    out: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for i in np.flatnonzero(mine & (c["kind"] == "recv") & (c["op"] == "push_request")):
        key = (int(c["rank"][i]), int(c["iteration"][i]), int(c["tensor"][i]))
        out.setdefault(key, []).append((int(c["end_ns"][i]), int(c["bytes"][i])))
    return out


def push_queue(log) -> list[dict[str, int]]:
    """Per push request of the counted iterations whose key has an update row: server, iteration, tensor,
    arrival_ns, last_arrival_ns (the key's last push), update_start_ns, queue_ns (= update start - arrival, the
    RPC breakdown's PS_queue), barrier_ns and serial_ns (see the module docs; queue_ns = barrier_ns + serial_ns
    where the update started after the last arrival)."""
    c, mine, _ = _counted(log)
    pushes = _pushes(c, mine)
    starts: dict[tuple[int, int, int], int] = {}
    for i in np.flatnonzero(mine & (c["kind"] == "compute") & (c["op"] == "update")):
        key = (int(c["rank"][i]), int(c["iteration"][i]), int(c["tensor"][i]))
        starts[key] = min(starts.get(key, int(c["start_ns"][i])), int(c["start_ns"][i]))
    rows = []
    for key in sorted(set(pushes) & set(starts)):
        last = max(a for a, _ in pushes[key])
        for arrival, _ in sorted(pushes[key]):
            start = starts[key]
            rows.append({"server": key[0], "iteration": key[1], "tensor": key[2], "arrival_ns": arrival,
                         "last_arrival_ns": last, "update_start_ns": start, "queue_ns": start - arrival,
                         "barrier_ns": last - arrival, "serial_ns": start - last})
    return rows


def push_queue_summary(log) -> Optional[dict[str, Any]]:
    """Means over :func:`push_queue` (ns): ``queue_ns``, ``barrier_ns``, ``serial_ns``, the share of the queue
    that is the barrier, the server thread's summed ``update`` rows per counted iteration (``update_busy_ns``) and
    ``pushes``; None without push rows."""
    rows = push_queue(log)
    if not rows:
        return None
    c, mine, counted = _counted(log)
    updates = mine & (c["kind"] == "compute") & (c["op"] == "update")
    mean = {k: float(np.mean([r[k] for r in rows])) for k in ("queue_ns", "barrier_ns", "serial_ns")}
    busy = float((c["end_ns"][updates] - c["start_ns"][updates]).sum()) / max(1, len(counted["iterations"]))
    return {**mean, "barrier_share": mean["barrier_ns"] / mean["queue_ns"] if mean["queue_ns"] > 0 else 0.0,
            "update_busy_ns": busy, "pushes": len(rows), **counted}


def server_update_fit(log) -> Optional[dict[str, Any]]:
    """The server's update cost from its ``update`` rows of the counted iterations: ``update_ns`` +
    ``update_ns_per_byte`` x the key's payload bytes (its push request's), by least squares with neither term
    below 0 and the fitted sum kept at the measured sum (as the workers' cost, :mod:`.ps_client_cost`);
    ``rows``, ``mean_ns``, ``iterations``. None when the log has no update rows there (a log that is not a PS
    capture, or whose server recorded none)."""
    from .ps_client_cost import _fit

    c, mine, counted = _counted(log)
    pushes = _pushes(c, mine)
    rows = [i for i in np.flatnonzero(mine & (c["kind"] == "compute") & (c["op"] == "update"))
            if (int(c["rank"][i]), int(c["iteration"][i]), int(c["tensor"][i])) in pushes]
    if not rows:
        return None
    size = np.array([max(b for _, b in pushes[(int(c["rank"][i]), int(c["iteration"][i]), int(c["tensor"][i]))])
                     for i in rows], dtype=np.float64)
    took = np.array([int(c["end_ns"][i]) - int(c["start_ns"][i]) for i in rows], dtype=np.float64)
    a, b = _fit(size, took)
    return {"update_ns": a, "update_ns_per_byte": b, "rows": len(rows), "mean_ns": float(took.mean()), **counted,
            "model": "per update: update_ns + update_ns_per_byte x the key's payload bytes (least squares over the "
                     "server's update rows of the counted iterations)"}
