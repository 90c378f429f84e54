"""What a DDP replay puts back besides gaps and headers (ddlsim.simulation.overheads.bucket_skew,
ddlsim.simulation.replay.tbf_burst_factor): the wait for the slower rank at each bucket's launch, and tbf's token
bucket on a shaped link. Oracles: synthetic captures whose per-rank delays are known, and the closed form on paper."""

from __future__ import annotations

import numpy as np
import pytest

import ddlsim
from ddlsim.simulation.overheads import framework_overheads
from ddlsim.simulation.replay import replay_plan, tbf_burst_factor
from ddlsim.trace import event_log_from_rows, write_event_log

US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]


def two_bucket_capture(path, delays1, delays2, *, workers=2, iterations=5):
    """lenet5 on `workers` ranks, two buckets per iteration: bucket 0 launched after fc1's backward, bucket 1 after
    conv1's. In iteration i the last rank's fc2 backward takes delays1[i] longer (before bucket 0) and its conv2
    backward delays2[i] longer (between the buckets); every other row is the same on every rank."""
    fwd, bwd = 300 * US, 500 * US
    rows, t = [], 0
    for it in range(iterations):
        ends = []
        for rank in range(workers):
            now = t
            late = rank == workers - 1
            for layer in LENET:
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="forward", name=layer,
                                 start_ns=now, end_ns=now + fwd))
                now += fwd
            launches = []
            for layer in LENET[::-1]:
                extra = (delays1[it] if layer == "fc2" else delays2[it] if layer == "conv2" else 0) if late else 0
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="backward", name=layer,
                                 start_ns=now, end_ns=now + bwd + extra))
                now += bwd + extra
                if layer in ("fc1", "conv1"):
                    launches.append(now)
            ends.append(launches)
        finish = t
        for k in range(2):
            ready = max(e[k] for e in ends)
            for rank in range(workers):
                rows.append(dict(iteration=it, rank=rank, role="worker", kind="collective", op="allreduce",
                                 name=f"bucket {k}", start_ns=ends[rank][k], end_ns=ready + 2_000 * US,
                                 collective=2 * it + k, group=k, bytes=1000, coll_type="allreduce", stream="comm"))
            finish = max(finish, ready + 2_000 * US)
        for rank in range(workers):
            rows.append(dict(iteration=it, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=finish + 100 * US, end_ns=finish + 400 * US))
        t = finish + 500 * US
    for i, row in enumerate(rows):
        row["id"] = i
    tensors = ddlsim.load_model("lenet5").tensors
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in tensors]
    first = [i for i, x in enumerate(tensors) if x.name.split(".")[0] in ("fc1", "fc2", "fc3")][::-1]
    second = [i for i, x in enumerate(tensors) if x.name.split(".")[0] in ("conv1", "conv2")][::-1]
    buckets = [{"bucket": k, "group": k, "tensors": b, "bytes": sum(tensors[i].bytes for i in b)}
               for k, b in enumerate((first, second))]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "buckets": buckets, "ranks": {str(r): {} for r in range(workers)}}
    log = event_log_from_rows(rows, metadata=meta)
    write_event_log(log, path)
    return log


@pytest.mark.parametrize("workers", [2, 3])
def test_the_wait_for_the_slower_rank_is_charged_to_the_layer_before_each_launch(tmp_path, workers):
    rng = np.random.default_rng(workers)
    d1 = [int(x) for x in rng.integers(0, 3_000, 5) * US]
    d2 = [int(x) for x in rng.integers(0, 3_000, 5) * US]
    log = two_bucket_capture(tmp_path / "c.parquet", d1, d2, workers=workers)
    found = framework_overheads(log, log.metadata)
    # iteration 0 is the warm-up; the latest launch less the mean over N ranks is (N - 1) / N of the last rank's delay
    share = (workers - 1) / workers
    skew0 = share * np.mean(d1[1:]) / 1e9
    skew1 = share * np.mean(np.add(d1, d2)[1:]) / 1e9
    assert [b["layer"] for b in found["buckets"]] == ["fc1", "conv1"]
    assert [b["skew_s"] for b in found["buckets"]] == pytest.approx([skew0, skew1], rel=1e-12)
    assert found["skew_s"] == pytest.approx(skew1, rel=1e-12)
    without = framework_overheads(log, {**log.metadata, "job": "ps"})  # only DDP buckets wait for the last rank
    assert found["layers"]["fc1"][1] - without["layers"]["fc1"][1] == pytest.approx(skew0, rel=1e-9)
    assert found["layers"]["conv1"][1] - without["layers"]["conv1"][1] == pytest.approx(skew1 - skew0, rel=1e-9)
    assert without["buckets"] == [] and framework_overheads(log, log.metadata, tails=False)["buckets"] == []


def test_a_replay_launches_each_bucket_when_the_last_rank_did(tmp_path):
    d1, d2 = [4_000 * US] * 5, [1_000 * US] * 5
    path = tmp_path / "c.parquet"
    two_bucket_capture(path, d1, d2)
    scenario, notes = replay_plan(path)
    run = ddlsim.simulate(scenario, trace_detail="collective")
    df = run.events.to_pandas()
    coll = sorted(df[(df.kind == "collective") & (df.iteration == 1)].groupby("group").start_ns.min())
    start = df[(df.iteration == 1) & (df.kind == "compute")].start_ns.min()
    # measured (iteration 1, from its first forward): the last rank launches bucket 0 after 5 forwards, 3 backwards
    # and its 4 ms delay; bucket 1 after 2 more backwards and 1 ms more. The replay's first forward also holds the
    # optimizer step (0.1 ms after the all-reduces, 0.3 ms long) and the 0.1 ms before the next forward
    fwd, bwd, step = 300 * US, 500 * US, 500 * US
    expected = [step + 5 * fwd + 3 * bwd + 4_000 * US, step + 5 * fwd + 5 * bwd + 5_000 * US]
    assert [c - start for c in coll] == pytest.approx(expected, abs=2)
    assert any("the wait for the slower rank" in n for n in notes)


