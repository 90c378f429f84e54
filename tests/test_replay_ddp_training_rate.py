"""The rate a DDP capture's ring all-reduces got while training, measured from its own bucket rows
(ddlsim.simulation.overheads.training_ring_rate) and replayed at the capture's own link. Oracles: synthetic captures
whose all-reduce times are known, the least-squares line through them solved on paper, and the engine's ring time
T = 2 (N - 1) alpha + 2 (N - 1) / N M / rate + (N - 1) / N gamma M (Table II)."""

from __future__ import annotations

import numpy as np
import pytest

import ddlsim
from ddlsim.simulation.overheads import training_ring_rate, unbound_call_cost
from ddlsim.simulation.replay import replay_plan
from ddlsim.trace import event_log_from_rows, write_event_log

US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
SMALL_NS = 200 * US  # the 4-byte all-reduce measured after training



def _layer_rows(rows: list, it: int, rank: int, now: int, fwd: int, bwd: int) -> int:
    """Appends one rank's forward and backward rows of LeNet-5's layers from `now`; returns their end."""
    for op, layers, duration in (("forward", LENET, fwd), ("backward", LENET[::-1], bwd)):
        for layer in layers:
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op=op, name=layer,
                             start_ns=now, end_ns=now + duration))
            now += duration
    return now

def one_bucket_capture(path, durations, *, workers=2, gamma=0.0, bandwidth="100Mbps", small=SMALL_NS, hosts=None,
                       small_mean=None):
    """lenet5 on `workers` ranks with all its gradients in one bucket, launched after conv1's backward on every rank
    at once; in iteration i the all-reduce takes durations[i] ns. Every other row is the same on every rank.
    `hosts`: each rank's host name in the metadata (none by default)."""
    tensors = ddlsim.load_model("lenet5").tensors
    total = sum(x.bytes for x in tensors)
    fwd, bwd = 300 * US, 500 * US
    rows, t = [], 0
    for it, duration in enumerate(durations):
        for rank in range(workers):
            now = t
            now = _layer_rows(rows, it, rank, now, fwd, bwd)
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="collective", op="allreduce",
                             name="bucket 0", start_ns=now, end_ns=now + duration, collective=it, group=0,
                             bytes=total, coll_type="allreduce", stream="comm"))
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=now + duration + 100 * US, end_ns=now + duration + 400 * US))
        t = now + duration + 500 * US
    for i, row in enumerate(rows):
        row["id"] = i
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in tensors]
    buckets = [{"bucket": 0, "group": 0, "tensors": list(range(len(tensors)))[::-1], "bytes": total}]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "buckets": buckets, "ranks": {str(r): {} if hosts is None else {"host": hosts[r]} for r in range(workers)},
            "workers": workers,
            "allreduce_small_ns": float(small), "allreduce_step_ns": small / (2 * (workers - 1)),
            "allreduce_rate_bps": 91e6, "allreduce_rate_sizes": [2 << 20, 8 << 20]}
    if gamma:
        meta["gamma_ns_per_byte"] = gamma
    if bandwidth:
        meta["bandwidth"] = bandwidth
    if small_mean is not None:  # a capture since 2026-11-27: the small all-reduces' mean beside their median
        meta.update(allreduce_small_mean_ns=float(small_mean), allreduce_small_repeats=40)
    log = event_log_from_rows(rows, metadata=meta)
    write_event_log(log, path)
    return log, total


def replayed_allreduce_ns(scenario) -> np.ndarray:
    run = ddlsim.simulate(scenario, trace_detail="collective")
    df = run.events.to_pandas()
    coll = df[(df.kind == "collective") & (df.role == "worker")]
    return (coll.end_ns - coll.start_ns).to_numpy()


