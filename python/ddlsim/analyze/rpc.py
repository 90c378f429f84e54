"""Per-RPC latency breakdown of parameter-server traffic, after the RPC
paper (dissecting-rpc-latency-sparse-ddl, §2): for each push or pull RPC a
worker issues,

    total = t1 - t0 = N_tx + PS_queue + PS_proc (+ W_queue + W_proc)

where t0 is when the request leaves the worker and t1 when the response
arrives. In a simulated log:
- N_tx: time the request and the response spend in the network;
- PS_queue: from the request's arrival to the start of its processing (for a
  synchronous push this includes waiting for the other workers' pushes);
- PS_proc: the server update a push triggers (0 for a pull: no search cost
  is modelled);
- W_queue, W_proc: 0 (the worker's handling of responses is not modelled).
The values go on the RPC's response row, as docs/event-log.md specifies.
"""

from __future__ import annotations

import pandas as pd

from ..trace.schema import BREAKDOWN_COLUMNS


def fill_rpc_breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Returns `events` with the five breakdown columns set on PS response rows."""
    requests = events[events["op"].isin(["push_request", "pull_request"])]
    if requests.empty:
        return events
    responses = events[events["op"].isin(["push_response", "pull_response"])]
    pair = requests[["rpc", "start_ns", "end_ns", "op", "iteration", "tensor"]].merge(
        responses[["rpc", "id", "start_ns", "end_ns"]], on="rpc", suffixes=("_req", "_resp"), validate="one_to_one"
    )
    updates = events[events["op"] == "update"][["iteration", "tensor", "start_ns", "end_ns"]].rename(
        columns={"start_ns": "update_start", "end_ns": "update_end"}
    )
    pair = pair.merge(updates, on=["iteration", "tensor"], how="left")
    is_push = pair["op"] == "push_request"
    n_tx = (pair["end_ns_req"] - pair["start_ns_req"]) + (pair["end_ns_resp"] - pair["start_ns_resp"])
    processing_start = pair["update_start"].where(is_push, pair["start_ns_resp"])
    ps_proc = (pair["update_end"] - pair["update_start"]).where(is_push, 0)
    ps_queue = processing_start - pair["end_ns_req"]
    values = pd.DataFrame(
        {
            "w_proc_ns": 0,
            "w_queue_ns": 0,
            "ps_proc_ns": ps_proc.astype("int64"),
            "ps_queue_ns": ps_queue.astype("int64"),
            "n_tx_ns": n_tx.astype("int64"),
        }
    )
    out = events.copy()
    position = pd.Series(range(len(out)), index=out["id"])
    rows = position.loc[pair["id"].to_numpy()].to_numpy()
    for col in BREAKDOWN_COLUMNS:
        column = out[col].to_numpy(dtype=object, copy=True) if out[col].dtype == object else out[col].array.copy()
        column[rows] = values[col].to_numpy()
        out[col] = pd.array(column, dtype="Int64")
    return out


def rpc_table(events: pd.DataFrame) -> pd.DataFrame:
    """One row per RPC: worker, server, kind (push/pull), iteration, tensor,
    bytes, t0, total and the five components (ns)."""
    resp = events[events["op"].isin(["push_response", "pull_response"]) & events["n_tx_ns"].notna()]
    req = events[events["op"].isin(["push_request", "pull_request"])][["rpc", "start_ns", "bytes"]]
    table = resp.merge(req, on="rpc", suffixes=("", "_req"))
    return pd.DataFrame(
        {
            "rpc": table["rpc"],
            "worker": table["peer"],
            "server": table["rank"],
            "kind": table["op"].str.replace("_response", "", regex=False),
            "iteration": table["iteration"],
            "tensor": table["tensor"],
            "request_bytes": table["bytes_req"],
            "response_bytes": table["bytes"],
            "t0_ns": table["start_ns_req"],
            "total_ns": table["end_ns"] - table["start_ns_req"],
            **{col: table[col].astype("int64") for col in BREAKDOWN_COLUMNS},
        }
    ).reset_index(drop=True)
