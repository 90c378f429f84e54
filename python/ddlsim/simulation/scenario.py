"""Scenarios: what to simulate (workload + strategy + network), validated.

A scenario is a TOML file or a dict with the same shape; every field has a
default that serves the common case (ResNet-50, 8 workers, ring all-reduce,
10 Gbit/s, 10 us, flow-level star). Errors name the file and field and say
the fix. Quantities follow :mod:`ddlsim.units` (bandwidth and durations need
a unit; ``GB/s`` is bytes, ``Gbps`` bits).

The strategy is a tagged section::

    [strategy]
    kind = "ring"                # all-reduce
    algorithm = "ring"           # "ring" | "halving-doubling" | "recursive-doubling" | "binary-tree"
                                 # | "double-binary-tree" | "direct" | "butterfly" | "hierarchical-ring"
                                 # (the engine's list: ddlsim.simulation.algorithms.names())
    chunk_bytes = 0              # ring: cut each tensor into messages of at most this size (0: off)
    gamma_ns_per_byte = 0.0      # reduction cost: each reduce-phase receipt takes bytes x gamma
    stream_policy = "fifo"       # "fifo" | "priority" (lowest layer first)
    preemption = "none"          # "none" | "chunk" (between steps) | "message" (P3: between chunk_bytes slices);
                                 # needs stream_policy = "priority"
    partition_bytes = "4MB"      # ByteScheduler: cut each group into all-reduces of at most this size (0: off)
    credit_bytes = "16MB"        # ByteScheduler: start the next all-reduce while fewer bytes run (0: one at a time)
    grouping = {kind = "ddp", bucket_cap_mb = 25}   # which gradients travel together

    [strategy]
    kind = "ps"                  # parameter server
    servers = 4
    placement = "size-balanced"  # "round-robin" | "size-balanced" | "split" (every tensor over all servers)
    update_bandwidth = "20GB/s"  # bytes/s
    gamma_ns_per_byte = 0.0      # server reduction cost: + (N-1) x bytes x gamma
    header_bytes = 0
    chunk_bytes = 0              # message pipelining: messages of at most this size (0: off)
    distribution = "immediate"   # "immediate" | "round-robin" | "block" (one send at a time per server)
    asynchronous = false         # no cross-worker barrier; staleness = s bounds how far ahead
    server_cost = {a = "0s", b = "0s"}   # per-request server cost a + b x workers, requests queue FIFO per server
    client_cost = {issue = "0s", receive = "0s"}   # worker's own cost per request issued / response handled (+ _ns_per_byte, wakeup)
    message_latency = {iterations = [["0us", "2ms"], ["1ms", "1ms"]]}   # messages' own transport times beyond
                                 # network.latency, per measured iteration (+ keys: message for message)
    in_network = "none"          # "none" | "multicast" | "aggregation" | "multiagg" (switch aggregation + multicast)
    switch_memory = "10MB"       # aggregation memory of the switch (omit: unlimited)
    stream_policy = "fifo"
    preemption = "none"

``grouping`` (any strategy) is a table with a ``kind`` or a string
(``"ddp"``, ``"ddp:bucket_cap_mb=50"``): ``per-tensor`` (default, WFBP),
``synceasgd``, ``mg-wfbp`` (``method`` = ``"optimal"`` | ``"algorithm1"``;
ring only), ``fusion`` (Horovod: ``threshold`` = "64MiB",
``cycle_time`` = "5ms"), ``thesis-fusion`` (``fusion_buffer_size``),
``ddp`` (``bucket_cap_mb`` = 25), ``fixed`` (``size``), ``groups``
(``groups`` = [["tensor", ...], ...]). See
:mod:`ddlsim.simulation.grouping`.

The old form (top-level ``strategy = "ps"`` plus a ``[ps]`` section) is still
read: it is migrated to the tagged section and a note saying what to write
instead is left in :attr:`Scenario.migration_notes`.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ..errors import ScenarioError
from ..inputs import input_file
from ..units import format_bytes, parse_bandwidth, parse_duration_ns, parse_size_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _algorithm_names() -> tuple[str, ...]:
    from .algorithms import names

    return names()


def _check(parse):
    def check(v):
        parse(v)  # raises ValueError with the input and the fix
        return v

    return check


# Quantities are stored as written ("10Gbps"); read them through the
# `*_bps` / `*_ns` / `*_bytes` properties.
Bandwidth = Annotated[Union[str, int, float], AfterValidator(_check(parse_bandwidth))]
Duration = Annotated[Union[str, int, float], AfterValidator(_check(parse_duration_ns))]
Size = Annotated[Union[str, int, float], AfterValidator(_check(parse_size_bytes))]
# A whole number of bytes stored as an int: written as a number or as a size
# with a unit ("4MB", "1MiB"), read by the same parser as `Size`.
ByteCount = Annotated[int, BeforeValidator(lambda v: parse_size_bytes(v) if isinstance(v, str) else v)]
# Kept for callers that imported it.
Quantity = Union[str, float, int]

StreamPolicy = Literal["fifo", "priority"]
Preemption = Literal["none", "chunk", "message"]


def _lowercase_choices(model: type[BaseModel], data: Any) -> Any:
    """Choice values in any case (`PS`, `Flow`, `Leaf-Spine`), as model
    names are: strings given for fields whose type is a Literal of
    lowercase names are lowercased before validation."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        value = out.get(name)
        annotation = field.annotation
        if get_origin(annotation) is Optional or get_origin(annotation) is Union:
            annotation = next((a for a in get_args(annotation) if get_origin(a) is Literal), annotation)
        if isinstance(value, str) and get_origin(annotation) is Literal:
            choices = get_args(annotation)
            if all(isinstance(c, str) and c == c.lower() for c in choices):
                out[name] = value.strip().lower()
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _any_case(cls, data: Any) -> Any:
        return _lowercase_choices(cls, data)


# ----------------------------------------------------------------- network

# Options that only mean something on a leaf-spine fabric, with their defaults.
LEAF_SPINE_ONLY = {"hosts_per_leaf": 8, "spines": 2, "oversubscription": 1.0, "routing": "ecmp", "rack_placement": "packed"}


class PacketConfig(_Strict):
    """Packet-level network model (fidelity = "packet"): links, queues and
    TCP. Defaults follow Linux (docs/packet-model.md); the engine reads them
    as the "packet" object of its network description."""

    mtu: int = Field(1500, ge=576, le=9000)
    # "ethernet": preamble, header, FCS and inter-frame gap (+38 byte times, 64-byte minimum frame);
    # "ppp": +2 bytes (ns-3 point-to-point links)
    framing: Literal["ethernet", "ppp"] = "ethernet"
    # MSS = mtu - 40 (1460), or mtu - 52 (1448) with the TCP timestamp option
    tcp_timestamps: bool = False
    transport: Literal["newreno", "dctcp"] = "newreno"
    # strict-priority bands per port (Linux pfifo_fast: 3)
    bands: int = Field(3, ge=1, le=8)
    # drop-tail limit, in queue_limit_unit, per band or for the whole port (queue_scope)
    queue_limit: int = Field(1000, ge=1, le=2**40)
    queue_limit_unit: Literal["packets", "bytes"] = "packets"
    queue_scope: Literal["band", "port"] = "band"
    # ECN marking threshold K in packets (DCTCP needs it; 65 is the usual choice at 10 Gbit/s); None: no marking
    ecn_threshold: Optional[int] = Field(None, ge=0, le=2**31)
    initial_window: int = Field(10, ge=1, le=100_000)
    rto_min: Duration = "200ms"
    rto_initial: Duration = "1s"
    delayed_ack: bool = False
    delayed_ack_timeout: Duration = "40ms"
    receive_window: ByteCount = Field(6291456, ge=1, le=2**40)
    # Linux: cwnd = min(cwnd, initial window) after an idle period longer than the RTO; ns-3: false
    restart_after_idle: bool = True
    # false: one connection per (source, destination, band), reused; true: one per message
    connection_per_message: bool = False
    dctcp_g: float = Field(0.0625, gt=0, le=1, allow_inf_nan=False)
    # None: no queues table; else sample every port and band at this period (a row only when it changed)
    queue_sample: Optional[Duration] = None
    queue_sample_cap: int = Field(1_000_000, ge=1, le=10**10)

    @field_validator("rto_min", "rto_initial", "delayed_ack_timeout", "queue_sample")
    @classmethod
    def _positive_duration(cls, v, info):
        if v is not None and parse_duration_ns(v) <= 0:
            raise ValueError(f"{info.field_name} must be longer than 0, got {v!r}; write e.g. \"200ms\"")
        if info.field_name in ("rto_min", "rto_initial") and parse_duration_ns(v) > 60 * 10**9:
            raise ValueError(f"{info.field_name} must be at most 60s (the engine's bound on a retransmission timeout), "
                             f"got {v!r}; write e.g. \"200ms\"")
        return v

    @property
    def rto_min_ns(self) -> int:
        return parse_duration_ns(self.rto_min)

    @property
    def rto_initial_ns(self) -> int:
        return parse_duration_ns(self.rto_initial)

    @property
    def delayed_ack_timeout_ns(self) -> int:
        return parse_duration_ns(self.delayed_ack_timeout)

    @property
    def queue_sample_ns(self) -> Optional[int]:
        return None if self.queue_sample is None else parse_duration_ns(self.queue_sample)

    @property
    def mss(self) -> int:
        """TCP payload bytes per segment."""
        return self.mtu - (52 if self.tcp_timestamps else 40)


