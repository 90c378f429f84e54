"""benchmarks/bench_capture_overhead.py --block B: iterations timed in blocks of B with no synchronisation between
them (one time per block, per iteration), the blocks holding a sampled iteration counted as sampled, and the
summary table says so; a --block that does not divide the iterations is refused."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the capture benchmark needs PyTorch")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}


def test_blocks_are_timed_as_one_entry_each_and_summarised(tmp_path):
    out = tmp_path / "blk.json"
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead.py", "--model", "lenet5", "--workers", "1",
                          "--iterations", "6", "--warmup", "2", "--block", "2", "--layer-every", "4", "--json", str(out)],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "3 timed blocks of 2 iterations each" in run.stdout
    data = json.loads(out.read_text())
    assert {mode: len(v) for mode, v in data["times_s"].items()} == {"plain": 3, "recorded": 3}
    # layer rows on the warm-up (0, 1) and every 4th iteration from the first timed one (2) of 0..7: 2 and 6
    assert data["layer_iterations"] == [0, 1, 2, 6]
    assert "layer rows on 2 of 3 timed" in run.stdout  # blocks (2, 3) and (6, 7) hold a sampled iteration
    table = subprocess.run([sys.executable, "benchmarks/summarize_capture_overhead.py", str(out)], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "blocks of 2" in table.stdout and "capture, K = 4" in table.stdout


def test_a_block_that_does_not_divide_the_iterations_is_refused():
    run = subprocess.run([sys.executable, "benchmarks/bench_capture_overhead.py", "--iterations", "5", "--block", "2"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--block must be a positive divisor" in run.stderr


def test_the_h200_table_in_the_docs_is_the_summary_of_the_stored_runs():
    """docs/capture.md's third GPU run table is summarize_capture_overhead.py of the three stored runs, row by row."""
    files = [f"docs/data/gpu-capture-overhead-h200-{name}.json" for name in ("r50-a", "r50-blk", "r50-b")]
    table = subprocess.run([sys.executable, "benchmarks/summarize_capture_overhead.py", *files], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if line.startswith("| resnet50")]
    assert len(rows) == 18
    doc = (ROOT / "docs" / "capture.md").read_text(encoding="utf-8")
    for row in rows:
        assert row in doc, row
