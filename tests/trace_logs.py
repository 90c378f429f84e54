"""Hand-made and random event logs (schema v2) shared by the trace and analyze tests."""

from __future__ import annotations

import numpy as np

from ddlsim.trace import event_log_from_arrays, event_log_from_rows

US = 1000  # ns per microsecond
BASE_US = 1_516_622_729_000_000  # a wall-clock epoch, as in the SketchDLC paper's sample


def small_rows() -> list[dict]:
    """One worker (rank 0), one server (rank 1): compute, a message (send +
    recv), a collective, a barrier and a marker."""
    return [
        dict(id=0, iteration=0, rank=0, role="worker", kind="compute", op="forward", name="fc1", layer=0,
             device="cuda:0", stream="compute", ready_ns=0, start_ns=0, end_ns=1500, deps=[]),
        dict(id=1, iteration=0, rank=0, role="worker", kind="send", op="push_request", name="fc1.weight",
             tensor=0, peer=1, message=7, bytes=4096, rpc=7, ready_ns=1500, start_ns=1500, end_ns=3000, deps=[0]),
        dict(id=2, iteration=0, rank=1, role="server", kind="recv", op="push_request", name="fc1.weight",
             tensor=0, peer=0, message=7, bytes=4096, rpc=7, ready_ns=3000, start_ns=3000, end_ns=4000, deps=[1]),
        dict(id=3, iteration=0, rank=0, role="worker", kind="collective", op="allreduce", collective=3,
             coll_type="allreduce", algorithm="ring", bytes=4096, ready_ns=4000, start_ns=4000, end_ns=6000, deps=[2]),
        dict(id=4, iteration=0, rank=0, role="worker", kind="barrier", op="barrier", coll_type="barrier",
             start_ns=6000, end_ns=6000, deps=[3]),
        dict(id=5, iteration=0, rank=1, role="server", kind="marker", op="epoch", start_ns=6000, end_ns=6000),
    ]


def small_log(**kwargs):
    return event_log_from_rows(small_rows(), **kwargs)


def ps_iteration_rows() -> list[dict]:
    """2 workers (ranks 0, 1), 1 server (rank 2), 2 tensors: one full PS
    iteration plus the first push of iteration 1 (times in microseconds on
    an epoch clock). Every message is a send row (first half of the
    transfer) and a recv row (second half, delivered at ``end``)."""
    rows: list[dict] = []

    def add(kind, op, rank, start, end, deps=(), role=None, ready=None, **extra):
        role = role or ("server" if rank == 2 else "worker")
        def ns(t):
            return BASE_US * US + round(t * US)

        rows.append(dict(id=len(rows), rank=rank, role=role, kind=kind, op=op,
                         ready_ns=None if ready is False else ns(start if ready is None else ready),
                         start_ns=ns(start), end_ns=ns(end), deps=list(deps), **extra))
        return len(rows) - 1

    def message(op, rank, peer, tensor, start, end, deps, rpc, iteration=0, ready=None):
        """Returns the recv row's id (what a later row waits for)."""
        size = {"push_request": 4000 + tensor, "push_response": 19, "pull_request": 28, "pull_response": 4003 + tensor}
        mid = (start + end) / 2
        common = dict(tensor=tensor, iteration=iteration, bytes=size[op], rpc=rpc, name=f"t{tensor}")
        send = add("send", op, rank, start, mid, deps, ready=ready, peer=peer, message=len(rows), **common)
        role = "server" if peer == 2 else "worker"
        # a capture-like recv row: when it became ready is unknown
        return add("recv", op, peer, mid, end, [send], role=role, ready=False, peer=rank, message=send, **common)

    bw01 = add("compute", "backward", 0, 0, 100, iteration=0, layer=1, name="l1")
    bw00 = add("compute", "backward", 0, 100, 200, [bw01], iteration=0, layer=0, name="l0")
    push01 = message("push_request", 0, 2, 1, 100, 150, [bw01], rpc=0)
    push00 = message("push_request", 0, 2, 0, 200, 250, [bw00], rpc=1)
    bw11 = add("compute", "backward", 1, 0, 120, iteration=0, layer=1, name="l1")
    bw10 = add("compute", "backward", 1, 120, 240, [bw11], iteration=0, layer=0, name="l0")
    push11 = message("push_request", 1, 2, 1, 120, 170, [bw11], rpc=2)
    push10 = message("push_request", 1, 2, 0, 240, 290, [bw10], rpc=3)
    up1 = add("compute", "update", 2, 170, 180, [push01, push11], iteration=0, tensor=1)
    ack01 = message("push_response", 2, 0, 1, 180, 210, [up1], rpc=0)
    ack11 = message("push_response", 2, 1, 1, 181, 215, [up1], rpc=2, ready=180)
    up0 = add("compute", "update", 2, 290, 300, [push00, push10], iteration=0, tensor=0)
    ack00 = message("push_response", 2, 0, 0, 300, 320, [up0], rpc=1)
    ack10 = message("push_response", 2, 1, 0, 301, 325, [up0], rpc=3, ready=300)
    pull01 = message("pull_request", 0, 2, 1, 210, 230, [ack01], rpc=4)
    pull11 = message("pull_request", 1, 2, 1, 215, 235, [ack11], rpc=5)
    pull00 = message("pull_request", 0, 2, 0, 320, 340, [ack00], rpc=6)
    pull10 = message("pull_request", 1, 2, 0, 325, 345, [ack10], rpc=7)
    param01 = message("pull_response", 2, 0, 1, 232, 270, [pull01], rpc=4, ready=230)
    param11 = message("pull_response", 2, 1, 1, 236, 275, [pull11], rpc=5, ready=235)
    param00 = message("pull_response", 2, 0, 0, 340, 380, [pull00], rpc=6)
    param10 = message("pull_response", 2, 1, 0, 345, 390, [pull10], rpc=7)
    fw0 = add("compute", "forward", 0, 380, 480, [param01, param00], iteration=1)
    fw1 = add("compute", "forward", 1, 390, 500, [param11, param10], iteration=1)
    message("push_request", 0, 2, 1, 480, 530, [fw0], rpc=8, iteration=1)
    message("push_request", 1, 2, 1, 500, 560, [fw1], rpc=9, iteration=1)
    return rows


