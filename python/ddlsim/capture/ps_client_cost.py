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

Both are fitted as ``a + b * bytes`` by least squares over the rows of the
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


def client_cost_metadata(log) -> Optional[dict[str, Any]]:
    """The ``client_cost`` metadata of a PS capture's event log (see the module docs): ``issue_ns``,
    ``issue_ns_per_byte``, ``receive_ns``, ``receive_ns_per_byte``, ``per_kind`` (per request and response kind:
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
    return {"issue_ns": issue[0], "issue_ns_per_byte": issue[1], "receive_ns": receive[0], "receive_ns_per_byte": receive[1],
            "per_kind": per_kind, "iterations": [int(i) for i in counted],
            "model": "per request issued: issue_ns + issue_ns_per_byte x request bytes; per response handled: receive_ns + "
                     "receive_ns_per_byte x response bytes (least squares over the workers' rows of the counted iterations)"}
