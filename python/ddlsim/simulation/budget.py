"""What a run will cost, known before it starts, and the limits it must fit.

`estimate` counts, from the scenario and its training description alone
(no graph is built), the graph operations, point-to-point transfers, engine
events, event-log rows and peak memory of a run. `check` refuses a run whose
estimate is over budget with a :class:`ScenarioError` that gives the
estimate and the ways forward. The budget and an optional progress callback
come from the caller through `run_control` (the CLI's `--max-memory`,
`--force` and progress bar), so that the API's signature stays the
scenario's.

Calibration (measured on this engine, see README "Cost of a run"): log rows
are exact up to the barrier rows; memory is about 1.1-1.3 kB per log row on
top of the ~150 MB the process starts with (engine log, its copy into
Python, the DataFrame and the analysis); events are one per transfer and
compute op with an analytic network or a ring on a flow network, and grow
with the number of flows sharing a link on a flow network (PS incast: about
1.4 x workers per transfer, measured with 8-32 workers and 1-4 servers).

Packet level (`packet_estimate`): packet hops (one packet crossing one link)
= 2 (data and its ACK) x hops on the longest path x (bytes on the network /
MSS + one partial segment per message), bounded from the lowering's byte
counts (`network_bytes_per_iteration`); retransmissions come on top. Memory
adds the state of every connection and port, the packets that can exist at
once (no more than the queues and the links can hold, nor than the receive
windows allow) and the queues table up to its cap.
"""

from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..errors import ScenarioError
from ..units import format_bytes, parse_duration_ns
from . import algorithms
from .lowering import steps_per_iteration
from .scenario import Scenario

# Peak memory per event-log row (engine log + Python copy + DataFrame + analysis + writers).
BYTES_PER_ROW = 1300
# Memory of a started process (interpreter, numpy, pandas, pyarrow, matplotlib).
BASE_BYTES = 150 * 2**20
# Engine speed used for the time estimate (events per second; measured 0.5-2 M/s).
EVENTS_PER_S = 1_000_000
# Without --force, runs above this many engine events (about half an hour) are refused.
MAX_EVENTS = 2_000_000_000
# Packet level: packet hops per second for the time estimate (conservative; issue 17 targets 5 M/s),
# and without --force, runs above this many packet hops (about half an hour at that rate) are refused.
PACKET_HOPS_PER_S = 2_000_000
MAX_PACKET_HOPS = 4_000_000_000
# Packet level memory: per connection (TCP state, reorder and retransmission bookkeeping), per port and band
# (queue head, counters), per packet that exists at once (free-list entry), per queues-table row (engine
# column, its Python copy, Arrow and pandas).
CONNECTION_BYTES = 1024
PORT_BAND_BYTES = 256
PACKET_BYTES = 128
QUEUE_ROW_BYTES = 160
# A background tenant's flow: its engine record, its Python flows-table row and (in flight) its
# connection state, bytes.
TENANT_FLOW_BYTES = 400
# Smallest packet a byte-limited queue can hold (a 40-byte TCP/IP header, an ACK).
MIN_PACKET_BYTES = 40
# Rank classes (closed form): memory per worker of the full run that a class run still holds per rank
# (host map, clocks metadata, byte counts, class map; measured about 800 bytes at 65,536 workers).
CLASS_RANK_BYTES = 4096
# Default memory budget when the machine's memory cannot be read.
FALLBACK_MEMORY = 8 * 2**30

# progress(sim_now_ns, events, ops_done, ops_total)
ProgressCallback = Callable[[int, int, int, int], None]


