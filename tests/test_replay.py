"""`ddlsim replay`: a recorded run's model, workers and measured layer times,
its communication simulated again under its own or other conditions."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.cli.app import app
from ddlsim.errors import DdlsimError
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log


MS = 1_000_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
FWD_MS = {"conv1": 3, "conv2": 5, "fc1": 2, "fc2": 1, "fc3": 1}
BWD_MS = {"conv1": 4, "conv2": 8, "fc1": 3, "fc2": 2, "fc3": 1}
# lenet5's gradients in bytes (fp32): fc3 + fc2 + fc1 (weights and biases), then conv2 + conv1
FC_BYTES, CONV_BYTES = 4 * (840 + 10 + 10080 + 84 + 48000 + 120), 4 * (2400 + 16 + 150 + 6)


def captured_lenet(path, *, bandwidth=None, buckets=True, iterations=3):
    """A hand-built DDP capture of lenet5 on 2 ranks: every layer's forward and backward with the times above, except
    iteration 0, 10x slower (a warm-up the median leaves out); DDP's buckets as the capture saw them: 2 buckets (fc3-fc1,
    then conv2-conv1), where DDP's rule for a 25 MiB cap (first bucket 1 MiB) gives 1."""
    rows, t = [], 0
    for iteration in range(iterations):
        slow = 10 if iteration == 0 else 1
        for rank in (0, 1):
            now = t
            for op, order, table in (("forward", LENET, FWD_MS), ("backward", LENET[::-1], BWD_MS)):
                for layer in order:
                    d = table[layer] * MS * slow
                    rows.append(dict(id=len(rows), iteration=iteration, rank=rank, role="worker", kind="compute", op=op,
                                     name=layer, start_ns=now, end_ns=now + d))
                    now += d
        t = now + MS
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in ddlsim.load_model("lenet5").tensors]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "ranks": {"0": {}, "1": {}}}
    if buckets:
        meta["buckets"] = [{"bucket": 0, "group": 0, "tensors": [9, 8, 7, 6, 5, 4], "bytes": FC_BYTES},
                           {"bucket": 1, "group": 1, "tensors": [3, 2, 1, 0], "bytes": CONV_BYTES}]
    if bandwidth:
        meta["bandwidth"] = bandwidth
    write_event_log(event_log_from_rows(rows, metadata=meta), path)
    return path


def test_a_replay_of_a_hand_built_log_matches_its_closed_form(tmp_path):
    """Oracle on paper: one worker has no communication, so an iteration is the sum of the median forward and backward
    times (12 + 18 ms; the 10x warm-up is not the median). Two workers, one all-reduce after the whole backward
    (synceasgd), analytic network: the ring's 2 (N - 1) = 2 steps each move B / N bytes, alpha + ceil(B / 2 x 8 / bw) ns."""
    events = captured_lenet(tmp_path / "events.parquet")
    alone = ddlsim.replay(events, workers=1, overheads=False)
    assert alone.summary()["iteration_times_s"] == [0.030] * 3
    # the capture's 1 ms between iterations is framework time the replay puts back (tests/test_replay_overheads.py)
    assert ddlsim.replay(events, workers=1).summary()["iteration_times_s"] == [0.031] * 3
    for latency_ns, bandwidth_bps in ((0, 10e9), (10_000, 10e9), (3_000, 1e9)):
        r = ddlsim.replay(events, network="analytic", grouping="synceasgd", latency=f"{latency_ns}ns",
                          bandwidth=f"{bandwidth_bps / 1e9:g}Gbps", overheads=False)
        step_ns = latency_ns + math.ceil((FC_BYTES + CONV_BYTES) / 2 * 8 / bandwidth_bps * 1e9)
        assert r.summary()["iteration_times_s"] == [pytest.approx((30 * MS + 2 * step_ns) / 1e9, abs=1e-12)] * 3


def test_a_replay_does_not_apply_a_recorded_speedup_again(tmp_path):
    """The recorded layer times already contain --compute-speedup: a one-worker replay lasts the sum of the log's own
    per-layer median times (read here straight from its rows), not half of it."""
    ddlsim.simulate(model="resnet50", workers=2, iterations=2, compute_speedup=2.0).save(
        tmp_path, timeline=False)
    df = read_event_log(tmp_path / "events.parquet").to_pandas()
    compute = df[(df.kind == "compute") & df.op.isin(["forward", "backward"])]
    per_step = compute.assign(d=compute.end_ns - compute.start_ns).groupby(["name", "op", "rank", "iteration"])["d"].sum()
    expected_ns = per_step.groupby(["name", "op"]).median().sum()
    replayed = ddlsim.replay(tmp_path / "events.parquet", workers=1, barrier=False)
    assert replayed.summary()["compute_s"] == pytest.approx(expected_ns / 1e9, rel=1e-6)