@pytest.mark.parametrize("workers,gamma", [(2, 0.0), (2, 0.5), (3, 0.25)])
def test_the_training_rate_is_the_least_squares_line_through_the_small_all_reduce_and_the_buckets(tmp_path, workers,
                                                                                                   gamma):
    rng = np.random.default_rng(workers)
    durations = [int(x) for x in rng.integers(20_000, 40_000, 6) * US]
    log, total = one_bucket_capture(tmp_path / "c.parquet", durations, workers=workers, gamma=gamma)
    found = training_ring_rate(log, log.metadata)
    # on paper: one small point (1 call, 4 bytes) and five identical (1 call, M bytes) points (iteration 0 is the
    # warm-up); the least-squares line passes through the small point and the five points' mean
    mean = np.mean(durations[1:])
    b = (mean - SMALL_NS) / (total - 4)
    assert found["b_ns_per_byte"] == pytest.approx(b, rel=1e-9)
    assert found["a_ns"] == pytest.approx(SMALL_NS - 4 * b, rel=1e-9)
    share = (workers - 1) / workers
    assert found["rate_bps"] == pytest.approx(2 * share * 8e9 / (b - share * gamma), rel=1e-9)
    assert (found["iterations"], found["bytes"], found["workers"]) == (5, total, workers)


@pytest.mark.parametrize("workers,gamma", [(2, 0.0), (2, 0.5), (3, 0.25)])
def test_a_replay_at_the_captures_own_link_takes_as_long_per_all_reduce_as_the_training_did(tmp_path, workers, gamma):
    """The replayed all-reduce is 2 (N - 1) steps of the small all-reduce's latency plus M b: the measured mean
    less the fit's intercept a plus the small all-reduce, i.e. mean + 4 b. Fails where the replay takes the rate
    measured after training (91 Mbit/s here) or the link's closed form."""
    durations = [30_000 * US, 25_000 * US, 27_000 * US, 26_000 * US, 31_000 * US, 29_000 * US]
    path = tmp_path / "c.parquet"
    _, total = one_bucket_capture(path, durations, workers=workers, gamma=gamma)
    scenario, notes = replay_plan(path)
    mean = np.mean(durations[1:])
    b = (mean - SMALL_NS) / (total - 4)
    got = replayed_allreduce_ns(scenario)
    # each of the 2 (N - 1) steps rounds to whole ns, and its chunk M / N to whole bytes (at b ns per byte)
    steps = 2 * (workers - 1)
    assert len(got) and np.allclose(got, mean + 4 * b, rtol=0, atol=steps * (2 + (total % workers > 0) * b))
    assert any("the rate the capture's ring all-reduces got while training" in n for n in notes)
    assert not any("measured after training: all-reduces of" in n for n in notes)


def test_another_rate_no_overheads_or_a_capture_without_a_small_all_reduce_leave_the_training_rate_out(tmp_path):
    durations = [30_000 * US] * 6
    path = tmp_path / "c.parquet"
    one_bucket_capture(path, durations)
    own, _ = replay_plan(path)
    # another rate or framing than the capture's 100 Mbit/s tbf link (its own, named, is the next test's)
    for kwargs in ({"bandwidth": "1Gbps"}, {"overheads": False}, {"wire": "none"}, {"wire": "ethernet"}):
        scenario, notes = replay_plan(path, **kwargs)
        assert scenario.network.bandwidth_bps != pytest.approx(own.network.bandwidth_bps, rel=1e-3)
        assert not any("while training" in n for n in notes)
    # --no-overheads: the rate measured after training, as before
    assert replay_plan(path, overheads=False)[0].network.bandwidth_bps > 91e6
    # no small all-reduce: one kind of point only, so b is not determined; the measured rate after training is used
    log, _ = one_bucket_capture(path, durations, small=0)
    meta = {k: v for k, v in log.metadata.items() if k not in ("allreduce_small_ns", "allreduce_step_ns")}
    assert training_ring_rate(log, meta) is None
    write_event_log(event_log_from_rows(log.to_pandas().drop(columns=["deps"]).to_dict("records"), metadata=meta), path)
    scenario, notes = replay_plan(path)
    assert any("measured after training: all-reduces of" in n for n in notes)
    assert training_ring_rate(log, {**meta, "allreduce_small_ns": 1.0, "workers": 1}) is None  # one rank
    assert training_ring_rate(log, {**meta, "allreduce_small_ns": 1.0, "job": "ps"}) is None


