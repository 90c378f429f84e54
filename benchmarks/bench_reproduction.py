"""Reproduction benchmark: the network-operator paper's 32-worker, 25 Gbit/s
sweep (every mechanism of Tables 4, 6, 8, 9 and 10 x the four models, 44
scenarios) end to end without the results cache, in this process.

Prints the sweep's wall time, the time per simulation (per mechanism and in
all) and each one's ratio to the baseline measured in the same run: one
ResNet-50 ring iteration (8 workers, 10 Gbit/s, flow-level star) through the
same sweep code, repeated.

    python benchmarks/bench_reproduction.py            # all four models
    python benchmarks/bench_reproduction.py --models vgg16,inception_v3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from ddlsim.reproduce.network_operator import FULL, MECHANISMS, _Builder
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.sweep import run_sweep, simulate_summary


def baseline_s(repeats: int) -> float:
    scenario = scenario_from_dict({"model": {"name": "resnet50"}, "workers": 8, "iterations": 1, "trace_detail": "collective",
                                   "network": {"fidelity": "flow", "bandwidth": "10Gbps", "latency": "10us"}})
    simulate_summary(scenario)  # imports and first-call costs out of the measurement
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate_summary(scenario)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(FULL.models))
    parser.add_argument("--repeats", type=int, default=5, help="baseline repetitions (median)")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]

    base = baseline_s(args.repeats)
    builder = _Builder(FULL, Path(tempfile.mkdtemp(prefix="ddlsim-bench-")) / "profiles")
    keys = [builder.run(m, n) for m in models for n in MECHANISMS]
    scenarios = [builder.scenarios.by_key[k] for k in keys]
    t0 = time.perf_counter()
    summaries, stats = run_sweep(scenarios, store=None)
    wall = time.perf_counter() - t0

    per_mechanism = defaultdict(list)
    for key, summary in zip(keys, summaries):
        per_mechanism[key[2]].append(summary["wall_s"])
    print(f"baseline: ResNet-50 ring, 8 workers, 1 iteration: {base * 1e3:.1f} ms (median of {args.repeats})")
    print(f"sweep: {len(scenarios)} scenarios ({len(models)} models x {len(MECHANISMS)} mechanisms), 32 workers, 25 Gbit/s, "
          f"{FULL.iterations} iterations each, no cache, 1 process")
    print(f"{'mechanism':<22}{'mean s/sim':>12}{'max s/sim':>12}{'x baseline':>12}")
    for name, times in per_mechanism.items():
        mean = sum(times) / len(times)
        print(f"{name:<22}{mean:>12.3f}{max(times):>12.3f}{mean / base:>12.1f}")
    per_sim = wall / len(scenarios)
    print(f"{'all':<22}{per_sim:>12.3f}{'':>12}{per_sim / base:>12.1f}")
    print(f"sweep wall time {wall:.1f} s ({stats.simulated} simulations, {per_sim:.3f} s each, {per_sim / base:.1f}x the baseline)")


if __name__ == "__main__":
    main()