def test_the_token_bucket_factor_is_the_closed_form():
    """On paper, LeNet-5's one 246,824-byte bucket, 2 ranks, 100 Mbit/s tbf (bucket 65,536 B): a rank sends
    2 (2 - 1) / 2 x 246,824 = 246,824 payload bytes, 246,824 x 1514 / 1448 wire bytes, of which 65,536 pass at once."""
    meta = {"source": "capture", "job": "ddp", "buckets": [{"bytes": 246_824}]}
    wire = 246_824 * 1514 / 1448
    factor, note = tbf_burst_factor(meta, 100e6, 1448 / 1514, 2)
    assert factor == pytest.approx(wire / (wire - 65_536), rel=1e-12)
    assert "65536-byte token bucket" in note
    # 1 Gbit/s: the bucket (1e9 / 8 x 4 ms = 500,000 B) holds the whole iteration: the unshaped default rate
    factor, note = tbf_burst_factor(meta, 1e9, 1448 / 1514, 2)
    assert factor == pytest.approx(10e9 / (1e9 * 1448 / 1514), rel=1e-12) and "does not bind" in note
    # 4 ranks, two buckets: 2 x 3 / 4 of their bytes
    meta = {"source": "capture", "job": "ddp", "buckets": [{"bytes": 30_000_000}, {"bytes": 16_000_000}]}
    wire = 1.5 * 46_000_000 * 1514 / 1448
    assert tbf_burst_factor(meta, 100e6, 1448 / 1514, 4)[0] == pytest.approx(wire / (wire - 65_536), rel=1e-12)
    assert tbf_burst_factor({**meta, "job": "ps"}, 100e6, 1448 / 1514, 4) is None
    assert tbf_burst_factor({"source": "capture", "job": "ddp"}, 100e6, 1448 / 1514, 4) is None


def test_the_measured_ring_rate_is_the_slope_between_two_sizes():
    from ddlsim.capture.allreduce_rate import rate_from_times

    # 2 ranks: each sends 2 (2 - 1) / 2 x 6 MiB more for the larger all-reduce, in 0.5 s more
    found = rate_from_times(2, (2 << 20, 8 << 20), [0.2e9, 0.7e9])
    assert found["allreduce_rate_bps"] == pytest.approx(8 * (6 << 20) / 0.5, rel=1e-12)
    assert rate_from_times(4, (2 << 20, 8 << 20), [0.2e9, 0.7e9])["allreduce_rate_bps"] == pytest.approx(
        8 * 1.5 * (6 << 20) / 0.5, rel=1e-12)
    assert rate_from_times(2, (2 << 20, 8 << 20), [0.7e9, 0.7e9]) == {}  # no slope: nothing measured
    assert rate_from_times(1, (2 << 20, 8 << 20), [0.2e9, 0.7e9]) == {}


@pytest.mark.parametrize("bandwidth", ["100Mbps", None])
def test_a_replay_at_the_captures_own_link_takes_the_measured_ring_rate(tmp_path, bandwidth):
    path = tmp_path / "c.parquet"
    log = two_bucket_capture(path, [0] * 5, [0] * 5)
    meta = {**log.metadata, "allreduce_rate_bps": 87e6, "allreduce_rate_sizes": [2 << 20, 8 << 20]}
    if bandwidth:
        meta["bandwidth"] = bandwidth
    write_event_log(event_log_from_rows(log.to_pandas().drop(columns=["deps"]).to_dict("records"), metadata=meta), path)
    scenario, notes = replay_plan(path)
    expected = 87e6
    if bandwidth:  # and tbf's token bucket on top, with the measured rate as the payload share of the link
        expected *= tbf_burst_factor(meta, 100e6, 0.87, 2)[0]
    assert scenario.network.bandwidth_bps == pytest.approx(expected, rel=1e-12)
    assert any(n.startswith("replay: payload rate 87 Mbit/s, the rate the capture's ring all-reduces got") for n in notes)
    assert not any("ASSUMED" in n for n in notes)
    # another rate given: the closed form (headers, token bucket), not the measured rate
    other, notes = replay_plan(path, bandwidth="50Mbps")
    assert other.network.bandwidth_bps != pytest.approx(expected, rel=1e-3)
    assert not any("the rate the capture's ring all-reduces got" in n for n in notes)


def test_a_measured_rate_above_the_links_payload_bound_is_bounded(tmp_path):
    path = tmp_path / "c.parquet"
    log = two_bucket_capture(path, [0] * 5, [0] * 5)
    meta = {**log.metadata, "allreduce_rate_bps": 1.1e9, "allreduce_rate_sizes": [2 << 20, 8 << 20],
            "bandwidth": "1000Mbps"}
    write_event_log(event_log_from_rows(log.to_pandas().drop(columns=["deps"]).to_dict("records"), metadata=meta), path)
    scenario, notes = replay_plan(path)
    bound = 1e9 * 1448 / 1514
    assert scenario.network.bandwidth_bps == pytest.approx(bound * tbf_burst_factor(meta, 1e9, bound / 1e9, 2)[0],
                                                           rel=1e-12)
    assert any("above the link's payload bound" in n for n in notes)
