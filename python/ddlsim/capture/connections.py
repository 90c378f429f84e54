"""Connection-scaling microbenchmark (the RPC paper's section 3, Fig. 9): one
server, C client processes (one TensorPipe connection each over TCP) sending
their share of the same total number of RPC requests of a fixed size.

The server queues each request (arrival), serves the queue with one thread
(processing: reading the payload) and answers; rows are recorded like the PS
capture's (``push_request`` / ``push_response`` messages, a ``process``
compute row with the rpc), so ``ddlsim analyze`` sees the RPC breakdown and
the concurrent connections of each run. :func:`run_scaling` runs one job per
connection count and fits the per-request server time (queueing +
processing, arrival to response) against C by least squares, and the
per-request *service* time (:func:`service_times`: the server's time per
request with the waiting behind other requests taken out) the same way:
that fit is the engine's per-request server cost a + b C
(``strategy.server_cost``, docs/validation.md), which simulates the queueing
itself.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch.distributed import rpc

from ..errors import DdlsimError
from ..safe_io import write_text_file
from .ps import shutdown_rpc
from .recorder import RankRecorder, now_ns

_QUEUE: "queue.Queue[Any]" = queue.Queue()


def _name(rank: int) -> str:
    return "server" if rank == 0 else f"client{rank}"


@rpc.functions.async_execution
def _handle(client: int, message: int, rpc_id: int, payload):
    arrival = now_ns()
    fut = torch.futures.Future()
    _QUEUE.put((client, message, rpc_id, payload, arrival, fut))
    return fut


def _serve(rec: RankRecorder) -> None:
    while (item := _QUEUE.get()) is not None:
        client, message, rpc_id, payload, arrival, fut = item
        nbytes = payload.numel() * payload.element_size()
        recv = rec.row("recv", "push_request", arrival, arrival, deps=[], peer=client, message=message, rpc=rpc_id,
                       bytes=nbytes, iteration=0, tensor=0)
        p0 = now_ns()
        float(payload.sum())
        proc = rec.row("compute", "process", p0, now_ns(), deps=[recv], rpc=rpc_id, iteration=0, tensor=0)
        reply = rec.new_message()
        s0 = now_ns()
        fut.set_result(reply)
        rec.row("send", "push_response", s0, now_ns(), deps=[proc], peer=client, message=reply, rpc=rpc_id, bytes=0,
                iteration=0, tensor=0)


def run_rank(config: dict, rank: int, world_size: int, out_dir: str | Path) -> None:
    torch.set_num_threads(1)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", num_worker_threads=4,
        rpc_timeout=float(config.get("timeout_s", 60)), _transports=["uv"], _channels=["basic"])
    rpc.init_rpc(_name(rank), rank=rank, world_size=world_size, rpc_backend_options=options)
    rec = RankRecorder(out_dir, rank, "server" if rank == 0 else "worker")
    if rank == 0:
        thread = threading.Thread(target=_serve, args=(rec,), daemon=True)
        thread.start()
        shutdown_rpc(rpc, rank, "connection scaling")  # TensorPipe's known shutdown race is noted, not raised
        _QUEUE.put(None)
        thread.join()
        rec.close()
        return
    clients, total = world_size - 1, int(config["requests"])
    share = total // clients + (1 if rank - 1 < total % clients else 0)
    payload = torch.zeros(max(int(config["request_bytes"]) // 4, 1))
    for _ in range(share):
        message, rpc_id = rec.new_message(), rec.new_id()
        t0 = now_ns()
        fut = rpc.rpc_async("server", _handle, args=(rank, message, rpc_id, payload))
        sent = rec.row("send", "push_request", t0, now_ns(), deps=[], peer=0, message=message, rpc=rpc_id,
                       bytes=payload.numel() * 4, iteration=0, tensor=0)
        reply = fut.wait()
        t1 = now_ns()
        rec.row("recv", "push_response", t1, t1, deps=[sent], peer=0, message=reply, rpc=rpc_id, bytes=0,
                iteration=0, tensor=0)
    shutdown_rpc(rpc, rank, "connection scaling")
    rec.close()


def request_table(log) -> "Any":
    """Per request: client, latency (request send start to response recv),
    server queueing (arrival to processing start), processing, server time
    (arrival to the response's send start) and service time (:func:`service_times`)."""
    df = log.table.to_pandas()
    sends, recvs = df[df.kind == "send"], df[df.kind == "recv"]
    req = sends[sends.op == "push_request"][["rpc", "rank", "start_ns", "message"]].rename(
        columns={"rank": "client", "start_ns": "t0", "message": "q"})
    arrival = recvs[recvs.op == "push_request"][["message", "end_ns"]].rename(columns={"message": "q", "end_ns": "arrival"})
    proc = df[df.kind == "compute"][["rpc", "start_ns", "end_ns"]].rename(columns={"start_ns": "p0", "end_ns": "p1"})
    resp = sends[sends.op == "push_response"][["rpc", "start_ns", "end_ns", "message"]].rename(
        columns={"start_ns": "s0", "end_ns": "s1", "message": "r"})
    back = recvs[recvs.op == "push_response"][["message", "end_ns"]].rename(columns={"message": "r", "end_ns": "t1"})
    t = req.merge(arrival, on="q").merge(proc, on="rpc").merge(resp, on="rpc").merge(back, on="r")
    out = t.assign(latency_ns=t.t1 - t.t0, queue_ns=t.p0 - t.arrival, proc_ns=t.p1 - t.p0, server_ns=t.s0 - t.arrival,
                   service_ns=service_times(t.arrival, t.p0, t.s1))
    return out[["rpc", "client", "t0", "latency_ns", "queue_ns", "proc_ns", "server_ns", "service_ns"]].sort_values("t0")


def service_times(arrival, start, done) -> "Any":
    """Per request, the time the server spent on it alone: one thread serves
    the requests in the order they started (`start`), so request i is the
    server's from the later of its arrival and the end of the request before
    it (`done`: the end of its response's send) until its own `done`. Waiting
    behind earlier requests is left out (a FIFO queue's busy-period
    decomposition); a request that found the server idle counts from its
    arrival (the thread's wake-up is part of its cost). What the engine's
    per-request server cost is (it queues the requests itself)."""
    import numpy as np

    arrival, start, done = (np.asarray(v, dtype=np.int64) for v in (arrival, start, done))
    out = np.zeros(len(arrival), dtype=np.int64)
    free = None
    for i in np.argsort(start, kind="stable"):
        begin = arrival[i] if free is None else max(arrival[i], free)
        out[i] = done[i] - begin
        free = done[i] if free is None else max(free, done[i])
    return out


def fit_line(x, y) -> dict:
    """Least squares y = a + b x and its R^2."""
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise DdlsimError("connection scaling fit needs at least two different connection counts (e.g. --connections 1,2,4)")
    b, a = np.polyfit(x, y, 1)
    residual = float(((y - (a + b * x)) ** 2).sum())
    spread = float(((y - y.mean()) ** 2).sum())
    return {"a": float(a), "b": float(b), "r2": 1.0 - residual / spread if spread > 0 else 1.0, "points": int(len(x))}


def run_scaling(connections: list[int], requests: int, request_bytes: int, out_dir: str | Path, *,
                timeout_s: float = 300.0, on_done: Optional[Callable[[dict], None]] = None) -> dict:
    """One job per connection count under ``out_dir/c<C>/`` (events.parquet,
    requests.csv); ``out_dir/scaling.csv`` (per C: means in microseconds,
    total seconds) and ``out_dir/fit.json`` (mean server time per request, us,
    = a + b * C; under ``service``, the same fit of the mean service time). Interrupted (Ctrl-C, SIGTERM), it leaves none of them (see :mod:`.outdir`)."""
    if not connections or min(connections) < 1:
        raise DdlsimError(f"--connections {connections}: give connection counts >= 1, e.g. --connections 1,2,4,8")
    if requests < max(connections):
        raise DdlsimError(f"--requests {requests} is fewer than {max(connections)} connections; every connection needs one")
    if request_bytes < 4:
        raise DdlsimError(f"--request-bytes {request_bytes}: give at least 4 bytes")
    from .outdir import capture_dir

    with capture_dir(out_dir) as out:  # interrupted: every c<C>/ run and table of this call goes
        return _run_scaling(connections, requests, request_bytes, out, timeout_s, on_done)


def _run_scaling(connections: list[int], requests: int, request_bytes: int, out: Path, timeout_s: float,
                 on_done: Optional[Callable[[dict], None]]) -> dict:
    import pandas as pd

    from ..trace import write_event_log
    from .launch import launch_local
    from .merge import merge_capture

    rows = []
    for c in connections:
        job_dir = out / f"c{c}"
        config = {"requests": requests, "request_bytes": request_bytes, "timeout_s": timeout_s}
        launch_local("connections", config, c + 1, job_dir, timeout_s=timeout_s)
        log = merge_capture(job_dir, metadata={"job": "connections", "connections": c, "requests": requests,
                                               "request_bytes": request_bytes})
        write_event_log(log, job_dir / "events.parquet")
        table = request_table(log)
        write_text_file(job_dir / "requests.csv", table.to_csv(index=False))
        total_ns = int((table.t0 + table.latency_ns).max() - table.t0.min())
        row = {"connections": c, "requests": len(table), "server_us": float(table.server_ns.mean()) / 1e3,
               "queue_us": float(table.queue_ns.mean()) / 1e3, "proc_us": float(table.proc_ns.mean()) / 1e3,
               "service_us": float(table.service_ns.mean()) / 1e3,
               "latency_us": float(table.latency_ns.mean()) / 1e3, "total_s": total_ns / 1e9}
        rows.append(row)
        if on_done is not None:
            on_done(row)
    summary = pd.DataFrame(rows)
    write_text_file(out / "scaling.csv", summary.to_csv(index=False))
    fit = {"model": "server_us = a + b * connections", **fit_line(summary.connections, summary.server_us),
           "requests": requests, "request_bytes": request_bytes,
           "service": {"model": "service_us = a + b * connections", **fit_line(summary.connections, summary.service_us)}}
    write_text_file(out / "fit.json", json.dumps(fit, indent=2) + "\n")
    return {"table": summary, "fit": fit}


def server_cost_metadata(fit: dict, connections: list[int]) -> dict:
    """What a PS capture records of its connection-scaling run (``server_cost`` in its metadata): the service-time
    fit of :func:`run_scaling` in ns, which ``ddlsim replay`` gives the engine as ``strategy.server_cost``."""
    service = fit["service"]
    return {"a_ns": float(service["a"]) * 1e3, "b_ns": float(service["b"]) * 1e3, "r2": float(service["r2"]),
            "connections": [int(c) for c in connections], "requests": int(fit["requests"]),
            "request_bytes": int(fit["request_bytes"]),
            "model": "service time per request = a_ns + b_ns * connections (least squares over the mean per count)"}
