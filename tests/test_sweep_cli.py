"""`ddlsim sweep`: grids (the cartesian product of the axes), the Parquet
dataset, resume, a real SIGKILL and resume, --status, bad input."""

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddlsim.cli import app
from ddlsim.sweep import load_grid, read_sweep
from ddlsim.sweep import runner as sweep_runner
from ddlsim.sweep.grid import parse_set

BASE = 'iterations = 1\nworkers = 2\n[model]\nname = "lenet5"\n[network]\nfidelity = "analytic"\n'


def _scenario(tmp_path, sweep="", base=BASE, name="grid.toml"):
    path = tmp_path / name
    path.write_text(base + ("\n[sweep]\n" + sweep if sweep else ""))
    return path


def _field(scenario, dotted):
    value = scenario
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _ddlsim(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddlsim", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def _invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


# ----------------------------------------------------------------- grids


def test_the_grid_is_the_cartesian_product_of_file_and_command_line_axes(tmp_path):
    path = _scenario(tmp_path, 'workers = [2, 3, 4]\nnetwork.bandwidth = ["10Gbps", "25Gbps"]\n'
                               '"network.latency" = ["5us", "10us"]\n')
    grid = load_grid(path, ["strategy.stream_policy=fifo,priority"])
    axes = {"workers": [2, 3, 4], "network.bandwidth": ["10Gbps", "25Gbps"], "network.latency": ["5us", "10us"],
            "strategy.stream_policy": ["fifo", "priority"]}
    expected = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]  # the last axis fastest
    assert [p.values for p in grid.points] == expected
    for point in grid.points:
        for key, value in point.values.items():
            assert _field(point.scenario, key) == value
        assert point.scenario.model.name == "lenet5" and point.scenario.iterations == 1  # the base is kept
    assert len({p.key for p in grid.points}) == len(expected)


def test_random_grids_match_itertools_product(tmp_path):
    rng = random.Random(18)
    pool = {"workers": [2, 3, 4, 5, 6], "iterations": [1, 2, 3], "seed": [0, 1, 2, 3],
            "network.bandwidth": ["1Gbps", "10Gbps", "40Gbps", "100Gbps"], "network.latency": ["1us", "2us", "50us"]}
    path = _scenario(tmp_path)
    for _ in range(12):
        keys = rng.sample(sorted(pool), rng.randint(1, 4))
        axes = {k: rng.sample(pool[k], rng.randint(1, len(pool[k]))) for k in keys}
        sets = [f"{k}={','.join(map(str, v))}" for k, v in axes.items()]
        grid = load_grid(path, sets)
        assert [p.values for p in grid.points] == [dict(zip(axes, c)) for c in itertools.product(*axes.values())]
        assert all(_field(p.scenario, k) == v for p in grid.points for k, v in p.values.items())


def test_set_replaces_the_file_axis_in_place_and_flat_names_reach_nested_tables(tmp_path):
    base = BASE.replace('fidelity = "analytic"', 'fidelity = "packet"')
    path = _scenario(tmp_path, 'workers = [2, 4]\nbandwidth = ["10Gbps"]\n', base=base)
    grid = load_grid(path, ["workers=3", "transport=newreno", "network.packet.queue_limit=100,200"])
    assert [a.key for a in grid.axes] == ["workers", "bandwidth", "transport", "network.packet.queue_limit"]
    assert [p.values["workers"] for p in grid.points] == [3, 3]
    for point, limit in zip(grid.points, (100, 200)):
        packet = point.scenario.network.packet
        assert point.scenario.network.bandwidth == "10Gbps" and packet.transport == "newreno"
        assert packet.queue_limit == limit


def test_set_values_are_toml_values_or_text():
    assert parse_set("workers=2,4").values == [2, 4]
    assert parse_set("network.record_flows=true,false").values == [True, False]
    assert parse_set('strategy.grouping="ddp:bucket_cap_mb=50","fusion:threshold=32MiB,cycle_time=2ms"').values == \
        ["ddp:bucket_cap_mb=50", "fusion:threshold=32MiB,cycle_time=2ms"]
    assert parse_set("network.bandwidth=10Gbps, 25Gbps").values == ["10Gbps", "25Gbps"]
    assert parse_set("jitter=0.5,1").values == [0.5, 1]


# ----------------------------------------------------------------- running, resuming, status


