"""Flow completion times (FCT) and slowdowns from an event log's flows table.

Works on any flows table (``--record-flows``): the job's own flows (tenant 0)
and background tenants' flows (tenant >= 1), which may start and end on
hosts that run no rank (``src`` / ``dst`` = -1, ``src_host`` / ``dst_host``
set) and may still be in flight when the run ends (``end_ns`` null).

Definitions
-----------

- **FCT** = ``end_ns - start_ns``: from the flow's first byte entering the
  network to its last byte delivered to the receiver. Unfinished flows have
  no FCT; they are counted, never averaged.
- **Ideal time** of a flow: its time alone on its path, from the run's
  network configuration (the event log's ``metadata["scenario"]["network"]``,
  or ``network=`` given explicitly). ``L`` is the path's one-way propagation
  latency: the scenario's ``latency`` on a star, within a leaf and for the
  hairpin of two ranks of one host without an intra-host fabric, twice it
  across leaves, ``intra_host_latency`` between ranks of one host with an
  ``intra_host_bandwidth``. ``R`` is the path's bottleneck rate: the host
  link rate, the leaf-spine links' ``bandwidth x hosts_per_leaf / (spines x
  oversubscription)`` across leaves if lower (``spray``: the leaf's
  aggregate uplink ``bandwidth x hosts_per_leaf / oversubscription``), the
  intra-host bandwidth within a host.

  - ``analytic`` and ``flow`` fidelity (and intra-host transfers at packet
    level, which do not become packets): ``ceil(bytes x 8e9 / R) + L``
    nanoseconds, the engine's own transmission time (rounded up to whole
    nanoseconds) plus the path latency. A flow alone on its path finishes in
    exactly this time, so its slowdown is exactly 1.
  - ``packet`` fidelity (``ideal="path"``, the default): the time the
    flow's frames take alone on the idle path with no window limit, which is
    what a flow within TCP's initial window achieves: with ``MSS = mtu -
    40`` (``- 52`` with ``tcp_timestamps``), ``H = mtu - MSS`` header bytes
    and ``n = max(1, ceil(bytes / MSS))`` segments, frames of ``s =
    frame(MSS + H)`` byte times and a last one of ``l = frame(last segment +
    H)``, where ``frame(p) = max(p, 46) + 38`` on Ethernet (header, FCS,
    preamble and inter-frame gap: a 1460-byte segment is 1538 byte times,
    an ACK 84) and ``p + 2`` on PPP; each frame serialised at each link
    (store and forward, whole picoseconds as the packet model's clock),
    pipelined: ``ceil(max over m of [sum_{k<=m} s/r_k + (n-2) max_{k<=m}
    s/r_k + sum_{k>=m} l/r_k]) + L`` (``r_k``: the path's link rates; on a
    path of equal rates ``R``: ``(W + (h-1) s) / R + L`` with ``W = (n-1) s
    + l`` the wire bytes and ``h`` the links). A flow within the initial
    window alone on its path has slowdown 1; a longer one also pays slow
    start's round trips, queues, losses and timeouts - what the slowdown
    measures.
  - ``packet`` fidelity, ``ideal="rtt"`` (the literature's normalisation,
    "serialisation at line rate plus base RTT"): ``ceil(W x 8e9 / R +
    RTT0)`` with ``RTT0 = 2 L + sum over the path's links of (s + frame(H))
    x 8 / link rate``, the round trip of one full segment and its ACK on the
    idle path (on a star ``2T + 2A + 2L``, the ``RTT0`` of
    docs/packet-model.md). FCT stops at the last byte's arrival, not at its
    ACK, so a short flow finishes in less than this (slowdown below 1).

- **Slowdown** = FCT / ideal time (NaN when unfinished or unknown).
- **Size classes**: ``small`` below 100 KB (bytes < 100,000), ``large``
  above 10 MB (bytes > 10,000,000), ``medium`` in between (exactly 100 KB
  and exactly 10 MB are medium); or ``buckets=k`` quantile buckets of the
  summarised flows' sizes (bucket ``qi`` holds the sizes in ``(e_{i-1},
  e_i]`` of the quantile edges, the first one from the smallest size).
- **Measurement window**: ``[run start + warmup, run end - cooldown]``, both
  ends included; a flow is summarised when it *starts* inside it (as the
  thesis does: 2 s warm-up and 2 s cool-down of a 12 s run). The run spans
  from the first row (event log or flow start; 0 in a simulation) to the
  last end of any row or finished flow, or the last flow start if later.
- **Percentiles**: numpy's default (linear interpolation between order
  statistics) over the finished flows of the group.

Public API: :func:`flow_table`, :func:`fct_summary`, :func:`fct_cdf`,
:func:`compare_fct`, :func:`compare_iteration_time`, :func:`interaction`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

SMALL_BELOW = 100_000
LARGE_ABOVE = 10_000_000
SIZE_CLASSES = ("small", "medium", "large")
STATISTICS = ("mean", "median", "p95", "p99")
_PERCENTILES = {"median": 50.0, "p95": 95.0, "p99": 99.0}

FLOW_COLUMNS = ["flow", "tenant", "band", "message", "src", "dst", "src_host", "dst_host", "bytes", "start_ns", "end_ns",
                "finished", "fct_ns", "ideal_ns", "slowdown", "size_class"]


# ---------------------------------------------------------------- the network's paths


@dataclass(frozen=True)
class PathModel:
    """What the ideal time needs of a run's network (see the module doc)."""

    fidelity: str
    bandwidth_bps: Fraction
    latency_ns: int
    topology: str = "star"
    hosts_per_leaf: int = 8
    spines: int = 2
    oversubscription: Fraction = Fraction(1)
    routing: str = "ecmp"
    intra_host_bandwidth_bps: Fraction | None = None
    intra_host_latency_ns: int = 0
    mtu: int = 1500
    framing: str = "ethernet"
    tcp_timestamps: bool = False

    @property
    def mss(self) -> int:
        return self.mtu - (52 if self.tcp_timestamps else 40)

    def frame(self, ip_bytes: int) -> int:
        """Byte times of one IP packet of `ip_bytes` on the wire."""
        return max(ip_bytes, 46) + 38 if self.framing == "ethernet" else ip_bytes + 2

    def fabric_bps(self) -> Fraction:
        """Capacity of one leaf-spine link (``spray``: of all a leaf's uplinks, as one flow sees them)."""
        one = self.bandwidth_bps * self.hosts_per_leaf / (self.spines * self.oversubscription)
        return one * self.spines if self.routing == "spray" else one

    def path(self, src_host: int, dst_host: int) -> tuple[str, list[Fraction], int]:
        """(kind, link rates, one-way latency ns) of the route between two hosts;
        kind: ``intra`` (ranks of one host on the intra-host fabric), ``hairpin``,
        ``rack`` (star or one leaf) or ``cross`` (across leaves)."""
        bw = self.bandwidth_bps
        if src_host == dst_host:
            if self.intra_host_bandwidth_bps is not None:
                return "intra", [self.intra_host_bandwidth_bps] * 2, self.intra_host_latency_ns
            return "hairpin", [bw, bw], self.latency_ns
        if self.topology == "leaf-spine" and src_host // self.hosts_per_leaf != dst_host // self.hosts_per_leaf:
            fabric = self.fabric_bps()
            return "cross", [bw, fabric, fabric, bw], 2 * self.latency_ns
        return "rack", [bw, bw], self.latency_ns

    def ideal_ns(self, size: int, src_host: int, dst_host: int, ideal: str = "path") -> int:
        """A flow's ideal time alone on its path, whole nanoseconds (module doc)."""
        kind, rates, latency = self.path(src_host, dst_host)
        rate = min(rates)
        if self.fidelity != "packet" or kind == "intra":
            return _ceil(Fraction(int(size) * 8 * 10**9) / rate) + latency
        mss, header = self.mss, self.mtu - self.mss
        full, last = divmod(int(size), mss)
        if ideal == "rtt":
            wire = full * self.frame(mss + header) + (self.frame(last + header) if last or not full else 0)
            rtt0 = 2 * latency + sum(Fraction((self.frame(mss + header) + self.frame(header)) * 8 * 10**9) / r for r in rates)
            return _ceil(Fraction(wire * 8 * 10**9) / rate + rtt0)
        if ideal != "path":
            raise ValueError(f"ideal={ideal!r}: choose 'path' or 'rtt'")
        # frames [s, ..., s, l] pipelined store-and-forward over the links, each serialised in whole picoseconds
        # (the packet model's clock): the last one's arrival is the longest monotone path through the
        # (frame, link) grid: frame 1 over links 1..m, frames 2..n-1 at the slowest of them, frame n over m..h
        n = max(1, full + (1 if last else 0))
        s = self.frame(mss + header)
        final = self.frame((last if last else (mss if full else 0)) + header)

        def ps(frame_bytes: int, r: Fraction) -> int:
            return _ceil(Fraction(frame_bytes * 8 * 10**12) / r)

        if n == 1:
            best = sum(ps(final, r) for r in rates)
        else:
            best = 0
            for m in range(1, len(rates) + 1):
                head = [ps(s, r) for r in rates[:m]]
                best = max(best, sum(head) + (n - 2) * max(head) + sum(ps(final, r) for r in rates[m - 1:]))
        return _ceil(Fraction(best, 1000)) + latency


    def ideal_ns_many(self, sizes: Any, src_host: int, dst_host: int, ideal: str = "path") -> np.ndarray:
        """:meth:`ideal_ns` of many sizes on the path between two hosts, vectorised
        (exact: Python integers in numpy object arrays where int64 could overflow)."""
        kind, rates, latency = self.path(src_host, dst_host)
        sizes = np.asarray(sizes, dtype=np.int64)
        rate = min(rates)
        if self.fidelity != "packet" or kind == "intra":
            return (_ceil_div(sizes.astype(object) * (8 * 10**9 * rate.denominator), rate.numerator) + latency).astype(np.int64)
        mss, header = self.mss, self.mtu - self.mss
        full, last = sizes // mss, sizes % mss
        n = np.maximum(1, full + (last > 0))
        payload = np.where(last > 0, last, np.where(full > 0, mss, 0)) + header
        final = np.maximum(payload, 46) + 38 if self.framing == "ethernet" else payload + 2
        s = self.frame(mss + header)
        if ideal == "rtt":
            wire = (full * s + np.where((last > 0) | (full == 0), final, 0)).astype(object)
            rtt0 = 2 * latency + sum(Fraction((s + self.frame(header)) * 8 * 10**9) / r for r in rates)
            numerator = wire * (8 * 10**9 * rate.denominator * rtt0.denominator) + rtt0.numerator * rate.numerator
            return _ceil_div(numerator, rate.numerator * rtt0.denominator).astype(np.int64)
        final_ps = [_ceil_div(final.astype(object) * (8 * 10**12 * r.denominator), r.numerator) for r in rates]
        best = sum(final_ps)  # one frame: over every link
        for m in range(1, len(rates) + 1):
            head = [_ceil(Fraction(s * 8 * 10**12) / r) for r in rates[:m]]
            candidate = sum(head) + (n.astype(object) - 2) * max(head) + sum(final_ps[m - 1:])
            best = np.where(n > 1, np.maximum(best, candidate) if m > 1 else candidate, best)
        return (_ceil_div(best, 1000) + latency).astype(np.int64)


