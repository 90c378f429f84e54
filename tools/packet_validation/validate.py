"""ddlsim's packet model against ns-3: the same small scenarios, completion times side by side.

    PYTHONPATH=python python tools/packet_validation/validate.py [--cases one_flow,ring8] [--cache DIR]

Each case is a star of hosts (10 Gbit/s links, 5 us each, so 10 us host to
host; MTU 1500 over PPP framing) carrying a few flows. ddlsim runs them
through `ddlsim.simulation.flowset` at fidelity "packet" (and "flow", for
reference); ns-3 runs them in tools/packet_validation/ns3_scenarios.cc,
built by ns3.py against the `ns3` 3.44 wheel in a virtual environment of its
own. The table shows, per case and metric, both completion times and the
difference of ddlsim from ns-3 in percent (target: within 5%).

The ns-3 side is never part of the test suite (it downloads ~100 MB and
compiles); see docs/packet-model.md, "Validation against ns-3".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ns3  # noqa: E402  (tools/packet_validation/ns3.py)

RATE_BPS = 10e9
LINK_DELAY_NS = 5_000          # per link; ddlsim's latency is host to host (two links)
MTU = 1500
# ns-3 keeps one packet in the point-to-point device queue under the queue disc
# (ns3_scenarios.cc sets its size to 1): a port holds the queue disc's limit
# plus that one waiting packet, and RED counts only the queue disc's packets.
NS3_DEVICE_QUEUE = 1
# A receive window below the 1000-packet queues (718 segments): a lone sender never overflows its own NIC
# queue in slow start, so the case has no loss (ns-3 drops at the sender's queue disc; Linux would not).
RWND_1M = 1_048_576
# ddlsim's hosts never drop at their own NIC (the sender waits for room, as Linux's TCP small queues); in ns-3 the
# closest is a NIC queue disc too deep to fill: the `_deepnic` cases.
DEEP_NIC = 100_000

# The packet-model parameters every case shares: each one that differs from
# ddlsim's defaults is what ns-3 does (PPP framing, one limit for the whole
# port as PfifoFastQueueDisc, no restart after idle).
COMMON_PACKET = {
    "mtu": MTU,
    "framing": "ppp",
    "tcp_timestamps": False,
    "bands": 3,
    "queue_limit_unit": "packets",
    "queue_scope": "port",
    "initial_window": 10,
    "rto_min_ns": 200_000_000,
    "rto_initial_ns": 1_000_000_000,
    "delayed_ack": False,
    "receive_window": 6_291_456,
    "restart_after_idle": False,
    "connection_per_message": False,
    "dctcp_g": 0.0625,
}


@dataclass
class Case:
    name: str
    what: str
    ns3_args: list[str]
    hosts: int
    flows: list  # of flowset.Flow
    packet: dict
    metrics: list = field(default_factory=list)  # (label, function(list of (start_ns, end_ns)) -> ns)


def _fct(i):
    return lambda done: done[i][1] - done[i][0]


def _last(done):
    return max(e for _, e in done) - min(s for s, _ in done)


def _first(done):
    return min(e - s for s, e in done)


def _mean(done):
    return statistics.fmean(e - s for s, e in done)


def ring_flows(hosts: int, model_bytes: int, iterations: int = 1, gap_ns: int = 0) -> list:
    """The ring all-reduce of ns3_scenarios.cc (--scenario=ring), flow for flow in the same order:
    2(N-1) steps of model/N bytes to the successor, each step once the predecessor's previous one arrived."""
    from ddlsim.simulation.flowset import Flow

    chunk = model_bytes // hosts
    steps = 2 * (hosts - 1)
    flows = []

    def index(it, step, h):
        return (it * steps + step) * hosts + h

    for it in range(iterations):
        for step in range(steps):
            for h in range(hosts):
                pred = (h - 1) % hosts
                if step > 0:
                    flows.append(Flow(h, (h + 1) % hosts, chunk, band=1, after=index(it, step - 1, pred)))
                elif it > 0:
                    flows.append(Flow(h, (h + 1) % hosts, chunk, band=1, after=index(it - 1, steps - 1, pred), gap_ns=gap_ns))
                else:
                    flows.append(Flow(h, (h + 1) % hosts, chunk, band=1))
    return flows


