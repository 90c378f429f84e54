"""The engine's raw columns as an event log (schema v2).

The engine knows codes and indices; this joins on what it cannot know:
names (ops, layers, tensors, streams), roles, hosts, the collective type
and algorithm, and the side tables (groups, flows). Vectorised: string
columns go over as (codes, dictionary) pairs, deps as CSR.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .. import _core
from ..trace.columns import ArrayLog
from ..workload.model import Model


def raw_column(columns: Mapping[str, Any], name: str) -> np.ndarray:
    """Column `name` of an engine output dict: a (dtype, bytes) pair as the
    engine returns them, or (synthetic outputs, tests) an array or list."""
    value = columns[name]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], (bytes, bytearray, memoryview)):
        dtype, raw = value
        return np.frombuffer(raw, dtype=np.dtype(dtype))
    return np.asarray(value)


def _dictionary(names: Sequence[str], codes: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes into `names` (which may repeat) as codes into its unique values."""
    unique, inverse = np.unique(np.asarray(list(names), dtype=object), return_inverse=True)
    return inverse.astype(np.int32)[codes], [str(u) for u in unique]


def event_log_from_engine(
    out: Mapping[str, Any],
    *,
    model: Model,
    workers: int,
    host_of_rank: Sequence[int],
    algorithm: str,
    groups: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any],
    rank_classes: Mapping[str, Any] | None = None,
) -> ArrayLog:
    """The event log of one engine run (`out` as `_core.simulate_training_json` returns it), as
    columns; `.to_event_log()` builds and validates the Arrow table."""
    cols = out["columns"]
    c = {name: raw_column(cols, name) for name in cols}
    rank = c["rank"]
    layer, tensor = c["layer"], c["tensor"]
    op_names = list(out["op_names"])

    layer_names = [layer.name for layer in model.layers]
    tensor_names = [t.name for t in model.tensors]
    empty, barrier = len(layer_names) + len(tensor_names), len(layer_names) + len(tensor_names) + 1
    name_code = np.where(tensor >= 0, len(layer_names) + tensor, np.where(layer >= 0, layer, empty))
    barrier_ops = [i for i, name in enumerate(op_names) if name == "barrier"]
    if barrier_ops:
        name_code = np.where(np.isin(c["op_code"], barrier_ops), barrier, name_code)
    name = _dictionary(layer_names + tensor_names + ["", "barrier"], name_code)

    stream_names = list(out.get("stream_names", []))
    stream = _dictionary([""] + stream_names, c["stream_index"] + 1)
    in_collective = (c["collective"] >= 0).astype(np.int8)
    hosts = np.asarray(host_of_rank, dtype=np.int32)
    columns = {
        "id": c["id"],
        "iteration": c["iteration"],
        "rank": rank,
        "role": ((rank >= workers).astype(np.int8), ["worker", "server"]),
        "host": hosts[rank] if len(hosts) else rank,
        "stream": stream,
        "kind": (c["kind_code"], list(_core.KIND_NAMES)),
        "op": (c["op_code"], op_names),
        "name": name,
        "layer": layer,
        "tensor": tensor,
        "group": c["group"],
        "peer": c["peer"],
        "message": c["message"],
        "bytes": c["bytes"],
        "priority": c["priority"],
        "tenant": c["tenant"],
        "collective": c["collective"],
        "coll_type": (in_collective, ["", "allreduce"]),
        "algorithm": (in_collective, ["", algorithm]),
        "step": c["step"],
        "rpc": c["rpc"],
        "ready_ns": c["ready_ns"],
        "start_ns": c["start_ns"],
        "end_ns": c["end_ns"],
    }
    host_ids = sorted({int(h) for h in hosts}) if len(hosts) else sorted({int(r) for r in np.unique(rank)})
    meta = dict(metadata)
    meta.setdefault("clocks", {str(h): {"offset_ns": 0, "domain": "simulation"} for h in host_ids})
    if rank_classes:
        # One worker per class of alike workers (ddlsim.trace.classes): each row stands for its class.
        from ..trace.classes import KEY, describe

        class_of = raw_column(rank_classes, "class_of").astype(np.int64)
        sizes = raw_column(rank_classes, "sizes").astype(np.int64)
        per_rank = (rank < len(class_of)) & (c["kind_code"] != list(_core.KIND_NAMES).index("barrier"))
        columns["class_size"] = np.where(per_rank, sizes[class_of[np.clip(rank, 0, len(class_of) - 1)]], 1).astype(np.int32)
        meta[KEY] = describe(int(rank_classes["workers"]), class_of, raw_column(rank_classes, "representatives"), sizes,
                             host_of_rank, {"compute": int(rank_classes["compute_stride"]),
                                            "collective": int(rank_classes["collective_stride"])})
    stats = network_stats(out, ranks=len(host_of_rank) if len(host_of_rank) else None)
    if stats is not None:
        meta["network_stats"] = stats
    return ArrayLog(columns, deps_offsets=c["dep_offsets"], deps_values=c["deps"], metadata=meta,
                    groups=_groups_table(groups, model), flows=_flows_table(out.get("flows"), host_of_rank),
                    queues=queues_table(out.get("queues")), source="simulation")


