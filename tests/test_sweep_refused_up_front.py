"""A sweep that cannot run is refused before it writes anything or runs any point (found by probing the options,
2026-11-28): an unknown model in one point left sweep.json and the lock in a new --out directory; a grid with a good
and a bad point simulated the good one first; --ray-address '' left sweep.json, and an address nobody answers at made
Ray wait minutes, printing warnings."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import forked_cli
import pytest

from ddlsim.capture.launch import free_port
from ddlsim.errors import DdlsimError, ScenarioError
from ddlsim.sweep import load_grid, run_grid

ROOT = Path(__file__).resolve().parent.parent


def ddlsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "TMPDIR": str(cwd), "HOME": str(cwd)}
    return forked_cli.run([*args], timeout=120, cwd=cwd, env=env)


def refused(run: subprocess.CompletedProcess, *why: str) -> str:
    line = run.stderr.strip()
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "\n" not in line and line.startswith("error: ") and all(w in line for w in why), line
    return line


def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then let go)."""
    return free_port()  # nothing bound to it, and outside the range the kernel hands out


@pytest.mark.parametrize("models", ["nope", "lenet5,nope", "nope,lenet5"])
def test_a_point_that_cannot_run_is_refused_before_anything_is_written_or_run(tmp_path, models):
    out = tmp_path / "sweep"
    run = ddlsim("sweep", "--set", f"model.name={models}", "--set", "iterations=1", "-o", str(out), "-q", cwd=tmp_path)
    refused(run, "sweep point model.name=nope", "unknown model 'nope'", "nothing was run")
    assert not out.exists()  # before: sweep.json and .ddlsim-sweep.lock (and lenet5's run, before nope's error)


def test_into_an_existing_directory_nothing_is_added(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    run = ddlsim("sweep", "--set", "model.name=lenet5,nope", "-o", str(out), "-q", cwd=tmp_path)
    refused(run, "unknown model")
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_the_api_refuses_the_grid_before_it_runs_a_point(tmp_path):
    grid = load_grid(None, ["model.name=lenet5,nope", "iterations=1"])
    with pytest.raises(ScenarioError, match="sweep point model.name=nope iterations=1: unknown model"):
        run_grid(grid, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_point_over_the_budget_is_refused_up_front(tmp_path):
    # 2 workers run; 65,536 are over the memory and event budgets: refused before the 2 workers run
    out = tmp_path / "sweep"
    run = ddlsim("sweep", "--set", "workers=2,65536", "--set", "iterations=2", "-o", str(out), "-q", cwd=tmp_path)
    line = refused(run, "sweep point workers=65536 iterations=2", "nothing was run")
    # the ways to go on as sweep takes them (before: simulate's --workers and --iterations, which sweep has not)
    assert "fewer workers (--set workers=N)" in line and "(--set iterations=N, now 2)" in line, line
    assert "--max-memory" in line and "--force" in line and "(--workers)" not in line
    assert not out.exists()


def test_points_already_done_are_not_checked_again(tmp_path):
    out = tmp_path / "sweep"
    grid = load_grid(None, ["model.name=lenet5", "iterations=1"])
    assert run_grid(grid, out).simulated == 1
    again = run_grid(load_grid(None, ["model.name=lenet5", "iterations=1"]), out)
    assert (again.simulated, again.already_done) == (0, 1)


@pytest.mark.parametrize("address, why", [("", "--ray-address '': empty"),
                                          ("127.0.0.1:{closed}", "cannot reach 127.0.0.1 port {closed}")])
def test_a_ray_address_nobody_answers_at_is_refused_in_seconds_and_nothing_is_written(tmp_path, address, why):
    port = closed_port()
    out = tmp_path / "sweep"
    run = ddlsim("sweep", "--set", "iterations=1", "--ray-address", address.format(closed=port), "-o", str(out), "-q",
                 cwd=tmp_path)  # before: '' left sweep.json; 127.0.0.1:PORT made Ray wait minutes (the 120 s timeout)
    refused(run, why.format(closed=port))
    assert not out.exists()


@pytest.mark.parametrize("address, why", [("  ", "empty"), ("headnode", "not an address"), ("headnode:port", "not an address"),
                                          ("headnode:70000", "not an address"), ("ray://", "not an address"),
                                          ("ray://127.0.0.1:{closed}", "cannot reach 127.0.0.1 port {closed}")])
def test_addresses_that_are_not_one_or_do_not_answer(address, why):
    from ddlsim.sweep.ray_backend import check_address

    port = closed_port()
    with pytest.raises(DdlsimError, match=why.format(closed=port)):
        check_address(address.format(closed=port))


def test_the_address_check_does_not_need_ray():
    from ddlsim.sweep.ray_backend import check_address

    with pytest.raises(DdlsimError, match="cannot reach"):
        check_address(f"127.0.0.1:{closed_port()}")
    check_address("auto")  # left to Ray
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_address(f"127.0.0.1:{listening.getsockname()[1]}")


def test_the_sweeps_budget_options_are_its_own(tmp_path):
    # the budget's message says "--max-memory" and "--force": sweep has them (before: "no such option")
    out = tmp_path / "sweep"
    run = ddlsim("sweep", "--set", "workers=2,3", "--set", "iterations=1", "--max-memory", "1KB", "-o", str(out), "-q",
                 cwd=tmp_path)
    refused(run, "sweep point workers=2", "over the memory budget of 1.00 KB", "--force", "nothing was run")
    assert not out.exists()
    run = ddlsim("sweep", "--set", "workers=2,3", "--set", "iterations=1", "--max-memory", "1KB", "--force", "-j", "2",
                 "-o", str(out), "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(list((out / "summary").glob("*.parquet"))) == 2
    refused(ddlsim("sweep", "--max-memory", "lots", "-o", str(tmp_path / "x"), cwd=tmp_path), "--max-memory")
    assert not (tmp_path / "x").exists()
