"""Scaling benchmark: one ResNet-50 iteration, flow-level star network.

Cases: ring at 8, 64, 256 and 1024 workers; ring at 64 workers logged at
step detail (about 1.3 M rows); ps at 8 and 32 workers (1 server per 4
workers). Each case runs in a fresh subprocess so that its peak memory (max
RSS) is its own. Prints the engine time, the whole `ddlsim.simulate` call
(Python included), `save` (Parquet + Perfetto + csv + json, no PNG), the
whole process (imports included), events/s, peak memory and each case's
engine time per transfer relative to the baseline (ring, 8 workers)
measured in the same run.

    python benchmarks/bench_scale.py            # all cases
    python benchmarks/bench_scale.py --quick    # skip 1024 workers
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CASES = [
    ("ring", 8, 0, "auto"),
    ("ring", 64, 0, "auto"),
    ("ring", 64, 0, "step"),
    ("ring", 256, 0, "auto"),
    ("ring", 1024, 0, "auto"),
    ("ps", 8, 2, "auto"),
    ("ps", 32, 8, "auto"),
]

CHILD = r"""
import json, resource, sys, tempfile, time
import ddlsim
strategy, workers, servers, detail = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kw = dict(model="resnet50", workers=workers, strategy=strategy, iterations=1, network="flow",
          bandwidth="10Gbps", latency="10us", trace_detail=detail)
if servers:
    kw["servers"] = servers
t0 = time.perf_counter()
r = ddlsim.simulate(**kw)
total = time.perf_counter() - t0
with tempfile.TemporaryDirectory() as out:
    t0 = time.perf_counter()
    r.save(out, timeline=False)
    save = time.perf_counter() - t0
print(json.dumps({"engine_s": r.wall_s, "total_s": total, "save_s": save, "events": r.stats["events"],
                  "transfers": r.stats["transfers"], "rows": len(r.events),
                  "detail": r.engine_document["trace_detail"],
                  "iteration_s": float(r.iterations["time_s"].iloc[0]),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_case(strategy: str, workers: int, servers: int, detail: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, strategy, str(workers), str(servers), detail],
                          capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 1024-worker case")
    args = parser.parse_args()
    cases = [c for c in CASES if not (args.quick and c[1] >= 1024)]
    header = f"{'case':<16}{'detail':>11}{'engine s':>10}{'simulate s':>11}{'save s':>8}{'process s':>10}{'events':>13}{'events/s':>12}{'transfers':>13}{'peak MiB':>10}{'ns/transfer':>13}{'vs base':>9}{'iter ms':>10}"
    print(header)
    print("-" * len(header))
    base = None
    for strategy, workers, servers, detail in cases:
        label = f"{strategy} N={workers}" + (f" S={servers}" if servers else "")
        r = run_case(strategy, workers, servers, detail)
        per_transfer = r["engine_s"] / r["transfers"] * 1e9
        if base is None:
            base = per_transfer
        print(f"{label:<16}{r['detail']:>11}{r['engine_s']:>10.3f}{r['total_s']:>11.3f}{r['save_s']:>8.3f}"
              f"{r['process_s']:>10.3f}{r['events']:>13,}"
              f"{r['events'] / r['engine_s']:>12,.0f}{r['transfers']:>13,}{r['peak_mib']:>10.0f}"
              f"{per_transfer:>13.1f}{per_transfer / base:>9.2f}{r['iteration_s'] * 1e3:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
