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


def _run4_section() -> str:
    doc = (ROOT / "docs" / "compute-model.md").read_text(encoding="utf-8")
    return doc.split("\n## Run 4 (2026-11-27)", 1)[1].split("\n## ", 1)[0]


def test_the_run4_scores_in_the_docs_are_the_rescore_of_the_stored_runs():
    """The bold row of docs/compute-model.md's "Run 4" table (this tree's tables) is what `--rescore` prints for
    each stored run, in the table's column order: within 15 % and the median |error|."""
    import re

    section = _run4_section()
    bold = next(line for line in section.splitlines() if line.startswith("| **host runs pooled"))
    cells = [c.strip().strip("*") for c in bold.strip("|").split("|")][1:]
    runs = [("h100-summary", "H100"), ("h100-run2-summary", "H100"), ("h100-run3-summary", "H100"),
            ("h100-run4-summary", "H100"), ("h200-summary", "H200"), ("h200-run4-summary", "H200")]
    assert len(cells) == len(runs)
    for (run_name, card), cell in zip(runs, cells):
        run = _run("--rescore", f"docs/data/gpu-layer-times-{run_name}.csv", "--predict-device", card)
        assert run.returncode == 0, run.stderr
        m = re.search(r"^the roofline now: (\d+) of (\d+) cases within 15 %; median \|error\| ([\d.]+) %", run.stdout,
                      re.M)
        assert m is not None and cell == f"{m[1]} of {m[2]}, {m[3]} %", (run_name, cell)


@pytest.mark.parametrize("card", ["H100", "H200"])
def test_the_run4_graph_table_in_the_docs_is_the_graph_report(card):
    """The "GPU alone" table of the Run 4 section is `--graph-report` of the stored graph runs, row by row (the
    report's columns but the model's step)."""
    run = _run("--graph-report", f"docs/data/gpu-graph-{card.lower()}-run4.csv", "--predict-device", card)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and line.count(" | ") == 9
            and not line.startswith(("| model", "| ---"))]
    assert len(rows) == 8
    section = _run4_section()
    for line in rows:
        c = [x.strip() for x in line.strip("|").split("|")]
        want = "| " + " | ".join([card] + c[:8] + c[9:]) + " |"
        assert want in section, want


def test_the_run4_spread_table_in_the_docs_is_the_stored_runs():
    """The "Host-bound steps, measured again" table of the Run 4 section, cell by cell from the stored files: the
    run-4 layer-times run (first process), the graph run's eager step (second), the host benchmark's whole-model
    check of host-dispatch-<card>-run4-1.json (third) and every earlier stored run of the card that has the case."""
    import csv
    import json

    data = ROOT / "docs" / "data"

    def measured(path):
        with path.open(newline="") as fh:
            return {(r["model"], int(r["batch"]), r["precision"]): float(r["measured_ms"]) for r in csv.DictReader(fh)}

    earlier = {"H100": ["h100-summary", "h100-run2-summary", "h100-run3-summary"], "H200": ["h200-summary"]}
    section = _run4_section().split("**Host-bound steps, measured again", 1)[1].split("\n\n**", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| H")]
    assert len(rows) == 12
    for line in rows:
        card, case, first, second, third, before = [c.strip() for c in line.strip("|").split("|")]
        model, b, precision = case.split(" (")[0].split()
        key = (model, int(b[1:]), precision)
        lc = card.lower()
        assert first == f"{measured(data / f'gpu-layer-times-{lc}-run4-summary.csv')[key]:.2f}", line
        assert second == f"{measured(data / f'gpu-graph-{lc}-run4.csv')[key]:.2f}", line
        check = json.loads((data / f"host-dispatch-{lc}-run4-1.json").read_text())["model_host_check"]
        step = check.get(f"{model}_b{key[1]}_{precision}")
        assert third == (f"{step['step_ms']:.2f}" if step else "-"), line
        old = [measured(data / f"gpu-layer-times-{name}.csv").get(key) for name in earlier[card]]
        assert before == (", ".join(f"{v:.2f}" for v in old if v is not None) or "-"), line


def test_the_run4_host_check_table_in_the_docs_is_the_stored_check_and_this_model():
    """The Run 4 table of the model's host total against the host benchmark's whole-model check: the measured host
    time from host-dispatch-<card>-run4-1.json, the model's from this tree (roofline.step_totals_s)."""
    import json

    from ddlsim.workload import roofline
    from ddlsim.workload.zoo import load_model

    section = _run4_section().split("**The host model against whole steps", 1)[1].split("\n\n**", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| H")]
    assert len(rows) == 12
    for line in rows:
        card, model, batch, precision, meas, pred, err = [c.strip() for c in line.strip("|").split("|")]
        check = json.loads((ROOT / "docs" / "data" / f"host-dispatch-{card.lower()}-run4-1.json").read_text())
        c = check["model_host_check"][f"{model}_b{batch}_{precision}"]
        host = c["host_fwd_ms"] + c["host_bwd_ms"]
        model_ms = roofline.step_totals_s(load_model(model), card, precision, int(batch))[0] * 1e3
        assert (meas, pred, err) == (f"{host:.2f}", f"{model_ms:.2f}", f"{(model_ms / host - 1) * 100:+.1f} %"), line


def test_the_run4_per_model_table_in_the_docs_is_every_stored_run_rescored():
    """The Run 4 "Per model" table: per card and model, every stored case-run scored with this tree (gpu_layer_times'
    own prediction), counted, the median |error| and the case furthest off, recomputed here from the CSVs."""
    import csv

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_layer_times as glt

    runs = {"H100": ["h100-summary", "h100-run2-summary", "h100-run3-summary", "h100-run4-summary"],
            "H200": ["h200-summary", "h200-run4-summary"]}
    section = _run4_section().split("**Per model.**", 1)[1].split("\n\n**", 1)[0]
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in section.splitlines()
            if line.startswith("| H")}
    want = 0
    for card, names in runs.items():
        errors: dict = {}
        for name in names:
            with (ROOT / "docs" / "data" / f"gpu-layer-times-{name}.csv").open(newline="") as fh:
                for r in csv.DictReader(fh):
                    pred = glt.predict(r["model"], int(r["batch"]), r["precision"], card)["roofline_ms"]
                    errors.setdefault(r["model"], []).append((pred / float(r["measured_ms"]) - 1,
                                                             f"b{r['batch']} {r['precision']}"))
        for model, errs in errors.items():
            want += 1
            size = sorted(abs(e) for e, _ in errs)
            n = len(size)
            median = size[n // 2] if n % 2 else (size[n // 2 - 1] + size[n // 2]) / 2
            worst = max(errs, key=lambda e: abs(e[0]))
            line = (f"| {card} | {model} | {n} | {sum(abs(e) <= 0.15 for e, _ in errs)} | {median * 100:.1f} % | "
                    f"{worst[0] * 100:+.1f} % ({worst[1]}) |")
            assert rows.get((card, model)) == line, line
    assert len(rows) == want
