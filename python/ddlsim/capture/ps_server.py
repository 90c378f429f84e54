"""The server side of the parameter-server capture: RPC handlers that queue
requests, and one processing thread that serves the queue.

A handler (``@rpc.functions.async_execution``) notes the request's arrival
and returns a Future; the processing thread processes the request (an
``update`` or a ``read`` compute row), completes the Future (TensorPipe then
sends the response; the response's send row spans that call), and only then
records the request's rows: recv, update or read, send (their ids are taken
before, for the deps), so that no response waits for the rows. Arrival,
processing start and end are all measured on the server.

Synchronous mode: a key's update for an iteration waits until every worker
has either pushed that key or sent all its pushes to this server for that
iteration (each push carries how many keys its worker pushes to this server
that iteration, so sparse workers that do not touch a key are not waited
for); the pushes are answered after the update. Asynchronous mode: each push
is applied on its own.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.distributed import rpc

from .recorder import RankRecorder, now_ns

# Requests queue here from the moment the module is imported: a worker may call before this server has built its
# model, and a handler must never block (blocked handlers would take all of TensorPipe's threads, including the
# one that must deliver this server's own clock-probe responses: a deadlock seen with 20+ early pushes).
_REQUESTS: queue.Queue = queue.Queue()


@dataclass
class Request:
    op: str  # "push" or "pull"
    worker: int
    key: int
    iteration: int
    message: int
    rpc: int
    count: int
    payload: Optional[torch.Tensor]
    arrival: int
    future: Any
    recv_id: int = -1


@rpc.functions.async_execution
def push(worker: int, key: int, iteration: int, message: int, rpc_id: int, count: int, grad: torch.Tensor):
    arrival = now_ns()
    fut = torch.futures.Future()
    _REQUESTS.put(Request("push", worker, key, iteration, message, rpc_id, count, grad, arrival, fut))
    return fut


@rpc.functions.async_execution
def pull(worker: int, key: int, iteration: int, message: int, rpc_id: int):
    arrival = now_ns()
    fut = torch.futures.Future()
    _REQUESTS.put(Request("pull", worker, key, iteration, message, rpc_id, 0, None, arrival, fut))
    return fut


class Server:
    def __init__(self, rec: RankRecorder, model, config: dict, workers: int):
        self.rec, self.model, self.config = rec, model, config
        self.workers = workers
        self.sync = bool(config["sync"])
        self.lr = float(config["lr"])
        self.queue = _REQUESTS
        self.keys = {k.key: k for k in model.keys}
        self.pending: dict[tuple[int, int], list[Request]] = {}
        self.expected: dict[tuple[int, int], int] = {}
        self.received: dict[tuple[int, int], int] = {}
        self.thread = threading.Thread(target=self._loop, name="ps-server", daemon=True)

    def start(self) -> "Server":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _loop(self) -> None:
        last_flush = now_ns()
        while True:
            try:
                req = self.queue.get(timeout=0.2)
            except queue.Empty:
                req = False
            if req is None:
                break
            if req:
                self._serve(req)
            if now_ns() - last_flush > 200_000_000:
                self.rec.flush()
                last_flush = now_ns()

    def _columns(self, req: Request) -> dict:
        k = self.keys[req.key]
        return {"iteration": req.iteration, "tensor": req.key, "layer": k.layer, "name": k.name}

    def _serve(self, req: Request) -> None:
        # A request's rows are recorded after its response is sent (their ids taken before, for the deps): the worker
        # waits for the response, not for the rows.
        req.recv_id = self.rec.new_id()
        cols = self._columns(req)
        if req.op == "pull":
            p0 = now_ns()
            value = self.model.value(req.key).clone()
            p1 = now_ns()
            read = self.rec.new_id()
            sent = self._respond(req, value)
            self._send_row(req, read, sent, cols)
            self.rec.held_row("compute", "read", p0, p1, [req.recv_id], {"rpc": req.rpc}, cols, read)
        elif not self.sync:
            self._update([req], rpc_id=req.rpc)
        else:
            slot = (req.iteration, req.worker)
            self.expected[slot] = req.count
            self.received[slot] = self.received.get(slot, 0) + 1
            self.pending.setdefault((req.iteration, req.key), []).append(req)
            for (iteration, key), reqs in list(self.pending.items()):
                if iteration == req.iteration and self._complete(iteration, reqs):
                    del self.pending[(iteration, key)]
                    self._update(reqs, rpc_id=-1)
        nbytes = 0 if req.payload is None else req.payload.numel() * req.payload.element_size()
        self.rec.held_row("recv", f"{req.op}_request", req.arrival, req.arrival, [],
                          {"peer": req.worker, "message": req.message, "rpc": req.rpc, "bytes": nbytes}, cols, req.recv_id)

    def _complete(self, iteration: int, reqs: list[Request]) -> bool:
        pushed = {r.worker for r in reqs}
        return all(w in pushed or self.received.get((iteration, w), -1) == self.expected.get((iteration, w))
                   for w in range(self.workers))

    def _update(self, reqs: list[Request], rpc_id: int) -> None:
        """Applies the mean gradient of `reqs` (one key, one iteration) and
        answers each push. A synchronous update serves several RPCs, so its
        row has no rpc; the responses depend on it. The rows are recorded
        once every response is sent."""
        first = reqs[0]
        p0 = now_ns()
        grad = torch.stack([r.payload for r in reqs]).mean(dim=0)
        self.model.assign(first.key, self.model.value(first.key) - self.lr * grad)
        p1 = now_ns()
        update = self.rec.new_id()
        sent = [self._respond(r, None) for r in reqs]
        cols = self._columns(first)  # one key, one iteration: the same columns for every request
        for r, s in zip(reqs, sent):
            self._send_row(r, update, s, cols)
        self.rec.held_row("compute", "update", p0, p1, [r.recv_id for r in reqs], {"rpc": rpc_id}, cols, update)

    def _respond(self, req: Request, value: Optional[torch.Tensor]) -> tuple[int, int, int, int]:
        """Sends the response; its message, start, end and bytes, for :meth:`_send_row`."""
        message = self.rec.new_message()
        nbytes = 0 if value is None else value.numel() * value.element_size()
        s0 = now_ns()
        req.future.set_result((message, value))
        return message, s0, now_ns(), nbytes

    def _send_row(self, req: Request, dep: int, sent: tuple[int, int, int, int], cols: dict) -> None:
        message, s0, s1, nbytes = sent
        self.rec.held_row("send", f"{req.op}_response", s0, s1, [dep],
                          {"peer": req.worker, "message": message, "rpc": req.rpc, "bytes": nbytes}, cols)
