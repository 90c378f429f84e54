"""benchmarks/bench_recorder_rows.py runs, prints its two parts with a ratio per line, and refuses bad counts in one
line (exit 2)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "python")}


def test_the_benchmark_prints_each_way_with_its_ratio():
    run = subprocess.run([sys.executable, "benchmarks/bench_recorder_rows.py", "--rows", "50", "--repeats", "1"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("recording a row") and lines[4].startswith("formatting a held row")
    assert all(" x" in line for line in lines[1:4] + lines[5:7]) and len(lines) == 7
    assert lines[1].endswith("x1.00") and lines[5].endswith("x1.00")


def test_a_count_below_one_is_refused_in_one_line():
    run = subprocess.run([sys.executable, "benchmarks/bench_recorder_rows.py", "--rows", "0"], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1 and "--rows 0" in lines[0] and run.stdout == ""