@pytest.mark.parametrize("bandwidth", ["1000Mbps", None])
def test_where_the_link_did_not_bind_each_call_costs_its_measured_excess_at_another_rate(tmp_path, bandwidth):
    """LeNet-5's 246,824-byte bucket on 2 ranks at 1 Gbit/s: a rank's 258,080 wire bytes fit in tbf's 500,000-byte
    bucket, so the link model gives the all-reduce 2 steps of latency and the bytes at the unshaped 10 Gbit/s plus
    the reduction (gamma M / 2); the rest of the measured time is per call, and a replay at 100 Mbit/s adds it.
    An unshaped capture whose ranks ran on one host (its loopback) holds no byte back either: the same (before, it
    got no per-call cost)."""
    durations = [9_000 * US, 5_000 * US, 8_000 * US, 6_000 * US, 7_000 * US, 4_000 * US]
    gamma = 0.5
    path = tmp_path / "c.parquet"
    log, total = one_bucket_capture(path, durations, gamma=gamma, bandwidth=bandwidth, hosts=["vm", "vm"])
    call = np.mean(durations[1:]) - 2 * (SMALL_NS // 2) - total * (8e9 / 10e9 + gamma / 2)
    found = unbound_call_cost(log, log.metadata)
    assert found["call_ns"] == pytest.approx(call, rel=1e-12) and found["iterations"] == 5
    scenario, notes = replay_plan(path, bandwidth="100Mbps")
    without, _ = replay_plan(path, bandwidth="100Mbps", overheads=False)
    extra = replayed_allreduce_ns(scenario) - replayed_allreduce_ns(without)
    assert np.allclose(extra, call, rtol=0, atol=2)  # the latency is whole ns per step
    assert any(n.startswith(f"replay: + {call / 1e3:.4g} us per all-reduce call") for n in notes)
    # a --latency given is kept as given
    assert replay_plan(path, bandwidth="100Mbps", latency="50us")[0].network.latency_ns == 50_000


@pytest.mark.parametrize("hosts", [["node0", "node1"], None, ["vm", None]])
def test_an_unshaped_capture_across_hosts_or_of_unknown_hosts_takes_no_per_call_cost(tmp_path, hosts):
    """Ranks on two hosts talked over a real network whose rate the capture does not record: the busy time beyond
    the 10 Gbit/s model may be that network's own per-byte time, which carried per call would count its bytes twice
    at another rate. A log that does not say every rank's host is treated alike."""
    path = tmp_path / "c.parquet"
    log, _ = one_bucket_capture(path, [9_000 * US, 5_000 * US, 8_000 * US, 6_000 * US, 7_000 * US, 4_000 * US],
                                bandwidth=None, hosts=hosts)
    assert unbound_call_cost(log, log.metadata) is None
    assert not any("per all-reduce call" in n for n in replay_plan(path, bandwidth="1Gbps")[1])


def test_where_the_link_bound_no_per_call_cost_is_taken(tmp_path):
    """At 100 Mbit/s the bucket (64 KiB) is smaller than the wire bytes: the busy time holds the link's own
    shortfall too, which one capture cannot tell apart from a per-call cost: no per-call cost."""
    path = tmp_path / "c.parquet"
    log, _ = one_bucket_capture(path, [9_000 * US, 30_000 * US, 31_000 * US, 29_000 * US, 30_000 * US, 30_000 * US],
                                bandwidth="100Mbps")
    assert unbound_call_cost(log, log.metadata) is None
    scenario, notes = replay_plan(path, bandwidth="1Gbps")
    assert scenario.network.latency_ns == SMALL_NS // 2
    assert not any("per all-reduce call" in n for n in notes)


@pytest.mark.parametrize("workers", [2, 3])
def test_where_the_link_bound_each_call_at_another_rate_costs_the_small_all_reduces_mean_less_their_median(tmp_path,
                                                                                                          workers):
    """A capture whose link bound (100 Mbit/s) holds its calls' stalls inside the link time; its 4-byte all-reduces
    after training took 1.3 ms on average against a median of 0.2 ms (a quarter to two thirds of gloo's calls stall
    for 3-4 ms on a machine with no core to spare). Replayed at 1 Gbit/s each all-reduce call costs the 1.1 ms
    difference more, spread over the ring's 2 (N - 1) steps as latency; at its own link (the training's rate, which
    holds the stalls already), with no overheads, or from a capture without the mean, nothing is added."""
    durations = [9_000 * US, 30_000 * US, 31_000 * US, 29_000 * US, 30_000 * US, 30_000 * US]
    path, old = tmp_path / "c.parquet", tmp_path / "old.parquet"
    log, _ = one_bucket_capture(path, durations, workers=workers, small_mean=1_300 * US)
    one_bucket_capture(old, durations, workers=workers)
    stall = 1_300 * US - SMALL_NS
    steps = 2 * (workers - 1)
    assert unbound_call_cost(log, log.metadata) is None  # the link bound
    scenario, notes = replay_plan(path, bandwidth="1Gbps")
    assert scenario.network.latency_ns == round(SMALL_NS / steps + stall / steps)
    before, before_notes = replay_plan(old, bandwidth="1Gbps")
    assert before.network.latency_ns == round(SMALL_NS / steps)
    extra = replayed_allreduce_ns(scenario) - replayed_allreduce_ns(before)
    assert np.allclose(extra, stall, rtol=0, atol=steps)  # the latency is whole ns per step
    assert any(n.startswith(f"replay: + {stall / 1e3:.4g} us per all-reduce call") and "40 4-byte" in n for n in notes)
    assert not any("per all-reduce call" in n for n in before_notes)
    own, own_notes = replay_plan(path)  # at its own link: the training's rate holds the stalls
    assert not any("per all-reduce call" in n for n in own_notes)
    assert replay_plan(path, bandwidth="1Gbps", overheads=False)[0].network.latency_ns == round(SMALL_NS / steps)
    assert replay_plan(path, bandwidth="1Gbps", latency="50us")[0].network.latency_ns == 50_000


def test_the_small_call_stall_is_the_mean_less_the_median_and_only_of_a_ddp_capture_with_both():
    from ddlsim.simulation.overheads import small_call_stall

    meta = {"source": "capture", "job": "ddp", "workers": 2, "allreduce_small_ns": 250e3,
            "allreduce_small_mean_ns": 1_000e3, "allreduce_small_repeats": 40}
    assert small_call_stall(meta) == {"call_ns": 750e3, "mean_ns": 1_000e3, "median_ns": 250e3, "repeats": 40}
    assert small_call_stall({**meta, "allreduce_small_mean_ns": 200e3})["call_ns"] == 0.0  # a mean below the median
    for bad in ({"job": "ps"}, {"workers": 1}, {"source": "simulation"}, {"allreduce_small_mean_ns": None},
                {"allreduce_small_mean_ns": float("nan")}, {"allreduce_small_ns": True}, {"allreduce_small_ns": -1.0}):
        assert small_call_stall({**meta, **bad}) is None, bad
    assert small_call_stall(None) is None


def lagging_capture(path, lag, duration=20_000 * US, workers=2):
    """lenet5, one bucket: the last rank's all-reduce ends `lag` ns after the others' every iteration (its thread
    woke late) and, computing as fast as they do, it launches the next bucket `lag` later too."""
    tensors = ddlsim.load_model("lenet5").tensors
    total = sum(x.bytes for x in tensors)
    fwd, bwd = 300 * US, 500 * US
    rows = []
    start = [0] * workers
    for it in range(6):
        launches = []
        for rank in range(workers):
            now = start[rank]
            now = _layer_rows(rows, it, rank, now, fwd, bwd)
            launches.append(now)
        ready = max(launches)
        for rank in range(workers):
            end = ready + duration + (lag if rank == workers - 1 else 0)
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="collective", op="allreduce",
                             name="bucket 0", start_ns=launches[rank], end_ns=end, collective=it, group=0,
                             bytes=total, coll_type="allreduce", stream="comm"))
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=end + 100 * US, end_ns=end + 400 * US))
            start[rank] = end + 500 * US
    for i, row in enumerate(rows):
        row["id"] = i
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in tensors]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "buckets": [{"bucket": 0, "group": 0, "tensors": list(range(len(tensors)))[::-1], "bytes": total}],
            "ranks": {str(r): {} for r in range(workers)}, "workers": workers, "bandwidth": "1000Mbps",
            "allreduce_small_ns": float(SMALL_NS), "allreduce_step_ns": SMALL_NS / (2 * (workers - 1))}
    log = event_log_from_rows(rows, metadata=meta)
    write_event_log(log, path)
    return log, total