class NetworkConfig(_Strict):
    # "analytic": alpha-beta; "flow": max-min fair flows; "packet": queues, packets and TCP ([network.packet])
    fidelity: Literal["analytic", "flow", "packet"] = "flow"
    bandwidth: Bandwidth = "10Gbps"
    latency: Duration = "10us"
    topology: Literal["star", "leaf-spine"] = "star"
    hosts_per_leaf: int = Field(8, ge=1, le=65536)
    spines: int = Field(2, ge=1, le=4096)
    oversubscription: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False)
    # ecmp: one hashed path per flow (today's behaviour); spray: per-packet over all spines.
    routing: Literal["ecmp", "spray"] = "ecmp"
    # packed: consecutive hosts fill a rack; spread: hosts round-robin over racks.
    rack_placement: Literal["packed", "spread"] = "packed"
    ranks_per_host: int = Field(1, ge=1, le=1024)
    # Between ranks of one host: NVLink-class default (V100 NVLink2 aggregate).
    intra_host_bandwidth: Bandwidth = "300GB/s"
    intra_host_latency: Duration = "1us"
    # PS servers on their own hosts after the workers', or on the workers' hosts.
    server_hosts: Literal["separate", "colocated"] = "separate"
    # Gradient transfers carry their priority into strict-priority network bands.
    priority_bands: bool = False
    # Band of all the job's transfers (0 = highest; Linux pfifo_fast has 0-2): puts the whole job beside or below
    # background tenants ([[tenant]] band). With priority_bands, added to each layer's band (capped at 7).
    job_band: int = Field(0, ge=0, le=7)
    # "fixed": every transfer in job_band; "adaptive": each gradient group in adaptive_low_band when its slack
    # (time before the next forward needs it) is at least adaptive_stretch x its all-reduce time, else in job_band
    # (docs/adaptive-priority.md).
    band_policy: Literal["fixed", "adaptive"] = "fixed"
    adaptive_low_band: int = Field(2, ge=0, le=7)
    adaptive_stretch: float = Field(1.0, ge=0, le=1000, allow_inf_nan=False)
    # slack kept back for one stall; None: packet.rto_min at packet level, 0 otherwise
    adaptive_reserve: Optional[Duration] = None
    # the plan's all-reduce times are the idle-network ones times this (the tenants' slowdown in job_band)
    adaptive_contention: float = Field(1.0, ge=1, le=1000, allow_inf_nan=False)
    # One row per network flow (FCT, bytes, band, tenant) in flows.parquet.
    record_flows: bool = False
    # "steps": every all-reduce step goes through the network model;
    # "closed-form": one event per rank per collective from the algorithm's
    # alpha-beta cost (analytic fidelity only; exact when transfers never
    # contend and chunks divide evenly, see collective/closed_form.rs).
    collective_model: Literal["steps", "closed-form"] = "steps"
    # Packet-level options ([network.packet]); only with fidelity = "packet".
    packet: Optional[PacketConfig] = None
    # Hosts in the fabric, at least those the ranks use; the others run no rank and
    # only send and receive background-tenant flows ([[tenant]]). None: the ranks' hosts.
    hosts: Optional[int] = Field(None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _packet_options(self) -> "NetworkConfig":
        if self.packet is not None and self.fidelity != "packet":
            raise ValueError(
                f"network.packet configures the packet-level model, but network.fidelity is {self.fidelity!r}; "
                "set fidelity = \"packet\" or remove the network.packet options"
            )
        if self.fidelity != "packet":
            return self
        if self.packet is not None and self.packet.transport == "dctcp" and self.packet.ecn_threshold is None:
            raise ValueError(
                'network.packet.transport = "dctcp" reacts to ECN marks, but network.packet.ecn_threshold is not set; '
                "set ecn_threshold (K in packets, e.g. 65 at 10 Gbit/s) or transport = \"newreno\""
            )
        if self.routing == "spray":
            raise ValueError(
                "network.routing = \"spray\" is not modelled at packet level (per-packet spraying reorders TCP segments); "
                "set routing = \"ecmp\" or fidelity = \"flow\""
            )
        return self

    @property
    def packet_options(self) -> PacketConfig:
        """The packet-level options, the defaults when [network.packet] is not given."""
        return self.packet if self.packet is not None else PacketConfig()

    @model_validator(mode="after")
    def _closed_form_needs_analytic(self) -> "NetworkConfig":
        if self.collective_model == "closed-form" and self.fidelity != "analytic":
            raise ValueError(
                f"network.collective_model = \"closed-form\" needs fidelity = \"analytic\" (got {self.fidelity!r}): "
                f"{self.fidelity}-level contention has no closed form; set fidelity = \"analytic\" or collective_model = \"steps\""
            )
        return self

    @model_validator(mode="after")
    def _leaf_spine_only(self) -> "NetworkConfig":
        if self.topology == "star":
            for name, default in LEAF_SPINE_ONLY.items():
                value = getattr(self, name)
                if value != default:
                    raise ValueError(
                        f"network.{name} = {value!r} only applies to topology = \"leaf-spine\", but network.topology is "
                        f"\"star\"; set topology = \"leaf-spine\" or remove {name}"
                    )
        return self

    @property
    def bandwidth_bps(self) -> float:
        """Host link bandwidth in bit/s."""
        return parse_bandwidth(self.bandwidth)

    @property
    def latency_ns(self) -> int:
        return parse_duration_ns(self.latency)

    @property
    def intra_host_bandwidth_bps(self) -> float:
        return parse_bandwidth(self.intra_host_bandwidth)

    @property
    def intra_host_latency_ns(self) -> int:
        return parse_duration_ns(self.intra_host_latency)


# ----------------------------------------------------------------- stragglers


class StragglerConfig(_Strict):
    """A straggler ([[straggler]], docs/stragglers.md): worker `rank` computes
    `factor` times as long every iteration (persistent), or every worker, in
    every iteration, computes `factor` times as long with probability
    `probability` (transient, seeded). Give `rank` or `probability`, not both."""

    rank: Optional[int] = Field(None, ge=0)
    probability: Optional[float] = Field(None, ge=0, le=1, allow_inf_nan=False)
    factor: float = Field(gt=0, le=1e6, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_kind(self) -> "StragglerConfig":
        if (self.rank is None) == (self.probability is None):
            raise ValueError("a [[straggler]] names either rank (slower every iteration) or probability (any rank, "
                             "per iteration), not both and not neither; e.g. rank = 3, factor = 1.5")
        return self


# ----------------------------------------------------------------- tenants


class TenantConfig(_Strict):
    """A background tenant ([[tenant]]): open-loop Poisson flow arrivals
    between hosts, each flow's size drawn from an empirical CDF (see
    docs/tenants.md and :mod:`ddlsim.workload.flow_sizes`). The load is
    given per SENDING HOST, as a fraction of its link rate (`load`) or in
    flows per second (`flows_per_second_per_host`)."""

    name: Optional[str] = None
    # "websearch" (DCTCP) | "datamining" (VL2) | the path of a CSV file: bytes,cumulative fraction
    sizes: str = "websearch"
    # per sending host: a fraction of its link rate (mean inter-arrival = mean size x 8 / (load x rate)) ...
    load: Optional[float] = None
    # ... or flows per second (the thesis' unit); give one of the two
    flows_per_second_per_host: Optional[float] = Field(None, gt=0, le=1e9, allow_inf_nan=False)
    band: int = Field(0, ge=0, le=7)
    # None: the scenario's seed for the first tenant, seed + k - 1 for the k-th
    seed: Optional[int] = Field(None, ge=0, lt=2**63)
    # [[src_host, dst_host], ...]: flows only between these; None: random pairs among `hosts`
    pairs: Optional[list[tuple[int, int]]] = None
    # hosts that send and receive (None: every host of the fabric)
    hosts: Optional[list[int]] = None
    start: Duration = "0s"
    # arrivals stop here; None: when the job's last operation ends
    stop: Optional[Duration] = None

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v: str) -> str:
        from ..workload.flow_sizes import builtin_name, check_sizes_name

        check_sizes_name(v)
        return builtin_name(v) or v

    @field_validator("load")
    @classmethod
    def _load(cls, v):
        if v is not None and not (0 < v <= 1):
            raise ValueError(f"load = {v!r} is a fraction of the sending host's link rate: give 0 < load <= 1 (e.g. 0.3), "
                             "or flows_per_second_per_host for a rate")
        return v

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, v):
        if v is None:
            return v
        if not v:
            raise ValueError("pairs is empty; list [src_host, dst_host] pairs, or remove pairs for random pairs")
        for src, dst in v:
            if src < 0 or dst < 0:
                raise ValueError(f"pair [{src}, {dst}]: host ids start at 0")
            if src == dst:
                raise ValueError(f"pair [{src}, {dst}] sends from a host to itself; give two different hosts")
        return v

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v):
        if v is None:
            return v
        if len(set(v)) < 2:
            raise ValueError(f"hosts = {v!r}: flows need at least two different hosts")
        if min(v) < 0:
            raise ValueError(f"hosts = {v!r}: host ids start at 0")
        if len(set(v)) != len(v):
            raise ValueError(f"hosts = {v!r} lists a host twice; list each once")
        return v

    @model_validator(mode="after")
    def _one_load(self) -> "TenantConfig":
        given = [f for f in ("load", "flows_per_second_per_host") if getattr(self, f) is not None]
        if len(given) != 1:
            what = "both" if given else "neither"
            raise ValueError(
                f"tenant load: give exactly one of load (a fraction of the sending host's link rate, e.g. 0.3) and "
                f"flows_per_second_per_host (e.g. 23), got {what}"
            )
        if self.pairs is not None and self.hosts is not None:
            raise ValueError("tenant pairs and hosts both choose who talks to whom; keep one")
        if self.stop is not None and parse_duration_ns(self.stop) <= self.start_ns:
            raise ValueError(f"tenant stop = {self.stop!r} is not after start = {self.start!r}; arrivals stop after they start")
        return self

    @property
    def start_ns(self) -> int:
        return parse_duration_ns(self.start)

    @property
    def stop_ns(self) -> Optional[int]:
        return None if self.stop is None else parse_duration_ns(self.stop)


# ----------------------------------------------------------------- jobs


