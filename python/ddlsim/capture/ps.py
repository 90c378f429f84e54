"""Parameter-server capture over ``torch.distributed.rpc`` (TensorPipe on TCP).

Ranks 0..W-1 are workers, W..W+S-1 servers. Each iteration a worker computes
its gradients (:mod:`.ps_model`), pushes every key's gradient to the key's
server (request: the gradient; response: an ack) and, once a push is
answered, pulls that key (request: a header; response: the parameters).
Servers are in :mod:`.ps_server`.

Rows per RPC (the RPC paper's log, SketchDLC's operations):

* worker ``send`` of the request: from just before ``rpc_async`` to its return
  (t0 = its start); server ``recv``: at the request's arrival in the handler;
* server ``compute`` (``update`` for a push, ``read`` for a pull): the
  processing, after the request waited in the server's queue;
* server ``send`` of the response around completing the handler's Future;
  worker ``recv`` at the worker's Future callback (t1);
* worker ``compute`` with the rpc (``ack`` / ``apply``): the training loop
  handling the response, from taking it off the worker's receive queue
  (W_queue ends there) to the end of its processing (W_proc).

The workers' own per-request cost (issuing: the send rows; handling: the
ack / apply rows) is fitted from these rows into the log's ``client_cost``
metadata (:mod:`.ps_client_cost`).

Deps: server processing on the request recv (synchronous: all workers'
push recvs of that key), response send on the processing, pull request on
its push response's recv, next forward on the pull responses' recvs.
"""

from __future__ import annotations

import json
import math
import os
import queue
import socket
from pathlib import Path
from typing import Any

from ..errors import DdlsimError
from .allreduce_rate import upper_median
from .dist_clock import best_offset
from .layer_hooks import LayerHooks, check_layer_every, layer_sampled
from .recorder import RankRecorder, now_ns

MODELS = ("lenet5", "sparse-lr")
PLACEMENTS = ("round-robin", "size-balanced")
DEFAULTS = {
    "model": "sparse-lr", "workers": 2, "servers": 1, "iterations": 3, "batch_size": 16, "sync": True, "lr": 0.1,
    "vocab": 1000, "embedding_dim": 8, "features": 4, "zipf_s": 1.1, "seed": 0, "placement": "round-robin",
    "timeout_s": 60.0, "crash_rank": -1, "crash_after_iteration": -1, "server_start_delay_s": 0.0, "layer_every": 1,
}  # fmt: skip