def test_a_sweep_writes_one_summary_row_per_run_and_resuming_skips_what_is_done(tmp_path, monkeypatch):
    path = _scenario(tmp_path, 'workers = [2, 3]\nnetwork.fidelity = ["analytic", "flow"]\n')
    out = tmp_path / "out"
    calls = []
    real = sweep_runner.simulate_run
    monkeypatch.setattr(sweep_runner, "simulate_run", lambda sc: calls.append(sc) or real(sc))
    result = _invoke("sweep", path, "--set", "network.record_flows=true", "--out", out, "--jobs", "1")
    assert "4 scenarios: 4 simulated" in result.output and len(calls) == 4
    grid = load_grid(path, ["network.record_flows=true"])
    summary = read_sweep(out)
    assert list(summary["key"]) == [p.key for p in grid.points]  # grid order
    assert list(zip(summary["workers"], summary["network.fidelity"])) == [(2, "analytic"), (2, "flow"), (3, "analytic"),
                                                                         (3, "flow")]
    assert str(summary["workers"].dtype) == "int64" and (summary["iteration_time_s"] > 0).all()
    # the side tables: one file per run, each row keyed by the run
    for table in ("iterations", "flows"):
        files = sorted(p.name for p in (out / table).iterdir())
        assert files == sorted(f"{p.key}.parquet" for p in grid.points)
        side = read_sweep(out, table)
        assert set(side["key"]) == set(summary["key"])
    iterations = read_sweep(out, "iterations")
    assert len(iterations) == 4 and list(iterations["time_s"]) == list(summary["iteration_time_s"])
    assert list(summary["flows"]) == [len(pq.read_table(out / "flows" / f"{k}.parquet")) for k in summary["key"]]

    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    calls.clear()
    result = _invoke("sweep", path, "--set", "network.record_flows=true", "--out", out, "--jobs", "1")
    assert "4 scenarios: 0 simulated" in result.output and "4 already done" in result.output and calls == []
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")} == stamps  # nothing rewritten
    # one more value on an axis: only its runs are simulated
    result = _invoke("sweep", path, "--set", "network.record_flows=true", "--set", "workers=2,3,4", "--out", out, "--jobs", "1")
    assert "6 scenarios: 2 simulated" in result.output and [sc.workers for sc in calls] == [4, 4]
    assert len(read_sweep(out)) == 6


def test_status_shows_done_and_missing_runs(tmp_path):
    path = _scenario(tmp_path, "workers = [2, 4]\n")
    out = tmp_path / "out"
    _invoke("sweep", path, "--out", out, "--jobs", "1", "--quiet")
    result = _invoke("sweep", "--status", out)
    assert "2 of 2 runs done, 0 missing" in result.output and "missing │" not in result.output
    # the same directory against a larger grid: the new point is missing
    result = _invoke("sweep", path, "--set", "workers=2,3,4", "--status", out)
    assert "2 of 3 runs done, 1 missing" in result.output
    assert [line.split()[1] for line in result.output.splitlines() if line.endswith("missing │")] == ["3"]
    # a lost run file: missing, and the next sweep runs exactly that one
    key = load_grid(path).points[1].key
    (out / "summary" / f"{key}.parquet").unlink()
    assert "1 of 2 runs done, 1 missing" in _invoke("sweep", "--status", out).output
    assert "2 scenarios: 1 simulated" in _invoke("sweep", path, "--out", out, "--jobs", "1").output


# runs slow enough (resnet50, flow level) that a kill lands while the sweep is running
SLOW = 'iterations = 1\n[model]\nname = "resnet50"\n[network]\nfidelity = "flow"\nrecord_flows = true\n'


def _start_and_kill(path, out, sig, jobs):
    """Starts `ddlsim sweep`, sends `sig` once the first run's summary file exists; the run files then."""
    argv = [sys.executable, "-m", "ddlsim", "sweep", str(path), "--out", str(out), "--jobs", str(jobs), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def first_run_done():
        folder = out / "summary"
        return folder.is_dir() and any(p.suffix == ".parquet" and not p.name.startswith(".") for p in folder.iterdir())

    try:
        while proc.poll() is None and not first_run_done():
            time.sleep(0.005)
        os.kill(proc.pid, sig)
    finally:
        proc.wait(timeout=120)
    return proc, {p.name for p in (out / "summary").iterdir() if p.suffix == ".parquet"}


def test_a_sweep_stopped_with_ctrl_c_keeps_its_runs_and_leaves_no_scratch(tmp_path):
    path = _scenario(tmp_path, f"workers = {list(range(4, 24))}\n", base=SLOW)
    out = tmp_path / "out"
    grid = load_grid(path)
    proc, done = _start_and_kill(path, out, signal.SIGINT, jobs=2)  # the local pool: its workers end too
    assert proc.returncode == 130 and "interrupted" in proc.stderr.read()
    assert 1 <= len(done) < len(grid.points)
    for table in ("summary", "iterations", "flows"):
        assert not [p.name for p in (out / table).iterdir() if p.name.startswith(".")], table  # no scratch
    assert {p.name for p in (out / "summary").iterdir()} == done
    rerun = _ddlsim("sweep", str(path), "--out", str(out), "--jobs", "2")
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(grid.points)} scenarios: {len(grid.points) - len(done)} simulated" in rerun.stdout
    assert list(read_sweep(out)["key"]) == [p.key for p in grid.points]


