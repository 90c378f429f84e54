"""`ddlsim sweep --ray` on a real local Ray instance, kept small (two CPUs, a
capped object store, no dashboard): the same results as the local pool, and a
lost Ray worker (killed for real) loses and doubles nothing."""

import os
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddlsim.cli import app
from ddlsim.sweep import load_grid, read_sweep, run_grid
from ddlsim.sweep import ray_backend
from ddlsim.sweep.runner import TIMING_COLUMNS

try:
    import ray
except ImportError as exc:  # no Ray wheel for this Python: `make test` installs the sweep extra where there is one
    ray = None
    RAY_MISSING = f"Ray is not installed ({exc}); pip install 'ddlsim[sweep]' to run this test"

pytestmark = pytest.mark.skipif(ray is None, reason=RAY_MISSING if ray is None else "")

GRID = ('iterations = 1\nworkers = 2\n[model]\nname = "lenet5"\n[network]\nfidelity = "analytic"\nrecord_flows = true\n'
        '[sweep]\nnetwork.fidelity = ["analytic", "flow"]\nnetwork.bandwidth = ["10Gbps", "25Gbps"]\n')


@pytest.fixture(scope="module")
def local_ray():
    """One small local instance for this module, started as `ddlsim sweep --ray` starts one; always shut down."""
    saved = ray_backend.LOCAL_OBJECT_STORE_BYTES
    ray_backend.LOCAL_OBJECT_STORE_BYTES = 100 * 1024**2  # this machine is shared
    try:
        assert ray_backend.start_ray(ray, "local", cpus=2)
        assert ray.cluster_resources().get("CPU") == 2
        yield ray
    finally:
        ray_backend.LOCAL_OBJECT_STORE_BYTES = saved
        ray.shutdown()


def _without_timings(path):
    table = pq.read_table(path)
    return table.drop_columns([c for c in TIMING_COLUMNS if c in table.column_names])


def _parquet_bytes(table, tmp_path, name):
    path = tmp_path / name
    pq.write_table(table, path)
    return path.read_bytes()


def test_a_grid_on_local_ray_gives_the_local_pools_results(tmp_path, local_ray):
    scenario = tmp_path / "grid.toml"
    scenario.write_text(GRID)
    grid = load_grid(scenario)
    pool_out, ray_out = tmp_path / "pool", tmp_path / "ray"
    result = CliRunner().invoke(app, ["sweep", str(scenario), "--out", str(pool_out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["sweep", str(scenario), "--out", str(ray_out), "--jobs", "2", "--ray"])
    assert result.exit_code == 0, result.output
    assert "4 scenarios: 4 simulated on Ray (local instance)" in result.output
    assert ray.is_initialized()  # an instance the sweep did not start is left running

    for point in grid.points:
        for table in ("iterations", "flows"):
            pool_file, ray_file = pool_out / table / f"{point.key}.parquet", ray_out / table / f"{point.key}.parquet"
            assert pool_file.read_bytes() == ray_file.read_bytes(), (table, point.label)
        pool_summary = _without_timings(pool_out / "summary" / f"{point.key}.parquet")
        ray_summary = _without_timings(ray_out / "summary" / f"{point.key}.parquet")
        assert pool_summary.equals(ray_summary)
        assert _parquet_bytes(pool_summary, tmp_path, "a.parquet") == _parquet_bytes(ray_summary, tmp_path, "b.parquet")
    flows = pa.concat_tables([pq.read_table(ray_out / "flows" / f"{p.key}.parquet") for p in grid.points])
    assert flows.num_rows > 0 and set(flows.column("key").to_pylist()) == {p.key for p in grid.points}


def _workers_running_a_run() -> list[int]:
    """Ray worker processes executing a sweep run (their title is ray::_simulate_point)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_simulate_point"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds Ray's workers in /proc (Linux)")
def test_a_lost_ray_worker_loses_and_doubles_nothing(tmp_path, local_ray):
    scenario = tmp_path / "grid.toml"
    scenario.write_text('iterations = 1\n[model]\nname = "resnet50"\n[network]\nfidelity = "flow"\n'
                        f"[sweep]\nworkers = {list(range(4, 16))}\n")
    grid = load_grid(scenario)
    out = tmp_path / "out"
    outcome = {}

    def sweep():
        try:
            outcome["stats"] = run_grid(grid, out, jobs=2, ray="local")
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    thread = threading.Thread(target=sweep)
    thread.start()
    killed = []
    while thread.is_alive() and not killed:
        for pid in _workers_running_a_run():
            os.kill(pid, signal.SIGKILL)  # the worker dies in the middle of a run: Ray runs the task again
            killed.append(pid)
        time.sleep(0.002)
    thread.join(timeout=600)
    assert "error" not in outcome, outcome.get("error")
    assert killed, "no worker was caught running"
    assert outcome["stats"].simulated == len(grid.points)
    assert list(read_sweep(out)["key"]) == [p.key for p in grid.points]  # every run once
    assert sorted(p.name for p in (out / "summary").iterdir()) == sorted(f"{p.key}.parquet" for p in grid.points)