def test_replay_uses_the_captured_buckets_and_says_so(tmp_path):
    r = ddlsim.replay(captured_lenet(tmp_path / "events.parquet"))
    groups = r.engine_document["training"]["groups"]
    assert sorted(g["bytes"] for g in groups) == sorted([FC_BYTES, CONV_BYTES])  # DDP's rule would give one bucket
    assert "replay: gradient buckets = the capture's 2 DDP buckets (0.23, 0.01 MiB), not re-derived" in r.notes
    collectives = r.events.to_pandas().query("kind == 'collective'")
    assert sorted(set(collectives.bytes)) == sorted([FC_BYTES, CONV_BYTES])


def test_replay_without_captured_buckets_derives_them_and_says_so(tmp_path):
    r = ddlsim.replay(captured_lenet(tmp_path / "events.parquet", buckets=False))
    assert [g["bytes"] for g in r.engine_document["training"]["groups"]] == [FC_BYTES + CONV_BYTES]
    assert any("re-derived by DDP's rule from the capture's bucket cap (25 MiB)" in n for n in r.notes)


@pytest.mark.parametrize("captured, given, bps, says", [
    (None, None, 10e9, "replay: link bandwidth 10Gbps (10 Gbit/s) ASSUMED (the scenario default)"),
    # a shaped capture's payload rate pays the TCP/IP headers and the 14-byte MAC header tbf counts: x 1448 / 1514;
    # but tbf's 500 kB token bucket at 1 Gbit/s holds LeNet-5's whole 0.24 MB iteration: the unshaped default rate
    ("1000Mbps", None, 10e9, "replay: link bandwidth 1000Mbps (1 Gbit/s), the capture's shaped link rate"),
    ("1000Mbps", "25Gbps", 25e9 * 1448 / 1514, "replay: link bandwidth 25Gbps (25 Gbit/s), as given"),
])
def test_replay_states_the_bandwidth_it_took_or_assumed(tmp_path, captured, given, bps, says):
    events = captured_lenet(tmp_path / "events.parquet", bandwidth=captured)
    r = ddlsim.replay(events, **({"bandwidth": given} if given else {}))
    assert r.scenario.network.bandwidth_bps == pytest.approx(bps, rel=1e-9)
    assert any(n.startswith(says) for n in r.notes), r.notes
    result = CliRunner().invoke(app, ["replay", str(events), "--quiet"] + (["--bandwidth", given] if given else []))
    assert result.exit_code == 0, result.output
    assert says in " ".join(result.output.split())


def test_a_replay_under_other_conditions_is_the_simulation_of_those_conditions_with_the_logs_times(tmp_path):
    original = ddlsim.simulate(model="resnet50", workers=4, iterations=1, device="T4")
    original.save(tmp_path, timeline=False)
    replayed = ddlsim.replay(tmp_path / "events.parquet", strategy="ps", servers=2, bandwidth="25Gbps")
    direct = ddlsim.simulate(model="resnet50", workers=4, iterations=1, device="T4", strategy="ps", servers=2, bandwidth="25Gbps")
    assert replayed.iteration_time_s == direct.iteration_time_s  # times from the log equal the T4 FLOP times they came from


def test_a_log_without_its_scenario_needs_the_model(tmp_path):
    original = ddlsim.simulate(model="resnet50", workers=3, iterations=1)
    log = original.events
    log.metadata.pop("scenario"), log.metadata.pop("model")
    path = tmp_path / "foreign.parquet"
    write_event_log(log, path)
    with pytest.raises(DdlsimError, match=r"foreign.parquet: the log does not say which model ran; give it with --model"):
        ddlsim.replay(path)
    replayed = ddlsim.replay(path, model="resnet50")
    assert replayed.scenario.workers == 3  # counted from the log's worker ranks
    assert replayed.summary()["compute_s"] == original.summary()["compute_s"]


def test_cli_replay_prints_the_recorded_time_beside_the_replay(tmp_path):
    """Oracle: the hand-built capture's steady iterations (1 and 2) each last 12 + 18 ms of compute and 1 ms of gap
    (the warm-up iteration 0 is left out, as analyze leaves it out); one worker replays them in 30 ms, plus the 1 ms
    gap measured before each first forward (the replay's framework overheads)."""
    events = str(captured_lenet(tmp_path / "events.parquet"))
    result = CliRunner().invoke(app, ["replay", events, "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["recorded"]["iteration_time_s"] == pytest.approx(0.031)
    assert data["recorded"]["iteration_mean"] == "mean of iterations 1-2, warm-up iteration 0 excluded"
    assert data["iteration_time_s"] == pytest.approx(0.031)
    assert data["recorded"]["difference"] == pytest.approx(0.0, abs=1e-12)
    text = CliRunner().invoke(app, ["replay", events, "--workers", "1", "--quiet"]).output
    assert "recorded run: 31.00 ms per iteration (mean of iterations 1-2, warm-up iteration 0 excluded); replayed: 31.00 ms" in text
    text = CliRunner().invoke(app, ["replay", events, "--workers", "1", "--quiet", "--no-overheads"]).output
    assert "replayed: 30.00 ms" in text


@pytest.mark.parametrize("name,message", [("missing.parquet", "event log not found"), ("trace.json", "replay reads an event log in Parquet")])
def test_bad_replay_input_names_the_file(tmp_path, name, message):
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text("{}")
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code != 0
    with pytest.raises(DdlsimError, match=message):
        ddlsim.replay(path)
