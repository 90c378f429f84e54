"""benchmarks/gpu_layer_times.py --report / --rescore (the commands docs/compute-model.md gives) on bad input: one
line, exit 2, no traceback; on the stored run: the table."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_layer_times.py"


def _run(*args):
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


@pytest.mark.parametrize("args", [
    ["--rescore", "no-such-run.csv"],
    ["--report", "no-such-run"],
    ["--rescore", "docs/data/gpu-layer-times-h100-summary.csv", "--predict-device", "X999"],
    ["--rescore", "docs/data/gpu-layer-times-h100-microbench.json"],
])
def test_bad_input_is_one_line_and_exit_2(args):
    run = _run(*args)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and run.stderr.startswith("error: "), run.stderr


def test_the_stored_run_rescores():
    run = _run("--rescore", "docs/data/gpu-layer-times-h100-summary.csv")
    assert run.returncode == 0 and "of 48 cases within 15 %" in run.stdout, run.stderr
    # per model: 6 cases each (2 batches x 3 precisions)
    per_model = [line for line in run.stdout.splitlines() if line.startswith("| resnet50 | ") and " of 6 |" in line]
    assert len(per_model) == 1 and per_model[0].count(" of 6 |") == 2


def test_the_run3_table_in_the_docs_is_the_rescore_of_the_stored_run():
    """docs/compute-model.md's "Run 3" table (the blind score of the GEMM, pointwise and unequal-channel tables) is
    what `--rescore` of the stored run 3 prints with the model and tables of this tree, row by row, with the counts."""
    run = _run("--rescore", "docs/data/gpu-layer-times-h100-run3-summary.csv")
    assert run.returncode == 0, run.stderr
    doc = (ROOT / "docs" / "compute-model.md").read_text(encoding="utf-8")
    section = doc.split("\n## Run 3 (2026-11-27)", 1)[1].split("\n### ", 1)[0]
    case_rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and line.count(" | ") == 9
                 and not line.startswith(("| model", "| ---"))]
    assert len(case_rows) == 24
    for line in case_rows + [line for line in run.stdout.splitlines() if line.startswith("the roofline now:")]:
        assert line in section, line