def test_a_sweep_killed_with_sigkill_resumes_losing_and_doubling_nothing(tmp_path):
    path = _scenario(tmp_path, f"workers = {list(range(4, 24))}\n", base=SLOW)
    out = tmp_path / "out"
    grid = load_grid(path)
    proc, done_after_kill = _start_and_kill(path, out, signal.SIGKILL, jobs=1)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    assert 1 <= len(done_after_kill) < len(grid.points)
    # what a kill in the middle of a write leaves (safe_io's scratch directory beside the file): not a run
    key = grid.points[-1].key
    scratch = out / "summary" / f".{key}.parquet.x1y2z3.tmp"
    scratch.mkdir(exist_ok=True)
    (scratch / f"{key}.parquet").write_bytes(b"PAR1 half a file")
    assert f"{key}.parquet" not in done_after_kill

    rerun = _ddlsim("sweep", str(path), "--out", str(out), "--jobs", "1")
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(grid.points)} scenarios: {len(grid.points) - len(done_after_kill)} simulated" in rerun.stdout
    summary = read_sweep(out)
    assert list(summary["key"]) == [p.key for p in grid.points]  # every run exactly once, in grid order
    assert list(summary["workers"]) == list(range(4, 24))
    for table in ("summary", "iterations", "flows"):
        names = sorted(p.name for p in (out / table).iterdir())
        assert names == sorted(f"{p.key}.parquet" for p in grid.points), table  # no scratch file left
    assert sorted(p.name for p in out.iterdir()) == [".ddlsim-sweep.lock", "flows", "iterations", "summary", "sweep.json"]
    assert len(read_sweep(out, "iterations")) == len(grid.points)


def test_a_second_sweep_into_a_busy_directory_is_refused(tmp_path):
    from ddlsim.sweep import RunDataset

    with RunDataset(tmp_path / "out").writing():
        child = _ddlsim("sweep", str(_scenario(tmp_path)), "--set", "workers=2", "--out", str(tmp_path / "out"))
        assert child.returncode == 2 and "another ddlsim sweep is writing there" in child.stderr
        assert len(child.stderr.strip().splitlines()) == 1
    with RunDataset(tmp_path / "out").writing():  # released
        pass


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize("sweep,sets,words", [
    ("", ["network.bandwidth_typo=10Gbps"], ["unknown key 'network.bandwidth_typo'", "bandwidth"]),
    ("workers = []\n", [], ["grid.toml: sweep.workers = [] is an empty axis"]),
    ("workers = 2\n", [], ["grid.toml: sweep.workers = 2 is one value", "sweep.workers = [2]"]),
    ("network = {}\n", [], ["grid.toml: sweep.network has no values"]),
    ("", ["workers"], ["--set 'workers'", "KEY=V1,V2"]),
    ("", ["workers="], ["--set 'workers='", "empty value"]),
    ("", ["workers=2,,4"], ["empty value"]),
    ("", ["=2,4"], ["KEY=V1,V2"]),
    ("", ["workers=0,2"], ["workers=0", "greater than or equal to 1"]),
    ("", ["network.fidelity=flow", "network.fidelity.x=1"], ["one is inside the other"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, sweep, sets, words):
    path = _scenario(tmp_path, sweep)
    out = tmp_path / "out"
    p = _ddlsim("sweep", str(path), *[a for s in sets for a in ("--set", s)], "--out", str(out))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    for word in words:
        assert word in p.stderr, p.stderr
    assert not out.exists()  # nothing written


def test_status_of_a_directory_that_is_no_sweep_is_one_line(tmp_path):
    p = _ddlsim("sweep", "--status", str(tmp_path))
    assert p.returncode == 2 and "sweep.json: not found" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_without_ray_installed_ray_is_a_one_line_error_naming_the_extra(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\nfrom ddlsim.cli import main\n"
            f"sys.argv = ['ddlsim', 'sweep', {str(_scenario(tmp_path))!r}, '--set', 'workers=2,3', '--out', "
            f"{str(tmp_path / 'out')!r}, '--ray']\nmain()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "pip install 'ddlsim[sweep]'" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_the_docs_shell_example_runs_and_resumes(tmp_path):
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "sweep.md").read_text(encoding="utf-8")
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split() for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["ddlsim", "sweep"]] * 3
    (tmp_path / "examples").symlink_to(root / "examples")
    outputs = []
    for argv in commands:
        p = _ddlsim(*argv[1:], cwd=tmp_path)
        assert p.returncode == 0, (argv, p.stderr)
        outputs.append(p.stdout)
    assert "4 scenarios: 4 simulated" in outputs[0]
    assert "8 scenarios: 4 simulated" in outputs[1] and "4 already done" in outputs[1]  # as the doc says
    assert "8 of 8 runs done, 0 missing" in outputs[2]


def test_the_manifest_never_overwrites_the_sweeps_own_scenario_file(tmp_path):
    scenario = _scenario(tmp_path, "workers = [2]\n", name="sweep.json")  # TOML, under the manifest's name
    before = scenario.read_bytes()
    p = _ddlsim("sweep", "sweep.json", "--out", ".", "--jobs", "1", cwd=tmp_path)
    assert p.returncode == 2 and "own input" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert scenario.read_bytes() == before
