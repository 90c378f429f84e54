"""Compute after a wait in the replay (ddlsim.simulation.idle_wake, the engine's idle_wake): the capture's idle
before an iteration from its rows, each replayed forward and backward scaled by r(t) / r(t_c) with t read back
from the replay's own rows, a curve of 1 (or none) replaying exactly as without, the curve file's bad input, and
the capture measuring and storing the curve. Oracles: synthetic captures whose waits are known, brute force."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim.simulation.idle_wake import curve_from_trials, engine_document, ratio, read_curve
from ddlsim.simulation.overheads import captured_idle_ns
from ddlsim.simulation.lowering import training_document
from ddlsim.simulation.replay import replay_plan
from ddlsim.trace import event_log_from_rows, write_event_log

ROOT = Path(__file__).resolve().parent.parent
US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
CURVE = {"step": [[0.0, 1.0], [2.0, 1.2], [16.0, 1.6]], "forward": [[0.0, 1.0], [4.0, 1.1], [32.0, 1.5]],
         "backward": [[0.0, 1.0], [8.0, 1.3]]}


def capture(path, waits, *, workers=2, iterations=6):
    """lenet5 on `workers` ranks, one bucket launched after conv1's backward; in iteration i the all-reduce ends
    waits[i][rank] after that rank's last backward (the rank's idle), then the optimizer step."""
    fwd, bwd = 300 * US, 500 * US
    rows, t = [], 0
    for it in range(iterations):
        ends = []
        for rank in range(workers):
            now = t
            for layer in LENET:
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="forward", name=layer,
                                 start_ns=now, end_ns=now + fwd))
                now += fwd
            for layer in LENET[::-1]:
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="backward", name=layer,
                                 start_ns=now, end_ns=now + bwd))
                now += bwd
            ends.append(now)
        finish = t
        for rank in range(workers):
            end = ends[rank] + waits[it][rank]
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="collective", op="allreduce",
                             name="bucket 0", start_ns=ends[rank], end_ns=end, collective=it, group=0, bytes=1000,
                             coll_type="allreduce", stream="comm"))
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=end + 100 * US, end_ns=end + 400 * US))
            finish = max(finish, end + 400 * US)
        t = finish + 100 * US
    for i, row in enumerate(rows):
        row["id"] = i
    tensors = ddlsim.load_model("lenet5").tensors
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in tensors]
    buckets = [{"bucket": 0, "group": 0, "tensors": list(range(len(tensors)))[::-1],
                "bytes": sum(x.bytes for x in tensors)}]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "buckets": buckets, "ranks": {str(r): {} for r in range(workers)}}
    log = event_log_from_rows(rows, metadata=meta)
    write_event_log(log, path)
    return log


def test_the_captured_idle_is_the_median_wait_for_the_last_all_reduce_over_counted_iterations(tmp_path):
    rng = np.random.default_rng(4)
    waits = [[int(x) for x in rng.integers(1, 20_000, 3) * US] for _ in range(6)]
    log = capture(tmp_path / "c.parquet", waits, workers=3)
    # iteration 0 is the warm-up (left out); every other (rank, iteration) counts once
    assert captured_idle_ns(log, log.metadata) == statistics.median(w for it in waits[1:] for w in it)


def _compute(result):
    """Per (rank, iteration): its compute rows (op, layer, start, end), in start order."""
    cols = result.columns
    kind, op, rank = np.asarray(cols.column("kind")), np.asarray(cols.column("op")), np.asarray(cols.column("rank"))
    it, layer = np.asarray(cols.column("iteration")), np.asarray(cols.column("layer"))
    start, end = np.asarray(cols.column("start_ns")), np.asarray(cols.column("end_ns"))
    out = {}
    for i in np.flatnonzero((kind == "compute") & np.isin(op, ["forward", "backward"])):
        out.setdefault((int(rank[i]), int(it[i])), []).append((str(op[i]), int(layer[i]), int(start[i]), int(end[i])))
    return {k: sorted(v, key=lambda r: r[2]) for k, v in out.items()}


@pytest.mark.parametrize("bandwidth", [None, "100Mbps", "20Gbps"])
def test_each_replayed_op_takes_r_of_the_replays_idle_over_r_of_the_captures(tmp_path, bandwidth):
    waits = [[6_000 * US, 10_000 * US]] * 6
    path = tmp_path / "c.parquet"
    log = capture(path, waits)
    tc = captured_idle_ns(log, log.metadata)
    assert tc == 8_000 * US
    kw = {"bandwidth": bandwidth} if bandwidth else {}
    plain = _compute(ddlsim.replay(path, **kw))
    # the replay at the capture's own settings, without the curve: its idle stands for the capture's
    own = _compute(ddlsim.replay(path, idle_curve=False))
    t_self = statistics.median(ops[0][2] - own[(r, i - 1)][-1][3] for (r, i), ops in own.items() if i > 0)
    delta = (tc - t_self) / 1e6
    scaled_run = ddlsim.replay(path, idle_curve=CURVE, **kw)
    scaled = _compute(scaled_run)
    note = next(n for n in scaled_run.notes if "compute after a wait" in n)
    sign = "-" if delta < 0 else "+"
    assert f"r(t {sign} {abs(delta):.4g} ms)" in note  # the shift as a reader writes it (not "t + -1.9")
    # the optimizer step's share of the first forward, as the replay's model has it
    scenario, _ = replay_plan(path, idle_curve=CURVE, **kw)
    from ddlsim.simulation.model_build import build_model, layer_times_ns
    from ddlsim.simulation.overheads import framework_overheads

    first = layer_times_ns(build_model(scenario.model), scenario.model)[0][0]
    w = framework_overheads(log, log.metadata, tails=False)["optimizer_s"] * 1e9 / first
    checked = 0
    for (rank, it), ops in scaled.items():
        base = plain[(rank, it)]
        if it == 0:
            assert ops == base or [e - s for _, _, s, e in ops] == [e - s for _, _, s, e in base]
            continue
        previous = scaled[(rank, it - 1)][-1]
        t = (ops[0][2] - previous[3]) / 1e6 + delta  # the replay's own idle before the iteration, ms, moved
        for (op, layer, s, e), (_, _, bs, be) in zip(ops, base):
            d = be - bs
            if op == "backward":
                want = d * ratio(CURVE["backward"], t) / ratio(CURVE["backward"], tc / 1e6)
            elif layer == 0:
                want = d * (w * ratio(CURVE["step"], t) / ratio(CURVE["step"], tc / 1e6)
                            + (1 - w) * ratio(CURVE["forward"], t) / ratio(CURVE["forward"], tc / 1e6))
            else:
                want = d * ratio(CURVE["forward"], t) / ratio(CURVE["forward"], tc / 1e6)
            assert abs((e - s) - want) <= 1, (rank, it, op, layer, e - s, want)
            checked += 1
    assert checked == 2 * 5 * 10
    if bandwidth is None:  # at the capture's own settings nothing moves
        assert scaled == plain


def test_self_prediction_does_not_move_where_the_replay_idles_otherwise_than_the_capture(tmp_path):
    # ranks 0 and 1 wait 2 and 14 ms for the all-reduce: the replay's alike ranks idle otherwise (no rank launches
    # late in the replay), yet at the capture's own settings every row keeps its time
    path = tmp_path / "c.parquet"
    capture(path, [[2_000 * US, 14_000 * US]] * 6)
    plain, scaled = ddlsim.replay(path), ddlsim.replay(path, idle_curve=CURVE)
    for name in ("kind", "op", "rank", "iteration", "start_ns", "end_ns"):
        assert np.array_equal(np.asarray(plain.columns.column(name)), np.asarray(scaled.columns.column(name))), name
    assert any("compute after a wait" in n for n in scaled.notes)


def test_without_a_curve_or_with_a_curve_of_one_the_replay_is_unchanged(tmp_path):
    path = tmp_path / "c.parquet"
    capture(path, [[6_000 * US, 10_000 * US]] * 6)
    plain = ddlsim.replay(path, bandwidth="100Mbps")
    ones = {k: [[0.0, 1.0], [16.0, 1.0]] for k in ("step", "forward", "backward")}
    flat = ddlsim.replay(path, bandwidth="100Mbps", idle_curve=ones)
    for name in ("kind", "op", "rank", "iteration", "start_ns", "end_ns"):
        assert np.array_equal(np.asarray(plain.columns.column(name)), np.asarray(flat.columns.column(name))), name
    # a capture without a curve: no idle_wake in its scenario, its dump or the engine's document
    scenario, notes = replay_plan(path)
    assert scenario.model.idle_wake is None and "idle_wake" not in scenario.model_dump()["model"]
    from ddlsim.simulation.model_build import build_model, layer_times_ns

    model = build_model(scenario.model)
    assert "idle_wake" not in training_document(scenario, model, layer_times_ns(model, scenario.model))
    assert not any("after a wait" in n for n in notes)


def test_the_first_forward_mixes_the_step_and_the_forward_to_one_at_the_captured_idle():
    doc = engine_document(CURVE, captured_ns=5e6, optimizer_share=0.25, layers=3)
    assert doc["layers"] == [[0, 2], [1, 2], [1, 2]] and doc["captured_ns"] == 5_000_000
    mix = doc["curves"][0]
    assert [p[0] for p in mix] == [0, 2_000_000, 4_000_000, 16_000_000, 32_000_000]
    for x, y in mix:
        ms = x / 1e6
        want = 0.25 * ratio(CURVE["step"], ms) / ratio(CURVE["step"], 5) + 0.75 * ratio(CURVE["forward"], ms) / ratio(CURVE["forward"], 5)
        assert y == pytest.approx(want, rel=1e-12)
    assert float(np.interp(5e6, [p[0] for p in mix], [p[1] for p in mix])) == pytest.approx(1.0, rel=1e-12)


def _trials_csv(path, rows, fields=("trial", "mode", "idle_ms", "step_ms", "forward_ms", "backward_ms")):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        writer.writerows(rows)


def test_the_curve_file_is_the_median_of_the_sleeping_trials_over_the_shortest_idle(tmp_path):
    rng = np.random.default_rng(2)
    rows = [[k, mode, idle, *rng.uniform(0.1, 3, 3)] for k, (mode, idle) in
            enumerate((m, i) for _ in range(9) for m in ("sleep", "spin") for i in (0.0, 2.0, 16.0))]
    _trials_csv(tmp_path / "idle.csv", rows)
    curve = read_curve(tmp_path / "idle.csv")
    for c, cls in enumerate(("step", "forward", "backward")):
        base = statistics.median(r[3 + c] for r in rows if r[1] == "sleep" and r[2] == 0.0)
        want = [[i, statistics.median(r[3 + c] for r in rows if r[1] == "sleep" and r[2] == i) / base]
                for i in (0.0, 2.0, 16.0)]
        assert [x for p in curve[cls] for x in p] == pytest.approx([x for p in want for x in p], rel=1e-12)


def _cli(*args):
    return forked_cli.run([*args], timeout=300, env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("content, message", [
    ("trial,mode,idle_ms,step_ms,forward_ms\n0,sleep,0,1,1\n", "no column 'backward_ms'"),
    ("trial,mode,idle_ms,step_ms,forward_ms,backward_ms\n0,sleep,0,1,1,x\n", "line 2: backward_ms = 'x' is not a number"),
    ("trial,mode,idle_ms,step_ms,forward_ms,backward_ms\n0,sleep,0,1,1,1\n1,sleep,0,1,1,1\n", "at least 2"),
    ("trial,mode,idle_ms,step_ms,forward_ms,backward_ms\n0,spin,0,1,1,1\n1,spin,2,1,1,1\n", "mode sleep"),
    (None, "idle curve not found"),
])
def test_a_bad_curve_file_is_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "c.parquet"
    capture(path, [[6_000 * US, 10_000 * US]] * 4, iterations=4)
    bad = tmp_path / "idle.csv"
    if content is not None:
        bad.write_text(content)
    run = _cli("replay", str(path), "--idle-curve", str(bad), "--quiet")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(bad) in lines[0] and "Traceback" not in run.stderr


def test_the_curve_of_a_non_ddp_log_is_refused(tmp_path):
    out = tmp_path / "sim"
    ddlsim.simulate({"model": {"name": "lenet5"}, "workers": 2, "iterations": 2}).save(out)
    run = _cli("replay", str(out / "events.parquet"), "--idle-curve", str(tmp_path / "any.csv"), "--quiet")
    assert run.returncode == 2 and "not a DDP capture" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_pooled_trials_of_every_rank_are_the_curve(tmp_path):
    from ddlsim.capture.idle_curve import pooled_curve

    rng = np.random.default_rng(5)
    ranks = [{"idle_trials": {"trials": [[i, *rng.uniform(0.1, 2, 3)] for _ in range(5) for i in (0.0, 8.0, 32.0)]}}
             for _ in range(3)]
    got = pooled_curve(ranks + [{"job": {}}])
    flat = [{"idle_ms": t[0], "step_ms": t[1], "forward_ms": t[2], "backward_ms": t[3]}
            for r in ranks for t in r["idle_trials"]["trials"]]
    want = curve_from_trials(flat, source="x")
    assert got["ranks"] == 3 and got["trials"] == 45
    assert all(got[c] == want[c] for c in ("step", "forward", "backward"))
    assert pooled_curve([{"job": {}}]) is None


def test_a_ddp_capture_stores_its_ranks_curve_and_replay_applies_it(tmp_path):
    pytest.importorskip("torch", reason="the DDP capture needs PyTorch (pip install ddlsim[capture])")
    from ddlsim.capture.ddp import job_config
    from ddlsim.capture.ddp_run import run_ddp_capture
    from ddlsim.capture.idle_curve import IDLES_MS, MAX_REPEATS, MIN_REPEATS

    log, failure = run_ddp_capture({"model": "lenet5", "iterations": 3, "batch_size": 4, "seed": 0, "idle_curve": True}, 2, tmp_path,
                                   timeout_s=120)
    assert failure is None
    curve = log.metadata["idle_curve"]
    assert curve["ranks"] == 2 and [p[0] for p in curve["step"]] == list(IDLES_MS)
    assert curve["trials"] % (2 * len(IDLES_MS)) == 0
    assert MIN_REPEATS <= curve["trials"] // (2 * len(IDLES_MS)) <= MAX_REPEATS
    assert all(curve[c][0] == [0.0, 1.0] for c in ("step", "forward", "backward"))
    result = ddlsim.replay(tmp_path / "events.parquet")
    assert any("measured on its 2 ranks after training" in n for n in result.notes)
    assert job_config({})["idle_curve"] is False  # opt-in: a capture measures the curve only when asked
    with pytest.raises(ValueError, match="idle_curve must be true or false"):
        job_config({"idle_curve": "yes"})


def test_the_graph_columns_carry_the_idle_scaling_and_run_as_the_one_call_does():
    from ddlsim import _core
    from ddlsim.simulation.lowering import engine_json, network_document
    from ddlsim.simulation.model_build import build_model, layer_times_ns
    from ddlsim.simulation.scenario import scenario_from_dict

    layers = [{"name": f"l{i}", "params": p, "fwd_ms": 0.05, "bwd_ms": 0.1} for i, p in enumerate([3000, 250_000, 9000])]
    sc = scenario_from_dict({"model": {"name": "three", "layers": layers}, "iterations": 3, "workers": 3,
                             "network": {"bandwidth": "1Gbps", "latency": "2us"}, "trace_detail": "step"})
    model = build_model(sc.model, sc.base_dir)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    plain = engine_json(training)
    training["idle_wake"] = {"curves": [[[0, 1.0], [1_000_000, 2.0]], [[0, 0.5]]], "layers": [[0, 1]] * 3,
                             "captured_ns": 100_000}
    scaled, net = engine_json(training), engine_json(network_document(sc))

    def log(out):
        return {k: np.frombuffer(raw, dtype=np.dtype(dtype)).tolist() for k, (dtype, raw) in out["columns"].items()}

    columns = _core.lower_training_json(scaled, net)
    assert {"idle_curve_offsets", "idle_ops", "idle_captured_ns"} <= set(columns)
    assert "idle_ops" not in _core.lower_training_json(plain, net)
    direct = log(_core.simulate_training_json(scaled, net, "step"))
    assert direct == log(_core.run_graph_columns(columns, net, "step"))
    assert direct != log(_core.simulate_training_json(plain, net, "step"))


@pytest.mark.parametrize("wait_us,sign", [(100, "-"), (6_000, "+")])
def test_the_notes_shift_has_one_sign(tmp_path, wait_us, sign):
    """Where the replay at the capture's own settings idles longer than the capture did, the curve is read at t
    less the difference: the note says "r(t - 0.1 ms)", not "r(t + -0.1 ms)"."""
    path = tmp_path / "c.parquet"
    capture(path, [[wait_us * US, wait_us * US]] * 6)
    note = next(n for n in ddlsim.replay(path, idle_curve=CURVE).notes if "compute after a wait" in n)
    assert f"r(t {sign} " in note and "+ -" not in note
