"""Strategy-side choices made before the engine runs: parameter placement
on servers, server update cost, and the engine's input document."""

from __future__ import annotations

import heapq
import json

from .scenario import Scenario
from .units import parse_bandwidth
from .workload.model import Model

# Above this many logged ring steps, "auto" detail logs collectives only.
AUTO_STEP_ROW_LIMIT = 2_000_000


def place_tensors(sizes: list[int], servers: int, placement: str) -> list[int]:
    """Server index of each tensor.

    round-robin: tensor i on server i mod k (TensorFlow's default);
    size-balanced: largest first onto the least-loaded server (ties: lower index).
    """
    if placement == "round-robin":
        return [i % servers for i in range(len(sizes))]
    load = [(0, s) for s in range(servers)]
    heapq.heapify(load)
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        used, s = heapq.heappop(load)
        owner[i] = s
        heapq.heappush(load, (used + sizes[i], s))
    return owner


def resolve_trace_detail(scenario: Scenario, tensors: int) -> str:
    if scenario.trace_detail != "auto":
        return scenario.trace_detail
    if scenario.strategy != "ring":
        return "step"
    n = scenario.workers
    rows = scenario.iterations * tensors * n * 2 * (n - 1)
    return "step" if rows <= AUTO_STEP_ROW_LIMIT else "collective"


def engine_document(scenario: Scenario, model: Model, times_ns: list[tuple[int, int]]) -> dict:
    """The plain-data scenario the Rust engine reads (see spec.rs)."""
    net = scenario.network
    if net.topology == "star":
        topology = {"kind": "star"}
    else:
        topology = {
            "kind": "leaf_spine",
            "hosts_per_leaf": net.hosts_per_leaf,
            "spines": net.spines,
            "oversubscription": net.oversubscription,
        }
    layer_of = [i for i, layer in enumerate(model.layers) for _ in layer.tensors]
    sizes = [t.bytes for t in model.tensors]
    ps = scenario.ps
    servers = ps.servers if scenario.strategy == "ps" else 0
    owner = place_tensors(sizes, servers, ps.placement) if servers else [0] * len(sizes)
    update_bytes_per_ns = parse_bandwidth(ps.update_bandwidth) / 8e9
    tensors = [
        {
            "layer": layer_of[i],
            "bytes": sizes[i],
            "server": owner[i],
            # The server reads every worker's gradient once: N x size bytes.
            "update_ns": round(sizes[i] * scenario.workers / update_bytes_per_ns) if servers else 0,
        }
        for i in range(len(sizes))
    ]
    return {
        "strategy": scenario.strategy,
        "workers": scenario.workers,
        "servers": servers,
        "iterations": scenario.iterations,
        "seed": scenario.seed,
        "jitter": scenario.jitter,
        "barrier": scenario.barrier,
        "header_bytes": ps.header_bytes,
        "layers": [{"fwd_ns": f, "bwd_ns": b} for f, b in times_ns],
        "tensors": tensors,
        "network": {
            "fidelity": net.fidelity,
            "bandwidth_bps": net.bandwidth_bps,
            "latency_ns": net.latency_ns,
            "topology": topology,
        },
        "trace_detail": resolve_trace_detail(scenario, len(sizes)),
    }


def engine_json(document: dict) -> str:
    return json.dumps(document, separators=(",", ":"))
