"""`ddlsim analyze` on a 10 M-row event log: wall time and peak RSS, against
a baseline measured in the same run. Not a test.

    python benchmarks/bench_analyze_large.py [--workers 64] [--iterations 4] [--cache DIR]

The log (ResNet-50, ring all-reduce on 64 workers at trace detail `step`:
2.6 M rows per iteration, so 4 iterations make 10.4 M rows) is simulated
once and cached (default: a directory under the system temp dir; delete it
to regenerate). Each case runs as its own child process; its wall time and
peak RSS come from ``os.wait4`` (that child's own ``ru_maxrss``):

- baseline:  pyarrow.parquet.read_table of the columns the streamed passes read
- read:      ddlsim.trace.read_event_log (what the in-memory Analysis starts with)
- stream:    ddlsim analyze LOG --stream --json
- stream+out: ddlsim analyze LOG --stream --out DIR (tables as CSV and Parquet, PNG and SVG, report)
- in-memory: ddlsim analyze LOG --in-memory --json (with --in-memory-too; it needs several GB)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = r"""
import sys, pyarrow.parquet as pq
from ddlsim.analyze.streaming import _PASS1
table = pq.read_table(sys.argv[1], columns=_PASS1)
print(table.num_rows)
"""
READ = r"""
import sys
from ddlsim.trace import read_event_log
print(len(read_event_log(sys.argv[1])))
"""


def measure_child(command: list[str]) -> dict:
    """Wall seconds, peak RSS (MB, this child's own: os.wait4) and stdout of one child process."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(f"{' '.join(command[:6])} failed:\n{err.read().decode()[-2000:]}")
        return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "stdout": out.read().decode()}


def make_log(path: Path, workers: int, iterations: int) -> float:
    # the memory budget's estimate is conservative (about 4x what this run takes): force it
    code = (f"import ddlsim; from ddlsim.trace import write_event_log; from ddlsim.simulation.budget import run_control\n"
            f"with run_control(force=True):\n"
            f"    r = ddlsim.simulate(model='resnet50', workers={workers}, iterations={iterations}, strategy='ring', "
            f"trace_detail='step')\n"
            f"write_event_log(r.events, {str(path)!r})")
    return measure_child([sys.executable, "-c", code])["wall_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ddlsim-bench-analyze-large")
    parser.add_argument("--in-memory-too", action="store_true", help="also time the in-memory analysis (several GB)")
    args = parser.parse_args()
    import pyarrow.parquet as pq

    log = args.cache / f"resnet50-ring-step-{args.workers}w-{args.iterations}it" / "events.parquet"
    if not log.exists():
        log.parent.mkdir(parents=True, exist_ok=True)
        seconds = make_log(log, args.workers, args.iterations)
        print(f"simulated and wrote {log} in {seconds:.1f} s")
    meta = pq.ParquetFile(log).metadata
    print(f"{log}: {meta.num_rows:,} rows, {meta.num_row_groups} row groups, {log.stat().st_size / 1e6:.0f} MB")
    cli = [sys.executable, "-m", "ddlsim", "analyze", str(log)]
    out_dir = Path(tempfile.mkdtemp(prefix="bench-analyze-large-out-"))
    cases = {
        "baseline": [sys.executable, "-c", BASELINE, str(log)],
        "read": [sys.executable, "-c", READ, str(log)],
        "stream": [*cli, "--stream", "--json"],
        "stream+out": [*cli, "--stream", "--out", str(out_dir / "analysis")],
    }
    if args.in_memory_too:
        cases["in-memory"] = [*cli, "--in-memory", "--json"]
    results = {}
    for label, command in cases.items():
        results[label] = measure_child(command)
        base = results["baseline"]
        r = results[label]
        print(f"  {label:11s} {r['wall_s']:7.2f} s  peak RSS {r['peak_rss_mb']:7.0f} MB"
              + ("" if label == "baseline" else f"   x{r['wall_s'] / base['wall_s']:.2f} time, "
                                                 f"x{r['peak_rss_mb'] / base['peak_rss_mb']:.2f} memory of the baseline"))
    headline = json.loads(results["stream"]["stdout"])["headline"]
    print(f"stream: {headline['rows']:,} rows, {headline['iterations']} iterations, iteration time "
          f"{headline['iteration_time_s'] * 1e3:.3f} ms; row-level analyses on iteration "
          f"{headline['streamed']['row_level_iteration']} ({headline['streamed']['row_level_rows']:,} rows)")
    written = sorted(p.name for p in (out_dir / "analysis").iterdir())
    print(f"stream+out wrote {len(written)} files: {', '.join(written)}")


if __name__ == "__main__":
    main()
