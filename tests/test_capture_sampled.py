"""Sampled layer rows (``ddlsim capture ddp --layer-every K``, docs/capture.md
"Overhead"): layer rows on iteration 0 and every K-th iteration from 1 on
only, no per-layer hook installed on the others, the cheap rows (buckets,
optimizer, marker, one row per pass) on every iteration; the log says which
iterations carry layer rows, and analyze, replay, simulate --profile and the
sampled rank times read it (layer times from the sampled iterations)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import forked_cli
import pytest

torch = pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")

from typer.testing import CliRunner  # noqa: E402

from ddlsim.capture.ddp_hooks import DdpHooks  # noqa: E402
from ddlsim.capture.layer_hooks import layer_sampled  # noqa: E402
from ddlsim.capture.recorder import RankRecorder  # noqa: E402
from ddlsim.cli.app import app  # noqa: E402
from ddlsim.trace import read_event_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
K = 3
ITERATIONS = 8
SAMPLED = [0, 1, 4, 7]  # iteration 0 (the warm-up) and every K-th from 1


def test_the_schedule_samples_the_warm_up_and_every_kth_iteration_after_it():
    assert [i for i in range(ITERATIONS) if layer_sampled(i, K, 1)] == SAMPLED
    assert [i for i in range(6) if layer_sampled(i, 1, 1)] == list(range(6))
    assert [i for i in range(9) if layer_sampled(i, 4, 2)] == [0, 1, 2, 6]


def test_unsampled_iterations_install_no_layer_hook_and_keep_the_cheap_rows(tmp_path, one_rank, monkeypatch, small_cnn):
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn(), bucket_cap_mb=0.002)  # several buckets
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec, layer_every=K, layer_warmup=1)
    layers = [m for _, m in hooks.layers]
    import ddlsim.capture.layer_hooks as layer_hooks

    marks, real_now = [], layer_hooks.now_ns
    monkeypatch.setattr(layer_hooks, "now_ns", lambda: marks.append(1) or real_now())  # every time point on the CPU
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])
    installed, time_points = [], []
    for iteration in range(ITERATIONS):
        hooks.begin_iteration(iteration)
        installed.append(sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in layers))
        before = len(marks)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        time_points.append(len(marks) - before)  # taken by the hooks in the forward and backward passes
        start = hooks.mark()
        optimizer.step()
        hooks.optimizer_step_row(start, hooks.mark())
        hooks.end_iteration()
    rec.close()
    assert installed == [2 * len(layers) if i in SAMPLED else 0 for i in range(ITERATIONS)]
    # the passes of an un-sampled iteration take four time points (two per pass), whatever the number of layers, a
    # sampled one four per layer; the all-reduces one each in both (DDP's rebuilt buckets from iteration 1 on)
    unsampled = [t for i, t in enumerate(time_points) if i not in SAMPLED]
    assert len(set(unsampled)) == 1 and unsampled[0] > 4
    assert [time_points[i] - unsampled[0] for i in SAMPLED[1:]] == [4 * len(layers) - 4] * (len(SAMPLED) - 1)
    assert hooks.facts()["layer_iterations"] == SAMPLED and hooks.facts()["layer_every"] == K
    rows = [json.loads(line) for line in rec.path.read_text().splitlines() if line.startswith('{"id"')]
    by_id = {r["id"]: r for r in rows}
    names = [n for n, _ in hooks.layers]
    for iteration in range(ITERATIONS):
        mine = sorted((r for r in rows if r["iteration"] == iteration), key=lambda r: r["id"])
        compute = sorted((r for r in mine if r["kind"] == "compute"), key=lambda r: r["start_ns"])
        if iteration in SAMPLED:
            expected = [("forward", n) for n in names] + [("backward", n) for n in reversed(names)]
        else:
            expected = [("forward", None), ("backward", None)]
        assert [(r["op"], r.get("name")) for r in compute] == expected + [("optimizer_step", "optimizer")]
        for before, row in zip(compute, compute[1:]):
            assert row["deps"][0] == before["id"] and before["end_ns"] <= row["start_ns"]
        collectives = [r for r in mine if r["kind"] == "collective"]
        assert len(collectives) >= 1 and set(r["id"] for r in collectives) <= set(compute[-1]["deps"])
        assert mine[-1]["kind"] == "marker" and mine[-1]["start_ns"] <= compute[0]["start_ns"]
        assert compute[-1]["end_ns"] <= mine[-1]["end_ns"]
    for row in rows:
        assert all(d < row["id"] and by_id[d]["end_ns"] <= row["end_ns"] for d in row["deps"])


def test_layer_every_one_records_as_before(tmp_path, one_rank, small_cnn):
    """K = 1 (the default) installs the hooks once and writes no sampling metadata: the log of before."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn())
    hooks = DdpHooks(ddp, RankRecorder(tmp_path, 0, "worker"))
    assert hooks._pass_handles == [] and "layer_every" not in hooks.facts()
    handles = list(hooks._handles)
    for iteration in range(3):
        hooks.begin_iteration(iteration)
        assert hooks._handles == handles  # never taken off and put back
    hooks.rec.close()


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A 1-rank CPU capture with --layer-every 3 (one rank: no wait for a slower rank in the replay's layer times,
    so they are the rows' means and gaps exactly)."""
    out = tmp_path_factory.mktemp("sampled") / "run"
    result = CliRunner().invoke(app, ["capture", "ddp", "--model", "lenet5", "--workers", "1", "--iterations",
                                      str(ITERATIONS), "--layer-every", str(K), "--bucket-cap-mb", "0.05", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "layer rows on 4 of 8 iterations (0, 1, 4, 7; --layer-every 3)" in " ".join(result.output.split())
    return out / "events.parquet"


def test_the_log_says_which_iterations_carry_layer_rows(capture):
    log = read_event_log(capture)
    assert log.metadata["layer_every"] == K and log.metadata["layer_iterations"] == SAMPLED
    df = log.to_pandas()
    named = df[(df.kind == "compute") & df.op.isin(["forward", "backward"]) & (df.name != "")]
    assert sorted(set(named.iteration)) == SAMPLED
    assert (named.groupby(["iteration", "op"]).size() == 5).all()  # lenet5's 5 layers, both passes
    passes = df[(df.kind == "compute") & df.op.isin(["forward", "backward"]) & (df.name == "")]
    assert sorted(set(passes.iteration)) == [i for i in range(ITERATIONS) if i not in SAMPLED]
    assert (passes.groupby("iteration").size() == 2).all() and (passes.layer == -1).all()
    for op in ("optimizer_step", "iteration"):
        assert sorted(df[df.op == op].iteration) == list(range(ITERATIONS))
    # the all-reduce rows: the sampled iterations' buckets only (the others ran DDP's own all-reduce, no comm hook)
    per = df[df.kind == "collective"].groupby("iteration").bytes.sum()
    assert list(per.index) == SAMPLED and per.nunique() == 1 and log.metadata["collective_iterations"] == SAMPLED


def _gaps(df: "pd.DataFrame", counted: list[int]) -> dict:  # noqa: F821
    """Per (layer, op): the mean over the counted iterations of the time since the previous compute row ended (one
    rank: the previous row in start order ended before it; all-reduces end before the optimizer starts)."""
    compute = df[df.kind == "compute"].sort_values("start_ns")
    gap = compute.start_ns - compute.end_ns.shift(1)
    compute = compute.assign(gap=gap.clip(lower=0))
    named = compute[compute.iteration.isin(counted) & (compute.name != "") & compute.op.isin(["forward", "backward"])]
    return (named.groupby(["name", "op"]).gap.sum() / len(counted) / 1e9).to_dict()


def test_replay_takes_the_layer_times_from_the_sampled_iterations(capture):
    """The replay's layer time = the layer's mean over the counted sampled iterations (computed here from the rows)
    + the mean gap before it in them; the first layer's forward also holds the optimizer step, averaged over every
    counted iteration."""
    from ddlsim.simulation.model_build import build_model
    from ddlsim.simulation.replay import replay_plan

    df = read_event_log(capture).to_pandas()
    counted = [i for i in SAMPLED if i >= 1]  # iteration 0 is the warm-up
    rows = df[(df.kind == "compute") & df.op.isin(["forward", "backward"]) & (df.name != "")]
    mean = (rows[rows.iteration.isin(counted)].assign(t=lambda d: d.end_ns - d.start_ns)
            .groupby(["name", "op"]).t.mean() / 1e9).to_dict()
    gaps = _gaps(df, counted)
    scenario, _ = replay_plan(capture)
    assert scenario.iterations == ITERATIONS
    model = build_model(scenario.model)
    step = df[df.op == "optimizer_step"]
    ends = df[df.kind == "collective"].groupby("iteration").end_ns.max()
    # after the all-reduces: on the iterations that recorded them (the others' step holds their exposed time)
    optimizer = float(np.mean([r.end_ns - ends[r.iteration] for r in step.itertuples() if r.iteration in counted])) / 1e9
    for layer in model.layers:
        fwd = mean[(layer.name, "forward")] + gaps[(layer.name, "forward")]
        if layer.name == model.layers[0].name:
            fwd += optimizer
        assert layer.fwd_s == pytest.approx(fwd, rel=1e-9, abs=1e-12)
        assert layer.bwd_s == pytest.approx(mean[(layer.name, "backward")] + gaps[(layer.name, "backward")],
                                            rel=1e-9, abs=1e-12)


def test_analyze_replay_and_simulate_profile_read_the_sampled_log(capture):
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", str(capture), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    text = json.dumps(data)
    assert "nan" not in text.lower()
    result = runner.invoke(app, ["analyze", str(capture)])
    assert result.exit_code == 0 and f"{ITERATIONS} iterations" in result.output
    assert "layer rows on 4 iterations only (0, 1, 4, 7; --layer-every 3)" in " ".join(result.output.split())
    assert any("--layer-every 3" in n for n in data.get("notes", data.get("headline", {}).get("notes", [])))
    from ddlsim.analyze.breakdown import iteration_arrays

    arrays = iteration_arrays(read_event_log(capture))
    assert list(arrays["iteration"]) == list(range(ITERATIONS))
    assert (arrays["compute_s"] > 0).all()  # the un-sampled iterations' passes are compute too
    result = runner.invoke(app, ["replay", str(capture), "--quiet"])
    assert result.exit_code == 0 and "mean of iterations 1-7" in result.output, result.output
    result = runner.invoke(app, ["replay", str(capture), "--quiet", "--rank-times", "sampled"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["simulate", "--model", "lenet5", "--workers", "2", "--profile", str(capture), "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_bad_layer_every_is_one_line_and_exit_2(tmp_path, value):
    out = tmp_path / "run"
    proc = forked_cli.run(["capture", "ddp", "--model", "lenet5", "--layer-every", value, "--out", str(out)], cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--layer-every must be a positive integer" in lines[0] and value in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_the_python_api_refuses_a_bad_layer_every(value):
    from ddlsim.capture.ddp import job_config
    from ddlsim.capture.layer_hooks import check_layer_every

    with pytest.raises(ValueError, match="layer_every must be a positive integer"):
        check_layer_every(value)
    with pytest.raises(ValueError, match="layer_every"):
        job_config({"layer_every": value})


def test_gpu_sampled_iterations_are_timed_by_events_and_written_one_iteration_behind(tmp_path, one_rank, monkeypatch, small_cnn, fake_gpu,
                                                                                      train_small):
    """On a GPU (CUDA events, faked here) an un-sampled iteration's passes are event-timed rows on the iteration's
    clock like the rest: within the marker, on the 0.5 ms tick grid; each iteration's rows complete."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(small_cnn())
    rec = RankRecorder(tmp_path, 0, "worker")
    hooks = DdpHooks(ddp, rec, cuda=True, layer_every=K, layer_warmup=1)
    train_small(ddp, hooks, ITERATIONS)
    rec.close()
    rows = [json.loads(line) for line in rec.path.read_text().splitlines() if line.startswith('{"id"')]
    for iteration in range(ITERATIONS):
        mine = sorted((r for r in rows if r["iteration"] == iteration), key=lambda r: r["id"])
        compute = sorted((r for r in mine if r["kind"] == "compute"), key=lambda r: r["start_ns"])
        named = [r for r in compute if r.get("name") not in (None, "optimizer")]
        assert len(named) == (8 if iteration in SAMPLED else 0)
        assert [r["op"] for r in compute if "name" not in r] == ([] if iteration in SAMPLED else ["forward", "backward"])
        marker = mine[-1]
        assert marker["kind"] == "marker"
        for row in mine:
            assert marker["start_ns"] <= row["start_ns"] <= row["end_ns"] <= marker["end_ns"]
            assert (row["start_ns"] - marker["start_ns"]) % 500_000 == 0
        for before, row in zip(compute, compute[1:]):
            assert row["deps"][0] == before["id"] and before["end_ns"] <= row["start_ns"]


def test_attach_samples_the_layer_rows_of_your_own_script(tmp_path, one_rank, small_cnn):
    """``ddlsim.capture.attach(..., layer_every=K)``: the same sampling in a user's own training loop."""
    from torch.nn.parallel import DistributedDataParallel

    import ddlsim.capture

    ddp = DistributedDataParallel(small_cnn())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])
    with pytest.raises(ValueError, match="layer_every must be a positive integer"):
        ddlsim.capture.attach(ddp, tmp_path / "bad", layer_every=0)
    rec = ddlsim.capture.attach(ddp, tmp_path / "run", layer_every=2)
    for _ in range(5):
        with rec.iteration():
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            with rec.optimizer_step():
                optimizer.step()
    log = read_event_log(rec.close())
    assert log.metadata["layer_every"] == 2 and log.metadata["layer_iterations"] == [0, 1, 3]
    df = log.to_pandas()
    assert sorted(set(df[(df.kind == "compute") & (df.name != "") & (df.op == "forward")].iteration)) == [0, 1, 3]
    assert sorted(df[df.op == "iteration"].iteration) == list(range(5))


@pytest.mark.parametrize("first", ["import ddlsim.capture as c", "from ddlsim.capture.attach import DdpCapture\nimport ddlsim.capture as c"])
def test_ddlsim_capture_attach_stays_callable(first):
    """``ddlsim.capture.attach`` is callable on every use, however the package was imported (it was the submodule
    of the same name from its second use on)."""
    code = f"{first}\nfor _ in range(3):\n    assert callable(c.attach), c.attach\nprint('ok')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "python")})
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_replay_says_how_long_the_sampled_iterations_took_against_the_others(capture):
    """The note's two means are the marker rows' (pandas here) of the counted iterations with and without layer rows."""
    from ddlsim.simulation.replay import replay_plan
    from ddlsim.simulation.sampled import sampled_iteration_times

    log = read_event_log(capture)
    df = log.to_pandas()
    markers = df[(df.kind == "marker") & (df.iteration >= 1)].assign(t=lambda d: (d.end_ns - d.start_ns) / 1e9)
    on = markers[markers.iteration.isin([1, 4, 7])].t.mean()
    off = markers[~markers.iteration.isin([1, 4, 7])].t.mean()
    found = sampled_iteration_times(log)
    assert found["sampled"] == 3 and found["others"] == 4 and found["every"] == K
    assert found["sampled_s"] == pytest.approx(on, rel=1e-12) and found["others_s"] == pytest.approx(off, rel=1e-12)
    _, notes = replay_plan(capture)
    assert any(n.startswith("replay: layer times and gaps from the 3 counted iterations with layer rows") and
               f"{off * 1e3:.4g} ms for the 4 others" in n for n in notes), notes
    assert sampled_iteration_times(log, {**log.metadata, "layer_every": 1}) is None


def test_a_failed_rank_leaves_the_sampled_iterations_its_rows_hold_in_the_metadata(tmp_path):
    """The facts a rank writes go stale after a failure (written at iteration 0 and on bucket changes): the merge
    takes the iterations with layer rows from the rows themselves."""
    from ddlsim.capture.ddp_run import run_ddp_capture

    config = {"model": "lenet5", "iterations": 8, "batch_size": 4, "bucket_cap_mb": 0.05, "layer_every": 2,
              "crash_rank": 1, "crash_after_iteration": 5}
    log, failure = run_ddp_capture(config, 2, tmp_path / "run", timeout_s=120)
    assert failure is not None and log.metadata["partial"]
    df = read_event_log(tmp_path / "run" / "events.parquet").to_pandas()
    named = df[(df.kind == "compute") & df.op.isin(["forward", "backward"]) & (df.name != "")]
    assert log.metadata["layer_iterations"] == sorted(set(named.iteration)) and {0, 1, 3, 5} <= set(named.iteration)
    assert read_event_log(tmp_path / "run" / "events.parquet").metadata["layer_iterations"] == log.metadata["layer_iterations"]


def _warm_slow_rows(sampled, iterations=5, warm_ms=10, ms=1):
    """A one-rank capture whose warm-up forward takes `warm_ms`, every other `ms`; layer rows on `sampled` only,
    one unnamed row per pass elsewhere (as --layer-every records them)."""
    MS = 1_000_000
    out, t = [], 0
    for it in range(iterations):
        fwd = (warm_ms if it == 0 else ms) * MS
        name = "conv1" if it in sampled else ""
        out.append(dict(iteration=it, rank=0, role="worker", kind="compute", op="forward", name=name, start_ns=t, end_ns=t + fwd))
        out.append(dict(iteration=it, rank=0, role="worker", kind="compute", op="backward", name=name, start_ns=t + fwd,
                        end_ns=t + fwd + MS))
        t += 20 * MS
    for i, r in enumerate(out):
        r["id"] = i
    return out


@pytest.mark.parametrize("every,sampled", [(1, [0, 1, 2, 3, 4]), (2, [0, 1, 3]), (10, [0, 1])])
def test_a_sampled_captures_layer_times_leave_the_warm_up_out(every, sampled):
    """The warm-up is always sampled, so with few sampled iterations its slow rows were half the samples of each
    layer and set the median of --profile / replay --no-overheads / plan --profile: 5.50 ms at K = 10 where every
    counted iteration took 1 ms (found by review). Oracle: the counted iterations' own time, 1 ms."""
    from ddlsim.trace import event_log_from_rows
    from ddlsim.workload.profile import layer_times_from_log

    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "workers": 1, "layer_every": every,
            "layer_iterations": sampled}
    log = event_log_from_rows(_warm_slow_rows(sampled), metadata=meta)
    assert layer_times_from_log(log)["conv1"] == (0.001, 0.001)


def test_a_log_whose_only_layer_rows_are_the_warm_ups_still_gives_them():
    from ddlsim.trace import event_log_from_rows
    from ddlsim.workload.profile import layer_times_from_log

    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "workers": 1, "layer_every": 10, "layer_iterations": [0]}
    log = event_log_from_rows(_warm_slow_rows([0]), metadata=meta)
    assert layer_times_from_log(log)["conv1"] == (0.010, 0.001)


def test_the_replays_note_names_gaps_only_where_it_takes_them(capture):
    from ddlsim.simulation.sampled import sampled_layers_note
    from ddlsim.trace.parquet import read_event_log

    log = read_event_log(capture)
    with_gaps, without = sampled_layers_note(log), sampled_layers_note(log, gaps=False)
    assert with_gaps.startswith("replay: layer times and gaps from the ")
    assert without.startswith("replay: layer times from the ")
