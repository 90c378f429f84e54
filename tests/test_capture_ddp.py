"""The DDP capture records a real 2-rank gloo job faithfully (checked against
torch's own bucket assignment and the model's parameter sizes), survives a
killed rank, and feeds profile / analyze / replay."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.capture.ddp_run import run_ddp_capture  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.errors import DdlsimError  # noqa: E402
from ddlsim.trace import read_event_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CAP_MB = 0.05  # lenet5's 247 KB of gradients in two buckets after DDP's rebuild
CONFIG = {"model": "lenet5", "iterations": 3, "batch_size": 4, "image_size": 32, "bucket_cap_mb": CAP_MB, "seed": 0}


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    log, failure = run_ddp_capture(CONFIG, 2, out, timeout_s=120)
    assert failure is None
    return out, log, read_event_log(out / "events.parquet").to_pandas()


def lenet_params():
    from ddlsim.capture.ddp_models import build_model

    return list(build_model("lenet5").named_parameters())


def test_log_validates_and_every_layer_has_one_forward_and_one_backward_row(capture):
    out, log, df = capture
    assert not log.metadata["partial"] and log.metadata["model"] == "lenet5" and log.metadata["workers"] == 2
    compute = df[(df.kind == "compute") & df.op.isin(["forward", "backward"])]
    counts = compute.groupby(["rank", "iteration", "layer", "op"]).size()
    assert len(counts) == 2 * 3 * 5 * 2 and (counts == 1).all()
    assert set(compute.name) == {"conv1", "conv2", "fc1", "fc2", "fc3"}
    for (_, _), rows in compute[compute.op == "backward"].groupby(["rank", "iteration"]):
        assert rows.sort_values("start_ns").layer.tolist() == [4, 3, 2, 1, 0]
    for (_, _), rows in compute[compute.op == "forward"].groupby(["rank", "iteration"]):
        assert rows.sort_values("start_ns").layer.tolist() == [0, 1, 2, 3, 4]


def test_the_small_all_reduces_after_training_give_their_median_mean_and_count(capture):
    """The replay's per-step latency (the median) and per-call stall (the mean less the median) come from the same
    40 four-byte all-reduces after training."""
    _, log, _ = capture
    meta = log.metadata
    assert meta["allreduce_small_repeats"] == 40
    assert 0 < meta["allreduce_small_ns"] and 0 < meta["allreduce_small_mean_ns"]
    assert meta["allreduce_step_ns"] == meta["allreduce_small_ns"] / 2  # 2 ranks: 2 (N - 1) steps


def test_bucket_bytes_add_up_to_the_gradient_bytes(capture):
    _, _, df = capture
    gradient_bytes = sum(p.numel() * 4 for _, p in lenet_params())
    assert gradient_bytes == 61_706 * 4
    coll = df[df.kind == "collective"]
    assert (coll.op == "allreduce").all() and (coll.coll_type == "allreduce").all() and (coll.stream == "comm").all()
    per = coll.groupby(["rank", "iteration"]).bytes.sum()
    assert len(per) == 2 * 3 and (per == gradient_bytes).all()


def test_buckets_are_ddps_own_assignment_and_in_the_groups_table(capture):
    _, log, _ = capture
    params = [p for _, p in lenet_params()]
    names = [n for n, _ in lenet_params()]
    assert [p["name"] for p in log.metadata["parameters"]] == names
    layouts = log.metadata["bucket_layouts"]
    # iteration 0: DDP's provisional buckets (no unused-parameter search: everything in one bucket)
    initial, _ = torch.distributed._compute_bucket_assignment_by_size(params, [sys.maxsize])
    assert layouts[0]["from_iteration"] == 0 and [b["tensors"] for b in layouts[0]["buckets"]] == [sorted(t) for t in initial]
    assert layouts[0]["buckets"][0]["group"] == len(params)
    # from iteration 1: the rebuilt buckets, as the reducer itself reports them
    final = log.metadata["buckets"]
    assert layouts[-1]["from_iteration"] == 1 and [b["group"] for b in final] == list(range(len(final)))
    reducer = [[int(i) for i in b.split()] for b in log.metadata["ddp_reducer"]["rebuilt_per_bucket_param_indices"].split(",")]
    assert [b["tensors"] for b in final] == reducer
    # ... and as torch's assignment function makes them from that gradient order and the cap
    order = [t for b in final for t in b["tensors"]]
    cap = int(CAP_MB * 2**20)
    by_size, _ = torch.distributed._compute_bucket_assignment_by_size([params[t] for t in order], [cap, cap])
    assert [[order[i] for i in b] for b in by_size] == reducer
    groups = log.groups.to_pandas()
    for bucket in final:
        rows = groups[groups.group == bucket["group"]]
        assert rows.tensor.tolist() == bucket["tensors"] and (rows.kind == "bucket").all()
        sizes = [params[t].numel() * 4 for t in bucket["tensors"]]
        assert rows.bytes.tolist() == sizes and rows.offset.tolist() == list(np.cumsum([0] + sizes[:-1]))
        assert sum(sizes) == bucket["bytes"]


def test_one_collective_id_per_bucket_per_iteration_after_its_gradients(capture):
    _, log, df = capture
    coll = df[df.kind == "collective"]
    per = coll.groupby(["iteration", "group"]).collective.agg(["nunique", "size"])
    assert (per["nunique"] == 1).all() and (per["size"] == 2).all()
    assert coll.groupby("collective")[["iteration", "group"]].nunique().max().max() == 1
    layer_of = {}
    for index, layer in enumerate(log.metadata["layers"]):
        for t, p in enumerate(log.metadata["parameters"]):
            if p["name"].rsplit(".", 1)[0] == layer:
                layer_of[t] = index
    backward = df[(df.kind == "compute") & (df.op == "backward")]
    tensors = {g: rows.tensor.tolist() for g, rows in log.groups.to_pandas().groupby("group")}
    for row in coll.itertuples():
        layers = {layer_of[t] for t in tensors[row.group]}
        mine = backward[(backward["rank"] == row.rank) & (backward.iteration == row.iteration) & backward.layer.isin(layers)]
        assert len(mine) == len(layers) and row.start_ns >= mine.end_ns.max()
        assert row.end_ns > row.start_ns


def test_a_killed_rank_leaves_a_flagged_partial_but_valid_log(tmp_path):
    config = {**CONFIG, "iterations": 4, "crash_rank": 1, "crash_after_iteration": 1}
    log, failure = run_ddp_capture(config, 2, tmp_path, timeout_s=60)
    # the launcher names the lowest failed rank: rank 0 may fail too, once its peer is gone
    assert failure is not None and "exited with status" in str(failure)
    assert log.metadata["partial"] and 1 in log.metadata["partial_ranks"]
    reread = read_event_log(tmp_path / "events.parquet")
    df = reread.to_pandas()
    assert set(df[df["rank"] == 1].iteration) == {0, 1}


def test_profile_analyze_and_replay_read_the_capture(capture):
    from ddlsim.workload.profile import layer_times_from_log

    out, log, df = capture
    times = layer_times_from_log(out / "events.parquet")
    assert set(times) == {"conv1", "conv2", "fc1", "fc2", "fc3"}
    fc1 = df[(df.name == "fc1") & (df.op == "forward")]
    assert times["fc1"][0] == pytest.approx(float(np.median(fc1.end_ns - fc1.start_ns)) / 1e9)
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(out / "events.parquet"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)
    result = runner.invoke(app, ["replay", str(out / "events.parquet"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "recorded run" in result.output


@pytest.mark.parametrize("args, message", [
    (["--model", "vgg16"], "unknown model 'vgg16'"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--model", "lenet5", "--image-size", "64"], "lenet5 takes 1x32x32 images"),
    (["--bucket-cap-mb", "0"], "bucket_cap_mb must be a positive"),
])
def test_cli_refuses_bad_input_with_the_fix(tmp_path, args, message):
    result = CliRunner().invoke(app, ["capture", "ddp", *args, "--out", str(tmp_path / "run")])
    assert isinstance(result.exception, DdlsimError) and message in str(result.exception)
    assert not (tmp_path / "run").exists()


def test_cli_refuses_an_out_dir_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    result = CliRunner().invoke(app, ["capture", "ddp", "--model", "lenet5", "--out", str(target)])
    assert isinstance(result.exception, DdlsimError) and "is a file" in str(result.exception)


def test_the_own_script_example_runs_and_writes_a_valid_log(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "capture_own_script.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    log = read_event_log(tmp_path / "events.parquet")
    df = log.to_pandas()
    assert log.metadata["script"] and log.metadata["iterations"] == 3 and not log.metadata["partial"]
    coll = df[df.kind == "collective"]
    assert (coll.groupby(["rank", "iteration"]).bytes.sum() == (64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10) * 4).all()
    assert set(df[df.op == "forward"].name) == {"0", "2", "4"}


@pytest.mark.parametrize("cores, noted", [(1, True), (2, False)])
def test_a_capture_with_more_ranks_than_cores_says_so_and_records_both(tmp_path, monkeypatch, cores, noted):
    """2 ranks on a machine with `cores` cores (its affinity, stood in for): the capture notes that they take turns
    on the cores where they outnumber them, records both counts, and replay repeats the note; with a core each, not."""
    import ddlsim
    import ddlsim.capture.launch as launch

    monkeypatch.setattr(launch, "host_cores", lambda: cores)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["capture", "ddp", "--model", "lenet5", "--workers", "2", "--iterations", "2",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert ("note: 2 processes on 1 cores: they take turns on the cores" in text) == noted
    meta = read_event_log(out / "events.parquet").metadata
    assert (meta["processes"], meta["host_cores"]) == (2, cores)
    notes = ddlsim.replay(out / "events.parquet").notes
    assert any("ran 2 processes on 1 cores" in n for n in notes) == noted


@pytest.mark.parametrize("out", ["-1", "--run"])
def test_an_output_directory_whose_name_starts_with_a_dash_is_captured_into(tmp_path, out):
    # before: the ranks were started with "--out -1/...", which their argument parser read as an option, so every
    # rank exited at once ("expected one argument") and plan --apply=-1 failed with "no rank recorded anything"
    import os

    run = subprocess.run([sys.executable, "-m", "ddlsim", "capture", "ddp", "--model", "lenet5", "--workers", "2",
                          "--iterations", "1", "--batch-size", "4", f"--out={out}"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path),
                                                      "PYTHONPATH": str(ROOT / "python")})
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(read_event_log(tmp_path / out / "events.parquet").to_pandas()) > 0