def cases() -> list[Case]:
    from ddlsim.simulation.flowset import Flow

    def packet(**over):
        return {**COMMON_PACKET, **over}

    incast = [Flow(s, 0, 2_000_000, band=1) for s in range(1, 9)]
    return [
        Case("one_flow_1mb", "1 NewReno flow of 1 MB, no loss (slow start + serialisation)",
             ["--scenario=one_flow", "--bytes=1000000", "--queue-limit=1000"], 2,
             [Flow(0, 1, 1_000_000, band=1)], packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("fct", _fct(0))]),
        Case("one_flow", "1 NewReno flow of 10 MB (slow start overflows the sender's 1000-packet queue)",
             ["--scenario=one_flow", "--bytes=10000000", "--queue-limit=1000"], 2,
             [Flow(0, 1, 10_000_000, band=1)], packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("fct", _fct(0))]),
        Case("one_flow_deepnic", "one_flow with 100000-packet queues at the hosts' NICs: no drop at the sender",
             ["--scenario=one_flow", "--bytes=10000000", "--queue-limit=1000", f"--host-queue-limit={DEEP_NIC}"], 2,
             [Flow(0, 1, 10_000_000, band=1)], packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("fct", _fct(0))]),
        Case("incast8_newreno", "8 NewReno senders x 2 MB into one port, 100-packet queues",
             ["--scenario=incast", "--senders=8", "--bytes=2000000", "--transport=newreno", "--queue-limit=100"], 9,
             incast, packet(transport="newreno", queue_limit=100 + NS3_DEVICE_QUEUE),
             [("last", _last), ("mean", _mean), ("first", _first)]),
        Case("incast8_dctcp", "8 DCTCP senders x 2 MB into one port, 100-packet queues, K = 65",
             ["--scenario=incast", "--senders=8", "--bytes=2000000", "--transport=dctcp", "--queue-limit=100",
              "--ecn-k=65"], 9,
             incast, packet(transport="dctcp", queue_limit=100 + NS3_DEVICE_QUEUE, ecn_threshold=65 + NS3_DEVICE_QUEUE),
             [("last", _last), ("mean", _mean), ("first", _first)]),
        Case("incast8_dctcp_deep", "8 DCTCP senders x 2 MB into one port, 1000-packet queues (no drop), K = 65",
             ["--scenario=incast", "--senders=8", "--bytes=2000000", "--transport=dctcp", "--queue-limit=1000",
              "--ecn-k=65"], 9,
             incast, packet(transport="dctcp", queue_limit=1000 + NS3_DEVICE_QUEUE, ecn_threshold=65 + NS3_DEVICE_QUEUE),
             [("last", _last), ("mean", _mean), ("first", _first)]),
        Case("two_bands", "a band-0 and a band-2 NewReno flow of 20 MB into one port (pfifo_fast, 1000 packets)",
             ["--scenario=two_bands", "--bytes=20000000", "--queue-limit=1000"], 3,
             [Flow(1, 0, 20_000_000, band=0), Flow(2, 0, 20_000_000, band=2)],
             packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("high", _fct(0)), ("low", _fct(1))]),
        Case("two_bands_rwnd1m", "two_bands with a 1 MiB receive window: no loss, the high band as if alone",
             ["--scenario=two_bands", "--bytes=20000000", "--queue-limit=1000", f"--rwnd={RWND_1M}"], 3,
             [Flow(1, 0, 20_000_000, band=0), Flow(2, 0, 20_000_000, band=2)],
             packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE, receive_window=RWND_1M),
             [("high", _fct(0)), ("low", _fct(1))]),
        Case("two_bands_deepnic", "two_bands with 100000-packet queues at the hosts' NICs (drops at the switch only)",
             ["--scenario=two_bands", "--bytes=20000000", "--queue-limit=1000", f"--host-queue-limit={DEEP_NIC}"], 3,
             [Flow(1, 0, 20_000_000, band=0), Flow(2, 0, 20_000_000, band=2)],
             packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("high", _fct(0)), ("low", _fct(1))]),
        Case("ring8", "ring all-reduce of 100 MB over 8 hosts (14 steps of 12.5 MB)",
             ["--scenario=ring", "--hosts=8", "--bytes=100000000", "--queue-limit=1000"], 8,
             ring_flows(8, 100_000_000), packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("all-reduce", _last)]),
        Case("ring8_deepnic", "ring8 with 100000-packet queues at the hosts' NICs: no drop",
             ["--scenario=ring", "--hosts=8", "--bytes=100000000", "--queue-limit=1000", f"--host-queue-limit={DEEP_NIC}"], 8,
             ring_flows(8, 100_000_000), packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE),
             [("all-reduce", _last)]),
        Case("ring8_rwnd1m", "ring8 with a 1 MiB receive window: no loss (headers + one slow start)",
             ["--scenario=ring", "--hosts=8", "--bytes=100000000", "--queue-limit=1000", f"--rwnd={RWND_1M}"], 8,
             ring_flows(8, 100_000_000),
             packet(transport="newreno", queue_limit=1000 + NS3_DEVICE_QUEUE, receive_window=RWND_1M),
             [("all-reduce", _last)]),
    ]