@pytest.mark.parametrize("workers", [2, 3])
def test_a_rank_that_ends_late_and_so_launches_late_is_waited_for_once(tmp_path, workers):
    """Its lateness is in the all-reduce's busy time (launch to the last end) already; each rank's rows are measured
    from its own end, so its late launch is no further wait: the bucket's wait is 0, where the latest launch less the
    mean alone is (N - 1) / N x lag. The replayed iteration is then the measured one: compute, optimizer and gaps
    (5 x 0.3 + 5 x 0.5 + 0.5 ms) and the all-reduce's busy time (20 ms + lag, + 4 b from the fit's intercept)."""
    from ddlsim.simulation.overheads import framework_overheads

    lag = 6_000 * US
    path = tmp_path / "c.parquet"
    log, total = lagging_capture(path, lag, workers=workers)
    found = framework_overheads(log, log.metadata)
    assert [b["skew_s"] for b in found["buckets"]] == pytest.approx([0.0], abs=1e-12)
    scenario, _ = replay_plan(path)
    busy = 20_000 * US + lag
    b = (busy - SMALL_NS) / (total - 4)
    expected = 5 * 300 * US + 5 * 500 * US + 500 * US + busy + 4 * b
    assert ddlsim.simulate(scenario).iteration_time_s * 1e9 == pytest.approx(expected, abs=2 * (workers - 1) * (2 + b))


