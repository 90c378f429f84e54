"""benchmarks/bench_capture_overhead_ps.py: the PS capture job run recorded and with nothing recorded, in ABBA order,
each run's iterations timed on rank 0 after its warm-up; bad arguments are refused with status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PS capture benchmark needs PyTorch")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}


def test_each_kind_runs_and_each_run_times_its_iterations_after_the_warm_up(tmp_path):
    out = tmp_path / "ps.json"
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--runs", "1", "--iterations", "7",
                          "--warmup", "2", "--json", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "capture overhead:" in run.stdout and "target < 3 %" in run.stdout
    data = json.loads(out.read_text())
    # one run of each kind; 7 iterations give 6 times (from the second iteration's end on), less the first warm-up one
    assert {kind: [len(r) for r in runs] for kind, runs in data["times_ms"].items()} == {"plain": [5], "recorded": [5]}
    assert all(t > 0 for runs in data["times_ms"].values() for r in runs for t in r)


def test_too_few_iterations_are_refused():
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead_ps.py", "--iterations", "5", "--warmup", "5"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--iterations must exceed --warmup" in run.stderr
