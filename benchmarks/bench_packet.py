"""Packet-level model benchmark (issue 17).

The thesis' chapter 5 base case, the minimum wall time of `--repeat` runs,
and the packets it forwards per second (one packet crossing one link counts
once, ACKs included):

**The thesis' chapter 5 base case**: 8 workers, one switch, 10 Gbit/s,
   10 us, the thesis' synthetic 50-layer 100 MB model with compute scaled
   to R_cp_to_nw = 4 (560 ms of compute per iteration), ring all-reduce,
   `--seconds` simulated seconds (12 by default), no background traffic.
   The same scenario also runs at flow level in the same process, as the
   baseline the packet model's cost is stated against.

    python benchmarks/bench_packet.py
    python benchmarks/bench_packet.py --repeat 3 --seconds 12
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from ddlsim import _core  # noqa: E402


def chapter5(seconds: float, fidelity: str) -> tuple[float, dict]:
    """Wall seconds and engine output of the chapter 5 base case at `fidelity`."""
    from ddlsim.simulation.lowering import engine_json, network_document, resolve_trace_detail, training_document
    from ddlsim.simulation.model_build import build_model, layer_times_ns
    from ddlsim.simulation.scenario import scenario_from_dict

    iterations = max(1, round(seconds / 0.560))
    sc = scenario_from_dict({
        "workers": 8, "iterations": iterations, "trace_detail": "collective",
        "model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator", "layers": 50, "model_size": "100MB", "compute": "560ms"}},
        "strategy": {"kind": "ring", "algorithm": "ring"},
        "network": {"fidelity": fidelity, "bandwidth": "10Gbps", "latency": "10us", "topology": "star"},
    })
    model = build_model(sc.model, None)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    detail = resolve_trace_detail(sc, [g["bytes"] for g in training["groups"]])
    t0 = time.perf_counter()
    out = _core.simulate_training_json(engine_json(training), engine_json(network_document(sc)), detail, None)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the minimum wall time counts")
    ap.add_argument("--seconds", type=float, default=12.0, help="simulated seconds of the chapter 5 case")
    args = ap.parse_args(argv)

    flow_wall = min(chapter5(args.seconds, "flow")[0] for _ in range(args.repeat))
    runs = [chapter5(args.seconds, "packet") for _ in range(args.repeat)]
    wall, out = min(runs, key=lambda r: r[0])
    net = out["network"]
    pps = net["packets_forwarded"] / wall
    iterations = max(1, round(args.seconds / 0.560))
    print(f"chapter 5 base case ({iterations} iterations, {out['makespan_ns'] / 1e9:.3f} simulated s):")
    print(f"  packet level: {wall:.2f} s wall, {net['packets_forwarded']:,} packets forwarded, {pps / 1e6:.2f} M packets/s, "
          f"{net['drops']} drops, {net['retransmits']} retransmits, {net['timeouts']} timeouts")
    print(f"  flow level (baseline, same run): {flow_wall:.3f} s wall; packet / flow wall = {wall / flow_wall:.0f}x")
    print(f"  target: >= 5 M packets/s on one core -> {'met' if pps >= 5e6 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
