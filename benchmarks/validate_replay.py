"""Replay against capture: does `ddlsim replay` predict the iteration time
the real job measured, under the job's own conditions?

For each built-in job (DDP ResNet-18 and PS LeNet-5, 2 workers on this
machine) at two shaped bandwidths (each rank in its own network namespace
behind a tbf-limited link: needs root), it captures the job with
``ddlsim capture``, replays the capture with ``ddlsim.replay`` (its model,
its measured layer times, its strategy, buckets and bandwidth from the
capture's metadata) and compares the steady-state iteration time (mean over
iterations >= 1; the first carries DDP's bucket rebuild and warm-up) with
the measured one. The measured breakdown (compute, exposed communication,
idle) is printed beside it so that an error can be traced to its part.

    sudo python benchmarks/validate_replay.py [--out validation/] [--iterations 4] [--quick]

Writes ``validation.csv`` into --out. Superseded by ``ddlsim validate`` (a grid of jobs, models and links,
repeated, with self- and cross-prediction, CSV, plots and HTML); docs/validation.md reports its run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

JOBS = {
    # name: (capture arguments, bandwidths)
    "DDP resnet18": (["ddp", "--model", "resnet18", "--batch-size", "8"], ["1Gbps", "500Mbps"]),
    "PS lenet5": (["ps", "--model", "lenet5", "--servers", "1", "--batch-size", "16"], ["1Gbps", "100Mbps"]),
}


def steady(table) -> "object":
    later = table[table["iteration"] >= 1]
    return later if len(later) else table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="validation", help="directory for the captures and validation.csv")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one bandwidth per job")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("shaped links need root (network namespaces and tc); run as root", file=sys.stderr)
        return 2
    import pandas as pd

    import ddlsim
    from ddlsim.analyze.breakdown import iteration_table
    from ddlsim.trace import read_event_log

    out = Path(args.out)
    rows = []
    for job, (capture_args, bandwidths) in JOBS.items():
        for bandwidth in bandwidths[:1] if args.quick else bandwidths:
            run_dir = out / f"{job.split()[0].lower()}-{bandwidth}"
            cmd = [sys.executable, "-m", "ddlsim", "capture", *capture_args, "--workers", str(args.workers),
                   "--iterations", str(args.iterations), "--bandwidth", bandwidth, "--out", str(run_dir)]
            print(f"{job} at {bandwidth}: {' '.join(cmd[2:])}", flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            events = run_dir / "events.parquet"
            measured = steady(iteration_table(read_event_log(events)))
            replayed = steady(ddlsim.replay(events).iterations)
            m, r = float(measured["time_s"].mean()), float(replayed["time_s"].mean())
            rows.append({
                "job": job, "bandwidth": bandwidth, "measured_ms": m * 1e3, "replayed_ms": r * 1e3,
                "error_pct": (r - m) / m * 100,
                "measured_compute_ms": float(measured["compute_s"].mean()) * 1e3,
                "replayed_compute_ms": float(replayed["compute_s"].mean()) * 1e3,
                "measured_exposed_comm_ms": float(measured["exposed_communication_s"].mean()) * 1e3,
                "replayed_exposed_comm_ms": float(replayed["exposed_communication_s"].mean()) * 1e3,
                "measured_idle_ms": float(measured["idle_s"].mean()) * 1e3,
                "replayed_idle_ms": float(replayed["idle_s"].mean()) * 1e3,
            })
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "validation.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(1).to_string(index=False))
    print(f"wrote {out / 'validation.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
