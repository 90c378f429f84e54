"""The parameter-server workers' own per-request cost, measured in a PS
capture (``client_cost`` in its metadata; docs/capture-ps.md), which
``ddlsim replay`` simulates as ``strategy.client_cost``
(docs/parameter-server.md).

A worker's training loop is one Python thread. It is held

* **issuing** each request: the worker's ``send`` row of a ``push_request``
  or ``pull_request`` spans the ``rpc_async`` call (pickling, TensorPipe's
  hand-off), from just before the call to its return;
* **handling** each response: the worker's ``ack`` (push) or ``apply``
  (pull) compute row, from the moment the loop takes the response off its
  receive queue to the end of its processing (the Future's value, the
  bookkeeping, the copy into the model).

and, before handling a response that reached it **idle** (blocked waiting
for one), for the loop's **wake-up**: the RPC thread's callback queues the
response, and the training thread must be scheduled and take the GIL
before it takes it. A response reached an idle loop when it arrived (its
``recv`` row, t1) after the loop's last row before taking it ended (no
compute or send row of the worker, nor the handling of an earlier
response, was running or still to come before it); its wait w0 - t1 (w0:
its ``ack`` / ``apply`` row's start) is then the wake-up alone
(:func:`response_waits`). ``wakeup_ns`` is the **mean** of these waits:
the replay adds a constant per response that reaches an idle worker, and
only the mean makes their sum the measured sum (the waits have a long tail
on a loaded machine: a thread that waits for a core; the median would
leave that tail out of the predicted mean iteration). The median is kept
beside it (``wakeup_median_ns``). A response that reached a busy loop
waits behind the loop's work, which the replay simulates itself.

Both costs are fitted as ``a + b * bytes`` by least squares over the rows of the
counted iterations (:func:`ddlsim.analyze.breakdown.warmup_iterations`
leaves the warm-up iteration out, as the capture's mean does), bytes being
the request's (a pull request has none) or the response's (an ack has
none). A negative coefficient is dropped and the other one keeps the
fitted total at the rows' mean size, so the simulated cost per iteration
equals the measured sum either way. The rows already hold every
measurement: the fit adds nothing to the run.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

REQUESTS = ("push_request", "pull_request")
RESPONSES = {"ack": "push_response", "apply": "pull_response"}


def _fit(bytes_: np.ndarray, ns: np.ndarray) -> tuple[float, float]:
    """(a ns, b ns per byte) of ns ~ a + b bytes, neither below 0, keeping the sum of the fitted values at the
    sum of `ns` (see the module docs)."""
    if len(ns) == 0:
        return 0.0, 0.0
    mean_x, mean_y = float(bytes_.mean()), float(ns.mean())
    var = float(((bytes_ - mean_x) ** 2).sum())
    b = float(((bytes_ - mean_x) * (ns - mean_y)).sum()) / var if var > 0 else 0.0
    a = mean_y - b * mean_x
    if b < 0 or mean_y <= 0:
        return max(mean_y, 0.0), 0.0
    if a < 0:
        return 0.0, mean_y / mean_x
    return a, b


def response_waits(log) -> list[dict[str, Any]]:
    """Per response a worker's loop handled (an ``ack`` / ``apply`` row, or a replay's ``handle`` row, with the rpc
    of a response's ``recv`` row on the same worker), in the order of the log: ``worker``, ``rpc``, ``iteration``, ``kind`` (``push_response`` /
    ``pull_response``), ``arrival_ns`` (the recv row's end, t1), ``taken_ns`` (the handling row's start, w0),
    ``wait_ns`` (w0 - t1, W_queue) and ``idle``: whether the response arrived at or after the end of the worker's
    last compute or send row that ended before w0 (the loop was blocked waiting for it, so the wait is its wake-up),
    else it reached a busy loop. All on the worker's own clock; every iteration (see :func:`wakeup_fit`)."""
    from ..trace.coerce import as_columns

    log = as_columns(log)
    names = ("rank", "role", "iteration", "kind", "op", "rpc", "start_ns", "end_ns")
    c = {k: np.asarray(log.column(k)) for k in names}
    worker = c["role"] == "worker"
    received = worker & (c["kind"] == "recv") & np.isin(c["op"], list(RESPONSES.values()))
    arrival = {(int(r), int(p)): (str(o), int(e)) for r, p, o, e in
               zip(c["rank"][received], c["rpc"][received], c["op"][received], c["end_ns"][received])}
    loop = worker & np.isin(c["kind"], ["compute", "send"])
    ends: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per worker: its loop rows' ends, sorted, and their rows
    for rank in np.unique(c["rank"][loop]):
        rows = np.flatnonzero(loop & (c["rank"] == rank))
        order = np.argsort(c["end_ns"][rows], kind="stable")
        ends[int(rank)] = (c["end_ns"][rows][order].astype(np.int64), rows[order])
    out = []
    # a capture's ack / apply rows, or a replay's handle rows (lower/client_cost.rs)
    for i in np.flatnonzero(worker & (c["kind"] == "compute") & np.isin(c["op"], [*RESPONSES, "handle"])):
        rank = int(c["rank"][i])
        if (rank, int(c["rpc"][i])) not in arrival:
            continue
        kind, t1 = arrival[(rank, int(c["rpc"][i]))]
        w0 = int(c["start_ns"][i])
        e, which = ends[rank]
        k = int(np.searchsorted(e, w0, side="right")) - 1  # the last row that ended by w0, other than this one
        while k >= 0 and which[k] == i:
            k -= 1
        last = int(e[k]) if k >= 0 else None
        out.append({"worker": rank, "rpc": int(c["rpc"][i]), "iteration": int(c["iteration"][i]), "kind": kind,
                    "arrival_ns": t1, "taken_ns": w0, "wait_ns": max(0, w0 - t1), "idle": last is None or t1 >= last})
    return out