def ps_config(**given: Any) -> dict:
    """The full job configuration; raises DdlsimError naming a bad setting and its fix."""
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise DdlsimError(f"ps capture: unknown setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    c = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    for name, default in DEFAULTS.items():  # the types first: a job.json given to `capture merge` may hold anything
        value = c[name]
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**31
            kind = "a whole number of magnitude below 2^31"
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            kind = "a finite number"
        else:
            ok, kind = isinstance(value, str), "a name"
        if not ok:
            raise DdlsimError(f"ps capture: {name} = {value!r:.60}; give {kind} (e.g. {json.dumps(default)})")
    if c["model"] not in MODELS:
        raise DdlsimError(f"ps capture: unknown model {c['model']!r}; use --model {' or '.join(MODELS)}")
    if c["placement"] not in PLACEMENTS:
        raise DdlsimError(f"ps capture: unknown placement {c['placement']!r}; use {' or '.join(PLACEMENTS)}")
    for name in ("workers", "servers", "iterations", "batch_size", "vocab", "embedding_dim", "features"):
        if int(c[name]) < 1:
            raise DdlsimError(f"ps capture: {name} = {c[name]}; it must be at least 1 (e.g. --{name.replace('_', '-')} 1)")
    keys = 10 if c["model"] == "lenet5" else int(c["embedding_dim"]) + 1
    if int(c["servers"]) > keys:
        raise DdlsimError(f"ps capture: {c['servers']} servers but model {c['model']} has only {keys} keys to place "
                          f"on every server; use --servers {keys} or fewer")
    if int(c["seed"]) < 0:
        raise DdlsimError(f"ps capture: seed = {c['seed']}; give a whole number from 0 (e.g. --seed 0)")
    for name, flag, example in (("zipf_s", "--zipf-s", "1.1"), ("lr", "lr", "0.01"), ("timeout_s", "--timeout", "300")):
        if not 0 < float(c[name]) < math.inf:  # found by probing the options: nan and inf passed, 0 named all three
            raise DdlsimError(f"ps capture: {flag} {c[name]}; give a positive finite number (e.g. {flag} {example})")
    try:
        check_layer_every(c["layer_every"])
    except ValueError as exc:
        raise DdlsimError(f"ps capture: {exc} (--layer-every K)") from None
    if c["layer_every"] > 1 and c["model"] != "lenet5":
        raise DdlsimError(f"ps capture: layer_every {c['layer_every']} samples per-layer rows, which only --model lenet5 "
                          f"records ({c['model']} has one forward and one backward row per iteration); leave out "
                          "--layer-every or use --model lenet5")
    return c


def layer_iterations(config: dict) -> list[int]:
    """The iterations whose worker rows are per layer with ``layer_every`` K: iteration 0 (the warm-up) and every K-th
    from 1 on (:func:`~ddlsim.capture.layer_hooks.layer_sampled`, as ``capture ddp --layer-every``)."""
    return [i for i in range(int(config["iterations"])) if layer_sampled(i, int(config["layer_every"]), 1)]


def metadata(config: dict) -> dict:
    """Run metadata of a PS capture (merged into the event log's metadata)."""
    meta = {"job": "ps", "strategy": "ps", "workers": int(config["workers"]), "servers": int(config["servers"]),
            "iterations": int(config["iterations"]), "model": config["model"], "sync": bool(config["sync"]),
            "mode": "sync" if config["sync"] else "async", "batch_size": int(config["batch_size"]),
            "placement": config["placement"], "seed": int(config["seed"]), "transport": "tensorpipe-uv-tcp"}
    if config["model"] == "sparse-lr":
        meta["sparse"] = {k: config[k] for k in ("vocab", "embedding_dim", "features", "zipf_s")}
    if int(config.get("layer_every", 1)) > 1:  # sampled layer rows: which iterations carry them (as a DDP capture's)
        meta["layer_every"] = int(config["layer_every"])
        meta["layer_iterations"] = layer_iterations(config)
    return meta


def rank_name(rank: int, workers: int) -> str:
    return f"worker{rank}" if rank < workers else f"server{rank - workers}"


def clock_now() -> tuple[int, str]:
    return now_ns(), socket.gethostname()


def clock_offset(rank: int, workers: int, probes: int = 8) -> tuple[int, int]:
    """(offset to add to this rank's clock to get rank 0's, best round trip):
    NTP-style ping-pong with rank 0; 0 when on rank 0's host (one monotonic clock)."""
    from torch.distributed import rpc

    if rank == 0:
        return 0, 0
    samples = []
    for _ in range(probes):
        a = now_ns()
        remote, host = rpc.rpc_sync(rank_name(0, workers), clock_now)
        samples.append((a, remote, remote, now_ns()))
    offset, rtt = best_offset(samples)
    return (0 if host == socket.gethostname() else offset), rtt


def rpc_round_trip_ns(server: str, repeats: int = 15) -> float:
    """A request's fixed cost on this machine: the median round trip of an RPC with a 4-byte payload to `server`
    (TensorPipe, serialisation, the agents' threads). Replay of a PS capture uses half of it as the link latency."""
    import time

    import torch
    from torch.distributed import rpc

    x = torch.zeros(1)
    rpc.rpc_sync(server, torch.add, args=(x, 1))  # the pair's first use
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        rpc.rpc_sync(server, torch.add, args=(x, 1))
        times.append(time.perf_counter_ns() - start)
    return upper_median(times)


def shutdown_rpc(rpc, rank: int, job: str = "ps capture") -> None:
    """``rpc.shutdown()`` (graceful: every rank waits for the others, then joins its agent), where a connection that
    a peer closed while the agents joined (TensorPipe's ``DistNetworkError``, "Connection reset by peer", a known
    race of its shutdown) is noted in the rank's log and not raised: by then the rank's own work is done, so its
    recorder must still be closed, and a peer that really failed is reported by its own exit status. Any other
    error propagates. `job` names the job in the note (the PS capture, the connection-scaling benchmark)."""
    import sys

    from torch.distributed import DistNetworkError

    try:
        rpc.shutdown()
    except DistNetworkError as exc:
        print(f"{job}: rank {rank}: rpc.shutdown: {exc} (a peer left while the agents joined; the rank's work "
              "was done)", file=sys.stderr, flush=True)


def run_rank(config: dict, rank: int, world_size: int, out_dir: str | Path) -> None:
    import torch
    from torch.distributed import rpc

    config = ps_config(**{k: v for k, v in config.items() if k in DEFAULTS})
    workers, servers = int(config["workers"]), int(config["servers"])
    if world_size != workers + servers:
        raise DdlsimError(f"ps capture: world size {world_size} != workers {workers} + servers {servers}")
    torch.set_num_threads(1)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", num_worker_threads=8,
        rpc_timeout=float(config["timeout_s"]), _transports=["uv"], _channels=["basic"])
    rpc.init_rpc(rank_name(rank, workers), rank=rank, world_size=world_size, rpc_backend_options=options)
    if rank >= workers and float(config["server_start_delay_s"]) > 0:  # test-only: workers push before the server is up
        import time

        time.sleep(float(config["server_start_delay_s"]))
    offset, rtt = clock_offset(rank, workers)
    role = "worker" if rank < workers else "server"
    meta = {"clock_probe_rtt_ns": rtt}
    if role == "worker":
        meta["rpc_round_trip_ns"] = rpc_round_trip_ns(rank_name(workers, workers))
    rec = RankRecorder(out_dir, rank, role, clock_offset_ns=offset, meta=meta)
    from .ps_model import PsModel

    model = PsModel(config)
    if role == "server":
        from .ps_server import Server

        server = Server(rec, model, config, workers).start()
        shutdown_rpc(rpc, rank)
        server.stop()
        rec.close()
        return
    _Worker(rec, model, config, rank).run()
    shutdown_rpc(rpc, rank)
    rec.close()