def test_an_unshaped_capture_replayed_with_its_training_rate_assumes_no_link_rate(tmp_path):
    """No link rate recorded and none measured after training: the training rate is what the replay takes, so the
    note that the 10 Gbit/s default is ASSUMED would be wrong."""
    path = tmp_path / "c.parquet"
    log, total = one_bucket_capture(path, [3_000 * US] * 6, bandwidth=None)
    meta = {k: v for k, v in log.metadata.items() if k not in ("allreduce_rate_bps", "allreduce_rate_sizes")}
    write_event_log(event_log_from_rows(log.to_pandas().drop(columns=["deps"]).to_dict("records"), metadata=meta), path)
    scenario, notes = replay_plan(path)
    assert scenario.network.bandwidth_bps == pytest.approx(8e9 / ((3_000 * US - SMALL_NS) / (total - 4)), rel=1e-9)
    assert not any("ASSUMED" in n for n in notes)
    assert any("ASSUMED" in n for n in replay_plan(path, overheads=False)[1])  # the default rate, assumed


@pytest.mark.parametrize("bandwidth", ["100Mbps", "1Gbps", None])
def test_naming_a_captures_own_wire_or_rate_replays_it_exactly_as_leaving_them_out(tmp_path, bandwidth):
    """Oracle: the replay without options. ``--wire tbf`` of a shaped capture (``--wire none`` of an unshaped one) is
    its default framing, and a shaped capture's own rate given (also as another spelling of it) is its own link:
    both ask for the same replay. Before, either named dropped the ring's rate while training (on the 100 Mbit/s
    capture: 20.1 against 25.5 ms)."""
    path = tmp_path / "ddp.parquet"
    one_bucket_capture(path, [40_000 * US, 20_000 * US, 21_000 * US, 22_000 * US], bandwidth=bandwidth)
    plain = ddlsim.replay(path, network="analytic")
    named = [dict(wire="tbf" if bandwidth else "none")]
    if bandwidth:
        spelled = f"{ddlsim.units.parse_bandwidth(bandwidth) / 1e9:g}Gbps"
        named += [dict(bandwidth=bandwidth), dict(bandwidth=spelled, wire="tbf")]
    for kw in named:
        again = ddlsim.replay(path, network="analytic", **kw)
        assert again.events.table.equals(plain.events.table), kw
    if bandwidth:  # another rate is another link
        other = ddlsim.replay(path, network="analytic", bandwidth="10Gbps")
        assert not other.events.table.equals(plain.events.table)
