"""ddlsim's Chakra export run through ASTRA-sim's analytical backend, each rank's finish time against ddlsim's.

    DDLSIM_ASTRA_SIM=$(tools/build_astra_sim.sh | tail -n1) python benchmarks/astra_sim_compare.py [--case NAME ...]

ASTRA-sim is a reference simulator built by tools/build_astra_sim.sh (never a dependency of ddlsim). Each case
simulates a job with ddlsim (star topology, ``trace_detail = "collective"``), writes its Chakra files, runs them in
ASTRA-sim (``Switch`` topology of the same rank count, the same link rate in ASTRA-sim's GB/s of 2^30 bytes, half
ddlsim's host-to-host latency per hop: ASTRA-sim's switch charges it on each of its two hops, ddlsim splits it over
the star's two links; ring collectives, one chunk)
and prints one Markdown table row per case: the last rank's finish in each simulator and the largest per-rank
difference. docs/interop.md has the measured table and the causes of the differences.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ddlsim
from ddlsim.trace import write_chakra

MIB64_LAYER = [{"name": "grad", "params": 16 * 2**20, "fwd_ms": 0.0, "bwd_ms": 0.0}]  # 64 MiB of fp32 gradients


# ASTRA-sim's reduction cost: each reduce step of a ring costs 3 x chunk bytes / local-mem-bw ns (PacketBundle: one
# write and two reads at local-mem-bw bytes per ns, each truncated to whole ns). So large a bandwidth makes it 0;
# ddlsim's gamma_ns_per_byte = 3 / local-mem-bw is the same model.
NO_REDUCTION_COST = 1e15


def scenario(model: dict, ranks: int, bandwidth: str, latency: str, iterations: int = 1, kind: str = "ring",
             gamma: float = 0.0, **system) -> dict:
    strategy = {"kind": "ring", "algorithm": "ring"} if kind == "ring" else {"kind": "ps", "servers": 1}
    if gamma:
        strategy["gamma_ns_per_byte"] = gamma
    return {"scenario": {"model": model, "workers": ranks, "iterations": iterations, "trace_detail": "collective",
                         "strategy": strategy, "network": {"bandwidth": bandwidth, "latency": latency, "topology": "star"}},
            "system": {"local-mem-bw": 3 / gamma if gamma else NO_REDUCTION_COST, **system}}


CASES = {
    "lenet5-ring-4": scenario({"name": "lenet5"}, 4, "10Gbps", "500ns"),
    "lenet5-ring-4-2it": scenario({"name": "lenet5"}, 4, "10Gbps", "500ns", iterations=2),
    "resnet50-ring-8": scenario({"name": "resnet50"}, 8, "10Gbps", "5us"),
    # no compute before the collective: ASTRA-sim aborts with endpoint-delay 0 (an event at its own current time,
    # EventQueue.cc "get_event_time() > current_time"); 1 ns per endpoint lets it run
    "allreduce-64MiB-8": scenario({"name": "allreduce64", "layers": MIB64_LAYER}, 8, "10Gbps", "5us",
                                  **{"endpoint-delay": 1}),
    "resnet50-ring-16": scenario({"name": "resnet50"}, 16, "10Gbps", "5us"),
    "resnet50-ring-8-2it": scenario({"name": "resnet50"}, 8, "10Gbps", "5us", iterations=2),
    "resnet50-ring-8-gamma": scenario({"name": "resnet50"}, 8, "10Gbps", "5us", gamma=3 / 1600),
    "lenet5-ps-4": scenario({"name": "lenet5"}, 4, "10Gbps", "500ns", kind="ps"),
    "lenet5-ps-1": scenario({"name": "lenet5"}, 1, "10Gbps", "500ns", kind="ps"),  # one worker: no link shared
}


def astra_configs(directory: Path, npus: int, bandwidth_bps: float, latency_ns: float, **overrides) -> list[str]:
    network = directory / "network.yml"
    network.write_text(f"topology: [ Switch ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bandwidth_bps / 8 / 2**30!r} ]\n"
                       f"latency: [ {latency_ns / 2!r} ]\n")
    system = directory / "system.json"
    system.write_text(json.dumps({
        "scheduling-policy": "FIFO", "endpoint-delay": 0, "active-chunks-per-dimension": 1, "preferred-dataset-splits": 1,
        "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
        "collective-optimization": "baseline", "local-mem-bw": NO_REDUCTION_COST, "boost-mode": 0, **overrides}))
    memory = directory / "memory.json"
    memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    return [f"--system-configuration={system}", f"--network-configuration={network}",
            f"--remote-memory-configuration={memory}"]


def rate_bps(text: str) -> float:
    return float(text.removesuffix("Gbps")) * 1e9


def latency_ns(text: str) -> float:
    return float(text.removesuffix("ns")) if text.endswith("ns") else float(text.removesuffix("us")) * 1e3


def run_case(binary: str, name: str, case: dict, directory: Path) -> dict:
    sc = case["scenario"]
    result = ddlsim.simulate(sc)
    write_chakra(result.events, directory / "job")
    ends = result.events.to_pandas(["rank", "kind", "end_ns"])
    ends = ends[~ends["kind"].isin(["barrier", "marker"])].groupby("rank")["end_ns"].max()
    npus = int(ends.index.max()) + 1
    net = sc["network"]
    started = time.perf_counter()
    run = subprocess.run([binary, f"--workload-configuration={directory / 'job'}",
                          *astra_configs(directory, npus, rate_bps(net["bandwidth"]), latency_ns(net["latency"]),
                                        **case["system"])],
                         capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    out = run.stdout + run.stderr
    finished = {int(r): int(t) for r, t in re.findall(r"sys\[(\d+)\],? finished,? (\d+) cycles", out)}
    row = {"case": name, "ranks": npus, "returncode": run.returncode, "finished": len(finished), "astra_seconds": seconds,
           "ddlsim_ns": int(ends.max()), "astra_ns": max(finished.values()) if finished else None,
           "max_rank_diff_ns": max((abs(finished[r] - int(ends[r])) for r in finished if r in ends.index), default=None)}
    if run.returncode != 0 or len(finished) != npus:
        row["tail"] = out[-600:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these cases (repeatable)")
    parser.add_argument("--binary", default=os.environ.get("DDLSIM_ASTRA_SIM"),
                        help="ASTRA-sim analytical binary (default: $DDLSIM_ASTRA_SIM)")
    args = parser.parse_args(argv)
    if not args.binary:
        print("astra_sim_compare.py: no ASTRA-sim binary: set DDLSIM_ASTRA_SIM or --binary "
              "(tools/build_astra_sim.sh builds one)", file=sys.stderr)
        return 2
    binary = shutil.which(args.binary)
    if binary is None:
        print(f"astra_sim_compare.py: ASTRA-sim binary {args.binary} is not an executable file "
              "(tools/build_astra_sim.sh prints the path of the one it builds)", file=sys.stderr)
        return 2
    print("| case | ranks | ASTRA-sim ns (last rank) | ddlsim ns (last rank) | difference | largest per-rank difference |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.case or list(CASES):
        with tempfile.TemporaryDirectory(prefix="ddlsim-astra-") as tmp:
            row = run_case(binary, name, CASES[name], Path(tmp))
        if "tail" in row:
            print(f"| {name} | {row['ranks']} | exit {row['returncode']}, {row['finished']} of {row['ranks']} ranks "
                  f"finished | {row['ddlsim_ns']:,} | | |", flush=True)
            print(row["tail"], file=sys.stderr)
            continue
        diff = row["astra_ns"] - row["ddlsim_ns"]
        print(f"| {name} | {row['ranks']} | {row['astra_ns']:,} | {row['ddlsim_ns']:,} | {diff:+,} ns "
              f"({diff / row['ddlsim_ns']:+.2e}) | {row['max_rank_diff_ns']:,} ns |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
