"""benchmarks/gpu_next.sh, the next device run of the roofline, without a GPU: its syntax, its steps (dry run) and
their time limits, every flag it gives a benchmark exists in that benchmark's --help, its case lists are cases, and
its run mode with a stand-in GPU and Python (the steps, the log, the tables it makes from what the steps wrote);
plus gpu_layer_times.py's --cases and --graph-report, which it uses."""

import csv
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_next.sh"
GPU_LIMIT_S = 490  # this run's GPU steps in about eight minutes at most, whatever happens (a device session has 15)


def _load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_gpu_next_test", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


glt = _load("gpu_layer_times")


def _bash(*args, env=None, cwd=ROOT):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def _steps(device):
    run = _bash("--dry-run", "--device", device)
    assert run.returncode == 0, run.stderr
    out = []
    for line in run.stdout.splitlines():
        head, _, cmd = line.partition(": ")
        kind, name, *limit = head.split()
        out.append((kind, name, int(limit[0][len("timeout="):-1]) if limit else 0, shlex.split(cmd)))
    return out


def test_the_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@pytest.mark.parametrize("device,grids", [("H200", True), ("H100", False)])
def test_the_dry_run_lists_the_steps_under_eight_minutes(device, grids):
    steps = _steps(device)
    names = [name for kind, name, _, _ in steps if kind == "step"]
    assert names == (["norm", "pointwise"] if grids else []) + ["host1", "host2", "host3", "glt", "graph", "spread"]
    assert sum(limit for kind, _, limit, _ in steps if kind == "step") <= GPU_LIMIT_S
    lc = device.lower()
    outs = [cmd[cmd.index("--out") + 1] for kind, _, _, cmd in steps if kind == "cpu"]
    assert outs == ([f"out/tables/norm_classes_{lc}.json", f"out/tables/pointwise_{lc}.json"] if grids else []) + [
        f"out/tables/host_dispatch_{lc}.json"]
    glt_cmd = next(cmd for kind, name, _, cmd in steps if name == "glt")
    assert glt_cmd[glt_cmd.index("--predict-device") + 1] == device


@pytest.mark.parametrize("device", ["H200", "H100"])
def test_every_flag_the_script_gives_exists_and_every_case_is_a_case(device):
    helps = {}
    for _, _, _, cmd in _steps(device):
        script = cmd[1]
        if script not in helps:
            run = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT / "python")}, timeout=120)
            assert run.returncode == 0, run.stderr
            helps[script] = run.stdout
        for token in cmd[2:]:
            if token.startswith("--") and " " not in token:
                assert token in helps[script], (script, token)
        if "--cases" in cmd:
            i = cmd.index("--cases") + 1
            cases = []
            while i < len(cmd) and not cmd[i].startswith("--"):
                cases.append(glt.parse_case(cmd[i]))
                i += 1
            assert cases and len(set(cases)) == len(cases)


def test_the_case_lists_are_the_misses_of_the_docs_run3_section():
    """The H100's list holds run 3's four misses (the docs' "Run 3" paragraph) and the H200's the three TF32 ResNets
    at batch 128 it over-predicts."""
    text = SCRIPT.read_text()
    h100 = text.split('CASES_H100="', 1)[1].split('"', 1)[0].split()
    h200 = text.split('CASES_H200="', 1)[1].split('"', 1)[0].split()
    assert {"alexnet:32:tf32", "alexnet:32:fp16", "googlenet:128:fp16", "inception_v3:32:fp16"} <= set(h100)
    assert {"resnet50:128:tf32", "resnet101:128:tf32", "resnet152:128:tf32"} <= set(h200)


def test_bad_arguments_and_folders_are_one_line_and_exit_2(tmp_path):
    for args in (["--bogus"], ["--dry-run", "--device", "A100"], ["--install", str(tmp_path)],
                 ["--rescore", str(tmp_path / "none")]):
        run = _bash(*args)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, (args, run.stderr)
        assert run.stderr.startswith("error: ")


def test_the_run_mode_with_a_stand_in_gpu_and_python(tmp_path):
    """nvidia-smi says H200; the stand-in Python writes a stored host run where host_dispatch.py would measure one
    (host2 fails and writes nothing), records the other measuring steps, and runs the real converters. The log has
    every step with its status; the host table is the median of the two runs that finished."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H200'\n")
    stored = ROOT / "python" / "ddlsim" / "data" / "kernels" / "host_dispatch_h200.json"
    fake = bin_dir / "fakepython"
    fake.write_text(f"""#!/bin/bash
echo "$*" >> "$OUT/calls.txt"
case "$*" in
  *--median*|*--table*|*"-c "*) exec {shlex.quote(sys.executable)} "$@" ;;
  *host2.json*) exit 3 ;;
  *host_dispatch.py*) shift; while [ "$1" != --out ]; do shift; done; cp {shlex.quote(str(stored))} "$2" ;;