def _groups_table(groups: Sequence[Mapping[str, Any]], model: Model) -> dict[str, Any]:
    """One row per (group, tensor) of the gradient grouping the run used."""
    group_ids, tensors, sizes, kinds = [], [], [], []
    model_tensors = model.tensors
    for g, group in enumerate(groups):
        tensor_ids = group["tensors"] if "tensors" in group else [group["tensor"]]
        kind = str(group.get("kind", "tensor"))
        for t in tensor_ids:
            if t < 0:
                continue
            group_ids.append(g)
            tensors.append(t)
            kinds.append(kind)
            sizes.append(model_tensors[t].bytes if t < len(model_tensors) else int(group["bytes"]))
    offsets = np.zeros(len(sizes), dtype=np.int64)
    for i in range(1, len(sizes)):
        offsets[i] = offsets[i - 1] + sizes[i - 1] if group_ids[i] == group_ids[i - 1] else 0
    return {
        "group": np.asarray(group_ids, dtype=np.int32),
        "tensor": np.asarray(tensors, dtype=np.int32),
        "kind": np.asarray(kinds, dtype=object),
        "offset": offsets,
        "bytes": np.asarray(sizes, dtype=np.int64),
    }


def _none_as(values: np.ndarray, dtype: Any) -> np.ndarray:
    """An engine column whose all-ones value means "none" (u32::MAX, u64::MAX) as
    signed `dtype` with -1 there; signed input (synthetic outputs) as it is."""
    values = np.asarray(values)
    if values.dtype.kind == "u":
        return np.where(values == np.iinfo(values.dtype).max, -1, values.astype(np.int64)).astype(dtype)
    return values.astype(dtype)


def _flows_table(flows: Mapping[str, Any] | None, host_of_rank: Sequence[int] = ()) -> dict[str, Any] | None:
    """The flows side table of the engine's ``out["flows"]`` (see
    ddlsim.trace.schema.SIDE_TABLES["flows"]): a background tenant's flow has
    src = dst = -1 (u32::MAX from the engine) and message = -1 (u64::MAX); a
    flow still in flight when the run ended (delivered_ns = u64::MAX) has a
    null end_ns. src_host / dst_host come from the engine, or (engine builds
    without them) from the ranks' hosts."""
    if not flows:
        return None
    f = {name: raw_column(flows, name) for name in flows}
    if not len(f["message"]):
        return None
    src, dst = _none_as(f["src"], np.int32), _none_as(f["dst"], np.int32)
    hosts = np.asarray(host_of_rank, dtype=np.int32)

    def host(name: str, rank: np.ndarray) -> np.ndarray:
        if name in f:
            return _none_as(f[name], np.int32)
        if not len(hosts):
            return rank.copy()
        return np.where(rank >= 0, hosts[np.clip(rank, 0, len(hosts) - 1)], -1).astype(np.int32)

    delivered = np.asarray(f["delivered_ns"])
    unfinished = delivered == np.iinfo(delivered.dtype).max if delivered.dtype.kind == "u" else delivered < 0
    end = delivered.astype(np.int64)
    if unfinished.any():
        end = np.ma.masked_array(np.where(unfinished, 0, end), mask=unfinished)  # null end_ns: not finished
    return {
        "flow": np.arange(len(f["message"]), dtype=np.int64),
        "message": _none_as(f["message"], np.int64),
        "src": src,
        "dst": dst,
        "bytes": f["bytes"].astype(np.int64),
        "band": f["band"].astype(np.int32),
        "tenant": f["tenant"].astype(np.int32),
        "start_ns": f["start_ns"].astype(np.int64),
        "end_ns": end,
        # packet level (zeros at analytic and flow fidelity; absent from older engine builds: 0)
        **{name: f[name].astype(np.int64) for name in PACKET_FLOW_COLUMNS if name in f},
        "src_host": host("src_host", src),
        "dst_host": host("dst_host", dst),
    }


#: Per-flow packet-level counters the engine adds to its flows table.
PACKET_FLOW_COLUMNS = ("retransmits", "timeouts", "drops", "ecn_marks")
#: The queues table's columns (see ddlsim.trace.schema.SIDE_TABLES["queues"]).
QUEUE_COLUMNS = ("time_ns", "node", "port", "band", "bytes", "packets")
#: Per-port counters (one row per directed link) and network-wide counters at packet fidelity.
PORT_COLUMNS = ("port", "node", "name", "packets", "bytes", "drops", "ecn_marks", "max_packets", "max_bytes")
NETWORK_COUNTERS = ("packets_forwarded", "drops", "ecn_marks", "retransmits", "timeouts", "queues_truncated")


def queues_table(queues: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The queues side table (occupancy per port and band over time) from the
    engine's `out["queues"]`; None when it holds no rows or is absent."""
    if not queues or "time_ns" not in queues:
        return None
    q = {name: raw_column(queues, name) for name in QUEUE_COLUMNS if name in queues}
    if not len(q["time_ns"]):
        return None
    types = {"time_ns": np.int64, "node": np.int32, "port": np.int32, "band": np.int32, "bytes": np.int64, "packets": np.int64}
    return {name: q[name].astype(types[name]) for name in QUEUE_COLUMNS if name in q}


def network_stats(out: Mapping[str, Any], ranks: int | None = None) -> dict[str, Any] | None:
    """The packet-level counters of a run, JSON-able, for the log's metadata
    (``network_stats``): ``counters`` (network-wide) and ``ports`` (columns, one
    entry per directed link) and ``ranks`` (nodes from this number on are
    switches: node = ranks + switch id). None when the engine reported no ports (analytic
    and flow fidelity, older engine builds)."""
    ports = out.get("ports")
    if not ports or "port" not in ports:
        return None
    columns: dict[str, list] = {}
    for name in PORT_COLUMNS:
        if name not in ports:
            continue
        if name == "name":
            columns[name] = [str(x) for x in ports[name]]
        else:
            columns[name] = [int(x) for x in raw_column(ports, name)]
    if not columns.get("port"):
        return None
    network = out.get("network") or {}
    counters = {name: (bool(network[name]) if name == "queues_truncated" else int(network[name]))
                for name in NETWORK_COUNTERS if name in network}
    return {"counters": counters, "ports": columns, **({"ranks": int(ranks)} if ranks is not None else {})}