class JobConfig(_Strict):
    """A training job sharing the fabric with others ([[job]]; docs/jobs.md). Every key left out takes the
    scenario's own value (sections such as model and strategy are replaced whole, not merged). The jobs are
    expanded and placed by :mod:`ddlsim.simulation.jobs`."""

    name: Optional[str] = None
    model: Optional[dict[str, Any]] = None
    workers: Optional[int] = Field(None, ge=1, le=65536)
    # a [strategy] table (kind = "ring" | "ps", ...) or just its kind
    strategy: Optional[Union[str, dict[str, Any]]] = None
    iterations: Optional[int] = Field(None, ge=1, le=1_000_000)
    seed: Optional[int] = Field(None, ge=0, lt=2**63)
    jitter: Optional[float] = Field(None, ge=0, le=1)
    barrier: Optional[bool] = None
    stagger: Optional[Duration] = None
    stagger_mode: Optional[Literal["fixed", "random"]] = None
    # when the job's first iteration may start (simulated time)
    start: Duration = "0s"
    # network priority band of all the job's transfers (0 = highest); None: network.job_band
    band: Optional[int] = Field(None, ge=0, le=7)
    # "packed" (lowest free hosts), "spread" (round-robin over leaves), "random" (seeded), or a list of hosts
    placement: Union[Literal["packed", "spread", "random"], list[int]] = "packed"
    # seed of "random" placement; None: the scenario's seed + the job's index
    placement_seed: Optional[int] = Field(None, ge=0, lt=2**63)

    @field_validator("placement", mode="before")
    @classmethod
    def _placement_case(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("placement")
    @classmethod
    def _hosts(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("placement = [] names no host; list the job's hosts or use \"packed\"")
            if min(v) < 0:
                raise ValueError(f"placement = {v!r}: host ids start at 0")
            if len(set(v)) != len(v):
                raise ValueError(f"placement = {v!r} lists a host twice; list each once")
        return v

    @property
    def start_ns(self) -> int:
        return parse_duration_ns(self.start)


# Keys of the --background form (`websearch:load=0.3,band=0`) and the fields they set.
BACKGROUND_KEYS = {"load": "load", "flows_per_host": "flows_per_second_per_host",
                   "flows_per_second_per_host": "flows_per_second_per_host", "band": "band", "seed": "seed",
                   "start": "start", "stop": "stop", "name": "name"}


def parse_background(spec: Any) -> Any:
    """A tenant given in the command-line form, as a [[tenant]] table:
    ``SIZES:key=value,...`` with SIZES = ``websearch`` | ``datamining`` |
    ``cdf=PATH`` (a CSV file; the path may not hold ':') and keys ``load``,
    ``flows_per_host`` (flows per second per sending host), ``band``,
    ``seed``, ``start``, ``stop``, ``name``. Tables pass unchanged; raises
    ValueError naming the part at fault."""
    if not isinstance(spec, str):
        return spec
    text = spec.strip()
    sizes, _, rest = text.partition(":")
    sizes = sizes.strip()
    if sizes.lower().startswith("cdf="):
        sizes = sizes[4:].strip()
        if not sizes:
            raise ValueError(f"{spec!r}: cdf= needs the path of a CSV file, e.g. cdf=sizes.csv:load=0.2")
    elif not sizes:
        raise ValueError(f"{spec!r}: start with the flow sizes: websearch, datamining or cdf=PATH, e.g. websearch:load=0.3")
    table: dict[str, Any] = {"sizes": sizes}
    for item in _option_items(rest, f"{spec!r}: "):
        key, eq, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq or not value.strip():
            raise ValueError(f"{spec!r}: cannot read {item!r}; write key=value, e.g. websearch:load=0.3,band=0")
        if key not in BACKGROUND_KEYS:
            close = difflib.get_close_matches(key, list(BACKGROUND_KEYS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{spec!r}: unknown key {key!r}; {hint}keys: {', '.join(BACKGROUND_KEYS)}")
        field = BACKGROUND_KEYS[key]
        if field in table:
            raise ValueError(f"{spec!r}: {key} is given twice; give it once")
        value = value.strip()
        if field in ("load", "flows_per_second_per_host", "band", "seed"):
            try:
                number = float(value) if field in ("load", "flows_per_second_per_host") else int(value)
            except ValueError:
                kind = "a number" if field in ("load", "flows_per_second_per_host") else "a whole number"
                raise ValueError(f"{spec!r}: {key} = {value!r} is not {kind}") from None
            table[field] = number
        else:
            table[field] = value
    return table


# ----------------------------------------------------------------- workload


class SyntheticConfig(_Strict):
    # "default": ddlsim's generator; "thesis-simulator": the thesis author's
    # simulator (ddlsim.workload.synthetic.thesis_simulator_model)
    profile: Literal["default", "thesis-simulator"] = "default"
    layers: int = Field(100, ge=1, le=1_000_000)
    model_size: Size = "100MB"
    compute: Duration = "900ms"
    forward_share: float = Field(1 / 3, gt=0, lt=1)
    first_to_last_forward: float = Field(2.0, gt=0, le=1e6, allow_inf_nan=False)
    size_distribution: str = "thesis"

    @model_validator(mode="after")
    def _profile_options(self) -> "SyntheticConfig":
        if self.profile == "thesis-simulator":
            ignored = [f for f in ("first_to_last_forward", "size_distribution") if f in self.model_fields_set]
            if ignored:
                raise ValueError(
                    f"model.synthetic.{ignored[0]} does not apply to profile = \"thesis-simulator\" (its times and "
                    f"sizes are fixed by the thesis' simulator); remove {ignored[0]} or use profile = \"default\""
                )
        return self

    @field_validator("model_size")
    @classmethod
    def _size(cls, v):
        if parse_size_bytes(v) <= 0:
            raise ValueError(f"model_size must be positive, got {v!r}; write e.g. \"100MB\"")
        return v


class CustomLayer(_Strict):
    name: str
    params: int = Field(ge=0, le=10**15, description="number of parameters (elements)")
    fwd_ms: float = Field(ge=0, le=1e9, allow_inf_nan=False)
    bwd_ms: float = Field(ge=0, le=1e9, allow_inf_nan=False)


class ModelConfig(_Strict):
    name: str = "resnet50"
    batch_size: int = Field(32, ge=1)
    device: str = "V100"
    # fp32 (CUDA cores), tf32 (fp32 tensors on tensor cores), fp16 / bf16 (autocast); docs/compute-model.md
    precision: Literal["fp32", "tf32", "fp16", "bf16"] = "fp32"
    # roofline: per-kernel roofline with host launch costs (docs/compute-model.md); flops: FLOPs / (peak x efficiency)
    compute: Literal["roofline", "flops"] = "roofline"
    efficiency: float = Field(0.5, gt=0, le=1)
    profile: Optional[str] = None
    # a model that is not in the zoo: the DDP capture whose recorded layers and parameters it is (your own script's
    # under ddlsim.capture.attach; ddlsim.workload.captured). ddlsim replay of such a capture sets it, and the replay
    # of a log made so keeps it, as profile then names that log
    layers_from: Optional[str] = None
    # with an event-log profile: "median" (every rank the median layer times) or "sampled" (each rank and
    # iteration draws a whole captured (rank, iteration) vector of layer times; docs/replay-at-scale.md)
    rank_times: Literal["median", "sampled"] = "median"
    # with an event-log profile of several jobs ([[job]]): only this job's rows (the log's `job` column) give the
    # times; None: every worker row (docs/jobs.md, "Replaying a jobs run")
    profile_job: Optional[int] = Field(None, ge=0)
    # with a captured event-log profile: add the capture's framework gaps between layers and its optimizer
    # step to the layer times (ddlsim.simulation.overheads; replay of a capture turns it on)
    overheads: bool = False
    synthetic: Optional[SyntheticConfig] = None
    layers: Optional[list[CustomLayer]] = None
    dtype_bytes: int = Field(4, ge=1)
    # faster compute (§8.6): layers whose type starts with one of these kinds run this many times faster
    compute_speedup: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    speedup_kinds: list[str] = Field(default_factory=lambda: ["Conv"], min_length=1)
    # synthetic growth (§8.5): add grow_count Inception-v3 modules: "inception-35x35x288" (compute)
    # or "inception-17x17x768" (network)
    grow_module: Optional[Literal["inception-35x35x288", "inception-17x17x768", "compute", "network"]] = None
    grow_count: int = Field(0, ge=0, le=100_000)
    # with a captured DDP profile: compute after a wait, the idle curves (step, forward, backward: [idle ms, ratio to
    # no wait] points) that scale each iteration's compute by the replay's idle before it over the capture's
    # (ddlsim.simulation.idle_wake; ddlsim replay sets it from the capture's curve or --idle-curve)
    idle_wake: Optional[dict[str, Any]] = None

    @field_validator("idle_wake")
    @classmethod
    def _idle_wake(cls, v):
        if v is None:
            return v
        from .idle_wake import check_curve

        return check_curve(v, "model.idle_wake")

    @model_serializer(mode="wrap")
    def _without_idle_wake(self, handler):
        # a scenario without idle curves (or a rebuilt model) dumps as before the fields existed (logs' recorded
        # scenarios alike)
        data = handler(self)
        for key in ("idle_wake", "layers_from"):
            if isinstance(data, dict) and key in data and data[key] is None:
                del data[key]
        return data

    @model_validator(mode="after")
    def _growth(self) -> "ModelConfig":
        if self.grow_count and self.grow_module is None:
            raise ValueError(
                f"model.grow_count = {self.grow_count} needs model.grow_module (\"inception-35x35x288\" or "
                "\"inception-17x17x768\"); set grow_module or remove grow_count"
            )
        return self

    @model_validator(mode="after")
    def _one_source_of_layers(self) -> "ModelConfig":
        given = self.model_fields_set
        if self.synthetic is not None and self.layers is not None:
            raise ValueError("[model.synthetic] and [[model.layers]] both define the model; keep one")
        if self.synthetic is not None and "name" in given and self.name.lower() != "synthetic":
            raise ValueError(
                f"model.name = {self.name!r} names a zoo model, but [model.synthetic] defines a synthetic one; "
                'set name = "synthetic" or remove the [model.synthetic] table'
            )
        if self.layers is not None and "name" in given:
            from ..workload import list_models

            if self.name.lower().replace("-", "").replace("_", "") in list_models():
                raise ValueError(
                    f"model.name = {self.name!r} is a zoo model, but [[model.layers]] defines a custom one; "
                    "give the custom model another name or remove the [[model.layers]] tables"
                )
        if "efficiency" in given and "compute" not in given:
            self.compute = "flops"  # a scenario that sets an efficiency asks for the FLOPs x efficiency model
        elif "efficiency" in given and self.compute == "roofline" and self.efficiency != type(self).model_fields["efficiency"].default:
            # (a saved roofline scenario carries the default efficiency beside compute = "roofline" and loads again)
            raise ValueError(
                "model.efficiency is the FLOPs x efficiency model's share of peak; the roofline (compute = "
                '"roofline") takes its rates from the device preset and would ignore it; remove model.efficiency '
                'or set compute = "flops"'
            )
        if self.profile is not None:
            ignored = [f for f in ("device", "precision", "efficiency", "compute") if f in given]
            if ignored:
                raise ValueError(
                    f"model.profile gives measured layer times, so model.{ignored[0]} (used to turn FLOPs into times) "
                    f"would be ignored; remove {' and '.join('model.' + f for f in ignored)} or the profile"
                )
        if self.profile_job is not None and not str(self.profile or "").endswith(".parquet"):
            raise ValueError(f"model.profile_job = {self.profile_job} picks a job's rows of an event-log profile; "
                             "give model.profile an events.parquet, or remove profile_job")
        return self

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        from ..workload.devices import DEVICES

        if v.strip().upper() not in DEVICES:
            raise ValueError(f"unknown device {v!r}; choose one of {', '.join(DEVICES)}")
        return v.strip().upper()


# ----------------------------------------------------------------- strategy


# ----------------------------------------------------------------- grouping
# Which gradients travel together (python/ddlsim/simulation/grouping.py).


class PerTensorGrouping(_Strict):
    """Wait-free backpropagation: one synchronisation per tensor."""

    kind: Literal["per-tensor"] = "per-tensor"


class SyncEASGDGrouping(_Strict):
    """One all-reduce of every gradient after the whole backward pass."""

    kind: Literal["synceasgd"] = "synceasgd"


class MGWFBPGrouping(_Strict):
    """MG-WFBP merge plan from the layer backward times and the all-reduce
    cost a + bM of the network (Table II, alpha = latency, beta = 1/bandwidth)."""

    kind: Literal["mg-wfbp"] = "mg-wfbp"
    # optimal: exact minimum of the paper's iteration time; algorithm1: the paper's greedy Algorithm 1
    method: Literal["optimal", "algorithm1"] = "optimal"
    # A given (or fitted, `ddlsim fit`) all-reduce cost T_ar(M) = a + b M for
    # the planner instead of the network's: a = startup, b in ns per byte.
    a: Optional[Duration] = None
    b_ns_per_byte: Optional[float] = Field(None, ge=0, le=1e12, allow_inf_nan=False)

    @model_validator(mode="after")
    def _both_or_neither(self) -> "MGWFBPGrouping":
        if (self.a is None) != (self.b_ns_per_byte is None):
            given, other = ("a", "b_ns_per_byte") if self.a is not None else ("b_ns_per_byte", "a")
            raise ValueError(
                f"strategy.grouping.{given} gives half of the all-reduce cost a + b M; give {other} too, "
                "or neither to use the network's"
            )
        return self


class FusionGrouping(_Strict):
    """Horovod tensor fusion (defaults: HOROVOD_FUSION_THRESHOLD 64 MiB, HOROVOD_CYCLE_TIME 5 ms)."""

    kind: Literal["fusion"] = "fusion"
    threshold: Size = "64MiB"
    cycle_time: Duration = "5ms"

    @property
    def threshold_bytes(self) -> int:
        return parse_size_bytes(self.threshold)

    @property
    def cycle_time_ns(self) -> int:
        return parse_duration_ns(self.cycle_time)


class ThesisFusionGrouping(_Strict):
    """The thesis' fusion buffers: contiguous layers from layer 0 while the buffer stays below the size."""

    kind: Literal["thesis-fusion"] = "thesis-fusion"
    fusion_buffer_size: Size = "5333329B"  # the thesis' Table 5.1 value (its Table 4.1 gives 6.28 MB)

    @field_validator("fusion_buffer_size")
    @classmethod
    def _positive(cls, v):
        if parse_size_bytes(v) <= 0:
            raise ValueError(f"fusion_buffer_size must be positive, got {v!r}; write e.g. \"5MB\"")
        return v

    @property
    def fusion_buffer_bytes(self) -> int:
        return parse_size_bytes(self.fusion_buffer_size)


class DDPGrouping(_Strict):
    """PyTorch DDP buckets (first bucket 1 MiB, then bucket_cap_mb MiB, reverse registration order)."""

    kind: Literal["ddp"] = "ddp"
    bucket_cap_mb: float = Field(25.0, gt=0, le=1e9, allow_inf_nan=False)


class FixedGrouping(_Strict):
    """Tensors in ready order, packed into groups of at most `size` bytes."""

    kind: Literal["fixed"] = "fixed"
    size: Size

    @field_validator("size")
    @classmethod
    def _positive(cls, v):
        if parse_size_bytes(v) <= 0:
            raise ValueError(f"size must be positive, got {v!r}; write e.g. \"25MB\"")
        return v

    @property
    def size_bytes(self) -> int:
        return parse_size_bytes(self.size)


class UserGrouping(_Strict):
    """Groups given as lists of tensor names; tensors not named travel alone."""

    kind: Literal["groups"] = "groups"
    groups: list[list[str]]


GROUPING_CLASSES: dict[str, type[_Strict]] = {
    "per-tensor": PerTensorGrouping,
    "synceasgd": SyncEASGDGrouping,
    "mg-wfbp": MGWFBPGrouping,
    "fusion": FusionGrouping,
    "thesis-fusion": ThesisFusionGrouping,
    "ddp": DDPGrouping,
    "fixed": FixedGrouping,
    "groups": UserGrouping,
}
GROUPING_ALIASES = {"wfbp": "per-tensor", "tensor": "per-tensor", "horovod": "fusion", "mgwfbp": "mg-wfbp",
                    "sync-easgd": "synceasgd", "buckets": "ddp"}
Grouping = Annotated[
    Union[PerTensorGrouping, SyncEASGDGrouping, MGWFBPGrouping, FusionGrouping, ThesisFusionGrouping, DDPGrouping,
          FixedGrouping, UserGrouping],
    Field(discriminator="kind"),
]


def _grouping_kind(kind: str) -> str:
    k = kind.strip().lower().replace("_", "-")
    return GROUPING_ALIASES.get(k, k)


def _option_items(rest: str, prefix: str = "") -> list[str]:
    """The KEY=VALUE items after the colon of a `--grouping` / `--background` value; an empty one
    (`ddp:a=1,,b=2`, a trailing comma) is an error, not dropped."""
    if not rest.strip():
        return []
    items = [x.strip() for x in rest.split(",")]
    if not all(items):
        raise ValueError(f"{prefix}an empty option (two commas in a row, or one at an end); write KEY=VALUE items "
                         "separated by single commas")
    return items


def parse_grouping(value: Any) -> Any:
    """A grouping given as a name (`"ddp"`), a name with options
    (`"ddp:bucket_cap_mb=50"`, `"fusion:threshold=32MiB,cycle_time=2ms"`) or
    a table; returns the table form (validated by the Grouping models)."""
    if isinstance(value, str):
        text = value.strip()
        kind, _, rest = text.partition(":")
        table: dict[str, Any] = {"kind": kind}
        for item in _option_items(rest):
            key, eq, v = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"cannot read grouping option {item!r} in {value!r}; write e.g. \"ddp:bucket_cap_mb=50\"")
            if key.strip() in table:  # found by probing the options: the last one was taken without a word
                raise ValueError(f"grouping option {key.strip()} is given twice; give it once")
            table[key.strip()] = v.strip()
        value = table
    if isinstance(value, dict):
        if "kind" not in value:
            raise ValueError(f"grouping.kind is missing; choose one of {', '.join(GROUPING_CLASSES)}")
        if isinstance(value["kind"], str):
            value = {**value, "kind": _grouping_kind(value["kind"])}
            if value["kind"] not in GROUPING_CLASSES:
                close = difflib.get_close_matches(value["kind"], list(GROUPING_CLASSES), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(f"unknown grouping kind {value['kind']!r}; {hint}choose one of {', '.join(GROUPING_CLASSES)}")
    return value


#: All-reduce algorithms: the engine's (the registry in
#: :mod:`ddlsim.simulation.algorithms`), with "-" for "_".
AllreduceAlgorithm = Literal[_algorithm_names()]  # type: ignore[valid-type]


class _StrategyBase(_Strict):
    # lowest layer index first (thesis §4.3) or first come, first served
    stream_policy: StreamPolicy = "fifo"
    # with priority: "none" lets a running collective / transfer finish,
    # "chunk" preempts it at chunk (step) boundaries, "message" only where a
    # message starts (P3: tensors sliced into chunk_bytes messages, a slice is never interrupted)
    preemption: Preemption = "none"
    # which gradients travel together (default: one synchronisation per tensor)
    grouping: Grouping = Field(default_factory=PerTensorGrouping)

    @field_validator("grouping", mode="before")
    @classmethod
    def _grouping_forms(cls, v: Any) -> Any:
        if isinstance(v, BaseModel):
            return v
        return parse_grouping(v)

    @model_validator(mode="after")
    def _preemption_needs_priority(self):
        if self.preemption != "none" and self.stream_policy != "priority":
            raise ValueError(
                f"strategy.preemption = {self.preemption!r} needs strategy.stream_policy = \"priority\" "
                f"(got {self.stream_policy!r}); set stream_policy = \"priority\" or preemption = \"none\""
            )
        if self.grouping.kind == "mg-wfbp" and getattr(self, "kind", "") == "ps":
            raise ValueError(
                'strategy.grouping kind = "mg-wfbp" plans merges with the all-reduce cost model, but strategy.kind is "ps"; '
                'use kind = "ring" or another grouping'
            )
        return self


class RingStrategy(_StrategyBase):
    """All-reduce among the workers."""

    kind: Literal["ring"] = "ring"
    algorithm: AllreduceAlgorithm = "ring"
    # ring only: partition each tensor into messages of at most this many
    # bytes, each ring-all-reduced in turn (network-operator paper §8.2.1/§9.2); 0 = off
    chunk_bytes: ByteCount = Field(0, ge=0, le=10**15)
    # "multicast": the ring's second ring (all-gather) becomes one multicast
    # per worker of the chunk it reduced (network-operator paper §8.4); ring only.
    in_network: Literal["none", "multicast"] = "none"
    # reduction cost (MG-WFBP Table II's gamma): a member spends ceil(gamma x bytes) ns
    # reducing each receipt of the reduce phase before its next step; 0 = free
    gamma_ns_per_byte: float = Field(0.0, ge=0, le=1e6, allow_inf_nan=False)
    # ByteScheduler (Peng et al., SOSP'19): each group larger than partition_bytes
    # travels as ceil(bytes / partition_bytes) all-reduces of nearly equal size;
    # the communication stream starts the next queued all-reduce while those
    # running move fewer than credit_bytes (ByteScheduler's own defaults are
    # 1 M and 4 M parameters: "4MB" and "16MB" in fp32). 0 = off.
    partition_bytes: Size = 0
    credit_bytes: Size = 0

    @property
    def partition_size(self) -> int:
        return parse_size_bytes(self.partition_bytes)

    @property
    def credit_size(self) -> int:
        return parse_size_bytes(self.credit_bytes)

    @model_validator(mode="after")
    def _chunk_bytes_needs_ring(self):
        from .algorithms import all_algorithms, get

        if self.chunk_bytes and not get(self.algorithm).partitions:
            takes = " or ".join(f'"{a.name}"' for a in all_algorithms() if a.partitions)
            raise ValueError(
                f"strategy.chunk_bytes = {self.chunk_bytes} partitions ring messages, but strategy.algorithm = "
                f"{self.algorithm!r}; use algorithm = {takes} or remove chunk_bytes"
            )
        if self.in_network == "multicast" and (self.algorithm != "ring" or self.chunk_bytes):
            raise ValueError(
                f"strategy.in_network = \"multicast\" makes the ring's all-gather a multicast; it needs algorithm = \"ring\" "
                f"(got {self.algorithm!r}) and no chunk_bytes (got {self.chunk_bytes})"
            )
        if self.in_network == "multicast" and self.partition_size:
            raise ValueError(
                f"strategy.partition_bytes = {self.partition_bytes!r} cuts groups into separate all-reduces, but the ring with a "
                "multicast all-gather lowers each group whole; remove one of strategy.partition_bytes and strategy.in_network"
            )
        if self.credit_size and self.preemption != "none":
            raise ValueError(
                f"strategy.credit_bytes = {self.credit_bytes!r} runs whole partitions side by side (ByteScheduler preempts only "
                f"between partitions), but strategy.preemption = {self.preemption!r}; set preemption = \"none\""
            )
        if self.in_network == "multicast" and self.gamma_ns_per_byte:
            raise ValueError(
                f"strategy.gamma_ns_per_byte = {self.gamma_ns_per_byte} charges the all-reduce's reductions, which the ring with a "
                "multicast all-gather does not model; remove one of strategy.gamma_ns_per_byte and strategy.in_network"
            )
        return self

    @property
    def label(self) -> str:
        if self.in_network == "multicast":
            return f"{self.algorithm} all-reduce, multicast all-gather"
        if self.partition_size or self.credit_size:
            part = format_bytes(self.partition_size) if self.partition_size else "whole"
            return f"{self.algorithm} all-reduce, ByteScheduler {part} partitions, credit {format_bytes(self.credit_size)}"
        return f"{self.algorithm} all-reduce"

    @property
    def servers(self) -> int:
        """No parameter servers (so `scenario.strategy.servers` is 0 for ring)."""
        return 0


class ServerCost(_Strict):
    """The parameter server's per-request cost a + b C (the RPC paper's PS_proc
    growing with C concurrent connections; C = the workers): each push or
    pull request occupies its server's request processor that long, and
    requests queue there first come, first served. Both 0 (default): none.
    ``update`` + ``update_ns_per_byte`` x payload bytes (either above 0): the
    server is one thread, so each update also runs on that processor, for that
    long, queued with the requests (docs/parameter-server.md)."""

    a: Duration = "0s"
    b: Duration = "0s"
    update: Duration = "0s"
    update_ns_per_byte: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False)

    def is_zero(self) -> bool:
        return not (self.a_ns or self.b_ns or parse_duration_ns(self.update) or self.update_ns_per_byte)

    @property
    def a_ns(self) -> int:
        return parse_duration_ns(self.a)

    @property
    def b_ns(self) -> int:
        return parse_duration_ns(self.b)

    def engine(self) -> dict[str, Any]:
        out: dict[str, Any] = {"a_ns": self.a_ns, "b_ns": self.b_ns}
        if parse_duration_ns(self.update) or self.update_ns_per_byte:  # absent: the spec of before, unchanged
            out.update(update_ns=parse_duration_ns(self.update), update_ns_per_byte=float(self.update_ns_per_byte))
        return out


class ClientCost(_Strict):
    """The parameter-server workers' own per-request cost (docs/parameter-server.md): each request a worker
    sends holds its training thread (its compute stream) ``issue + issue_ns_per_byte x request bytes`` before it
    goes on the wire, and each response it receives holds it ``receive + receive_ns_per_byte x response bytes``
    before what follows it; one op at a time, first come, first served. A response that reaches a worker whose
    thread is idle (waiting for it) is taken ``wakeup`` later: the thread's wake-up. All 0 (default): none."""

    issue: Duration = "0s"
    issue_ns_per_byte: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False)
    receive: Duration = "0s"
    receive_ns_per_byte: float = Field(0.0, ge=0, le=1e9, allow_inf_nan=False)
    wakeup: Duration = "0s"

    def is_zero(self) -> bool:
        return not (parse_duration_ns(self.issue) or parse_duration_ns(self.receive) or self.issue_ns_per_byte
                    or self.receive_ns_per_byte or parse_duration_ns(self.wakeup))

    def engine(self) -> dict[str, Any]:
        out = {"issue_ns": parse_duration_ns(self.issue), "issue_ns_per_byte": float(self.issue_ns_per_byte),
               "receive_ns": parse_duration_ns(self.receive), "receive_ns_per_byte": float(self.receive_ns_per_byte)}
        if parse_duration_ns(self.wakeup):  # absent: the spec of before, unchanged
            out["wakeup_ns"] = parse_duration_ns(self.wakeup)
        return out


MESSAGE_OPS = ("push_request", "push_response", "pull_request", "pull_response")


class MessageLatency(_Strict):
    """The parameter server's RPC messages' own transport times beyond ``network.latency``, per measured iteration
    (docs/validation.md, "PS: messages that are not alike"): the simulated iterations take ``iterations`` in turn,
    simulated iteration ``first`` the first row (iteration i: row (i - first) mod the rows), and its messages take
    that row's times. With ``keys`` (per time: the sending rank, the message kind and the tensor index), each
    message takes the time of the message with its key; a message with no key there, and every message without
    ``keys``, draws uniformly over the row's times (seeded). ``ddlsim replay`` of a PS capture fills it from the
    capture's own messages, its first counted iteration as ``first``. Empty (default): none."""

    keys: list[tuple[int, Literal[MESSAGE_OPS], int]] = Field(default_factory=list, max_length=1_000_000)
    iterations: list[list[Optional[Duration]]] = Field(default_factory=list, max_length=100_000)
    first: int = Field(0, ge=-(2**31), le=2**31 - 1)

    @model_validator(mode="after")
    def _rows(self) -> "MessageLatency":
        if self.keys and not self.iterations:
            raise ValueError("strategy.message_latency has keys but no iterations; add iterations or remove keys")
        for i, row in enumerate(self.iterations):
            if self.keys and len(row) != len(self.keys):
                raise ValueError(f"strategy.message_latency.iterations[{i}] has {len(row)} times for {len(self.keys)} "
                                 "keys; give one time (or null) per key")
            if all(t is None for t in row):
                raise ValueError(f"strategy.message_latency.iterations[{i}] holds no time; give at least one")
        return self

    def is_empty(self) -> bool:
        return not self.iterations

    def engine(self) -> dict[str, Any]:
        return {"keys": [list(k) for k in self.keys], "first": self.first,
                "iterations": [[None if t is None else parse_duration_ns(t) for t in row] for row in self.iterations]}


class PSStrategy(_StrategyBase):
    """Parameter servers: workers push gradients and pull parameters."""

    kind: Literal["ps"] = "ps"
    servers: int = Field(1, ge=1, le=65536)

    @property
    def label(self) -> str:
        ina = "" if self.in_network == "none" else f", {self.in_network}"
        return f"PS, {self.servers} server{'s' if self.servers != 1 else ''}{ina}"
    # round-robin: TensorFlow's default; size-balanced: largest first to the
    # least-loaded server; split: every tensor split evenly over all servers (§9.1)
    placement: Literal["round-robin", "size-balanced", "split"] = "round-robin"
    # server aggregation: N x tensor bytes at this rate (bytes/s by default)
    update_bandwidth: Bandwidth = "20GB/s"
    # plus (N - 1) x tensor bytes x gamma ns (MG-WFBP's per-byte reduction cost)
    gamma_ns_per_byte: float = Field(0.0, ge=0, le=1e6, allow_inf_nan=False)
    header_bytes: ByteCount = Field(0, ge=0, le=10**9)
    # message pipelining (§9.2): each tensor (share) travels as messages of at most this size (0: off)
    chunk_bytes: ByteCount = Field(0, ge=0, le=10**15)
    # distribution phase (§9.4): immediate (each parameter right after its update),
    # round-robin (one parameter at a time to every worker), block (whole model per worker)
    distribution: Literal["immediate", "round-robin", "block"] = "immediate"
    # no cross-worker update barrier; staleness: at most this many iterations ahead of the slowest
    asynchronous: bool = False
    staleness: Optional[int] = Field(None, ge=0, le=1_000_000)
    # per-request server cost a + b C, queued FIFO per server (docs/validation.md); a = b = 0: none
    server_cost: ServerCost = Field(default_factory=ServerCost)
    # the workers' own cost per request issued / response handled, on the worker's training thread; 0: none
    client_cost: ClientCost = Field(default_factory=ClientCost)
    # each RPC message's own transport time beyond network.latency, from measured iterations; empty: none
    message_latency: MessageLatency = Field(default_factory=lambda: MessageLatency())

    @model_validator(mode="after")
    def _async_options(self) -> "PSStrategy":
        if self.staleness is not None and not self.asynchronous:
            raise ValueError(
                f"strategy.staleness = {self.staleness} bounds asynchronous training, but strategy.asynchronous is false; "
                "set asynchronous = true or remove staleness"
            )
        if self.asynchronous and self.distribution != "immediate":
            raise ValueError(
                f"strategy.distribution = {self.distribution!r} orders the synchronous distribution phase; asynchronous "
                "PS answers every push at once: remove distribution or set asynchronous = false"
            )
        if self.in_network != "none":
            variants = {"placement": ("split", self.placement == "split"),
                        "distribution": (self.distribution, self.distribution != "immediate"),
                        "asynchronous": (self.asynchronous, self.asynchronous),
                        "chunk_bytes": (self.chunk_bytes, self.chunk_bytes != 0),
                        "server_cost": (self.server_cost.model_dump(exclude_defaults=True),
                                        not self.server_cost.is_zero()),
                        "client_cost": (self.client_cost.engine(), not self.client_cost.is_zero()),
                        "message_latency": (f"{len(self.message_latency.iterations)} iterations",
                                            not self.message_latency.is_empty())}
            clash = [(name, value) for name, (value, on) in variants.items() if on]
            if clash:
                name, value = clash[0]
                raise ValueError(
                    f"strategy.in_network = {self.in_network!r} is modelled for the plain synchronous PS only, but "
                    f"strategy.{name} = {value!r}; remove {name} or set in_network = \"none\""
                )
        return self

    # In-network mechanisms (paper §3.4, §8.1): "multicast" sends the new
    # parameters once, switches replicate them; "aggregation" sums the pushes
    # in the switch; "multiagg" both. switch_memory: the switch's aggregation
    # memory (a size, e.g. "10MB"); groups that do not fit, first come first
    # served in tensor order, are aggregated at the server. None: unlimited.
    in_network: Literal["none", "multicast", "aggregation", "multiagg"] = "none"
    switch_memory: Optional[Size] = None

    @property
    def switch_memory_bytes(self) -> Optional[int]:
        return None if self.switch_memory is None else parse_size_bytes(self.switch_memory)

    @property
    def update_bandwidth_bps(self) -> float:
        """Server update rate in bit/s (divide by 8 for bytes/s)."""
        return parse_bandwidth(self.update_bandwidth)


Strategy = Annotated[Union[RingStrategy, PSStrategy], Field(discriminator="kind")]
STRATEGY_CLASSES: dict[str, type[_StrategyBase]] = {"ring": RingStrategy, "ps": PSStrategy}
SHARED_STRATEGY_FIELDS = ("stream_policy", "preemption", "grouping")


# ----------------------------------------------------------------- migration


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def migrate_old_form(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The old form (`strategy = "ps"` string, `[ps]` section) rewritten to the
    tagged `[strategy]` section, and notes saying what to write instead.
    New-form data comes back unchanged with no notes."""
    strategy = data.get("strategy")
    has_ps = "ps" in data
    if not isinstance(strategy, str) and not (has_ps and strategy is None):
        return data, []  # new form (a `[ps]` next to a `[strategy]` table is reported as an unknown key)
    data = dict(data)
    ps = data.pop("ps", None)
    kind = strategy if isinstance(strategy, str) else "ring"
    section: dict[str, Any] = {"kind": kind}
    ignored = ""
    if isinstance(ps, dict) and kind == "ps":
        section.update(ps)
    elif ps is not None:
        ignored = (" The [ps] section was ignored because the strategy is "
                   f"{kind!r}{' (the default)' if strategy is None else ''}; delete it.")
    data["strategy"] = section
    snippet = ", ".join(f"{k} = {_toml_value(v)}" for k, v in section.items())
    old = " and ".join(x for x in ((f"strategy = {_toml_value(strategy)}" if isinstance(strategy, str) else ""),
                                   ("a [ps] section" if has_ps else "")) if x)
    note = (f"deprecated scenario form: {old}; write a [strategy] table instead, one key per line: "
            f"[strategy] {snippet}.{ignored} (Read as that this time.)")
    return data, [note]


# ----------------------------------------------------------------- scenario


class Scenario(_Strict):
    model: ModelConfig = Field(default_factory=ModelConfig)
    workers: int = Field(8, ge=1, le=65536)
    strategy: Strategy = Field(default_factory=RingStrategy)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    iterations: int = Field(3, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0, lt=2**63)
    jitter: float = Field(0.0, ge=0, le=1, description="coefficient of variation of compute times")
    barrier: bool = True
    # backpropagation staggering: worker w idles before its first backward op,
    # w x stagger ("fixed") or uniform in [0, stagger] ("random", seeded)
    stagger: Duration = "0s"
    stagger_mode: Literal["fixed", "random"] = "fixed"
    trace_detail: Literal["auto", "step", "collective"] = "auto"
    # Closed form: alike workers simulated and logged once per class ("auto"), or every worker ("off").
    rank_classes: Literal["auto", "off"] = "auto"
    # Background tenants ([[tenant]] tables): flows of other applications on the same fabric.
    tenant: list[TenantConfig] = Field(default_factory=list)
    # Stragglers ([[straggler]] tables): a rank slower every iteration, or any rank slower with a probability.
    straggler: list[StragglerConfig] = Field(default_factory=list)
    # Training jobs sharing the fabric ([[job]] tables, docs/jobs.md); none: the scenario is one job.
    job: list[JobConfig] = Field(default_factory=list)
    # Staggered job starts: job k starts job_stagger x k after its own start (docs/jobs.md).
    job_stagger: Duration = "0s"
    # Where relative paths (model.profile) are resolved from.
    base_dir: Optional[str] = Field(None, exclude=True)

    _migration_notes: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _migrate(cls, data: Any, handler):
        notes: list[str] = []
        if isinstance(data, dict):
            if isinstance(data.get("strategy"), str):
                data = {**data, "strategy": data["strategy"].strip().lower()}
            data, notes = migrate_old_form(data)
            strategy = data.get("strategy")
            if isinstance(strategy, dict) and "kind" not in strategy:
                raise ValueError('strategy.kind is missing; add kind = "ring" (all-reduce) or kind = "ps" (parameter server)')
            if isinstance(strategy, dict) and isinstance(strategy["kind"], str):
                data = {**data, "strategy": {**strategy, "kind": strategy["kind"].strip().lower()}}
        scenario = handler(data)
        if notes:
            scenario._migration_notes = scenario._migration_notes + notes
        return scenario

    @model_validator(mode="after")
    def _cross_section(self) -> "Scenario":
        if self.network.collective_model == "closed-form" and self.strategy.kind != "ring":
            raise ValueError(
                f"network.collective_model = \"closed-form\" times all-reduce collectives, but strategy.kind is "
                f"{self.strategy.kind!r} (no collectives); remove collective_model or set strategy kind = \"ring\""
            )
        if self.network.collective_model == "closed-form" and self.strategy.preemption != "none":
            raise ValueError(
                f"network.collective_model = \"closed-form\" has no steps to preempt at, but strategy.preemption = "
                f"{self.strategy.preemption!r}; set preemption = \"none\" or collective_model = \"steps\""
            )
        if self.network.collective_model == "closed-form" and getattr(self.strategy, "credit_size", 0):
            raise ValueError(
                f"network.collective_model = \"closed-form\" times each all-reduce alone, but strategy.credit_bytes = "
                f"{self.strategy.credit_bytes!r} runs several at once on shared links; set collective_model = \"steps\" or credit_bytes = 0"
            )
        if getattr(self.strategy, "in_network", "none") != "none" and self.strategy.kind == "ring" and self.network.collective_model == "closed-form":
            raise ValueError(
                'strategy.in_network = "multicast" with the ring is simulated step by step; set network.collective_model = "steps"'
            )
        in_network = getattr(self.strategy, "in_network", "none")
        if self.network.fidelity == "packet" and in_network != "none":
            raise ValueError(
                f"strategy.in_network = {in_network!r} needs switch replication or aggregation, which the packet-level "
                "model (TCP) does not have; set in_network = \"none\" or network.fidelity = \"flow\""
            )
        if self.network.band_policy == "adaptive":
            why = ("strategy.kind is \"ps\" (the slack plan models all-reduce)" if self.strategy.kind != "ring" else
                   f"strategy.stream_policy is {self.strategy.stream_policy!r} (the slack plan assumes a FIFO stream)"
                   if self.strategy.stream_policy != "fifo" else
                   "network.priority_bands is on (both set the bands)" if self.network.priority_bands else
                   f"network.adaptive_low_band = {self.network.adaptive_low_band} is not below job_band = "
                   f"{self.network.job_band} (a higher number)" if self.network.adaptive_low_band <= self.network.job_band else "")
            if why:
                raise ValueError(f"network.band_policy = \"adaptive\" cannot be used here: {why}; "
                                 "set band_policy = \"fixed\" or change that setting")
        if self.network.server_hosts != "separate" and self.strategy.kind != "ps":
            raise ValueError(
                f"network.server_hosts = {self.network.server_hosts!r} places parameter servers, but strategy.kind is "
                f"{self.strategy.kind!r}; remove server_hosts or set strategy kind = \"ps\""
            )
        return self

    @field_validator("tenant", mode="before")
    @classmethod
    def _tenant_forms(cls, v: Any) -> Any:
        if isinstance(v, (str, dict)):
            v = [v]  # one tenant given alone
        if isinstance(v, (list, tuple)):
            return [parse_background(t) for t in v]
        return v

    @model_validator(mode="after")
    def _tenant_checks(self) -> "Scenario":
        if self.tenant and self.network.collective_model == "closed-form":
            raise ValueError(
                "network.collective_model = \"closed-form\" times collectives without the network, so [[tenant]] flows "
                "would never meet the job's; set collective_model = \"steps\" or remove the tenants"
            )
        names = [t.name for t in self.tenant if t.name is not None]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tenant name {twice[0]!r} is used twice; give each [[tenant]] its own name")
        return self

    @field_validator("straggler", mode="before")
    @classmethod
    def _straggler_forms(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v  # one straggler given alone

    @model_validator(mode="after")
    def _straggler_checks(self) -> "Scenario":
        for s in self.straggler:
            if s.rank is not None and s.rank >= self.workers:
                raise ValueError(f"straggler rank {s.rank} is not a worker (workers 0 to {self.workers - 1}); "
                                 f"give a rank below {self.workers}")
        if self.model.rank_times == "sampled" and not str(self.model.profile or "").endswith(".parquet"):
            raise ValueError('model.rank_times = "sampled" draws each rank\'s layer times from an event log; set '
                             'model.profile to an events.parquet (ddlsim replay does) or rank_times = "median"')
        return self

    @property
    def tenants(self) -> list[TenantConfig]:
        """The background tenants; tenant ids are 1, 2, ... in this order (the job is tenant 0)."""
        return list(self.tenant)

    def tenant_seed(self, index: int) -> int:
        """The seed of the tenant at `index` (0-based): its own, else the scenario's seed + index."""
        t = self.tenant[index]
        return t.seed if t.seed is not None else (self.seed + index) % 2**63

    @property
    def stagger_ns(self) -> int:
        return parse_duration_ns(self.stagger)

    @property
    def migration_notes(self) -> list[str]:
        """Notes about old-form input that was migrated (show them to the user)."""
        return list(self._migration_notes)

    @property
    def servers(self) -> int:
        """Number of parameter servers: strategy.servers for ps, 0 for ring."""
        return self.strategy.servers

    @property
    def ranks(self) -> int:
        """Workers plus parameter servers."""
        return self.workers + self.servers


# Flat names accepted by simulate(**overrides) and the CLI flags.
FLAT_KEYS = {
    "model": ("model", "name"),
    "batch_size": ("model", "batch_size"),
    "device": ("model", "device"),
    "precision": ("model", "precision"),
    "efficiency": ("model", "efficiency"),
    "compute": ("model", "compute"),
    "profile": ("model", "profile"),
    "rank_times": ("model", "rank_times"),
    "overheads": ("model", "overheads"),
    "strategy": ("strategy", "kind"),
    "servers": ("strategy", "servers"),
    "placement": ("strategy", "placement"),
    "update_bandwidth": ("strategy", "update_bandwidth"),
    "header_bytes": ("strategy", "header_bytes"),
    "gamma_ns_per_byte": ("strategy", "gamma_ns_per_byte"),
    "distribution": ("strategy", "distribution"),
    "asynchronous": ("strategy", "asynchronous"),
    "staleness": ("strategy", "staleness"),
    "server_cost": ("strategy", "server_cost"),
    "client_cost": ("strategy", "client_cost"),
    "message_latency": ("strategy", "message_latency"),
    "compute_speedup": ("model", "compute_speedup"),
    "speedup_kinds": ("model", "speedup_kinds"),
    "grow_module": ("model", "grow_module"),
    "grow_count": ("model", "grow_count"),
    "in_network": ("strategy", "in_network"),
    "switch_memory": ("strategy", "switch_memory"),
    "algorithm": ("strategy", "algorithm"),
    "collective_model": ("network", "collective_model"),
    "chunk_bytes": ("strategy", "chunk_bytes"),
    "partition_bytes": ("strategy", "partition_bytes"),
    "credit_bytes": ("strategy", "credit_bytes"),
    "stream_policy": ("strategy", "stream_policy"),
    "preemption": ("strategy", "preemption"),
    "grouping": ("strategy", "grouping"),
    "bandwidth": ("network", "bandwidth"),
    "latency": ("network", "latency"),
    "network": ("network", "fidelity"),
    "fidelity": ("network", "fidelity"),
    "topology": ("network", "topology"),
    "hosts_per_leaf": ("network", "hosts_per_leaf"),
    "spines": ("network", "spines"),
    "oversubscription": ("network", "oversubscription"),
    "routing": ("network", "routing"),
    "ranks_per_host": ("network", "ranks_per_host"),
    "intra_host_bandwidth": ("network", "intra_host_bandwidth"),
    "intra_host_latency": ("network", "intra_host_latency"),
    "rack_placement": ("network", "rack_placement"),
    "server_hosts": ("network", "server_hosts"),
    "priority_bands": ("network", "priority_bands"),
    "job_band": ("network", "job_band"),
    "band_policy": ("network", "band_policy"),
    "record_flows": ("network", "record_flows"),
    "hosts": ("network", "hosts"),
}

# Flat names of the packet-level options ([network.packet]), for simulate(**overrides) and the CLI flags.
PACKET_KEYS = {
    "transport": "transport",
    "queue_limit": "queue_limit",
    "queue_limit_unit": "queue_limit_unit",
    "queue_scope": "queue_scope",
    "ecn_threshold": "ecn_threshold",
    "rto_min": "rto_min",
    "bands": "bands",
    "queue_sample": "queue_sample",
}


# ----------------------------------------------------------------- errors


def _known_keys(model_cls: type[BaseModel]) -> list[str]:
    return sorted((k for k in model_cls.model_fields if k != "base_dir"), key=lambda k: k != "kind")


def _field_model(loc: tuple, kind: Optional[str]) -> type[BaseModel]:
    """The pydantic class that owns the field at `loc[:-1]`."""
    if loc[:1] == ("strategy",) and kind in STRATEGY_CLASSES:
        return STRATEGY_CLASSES[kind]
    cls: type[BaseModel] = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        ann = cls.model_fields[part].annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            nested = [x for a in args for x in getattr(a, "__args__", ()) if isinstance(x, type) and issubclass(x, BaseModel)]
        if not nested:
            break
        cls = nested[0]
    return cls


def _split_tags(err: dict) -> tuple[tuple, Optional[str], Optional[str]]:
    """An error's path into the scenario without the union tags pydantic puts in it, and those tags:
    (path, strategy kind, grouping kind)."""
    loc = tuple(err["loc"])
    kind = grouping_kind = None
    if len(loc) >= 2 and loc[0] == "strategy" and loc[1] in STRATEGY_CLASSES:
        kind, loc = loc[1], (loc[0],) + loc[2:]
    if len(loc) >= 3 and loc[:2] == ("strategy", "grouping") and loc[2] in GROUPING_CLASSES:
        grouping_kind, loc = loc[2], loc[:2] + loc[3:]
    return loc, kind, grouping_kind


def _format_one(err: dict) -> str:
    loc, kind, grouping_kind = _split_tags(err)
    field = ".".join(str(p) for p in loc)
    typ, msg = err["type"], err["msg"].removeprefix("Value error, ")
    if typ == "extra_forbidden":
        key = str(loc[-1])
        if loc == ("ps",):
            return ('unknown key \'ps\': the [ps] section is the old form and cannot be combined with a [strategy] table; '
                    'move its keys (servers, placement, ...) into [strategy] with kind = "ps"')
        if kind is not None and len(loc) == 2:
            owners = [k for k, c in STRATEGY_CLASSES.items() if k != kind and key in c.model_fields]
            if owners:
                return (f"strategy.{key} is an option of kind = \"{owners[0]}\", but strategy.kind is \"{kind}\"; "
                        f"remove {key} or set strategy kind = \"{owners[0]}\"")
        owner = GROUPING_CLASSES[grouping_kind] if grouping_kind and len(loc) == 3 else _field_model(loc, kind)
        if grouping_kind and len(loc) == 3:
            owners = [k for k, c in GROUPING_CLASSES.items() if k != grouping_kind and key in c.model_fields]
            if owners:
                return (f"strategy.grouping.{key} is an option of kind = \"{owners[0]}\", but the grouping kind is "
                        f"\"{grouping_kind}\"; remove {key} or set grouping kind = \"{owners[0]}\"")
        known = _known_keys(owner)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key {field!r}: {hint}known keys here: {', '.join(known)}"
    if typ == "union_tag_invalid":
        tag = (err.get("ctx") or {}).get("tag", err.get("input"))
        return f"field '{field}.kind': unknown strategy kind {tag!r}; choose \"ring\" (all-reduce) or \"ps\" (parameter server)"
    if typ == "union_tag_not_found":
        return f"field '{field}.kind' is missing; add kind = \"ring\" or kind = \"ps\""
    if typ == "model_attributes_type" and loc == ("strategy",):
        return (f"field 'strategy': expected a [strategy] table with kind = \"ring\" or \"ps\", "
                f"got {err.get('input')!r}")
    if typ in ("model_type", "model_attributes_type") and loc in (("model",), ("network",)):
        example = {"model": 'name = "resnet50"', "network": 'bandwidth = "10Gbps"'}[loc[0]]
        return (f"field {field!r}: expected a [{field}] table (in Python a dict), e.g. [{field}] {example}, "
                f"got {err.get('input')!r}")
    if typ == "value_error":  # our own messages already show the input and the fix
        return f"field {field!r}: {msg}" if field and f"{field}." not in msg else msg
    got = err.get("input")
    shown = "" if isinstance(got, dict) or repr(got) in msg else f" (got {got!r})"
    return f"field {field!r}: {msg}{shown}" if field else f"{msg}{shown}"


class OverrideError(ScenarioError):
    """Overrides (`simulate(workers=0)`, `ddlsim simulate --workers 0`) the
    scenario refuses. Its text is a scenario error's; `problems` holds, per
    problem, the overrides it is about (their keys and values: one for a value
    refused on its own, several for options that contradict, none where no
    override is named) and the message, so that a command line can name its
    flags (`naming`)."""

    def __init__(self, text: str, problems: list[tuple[tuple[str, ...], tuple, str]], origin: str = "arguments") -> None:
        super().__init__(text)
        self.problems = problems
        self.origin = origin  # "arguments": a caller's own overrides (flags); else e.g. "cost model"

    def naming(self, flags: dict[str, str]) -> str:
        """One line, each problem after the flags of its overrides and the values given (`flags`: key -> flag);
        a scenario field the message names that is set by a flag of another name is followed by that flag."""
        parts = []
        for keys, values, message in self.problems:
            named, seen = [], set()
            for key, value in zip(keys, values):
                flag = flags.get(key, "--" + key.replace("_", "-"))
                if flag in seen:  # one flag that sets two fields (--queue-limit 10: the limit and its unit)
                    continue
                seen.add(flag)
                shown = "" if isinstance(value, (dict, list, bool)) or value is None else f" {value}"
                named.append(f"{flag}{shown}")
            setters = _setters_named(message, flags)
            parts.append((f"{', '.join(named)}: " if named else "") + message + (f" ({setters})" if setters else ""))
        return "; ".join(dict.fromkeys(parts))


def _mentions(message: str, path: tuple) -> bool:
    """Whether `message` names the scenario field at `path`: its dotted path (`network.hosts_per_leaf`), or a
    top-level field's bare name (`workers 0 to 1`), not as the tail of another path (`message_latency.iterations`)."""
    dotted = ".".join(path)
    return re.search(rf"(?<![\w.]){re.escape(dotted)}(?![\w])", message) is not None


def _setters_named(message: str, flags: dict[str, str]) -> str:
    """`--network sets network.fidelity`, for each field the message names (`fidelity = "analytic"`,
    `strategy.kind`) whose flag is not its own name: what a command line types to follow the message's fix."""
    notes = []
    for key, path in _override_paths(k for k in flags if k in FLAT_KEYS or k in PACKET_KEYS).items():
        flag, leaf = flags[key], path[-1]
        if flag == "--" + leaf.replace("_", "-"):
            continue
        if _mentions(message, path) or re.search(rf"(?<![\w.]){re.escape(leaf)} = ", message):
            notes.append(f"{flag} sets {'.'.join(path)}")
    return ", ".join(dict.fromkeys(notes))


def _override_paths(keys: Any) -> dict[str, tuple]:
    paths = {}
    for key in keys:
        if key in FLAT_KEYS:
            paths[key] = FLAT_KEYS[key]
        elif key in PACKET_KEYS:
            paths[key] = ("network", "packet", PACKET_KEYS[key])
        elif key in ("background", "tenant"):
            paths[key] = ("tenant",)
        else:
            paths[key] = (key,)
    return paths


def _override_error(exc: ValidationError, origin: str, items: dict[str, Any]) -> OverrideError:
    """The scenario's errors under `items` (overrides by key), each tied to the override it is about."""
    paths = _override_paths(items)
    problems = []
    for err in exc.errors():
        loc, text = _split_tags(err)[0], _format_one(err)
        # a check across fields (`hosts_per_leaf` on a star) names them: the overrides whose fields it names
        named = [k for k, p in paths.items() if _mentions(text, p) or _mentions(text, p[:2])
                 or re.search(rf"(?<![\w.]){re.escape(p[-1])} (=|is) ", text)
                 or (k in ("background", "tenant") and re.search(r"\btenants?\b|\[\[tenant\]\]", text))
                 or (k == "straggler" and re.search(r"\bstraggler\b", text))]
        owners = [k for k, p in paths.items() if loc[:len(p)] == p]
        if not owners and loc == ("strategy",) and "strategy" in paths:
            owners = ["strategy"]  # the kind itself
        message = text
        if owners:  # a value refused on its own, or the kind a strategy's check is about
            key = max(owners, key=lambda k: len(paths[k]))
            message = re.sub(r"^field '[^']*': ", "", text)
            inner = ".".join(str(p) for p in loc[len(paths[key]):] if not isinstance(p, int))
            if inner and not message.startswith(("field ", "unknown key")) and inner not in message:
                message = f"{inner}: {message}"  # a field inside the value (--straggler's probability)
            named = [key] + [k for k in named if k != key]
        problems.append((tuple(named), tuple(items[k] for k in named), message))
    return OverrideError(_format_errors(exc, origin), problems, origin)


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = list(dict.fromkeys(_format_one(err) for err in exc.errors()))
    return f"{origin}: invalid scenario:\n  " + "\n  ".join(lines)


def one_line(message: str) -> str:
    """A scenario error (`origin: invalid scenario:` and a line per problem) as one line, its problems after `; `:
    what a command line prints."""
    return message.replace("invalid scenario:\n  ", "invalid scenario: ").replace("\n  ", "; ").replace("\n", " ")


# ----------------------------------------------------------------- loading


def scenario_from_dict(data: dict[str, Any], origin: str = "scenario") -> Scenario:
    """Validates a dict (TOML shape; the old strategy form is migrated, see
    `Scenario.migration_notes`); raises ScenarioError naming the field."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(exc, origin)) from None


def read_scenario_toml(path: str | Path) -> dict[str, Any]:
    """A scenario file's TOML as a dict; ScenarioError (one line naming the file) when it cannot be read."""
    path = Path(path)
    input_file(path, "scenario file", error=ScenarioError)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{path}: not valid TOML: arrays or tables nested too deeply to read") from None
    except ValueError as exc:  # not a TOMLDecodeError: e.g. an integer of more than 4300 digits
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file; a scenario is TOML") from None
    return data


def load_scenario(path: str | Path) -> Scenario:
    """Reads and validates a TOML scenario file."""
    from ..arguments import path_arg

    path = path_arg(path, "path")
    data = read_scenario_toml(path)
    scenario = scenario_from_dict(data, origin=str(path))
    if not data:
        scenario._migration_notes = scenario._migration_notes + [f"{path} is empty: the defaults are used"]
    copy = scenario.model_copy(update={"base_dir": str(path.resolve().parent)})
    copy._migration_notes = scenario.migration_notes
    return copy


def _apply_strategy(current: dict[str, Any], value: Any) -> dict[str, Any]:
    """`current` strategy section with `value` (a kind name or a partial
    section) applied; switching kind keeps only the shared fields."""
    patch = {"kind": value.strip().lower()} if isinstance(value, str) else dict(value)
    kind = patch.get("kind", current.get("kind"))
    if kind != current.get("kind"):
        current = {k: v for k, v in current.items() if k in SHARED_STRATEGY_FIELDS}
    return {**current, **patch, "kind": kind}


def with_overrides(scenario: Scenario, overrides: dict[str, Any], origin: str = "arguments") -> Scenario:
    """Applies flat (`workers=16`, `strategy="ps"`, `servers=4`, `bandwidth="25Gbps"`)
    or nested (`network={"bandwidth": ...}`, `strategy={"kind": "ps", ...}`) overrides.

    A `strategy` that changes the kind starts a fresh section of that kind
    (only stream_policy and preemption carry over); options given together
    that contradict (e.g. `strategy="ring", servers=4`) are errors naming both.
    """
    # only what was set, so that cross-field checks can tell given values from defaults
    data = scenario.model_dump(exclude={"base_dir"}, exclude_unset=True)
    data.setdefault("strategy", {"kind": scenario.strategy.kind})
    items = {k: v for k, v in overrides.items() if v is not None}
    fidelity = items.get("network", items.get("fidelity"))
    if isinstance(items.get("network"), dict):
        fidelity = items["network"].get("fidelity")
    if isinstance(fidelity, str) and fidelity.strip().lower() != "packet" and not any(k in PACKET_KEYS for k in items) \
            and isinstance(data.get("network"), dict) and not (isinstance(items.get("network"), dict) and "packet" in items["network"]):
        # the same scenario at another fidelity: its packet-level options do not apply there
        data["network"] = {k: v for k, v in data["network"].items() if k != "packet"}
    # the kind first, so that `servers=4, strategy="ps"` works in any order
    for key in sorted(items, key=lambda k: k != "strategy"):
        value = items[key]
        if key == "strategy":
            if not isinstance(value, (str, dict)):  # before: a TypeError from deep inside (`strategy=-1`)
                why = f'give a kind ("ring" or "ps") or a strategy section (a dict), got {value!r}'
                raise OverrideError(f"{origin}: invalid scenario:\n  field 'strategy': {why}", [(("strategy",), (value,), why)],
                                    origin)
            data["strategy"] = _apply_strategy(data["strategy"], value)
        elif key in ("background", "tenant"):  # replaces the scenario's [[tenant]] tables
            data["tenant"] = value
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        elif key in FLAT_KEYS:
            section, field = FLAT_KEYS[key]
            data[section] = {**data.get(section, {}), field: value}
        elif key in PACKET_KEYS:
            network = data.get("network", {})
            data["network"] = {**network, "packet": {**(network.get("packet") or {}), PACKET_KEYS[key]: value}}
        else:
            data[key] = value
    try:
        result = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _override_error(exc, origin, items) from None
    result._migration_notes = scenario.migration_notes + result.migration_notes
    return result.model_copy(update={"base_dir": scenario.base_dir})
