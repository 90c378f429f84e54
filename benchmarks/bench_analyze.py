"""Time and peak memory of `ddlsim analyze` on large simulated logs, against
a baseline measured in the same run: reading the same log. Not a test.

    python benchmarks/bench_analyze.py [--workers 64] [--iterations 2] [--keep DIR]

Logs: ResNet-50, ring all-reduce at trace detail `step` (every ring step a
send and a recv row) and a parameter server (8 servers). Each phase runs in
a fresh Python process, so its peak RSS (VmHWM) is its own:

- read:     read_event_log(path)                       (the baseline)
- analyze:  read + every Analysis table and the headline (no pictures)
- report:   read + tables + figures + report.html      (what `ddlsim analyze --out` does)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASE = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from ddlsim.trace import read_event_log
log = read_event_log(sys.argv[2])
phase = sys.argv[1]
rows = len(log)
if phase in ("analyze", "report"):
    from ddlsim.analyze import Analysis
    from ddlsim.cli.analyze_command import analyze_to_directory, tables
    a = Analysis(log)
    if phase == "analyze":
        frames = tables(a, 1_000_000, 10_000_000)
        a.headline()
    else:
        analyze_to_directory(a, Path(sys.argv[3]))
wall = time.perf_counter() - t0
# VmHWM: this process image's own peak (ru_maxrss would carry the parent's over fork + exec)
hwm = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:")]
peak_mb = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"phase": phase, "rows": rows, "wall_s": wall, "peak_rss_mb": peak_mb}))
"""


def run_phase(phase: str, path: Path, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PHASE, phase, str(path), str(out)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the logs and reports here")
    args = parser.parse_args()
    import ddlsim
    from ddlsim.trace import write_event_log

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    root.mkdir(parents=True, exist_ok=True)
    cases = {
        "ring-step": dict(strategy="ring", trace_detail="step"),
        "ps-8": dict(strategy="ps", servers=8),
    }
    print(f"ResNet-50, {args.workers} workers, {args.iterations} iterations")
    for label, extra in cases.items():
        t = time.perf_counter()
        result = ddlsim.simulate(model="resnet50", workers=args.workers, iterations=args.iterations, **extra)
        simulate_s = time.perf_counter() - t
        path = root / label / "events.parquet"
        path.parent.mkdir(exist_ok=True)
        write_event_log(result.events, path)
        del result
        out = root / label / "analysis"
        out.mkdir(exist_ok=True)
        rows = {phase: run_phase(phase, path, out) for phase in ("read", "analyze", "report")}
        base = rows["read"]
        print(f"{label}: {base['rows']:,} rows ({path.stat().st_size / 1e6:.1f} MB Parquet; simulated in {simulate_s:.1f} s)")
        for phase, r in rows.items():
            extra_s = r["wall_s"] - base["wall_s"]
            print(f"  {phase:8s} {r['wall_s']:7.2f} s  peak RSS {r['peak_rss_mb']:7.0f} MB"
                  + ("" if phase == "read" else f"   (+{extra_s:.2f} s, x{r['wall_s'] / base['wall_s']:.1f} of reading; "
                                                   f"+{r['peak_rss_mb'] - base['peak_rss_mb']:.0f} MB)"))


if __name__ == "__main__":
    main()
