"""Per-RPC latency breakdown of parameter-server traffic, computed from the
raw rows after the RPC paper (Pan et al., "Dissecting the communication
latency in distributed deep sparse learning", IMC '20, section 2).

An RPC is the set of rows sharing an ``rpc`` id >= 0:

- the request: a ``send`` row whose op ends in ``_request`` (e.g.
  ``push_request``), on the worker; its ``peer`` is the server;
- its ``recv`` row on the server (same ``message``): arrival at the server;
- the response: a ``send`` row whose op ends in ``_response``, on the server;
- its ``recv`` row on the worker (same ``message``): arrival at the worker;
- optional ``compute`` rows with the same ``rpc`` on the server (request
  processing) or on the worker (response processing).

With t0 = request send's ``start_ns`` (handed to the network stack on the
worker) and t1 = response recv's ``end_ns`` (in the worker's receive queue):

- PS processing interval [p0, p1]: the server's compute rows of this rpc
  (first start, last end); else the latest-ending compute row on the server
  among the response send's ``deps`` (e.g. the update a synchronous push
  waits for); else empty at the response send's start. p0 is at least the
  request's arrival, p1 at least p0;
- PS_queue = p0 - request arrival (recv end on the server);
  PS_proc = p1 - p0;
- N_tx = t1 - t0 - PS_queue - PS_proc (the paper's definition: everything
  else, both network stacks and the network);
- W_proc: the worker's compute rows of this rpc, from the first start (at
  least t1) to the last end; W_queue = its start - t1; both 0 when the log
  has none;
- total = t1 - t0 + W_queue + W_proc = N_tx + PS_queue + PS_proc + W_queue + W_proc.

All components are differences of times on one host (t0, t1 and the W parts
on the worker, the PS parts on the server), so they need no clock offsets;
t0_ns / t1_ns are reported on the reference clock. Components that need a
row the log lacks are null.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..trace.schema import BREAKDOWN_COLUMNS, EventLog, as_event_log, host_offsets

RPC_COLUMNS = (
    "rpc", "kind", "worker", "server", "iteration", "tensor", "request_bytes", "response_bytes",
    "t0_ns", "t1_ns", "total_ns", *BREAKDOWN_COLUMNS,
)  # fmt: skip

_FIELDS = ("id", "rank", "kind", "op", "rpc", "message", "iteration", "tensor", "bytes", "peer", "start_ns", "end_ns", "host")


def rpc_table(log: EventLog) -> pd.DataFrame:
    """One row per RPC (an rpc id with a request send): worker, server, kind
    (push / pull: the request op without ``_request``), iteration, tensor,
    bytes, t0, t1, total and the five components (ns, nullable Int64)."""
    log = as_event_log(log)
    has_rpc = log.column("rpc") >= 0
    if not has_rpc.any():
        return _empty()
    rows = pd.DataFrame({name: log.column(name)[has_rpc] for name in _FIELDS})
    kind, op = rows["kind"].to_numpy(), rows["op"].astype(str)
    is_send, is_recv, is_compute = kind == "send", kind == "recv", kind == "compute"
    requests = rows[is_send & op.str.endswith("_request").to_numpy()].sort_values(["start_ns", "id"])
    requests = requests.drop_duplicates("rpc")
    if requests.empty:
        return _empty()
    responses = rows[is_send & op.str.endswith("_response").to_numpy()].sort_values(["start_ns", "id"]).drop_duplicates("rpc")
    recvs = rows[is_recv][["message", "rank", "start_ns", "end_ns"]].sort_values("end_ns").drop_duplicates(["message", "rank"])
    computes = rows[is_compute].groupby(["rpc", "rank"]).agg(c0=("start_ns", "min"), c1=("end_ns", "max")).reset_index()

    table = requests.rename(columns={"rank": "worker", "peer": "server", "start_ns": "t0", "bytes": "request_bytes",
                                     "message": "q_message", "host": "worker_host"})
    table = table[["rpc", "op", "worker", "server", "iteration", "tensor", "request_bytes", "t0", "q_message", "worker_host"]]
    # nullable Int64 on the right of every left merge, so ns timestamps stay exact integers
    table = table.merge(
        _nullable(recvs.rename(columns={"message": "q_message", "rank": "server", "end_ns": "arrival"})[
            ["q_message", "server", "arrival"]], ["arrival"]),
        on=["q_message", "server"], how="left")
    response = responses.rename(columns={"id": "p_id", "start_ns": "p_start", "bytes": "response_bytes", "message": "p_message"})
    table = table.merge(_nullable(response[["rpc", "p_id", "p_start", "response_bytes", "p_message"]],
                                  ["p_id", "p_start", "response_bytes", "p_message"]), on="rpc", how="left")
    table = table.merge(
        _nullable(recvs.rename(columns={"message": "p_message", "rank": "worker", "end_ns": "t1"})[["p_message", "worker", "t1"]],
                  ["p_message", "t1"]),
        on=["p_message", "worker"], how="left")
    server_compute = _nullable(computes.rename(columns={"rank": "server", "c0": "s0", "c1": "s1"}), ["s0", "s1"])
    table = table.merge(server_compute, on=["rpc", "server"], how="left")
    worker_compute = _nullable(computes.rename(columns={"rank": "worker", "c0": "w0", "c1": "w1"}), ["w0", "w1"])
    table = table.merge(worker_compute, on=["rpc", "worker"], how="left")

    def get(name):
        series = table[name]
        return series.to_numpy(dtype=np.int64, na_value=0), series.notna().to_numpy()

    (t0, _), (t1, has_t1), (arrival, has_arrival) = get("t0"), get("t1"), get("arrival")
    (p_id, has_response), (p_start, _) = get("p_id"), get("p_start")
    (s0, has_s), (s1, _), (w0, has_w), (w1, _) = get("s0"), get("s1"), get("w0"), get("w1")
    (d0, d1), has_d = _compute_deps(log, p_id, has_response, table["server"].to_numpy())
    p0 = np.where(has_s, s0, np.where(has_d, d0, p_start))
    p1 = np.where(has_s, s1, np.where(has_d, d1, p_start))
    p0 = np.maximum(p0, arrival)
    p1 = np.maximum(p1, p0)
    has_ps = has_arrival & has_response
    ps_queue, ps_proc = p0 - arrival, p1 - p0
    w0 = np.where(has_w, np.maximum(w0, t1), t1)
    w1 = np.where(has_w, np.maximum(w1, w0), t1)
    w_queue, w_proc = w0 - t1, w1 - w0
    n_tx = t1 - t0 - ps_queue - ps_proc
    offset = host_offsets(log.metadata, table["worker_host"].to_numpy())
    shift = 0 if offset is None else offset

    def ints(values, valid):
        valid = np.broadcast_to(np.asarray(valid, dtype=bool), (len(table),))
        values = np.broadcast_to(np.asarray(values, dtype=np.int64), (len(table),))
        return pd.arrays.IntegerArray(np.where(valid, values, 0), ~valid)

    ops = table["op"].astype(str)
    out = pd.DataFrame({
        "rpc": table["rpc"].to_numpy(dtype=np.int64),
        "kind": ops.str.slice(0, -len("_request")).to_numpy(dtype=object),
        "worker": table["worker"].to_numpy(dtype=np.int64),
        "server": table["server"].to_numpy(dtype=np.int64),
        "iteration": table["iteration"].to_numpy(dtype=np.int64),
        "tensor": table["tensor"].to_numpy(dtype=np.int64),
        "request_bytes": table["request_bytes"].to_numpy(dtype=np.int64),
        "response_bytes": ints(*get("response_bytes")),
        "t0_ns": ints(t0 + shift, True),
        "t1_ns": ints(t1 + shift, has_t1),
        "total_ns": ints(t1 - t0 + w_queue + w_proc, has_t1),
        "w_proc_ns": ints(w_proc, has_t1),
        "w_queue_ns": ints(w_queue, has_t1),
        "ps_proc_ns": ints(ps_proc, has_ps),
        "ps_queue_ns": ints(ps_queue, has_ps),
        "n_tx_ns": ints(n_tx, has_ps & has_t1),
    })
    return out.sort_values(["t0_ns", "rpc"], kind="stable").reset_index(drop=True)


def _nullable(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    for column in columns:
        frame[column] = frame[column].astype("Int64")
    return frame


def _compute_deps(log: EventLog, response_ids: np.ndarray, valid: np.ndarray, servers: np.ndarray):
    """([start], [end]) of the latest-ending compute row on the server among
    each response send's deps, and where there is one."""
    d0 = np.zeros(len(response_ids), dtype=np.int64)
    d1 = np.zeros(len(response_ids), dtype=np.int64)
    has = np.zeros(len(response_ids), dtype=bool)
    if not valid.any():
        return (d0, d1), has
    ids = log.column("id")
    order = np.argsort(ids, kind="stable")
    rows = order[np.searchsorted(ids[order], response_ids[valid])]
    deps = log.table.column("deps").combine_chunks().take(rows)
    targets = pc.list_flatten(deps).to_numpy()
    if not len(targets):
        return (d0, d1), has
    owners = pc.list_parent_indices(deps).to_numpy()
    slot = np.searchsorted(ids[order], targets).clip(max=len(ids) - 1)
    found = ids[order][slot] == targets
    dep_rows = order[slot]
    kind = log.column("kind")[dep_rows]
    rank = log.column("rank")[dep_rows]
    keep = found & (kind == "compute") & (rank == servers[valid][owners])
    if not keep.any():
        return (d0, d1), has
    frame = pd.DataFrame({"owner": owners[keep], "start": log.column("start_ns")[dep_rows[keep]],
                          "end": log.column("end_ns")[dep_rows[keep]]})
    latest = frame.sort_values(["owner", "end"]).drop_duplicates("owner", keep="last")
    positions = np.flatnonzero(valid)[latest["owner"].to_numpy()]
    d0[positions] = latest["start"].to_numpy()
    d1[positions] = latest["end"].to_numpy()
    has[positions] = True
    return (d0, d1), has


def _empty() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype="Int64" if name.endswith("_ns") or name == "response_bytes"
                                         else (object if name == "kind" else np.int64)) for name in RPC_COLUMNS})
