"""ddlsim's packet model against ns-3 on the same flows: wall times, packets forwarded per second.

    PYTHONPATH=python python benchmarks/bench_packet_ns3.py                 # ddlsim only
    PYTHONPATH=python python benchmarks/bench_packet_ns3.py --ns3           # and the same runs in ns-3 3.44
    PYTHONPATH=python python benchmarks/bench_packet_ns3.py --ns3 --iterations 2   # a shorter ring run

Cases (a star of 10 Gbit/s links, 5 us each, 10 us host to host, PPP framing
as ns-3's point-to-point links):

- incast8: 8 NewReno senders x 2 MB into one port (100-packet queues);
- ring8: a ring all-reduce of 100 MB over 8 hosts (14 dependent steps of 12.5 MB);
- chapter5-like: 8 hosts, one switch, ring all-reduces of a 100 MB model one
  after the other with 420 ms of compute between them (a 560 ms iteration at
  R_cp_to_nw = 4: 140 ms of all-reduce at 10 Gbit/s), for 12 simulated
  seconds (21 iterations; --iterations changes it). The same traffic as the
  thesis' chapter 5 base case without its per-layer fusion and overlap.

ddlsim runs each case through `ddlsim.simulation.flowset` at fidelity
"packet" and reports the engine's packets forwarded (one packet crossing one
link counts once) per second of wall time; --ns3 runs the same flows in the
compiled ns-3 program (tools/packet_validation/ns3.py installs and builds it
on first use) and reports its wall time and the ratio. A machine shared with
other work inflates both; compare runs made side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "packet_validation"))

import validate  # noqa: E402  (tools/packet_validation/validate.py: the shared case parameters)

CH5_ITERATIONS = 21        # 12 s / 560 ms, rounded down
CH5_GAP_NS = 420_000_000   # compute between two all-reduces


def cases(iterations: int) -> list[validate.Case]:
    from ddlsim.simulation.flowset import Flow

    packet = {**validate.COMMON_PACKET, "transport": "newreno"}
    incast = [Flow(s, 0, 2_000_000, band=1) for s in range(1, 9)]
    return [
        validate.Case("incast8", "8 x 2 MB into one port", ["--scenario=incast", "--senders=8", "--bytes=2000000",
                                                             "--queue-limit=100"], 9, incast,
                      {**packet, "queue_limit": 100 + validate.NS3_DEVICE_QUEUE}, [("last", validate._last)]),
        validate.Case("ring8", "ring all-reduce of 100 MB, 8 hosts", ["--scenario=ring", "--hosts=8",
                                                                       "--bytes=100000000", "--queue-limit=1000"], 8,
                      validate.ring_flows(8, 100_000_000), {**packet, "queue_limit": 1000 + validate.NS3_DEVICE_QUEUE},
                      [("all-reduce", validate._last)]),
        validate.Case("chapter5-like", f"{iterations} ring all-reduces of 100 MB, 420 ms apart",
                      ["--scenario=ring", "--hosts=8", "--bytes=100000000", "--queue-limit=1000",
                       f"--iterations={iterations}", f"--gap-ns={CH5_GAP_NS}"], 8,
                      validate.ring_flows(8, 100_000_000, iterations, CH5_GAP_NS),
                      {**packet, "queue_limit": 1000 + validate.NS3_DEVICE_QUEUE}, [("end", validate._last)]),
    ]


def run_ddlsim(case: validate.Case) -> dict:
    from ddlsim.errors import DdlsimError
    from ddlsim.simulation.flowset import network, run_flows_raw

    net = network(validate.RATE_BPS, 2 * validate.LINK_DELAY_NS, "packet", case.packet)
    t0 = time.perf_counter()
    try:
        done, out = run_flows_raw(case.flows, net, case.hosts)
    except DdlsimError as exc:
        return {"error": str(exc)}
    wall = time.perf_counter() - t0
    packets = int(out.get("network", {}).get("packets_forwarded", 0))
    return {"wall_s": wall, "packets": packets, "sim_ns": max(r.end_ns for r in done)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns3", action="store_true", help="also run each case in ns-3 (installs and builds it once)")
    parser.add_argument("--cache", type=Path, default=None, help="ns-3 venv and build directory (see ns3.py)")
    parser.add_argument("--iterations", type=int, default=CH5_ITERATIONS, help="all-reduces of the chapter5-like case")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ns = parser.parse_args(argv)
    if ns.iterations < 1:
        print("error: --iterations must be at least 1", file=sys.stderr)
        return 2
    selected = cases(ns.iterations)
    if ns.cases:
        wanted = ns.cases.split(",")
        unknown = [w for w in wanted if w not in {c.name for c in selected}]
        if unknown:
            print(f"error: unknown case {unknown[0]!r}; cases: {', '.join(c.name for c in selected)}", file=sys.stderr)
            return 2
        selected = [c for c in selected if c.name in wanted]
    print(f"{'case':<15} {'sim ms':>10} {'ddlsim s':>9} {'packets':>10} {'Mpkt/s':>7} {'ns-3 s':>9} {'ns-3 cpu':>9} {'ns-3 pkts':>10} "
          f"{'ns-3 ms':>10} {'speed-up':>8}")
    for case in selected:
        ours = run_ddlsim(case)
        ref = {}
        if ns.ns3:
            try:
                flows, summary = validate.run_ns3(case, ns.cache)
            except validate.ns3.SetupError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            ref = {"wall_s": summary["wall_s"], "cpu_s": summary["cpu_s"], "packets": summary["packets_forwarded"],
                   "sim_ns": max(f["end_ns"] for f in flows)}
        if "error" in ours:
            print(f"{case.name:<15} ddlsim: {ours['error']}")
            ours = {}
        rate = ours["packets"] / ours["wall_s"] / 1e6 if ours.get("wall_s") and ours.get("packets") else None
        speedup = ref["wall_s"] / ours["wall_s"] if ours.get("wall_s") and ref.get("wall_s") else None

        def cell(value, fmt, width):
            return f"{'-' if value is None else format(value, fmt):>{width}}"

        print(f"{case.name:<15} {cell(ours.get('sim_ns', 0) / 1e6 if ours else None, '.3f', 10)} "
              f"{cell(ours.get('wall_s'), '.3f', 9)} {cell(ours.get('packets'), 'd', 10)} {cell(rate, '.2f', 7)} "
              f"{cell(ref.get('wall_s'), '.2f', 9)} {cell(ref.get('cpu_s'), '.2f', 9)} {cell(ref.get('packets'), 'd', 10)} "
              f"{cell(ref['sim_ns'] / 1e6 if ref else None, '.3f', 10)} {cell(speedup, '.0f', 8)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
