"""The time a captured iteration spends outside its recorded layers, measured
in the capture so that a replay can put it back (docs/validation.md):

* **framework gaps**: the time between a worker's consecutive compute rows
  (Python, autograd, the recording and DDP hooks, the loss, zero_grad). Each
  forward or backward row of a layer is charged the gap before it: the
  time since the rank's previous compute row ended. The first compute row of
  an iteration is measured from the later of the previous iteration's last
  compute row and the rank's last communication row that ended before it
  (a parameter server's pulls, which the replay simulates itself).
* **the optimizer step** (rows ``op = optimizer_step``), with the gap before
  it since the later of the last compute row and the last communication row
  (DDP's all-reduces, whose time the replay simulates): it runs after the
  iteration's all-reduces, so the replay charges it before the next
  iteration's first forward, i.e. to the first layer's forward. Simulated
  iterations are then all alike, and each one holds one step, as each
  measured window after the first does.
* **slow steps**: the replay's layer times are medians (over ranks and all
  iterations); a mean iteration holds the layers' mean times over the
  counted iterations, so each layer is also charged that mean less the
  median.
* **waiting for the slower rank** (DDP): a bucket's all-reduce starts once
  the last rank launches it, but the replay's ranks are alike (each layer's
  mean time): it would start at the ranks' mean launch. Per bucket (in launch
  order), :func:`bucket_skew` measures the later launch less the mean over
  ranks, less the same of the previous iteration's last all-reduce ends (a rank
  that ended late launches late; its end is in the all-reduce's time already),
  the mean over the counted iterations; the layer whose backward the
  bucket's launch follows is charged that less the previous bucket's, so the
  replay launches each bucket that much later, as the last rank did.
* **waiting for the slower worker** (PS, synchronous): a key's update waits
  for every worker's push, so :func:`bucket_skew` of the workers' push
  requests (the k-th push of an iteration in place of the k-th bucket) is
  charged the same way.
* **bytes on the wire**: :func:`payload_fraction`, the share of a link's
  rate that carries payload once every MSS-sized segment pays its TCP/IP
  headers and link framing (closed form, no fitting).

Means over worker ranks and the iterations the capture's mean counts
(:func:`ddlsim.analyze.breakdown.warmup_iterations`: the warm-up iteration
is left out here as it is there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

# Link framing, bytes per frame beyond the IP packet:
# - "ethernet": a physical Ethernet link: preamble 8 + MAC header 14 + FCS 4 + inter-frame gap 12 = 38;
# - "tbf": a Linux tbf qdisc on a veth (how `ddlsim capture --bandwidth` shapes): it counts the 14-byte MAC
#   header of every segment (qdisc_pkt_len), nothing else; Linux TCP also sends the 12-byte timestamp option.
WIRE = {
    "ethernet": {"framing_bytes": 38, "tcp_option_bytes": 0},
    "tbf": {"framing_bytes": 14, "tcp_option_bytes": 12},
    "none": None,
}
TCP_IP_HEADER_BYTES = 40


def payload_fraction(mtu: int = 1500, framing_bytes: int = 38, tcp_option_bytes: int = 0,
                     header_bytes: int = TCP_IP_HEADER_BYTES) -> float:
    """Payload bytes per byte the link's rate counts, for bulk TCP in full
    segments: MSS / (MTU + framing), MSS = MTU - TCP/IP headers - TCP options.
    1500-byte MTU on Ethernet: 1460 / 1538."""
    if mtu <= header_bytes + tcp_option_bytes or framing_bytes < 0:
        raise ValueError(f"mtu {mtu} leaves no payload after {header_bytes + tcp_option_bytes} header bytes")
    return (mtu - header_bytes - tcp_option_bytes) / (mtu + framing_bytes)


def wire_fraction(wire: str, mtu: int = 1500) -> float:
    """:func:`payload_fraction` of a named framing (:data:`WIRE`); 1 for "none"."""
    if wire not in WIRE:
        raise ValueError(f"wire {wire!r}: give one of {', '.join(WIRE)}")
    spec = WIRE[wire]
    return 1.0 if spec is None else payload_fraction(mtu, **spec)


def _worker_rows(log, job: int | None = None) -> dict[str, np.ndarray]:
    """The workers' rows (all rows where no row says worker); `job`: only that job's (a log of several jobs, whose
    jobs number their ranks from 0 each)."""
    from ..trace.coerce import as_columns

    log = as_columns(log)
    cols = {k: log.column(k) for k in ("rank", "role", "iteration", "kind", "op", "name", "start_ns", "end_ns")}
    keep = cols["role"] == "worker" if (cols["role"] == "worker").any() else np.ones(len(cols["rank"]), dtype=bool)
    if job is not None:
        keep = keep & (np.asarray(log.column("job")) == job)
    return {k: np.asarray(v)[keep] for k, v in cols.items()}


_NONE = np.zeros(0, dtype=np.int64)


def _by_rank_iteration(rows: dict[str, np.ndarray], idx: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The row indices `idx` grouped by (rank, iteration), each group in ascending index order (the order a mask
    over all rows gives): one sort, so a log's every (rank, iteration) is looked at in time linear in its rows."""
    if not len(idx):
        return {}
    rank, iteration = rows["rank"][idx], rows["iteration"][idx]
    order = np.lexsort((idx, iteration, rank))
    idx, rank, iteration = idx[order], rank[order], iteration[order]
    cut = np.flatnonzero((rank[1:] != rank[:-1]) | (iteration[1:] != iteration[:-1])) + 1
    bounds = np.concatenate(([0], cut, [len(idx)]))
    return {(int(rank[a]), int(iteration[a])): idx[a:b] for a, b in zip(bounds[:-1], bounds[1:])}