def ps_iteration_log(**kwargs):
    return event_log_from_rows(ps_iteration_rows(), **kwargs)


def random_log(seed: int, rows: int = 200, ranks: int = 5, iterations: int = 3, offsets: dict | None = None,
               extension: bool = False):
    """A random but valid log: compute / send / recv / collective / barrier
    rows on ``ranks`` ranks (rank 0 a server, others workers, 2 ranks per
    host), deps pointing backwards in time, nullable ready and deps."""
    rng = np.random.default_rng(seed)
    n_messages = rows // 4
    n_other = rows - 2 * n_messages
    kinds = rng.choice(["compute", "collective", "barrier", "marker"], size=n_other, p=[0.6, 0.2, 0.1, 0.1])
    rank_other = rng.integers(0, ranks, n_other)
    start_other = rng.integers(0, 10_000, n_other)
    end_other = start_other + rng.integers(0, 800, n_other)
    sender = rng.integers(0, ranks, n_messages)
    receiver = (sender + rng.integers(1, ranks, n_messages)) % ranks
    send_start = rng.integers(0, 10_000, n_messages)
    send_end = send_start + rng.integers(0, 500, n_messages)
    recv_start = send_end
    recv_end = recv_start + rng.integers(0, 500, n_messages)
    n = n_other + 2 * n_messages
    kind = np.concatenate([kinds, np.full(n_messages, "send"), np.full(n_messages, "recv")]).astype(object)
    rank = np.concatenate([rank_other, sender, receiver])
    peer = np.concatenate([np.full(n_other, -1), receiver, sender])
    message = np.concatenate([np.full(n_other, -1), np.arange(n_messages), np.arange(n_messages)])
    start = np.concatenate([start_other, send_start, recv_start])
    end = np.concatenate([end_other, send_end, recv_end])
    host = rank // 2
    if offsets:
        # the recorded (local) time is the reference time minus the host's offset
        local = np.array([offsets.get(h, 0) for h in host])
        start, end = start - local, end - local
    permutation = rng.permutation(n)
    ids = rng.permutation(np.arange(10 * n))[:n]  # unique, unordered ids
    columns = {
        "id": ids,
        "iteration": np.minimum(np.concatenate([start_other, send_start, recv_start]) * iterations // 10_000, iterations - 1),
        "rank": rank,
        "role": np.where(rank == 0, "server", "worker").astype(object),
        "host": host,
        "kind": kind,
        "op": np.array([{"compute": "backward", "collective": "allreduce", "barrier": "barrier", "marker": "mark",
                         "send": "ring_step", "recv": "ring_step"}[k] for k in kind], dtype=object),
        "name": rng.choice(["", "conv1", "fc"], n).astype(object),
        "tensor": rng.integers(-1, 4, n),
        "peer": peer,
        "message": message,
        "bytes": rng.integers(0, 1 << 20, n),
        "priority": rng.integers(-2, 3, n),
        "start_ns": start,
        "end_ns": end,
    }
    columns = {name: values[permutation] for name, values in columns.items()}
    ready = np.where(rng.random(n) < 0.3, None, columns["start_ns"] - rng.integers(0, 100, n)).astype(object)
    columns["ready_ns"] = ready
    # deps: up to 3 rows (same host, so no clock skew) that ended before the row started
    deps = []
    by_host = {h: np.flatnonzero(columns["host"] == h) for h in np.unique(columns["host"])}
    for i in range(n):
        if rng.random() < 0.2:
            deps.append(None)
            continue
        pool = by_host[columns["host"][i]]
        earlier = pool[columns["end_ns"][pool] <= columns["start_ns"][i]]
        earlier = earlier[earlier != i]
        chosen = rng.choice(earlier, size=min(len(earlier), int(rng.integers(0, 4))), replace=False)
        deps.append([int(columns["id"][j]) for j in chosen])
    columns["deps"] = deps
    if extension:
        columns["x_score"] = rng.random(n)
    metadata = {"source": "random", "seed": seed}
    if offsets:
        metadata["clocks"] = {str(h): {"offset_ns": int(o), "domain": f"host{h}"} for h, o in offsets.items()}
    return event_log_from_arrays(columns, metadata=metadata, source=f"random log {seed}")
