"""A set of point-to-point flows run through the engine, without a training job.

Each flow is one message from a source rank to a destination rank in a
priority band. It starts at its release time (`start_ns`), or, when `after`
names an earlier flow of the set, `gap_ns` after that flow was delivered
(the dependency of a ring all-reduce's steps: a rank forwards what its
predecessor sent it). The set is lowered to a workload graph of send ops
(one per flow; a compute op of `gap_ns` where a dependency has a gap) and run
by `ddlsim._core.run_graph_columns`; each flow's completion time is when its
last byte was delivered (the flows table's `delivered_ns`).

Used by the packet-model validation against ns-3
(tools/packet_validation/validate.py), and by anyone who wants flow
completion times of a hand-made traffic matrix::

    from ddlsim.simulation.flowset import Flow, network, run_flows
    net = network(bandwidth_bps=10e9, latency_ns=10_000, fidelity="flow")
    done = run_flows([Flow(0, 1, 1_250_000)], net)
    assert done[0].fct_ns == 10_000 + 1_000_000
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..errors import ScenarioError, from_engine_error

# Column layout of a workload graph (src/lib.rs `graph_from_columns`): name -> dtype.
_OP_FIELDS = {"kind": "u1", "name": "<u4", "rank": "<u4", "peer": "<i4", "stream": "<u4", "duration": "<u8", "bytes": "<u8",
              "priority": "<i4", "band": "u1", "tenant": "<u4", "iteration": "<i4", "layer": "<i4", "tensor": "<i4",
              "group": "<i4", "collective": "<i8", "member": "<u4", "rpc": "<i8"}
_NO_STREAM = 2**32 - 1
_COMPUTE, _SEND = 0, 1
MAX_BANDS = 8


@dataclass(frozen=True)
class Flow:
    """One message: `bytes` from rank `src` to rank `dst` in priority band `band` (0 = highest).

    It is released at `start_ns`, and if `after` is the index of an earlier
    flow, no sooner than `gap_ns` after that flow's last byte was delivered.
    """

    src: int
    dst: int
    bytes: int
    band: int = 0
    start_ns: int = 0
    after: Optional[int] = None
    gap_ns: int = 0


@dataclass(frozen=True)
class FlowResult:
    """When one flow was released (`start_ns`) and delivered (`end_ns`, its last byte at the receiver)."""

    src: int
    dst: int
    bytes: int
    band: int
    start_ns: int
    end_ns: int

    @property
    def fct_ns(self) -> int:
        """Flow completion time: delivery minus release."""
        return self.end_ns - self.start_ns


def network(bandwidth_bps: float, latency_ns: int, fidelity: str = "flow", packet: Optional[dict] = None) -> dict:
    """The engine's network description for a star of hosts (one rank each).

    `latency_ns` is host-to-host propagation (each of the two links carries
    half of it); `packet` is the packet model's parameter object
    (docs/packet-model.md), only for fidelity "packet".
    """
    doc: dict[str, Any] = {"fidelity": fidelity, "bandwidth_bps": float(bandwidth_bps), "latency_ns": int(latency_ns),
                           "topology": {"kind": "star"}, "intra_host_bandwidth_bps": None, "intra_host_latency_ns": 0,
                           "record_flows": True}
    if packet is not None:
        if fidelity != "packet":
            raise ScenarioError(f"packet parameters need fidelity 'packet', not {fidelity!r}")
        doc["packet"] = dict(packet)
    return doc


def _check(flows: Sequence[Flow]) -> int:
    """Validates the set; returns the number of ranks it needs."""
    if not flows:
        raise ScenarioError("a flow set needs at least one flow")
    ranks = 0
    for i, f in enumerate(flows):
        where = f"flow {i}"
        for field in ("src", "dst", "bytes", "band", "start_ns", "gap_ns"):
            value = getattr(f, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ScenarioError(f"{where}: {field} must be a non-negative integer, not {value!r}")
        if f.src == f.dst:
            raise ScenarioError(f"{where}: src and dst are both rank {f.src}; a flow needs two different ranks")
        if f.bytes == 0:
            raise ScenarioError(f"{where}: bytes must be positive")
        if f.band >= MAX_BANDS:
            raise ScenarioError(f"{where}: band {f.band} is past the last band ({MAX_BANDS - 1})")
        if f.after is not None and (isinstance(f.after, bool) or not isinstance(f.after, int) or not 0 <= f.after < i):
            raise ScenarioError(f"{where}: after must be the index of an earlier flow (0..{i - 1}), not {f.after!r}")
        if f.after is None and f.gap_ns:
            raise ScenarioError(f"{where}: gap_ns needs after (the flow whose delivery it follows)")
        ranks = max(ranks, f.src + 1, f.dst + 1)
    return ranks


def graph_columns(flows: Sequence[Flow], ranks: Optional[int] = None) -> tuple[dict, list[int]]:
    """The workload graph of the set, and the op index of each flow's send."""
    import numpy as np

    need = _check(flows)
    ranks = need if ranks is None else ranks
    if ranks < need:
        raise ScenarioError(f"the flows use ranks up to {need - 1} but only {ranks} ranks were given")
    ops: list[dict] = []
    deps: list[list[int]] = []
    send_op: list[int] = []
    releases: list[tuple[int, int]] = []
    for f in flows:
        before: list[int] = []
        if f.after is not None:
            before = [send_op[f.after]]
            if f.gap_ns:
                ops.append({"kind": _COMPUTE, "rank": f.src, "duration": f.gap_ns})
                deps.append(before)
                before = [len(ops) - 1]
        op = len(ops)
        ops.append({"kind": _SEND, "rank": f.src, "peer": f.dst, "bytes": f.bytes, "band": f.band})
        deps.append(before)
        send_op.append(op)
        if f.start_ns:
            releases.append((op, f.start_ns))
    default = {"peer": -1, "stream": _NO_STREAM, "duration": 0, "bytes": 0, "priority": 0, "band": 0, "tenant": 0,
               "iteration": -1, "layer": -1, "tensor": -1, "group": -1, "collective": -1, "member": 0, "rpc": -1, "name": 0,
               "rank": 0, "kind": _SEND}

    def col(dtype: str, values: list) -> tuple[str, bytes]:
        return dtype, np.asarray(values, dtype=np.dtype(dtype)).tobytes()

    columns = {k: col(t, [op.get(k, default[k]) for op in ops]) for k, t in _OP_FIELDS.items()}
    offsets = [0]
    for d in deps:
        offsets.append(offsets[-1] + len(d))
    columns.update(dep_offsets=col("<u4", offsets), deps=col("<u4", [x for d in deps for x in d]),
                   coll_algorithm=col("u1", []), coll_bytes=col("<u8", []), coll_member_offsets=col("<u4", [0]),
                   coll_members=col("<u4", []), stream_rank=col("<u4", []), stream_name=col("<u4", []),
                   stream_policy=col("u1", []), host_of_rank=col("<u4", list(range(ranks))),
                   release_ops=col("<u4", [op for op, _ in releases]), release_ns=col("<u8", [t for _, t in releases]),
                   op_names=["flow"], stream_names=[])
    return columns, send_op


