"""Gradient grouping passes: which gradients travel together.

Every pass takes the model (layers in forward order, each with its
parameter tensors) and returns the training document's ``groups``: a list
of dicts ``{"layers": [...], "tensor": t, "bytes": b}`` (the engine's
``GroupSpec``, crates/ddlsim-core/src/lower/training.rs). A group is one
gradient synchronisation (one all-reduce, or one PS push/pull); it is ready
when the backward of its lowest layer ends, which (backward runs from the
last layer down) is when every member layer's backward is done; without a
barrier, the forward of each listed layer waits for it. ``tensor`` is the
tensor index when the group is exactly one tensor, -1 otherwise.

Passes other than per-tensor also give ``"tensors"`` (tensor indices, in
buffer order) and ``"kind"`` (the pass name) for the event log's ``groups``
side table; the engine does not read them (see :func:`engine_groups`).

Times used by the passes that look at readiness (MG-WFBP, Horovod fusion)
are the per-layer backward times of the scenario, measured from the start
of the backward pass, without jitter.

Passes (scenario ``[strategy] grouping = {kind = ...}``):

- ``per-tensor`` (WFBP): one group per tensor (today's default).
- ``synceasgd``: one group holding every tensor, after the whole backward.
- ``mg-wfbp``: Shi et al., MG-WFBP (ICDCS 2019), Algorithm 1: per-layer
  groups merged into their previous layer when Theorem 1's condition
  holds, with the all-reduce cost T_ar(M) = a + b M of the scenario's
  algorithm (:mod:`ddlsim.simulation.algorithms`).
- ``fusion``: Horovod tensor fusion: every cycle, the tensors that became
  ready since the last cycle are fused, in ready order, into buffers of at
  most ``threshold`` bytes (a tensor above the threshold travels alone; a
  threshold of 0 disables fusion). Defaults are Horovod's: 64 MiB and
  5 ms (horovod/common/operations.cc, BackgroundThreadLoop:
  ``SetTensorFusionThresholdBytes(64 * 1024 * 1024)``,
  ``SetCycleTimeMs(5)``; docs/tensor-fusion.rst: "Default fusion buffer
  size is 64 MB", ``HOROVOD_CYCLE_TIME`` in milliseconds).
- ``thesis-fusion``: the thesis' fusion buffers (its Table 4.1
  ``fusion_buffer_size``): contiguous layers packed from layer 0 upward
  while the buffer stays strictly below the size; a layer never splits.
- ``ddp``: PyTorch DistributedDataParallel buckets, as
  ``torch.distributed._compute_bucket_assignment_by_size`` assigns them
  (torch/csrc/distributed/c10d/reducer.cpp) with the limits
  ``[_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_cap_mb MiB]``: tensors
  are appended to the open bucket, which closes as soon as its size
  reaches the current limit; the limit then advances to the next one
  (the last one repeats); the open bucket is closed at the end.
- ``fixed``: tensors in ready order packed into groups of at most
  ``size`` bytes (a larger tensor travels alone).
- ``groups``: user-given groups, lists of tensor names; tensors not named
  travel alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import ScenarioError
from ..workload.model import Model
from .algorithms import AllReduceCost  # noqa: F401  (the cost model of MG-WFBP, re-exported)

# PyTorch: torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (c10d/reducer.hpp kDefaultFirstBucketBytes).
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_CAP_MB = 25
# Horovod defaults (horovod/common/operations.cc).
HOROVOD_FUSION_THRESHOLD_BYTES = 64 * 1024 * 1024
HOROVOD_CYCLE_TIME_NS = 5_000_000

PASS_NAMES = ("per-tensor", "synceasgd", "mg-wfbp", "fusion", "thesis-fusion", "ddp", "fixed", "groups")


@dataclass(frozen=True)
class TensorInfo:
    index: int
    layer: int
    bytes: int
    name: str


def tensor_infos(model: Model) -> list[TensorInfo]:
    """Every parameter tensor in registration (forward) order."""
    out = []
    for layer_index, layer in enumerate(model.layers):
        for t in layer.tensors:
            out.append(TensorInfo(len(out), layer_index, t.bytes, t.name))
    return out


def backward_end_ns(bwd_ns: Sequence[int]) -> list[int]:
    """When the backward of each layer ends, from the start of the backward pass."""
    ends = [0] * len(bwd_ns)
    t = 0
    for layer in range(len(bwd_ns) - 1, -1, -1):
        t += bwd_ns[layer]
        ends[layer] = t
    return ends


def make_group(members: Sequence[TensorInfo], kind: str) -> dict:
    """A group holding `members` (in buffer order)."""
    if not members:
        raise ValueError("a group needs at least one tensor")
    return {
        "layers": sorted({m.layer for m in members}),
        "tensor": members[0].index if len(members) == 1 else -1,
        "bytes": sum(m.bytes for m in members),
        "tensors": [m.index for m in members],
        "kind": kind,
    }


def _ordered(groups: list[dict]) -> list[dict]:
    """Groups in forward order of their first tensor (the engine orders them by readiness itself)."""
    return sorted(groups, key=lambda g: min(g["tensors"]))


def engine_groups(groups: Iterable[dict]) -> list[dict]:
    """The groups as the engine reads them (without the log-only keys)."""
    return [{k: v for k, v in g.items() if k not in ("tensors", "kind")} for g in groups]


# ----------------------------------------------------------------- passes


def per_tensor(model: Model) -> list[dict]:
    """Wait-free backpropagation: one group per tensor (the engine's default form)."""
    return [{"layers": [t.layer], "tensor": t.index, "bytes": t.bytes} for t in tensor_infos(model)]


def synceasgd(model: Model) -> list[dict]:
    """SyncEASGD: every gradient in one all-reduce after the whole backward pass."""
    tensors = tensor_infos(model)
    return [make_group(tensors, "synceasgd")] if tensors else []


def ready_order(tensors: Sequence[TensorInfo]) -> list[TensorInfo]:
    """Order in which gradients become ready: reverse registration order
    (backward runs from the last layer down; within a layer, the last
    registered tensor first, as DDP assumes)."""
    return list(reversed(tensors))


def ddp_bucket_assignment(sizes: Sequence[int], limits: Sequence[int]) -> list[list[int]]:
    """torch.distributed._compute_bucket_assignment_by_size for dense tensors
    of one dtype and device: indices (positions in `sizes`) per bucket."""
    if not limits:
        raise ValueError("bucket size limits must not be empty")
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    limit_index = 0
    for i, nbytes in enumerate(sizes):
        current.append(i)
        size += nbytes
        if size >= limits[limit_index]:
            buckets.append(current)
            current, size = [], 0
            limit_index = min(limit_index + 1, len(limits) - 1)
    if current:
        buckets.append(current)
    return buckets


def ddp(model: Model, bucket_cap_mb: float = DDP_BUCKET_CAP_MB,
        first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[dict]:
    """PyTorch DDP buckets after the rebuild at the end of the first
    iteration: parameters in the order their gradients become ready
    (reverse registration order), limits [first bucket, bucket_cap_mb MiB]."""
    cap = int(bucket_cap_mb * 1024 * 1024)  # DDP: bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)
    order = ready_order(tensor_infos(model))
    buckets = ddp_bucket_assignment([t.bytes for t in order], [first_bucket_bytes, cap])
    return _ordered([make_group([order[i] for i in b], "ddp") for b in buckets])


def thesis_fusion(model: Model, fusion_buffer_size: int) -> list[dict]:
    """The thesis' fusion: whole layers from layer 0 upward, a buffer taking
    the next layer only while its total stays strictly below
    `fusion_buffer_size` (a layer at or above the size is a buffer alone)."""
    groups: list[dict] = []
    current: list[TensorInfo] = []
    size = 0
    by_layer: dict[int, list[TensorInfo]] = {}
    for t in tensor_infos(model):
        by_layer.setdefault(t.layer, []).append(t)
    for layer in sorted(by_layer):
        members = by_layer[layer]
        nbytes = sum(t.bytes for t in members)
        if current and size + nbytes >= fusion_buffer_size:
            groups.append(make_group(current, "thesis-fusion"))
            current, size = [], 0
        current.extend(members)
        size += nbytes
    if current:
        groups.append(make_group(current, "thesis-fusion"))
    return groups


def _pack_at_most(tensors: Sequence[TensorInfo], limit: int, kind: str) -> list[dict]:
    """Consecutive tensors into groups of at most `limit` bytes (a larger tensor alone)."""
    groups, current, size = [], [], 0
    for t in tensors:
        if current and size + t.bytes > limit:
            groups.append(make_group(current, kind))
            current, size = [], 0
        current.append(t)
        size += t.bytes
    if current:
        groups.append(make_group(current, kind))
    return groups


def fixed(model: Model, size: int) -> list[dict]:
    """Fixed-size merge: tensors in ready order, groups of at most `size` bytes."""
    return _ordered(_pack_at_most(ready_order(tensor_infos(model)), size, "fixed"))


def horovod_fusion(model: Model, bwd_ns: Sequence[int], threshold: int = HOROVOD_FUSION_THRESHOLD_BYTES,
                   cycle_time_ns: int = HOROVOD_CYCLE_TIME_NS) -> list[dict]:
    """Horovod tensor fusion. Cycles tick every `cycle_time_ns` from the
    start of the backward pass; at each tick the tensors that became ready
    since the previous tick are fused in ready order into buffers of at most
    `threshold` bytes. A threshold of 0 disables fusion (one group per
    tensor). With a cycle time of 0 every distinct ready time is a cycle."""
    tensors = ready_order(tensor_infos(model))
    ends = backward_end_ns(bwd_ns)
    cycles: dict[int, list[TensorInfo]] = {}
    for t in tensors:
        ready = ends[t.layer]
        tick = ready if cycle_time_ns <= 0 else -(-ready // cycle_time_ns)  # flushed at the first tick at or after
        cycles.setdefault(tick, []).append(t)
    groups: list[dict] = []
    for tick in sorted(cycles):
        members = cycles[tick]
        if threshold <= 0:
            groups.extend(make_group([t], "fusion") for t in members)
        else:
            groups.extend(_pack_at_most(members, threshold, "fusion"))
    return _ordered(groups)


def user_groups(model: Model, names: Sequence[Sequence[str]]) -> list[dict]:
    """Groups given as lists of tensor names; unnamed tensors travel alone."""
    tensors = tensor_infos(model)
    by_name: dict[str, TensorInfo] = {}
    for t in tensors:
        by_name.setdefault(t.name, t)
    seen: dict[int, int] = {}
    groups = []
    for g, group in enumerate(names):
        if not group:
            raise ScenarioError(f"strategy.grouping.groups[{g}] is empty; list at least one tensor name")
        members = []
        for name in group:
            if name not in by_name:
                import difflib

                close = difflib.get_close_matches(name, list(by_name), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ScenarioError(
                    f"strategy.grouping.groups[{g}] names tensor {name!r}, which model {model.name} does not have{hint}; "
                    "tensor names are those of ddlsim.load_model(name).tensor_table()"
                )
            t = by_name[name]
            if t.index in seen:
                raise ScenarioError(
                    f"tensor {name!r} is in strategy.grouping.groups[{seen[t.index]}] and groups[{g}]; a tensor belongs to one group"
                )
            seen[t.index] = g
            members.append(t)
        groups.append(make_group(members, "groups"))
    groups.extend(make_group([t], "groups") for t in tensors if t.index not in seen)
    return _ordered(groups)


# ----------------------------------------------------------------- MG-WFBP


@dataclass(frozen=True)
class MergePlan:
    """A merge plan over the learnable layers (units, forward order, 0-based)."""

    merged: frozenset[int]  # units whose gradients go with the previous unit (the paper's M, 0-based)
    comm_start: tuple[float, ...]  # tau_c per unit in the final plan (0 for merged units' own slot)
    iteration_end: float  # end of the last communication (from backward start)


def comm_schedule(ready: Sequence[float], sizes: Sequence[float], merged: Iterable[int],
                  cost: AllReduceCost) -> tuple[list[float], list[float], float]:
    """The paper's Eq. 20 for a merge set: (tau_c, t_c, end of the last
    communication), units in forward order, backward from the last unit."""
    merged = set(merged)
    n = len(ready)
    p = list(sizes)
    tc = [0.0] * n
    # the gradients of a merged unit ride with its previous (lower) unit
    for u in range(n - 1, 0, -1):
        if u in merged:
            p[u - 1] += p[u]
            p[u] = 0
    for u in range(n):
        tc[u] = 0.0 if u in merged else cost(p[u])
    tau = [0.0] * n
    for u in range(n - 1, -1, -1):
        tau[u] = ready[u] if u == n - 1 else max(tau[u + 1] + tc[u + 1], ready[u])
    end = tau[0] + tc[0] if n else 0.0
    return tau, tc, end


def mg_wfbp_merge(ready: Sequence[float], sizes: Sequence[float], cost: AllReduceCost) -> MergePlan:
    """MG-WFBP Algorithm 1. `ready[u]` is when unit u's backward ends
    (tau_b[u] + t_b[u]); `sizes[u]` its gradient bytes; units in forward
    order (the paper's layer u+1).

    Line 13 reads ``tau_b[l-2] - tc[l] < a``; we use Eq. 27's
    ``tau_b^(l-2) - tau_c^(l) < a`` (tc there is a typo for tau_c), with
    tau_b^(l-2) = tau_b^(l-1) + t_b^(l-1), the end of layer l-1's backward,
    which also defines it for l = 2.
    """
    n = len(ready)
    p = [float(s) for s in sizes]
    tc = [cost(x) for x in p]

    def comm_start() -> list[float]:
        tau = [0.0] * n
        for u in range(n - 1, -1, -1):
            tau[u] = ready[u] if u == n - 1 else max(tau[u + 1] + tc[u + 1], ready[u])
        return tau

    tau = comm_start()
    merged: set[int] = set()
    for u in range(n - 1, 0, -1):
        if ready[u - 1] - tau[u] < cost.a:
            tc[u] = 0.0
            p[u - 1] += p[u]
            tc[u - 1] = cost(p[u - 1])
            tau = comm_start()
            merged.add(u)
    end = tau[0] + tc[0] if n else 0.0
    return MergePlan(frozenset(merged), tuple(tau), end)


def mg_wfbp_optimal(ready: Sequence[float], sizes: Sequence[float], cost: AllReduceCost) -> MergePlan:
    """The merge set minimising the paper's iteration time (Eq. 21/23)
    exactly, by dynamic programming in O(L^2): F[j], the earliest end of
    the communication of units j.. when unit j is the lowest unit of its
    group, is min over k >= j of max(F[k+1], ready[j]) + T_ar(p[j..k])
    (F[L] = -inf). Communication is FIFO and a group starts when the
    previous one ended and its lowest unit is ready, so a group's best
    start only depends on the earliest end of everything above it.
    Ties go to the plan with fewer merges."""
    n = len(ready)
    if n == 0:
        return MergePlan(frozenset(), (), 0.0)
    prefix = [0.0]
    for s in sizes:
        prefix.append(prefix[-1] + float(s))
    best = [0.0] * (n + 1)
    top = [0] * n  # the highest unit of the group whose lowest unit is j
    for j in range(n - 1, -1, -1):
        chosen, value = j, None
        for k in range(j, n):
            start = ready[j] if k == n - 1 else max(best[k + 1], ready[j])
            end = start + cost(prefix[k + 1] - prefix[j])
            if value is None or end < value:
                chosen, value = k, end
        best[j], top[j] = value, chosen
    merged: set[int] = set()
    j = 0
    while j < n:
        merged.update(range(j + 1, top[j] + 1))
        j = top[j] + 1
    tau, _, end = comm_schedule(ready, sizes, merged, cost)
    return MergePlan(frozenset(merged), tuple(tau), end)


MG_WFBP_METHODS = {"optimal": mg_wfbp_optimal, "algorithm1": mg_wfbp_merge}


def mg_wfbp_units(model: Model, bwd_ns: Sequence[int]) -> tuple[list[int], list[float], list[int]]:
    """(layer index, ready time, bytes) of each learnable layer, forward order."""
    ends = backward_end_ns(bwd_ns)
    layers = [i for i, layer in enumerate(model.layers) if layer.tensors]
    return layers, [float(ends[i]) for i in layers], [sum(t.bytes for t in model.layers[i].tensors) for i in layers]


def mg_wfbp(model: Model, bwd_ns: Sequence[int], cost: AllReduceCost, method: str = "optimal") -> list[dict]:
    """MG-WFBP groups: per learnable layer, merged by the exact optimum of
    the paper's model (`optimal`) or by its Algorithm 1 (`algorithm1`),
    which is greedy and can miss the optimum (see tests/test_grouping.py)."""
    layers, ready, sizes = mg_wfbp_units(model, bwd_ns)
    plan = MG_WFBP_METHODS[method](ready, sizes, cost)
    tensors = tensor_infos(model)
    by_layer: dict[int, list[TensorInfo]] = {}
    for t in tensors:
        by_layer.setdefault(t.layer, []).append(t)
    groups: list[dict] = []
    current: list[TensorInfo] = []
    # walk units from the last down; a merged unit's tensors join the next lower unit's group
    for u in range(len(layers) - 1, -1, -1):
        current = by_layer[layers[u]] + current
        if u not in plan.merged:
            groups.append(make_group(current, "mg-wfbp"))
            current = []
    return _ordered(groups)