def _ceil_div(numerator: Any, denominator: int) -> Any:
    return -((-numerator) // denominator)


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def path_model(source: Any) -> PathModel | None:
    """The :class:`PathModel` of an event log's metadata (its
    ``scenario.network``), of a scenario's ``network`` dict (as the scenario
    file or the metadata write it: ``bandwidth = "10Gbps"``, ``latency =
    "10us"``...), of an engine network document (``bandwidth_bps``,
    ``latency_ns``, ``topology = {"kind": ...}``), or a PathModel itself;
    None when it names no bandwidth."""
    if source is None or isinstance(source, PathModel):
        return source
    if not isinstance(source, Mapping):
        raise TypeError(f"network: expected a dict or a PathModel, got {type(source).__name__}")
    if "scenario" in source or "schema_version" in source:  # an event log's metadata
        source = (source.get("scenario") or {}).get("network") or {}
    from ..units import parse_bandwidth, parse_duration_ns

    def bps(key: str, exact_key: str) -> Fraction | None:
        value = source.get(exact_key, source.get(key))
        if value is None:
            return None
        return Fraction(float(value) if isinstance(value, (int, float)) else float(parse_bandwidth(value)))

    def ns(key: str, exact_key: str, default: int) -> int:
        value = source.get(exact_key, source.get(key))
        if value is None:
            return default
        return int(value) if isinstance(value, (int, float)) else int(parse_duration_ns(value))

    bandwidth = bps("bandwidth", "bandwidth_bps")
    if bandwidth is None:
        return None
    topology = source.get("topology", "star")
    extra: dict[str, Any] = {}
    if isinstance(topology, Mapping):  # the engine's document
        extra = dict(topology)
        topology = str(topology.get("kind", "star"))
    topology = "leaf-spine" if topology in ("leaf-spine", "leaf_spine") else "star"
    packet = source.get("packet") or {}
    return PathModel(
        fidelity=str(source.get("fidelity", "flow")),
        bandwidth_bps=bandwidth,
        latency_ns=ns("latency", "latency_ns", 0),
        topology=topology,
        hosts_per_leaf=int(extra.get("hosts_per_leaf", source.get("hosts_per_leaf", 8))),
        spines=int(extra.get("spines", source.get("spines", 2))),
        oversubscription=Fraction(float(extra.get("oversubscription", source.get("oversubscription", 1.0)))),
        routing=str(extra.get("routing", source.get("routing", "ecmp"))),
        intra_host_bandwidth_bps=bps("intra_host_bandwidth", "intra_host_bandwidth_bps"),
        intra_host_latency_ns=ns("intra_host_latency", "intra_host_latency_ns", 0),
        mtu=int(packet.get("mtu", 1500)),
        framing=str(packet.get("framing", "ethernet")),
        tcp_timestamps=bool(packet.get("tcp_timestamps", False)),
    )


# ---------------------------------------------------------------- per flow


def _event_log(source: Any):
    """(EventLog or None, flows pa.Table or None, run span (start, end) or None)
    of an EventLog, an Analysis (streamed too) or the path of an events file."""
    if isinstance(source, (str, Path)):
        from ..trace.parquet import read_event_log

        source = read_event_log(source, check_causality=False)
    log = getattr(source, "log", source)  # an Analysis
    flows = getattr(log, "flows", None)
    span = None
    log_file = getattr(source, "file", None)  # a StreamedAnalysis: its log holds one iteration
    if log_file is not None:
        if flows is None:
            from ..trace.parquet import read_side_table

            flows = read_side_table(log_file.path, "flows")
        pass1 = getattr(source, "pass1", None)
        windows = source._windows()[1] if hasattr(source, "_windows") else []
        if pass1 is not None and pass1.first_start is not None and len(windows):
            span = (int(pass1.first_start), int(np.max(windows)))
    return log, flows, span


def size_classes(sizes: Any) -> np.ndarray:
    """``small`` (< 100 KB), ``medium`` or ``large`` (> 10 MB) per size in bytes."""
    b = np.asarray(sizes, dtype=np.int64)
    return np.where(b < SMALL_BELOW, "small", np.where(b > LARGE_ABOVE, "large", "medium")).astype(object)


def flow_table(source: Any, network: Any = None, ideal: str = "path") -> pd.DataFrame:
    """One row per flow of ``source``'s flows table (an EventLog, an
    :class:`~ddlsim.analyze.Analysis` or an events file): its ends (ranks,
    -1 for a host-only end, and hosts), tenant, band, bytes, start, end
    (``<NA>`` when unfinished), ``finished``, ``fct_ns``, ``ideal_ns``,
    ``slowdown`` (module doc) and ``size_class``. ``network``: the network
    to take ideal times from (see :func:`path_model`); default the log's
    metadata. ``ideal``: ``"path"`` or, at packet level, ``"rtt"`` (module
    doc). Empty (same columns) when the log has no flows table.
    ``attrs``: ``run_start_ns``, ``run_end_ns``, ``network`` (the PathModel
    or None) and ``note`` when something could not be computed."""
    if ideal not in ("path", "rtt"):
        raise ValueError(f"ideal={ideal!r}: choose 'path' or 'rtt'")
    log, flows, span = _event_log(source)
    metadata = dict(getattr(log, "metadata", {}) or {})
    if network is not None:
        model = path_model(network)
    else:
        try:
            model = path_model(metadata)
        except (ValueError, TypeError, AttributeError):  # a captured log's free-form metadata
            model = None
    if flows is None or flows.num_rows == 0:
        frame = _empty_flows()
        frame.attrs.update({"run_start_ns": None, "run_end_ns": None, "network": model,
                            "note": "no flows table: simulate with --record-flows (record_flows = true)"})
        return frame
    names = set(flows.column_names)
    col = {name: flows.column(name).to_numpy() for name in
           ("flow", "tenant", "band", "message", "src", "dst", "bytes", "start_ns") if name in names}
    end_array = flows.column("end_ns")
    finished = ~end_array.is_null().to_numpy(zero_copy_only=False)
    end = end_array.fill_null(-1).to_numpy() if end_array.null_count else end_array.to_numpy()
    n = len(end)
    src_host = flows.column("src_host").to_numpy() if "src_host" in names else np.full(n, -1, dtype=np.int32)
    dst_host = flows.column("dst_host").to_numpy() if "dst_host" in names else np.full(n, -1, dtype=np.int32)
    src_host, dst_host = _fill_hosts(log, col["src"], src_host), _fill_hosts(log, col["dst"], dst_host)
    start = col["start_ns"].astype(np.int64)
    fct = np.where(finished, end - start, 0).astype(np.int64)
    ideal_ns = np.full(n, -1, dtype=np.int64)
    note = None
    if model is None:
        note = "ideal times and slowdowns need the run's network (bandwidth, latency): pass network= or a simulated log"
    else:
        # the ideal time depends on the size and the kind of path only: computed per kind, once per distinct size
        known = (src_host >= 0) & (dst_host >= 0)
        per_leaf = max(model.hosts_per_leaf, 1)
        cross = (model.topology == "leaf-spine") & (src_host // per_leaf != dst_host // per_leaf)
        kind = np.where(~known, 3, np.where(src_host == dst_host, 2, np.where(cross, 1, 0)))
        example = {0: (0, 1), 1: (0, per_leaf), 2: (0, 0)}  # a host pair of each kind (0: only if 2+ hosts a leaf)
        sizes = col["bytes"].astype(np.int64)
        for k, (a, b) in example.items():
            mask = kind == k
            if mask.any():
                unique, inverse = np.unique(sizes[mask], return_inverse=True)
                ideal_ns[mask] = model.ideal_ns_many(unique, a, b, ideal)[np.asarray(inverse).reshape(-1)]
    with np.errstate(divide="ignore", invalid="ignore"):
        slowdown = np.where(finished & (ideal_ns > 0), fct / np.where(ideal_ns > 0, ideal_ns, 1), np.nan)
    frame = pd.DataFrame({
        "flow": col["flow"].astype(np.int64),
        "tenant": col["tenant"].astype(np.int32),
        "band": col["band"].astype(np.int32),
        "message": col["message"].astype(np.int64),
        "src": col["src"].astype(np.int32),
        "dst": col["dst"].astype(np.int32),
        "src_host": src_host.astype(np.int32),
        "dst_host": dst_host.astype(np.int32),
        "bytes": col["bytes"].astype(np.int64),
        "start_ns": start,
        "end_ns": pd.array(np.where(finished, end, 0), dtype="Int64"),
        "finished": finished,
        "fct_ns": pd.array(fct, dtype="Int64"),
        "ideal_ns": pd.array(ideal_ns, dtype="Int64"),
        "slowdown": slowdown,
        "size_class": size_classes(col["bytes"]),
    })
    frame.loc[~finished, ["end_ns", "fct_ns"]] = pd.NA
    frame.loc[ideal_ns < 0, "ideal_ns"] = pd.NA
    if span is None:
        span = _run_span(log)
    starts = [int(start.min())] + ([span[0]] if span else [])
    ends = [int(start.max())] + ([int(end[finished].max())] if finished.any() else []) + ([span[1]] if span else [])
    frame.attrs.update({"run_start_ns": min(starts), "run_end_ns": max(ends), "network": model})
    if note:
        frame.attrs["note"] = note
    return frame


def _empty_flows() -> pd.DataFrame:
    types = {"finished": bool, "slowdown": float, "size_class": object, "end_ns": "Int64", "fct_ns": "Int64",
             "ideal_ns": "Int64"}
    return pd.DataFrame({c: pd.Series([], dtype=types.get(c, np.int64)) for c in FLOW_COLUMNS})


def _fill_hosts(log: Any, ranks: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """Hosts unknown (-1, files written before src_host / dst_host) from the ranks' hosts in the event log."""
    hosts = np.asarray(hosts, dtype=np.int32).copy()
    missing = (hosts < 0) & (ranks >= 0)
    if not missing.any():
        return hosts
    mapping: dict[int, int] = {}
    if log is not None and len(log):
        pairs = np.unique(np.stack([log.column("rank").astype(np.int64), log.column("host").astype(np.int64)]), axis=1)
        mapping = {int(r): int(h) for r, h in zip(*pairs)}
    hosts[missing] = [mapping.get(int(r), int(r)) for r in ranks[missing]]
    return hosts


def _run_span(log: Any) -> tuple[int, int] | None:
    if log is None or not len(log):
        return None
    start, end = log.table.column("start_ns").to_numpy(), log.table.column("end_ns").to_numpy()
    return int(start.min()), int(end.max())


# ---------------------------------------------------------------- summaries


def _flows_of(source: Any, network: Any = None, ideal: str = "path") -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    return flow_table(source, network, ideal)


def window_bounds(flows: pd.DataFrame, warmup_ns: int = 0, cooldown_ns: int = 0,
                  run_end_ns: int | None = None, run_start_ns: int | None = None) -> tuple[int, int]:
    """``(first, last)`` start times (both included) of the measurement window."""
    start = run_start_ns if run_start_ns is not None else flows.attrs.get("run_start_ns")
    end = run_end_ns if run_end_ns is not None else flows.attrs.get("run_end_ns")
    if start is None:
        start = int(flows["start_ns"].min()) if len(flows) else 0
    if end is None:
        end = int(flows["start_ns"].max()) if len(flows) else 0
    if warmup_ns < 0 or cooldown_ns < 0:
        raise ValueError(f"warm-up and cool-down must be >= 0, got {warmup_ns} and {cooldown_ns} ns")
    return int(start) + int(warmup_ns), int(end) - int(cooldown_ns)


def in_window(flows: pd.DataFrame, warmup_ns: int = 0, cooldown_ns: int = 0, run_end_ns: int | None = None,
              run_start_ns: int | None = None) -> pd.DataFrame:
    """The flows that start inside the measurement window (module doc)."""
    first, last = window_bounds(flows, warmup_ns, cooldown_ns, run_end_ns, run_start_ns)
    s = flows["start_ns"]
    out = flows[(s >= first) & (s <= last)]
    out.attrs = dict(flows.attrs)
    out.attrs["window_ns"] = (first, last)
    return out


def _classes(flows: pd.DataFrame, buckets: int | None, edges: Sequence[float] | None = None) -> tuple[np.ndarray, list[str]]:
    if buckets is None:
        return flows["size_class"].to_numpy(dtype=object), list(SIZE_CLASSES)
    if int(buckets) < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    k = int(buckets)
    labels = [f"q{i + 1}" for i in range(k)]
    sizes = flows["bytes"].to_numpy(dtype=np.int64)
    if edges is None:
        if not len(sizes):
            return np.empty(0, dtype=object), labels
        edges = bucket_edges(sizes, k)
    index = np.searchsorted(np.asarray(edges, dtype=float), sizes.astype(float), side="left")
    return np.asarray(labels, dtype=object)[index], labels


def bucket_edges(sizes: Any, buckets: int) -> np.ndarray:
    """The ``buckets - 1`` inner edges of ``buckets`` quantile buckets of ``sizes``."""
    return np.quantile(np.asarray(sizes, dtype=float), np.arange(1, int(buckets)) / int(buckets))


def _stats(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {s: float("nan") for s in STATISTICS}
    out = {"mean": float(np.mean(values))}
    for name, q in _PERCENTILES.items():
        out[name] = float(np.percentile(values, q))
    return out


def fct_summary(source: Any, *, warmup_ns: int = 0, cooldown_ns: int = 0, run_end_ns: int | None = None,
                run_start_ns: int | None = None, buckets: int | None = None, tenants: Sequence[int] | None = None,
                network: Any = None, ideal: str = "path", edges: Sequence[float] | None = None) -> pd.DataFrame:
    """Per tenant and size class (``all`` too): over the flows that start in
    the measurement window, ``flows`` (started), ``finished``, ``unfinished``,
    ``completion_ratio``, the size range, and mean / median / p95 / p99 of
    the FCT (microseconds: ``fct_mean_us``...) and of the slowdown
    (``slowdown_mean``...) over the finished ones. ``source``: a
    :func:`flow_table` frame, an EventLog, an Analysis or an events file.
    ``buckets``: ``k`` quantile buckets instead of the size classes (their
    ``k - 1`` inner ``edges`` computed from the summarised flows, or given).
    ``tenants``: only these (default: every tenant with flows). Every
    (tenant, class) pair is a row, with 0 flows and NaN statistics when
    empty. ``attrs["window_ns"]``: the window's (first, last) start time."""
    flows = _flows_of(source, network, ideal)
    window = in_window(flows, warmup_ns, cooldown_ns, run_end_ns, run_start_ns)
    classes, labels = _classes(window, buckets, edges)
    tenant_ids = sorted({int(t) for t in flows["tenant"]}) if tenants is None else [int(t) for t in tenants]
    tenant = window["tenant"].to_numpy()
    finished = window["finished"].to_numpy(dtype=bool)
    fct_us = window["fct_ns"].to_numpy(dtype=float, na_value=np.nan) / 1e3
    slowdown = window["slowdown"].to_numpy(dtype=float)
    sizes = window["bytes"].to_numpy(dtype=np.int64)
    rows = []
    for t in tenant_ids:
        for label in labels + ["all"]:
            mask = (tenant == t) & ((classes == label) if label != "all" else True)
            done = mask & finished
            row: dict[str, Any] = {"tenant": t, "size_class": label, "flows": int(mask.sum()), "finished": int(done.sum()),
                                   "unfinished": int((mask & ~finished).sum())}
            row["completion_ratio"] = row["finished"] / row["flows"] if row["flows"] else float("nan")
            row["min_bytes"] = int(sizes[mask].min()) if mask.any() else pd.NA
            row["max_bytes"] = int(sizes[mask].max()) if mask.any() else pd.NA
            row.update({f"fct_{k}_us": v for k, v in _stats(fct_us[done]).items()})
            good = done & np.isfinite(slowdown)
            row.update({f"slowdown_{k}": v for k, v in _stats(slowdown[good]).items()})
            rows.append(row)
    columns = (["tenant", "size_class", "flows", "finished", "unfinished", "completion_ratio", "min_bytes", "max_bytes"]
               + [f"fct_{k}_us" for k in STATISTICS] + [f"slowdown_{k}" for k in STATISTICS])
    out = pd.DataFrame(rows, columns=columns)
    for name in ("min_bytes", "max_bytes"):
        out[name] = out[name].astype("Int64")
    out.attrs["window_ns"] = window.attrs["window_ns"]
    if flows.attrs.get("note"):
        out.attrs["note"] = flows.attrs["note"]
    return out


def fct_cdf(source: Any, *, warmup_ns: int = 0, cooldown_ns: int = 0, run_end_ns: int | None = None,
            network: Any = None) -> pd.DataFrame:
    """Per tenant and size class, the empirical CDF of the finished flows'
    FCT in the window: ``tenant``, ``size_class``, ``fct_us``, ``fraction``
    (of that group's finished flows at or below it)."""
    flows = in_window(_flows_of(source, network), warmup_ns, cooldown_ns, run_end_ns)
    done = flows[flows["finished"]]
    parts = []
    for (tenant, label), group in done.groupby(["tenant", "size_class"], sort=True):
        v = np.sort(group["fct_ns"].to_numpy(dtype=float)) / 1e3
        parts.append(pd.DataFrame({"tenant": int(tenant), "size_class": label, "fct_us": v,
                                   "fraction": np.arange(1, len(v) + 1) / len(v)}))
    if not parts:
        return pd.DataFrame({"tenant": pd.Series([], dtype=np.int32), "size_class": pd.Series([], dtype=object),
                             "fct_us": pd.Series([], dtype=float), "fraction": pd.Series([], dtype=float)})
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------- with and without


def compare_fct(a: Any, b: Any, *, names: tuple[str, str] = ("a", "b"), warmup_ns: int = 0, cooldown_ns: int = 0,
                buckets: int | None = None, tenants: Sequence[int] | None = None, network: Any = None) -> pd.DataFrame:
    """The FCT summaries of two runs side by side, per tenant and size class:
    ``flows_a``, ``flows_b``, ``unfinished_a``/``_b``, every statistic
    ``_a``/``_b`` and its relative change ``_change = b / a - 1`` (e.g. a =
    the tenants alone, b = with the job: +0.25 means 25% slower with the
    job). ``names``: labels kept in ``attrs["names"]``. Default tenants: the
    background tenants (>= 1) of either run, or tenant 0 when neither has any."""
    fa, fb = _flows_of(a, network), _flows_of(b, network)
    if tenants is None:
        present = sorted({int(t) for t in fa["tenant"]} | {int(t) for t in fb["tenant"]})
        tenants = [t for t in present if t >= 1] or [t for t in present if t == 0]
    edges = None
    if buckets is not None:  # the same buckets for both runs: from the pooled sizes of both windows
        pooled = pd.concat([in_window(fa, warmup_ns, cooldown_ns)["bytes"], in_window(fb, warmup_ns, cooldown_ns)["bytes"]])
        edges = bucket_edges(pooled, buckets) if len(pooled) else np.zeros(int(buckets) - 1)
    options = {"warmup_ns": warmup_ns, "cooldown_ns": cooldown_ns, "buckets": buckets, "tenants": tenants, "edges": edges}
    sa, sb = fct_summary(fa, **options), fct_summary(fb, **options)
    key = ["tenant", "size_class"]
    merged = sa.merge(sb, on=key, suffixes=("_a", "_b"), how="left", sort=False)  # the same rows in both
    columns = key + ["flows_a", "flows_b", "unfinished_a", "unfinished_b"]
    for stat in [f"fct_{k}_us" for k in STATISTICS] + [f"slowdown_{k}" for k in STATISTICS]:
        with np.errstate(divide="ignore", invalid="ignore"):
            merged[f"{stat}_change"] = merged[f"{stat}_b"] / merged[f"{stat}_a"] - 1
        columns += [f"{stat}_a", f"{stat}_b", f"{stat}_change"]
    out = merged[columns].reset_index(drop=True)
    out.attrs["names"] = tuple(names)
    return out


def _iteration_time_s(source: Any) -> float:
    from .breakdown import iteration_arrays, iteration_mean

    log = getattr(source, "log", source)
    if isinstance(log, (str, Path)):
        from ..trace.parquet import read_event_log

        log = read_event_log(log, check_causality=False)
    if not len(log) or not (log.column("iteration") >= 0).any():
        return float("nan")
    return float(iteration_mean(iteration_arrays(log), log.metadata)["mean_s"])


def compare_iteration_time(with_tenants: Any, without_tenants: Any) -> pd.DataFrame:
    """The job's mean iteration time (the definition ``ddlsim analyze``
    prints) with and without the background tenants: one row with
    ``with_s``, ``without_s``, ``diff_s`` and ``change`` (with / without - 1)."""
    a, b = _iteration_time_s(with_tenants), _iteration_time_s(without_tenants)
    change = a / b - 1 if b and math.isfinite(b) else float("nan")
    return pd.DataFrame([{"item": "iteration_time", "with_s": a, "without_s": b, "diff_s": a - b, "change": change}])


def interaction(both: Any, *, job_alone: Any = None, tenants_alone: Any = None, warmup_ns: int = 0,
                cooldown_ns: int = 0, buckets: int | None = None) -> dict[str, pd.DataFrame]:
    """The two sides of sharing a fabric, from a run with the job and its
    tenants (``both``) and the runs of each alone: ``"job"`` - the job's
    iteration time with vs without the tenants (:func:`compare_iteration_time`,
    needs ``job_alone``); ``"tenants"`` - the tenants' FCT summary without
    (a) vs with (b) the job (:func:`compare_fct`, needs ``tenants_alone``);
    ``"fct"`` - the FCT summary of ``both``."""
    out = {"fct": fct_summary(both, warmup_ns=warmup_ns, cooldown_ns=cooldown_ns, buckets=buckets)}
    if job_alone is not None:
        out["job"] = compare_iteration_time(both, job_alone)
    if tenants_alone is not None:
        out["tenants"] = compare_fct(tenants_alone, both, names=("tenants alone", "with the job"), warmup_ns=warmup_ns,
                                     cooldown_ns=cooldown_ns, buckets=buckets)
    return out