class _Worker:
    def __init__(self, rec: RankRecorder, model, config: dict, rank: int):
        self.rec, self.model, self.config, self.rank = rec, model, config, rank
        self.workers = int(config["workers"])
        self.responses: queue.Queue = queue.Queue()
        self.timeout = float(config["timeout_s"])

    def _columns(self, key: int, iteration: int) -> dict:
        """A key's columns in an iteration's rows (held by the recorder as they are: never changed once made)."""
        k = self.model.keys[key]
        return {"iteration": iteration, "tensor": key, "layer": k.layer, "name": k.name}

    def _send(self, op: str, key: int, iteration: int, deps: list[int], payload=None, columns=None) -> None:
        """Issues a push (with `payload`) or a pull of `key` and records its send row (`columns`: the key's, where
        the caller has them)."""
        from torch.distributed import rpc

        from . import ps_server

        k = self.model.keys[key]
        server_rank = self.workers + k.server
        message, rpc_id = self.rec.new_message(), self.rec.new_id()
        if op == "push":
            args = (self.rank, key, iteration, message, rpc_id, self.counts[k.server], payload)
            fn, nbytes = ps_server.push, payload.numel() * payload.element_size()
        else:
            args, fn, nbytes = (self.rank, key, iteration, message, rpc_id), ps_server.pull, 0
        t0 = now_ns()
        fut = rpc.rpc_async(rank_name(server_rank, self.workers), fn, args=args, timeout=self.timeout)
        self.rec.held_row("send", f"{op}_request", t0, now_ns(), deps,
                          {"peer": server_rank, "message": message, "rpc": rpc_id, "bytes": nbytes},
                          columns or self._columns(key, iteration))
        fut.add_done_callback(lambda f: self.responses.put((now_ns(), op, key, iteration, server_rank, rpc_id, f)))

    def run(self) -> None:
        pulled: list[int] = []
        crash_rank, crash_after = int(self.config["crash_rank"]), int(self.config["crash_after_iteration"])
        # A zoo model gets per-layer rows (what `ddlsim replay` and `--profile` read); the sparse model one row each way.
        # With layer_every K the zoo model's layer rows are sampled as in `capture ddp --layer-every K`: on iteration 0
        # and every K-th from 1 on; the other iterations record each pass as one row (no name) and run no layer hook.
        layers = None
        if self.model.kind == "lenet5":
            # rows kept in a list while the passes run and written with the iteration's other rows at its flush (a
            # write per row cost 9 us per layer row here, 45 % of what the layer rows cost)
            layers = LayerHooks(self.model.net, self.rec, layer_every=int(self.config["layer_every"]), layer_warmup=1,
                                defer=True)
        for iteration in range(int(self.config["iterations"])):
            batch = self.model.batch(self.rank, iteration)
            if layers is not None:
                layers.begin_iteration(iteration, waits=pulled)
            f0 = now_ns()
            state = self.model.forward(batch)
            f1 = now_ns()
            grads = self.model.backward(state)
            if layers is None:
                forward = self.rec.row("compute", "forward", f0, f1, deps=pulled, iteration=iteration)
                backward = self.rec.row("compute", "backward", f1, now_ns(), deps=[forward], iteration=iteration)
                ready = {key: [backward] for key in grads}
            elif not layers.sampled:  # one row per pass, chained like the layer rows (the pulls, the previous row)
                layers.compute_row("forward", f0, f1)
                backward = layers.compute_row("backward", f1, now_ns())
                ready = {key: [backward] for key in grads}
            else:
                ready = {key: [r for r in [layers.backward_row(self.model.keys[key].layer)] if r is not None] for key in grads}
            self.counts: dict[int, int] = {}
            for key in grads:
                s = self.model.keys[key].server
                self.counts[s] = self.counts.get(s, 0) + 1
            for key in sorted(grads, key=lambda k: (-self.model.keys[k].layer, k)):
                self._send("push", key, iteration, ready[key], grads[key].contiguous())
            pulled = self._drain(len(grads), iteration)
            if layers is not None:
                layers.write_rows()
            self.rec.flush()
            if self.rank == crash_rank and iteration == crash_after:
                os._exit(3)

    def _drain(self, keys: int, iteration: int) -> list[int]:
        """Serves the receive queue until every key is pushed and pulled; the pull responses' recv ids."""
        pulled = []
        while len(pulled) < keys:
            try:
                response = self.responses.get_nowait()
            except queue.Empty:  # the loop would wait: the rows so far are formatted meanwhile (RankRecorder.idle)
                self.rec.idle()
                response = self.responses.get(timeout=self.timeout)
            t1, op, key, it, server_rank, rpc_id, fut = response
            w0 = now_ns()  # the loop holds the response from here: the ack / apply row's start (ps_client_cost)
            message, value = fut.wait()
            cols = self._columns(key, it)
            nbytes = 0 if value is None else value.numel() * value.element_size()
            recv = self.rec.held_row("recv", f"{op}_response", t1, t1, [],
                                     {"peer": server_rank, "message": message, "rpc": rpc_id, "bytes": nbytes}, cols)
            if op == "push":
                self.rec.held_row("compute", "ack", w0, now_ns(), [recv], {"rpc": rpc_id}, cols)
                self._send("pull", key, it, [recv], columns=cols)
            else:
                self.model.assign(key, value)
                self.rec.held_row("compute", "apply", w0, now_ns(), [recv], {"rpc": rpc_id}, cols)
                pulled.append(recv)
        return pulled