def default_max_memory() -> int:
    """Half of the machine's physical memory (8 GiB when it cannot be read)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return FALLBACK_MEMORY
    return total // 2 if total > 0 else FALLBACK_MEMORY


@dataclass(frozen=True)
class RunControl:
    """Limits and hooks of the runs started inside `run_control(...)`."""

    max_memory: Optional[int] = None  # bytes; None: default_max_memory()
    force: bool = False
    progress: Optional[ProgressCallback] = None
    # Called with the resolved scenario and its estimate once a run is admitted.
    on_start: Optional[Callable[[Scenario, "Estimate"], None]] = None
    # How a refusal names the settings to change: "flags" (simulate's: --workers) or "sweep" (--set workers=N).
    settings: str = "flags"

    def setting(self, flag: str, key: str, value: str) -> str:
        """The way to change a setting, as the command that runs it takes it."""
        return f"--set {key}={value}" if self.settings == "sweep" else flag


_CONTROL: contextvars.ContextVar[RunControl] = contextvars.ContextVar("ddlsim_run_control", default=RunControl())


@contextmanager
def run_control(max_memory: Optional[int] = None, force: bool = False,
                progress: Optional[ProgressCallback] = None,
                on_start: Optional[Callable[[Scenario, "Estimate"], None]] = None,
                settings: str = "flags") -> Iterator[RunControl]:
    """Runs started inside get this budget (`max_memory` bytes, or no
    budget with `force`), this progress callback and this start callback;
    `settings`: how a refusal names the settings to change (RunControl)."""
    control = RunControl(max_memory=max_memory, force=force, progress=progress, on_start=on_start, settings=settings)
    token = _CONTROL.set(control)
    try:
        yield control
    finally:
        _CONTROL.reset(token)


def parse_max_memory(text: Optional[str], option: str = "--max-memory") -> Optional[int]:
    """A --max-memory value (16GB, 512MiB) in bytes; None stays None (the default budget). A bad one is one line."""
    if text is None:
        return None
    from ..units import parse_size_bytes

    try:
        value = parse_size_bytes(text)
    except ValueError as exc:
        raise ScenarioError(f"{option}: {exc}") from None
    return value


def current_control() -> RunControl:
    return _CONTROL.get()


@dataclass(frozen=True)
class Estimate:
    ops: int
    transfers: int
    events: int
    log_rows: int
    memory_bytes: int
    # packet level: packets crossing links (data and ACKs); 0 at analytic and flow fidelity
    packet_hops: int = 0

    @property
    def engine_s(self) -> float:
        return self.events / EVENTS_PER_S + self.packet_hops / PACKET_HOPS_PER_S

    def describe(self) -> str:
        packets = f"{self.packet_hops:,} packet hops, " if self.packet_hops else ""
        return (f"about {self.transfers:,} transfers, {self.events:,} engine events, {packets}{self.log_rows:,} log rows, "
                f"{format_bytes(self.memory_bytes)} of memory and {_duration(self.engine_s)} in the engine")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else "under a second"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


def estimate(scenario: Scenario, layers: int, group_bytes: list[int], detail: str,
             tenants: Optional[list[dict]] = None, compute_ns_per_iteration: int = 0,
             rank_classes: Optional[list[int]] = None) -> Estimate:
    """The cost of simulating `scenario` whose model has `layers` layers and
    gradient groups of `group_bytes`, logging at `detail` ("step" or
    "collective"). Event log v2: a message is a send row and a recv row.
    `tenants` are the engine's tenant documents (lowering.tenant_documents);
    their flows are counted over their stop time, or over an upper estimate
    of the job's duration: per iteration `compute_ns_per_iteration` plus
    twice the job's network bytes per rank at the rate the tenants' offered
    load leaves (1 - the load), plus at packet level two
    minimum retransmission timeouts; four standard deviations of the
    Poisson count on top. `rank_classes`: the sizes of the classes a
    closed-form run simulates one worker each of (ddlsim.trace.classes):
    ops and rows count one worker per class, memory adds a little per rank."""
    n = scenario.workers if not rank_classes else len(rank_classes)
    iters = scenario.iterations
    strategy = scenario.strategy
    groups = len(group_bytes)
    compute = 2 * layers * n
    serves = 0
    updates_ops = 0  # the servers' update ops (and distribution's barrier): an event each, with no transfer
    if strategy.kind == "ps":
        # The lowering's messages: one per group, per server share with placement "split", each cut
        # into chunk_bytes pieces (crates/ddlsim-core/src/lower/training.rs, ps_pieces).
        pieces = sum(ps_piece_count(b, strategy.servers, strategy.placement == "split", strategy.chunk_bytes) for b in group_bytes)
        updates = n if strategy.asynchronous else 1
        sync_ops = pieces * (4 * n + updates)  # push, update(s), push ack, pull request, pull response
        sync_ops += 1 if strategy.distribution != "immediate" and scenario.barrier else 0  # distribution's server barrier
        updates_ops = pieces * updates + (1 if strategy.distribution != "immediate" and scenario.barrier else 0)
        if not strategy.server_cost.is_zero():
            serves = pieces * 2 * n  # a server cost: one serve op per push and pull request (lower/server_cost.rs)
        client = strategy.client_cost  # the workers' own cost (lower/client_cost.rs): an issue op per push and pull
        if parse_duration_ns(client.issue) or client.issue_ns_per_byte:  # request, a handle op per ack and pull
            serves += pieces * 2 * n                                       # response
        if parse_duration_ns(client.receive) or client.receive_ns_per_byte or parse_duration_ns(client.wakeup):
            serves += pieces * 2 * n
        sync_ops += serves
        transfers = pieces * 4 * n
        step_rows = transfers  # the recv row of each transfer op
    else:
        sync_ops = groups * n
        closed_form = scenario.network.collective_model == "closed-form"
        transfers = 0 if closed_form else n * steps_per_iteration(scenario, group_bytes)
        step_rows = 2 * transfers if detail == "step" else 0
    barrier = 1 if scenario.barrier else 0
    ops = iters * (compute + sync_ops + barrier)
    transfers *= iters
    rows = ops + iters * step_rows
    # Flows sharing a bottleneck make a flow-level network recompute rates on every arrival and departure, and each
    # re-rated flow's completion is scheduled again (the old event is still popped). A PS transfer shares its server's
    # link with the other workers' transfers and its worker's link with its transfers to the other servers (and the
    # next chunk): 1 + 2 (n + servers - 1) events per transfer, which bounds the engine's count over seeded PS
    # variants (tests/test_budget_ps_flow_events.py) with a margin of 1.1-3.4x. Before, 1.4 n fell short of it
    # (ResNet-18, 8 workers, 2 servers: 45,879 estimated against 48,452 popped).
    per_transfer = 1.0
    if scenario.network.fidelity == "flow" and strategy.kind == "ps":
        per_transfer = 1.0 + 2.0 * (n + strategy.servers - 1)
    events = int(iters * (compute + serves + updates_ops + barrier) + transfers * per_transfer)  # the barrier: an event an iteration
    if strategy.kind == "ps" and not strategy.message_latency.is_empty():
        events += transfers  # a message with its own transport time arrives on an event of its own (lower/message_latency.rs)
    memory = BASE_BYTES + rows * BYTES_PER_ROW
    if rank_classes:
        memory += scenario.workers * CLASS_RANK_BYTES
    flows, tenant_bytes = 0, 0
    if tenants:
        job_s = job_seconds(scenario, group_bytes, transfers // max(iters, 1), compute_ns_per_iteration, tenants)
        flows, tenant_bytes = tenant_flows(tenants, job_s, fabric_size(scenario))
        events += int(2 * flows * per_transfer)
        memory += flows * TENANT_FLOW_BYTES
    if scenario.network.fidelity == "packet":
        hops, packet_memory = packet_estimate(scenario, group_bytes, transfers // max(iters, 1))
        hops += tenant_packet_hops(scenario, flows, tenant_bytes)
        return Estimate(ops=ops, transfers=transfers + flows, events=events, log_rows=rows,
                        memory_bytes=memory + packet_memory, packet_hops=hops)
    return Estimate(ops=ops, transfers=transfers + flows, events=events, log_rows=rows, memory_bytes=memory)


def job_seconds(scenario: Scenario, group_bytes: list[int], transfers_per_iteration: int,
                compute_ns_per_iteration: int, tenants: list[dict]) -> float:
    """An upper estimate of the job's simulated duration beside background `tenants`: per iteration its compute
    plus twice its network bytes per rank at the rate the tenants leave (1 - their offered load: the share a
    job's flow gets beside a processor-sharing queue of tenant flows at that load), plus at packet level two
    minimum retransmission timeouts. Tenants without a stop that together offer a link's whole rate or more
    leave the run without a bound: refused (ScenarioError) unless the run is forced."""
    iters = scenario.iterations
    load = offered_load(tenants, scenario.network.bandwidth_bps)
    open_ended = [t for t in tenants if t.get("stop_ns") is None]
    open_load = offered_load(open_ended, scenario.network.bandwidth_bps)
    if open_load >= 1.0 and not current_control().force:
        raise ScenarioError(
            f"background tenants without a stop offer {100 * open_load:.0f} % of a host link "
            f"({_overload_fix(open_ended, scenario)}): the network is overloaded, so the run's length and memory have "
            f"no bound; {_overload_fix(open_ended, scenario, hint=True)}, give the tenants a stop time, or run anyway "
            f"(--force)")
    left = max(1.0 - load, 0.01)
    job_s = iters * (compute_ns_per_iteration / 1e9
                     + 2 * 8 * network_bytes_per_iteration(scenario, group_bytes, transfers_per_iteration)
                     / max(scenario.workers, 1) / (scenario.network.bandwidth_bps * left))
    if scenario.network.fidelity == "packet":
        # Losses behind the tenants' queues: up to two retransmission timeouts per iteration.
        job_s += iters * 2 * scenario.network.packet_options.rto_min_ns / 1e9
    return job_s


def _overload_fix(tenants: list[dict], scenario: Scenario, hint: bool = False) -> str:
    """The busiest of `tenants` (by offered load), or (`hint`) the rate of it that brings their load under a link's:
    rate x (1 - the others' load) / its load; when the others alone fill the link, lower them all."""
    from ..workload import flow_sizes

    bw = scenario.network.bandwidth_bps
    t = max(tenants, key=lambda d: offered_load([d], bw))
    names = [x.name for x in getattr(scenario, "tenant", None) or []]
    label = f"tenant {t['id']}" + (f" ({names[t['id'] - 1]})" if 0 < t["id"] <= len(names) and names[t["id"] - 1] else "")
    if not hint:
        return (f"the busiest, {label}: {t['rate_per_host']:g} flows/s per host x "
                f"{flow_sizes.mean_bytes(t['cdf']) / 1e6:.2f} MB mean")
    others = offered_load(tenants, bw) - offered_load([t], bw)
    if others >= 1.0:
        return (f"lower every tenant's flows_per_second_per_host (by a factor of "
                f"{offered_load(tenants, bw):.3g} or more)")
    return (f"lower flows_per_second_per_host of {label} to under "
            f"{t['rate_per_host'] * (1.0 - others) / offered_load([t], bw):g}")


def fabric_size(scenario: Scenario) -> int:
    """Hosts in the fabric (network.hosts, else the ranks' hosts)."""
    from .lowering import host_of_rank

    return scenario.network.hosts or (max(host_of_rank(scenario), default=0) + 1)


def offered_load(tenants: list[dict], bandwidth_bps: float) -> float:
    """The tenants' offered load per sending host, as a fraction of its link rate
    (flows per second x mean size x 8 / rate, summed over tenants)."""
    from ..workload import flow_sizes

    return sum(t["rate_per_host"] * flow_sizes.mean_bytes(t["cdf"]) * 8 / bandwidth_bps for t in tenants)


def tenant_flows(tenants: list[dict], job_s: float, hosts: int) -> tuple[int, int]:
    """(expected flows, expected bytes) of background tenants (the engine's
    tenant documents): per tenant, rate_per_host x sending hosts x its
    arrival window (stop - start, or `job_s` without a stop), times the
    CDF's mean size, with a margin of four standard deviations of the
    Poisson count."""
    from ..workload import flow_sizes

    total_flows, total_bytes = 0, 0
    for t in tenants:
        if t.get("pairs"):
            senders = len({p[0] for p in t["pairs"]})
        else:
            senders = len(t["hosts"]) if t.get("hosts") else hosts
        window_s = ((t["stop_ns"] - t["start_ns"]) / 1e9) if t.get("stop_ns") is not None else max(job_s - t["start_ns"] / 1e9, 0.0)
        mean = t["rate_per_host"] * senders * window_s
        n = int(mean + 4 * mean ** 0.5 + 1)
        total_flows += n
        total_bytes += int(n * flow_sizes.mean_bytes(t["cdf"]))
    return total_flows, total_bytes


def tenant_packet_hops(scenario: Scenario, flows: int, tenant_bytes: int) -> int:
    """Packet hops of `flows` background tenant flows of `tenant_bytes` in all at packet level: every MSS-sized
    segment (one partial segment per flow) and its ACK over the longest path; 0 at other fidelities."""
    if scenario.network.fidelity != "packet":
        return 0
    p = scenario.network.packet_options
    return 2 * (-(-tenant_bytes // p.mss) + flows) * (2 if scenario.network.topology == "star" else 4)


def allreduce_bytes(algorithm: str, n: int, nbytes: int) -> int:
    """Bytes all ranks together send in one all-reduce of `nbytes` over `n`
    ranks (one rank per host): 2 (n - 1) x bytes for the ring family, the
    trees and direct (reduce-scatter plus all-gather, or reduce plus
    broadcast); p log2 p + 2 (n - p) times bytes for recursive doubling and
    the butterfly (p: the largest power of two <= n; the ranks beyond it
    fold in and out)."""
    if n <= 1:
        return 0
    if algorithms.canonical(algorithm) in ("recursive-doubling", "butterfly"):
        p = 1 << (n.bit_length() - 1)
        return (p * (p.bit_length() - 1) + 2 * (n - p)) * nbytes
    return 2 * (n - 1) * nbytes


def network_bytes_per_iteration(scenario: Scenario, group_bytes: list[int], transfers_per_iteration: int) -> int:
    """Payload bytes all ranks send per iteration: the all-reduces of every
    group, or PS pushes and pulls (2 x workers x model bytes) plus a header
    on every message."""
    strategy = scenario.strategy
    if strategy.kind == "ps":
        return 2 * scenario.workers * sum(group_bytes) + transfers_per_iteration * strategy.header_bytes
    return sum(allreduce_bytes(strategy.algorithm, scenario.workers, b) for b in group_bytes)


def directed_links(scenario: Scenario) -> int:
    """Egress ports of the fabric: host NICs and switch ports, one per directed link."""
    from .lowering import host_of_rank

    net = scenario.network
    hosts = max(host_of_rank(scenario), default=0) + 1
    if net.topology == "star":
        return 2 * hosts
    leaves = -(-hosts // net.hosts_per_leaf)
    return 2 * hosts + 2 * leaves * net.spines


def packet_estimate(scenario: Scenario, group_bytes: list[int], transfers_per_iteration: int) -> tuple[int, int]:
    """(packet hops, extra memory in bytes) of a packet-level run (see the module doc)."""
    net = scenario.network
    p = net.packet_options
    iters = scenario.iterations
    payload = network_bytes_per_iteration(scenario, group_bytes, transfers_per_iteration) * iters
    segments = -(-payload // p.mss) + transfers_per_iteration * iters  # one partial segment per message at most
    hops = 2 if net.topology == "star" else 4
    packet_hops = 2 * segments * hops  # every segment and its ACK, over the longest path
    ranks = scenario.ranks
    bands = p.bands if scenario.network.priority_bands else 1
    if p.connection_per_message:
        connections = transfers_per_iteration * (1 if scenario.barrier else 2)
    else:
        connections = min(transfers_per_iteration, ranks * (ranks - 1) * bands)
    ports = directed_links(scenario)
    limit = p.queue_limit if p.queue_limit_unit == "packets" else -(-p.queue_limit // MIN_PACKET_BYTES)
    per_port = limit * (p.bands if p.queue_scope == "band" else 1)
    on_wire = int(net.bandwidth_bps * net.latency_ns / 8e9 / MIN_PACKET_BYTES) + 1
    by_buffers = ports * (per_port + on_wire + 1)
    by_windows = connections * 2 * (-(-p.receive_window // p.mss) + 1)
    packets = min(by_buffers, by_windows)
    rows = p.queue_sample_cap if p.queue_sample_ns is not None else 0
    memory = (connections * CONNECTION_BYTES + ports * p.bands * PORT_BAND_BYTES + packets * PACKET_BYTES
              + rows * QUEUE_ROW_BYTES)
    return packet_hops, memory


def ps_piece_count(group_bytes: int, servers: int, split: bool, chunk_bytes: int) -> int:
    """Messages a group of `group_bytes` travels as under PS, as the engine's
    lowering cuts it (`ps_pieces`): one share per server with `split` (the
    first `bytes % servers` one byte larger, empty shares dropped), else one,
    each cut into messages of at most `chunk_bytes` (0: whole)."""
    def messages(b: int) -> int:
        return 1 if chunk_bytes <= 0 or b <= chunk_bytes else -(-b // chunk_bytes)

    k = max(servers, 1)
    if not split or k == 1:
        return messages(group_bytes)
    q, r = divmod(group_bytes, k)
    if q == 0:
        return r if r else 1  # r one-byte shares (or one empty message)
    return r * messages(q + 1) + (k - r) * messages(q)


def check(est: Estimate, scenario: Scenario, detail: str, control: Optional[RunControl] = None, announce: bool = True) -> None:
    """Refuses (ScenarioError) a run over its memory or event budget, unless
    forced; tells `control.on_start` about a run it admits (with `announce`)."""
    control = control or current_control()
    _refuse_over_budget(est, scenario, detail, control)
    if announce and control.on_start is not None:
        control.on_start(scenario, est)


def _refuse_over_budget(est: Estimate, scenario: Scenario, detail: str, control: RunControl) -> None:
    if control.force:
        return
    limit = control.max_memory if control.max_memory is not None else default_max_memory()
    over = []
    if est.memory_bytes > limit:
        over.append(f"the memory budget of {format_bytes(limit)}")
    if est.events > MAX_EVENTS:
        over.append(f"the limit of {MAX_EVENTS:,} engine events")
    if est.packet_hops > MAX_PACKET_HOPS:
        over.append(f"the limit of {MAX_PACKET_HOPS:,} packet hops")
    if not over:
        return
    ways = []
    setting = control.setting
    if detail == "step" and scenario.strategy.kind == "ring":
        ways.append(f"log collectives, not their steps ({setting('--trace-detail collective', 'trace_detail', 'collective')})")
    if scenario.iterations > 1:
        ways.append(f"simulate fewer iterations ({setting('--iterations', 'iterations', 'N')}, now {scenario.iterations})")
    ways.append(f"fewer workers ({setting('--workers', 'workers', 'N')})")
    if est.packet_hops > MAX_PACKET_HOPS:
        ways.append(f"a flow-level network ({setting('--network flow', 'network.fidelity', 'flow')})")
    if est.memory_bytes > limit:
        ways.append(f"raise the budget (--max-memory, e.g. {format_bytes(_round_up(est.memory_bytes))})")
    ways.append("run anyway (--force)")
    raise ScenarioError(
        f"this run would take {est.describe()}, over {' and '.join(over)}; "
        f"to go on: {'; '.join(ways)}"
    )


def _round_up(n: int) -> int:
    """n rounded up to 2 significant digits, so the suggested budget is enough."""
    s = 10 ** max(0, len(str(n)) - 2)
    return -(-n // s) * s
