"""benchmarks/step_spread.py: the order each process runs the cases in, the per-case summary against a brute-force
one, the report's columns and counts on a hand-made run, a real two-process CPU run, and bad input (one line,
exit 2, nothing touched)."""

import csv
import importlib.util
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "step_spread.py"


def _load():
    spec = importlib.util.spec_from_file_location("step_spread_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["step_spread_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()


def _cli(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def test_each_case_comes_first_in_exactly_one_of_n_processes():
    rng = random.Random(3)
    for _ in range(200):
        cases = [f"c{i}" for i in range(rng.randint(1, 9))]
        orders = [bench.rotated(cases, k) for k in range(len(cases))]
        assert all(sorted(o) == sorted(cases) for o in orders)
        assert sorted(o[0] for o in orders) == sorted(cases)
        k = rng.randint(0, 50)
        assert bench.rotated(cases, k) == bench.rotated(cases, k % len(cases))
    assert bench.rotated([], 4) == []


def test_the_summary_against_a_brute_force_one():
    rng = random.Random(5)
    rows = []
    for p in range(rng.randint(1, 7)):
        for model, batch in (("resnet50", 32), ("alexnet", 128)):
            rows.append({"model": model, "batch": str(batch), "precision": "fp16", "image": "224", "process": str(p),
                         "measured_ms": str(round(rng.uniform(5, 50), 4))})
    rng.shuffle(rows)
    got = {(c["model"], c["batch"]): c for c in bench.summarize(rows)}
    for model, batch in (("resnet50", 32), ("alexnet", 128)):
        times = sorted(float(r["measured_ms"]) for r in rows if r["model"] == model)
        n = len(times)
        med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
        c = got[(model, batch)]
        assert c["processes"] == n and c["median_ms"] == pytest.approx(med, rel=1e-12)
        assert c["min_ms"] == times[0] and c["max_ms"] == times[-1]
        assert c["spread"] == pytest.approx((times[-1] - times[0]) / med, rel=1e-12)


def _write(path, rows):
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=bench.COLUMNS)
        w.writeheader()
        w.writerows(rows)


def test_the_report_scores_the_roofline_against_the_median_and_the_range(tmp_path):
    """A run built around the roofline's own number: one case with every process 10 % above it (within 15 %, the
    roofline below the range), one whose processes straddle it at 0.5x and 2x (median 2x: not within, but inside),
    and a small-image case that is not scored."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_layer_times as glt

    a = glt.predict("resnet50", 32, "fp16", "H200")["roofline_ms"]
    b = glt.predict("alexnet", 32, "tf32", "H200")["roofline_ms"]
    rows = [{"model": "resnet50", "batch": 32, "precision": "fp16", "image": 224, "process": p, "measured_ms": a * 1.1}
            for p in range(3)]
    rows += [{"model": "alexnet", "batch": 32, "precision": "tf32", "image": 224, "process": p, "measured_ms": b * f}
             for p, f in enumerate((0.5, 2.0, 2.0))]
    rows += [{"model": "resnet18", "batch": 2, "precision": "fp32", "image": 64, "process": 0, "measured_ms": 3.0}]
    _write(tmp_path / "spread.csv", rows)
    run = _cli("--report", str(tmp_path), "--predict-device", "H200")
    assert run.returncode == 0, run.stderr
    lines = {line.split(" | ")[0][2:]: line for line in run.stdout.splitlines() if line.startswith("| ")}
    assert "| 3 | " in lines["resnet50"] and "| -9.1 % | no |" in lines["resnet50"]
    assert "| 75.0 % |" in lines["alexnet"] and "| -50.0 % | yes |" in lines["alexnet"]
    assert "- (image 64)" in lines["resnet18"]
    assert "1 of 2 cases within 15 % of the median over processes; the roofline inside the measured range in 1 " \
        "of 2." in " ".join(run.stdout.split())


def test_two_processes_on_the_cpu_write_a_row_each(tmp_path):
    pytest.importorskip("torchvision")
    out = tmp_path / "run"
    run = _cli("--device", "cpu", "--quick", "--cases", "resnet18:2:fp32", "--processes", "2", "--warmup", "0",
               "--repeats", "1", "--out", str(out))
    assert run.returncode == 0, run.stderr
    with (out / "spread.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["process"] for r in rows] == ["0", "1"] and all(float(r["measured_ms"]) > 0 for r in rows)
    assert sorted(p.name for p in out.iterdir()) == ["spread.csv"]
    rep = _cli("--report", str(out / "spread.csv"))
    assert rep.returncode == 0 and "| resnet18 | 2 | fp32 | 2 |" in rep.stdout, rep.stderr
    assert "nothing to score" in rep.stdout  # 64x64 images: not the zoo's model


@pytest.mark.parametrize("args", [
    ["--cases", "resnet999:32:fp16", "--out", "X"],
    ["--cases", "resnet50:32:fp16", "--processes", "0", "--out", "X"],
    ["--cases", "resnet50:32:fp16"],
    ["--report", "no-such-run"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args):
    args = [str(tmp_path / "new") if a == "X" else a for a in args]
    run = _cli(*args)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and run.stderr.startswith("error: "), run.stderr
    assert not (tmp_path / "new").exists()


def test_an_existing_folder_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("a user's file")
    run = _cli("--device", "cpu", "--quick", "--cases", "resnet18:2:fp32", "--out", str(out))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "mine" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "a user's file"
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    rep = _cli("--report", str(bad))
    assert rep.returncode == 2 and len(rep.stderr.strip().splitlines()) == 1 and "'model'" in rep.stderr


def test_a_case_that_fails_is_recorded_and_the_others_still_run(monkeypatch, capsys):
    pytest.importorskip("torchvision")
    import json

    import gpu_layer_times as glt

    real = glt.build

    def build(name):
        if name == "alexnet":
            raise RuntimeError("CUDA out of memory (a stand-in)")
        return real(name)

    monkeypatch.setattr(glt, "build", build)
    assert bench.child([("alexnet", 2, "fp32"), ("resnet18", 2, "fp32")], 1, "cpu", True, 0, 1) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["model"] for r in rows] == ["resnet18", "alexnet"]  # process 1: the order rotated by one
    assert rows[0]["measured_ms"] > 0 and "measured_ms" not in rows[1]
    assert rows[1]["error"] == "RuntimeError: CUDA out of memory (a stand-in)"
