"""`ddlsim sweep --ray` on a real local Ray instance, kept small (two CPUs, a
capped object store, no dashboard): the same results as the local pool."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddlsim.cli import app
from ddlsim.sweep import load_grid
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


def _without_timings(path):
    table = pq.read_table(path)
    return table.drop_columns([c for c in TIMING_COLUMNS if c in table.column_names])


def _parquet_bytes(table, tmp_path, name):
    path = tmp_path / name
    pq.write_table(table, path)
    return path.read_bytes()


def test_a_grid_on_local_ray_gives_the_local_pools_results(tmp_path, monkeypatch):
    scenario = tmp_path / "grid.toml"
    scenario.write_text(GRID)
    grid = load_grid(scenario)
    pool_out, ray_out = tmp_path / "pool", tmp_path / "ray"
    result = CliRunner().invoke(app, ["sweep", str(scenario), "--out", str(pool_out), "--jobs", "2"])
    assert result.exit_code == 0, result.output

    monkeypatch.setattr(ray_backend, "LOCAL_OBJECT_STORE_BYTES", 100 * 1024**2)  # small: this machine is shared
    try:
        result = CliRunner().invoke(app, ["sweep", str(scenario), "--out", str(ray_out), "--jobs", "2", "--ray"])
        assert result.exit_code == 0, result.output
        assert "4 scenarios: 4 simulated on Ray (local instance)" in result.output
        assert not ray.is_initialized()  # the instance the sweep started is gone
    finally:
        ray.shutdown()

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
