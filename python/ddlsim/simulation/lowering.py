"""Strategy-side choices made before the engine runs, and the engine's
input: the gradient-grouping pass, parameter placement on servers, server
update cost, rank placement on hosts and racks, and the plain-data
training and network descriptions the Rust engine reads (see
crates/ddlsim-core/src/lower/training.rs and network/config.rs)."""

from __future__ import annotations


import heapq
import json
import math

from ..errors import ScenarioError
from ..units import parse_duration_ns
from . import algorithms, band_policy, grouping
from .scenario import Scenario
from ..workload.model import Model

# Above this many logged collective steps, "auto" detail logs collectives only.
AUTO_STEP_ROW_LIMIT = 2_000_000
# Engine time limit (2**62 ns, about 146 years): scenarios whose serial work could pass it are refused.
MAX_TIME_NS = 1 << 62


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


def group_per_tensor(model: Model) -> list[dict]:
    """The grouping pass of wait-free backpropagation: one group per tensor."""
    return grouping.per_tensor(model)


def allreduce_cost(scenario: Scenario) -> grouping.AllReduceCost:
    """MG-WFBP's T_ar(M) = a + bM for the scenario: the idle-network cost of
    its algorithm's schedule (:meth:`ddlsim.simulation.algorithms.Algorithm.cost`;
    Table II's for ring, recursive doubling and halving-doubling on a power
    of two) with alpha = the host latency, beta = 8 / host bandwidth per
    byte, gamma = the strategy's reduction cost. An approximation on fabrics
    where steps cross other links or contend."""
    net = scenario.network
    algorithm = algorithms.get(getattr(scenario.strategy, "algorithm", "ring"))
    gamma = scenario.strategy.gamma_ns_per_byte if scenario.strategy.kind == "ring" else 0.0
    return algorithm.cost(scenario.workers, float(net.latency_ns), 8e9 / net.bandwidth_bps, gamma,
                          ranks_per_host=net.ranks_per_host, intra_alpha_ns=float(net.intra_host_latency_ns),
                          intra_beta_ns_per_byte=8e9 / net.intra_host_bandwidth_bps)


def build_groups(scenario: Scenario, model: Model, times_ns: list[tuple[int, int]]) -> list[dict]:
    """The training document's groups from the scenario's grouping pass."""
    g = scenario.strategy.grouping
    bwd = [b for _, b in times_ns]
    if g.kind == "per-tensor":
        return grouping.per_tensor(model)
    if g.kind == "synceasgd":
        return grouping.synceasgd(model)
    if g.kind == "mg-wfbp":
        cost = allreduce_cost(scenario)
        if g.a is not None:
            cost = grouping.AllReduceCost(float(parse_duration_ns(g.a)), float(g.b_ns_per_byte))
        return grouping.mg_wfbp(model, bwd, cost, g.method)
    if g.kind == "fusion":
        return grouping.horovod_fusion(model, bwd, g.threshold_bytes, g.cycle_time_ns)
    if g.kind == "thesis-fusion":
        return grouping.thesis_fusion(model, g.fusion_buffer_bytes)
    if g.kind == "ddp":
        return grouping.ddp(model, g.bucket_cap_mb)
    if g.kind == "fixed":
        return grouping.fixed(model, g.size_bytes)
    if g.kind == "groups":
        return grouping.user_groups(model, g.groups)
    raise ScenarioError(f"unknown grouping kind {g.kind!r}")  # pragma: no cover - validated by the scenario


def steps_per_allreduce(algorithm: str, n: int, ranks_per_host: int = 1, messages: int = 1) -> int:
    """Point-to-point steps (send rows) a rank logs per all-reduce over `n` ranks, on average
    (see :meth:`ddlsim.simulation.algorithms.Algorithm.steps_per_rank`)."""
    return algorithms.get(algorithm).steps_per_rank(n, ranks_per_host, messages)


