"""Engine scaling benchmark: one ResNet-50 iteration, flow-level star network.

Cases: ring at 8, 64, 256 and 1024 workers; ps at 8 and 32 workers
(1 server per 4 workers). Each case runs in a fresh subprocess so that its
peak memory (max RSS) is its own. Prints wall time, events, events/s,
transfers/s, peak memory and each case's time per transfer relative to the
baseline (ring, 8 workers) measured in the same run.

    python benchmarks/bench_scale.py            # all cases
    python benchmarks/bench_scale.py --quick    # skip 1024 workers
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASES = [("ring", 8, 0), ("ring", 64, 0), ("ring", 256, 0), ("ring", 1024, 0), ("ps", 8, 2), ("ps", 32, 8)]

CHILD = r"""
import json, resource, sys, time
import ddlsim
strategy, workers, servers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kw = dict(model="resnet50", workers=workers, strategy=strategy, iterations=1, network="flow",
          bandwidth="10Gbps", latency="10us")
if servers:
    kw["servers"] = servers
t0 = time.perf_counter()
r = ddlsim.simulate(**kw)
total = time.perf_counter() - t0
print(json.dumps({"engine_s": r.wall_s, "total_s": total, "events": r.stats["events"],
                  "transfers": r.stats["transfers"], "rows": len(r.events),
                  "detail": r.engine_document["trace_detail"],
                  "iteration_s": float(r.iterations["time_s"].iloc[0]),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_case(strategy: str, workers: int, servers: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, strategy, str(workers), str(servers)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 1024-worker case")
    args = parser.parse_args()
    cases = [c for c in CASES if not (args.quick and c[1] >= 1024)]
    header = f"{'case':<16}{'detail':>11}{'engine s':>10}{'total s':>10}{'events':>13}{'events/s':>12}{'transfers':>13}{'peak MiB':>10}{'ns/transfer':>13}{'vs base':>9}{'iter ms':>10}"
    print(header)
    print("-" * len(header))
    base = None
    for strategy, workers, servers in cases:
        label = f"{strategy} N={workers}" + (f" S={servers}" if servers else "")
        r = run_case(strategy, workers, servers)
        per_transfer = r["engine_s"] / r["transfers"] * 1e9
        if base is None:
            base = per_transfer
        print(f"{label:<16}{r['detail']:>11}{r['engine_s']:>10.3f}{r['total_s']:>10.3f}{r['events']:>13,}"
              f"{r['events'] / r['engine_s']:>12,.0f}{r['transfers']:>13,}{r['peak_mib']:>10.0f}"
              f"{per_transfer:>13.1f}{per_transfer / base:>9.2f}{r['iteration_s'] * 1e3:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