def run_flows_raw(flows: Sequence[Flow], net: dict, ranks: Optional[int] = None) -> tuple[list[FlowResult], dict]:
    """Runs the set; returns each flow's result (in the order given) and the engine's whole output."""
    import numpy as np

    from .. import _core

    columns, send_op = graph_columns(flows, ranks)
    net = {**net, "record_flows": True}
    try:
        out = _core.run_graph_columns(columns, json.dumps(net, separators=(",", ":")), "step")
    except Exception as exc:  # the engine's typed errors become ddlsim's
        raise from_engine_error(exc) from None
    log = {k: np.frombuffer(raw, dtype=np.dtype(dt)) for k, (dt, raw) in out["columns"].items()}
    # The send row of op i has id i (the graph's ops come first); its message links it to the flows table.
    row_of = {int(op_id): row for row, op_id in enumerate(log["id"]) if int(log["kind_code"][row]) == _SEND}
    table = {k: np.frombuffer(raw, dtype=np.dtype(dt)) for k, (dt, raw) in out["flows"].items()}
    by_message = {int(m): i for i, m in enumerate(table["message"])}
    results = []
    for i, (f, op) in enumerate(zip(flows, send_op)):
        row = row_of.get(op)
        if row is None or int(log["message"][row]) not in by_message:
            raise ScenarioError(f"flow {i} ({f.src} -> {f.dst}) has no row in the engine's flows table")
        t = by_message[int(log["message"][row])]
        results.append(FlowResult(f.src, f.dst, f.bytes, f.band, int(table["start_ns"][t]), int(table["delivered_ns"][t])))
    return results, out


def run_flows(flows: Sequence[Flow], net: dict, ranks: Optional[int] = None) -> list[FlowResult]:
    """Each flow's release and delivery times, in the order given (see the module's docstring)."""
    return run_flows_raw(flows, net, ranks)[0]