def steps_per_iteration(scenario: Scenario, group_bytes: list[int]) -> int:
    """All-reduce steps (send rows) one rank logs per iteration for these
    gradient groups; a partitioned ring logs one ring per message of a group."""
    strategy = scenario.strategy
    n, per_host = scenario.workers, scenario.network.ranks_per_host
    chunk = getattr(strategy, "chunk_bytes", 0)
    return sum(steps_per_allreduce(strategy.algorithm, n, per_host, max(1, -(-b // chunk)) if chunk else 1) for b in group_bytes)


def resolve_trace_detail(scenario: Scenario, group_bytes: list[int]) -> str:
    if scenario.trace_detail != "auto":
        return scenario.trace_detail
    if scenario.strategy.kind != "ring" or scenario.network.collective_model == "closed-form":
        return "step"  # PS rows, or closed-form collectives (no step rows at all)
    rows = scenario.iterations * scenario.workers * steps_per_iteration(scenario, group_bytes)
    return "step" if rows <= AUTO_STEP_ROW_LIMIT else "collective"

def host_of_rank(scenario: Scenario) -> list[int]:
    """Host of every rank: workers first (ranks_per_host to a host), then servers.

    Worker hosts fill racks in order (`packed`) or round-robin over racks
    (`spread`); servers get hosts of their own after the workers'
    (`separate`) or share worker s's host (`colocated`).
    """
    net = scenario.network
    per_host = net.ranks_per_host
    worker_hosts = math.ceil(scenario.workers / per_host)
    host_index = list(range(worker_hosts))
    if net.topology == "leaf-spine" and net.rack_placement == "spread":
        leaves = math.ceil(worker_hosts / net.hosts_per_leaf)
        host_index = [(h % leaves) * net.hosts_per_leaf + h // leaves for h in range(worker_hosts)]
    hosts = [host_index[w // per_host] for w in range(scenario.workers)]
    next_host = max(host_index) + 1 if host_index else 0
    for s in range(scenario.servers):
        if net.server_hosts == "colocated":
            hosts.append(hosts[s % scenario.workers])
        else:
            hosts.append(next_host + s)
    return hosts


def network_document(scenario: Scenario) -> dict:
    net = scenario.network
    if net.topology == "star":
        topology: dict = {"kind": "star"}
    else:
        topology = {
            "kind": "leaf_spine",
            "hosts_per_leaf": net.hosts_per_leaf,
            "spines": net.spines,
            "oversubscription": net.oversubscription,
            "routing": net.routing,
        }
    document = {
        "fidelity": net.fidelity,
        "bandwidth_bps": net.bandwidth_bps,
        "latency_ns": net.latency_ns,
        "topology": topology,
        "intra_host_bandwidth_bps": net.intra_host_bandwidth_bps,
        "intra_host_latency_ns": net.intra_host_latency_ns,
        "record_flows": net.record_flows,
    }
    if net.fidelity == "packet":
        document["packet"] = packet_document(net.packet_options)
    tenants = tenant_documents(scenario)
    if tenants:
        document["tenants"] = tenants
        document["record_flows"] = True  # tenant flows are only seen in the flows table
    if net.hosts is not None:
        document["hosts"] = fabric_hosts(scenario)
    return document


def fabric_hosts(scenario: Scenario) -> int:
    """Hosts in the fabric: network.hosts, checked to hold the ranks' hosts, else the ranks' hosts."""
    used = max(host_of_rank(scenario)) + 1
    hosts = scenario.network.hosts
    if hosts is None:
        return used
    if hosts < used:
        servers = f" and {scenario.servers} server(s)" if scenario.servers else ""
        raise ScenarioError(
            f"network.hosts = {hosts} is fewer than the {used} hosts the ranks use ({scenario.workers} workers{servers}, "
            f"{scenario.network.ranks_per_host} per host); set network.hosts (--hosts) to at least {used}, or remove it"
        )
    return hosts


def tenant_rate_per_host(tenant, bandwidth_bps: float, mean_size_bytes: float) -> float:
    """Poisson arrivals per second per sending host: the given flows per second, or
    rate = load x link rate / (8 x mean flow size), so that a host sends `load` of its link rate."""
    if tenant.flows_per_second_per_host is not None:
        return float(tenant.flows_per_second_per_host)
    return tenant.load * bandwidth_bps / (8 * mean_size_bytes)


def tenant_documents(scenario: Scenario) -> list[dict]:
    """The engine's "tenants" list (docs/tenants.md): ids 1, 2, ... in [[tenant]] order."""
    from ..workload import flow_sizes

    if not scenario.tenant:
        return []
    hosts = fabric_hosts(scenario)
    out = []
    for index, t in enumerate(scenario.tenant):
        label = f"tenant {index + 1}" + (f" ({t.name})" if t.name else "")
        named = [h for pair in (t.pairs or []) for h in pair] + list(t.hosts or [])
        if hosts < 2 and not named:
            raise ScenarioError(f"{label}: the fabric has one host, and tenant flows go between two; "
                                "add hosts with network.hosts (--hosts)")
        outside = sorted({h for h in named if h >= hosts})
        if outside:
            raise ScenarioError(f"{label}: host {outside[0]} is not in the fabric (hosts 0 to {hosts - 1}); "
                                f"set network.hosts (--hosts) to at least {outside[-1] + 1} or use hosts below {hosts}")
        cdf = flow_sizes.resolve(t.sizes, scenario.base_dir)
        points = cdf.engine_points()
        out.append({
            "id": index + 1,
            "band": t.band,
            "seed": scenario.tenant_seed(index),
            "cdf": points,
            "rate_per_host": tenant_rate_per_host(t, scenario.network.bandwidth_bps, flow_sizes.mean_bytes(points)),
            "pairs": [list(p) for p in t.pairs] if t.pairs is not None else None,
            "hosts": list(t.hosts) if t.hosts is not None else None,
            "start_ns": t.start_ns,
            "stop_ns": t.stop_ns,
        })
    return out


def packet_document(p) -> dict:
    """The engine's "packet" object (every field given, times in ns) of a
    :class:`~ddlsim.simulation.scenario.PacketConfig`."""
    return {
        "mtu": p.mtu,
        "framing": p.framing,
        "tcp_timestamps": p.tcp_timestamps,
        "transport": p.transport,
        "bands": p.bands,
        "queue_limit": p.queue_limit,
        "queue_limit_unit": p.queue_limit_unit,
        "queue_scope": p.queue_scope,
        "ecn_threshold": p.ecn_threshold,
        "initial_window": p.initial_window,
        "rto_min_ns": p.rto_min_ns,
        "rto_initial_ns": p.rto_initial_ns,
        "delayed_ack": p.delayed_ack,
        "delayed_ack_timeout_ns": p.delayed_ack_timeout_ns,
        "receive_window": p.receive_window,
        "restart_after_idle": p.restart_after_idle,
        "connection_per_message": p.connection_per_message,
        "dctcp_g": p.dctcp_g,
        "queue_sample_ns": p.queue_sample_ns,
        "queue_sample_cap": p.queue_sample_cap,
    }


def training_document(scenario: Scenario, model: Model, times_ns: list[tuple[int, int]]) -> dict:
    """The training description the engine lowers into a workload graph."""
    strategy = scenario.strategy
    groups = build_groups(scenario, model, times_ns)
    extra = {}
    if strategy.kind == "ps":
        split = strategy.placement == "split"
        owner = [0] * len(groups) if split else place_tensors([g["bytes"] for g in groups], strategy.servers, strategy.placement)
        update_bytes_per_ns = strategy.update_bandwidth_bps / 8e9
        n = scenario.workers
        for g, server in zip(groups, owner):
            g["server"] = server
            # The server reads every worker's gradient once (N x size bytes) and
            # reduces N - 1 of them into the first (gamma per byte).
            g["update_ns"] = math.ceil(g["bytes"] * n / update_bytes_per_ns + (n - 1) * g["bytes"] * strategy.gamma_ns_per_byte)
        sync = {"kind": "ps", "servers": strategy.servers}
        if split:
            extra["ps_split"] = True
        if strategy.distribution != "immediate":
            extra["distribution"] = strategy.distribution.replace("-", "_")
        if not strategy.server_cost.is_zero():
            extra["server_cost"] = strategy.server_cost.engine()
        if not strategy.client_cost.is_zero():
            extra["client_cost"] = strategy.client_cost.engine()
        if not strategy.message_latency.is_empty():
            extra["message_latency"] = strategy.message_latency.engine()
        if strategy.asynchronous:
            extra["asynchronous"] = True
            if strategy.staleness is not None:
                extra["staleness"] = strategy.staleness
    else:
        sync = {"kind": "allreduce", "algorithm": algorithms.get(strategy.algorithm).engine_name}
    _check_time_budget(scenario, times_ns)
    if scenario.stagger_ns:
        extra["stagger_ns"] = scenario.stagger_ns
        extra["stagger"] = scenario.stagger_mode
    if getattr(strategy, "chunk_bytes", 0):
        extra["chunk_bytes"] = strategy.chunk_bytes
    if strategy.kind == "ring" and strategy.gamma_ns_per_byte:
        extra["gamma_ns_per_byte"] = strategy.gamma_ns_per_byte
    if strategy.kind == "ring" and strategy.partition_size:
        extra["partition_bytes"] = strategy.partition_size
    if strategy.kind == "ring" and strategy.credit_size:
        extra["credit_bytes"] = strategy.credit_size
    if scenario.network.collective_model == "closed-form" and strategy.kind == "ring":
        extra["collective_model"] = "closed_form"
        if scenario.rank_classes == "auto":
            extra["rank_classes"] = True  # the engine uses them where every worker is alike
    if strategy.kind == "ps" and strategy.in_network != "none":
        extra["in_network"] = {"mode": strategy.in_network, "switch_memory": strategy.switch_memory_bytes}
    if strategy.kind == "ring" and strategy.in_network == "multicast":
        extra["in_network"] = {"mode": "multicast"}
    if scenario.straggler or scenario.model.rank_times != "median":
        from .variation import variation_document  # per-rank compute: replay at scale, stragglers

        extra.update(variation_document(scenario, model, times_ns, MAX_TIME_NS))
    if scenario.model.idle_wake is not None:
        from .overheads import idle_wake_document  # compute after a wait (a replayed DDP capture)

        extra["idle_wake"] = idle_wake_document(scenario, model, times_ns)
    return {
        "workers": scenario.workers,
        "iterations": scenario.iterations,
        "seed": scenario.seed,
        "sync": sync,
        "jitter": scenario.jitter,
        "barrier": scenario.barrier,
        "header_bytes": getattr(strategy, "header_bytes", 0),
        "stream_policy": strategy.stream_policy,
        "preemption": strategy.preemption in ("chunk", "message"),
        "preempt_at_messages": strategy.preemption == "message",
        "priority_bands": scenario.network.priority_bands,
        "job_band": scenario.network.job_band,
        **({"group_bands": band_policy.scenario_bands(scenario, times_ns, groups, allreduce_cost(scenario))}
           if scenario.network.band_policy == "adaptive" else {}),
        "layers": [{"fwd_ns": f, "bwd_ns": b} for f, b in times_ns],
        "groups": groups,
        "host_of_rank": host_of_rank(scenario),
        **extra,
    }


def _check_time_budget(scenario: Scenario, times_ns: list[tuple[int, int]]) -> None:
    compute = sum(f + b for f, b in times_ns) * scenario.iterations
    if compute * (1 + 6 * scenario.jitter) >= MAX_TIME_NS:
        raise ScenarioError(
            f"the compute of {scenario.iterations} iterations ({compute} ns) would overflow the engine's "
            f"64-bit nanosecond clock (limit {MAX_TIME_NS} ns); use fewer iterations or shorter layer times"
        )


def engine_json(document: dict) -> str:
    """The document as the engine reads it; groups lose their log-only keys (`tensors`, `kind`)."""
    if isinstance(document.get("groups"), list):
        document = {**document, "groups": grouping.engine_groups(document["groups"])}
    return json.dumps(document, separators=(",", ":"))