esac
exit 0
""")
    for f in (bin_dir / "nvidia-smi", fake):
        f.chmod(0o755)
    out = tmp_path / "out"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out), "PYTHON": str(fake)}
    run = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, **env})
    assert run.returncode == 0, run.stderr
    assert (out / "card.txt").read_text().strip() == "H200"
    log = (out / "steps.log").read_text()
    for name in ("norm", "pointwise", "host1", "host3", "glt", "graph", "spread"):
        assert f"{name} rc=0 " in log, log
    assert "host2 rc=3 " in log  # failed, the others ran
    doc = json.loads((out / "tables" / "host_dispatch_h200.json").read_text())
    assert doc["median_of"] == 2 and doc["host_us"] == json.loads(stored.read_text())["host_us"]
    assert not (out / "tables" / "norm_classes_h200.json").exists()  # the stand-in wrote no grid
    assert "--norm" in (out / "calls.txt").read_text()


# --- gpu_layer_times.py: --cases and --graph-report ---------------------------------------------------------------

@pytest.mark.parametrize("text,why", [("alexnet:32", "MODEL:BATCH:PRECISION"), ("lenet:32:fp32", "unknown model"),
                                      ("alexnet:0:fp32", "positive"), ("alexnet:32:int8", "precision")])
def test_a_bad_case_is_refused(text, why):
    with pytest.raises(ValueError, match=why):
        glt.parse_case(text)
    assert glt.parse_case("inception_v3:128:fp16") == ("inception_v3", 128, "fp16")


def test_bad_cases_and_graph_only_without_cases_exit_2_in_one_line(tmp_path, capsys):
    assert glt.main(["--cases", "alexnet:32:xx", "--out", str(tmp_path / "o")]) == 2
    assert glt.main(["--graph-only", "--out", str(tmp_path / "o")]) == 2
    assert glt.main(["--cases", "alexnet:32:fp16"]) == 2  # no --out
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert not (tmp_path / "o").exists()


def test_the_graph_report_on_paper(tmp_path, capsys):
    from ddlsim.workload import roofline
    from ddlsim.workload.zoo import load_model

    path = tmp_path / "graph.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["model", "batch", "precision", "measured_ms", "graph_ms", "error"])
        w.writeheader()
        w.writerow({"model": "alexnet", "batch": 32, "precision": "tf32", "measured_ms": 3.5, "graph_ms": 2.0})
        w.writerow({"model": "googlenet", "batch": 128, "precision": "fp16", "error": "RuntimeError: capture"})
    assert glt.main(["--graph-report", str(path), "--predict-device", "H100"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| alexnet")
            or line.startswith("| googlenet")]
    host, gpu, step = roofline.step_totals_s(load_model("alexnet"), "H100", "tf32", 32)
    assert rows[0] == (f"| alexnet | 32 | tf32 | 3.50 | 2.00 | 1.50 | {host * 1e3:.2f} | {gpu * 1e3:.2f} | "
                       f"{step * 1e3:.2f} | {(gpu * 1e3 / 2.0 - 1) * 100:+.1f} % |")
    assert "failed: RuntimeError: capture" in rows[1]
    assert glt.main(["--graph-report", str(tmp_path / "none.csv")]) == 2


def test_install_checks_every_file_before_it_copies_any(tmp_path):
    """--install into a copy of the package: an H100 table under the H200's name is refused in one line and nothing
    is copied; the run's own files are copied into data/kernels/ under the card's names."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "python" / "ddlsim", tree / "python" / "ddlsim",
                    ignore=shutil.ignore_patterns("__pycache__"))
    kernels = tree / "python" / "ddlsim" / "data" / "kernels"
    run = tmp_path / "run"
    (run / "tables").mkdir(parents=True)
    (run / "card.txt").write_text("H200\n")
    data = tree / "docs" / "data"
    data.mkdir(parents=True)
    shutil.copytree(ROOT / "benchmarks", tree / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    for f in (ROOT / "docs" / "data").glob("host-dispatch-*.json"):
        shutil.copy(f, data / f.name)
    host = json.loads((ROOT / "docs" / "data" / "host-dispatch-h200-run4-1.json").read_text())
    host["backward_start_us"] = 1e6  # above every stored run's: the pooled median moves by a known step
    (run / "host1.json").write_text(json.dumps(host))
    (run / "tables" / "norm_classes_h200.json").write_text((kernels / "norm_classes_h100.json").read_text())
    before = (kernels / "host_dispatch_h200.json").read_text()
    norm = kernels / "norm_classes_h200.json"
    norm_before = norm.read_bytes() if norm.exists() else None  # the H200's own table, stored since run 4
    res = _bash("--install", str(run), cwd=tree)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "norm_classes_h200.json" in res.stderr and "H100" in res.stderr
    assert (kernels / "host_dispatch_h200.json").read_text() == before
    assert (norm.read_bytes() if norm.exists() else None) == norm_before
    assert sorted(p.name for p in data.glob("host-dispatch-h200-*.json")) == [
        "host-dispatch-h200-run1.json", "host-dispatch-h200-run4-1.json", "host-dispatch-h200-run4-2.json",
        "host-dispatch-h200-run4-3.json"]  # nothing stored either
    (run / "tables" / "norm_classes_h200.json").unlink()
    res = _bash("--install", str(run), cwd=tree)
    assert res.returncode == 0, res.stderr
    # the run's host run joins the stored ones and the table is the median of the five: the three run-4 values
    # and the run-1 one that has it (run 1 predates backward_start) plus 1e6 -> the mean of the middle two
    stored = sorted(json.loads(f.read_text())["backward_start_us"] for f in (ROOT / "docs" / "data").glob(
        "host-dispatch-h200-run4-*.json"))
    got = json.loads((kernels / "host_dispatch_h200.json").read_text())
    assert got["backward_start_us"] == pytest.approx((stored[1] + stored[2]) / 2, rel=1e-12)
    assert got["median_of"] == 5 and len(list(data.glob("host-dispatch-h200-*.json"))) == 5
    bad = json.loads((ROOT / "docs" / "data" / "host-dispatch-h100-run4-1.json").read_text())
    (run / "host2.json").write_text(json.dumps(bad))  # an H100's run in an H200 folder: refused, nothing stored
    res = _bash("--install", str(run), cwd=tree)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "host2.json" in res.stderr
    assert len(list(data.glob("host-dispatch-h200-*.json"))) == 5
