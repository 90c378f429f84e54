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


@pytest.mark.parametrize("bench", ["bench_capture_overhead.py", "bench_capture_overhead_ps.py"])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_json_path_that_is_not_a_file_is_refused_before_any_run_and_left_alone(tmp_path, bench, kind):
    """The capture-overhead benchmarks' --json goes through ddlsim's output rule: a directory or a FIFO is refused in
    one line, before the minutes of runs, and left as it was (before: a traceback after the runs, or a write into
    the FIFO that blocks)."""
    target = tmp_path / "out.json"
    if kind == "directory":
        target.mkdir()
        (target / "keep").write_text("mine")
    else:
        os.mkfifo(target)
    run = subprocess.run([sys.executable, f"benchmarks/{bench}", "--iterations", "8", "--warmup", "2", "--json",
                          str(target)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: --json {target}"), run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    if kind == "directory":
        assert [p.name for p in target.iterdir()] == ["keep"] and (target / "keep").read_text() == "mine"
    else:
        assert os.path.exists(target) and not os.path.isfile(target)