def framework_overheads(log, metadata: dict[str, Any] | None = None, tails: bool = True,
                        job: int | None = None) -> dict[str, Any]:
    """What a captured log's worker iterations spend outside their layers:
    ``layers`` (per layer name: (forward s, backward s) of gap before its
    rows), ``optimizer_s`` (the optimizer step per iteration), ``gap_s``
    (all gaps per iteration) and ``samples`` (the (rank, iteration) pairs
    averaged). Means over worker ranks and the counted iterations; the
    layers' gaps over those with layer rows only (a capture with
    ``--layer-every K`` has them on every K-th iteration).
    `tails`: also the layers' mean less median times (``tail_s``; not for
    sampled rank times, whose draws hold their slow steps already). `job`: only that job's rows."""
    from ..analyze.breakdown import collective_iterations, warmup_iterations

    rows = _worker_rows(log, job)
    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    iterations = np.unique(rows["iteration"][rows["iteration"] >= 0])
    skip = warmup_iterations(meta, len(iterations))
    counted = set(int(i) for i in iterations[skip:])
    # a capture with all-reduce rows on some iterations only (capture ddp --layer-every K): the optimizer step and
    # the bucket skew are measured after / from the all-reduces, so on those iterations only (the others' step would
    # hold the unrecorded all-reduces' exposed time, which the replay simulates itself)
    carried = collective_iterations(meta)
    with_comm = counted & carried if carried is not None and counted & carried else counted
    compute = rows["kind"] == "compute"
    layer_op = compute & np.isin(rows["op"], ["forward", "backward"]) & (rows["name"] != "")
    optimizer = compute & (rows["op"] == "optimizer_step")
    communication = np.isin(rows["kind"], ["send", "recv", "collective"])
    gaps: dict[tuple[str, str], float] = {}
    optimizer_total, samples, optimizer_samples = 0.0, 0, 0
    layer_samples = 0  # the (rank, iteration)s with layer rows (a capture with --layer-every K: the sampled ones)
    # (rank, iteration) -> end of its last compute row; its layer and optimizer rows
    last_end = {key: int(rows["end_ns"][g].max()) for key, g in _by_rank_iteration(rows, np.flatnonzero(compute)).items()}
    steps = _by_rank_iteration(rows, np.flatnonzero(layer_op | optimizer))
    for rank in np.unique(rows["rank"]):
        mine = rows["rank"] == rank
        comm_ends = np.sort(rows["end_ns"][mine & communication])
        for it in sorted(counted):
            sel = steps.get((int(rank), it), _NONE)
            if not len(sel) or (int(rank), it - 1) not in last_end:
                continue
            sel = sel[np.argsort(rows["start_ns"][sel], kind="stable")]
            samples += 1
            layer_samples += bool(layer_op[sel].any())
            previous = last_end[(int(rank), it - 1)]
            first = True
            for i in sel:
                start, end = int(rows["start_ns"][i]), int(rows["end_ns"][i])
                since = previous
                if first or optimizer[i]:
                    # waiting for communication that ended before the row (a parameter server's pulls, DDP's
                    # all-reduces before the optimizer step) is simulated itself: the gap starts when it ended
                    j = np.searchsorted(comm_ends, start, side="right") - 1
                    if j >= 0:
                        since = max(since, int(comm_ends[j]))
                if optimizer[i]:
                    if it in with_comm:
                        optimizer_total += end - min(since, start)
                        optimizer_samples += 1
                else:
                    key = (str(rows["name"][i]), str(rows["op"][i]))
                    gaps[key] = gaps.get(key, 0.0) + max(0, start - since)
                first = False
                previous = max(previous, end)
    layers: dict[str, list[float]] = {}
    for (name, op), total in gaps.items():
        layers.setdefault(name, [0.0, 0.0])[0 if op == "forward" else 1] = total / layer_samples / 1e9
    every = meta.get("layer_every")
    sampled = isinstance(every, int) and not isinstance(every, bool) and every > 1
    warmup = set(int(i) for i in iterations[:skip]) if sampled else set()  # left out of the median there too
    tail = _mean_over_median(rows, layer_op, counted, warmup) if tails else {}
    for (name, op), extra in tail.items():
        layers.setdefault(name, [0.0, 0.0])[0 if op == "forward" else 1] += extra
    skew = bucket_skew(rows, with_comm) if tails and meta.get("job") == "ddp" else []
    if tails and meta.get("job") == "ps" and meta.get("sync") is not False:  # an update waits for the last push
        skew = bucket_skew(rows, counted, launches=(rows["kind"] == "send") & (rows["op"] == "push_request"))
    previous = 0.0
    for bucket in skew:
        layers.setdefault(bucket["layer"], [0.0, 0.0])[1] += bucket["skew_s"] - previous
        previous = bucket["skew_s"]
    return {"layers": {k: (v[0], v[1]) for k, v in layers.items()},
            "optimizer_s": optimizer_total / (samples if carried is None else optimizer_samples) / 1e9
            if (samples if carried is None else optimizer_samples) else 0.0,
            "gap_s": sum(gaps.values()) / layer_samples / 1e9 if layer_samples else 0.0,
            "tail_s": sum(tail.values()),
            "skew_s": previous,
            "buckets": skew,
            "samples": samples}