def run_ddlsim(case: Case, fidelity: str) -> tuple[list | None, str]:
    """((start, end) per flow, or None, and a note) of the case in ddlsim at `fidelity`."""
    from ddlsim.errors import DdlsimError
    from ddlsim.simulation.flowset import network, run_flows

    net = network(RATE_BPS, 2 * LINK_DELAY_NS, fidelity, case.packet if fidelity == "packet" else None)
    try:
        done = run_flows(case.flows, net, case.hosts)
    except DdlsimError as exc:
        return None, str(exc)
    return [(r.start_ns, r.end_ns) for r in done], ""


def run_ns3(case: Case, cache: Path | None) -> tuple[list, dict]:
    args = [*case.ns3_args, f"--rate={int(RATE_BPS)}bps", f"--delay={LINK_DELAY_NS}ns", f"--mtu={MTU}"]
    flows, summary = ns3.run(args, cache)
    if len(flows) != len(case.flows) or any((f["src"], f["dst"], f["bytes"]) != (g.src, g.dst, g.bytes)
                                            for f, g in zip(flows, case.flows)):
        raise ns3.SetupError(f"{case.name}: ns-3 ran other flows than ddlsim (the case tables disagree)")
    if summary["completed"] != len(flows):
        raise ns3.SetupError(f"{case.name}: only {summary['completed']} of {len(flows)} flows finished in ns-3")
    return [(f["start_ns"], f["end_ns"]) for f in flows], summary


def _ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--cache", type=Path, default=None, help="ns-3 venv and build directory (see ns3.py)")
    parser.add_argument("--skip-ns3", action="store_true", help="ddlsim only")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    parser.add_argument("--ns3-from", type=Path, action="append", default=[], metavar="FILE",
                        help="take ns-3's numbers from the --json of an earlier run instead of running ns-3 (repeatable)")
    ns = parser.parse_args(argv)
    earlier: dict = {}
    for path in ns.ns3_from:
        try:
            for row in json.loads(path.read_text()):
                if row.get("ns3_ns") is not None:
                    earlier[(row["case"], row["metric"])] = row
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"error: {path}: not the --json of an earlier validate.py run ({exc})", file=sys.stderr)
            return 2
    selected = cases()
    names = [c.name for c in selected]
    if ns.cases:
        wanted = ns.cases.split(",")
        unknown = [w for w in wanted if w not in names]
        if unknown:
            print(f"error: unknown case {unknown[0]!r}; cases: {', '.join(names)}", file=sys.stderr)
            return 2
        selected = [c for c in selected if c.name in wanted]
    rows = []
    notes = []
    print(f"{'case':<20} {'metric':<11} {'ddlsim flow ms':>14} {'ddlsim pkt ms':>13} {'ns-3 ms':>10} {'diff %':>7}  ns-3 wall s")
    for case in selected:
        flow_level, _ = run_ddlsim(case, "flow")
        packet_level, why = run_ddlsim(case, "packet")
        if packet_level is None:
            notes.append(f"{case.name}: ddlsim refused fidelity 'packet': {why}")
        reference, summary = (None, {})
        if all((case.name, label) in earlier for label, _ in case.metrics):
            summary = {"from": True}
        elif not ns.skip_ns3:
            try:
                reference, summary = run_ns3(case, ns.cache)
            except ns3.SetupError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        for label, metric in case.metrics:
            f_ns = metric(flow_level) if flow_level else None
            p_ns = metric(packet_level) if packet_level else None
            r_ns = metric(reference) if reference else None
            if summary.get("from"):
                old = earlier[(case.name, label)]
                r_ns = old["ns3_ns"]
                summary = {"from": True, "wall_s": old.get("ns3_wall_s"), "cpu_s": old.get("ns3_cpu_s"),
                           "packets_forwarded": old.get("ns3_packets_forwarded"), "drops": old.get("ns3_drops"),
                           "ecn_marks": old.get("ns3_ecn_marks")}
            diff = None if p_ns is None or r_ns is None else 100.0 * (p_ns - r_ns) / r_ns
            rows.append({"case": case.name, "metric": label, "ddlsim_flow_ns": f_ns, "ddlsim_packet_ns": p_ns,
                         "ns3_ns": r_ns, "diff_percent": diff, "ns3_wall_s": summary.get("wall_s"), "ns3_cpu_s": summary.get("cpu_s"),
                         "ns3_packets_forwarded": summary.get("packets_forwarded"), "ns3_drops": summary.get("drops"),
                         "ns3_ecn_marks": summary.get("ecn_marks")})
            wall = f"{summary['wall_s']:.2f}" if summary.get("wall_s") is not None else "-"
            print(f"{case.name:<20} {label:<11} {_ms(f_ns):>14} {_ms(p_ns):>13} {_ms(r_ns):>10} "
                  f"{'-' if diff is None else f'{diff:+.1f}':>7}  {wall}", flush=True)
    for note in notes:
        print(note)
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
