"""The all-reduce cost a DDP capture measured (ddlsim.plan.capture_cost) and the planner taking its per-call cost
alpha from the capture. Oracle: rows generated from a known T_ar(M) = a + b M, served one bucket after another."""

from __future__ import annotations

import numpy as np
import pytest

from ddlsim.analyze.allreduce_fit import allreduce_points, fit_allreduce
from ddlsim.plan.capture_cost import capture_alpha
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log


def synthetic_rows(a_ns: float, b_ns_per_byte: float, sizes, *, workers=2, iterations=5, seed=0, side_by_side=False):
    """Collective rows of a DDP job whose bucket k, once every rank launched it (random launches, in bucket order per
    rank, some before the previous bucket ended, some after), takes a + b M_k after the previous bucket ends (or, `side_by_side`, from its own launch
    on a second thread while bucket 0 runs: then both are counted once). Iteration 0 is 10x slower (the warm-up)."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0
    for it in range(iterations):
        slow = 10 if it == 0 else 1
        previous_end = t
        launches = [t] * workers
        for k, size in enumerate(sizes):
            # DDP launches a rank's buckets in order, each once its gradients are ready
            launches = [int(x + rng.integers(0, 6_000_000)) for x in launches]
            ready = max(launches)
            begin = ready if side_by_side and k == 1 else max(ready, previous_end)
            end = int(begin + slow * (a_ns + b_ns_per_byte * size))
            for rank in range(workers):
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="collective", op="allreduce",
                                 name=f"bucket {k}", start_ns=launches[rank], end_ns=end,
                                 collective=it * len(sizes) + k, group=k, bytes=int(size), coll_type="allreduce",
                                 stream="comm"))
            previous_end = end if not side_by_side else max(previous_end, end)
        t = previous_end + 5_000_000
    rows.sort(key=lambda r: r["start_ns"])
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


def test_the_fit_recovers_a_and_b_from_rows_of_a_known_line():
    rng = np.random.default_rng(20)
    for _ in range(20):
        a, b = float(rng.uniform(50e3, 5e6)), float(rng.uniform(0.05, 90.0))
        sizes = [int(s) for s in rng.integers(1_000, 40_000_000, int(rng.integers(1, 5)))]
        meta = {"source": "capture", "job": "ddp", "allreduce_small_ns": a + 4 * b}
        log = event_log_from_rows(synthetic_rows(a, b, sizes, seed=int(rng.integers(1 << 30))), metadata=meta)
        points = allreduce_points(log)
        assert points[0] == (1, 4, a + 4 * b) and len(points) == 1 + 4  # the small all-reduce, iterations 1-4
        assert [p[:2] for p in points[1:]] == [(len(sizes), sum(sizes))] * 4
        fit_a, fit_b = fit_allreduce(points)
        # the rows hold whole ns: each iteration's time is off by under 1 ns per bucket
        assert fit_a == pytest.approx(a, abs=len(sizes)) and fit_b == pytest.approx(b, abs=len(sizes) / sum(sizes))


def test_buckets_that_run_side_by_side_are_counted_once_and_one_kind_of_point_determines_nothing():
    a, b = 200e3, 8.0
    log = event_log_from_rows(synthetic_rows(a, b, [30_000_000, 10_000_000], side_by_side=True),
                              metadata={"source": "capture", "job": "ddp"})
    points = allreduce_points(log)
    # bucket 1 runs beside bucket 0 and ends first: the busy time is bucket 0's alone
    assert [p[2] for p in points] == pytest.approx([a + b * 30_000_000] * 4, abs=1.0)
    assert fit_allreduce(points) is None  # calls and bytes in one ratio: a and b are not both determined
    assert fit_allreduce([(1, 4, 1e5)]) is None


def alpha_capture(tmp_path, a, b, sizes=(200_000,), buckets=None, bandwidth=None, seed=0, bucket_cap_mb=None):
    """A lenet5 DDP capture (tests.test_replay_overheads.synthetic_capture, 2 workers) whose all-reduces take
    a + b M (synthetic_rows), with its 4-byte all-reduce, gamma 0.25 and, given, its buckets (lists of parameter
    indices) and shaped link."""
    from tests.test_replay_overheads import synthetic_capture

    path, _, _, _ = synthetic_capture(tmp_path / "syn.parquet", workers=2, rng_seed=seed, bandwidth=bandwidth)
    log = read_event_log(path)
    rows = [r for r in log.to_pandas().to_dict("records") if r["kind"] != "collective"]
    rows += synthetic_rows(a, b, list(sizes), workers=2, iterations=4, seed=seed)
    for i, row in enumerate(rows):
        row["id"] = i
        row.pop("deps", None)
    meta = {**log.metadata, "allreduce_small_ns": a + 4 * b, "workers": 2, "gamma_ns_per_byte": 0.25}
    if buckets is not None:
        params = meta["parameters"]
        meta["buckets"] = [{"tensors": list(t), "bytes": sum(params[i]["bytes"] for i in t)} for t in buckets]
    if bucket_cap_mb is not None:
        meta["bucket_cap_mb"] = bucket_cap_mb
    write_event_log(event_log_from_rows(rows, metadata=meta), path)
    return path


def test_capture_alpha_reads_the_fit_of_a_capture(tmp_path):
    a, b = 400e3, 9.0
    path = alpha_capture(tmp_path, a, b)
    found = capture_alpha(str(path))
    assert found["alpha_ns"] == pytest.approx(a, rel=1e-6) and found["step_ns"] == pytest.approx(a / 2, rel=1e-6)
    assert found["b_ns_per_byte"] == pytest.approx(b, rel=1e-6) and found["gamma_ns_per_byte"] == 0.25
    # a scenario file naming the capture as its profile is no replay: the planner takes alpha and gamma from it
    import ddlsim

    scenario = {"model": {"name": "lenet5", "profile": str(path)}, "workers": 2}
    plan = ddlsim.make_plan(scenario, bucket_caps_mb=(25,), slice_bytes=(), credit_bytes=())
    assert plan.scenario.network.latency_ns == round(a / 2) and plan.scenario.strategy.gamma_ns_per_byte == 0.25
    assert plan.captured is None
    assert any(note.startswith("alpha = 400 us per all-reduce call, measured in the capture") for note in plan.notes)
    given = ddlsim.make_plan(scenario, latency="10us", bucket_caps_mb=(25,), slice_bytes=(), credit_bytes=())
    assert given.scenario.network.latency_ns == 10_000 and not any("alpha =" in n for n in given.notes)
    # a profile that is not a DDP capture changes nothing
    assert capture_alpha(str(tmp_path / "none.parquet")) is None


def test_a_plan_from_a_ddp_capture_simulates_it_as_replay_does_to_the_last_digit(tmp_path):
    """Oracle: ``ddlsim replay`` of the same capture. The plan's scenario is the replay's (its rate while training,
    latency, gamma, framework gaps), and its "captured" entry (the capture's own buckets) takes the replay's
    iteration time exactly, at the capture's own link and at another rate; a given latency is the one simulated."""
    import ddlsim
    from ddlsim.simulation.replay import replay_scenario

    rng = np.random.default_rng(24)
    # lenet5's parameters in registration order: conv1.w, conv1.b, conv2.w, conv2.b, fc1.w, fc1.b, fc2.w, ...
    layouts = [[list(range(10))[::-1]], [[9, 8, 7, 6], [5, 4, 3, 2, 1, 0]], [[9, 8], [7, 6, 5, 4], [3, 2, 1, 0]]]
    for trial in range(4):
        a, b = float(rng.uniform(100e3, 3e6)), float(rng.uniform(5.0, 90.0))
        buckets = layouts[trial % len(layouts)]
        bandwidth = ["1Gbps", "100Mbps", None, "1Gbps"][trial]
        sub = tmp_path / str(trial)
        sub.mkdir()
        path = alpha_capture(sub, a, b, sizes=[200_000] * len(buckets), buckets=buckets, bandwidth=bandwidth,
                             seed=trial)
        options = dict(model="lenet5", profile=str(path), workers=2, bucket_caps_mb=(1, 25), slice_bytes=(),
                       credit_bytes=())
        plan = ddlsim.make_plan(**options, **({"bandwidth": bandwidth} if bandwidth else {}))
        replayed = ddlsim.replay(path)
        assert plan.captured is not None and plan.captured.iteration_time_s == replayed.iteration_time_s
        assert plan.to_dict()["captured"]["iteration_time_s"] == replayed.iteration_time_s
        own = replay_scenario(path)
        assert plan.scenario.network == own.network and plan.scenario.strategy.gamma_ns_per_byte == 0.25
        assert sorted(map(sorted, plan.captured.grouping["groups"])) == sorted(
            sorted(plan.tensor_names[i] for i in g) for g in buckets)
        assert any(n.startswith("replay: payload rate") for n in plan.notes)
        # another rate: the replay at that rate
        other = ddlsim.make_plan(**options, bandwidth="37Mbps")
        assert other.captured.iteration_time_s == ddlsim.replay(path, bandwidth="37Mbps").iteration_time_s
        given = ddlsim.make_plan(**options, latency="10us")
        assert given.scenario.network.latency_ns == 10_000
        assert given.captured.iteration_time_s == ddlsim.replay(path, latency="10us").iteration_time_s


def test_the_sweep_builds_ddps_buckets_as_the_capture_shows_its_torch_builds_them(tmp_path):
    """Oracle: torch's DDP given bucket_cap_mb (as a plan's ddp_kwargs and capture ddp give it) makes the first
    bucket as large as the others (torch/nn/parallel/distributed.py: a small first bucket only for the default).
    LeNet-5 at 0.1 MB: in the ready order fc3.bias .. fc1.bias hold 44536 bytes, fc1.weight 192000 more, so that
    rule closes the first bucket after fc1.weight (2 buckets), where a 1 MiB first bucket holds all 10 tensors."""
    import ddlsim
    from ddlsim.simulation import grouping as gp

    model = ddlsim.load_model("lenet5")
    as_cap = gp.ddp(model, 0.1, first_bucket_bytes=int(0.1 * 1024 * 1024))
    assert [sorted(g["tensors"]) for g in sorted(as_cap, key=lambda g: -max(g["tensors"]))] == [
        [4, 5, 6, 7, 8, 9], [0, 1, 2, 3]]
    assert len(gp.ddp(model, 0.1)) == 1
    options = dict(model="lenet5", workers=2, bucket_caps_mb=(0.1, 25), slice_bytes=(), credit_bytes=())
    shown = alpha_capture(tmp_path, 300e3, 20.0, sizes=[200_000, 40_000], bucket_cap_mb=0.1,
                          buckets=[[9, 8, 7, 6, 5, 4], [3, 2, 1, 0]])
    plan = ddlsim.make_plan(profile=str(shown), **options)
    sweep = {c.bucket_cap_mb: c for c in plan.ddp_sweep}
    assert sorted(sorted(g["tensors"]) for g in sweep[0.1].groups) == [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]
    assert sweep[0.1].iteration_time_s == plan.captured.iteration_time_s == ddlsim.replay(shown).iteration_time_s
    assert sweep[0.1].grouping["kind"] == "groups"  # the plan's grouping reproduces it in a scenario
    assert ddlsim.simulate(plan.scenario, grouping=sweep[0.1].grouping).iteration_time_s == sweep[0.1].iteration_time_s
    assert any(n.startswith("DDP's buckets for each bucket_cap_mb: the first as large") for n in plan.notes)
    # a capture whose buckets are DDP's with the 1 MiB first bucket keeps that rule
    sub = tmp_path / "default"
    sub.mkdir()
    default = alpha_capture(sub, 300e3, 20.0, bucket_cap_mb=0.1, buckets=[list(range(10))[::-1]])
    plan = ddlsim.make_plan(profile=str(default), **options)
    assert [len(c.groups) for c in plan.ddp_sweep] == [1, 1] and plan.ddp_sweep[0].grouping == {"kind": "ddp", "bucket_cap_mb": 0.1}
    assert not any(n.startswith("DDP's buckets for each") for n in plan.notes)