def wakeup_fit(log) -> Optional[dict[str, Any]]:
    """The workers' loop wake-up from the responses of the counted iterations that reached an idle loop
    (:func:`response_waits`): ``wakeup_ns`` (their mean wait, see the module docs), ``wakeup_median_ns``,
    ``idle_responses`` and ``busy_responses`` (how many reached an idle and a busy loop); None when no counted
    response was handled."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.coerce import as_columns

    log = as_columns(log)
    meta = getattr(log, "metadata", {}) or {}
    c = {k: np.asarray(log.column(k)) for k in ("role", "iteration")}
    iterations = np.unique(c["iteration"][(c["role"] == "worker") & (c["iteration"] >= 0)])
    counted = set(int(i) for i in iterations[warmup_iterations(meta, len(iterations)):])
    rows = [r for r in response_waits(log) if r["iteration"] in counted]
    if not rows:
        return None
    idle = np.array([r["wait_ns"] for r in rows if r["idle"]], dtype=np.float64)
    return {"wakeup_ns": float(idle.mean()) if len(idle) else 0.0,
            "wakeup_median_ns": float(np.median(idle)) if len(idle) else 0.0,
            "idle_responses": int(len(idle)), "busy_responses": int(len(rows) - len(idle))}


def client_cost_metadata(log) -> Optional[dict[str, Any]]:
    """The ``client_cost`` metadata of a PS capture's event log (see the module docs): ``issue_ns``,
    ``issue_ns_per_byte``, ``receive_ns``, ``receive_ns_per_byte``, the wake-up (:func:`wakeup_fit`'s fields), ``per_kind`` (per request and response kind:
    rows, mean ns, mean bytes) and ``iterations`` (those counted); None when the log has no worker request rows in
    its counted iterations."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.coerce import as_columns

    log = as_columns(log)
    meta = getattr(log, "metadata", {}) or {}
    names = ("rank", "role", "iteration", "kind", "op", "rpc", "bytes", "start_ns", "end_ns")
    c = {k: np.asarray(log.column(k)) for k in names}
    worker = c["role"] == "worker"
    iterations = np.unique(c["iteration"][worker & (c["iteration"] >= 0)])
    counted = iterations[warmup_iterations(meta, len(iterations)):]
    mine = worker & np.isin(c["iteration"], counted)
    took = (c["end_ns"] - c["start_ns"]).astype(np.float64)
    sent = mine & (c["kind"] == "send") & np.isin(c["op"], REQUESTS)
    if not sent.any():
        return None
    # a response's bytes are on its recv row (the same worker and rpc)
    recv_bytes = {(int(r), int(p), str(o)): int(b) for r, p, o, b in
                  zip(c["rank"][worker & (c["kind"] == "recv")], c["rpc"][worker & (c["kind"] == "recv")],
                      c["op"][worker & (c["kind"] == "recv")], c["bytes"][worker & (c["kind"] == "recv")])}
    handled = np.flatnonzero(mine & (c["kind"] == "compute") & np.isin(c["op"], list(RESPONSES)))
    handled = np.array([i for i in handled if (int(c["rank"][i]), int(c["rpc"][i]), RESPONSES[str(c["op"][i])]) in recv_bytes],
                       dtype=np.int64)
    response_bytes = np.array([recv_bytes[(int(c["rank"][i]), int(c["rpc"][i]), RESPONSES[str(c["op"][i])])] for i in handled],
                              dtype=np.float64)
    issue = _fit(c["bytes"][sent].astype(np.float64), took[sent])
    receive = _fit(response_bytes, took[handled])
    per_kind: dict[str, dict[str, float]] = {}
    for op in REQUESTS:
        sel = sent & (c["op"] == op)
        if sel.any():
            per_kind[op] = {"rows": int(sel.sum()), "mean_ns": float(took[sel].mean()), "mean_bytes": float(c["bytes"][sel].mean())}
    for handler, response in RESPONSES.items():
        sel = handled[c["op"][handled] == handler]
        if len(sel):
            per_kind[response] = {"rows": int(len(sel)), "mean_ns": float(took[sel].mean()),
                                  "mean_bytes": float(response_bytes[c["op"][handled] == handler].mean())}
    wakeup = wakeup_fit(log) or {"wakeup_ns": 0.0, "wakeup_median_ns": 0.0, "idle_responses": 0, "busy_responses": 0}
    return {"issue_ns": issue[0], "issue_ns_per_byte": issue[1], "receive_ns": receive[0], "receive_ns_per_byte": receive[1],
            **wakeup, "per_kind": per_kind, "iterations": [int(i) for i in counted],
            "model": "per request issued: issue_ns + issue_ns_per_byte x request bytes; per response handled: receive_ns + "
                     "receive_ns_per_byte x response bytes (least squares over the workers' rows of the counted iterations); "
                     "per response that reached an idle loop, before its handling: wakeup_ns (the mean of those waits)"}
