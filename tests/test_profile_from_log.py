"""Layer times from an event log (`--profile events.parquet`): what planning
uses when the model's times come from a run rather than FLOPs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import ModelError
from ddlsim.trace import read_event_log, write_event_log
from ddlsim.workload.profile import layer_times_from_log


@pytest.fixture(scope="module")
def resnet_log(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "events.parquet"
    r = ddlsim.simulate(model="resnet50", workers=4, iterations=2, device="T4")
    write_event_log(r.events, out)
    return r, out


def test_a_profiled_run_times_each_layer_as_the_logs_own_rows_say(resnet_log):
    """Oracle read straight off the log's rows (not through the profile code): each layer's forward and backward time is
    the median over ranks and iterations of its rows; a one-worker run with the log as its profile runs every layer's
    forward and backward for exactly that long (a swap of forward and backward, or of layers, fails), and its iteration is
    their sum."""
    _, path = resnet_log
    df = read_event_log(path).to_pandas()
    rows = df[(df.kind == "compute") & df.op.isin(["forward", "backward"])]
    expected = rows.assign(d=rows.end_ns - rows.start_ns).groupby(["op", "name", "rank", "iteration"])["d"].sum() \
        .groupby(["op", "name"]).median()
    again = ddlsim.simulate(model="resnet50", workers=1, iterations=1, profile=str(path))
    ran = again.events.to_pandas().query("kind == 'compute' and op in ('forward', 'backward')")
    took = ran.assign(d=ran.end_ns - ran.start_ns).groupby(["op", "name"])["d"].sum()
    assert set(took.index) == set(expected.index)
    for key, ns in expected.items():
        assert abs(took[key] - ns) <= 1, key  # the profile keeps whole nanoseconds
    assert again.iteration_time_s * 1e9 == pytest.approx(expected.sum(), abs=len(expected))


def test_times_are_the_median_over_ranks_and_iterations_of_each_layers_rows():
    # hand-made log: layer "a" forward takes 10, 30, 20 ns (median 20); backward is two rows
    # in one iteration (5 + 7 = 12) on one rank and 100 on another (median of 12 and 100 = 56)
    rows = [
        dict(rank=0, iteration=0, op="forward", name="a", start_ns=0, end_ns=10),
        dict(rank=1, iteration=0, op="forward", name="a", start_ns=0, end_ns=30),
        dict(rank=0, iteration=1, op="forward", name="a", start_ns=100, end_ns=120),
        dict(rank=0, iteration=0, op="backward", name="a", start_ns=50, end_ns=55),
        dict(rank=0, iteration=0, op="backward", name="a", start_ns=60, end_ns=67),
        dict(rank=1, iteration=0, op="backward", name="a", start_ns=50, end_ns=150),
        dict(rank=2, iteration=0, op="forward", name="a", start_ns=0, end_ns=10_000, role="server"),
    ]
    from ddlsim.trace import event_log_from_rows

    log = event_log_from_rows([{"id": i, "kind": "compute", "role": "worker", **row} for i, row in enumerate(rows)])
    fwd, bwd = layer_times_from_log(log)["a"]
    assert (fwd, bwd) == (20e-9, 56e-9)


def test_a_log_without_layer_compute_rows_is_refused_naming_the_file(tmp_path):
    from ddlsim.trace import event_log_from_rows

    log = event_log_from_rows([{"id": 0, "kind": "marker", "op": "start", "rank": 0, "role": "worker", "start_ns": 0, "end_ns": 0}])
    path = tmp_path / "no-compute.parquet"
    write_event_log(log, path)
    with pytest.raises(ModelError, match=r"no-compute.parquet: no forward/backward compute rows"):
        ddlsim.simulate(model="resnet50", workers=2, profile=str(path))


def test_a_log_of_another_model_is_refused_naming_the_file(resnet_log):
    _, path = resnet_log
    with pytest.raises(ModelError, match=r"events.parquet: layer\(s\) not in model"):
        ddlsim.simulate(model="vgg16", workers=2, profile=str(path))


def test_plan_takes_a_logs_layer_times(resnet_log, tmp_path):
    _, path = resnet_log
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["plan", "--model", "resnet50", "--profile", str(path), "--workers", "4",
                                      "--bucket-caps", "25", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "mg_wfbp" in out.read_text()