def bucket_skew(rows: dict[str, np.ndarray], counted: set[int], launches: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Per DDP bucket, in launch order (the k-th collective row of a rank's iteration; `launches`: a mask of other
    rows that launch, e.g. a parameter server's push requests): ``skew_s``, the mean over
    the counted iterations of the latest launch over the ranks less their mean launch (how much later the
    all-reduce could start than an average rank launched it), less the same of the ranks' last all-reduce ends in the
    previous iteration (each rank's rows are measured from its own end, the replay's ranks resume at the latest:
    a rank whose all-reduce ended late, and which therefore launches late, is waited for once; DDP only, where the
    last all-reduce ends a rank's iteration), and ``layer``, the
    layer whose backward row ended last before the launch on most (rank, iteration)s. Empty with one rank, or when iterations launch different
    numbers of buckets."""
    from collections import Counter

    ddp = launches is None
    coll = np.flatnonzero(rows["kind"] == "collective" if ddp else launches)
    backward = np.flatnonzero((rows["kind"] == "compute") & (rows["op"] == "backward") & (rows["name"] != ""))
    ranks = np.unique(rows["rank"][coll])
    if len(ranks) < 2:
        return []
    skews: list[list[float]] = []
    layers: list[Counter] = []
    launched, backwards = _by_rank_iteration(rows, coll), _by_rank_iteration(rows, backward)
    for it in sorted(counted):
        per_rank = []
        for rank in ranks:
            mine = launched.get((int(rank), it), _NONE)
            per_rank.append(np.sort(rows["start_ns"][mine]))
            before = backwards.get((int(rank), it), _NONE)
            ends = rows["end_ns"][before]
            for k, start in enumerate(per_rank[-1]):
                done = np.flatnonzero(ends <= start)
                if len(done):
                    while len(layers) <= k:
                        layers.append(Counter())
                    layers[k][str(rows["name"][before[done[np.argmax(ends[done])]]])] += 1
        if len({len(x) for x in per_rank}) != 1 or not len(per_rank[0]):
            return []  # a partial iteration: no per-bucket comparison
        starts = np.array(per_rank, dtype=float)  # (ranks, buckets)
        # each rank's rows are measured from its own last all-reduce end of the previous iteration, but the replay's
        # ranks all resume at the latest one: a rank that ended late (and so launches late) is not waited for twice
        ends = [rows["end_ns"][launched.get((int(rank), it - 1), _NONE)] for rank in ranks]
        if ddp and not any(len(e) for e in ends):
            # the previous iteration's all-reduces unrecorded (capture ddp --layer-every K runs it without the comm hook):
            # its optimizer step starts where its backward pass returned, i.e. once its last all-reduce ended
            steps = np.flatnonzero((rows["kind"] == "compute") & (rows["op"] == "optimizer_step") & (rows["iteration"] == it - 1))
            ends = [rows["start_ns"][steps[rows["rank"][steps] == rank]] for rank in ranks]
        late = 0.0
        if ddp and all(len(e) for e in ends):
            last = np.array([float(e.max()) for e in ends])
            late = float(last.max() - last.mean())
        skews.append(list((starts.max(axis=0) - starts.mean(axis=0) - late) / 1e9))
    if not skews or len({len(x) for x in skews}) != 1 or len(layers) < len(skews[0]):
        return []
    mean = np.mean(np.array(skews), axis=0)
    return [{"bucket": k, "skew_s": float(mean[k]), "layer": layers[k].most_common(1)[0][0]} for k in range(len(mean))]


def _mean_over_median(rows: dict[str, np.ndarray], layer_op: np.ndarray, counted: set[int],
                      warmup: frozenset[int] | set[int] = frozenset()) -> dict[tuple[str, str], float]:
    """Per (layer, forward | backward): the mean of its per-(rank, iteration) time over the counted iterations less
    the median over all of them but `warmup` unless nothing else is left (what the replay's layer times are, see
    :func:`ddlsim.workload.profile.layer_times_from_log`, which leaves a sampled capture's warm-up out), in s: a mean
    iteration holds the layers' mean times, slow steps (a descheduled rank, a cache miss) included."""
    sel = np.flatnonzero(layer_op)
    steps: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    for i in sel:
        key = (str(rows["name"][i]), str(rows["op"][i]))
        step = (int(rows["rank"][i]), int(rows["iteration"][i]))
        per = steps.setdefault(key, {})
        per[step] = per.get(step, 0) + int(rows["end_ns"][i] - rows["start_ns"][i])
    out = {}
    for key, per in steps.items():
        kept = [v for (_, it), v in per.items() if it in counted]
        if kept:
            median_of = [v for (_, it), v in per.items() if it not in warmup] or list(per.values())
            out[key] = (float(np.mean(kept)) - float(np.median(median_of))) / 1e9
    return out


def with_overheads(model, overheads: dict[str, Any]):
    """`model` with each layer's gaps added to its times and the optimizer
    step added to the first layer's forward."""
    import dataclasses

    layers = []
    for index, layer in enumerate(model.layers):
        fwd, bwd = overheads["layers"].get(layer.name, (0.0, 0.0))
        if index == 0:
            fwd += overheads["optimizer_s"]
        if layer.fwd_s is not None and layer.bwd_s is not None and (fwd or bwd):
            layer = dataclasses.replace(layer, fwd_s=max(0.0, layer.fwd_s + fwd), bwd_s=max(0.0, layer.bwd_s + bwd))
        layers.append(layer)
    return dataclasses.replace(model, layers=tuple(layers))


def overheads_ns(path, model, job: int | None = None) -> np.ndarray:
    """The capture at `path`'s overheads per layer of `model`, in its layer order: (layers, 2) int64 ns
    (forward, backward), the optimizer step in the first layer's forward; what :func:`with_overheads` adds.
    `job`: of a log of several jobs, that job's."""
    from ..trace.parquet import read_event_log

    log = read_event_log(path)
    found = framework_overheads(log, log.metadata, tails=False, job=job)  # the drawn steps hold their own slow ones
    out = np.zeros((len(model.layers), 2), dtype=np.int64)
    for index, layer in enumerate(model.layers):
        fwd, bwd = found["layers"].get(layer.name, (0.0, 0.0))
        out[index] = (round(fwd * 1e9), round(bwd * 1e9))
    if len(out):
        out[0, 0] += round(found["optimizer_s"] * 1e9)
    return out


def training_ring_rate(log, metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The payload rate a DDP capture's ring all-reduces got **while training**, from its own bucket rows
    (docs/validation.md): T = k a + M b over the counted iterations' all-reduce busy time (the union over buckets of
    [the last rank's launch, the last rank's end]) and the 4-byte all-reduce measured after training, least squares
    (:func:`ddlsim.analyze.allreduce_fit.fit_allreduce`). The engine's ring of N ranks takes
    b = 2 (N - 1) / N x 8 / rate + (N - 1) / N x gamma per byte (Table II), so

        rate = 2 (N - 1) / N x 8e9 / (b - (N - 1) / N x gamma)   bit/s.

    It holds what the link, its headers, tbf's burst, the gloo threads' share of the cores next to the backward
    pass and a rank's late end cost each byte in the training itself. ``rate_bps``, ``a_ns``,
    ``b_ns_per_byte``, ``iterations`` (the counted ones) and ``bytes`` (per iteration); None when the points do not
    determine b (no small all-reduce, fewer than 2 ranks, no counted iteration) or leave no time for the bytes."""
    from ..analyze.allreduce_fit import allreduce_points, fit_allreduce

    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    workers = int(meta.get("workers") or len(meta.get("ranks") or {}) or 0)
    if meta.get("job") != "ddp" or workers < 2:
        return None
    points = allreduce_points(log, meta)
    fit = fit_allreduce(points)
    if fit is None:
        return None
    a, b = fit
    gamma = _positive(meta.get("gamma_ns_per_byte")) or 0.0
    per_byte = b - (workers - 1) / workers * gamma
    if not np.isfinite(per_byte) or per_byte <= 0:
        return None
    training = [p for p in points if p[1] > 4]
    return {"rate_bps": 2 * (workers - 1) / workers * 8e9 / per_byte, "a_ns": a, "b_ns_per_byte": b,
            "iterations": len(training), "bytes": training[0][1] if training else 0, "workers": workers}


def unbound_link(metadata: dict[str, Any] | None) -> Optional[str]:
    """Why a DDP capture's link did not hold its all-reduces back, or None where it did (or the log does not tell).
    A shaped link does not bind where a rank's wire bytes per iteration (2 (N - 1) / N x its buckets' bytes, with
    the TCP/IP and tbf framing) fit tbf's token bucket (``default_burst_bytes``, what capture shapes with: LeNet-5 at
    1 Gbit/s); an unshaped one where every rank ran on one host (``host`` of each of the metadata's ``ranks``: the
    loopback, where no rate holds a byte back; across hosts an unshaped capture ran on a network whose rate it does
    not record). Where the link does not bind, the all-reduce's time is the machine's: gloo's threads on the cores,
    the kernel's copies."""
    from ..capture.shaping import default_burst_bytes
    from ..units import parse_bandwidth

    meta = metadata or {}
    workers = int(meta.get("workers") or len(meta.get("ranks") or {}) or 0)
    if meta.get("source") != "capture" or meta.get("job") != "ddp" or workers < 2:
        return None
    total = sum(int(b.get("bytes", 0)) for b in meta.get("buckets") or [] if isinstance(b, dict))
    if total <= 0:
        return None
    wire = 2 * (workers - 1) / workers * total / wire_fraction("tbf")
    if meta.get("bandwidth"):
        try:
            rate = parse_bandwidth(str(meta["bandwidth"]))
        except ValueError:
            return None
        burst = default_burst_bytes(rate)
        if wire > burst:
            return None  # the shaping binds
        return (f"its {wire:.0f} wire bytes per rank and iteration fit the {burst}-byte token bucket of its "
                f"{meta['bandwidth']} tbf link")
    return "unshaped, every rank on one host: the loopback" if on_the_loopback(meta) else None


def on_the_loopback(metadata: dict[str, Any] | None) -> bool:
    """Whether a capture's messages went over the loopback: not shaped (no ``bandwidth``), and every one of its
    ``ranks`` (two or more) on one known ``host``. A shaped capture's go over a veth pair between network namespaces
    (docs/capture-shaping.md), a real job's over a NIC; neither is the loopback's cost per message."""
    meta = metadata or {}
    if meta.get("source") != "capture" or meta.get("bandwidth"):
        return False
    hosts = [r.get("host") if isinstance(r, dict) else None for r in (meta.get("ranks") or {}).values()]
    return len(hosts) >= 2 and None not in hosts and len(set(hosts)) == 1


def transport_on_the_cores(metadata: dict[str, Any] | None) -> Optional[str]:
    """Why a DDP capture's all-reduces ran on the cores its ranks computed on, or None. Where the ranks computed on
    the CPU (``device`` "cpu") and their compute threads took every core of the host (``processes`` x ``threads``
    >= ``host_cores``, :func:`ddlsim.capture.launch.host_facts`), and the link did not hold the all-reduces back
    (:func:`unbound_link`), the transport's threads (gloo's) did their work on those same cores: an all-reduce
    under the backward pass then takes a core from it, which the engine does not simulate (docs/planning.md,
    "Measured in pairs")."""
    meta = metadata or {}
    processes, cores, threads = meta.get("processes"), meta.get("host_cores"), meta.get("threads")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (processes, cores)) or cores <= 0:
        return None
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        threads = 1
    if meta.get("device") != "cpu" or processes * threads < cores:
        return None
    link = unbound_link(meta)
    if link is None:
        return None
    per = f", {threads} compute threads each" if threads > 1 else ""
    return (f"the capture's {processes} processes computed on the CPU{per}, {cores} cores in all (no core to spare), "
            f"and its link did not hold the all-reduces back ({link})")


def unbound_call_cost(log, metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What each all-reduce call of a DDP capture cost the machine while training, where its link did not bind
    (docs/validation.md; :func:`unbound_link`: a rank's wire bytes per iteration fit tbf's token bucket, or the
    capture was not shaped and ran on one host, where the loopback holds no byte back). The link passes them at once, so the all-reduce's measured busy time less what the link model gives it (2 (N - 1)
    steps of the 4-byte all-reduce's latency, and the bytes at the unshaped default rate with the reduction cost)
    is the machine's and the library's: gloo's threads waking on loaded cores, the veth, the kernel. Per call, the mean over the counted iterations,
    at least 0. It does not depend on the link's rate, so a replay at another rate adds it to every all-reduce call.
    ``call_ns``, ``iterations`` and ``busy_ns`` (their mean busy time); None where the link bound (there the
    busy time holds the link's own shortfall, which one capture cannot tell apart from this cost) or without the
    points. An unshaped capture's loopback and a shaped capture's veth that did not bind move the bytes through
    the same kernel path on the same cores: what both cost beyond the link model is taken alike (on a quiet 2-core
    machine LeNet-5's bucket took 2.2 ms unshaped and 2.3 ms at 1 Gbit/s)."""
    from ..analyze.allreduce_fit import allreduce_points
    from .scenario import Scenario

    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    workers = int(meta.get("workers") or len(meta.get("ranks") or {}) or 0)
    step = meta.get("allreduce_step_ns")
    if (not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0
            or unbound_link(meta) is None):
        return None
    unshaped = Scenario().network.bandwidth_bps
    points = [p for p in allreduce_points(log, meta) if p[1] > 4]
    if not points:
        return None
    gamma = _positive(meta.get("gamma_ns_per_byte")) or 0.0
    share = (workers - 1) / workers
    b_model = 2 * share * 8e9 / unshaped + share * gamma
    a_model = 2 * (workers - 1) * round(step)
    excess = [(t - k * a_model - m * b_model) / k for k, m, t in points]
    return {"call_ns": max(0.0, float(np.mean(excess))), "iterations": len(points),
            "busy_ns": float(np.mean([t for _, _, t in points]))}


def small_call_stall(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of an all-reduce call a DDP capture's link model leaves out where its link bound: the mean of the
    capture's 4-byte all-reduces after training (``allreduce_small_mean_ns``) less their median
    (``allreduce_small_ns``, which the replay already takes as the ring's latency). On a machine with no core to
    spare a gloo all-reduce stalls for 3-4 ms in a quarter to two thirds of its calls, at any size
    (docs/validation.md, ``benchmarks/gloo_call_cost.py``); a capture whose link bound holds those stalls inside its
    link time, where nothing tells them apart from the link, so a replay at another rate would drop them. The
    replay adds one constant per call, and only the mean makes their sum the measured one; the median is the calls
    that did not stall. ``call_ns`` (at least 0), ``mean_ns``, ``median_ns``, ``repeats``; None for a log that is
    not a DDP capture of 2 ranks or more or that lacks either value (captures before 2026-11-27 have the median
    only)."""
    meta = metadata or {}
    if meta.get("source") != "capture" or meta.get("job") != "ddp" or int(meta.get("workers") or 0) < 2:
        return None
    mean, median = _positive(meta.get("allreduce_small_mean_ns")), _positive(meta.get("allreduce_small_ns"))
    if mean is None or median is None or not np.isfinite(mean + median):
        return None
    return {"call_ns": max(0.0, mean - median), "mean_ns": mean, "median_ns": median,
            "repeats": meta.get("allreduce_small_repeats")}


def _positive(value: Any) -> Optional[float]:
    """A metadata value as a float where it is a number above 0 (not a boolean), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def training_message_latency(log, metadata: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The transport time a PS capture's own RPC messages took **while training**, from its rows
    (docs/validation.md), as the replay's message model has it: latency + bytes x per-byte. Per message of the
    counted iterations (:func:`ddlsim.analyze.breakdown.warmup_iterations` leaves the warm-up out), on the
    capture's aligned clocks (``clocks`` in the metadata):

    - a request (``push_request``, ``pull_request``): from the end of its worker's ``send`` row (which spans the
      ``rpc_async`` call, the worker's own issue cost: ``client_cost``) to its ``recv`` on the server;
    - a response (``push_response``, ``pull_response``): from the start of the server's ``send`` row to its
      ``recv`` on the worker (taken into the worker's receive queue; the wait there is the training thread's,
      simulated by ``client_cost``).

    Fitted as ``latency_ns + ns_per_byte x bytes`` by least squares where the messages' sizes vary; a negative
    slope (or an intercept below 0) is dropped and the mean kept as the latency (slope 0). ``latency_ns``,
    ``ns_per_byte``, ``messages``, ``mean_ns``, ``iterations`` (the counted ones), ``worker_bytes`` (a worker's
    payload per counted iteration in its busier direction: its pushes out or its pull responses in), ``per_message``
    (per message: its iteration, sending rank, op, tensor, bytes and transport time, ns: :func:`message_latency_table`
    makes the replay's per-message times of them), ``sends`` (per message sent in any iteration, warm-up included,
    as the links carried them: its send time as above, sender, receiver, bytes, and its index in ``per_message`` or
    -1: :func:`beyond_shaped_links` re-runs them through the capture's shaped links); None for a log that is not a
    PS capture, without a message of a counted iteration with both rows, or whose messages took no time on average."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.columns import aligned_times

    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    if meta.get("source") != "capture" or meta.get("job") != "ps":
        return None
    names = ("rank", "role", "iteration", "kind", "op", "message", "bytes", "peer", "tensor")
    c = {k: np.asarray(log.column(k)) for k in names}
    start, end = aligned_times(log)
    worker = c["role"] == "worker"
    iterations = np.unique(c["iteration"][worker & (c["iteration"] >= 0)])
    counted = iterations[warmup_iterations(meta, len(iterations)):]
    mine = np.isin(c["iteration"], counted)
    ops = c["op"].astype(str)
    requests = np.isin(ops, ("push_request", "pull_request"))
    responses = np.isin(ops, ("push_response", "pull_response"))
    sent = (c["kind"] == "send") & (requests | responses)
    received = (c["kind"] == "recv") & (requests | responses)
    arrival: dict[tuple[int, int], int] = {}
    for message, rank, t in zip(c["message"][received], c["rank"][received], end[received]):
        key = (int(message), int(rank))
        arrival[key] = min(arrival.get(key, int(t)), int(t))
    sizes, took, which, wire = [], [], [], []
    for i in np.flatnonzero(sent):
        peer_key = (int(c["message"][i]), int(c["peer"][i]))
        leaves = int(end[i]) if requests[i] else int(start[i])
        counts = bool(mine[i]) and peer_key in arrival
        wire.append((leaves, int(c["rank"][i]), int(c["peer"][i]), float(c["bytes"][i]), len(took) if counts else -1))
        if not counts:
            continue
        sizes.append(float(c["bytes"][i]))
        took.append(float(arrival[peer_key] - leaves))
        which.append((int(c["iteration"][i]), int(c["rank"][i]), str(ops[i]), int(c["tensor"][i])))
    if not took:
        return None
    # a worker's payload per counted iteration in its busier direction (pushes out, pull responses in)
    pushed = mine & sent & worker & (ops == "push_request")
    pulled = mine & received & worker & (ops == "pull_response")
    per_worker = max((float(c["bytes"][sel].sum()) / (len(counted) * max(1, len(np.unique(c["rank"][sel]))))
                      for sel in (pushed, pulled) if sel.any()), default=0.0)
    x, y = np.asarray(sizes), np.asarray(took)
    if not float(y.mean()) > 0:  # clocks that disagree with the rows: no usable transport time
        return None
    return {**_latency_fit(x, y), "iterations": [int(i) for i in counted], "worker_bytes": per_worker,
            "per_message": [(*key, float(n), float(t)) for key, n, t in zip(which, x, y)], "sends": wire}


def _latency_fit(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """``y = latency_ns + ns_per_byte x x`` by least squares where the sizes `x` vary; a negative slope (or an
    intercept below 0) is dropped and the mean kept as the latency (slope 0). With ``messages`` and ``mean_ns``."""
    mean_x, mean_y = float(x.mean()), float(y.mean())
    var = float(((x - mean_x) ** 2).sum())
    b = float(((x - mean_x) * (y - mean_y)).sum()) / var if var > 0 else 0.0
    a = mean_y - b * mean_x
    if b < 0 or a < 0:
        a, b = mean_y, 0.0
    return {"latency_ns": max(a, 0.0), "ns_per_byte": b, "messages": len(y), "mean_ns": mean_y}


def beyond_shaped_links(found: dict[str, Any], rate_bps: float) -> dict[str, Any]:
    """:func:`training_message_latency`'s ``found`` for a capture whose shaped link bound, with each message's time
    less what the capture's own links took it (:func:`ddlsim.simulation.tbf_queue.tbf_transit`: every captured
    send, warm-up included, at its captured time through its route's two tbf queues of `rate_bps` and
    ``default_burst_bytes(rate_bps)``, its wire bytes with TCP/IP and Ethernet headers): what the machine took, at
    least 0, and the latency fitted again over those. ``link_mean_ns``: the links' mean time per counted message;
    ``below_link``: how many counted messages took less than the links give them (their time beyond is 0)."""
    from ..capture.shaping import default_burst_bytes
    from .tbf_queue import tbf_transit

    sends = found["sends"]
    index = np.asarray([s[4] for s in sends], dtype=int)
    transit = tbf_transit(np.asarray([s[0] for s in sends], dtype=np.int64), np.asarray([s[1] for s in sends]),
                          np.asarray([s[2] for s in sends]), np.asarray([s[3] for s in sends]) / wire_fraction("tbf"),
                          rate_bps, default_burst_bytes(rate_bps))
    link = np.zeros(len(found["per_message"]))
    counted = index >= 0
    link[index[counted]] = transit[counted]
    took = np.asarray([t for *_, t in found["per_message"]], dtype=float)
    beyond = np.maximum(0.0, took - link)
    x = np.asarray([b for *_, b, _ in found["per_message"]], dtype=float)
    return {**found, **_latency_fit(x, beyond), "link_mean_ns": float(link.mean()),
            "below_link": int((took < link).sum()),
            "per_message": [(*m[:5], float(t)) for m, t in zip(found["per_message"], beyond)]}


def message_latency_table(found: dict[str, Any], ns_per_byte: float) -> tuple[int, Optional[dict[str, Any]]]:
    """The per-message transport times of :func:`training_message_latency`'s ``found`` as a replay whose link moves
    a byte in `ns_per_byte` takes them: the route's latency (the smallest time beyond the bytes, at least 0, ns) and
    ``strategy.message_latency`` (per counted iteration, each message's time beyond its bytes and that latency,
    keyed by its sending rank, kind and tensor; a message some iteration lacks is null there; ``first``, the first
    counted iteration: a replay's iteration k takes the capture's iteration k), or None where every message took
    that latency (nothing to add). A message alone on the replay's link then takes what it took in the capture."""
    rows = found["per_message"]
    times = [max(0, round(t - ns_per_byte * b)) for *_, b, t in rows]
    base = min(times)
    if max(times) == base:
        return base, None
    keys = sorted({(rank, op, tensor) for _, rank, op, tensor, _, _ in rows})
    at = {k: i for i, k in enumerate(keys)}
    table: dict[int, list] = {it: [None] * len(keys) for it in found["iterations"]}
    for (it, rank, op, tensor, _, _), t in zip(rows, times):
        table[it][at[(rank, op, tensor)]] = f"{t - base}ns"
    kept = [it for it, row in table.items() if any(v is not None for v in row)]
    return base, {"keys": [list(k) for k in keys], "iterations": [table[it] for it in kept], "first": kept[0]}


def captured_idle_ns(log, metadata: Optional[dict[str, Any]] = None, job: Optional[int] = None) -> Optional[float]:
    """The idle a DDP capture's training threads had before each iteration's compute: per worker rank and counted
    iteration, the end of its last communication row (the last all-reduce) before its optimizer step less the end
    of its last compute row before that (0 where the all-reduce ended first); the median over them, ns. None where
    the log has no optimizer step rows."""
    from ..analyze.breakdown import warmup_iterations
    rows = _worker_rows(log, job)
    meta = metadata if metadata is not None else getattr(log, "metadata", {}) or {}
    iterations = np.unique(rows["iteration"][rows["iteration"] >= 0])
    counted = set(int(i) for i in iterations[warmup_iterations(meta, len(iterations)):])
    compute = rows["kind"] == "compute"
    optimizer = compute & (rows["op"] == "optimizer_step")
    communication = np.isin(rows["kind"], ["send", "recv", "collective"])
    idles = []
    for rank in np.unique(rows["rank"]):
        mine = rows["rank"] == rank
        comm_ends = np.sort(rows["end_ns"][mine & communication])
        compute_ends = np.sort(rows["end_ns"][mine & compute & ~optimizer])
        for i in np.flatnonzero(mine & optimizer):
            if int(rows["iteration"][i]) not in counted:
                continue
            start = rows["start_ns"][i]
            j = np.searchsorted(comm_ends, start, side="right") - 1
            k = np.searchsorted(compute_ends, start, side="right") - 1
            if j < 0 or k < 0:
                continue
            idles.append(max(0, int(comm_ends[j]) - int(compute_ends[k])))
    return float(np.median(idles)) if idles else None


def idle_wake_document(scenario, model, times_ns: list[tuple[int, int]]) -> dict[str, Any]:
    """:func:`ddlsim.simulation.idle_wake.engine_document` of a scenario whose ``model.idle_wake`` is set: the captured idle and the optimizer
    step's share of the first layer's forward from its captured profile (:func:`captured_idle_ns`,
    :func:`framework_overheads`). Raises :class:`ScenarioError` where the profile is
    not a DDP capture with overheads."""
    from ..errors import ScenarioError
    from ..trace.parquet import read_event_log
    from .idle_wake import CLASSES, engine_document, shifted

    config = scenario.model
    profile = Path(config.profile) if config.profile else None
    if profile is not None and scenario.base_dir and not profile.is_absolute():
        profile = Path(scenario.base_dir) / profile
    if profile is None or profile.suffix != ".parquet" or not config.overheads or scenario.strategy.kind != "ring":
        raise ScenarioError("model.idle_wake scales a DDP capture's compute by the idle before it: it needs "
                            "model.profile = a captured events.parquet, model.overheads = true and a ring strategy "
                            "(ddlsim replay of a DDP capture sets them); remove model.idle_wake")
    log = read_event_log(profile)
    if log.metadata.get("job") != "ddp":
        raise ScenarioError(f"model.idle_wake: {profile} is not a DDP capture; remove model.idle_wake")
    curve = dict(config.idle_wake)
    if "captured_ms" in curve and "replayed_ms" in curve:
        # the replay's own idle at the capture's settings stands for the capture's: the curves move by the
        # difference, so that the capture's measured idle keeps its place on them (ddlsim.simulation.idle_wake)
        delta = curve["captured_ms"] - curve["replayed_ms"]
        curve.update({cls: shifted(curve[cls], delta) for cls in CLASSES})
        captured = curve["replayed_ms"] * 1e6
    else:
        captured = captured_idle_ns(log, log.metadata, job=config.profile_job)
    if captured is None:
        raise ScenarioError(f"model.idle_wake: {profile} has no optimizer_step rows to measure the idle before an "
                            "iteration; remove model.idle_wake")
    optimizer_s = framework_overheads(log, log.metadata, tails=False, job=config.profile_job)["optimizer_s"]
    first = times_ns[0][0]
    share = optimizer_s * 1e9 / first if first > 0 else 0.0
    return engine_document(curve, captured, share, len(times_ns))
