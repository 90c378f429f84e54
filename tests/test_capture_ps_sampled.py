"""Sampled layer rows in the parameter-server capture (``ddlsim capture ps
--layer-every K``, docs/capture-ps.md): the lenet5 workers' per-layer rows on
iteration 0 and every K-th iteration from 1 on only, one forward and one
backward row (no name) on the others, with the same dependencies as the
layer rows; the metadata names the sampled iterations as a DDP capture's,
and analyze and replay read such a log. One real job (2 workers, 1
server, 6 iterations, K = 2) checked against its raw rows."""

from __future__ import annotations

from pathlib import Path

import forked_cli
import pytest

torch = pytest.importorskip("torch")

from ddlsim.capture.launch import launch_local  # noqa: E402
from ddlsim.capture.layer_hooks import layer_sampled  # noqa: E402
from ddlsim.capture.merge import merge_capture  # noqa: E402
from ddlsim.capture.ps import metadata, ps_config  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
K = 2
ITERATIONS = 6
SAMPLED = [0, 1, 3, 5]  # iteration 0 (the warm-up) and every K-th from 1
LAYERS = ["conv1", "conv2", "fc1", "fc2", "fc3"]


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    from ddlsim.trace import write_event_log

    config = ps_config(model="lenet5", workers=2, servers=1, iterations=ITERATIONS, batch_size=4, layer_every=K)
    out = tmp_path_factory.mktemp("ps-sampled")
    launch_local("ps", config, 3, out, timeout_s=90)
    log = merge_capture(out, metadata=metadata(config))
    write_event_log(log, out / "events.parquet")
    return config, log, out / "events.parquet"


def test_the_metadata_names_the_sampled_iterations(capture):
    config, log, _ = capture
    assert [i for i in range(ITERATIONS) if layer_sampled(i, K, 1)] == SAMPLED
    assert log.metadata["layer_every"] == K and log.metadata["layer_iterations"] == SAMPLED
    assert "layer_every" not in metadata(ps_config(model="lenet5"))  # K = 1: as before


def test_unsampled_iterations_have_one_row_per_pass_with_the_layer_rows_dependencies(capture):
    _, log, _ = capture
    df = log.table.to_pandas()
    by_id = df.set_index("id")
    passes = df[(df.kind == "compute") & df.op.isin(["forward", "backward"])]
    for rank in (0, 1):
        previous_backward = None
        for iteration in range(ITERATIONS):
            mine = passes[(passes["rank"] == rank) & (passes.iteration == iteration)].sort_values("start_ns")
            if iteration in SAMPLED:
                assert [(r.op, r["name"]) for _, r in mine.iterrows()] == (
                    [("forward", n) for n in LAYERS] + [("backward", n) for n in reversed(LAYERS)])
            else:
                assert list(mine.op) == ["forward", "backward"] and set(mine["name"]) == {""}
                assert set(mine.layer) == {-1}
                forward, backward = mine.iloc[0], mine.iloc[1]
                assert list(backward.deps) == [forward.id] and forward.end_ns <= backward.start_ns
                # every push of the iteration launches after the whole backward pass
                pushes = df[(df["rank"] == rank) & (df.iteration == iteration) & (df.op == "push_request")]
                assert len(pushes) == 10 and all(list(d) == [backward.id] for d in pushes.deps)
            # the first forward row waits for the previous iteration's pull responses and its last backward row
            first = mine.iloc[0]
            deps = by_id.loc[list(first.deps)]
            pulled = df[(df["rank"] == rank) & (df.iteration == iteration - 1) & (df.op == "pull_response")
                        & (df.kind == "recv")]
            assert sorted(deps[deps.op == "pull_response"].index) == sorted(pulled.id)
            if previous_backward is not None:
                assert previous_backward in set(first.deps)
            previous_backward = mine[mine.op == "backward"].sort_values("end_ns").iloc[-1].id


def test_analyze_and_replay_read_a_sampled_ps_capture(capture):
    _, _, path = capture
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "python")}
    analyze = forked_cli.run(["analyze", str(path)], timeout=300, env=env)
    assert analyze.returncode == 0, analyze.stderr[-2000:]
    text = " ".join((analyze.stdout + analyze.stderr).split())
    assert "layer rows on 4 iterations only (0, 1, 3, 5; --layer-every 2)" in text
    from ddlsim.simulation.model_build import build_model
    from ddlsim.simulation.replay import replay_plan
    from ddlsim.trace import read_event_log

    # the replay's layer times (without the framework's gaps) = the median over both workers and the counted sampled
    # iterations (1, 3, 5: the warm-up 0 left out, the un-sampled ones have no layer rows), computed here from the rows
    df = read_event_log(path).to_pandas()
    rows = df[(df.kind == "compute") & df.op.isin(["forward", "backward"]) & (df.name != "") & df.iteration.isin([1, 3, 5])]
    median = (rows.assign(t=rows.end_ns - rows.start_ns).groupby(["name", "op"]).t.median() / 1e9).to_dict()
    scenario, _ = replay_plan(path, overheads=False)
    assert scenario.iterations == ITERATIONS
    layers = build_model(scenario.model).layers
    assert [layer.name for layer in layers] == LAYERS
    for layer in layers:
        assert layer.fwd_s == pytest.approx(median[(layer.name, "forward")], rel=1e-9, abs=1e-12)
        assert layer.bwd_s == pytest.approx(median[(layer.name, "backward")], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("settings, message", [
    (dict(model="lenet5", layer_every=0), "layer_every must be a positive integer"),
    (dict(model="lenet5", layer_every=1.5), "layer_every = 1.5; give a whole number"),
    (dict(model="sparse-lr", layer_every=2), "only --model lenet5"),
])
def test_bad_layer_every(settings, message):
    with pytest.raises(DdlsimError, match=message):
        ps_config(**settings)


@pytest.mark.parametrize("args, message", [(["--layer-every", "0"], "layer_every must be a positive integer"),
                                           (["--layer-every", "3"], "only --model lenet5")])
def test_cli_refuses_a_bad_layer_every_in_one_line(tmp_path, args, message):
    out = tmp_path / "run"
    proc = forked_cli.run(["capture", "ps", "--out", str(out), "--connections", "none", *args], timeout=120, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "python")})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
