"""All-reduce algorithms benchmark: one ResNet-50 iteration per algorithm.

For every algorithm, at 256 and 1024 ranks (25 Gbit/s, 5 us star, analytic
fidelity, collective-level log), the wall time of `ddlsim.simulate` and the
simulated iteration, step by step and with the closed-form collective model
(docs/allreduce-algorithms.md). Step-by-step cases whose transfer count would
exceed --max-transfers are skipped (a 1024-rank ring moves 337 M steps per
iteration). The hierarchical ring runs with 8 ranks per host.

    python benchmarks/bench_allreduce.py
    python benchmarks/bench_allreduce.py --ranks 256 --max-transfers 3e7
"""

from __future__ import annotations

import argparse
import time

import ddlsim
from ddlsim.simulation.algorithms import names
from ddlsim.simulation.lowering import steps_per_allreduce

ALGORITHMS = list(names())  # every algorithm the engine runs (the registry)
RESNET50_GROUPS = 161


def run(algorithm: str, ranks: int, model: str) -> tuple[float, float]:
    net = {"fidelity": "analytic", "bandwidth": "25Gbps", "latency": "5us", "collective_model": model}
    if algorithm == "hierarchical-ring":
        net["ranks_per_host"] = 8
    t = time.perf_counter()
    r = ddlsim.simulate({"model": {"name": "resnet50"}, "workers": ranks, "iterations": 1, "trace_detail": "collective",
                         "strategy": {"kind": "ring", "algorithm": algorithm}, "network": net})
    wall = time.perf_counter() - t
    return wall, r.iteration_time_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--max-transfers", type=float, default=3e7)
    args = ap.parse_args()
    # baseline, measured in this run: the 8-rank ring, step by step (min of 5)
    base = min(run("ring", 8, "steps")[0] for _ in range(5))
    print(f"baseline: 8-rank ring, steps: {base:.4f} s (min of 5)")
    print(f"{'algorithm':20s} {'ranks':>6s} {'model':>12s} {'wall s':>8s} {'x base':>8s} {'iteration ms':>13s}")
    for ranks in args.ranks:
        for algorithm in ALGORITHMS:
            for model in ("steps", "closed-form"):
                transfers = ranks * steps_per_allreduce(algorithm, ranks, 8 if algorithm == "hierarchical-ring" else 1) * RESNET50_GROUPS
                if model == "steps" and transfers > args.max_transfers:
                    print(f"{algorithm:20s} {ranks:6d} {model:>12s}  skipped ({transfers:.2g} transfers)")
                    continue
                wall, it = run(algorithm, ranks, model)
                print(f"{algorithm:20s} {ranks:6d} {model:>12s} {wall:8.3f} {wall / base:8.1f} {it * 1e3:13.3f}", flush=True)


if __name__ == "__main__":
    main()
