"""Replay puts back what a capture measured outside its layers (framework gaps, the optimizer step), the bytes the
wire's headers cost, and the capture's measured reduction cost (ddlsim.simulation.overheads)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ddlsim
from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean
from ddlsim.simulation.overheads import framework_overheads, payload_fraction, wire_fraction
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log

US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]


def test_the_header_factor_is_the_closed_form():
    """On paper: a 1500-byte MTU leaves 1500 - 20 (IP) - 20 (TCP) = 1460 payload bytes; Ethernet adds preamble 8, MAC
    header 14, FCS 4 and inter-frame gap 12 = 38 byte times. A tbf qdisc counts only the 14-byte MAC header, and
    Linux's TCP timestamps take 12 of the payload bytes: 1448 / 1514."""
    assert payload_fraction() == 1460 / 1538
    assert wire_fraction("ethernet") == 1460 / 1538
    assert wire_fraction("tbf") == 1448 / 1514
    assert wire_fraction("none") == 1.0
    assert payload_fraction(9000, 38) == 8960 / 9038
    with pytest.raises(ValueError, match="mtu 40 leaves no payload"):
        payload_fraction(40)


def synthetic_capture(path, *, workers=1, iterations=4, rng_seed=3, bandwidth=None, comm_gap_ns=0, slow_ns=0):
    """A DDP capture of lenet5 with known gaps: per iteration and rank a marker, every layer's forward and backward
    with a seeded gap before each row, a 0.7 ms gap then the optimizer step (after a collective row that ends
    `comm_gap_ns` after the last backward) and a tail to the marker's end. Iteration 0 is 5x slower (the warm-up);
    in iteration 2, conv2's backward takes `slow_ns` longer (one slow step: the median keeps it out, the mean not)."""
    rng = np.random.default_rng(rng_seed)
    fwd = {n: int(x) for n, x in zip(LENET, rng.integers(100, 900, 5) * US)}
    bwd = {n: int(x) for n, x in zip(LENET, rng.integers(100, 900, 5) * US)}
    gap_f = {n: int(x) for n, x in zip(LENET, rng.integers(10, 300, 5) * US)}
    gap_b = {n: int(x) for n, x in zip(LENET, rng.integers(10, 300, 5) * US)}
    optimizer, before_optimizer, tail = 400 * US, 700 * US, 150 * US
    rows, t = [], 0
    for iteration in range(iterations):
        slow = 5 if iteration == 0 else 1
        end = t
        for rank in range(workers):
            now = t
            first = len(rows)
            rows.append(None)
            for op, order, d, g in (("forward", LENET, fwd, gap_f), ("backward", LENET[::-1], bwd, gap_b)):
                for layer in order:
                    now += g[layer] * slow
                    extra = slow_ns if (iteration, op, layer) == (2, "backward", "conv2") else 0
                    rows.append(dict(iteration=iteration, rank=rank, role="worker", kind="compute", op=op, name=layer,
                                     start_ns=now, end_ns=now + d[layer] * slow + extra))
                    now += d[layer] * slow + extra
            rows.append(dict(iteration=iteration, rank=rank, role="worker", kind="collective", op="allreduce",
                             name="bucket0", start_ns=now, end_ns=now + comm_gap_ns, collective=iteration + 1, group=0,
                             bytes=0, coll_type="allreduce", stream="comm"))
            now += comm_gap_ns + before_optimizer
            rows.append(dict(iteration=iteration, rank=rank, role="worker", kind="compute", op="optimizer_step",
                             name="optimizer", start_ns=now, end_ns=now + optimizer))
            now += optimizer + tail
            rows[first] = dict(iteration=iteration, rank=rank, role="worker", kind="marker", op="iteration",
                               name=f"iteration {iteration}", start_ns=t, end_ns=now)
            end = max(end, now)
        t = end
    for i, row in enumerate(rows):
        row["id"] = i
    params = [{"name": x.name, "elements": x.elements, "bytes": x.bytes} for x in ddlsim.load_model("lenet5").tensors]
    meta = {"source": "capture", "job": "ddp", "model": "lenet5", "bucket_cap_mb": 25, "parameters": params,
            "ranks": {str(r): {} for r in range(workers)}}
    if bandwidth:
        meta["bandwidth"] = bandwidth
    write_event_log(event_log_from_rows(rows, metadata=meta), path)
    steady = sum(fwd.values()) + sum(bwd.values()) + sum(gap_f.values()) + sum(gap_b.values()) + before_optimizer \
        + optimizer + tail
    return path, steady, sum(gap_f.values()) + sum(gap_b.values()) + tail, optimizer + before_optimizer


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_replay_reproduces_a_capture_with_known_gaps_exactly(tmp_path, seed):
    """Oracle: one worker has no communication, so the replayed iteration is the layers plus the measured gaps and
    optimizer step, exactly the captured steady iteration (built on paper above, and iteration_mean of the log)."""
    events, steady_ns, gaps_ns, optimizer_ns = synthetic_capture(tmp_path / "events.parquet", rng_seed=seed)
    log = read_event_log(events)
    measured = iteration_mean(iteration_arrays(log), log.metadata)
    assert round(measured["mean_s"] * 1e9) == steady_ns
    found = framework_overheads(log)
    assert round(found["gap_s"] * 1e9) == gaps_ns and round(found["optimizer_s"] * 1e9) == optimizer_ns
    replayed = ddlsim.replay(events)
    assert [round(x * 1e9) for x in replayed.summary()["iteration_times_s"]] == [steady_ns] * 4
    assert any(n.startswith("replay: + the capture's framework gaps") for n in replayed.notes)
    without = ddlsim.replay(events, overheads=False)
    assert round(without.iteration_time_s * 1e9) == steady_ns - gaps_ns - optimizer_ns


def test_waiting_for_communication_is_not_counted_as_a_gap(tmp_path):
    """The collective row ends 2 ms after the last backward: the gap before the optimizer starts when it ended."""
    events, _, gaps_ns, optimizer_ns = synthetic_capture(tmp_path / "events.parquet", comm_gap_ns=2_000 * US)
    found = framework_overheads(read_event_log(events))
    assert round(found["gap_s"] * 1e9) == gaps_ns and round(found["optimizer_s"] * 1e9) == optimizer_ns


def test_a_shaped_replay_moves_payload_at_the_header_factor(tmp_path):
    """Two workers, one all-reduce after the backward (synceasgd), analytic network, no latency: the ring's 2 steps
    each move B / 2 bytes at the payload rate 1 Gbit/s x 1448 / 1514 (a tbf-shaped capture)."""
    events, steady_ns, _, _ = synthetic_capture(tmp_path / "events.parquet", workers=2, bandwidth="1000Mbps")
    total = sum(t.bytes for t in ddlsim.load_model("lenet5").tensors)
    r = ddlsim.replay(events, network="analytic", grouping="synceasgd", latency="0ns")
    rate = 1e9 * 1448 / 1514
    assert r.scenario.network.bandwidth_bps == pytest.approx(rate, rel=1e-9)
    step_ns = math.ceil(total / 2 * 8 / r.scenario.network.bandwidth_bps * 1e9)
    assert [round(x * 1e9) for x in r.summary()["iteration_times_s"]] == [steady_ns + 2 * step_ns] * 4
    plain = ddlsim.replay(events, network="analytic", grouping="synceasgd", latency="0ns", wire="none")
    assert plain.scenario.network.bandwidth_bps == 1e9
    assert any("link rate x 0.95641" in n for n in r.notes)


def test_a_capture_records_gamma_and_replay_uses_it(tmp_path):
    events, *_ = synthetic_capture(tmp_path / "events.parquet", workers=2)
    log = read_event_log(events)
    log.metadata["gamma_ns_per_byte"] = 0.25
    write_event_log(log, tmp_path / "gamma.parquet")
    r = ddlsim.replay(tmp_path / "gamma.parquet")
    assert r.scenario.strategy.gamma_ns_per_byte == 0.25
    assert "replay: reduction cost gamma = 0.25 ns/byte, measured on the capturing machine" in r.notes
    assert ddlsim.replay(events).scenario.strategy.gamma_ns_per_byte == 0.0


def test_an_unknown_wire_is_refused(tmp_path):
    events, *_ = synthetic_capture(tmp_path / "events.parquet")
    with pytest.raises(ddlsim.DdlsimError, match="wire 'fddi': give one of ethernet, tbf, none"):
        ddlsim.replay(events, wire="fddi")


def test_sampled_rank_times_carry_the_same_overheads(tmp_path):
    """Every captured step alike: drawing steps (each with the capture's gaps and optimizer step added) replays the
    median replay, overheads included."""
    events, steady_ns, _, _ = synthetic_capture(tmp_path / "events.parquet", iterations=5)
    median = ddlsim.replay(events, workers=1)
    sampled = ddlsim.replay(events, workers=1, rank_times="sampled")
    assert [round(x * 1e9) for x in sampled.summary()["iteration_times_s"]] == [steady_ns] * 5
    assert sampled.summary()["iteration_times_s"] == median.summary()["iteration_times_s"]


def test_the_capture_measures_gamma_per_byte():
    """The microbenchmark a DDP capture runs: a finite, positive ns per byte (its value is the machine's)."""
    pytest.importorskip("torch")
    from ddlsim.capture.ddp import reduction_cost_ns_per_byte

    gamma = reduction_cost_ns_per_byte(1024, repeats=3)
    assert math.isfinite(gamma) and gamma > 0


def test_one_slow_step_counts_in_the_mean_as_in_the_measured_mean(tmp_path):
    """Iteration 2's conv2 backward is 4 ms slower: the median layer time (of 5 iterations) leaves it out, the
    measured mean over iterations 1-4 holds a quarter of it, and so does the replay (each layer charged its mean
    less its median)."""
    events, steady_ns, _, _ = synthetic_capture(tmp_path / "events.parquet", slow_ns=4_000 * US, iterations=5)
    log = read_event_log(events)
    assert round(iteration_mean(iteration_arrays(log), log.metadata)["mean_s"] * 1e9) == steady_ns + 1_000 * US
    assert round(framework_overheads(log)["tail_s"] * 1e9) == 1_000 * US
    assert [round(x * 1e9) for x in ddlsim.replay(events).summary()["iteration_times_s"]] == [steady_ns + 1_000 * US] * 5


def test_a_capture_records_its_small_all_reduce_and_replay_takes_it_as_the_step_latency(tmp_path):
    """Oracle on paper: 2 workers, one all-reduce after the backward, analytic network: each of the ring's 2 steps
    costs the measured step latency (4-byte all-reduce 300 us / 2 steps = 150 us) plus its bytes at the payload rate."""
    events, steady_ns, _, _ = synthetic_capture(tmp_path / "events.parquet", workers=2, bandwidth="1000Mbps")
    log = read_event_log(events)
    log.metadata.update(allreduce_small_ns=300_000.0, allreduce_step_ns=150_000.0)
    write_event_log(log, tmp_path / "alpha.parquet")
    r = ddlsim.replay(tmp_path / "alpha.parquet", network="analytic", grouping="synceasgd")
    assert r.scenario.network.latency_ns == 150_000
    assert any(n.startswith("replay: latency 150000ns per ring step = the capture's 4-byte all-reduce (300 us)")
               for n in r.notes), r.notes
    total = sum(t.bytes for t in ddlsim.load_model("lenet5").tensors)
    step_ns = 150_000 + math.ceil(total / 2 * 8 / r.scenario.network.bandwidth_bps * 1e9)
    assert [round(x * 1e9) for x in r.summary()["iteration_times_s"]] == [steady_ns + 2 * step_ns] * 4
    assert ddlsim.replay(tmp_path / "alpha.parquet", latency="1us").scenario.network.latency_ns == 1_000


def test_a_ps_capture_takes_half_its_rpc_round_trip_as_the_message_latency(tmp_path):
    events, *_ = synthetic_capture(tmp_path / "events.parquet", workers=2)
    log = read_event_log(events)
    log.metadata.update(job="ps", servers=1, ranks={"0": {"rpc_round_trip_ns": 800_000.0},
                                                     "1": {"rpc_round_trip_ns": 1_000_000.0}})
    write_event_log(log, tmp_path / "ps.parquet")
    r = ddlsim.replay(tmp_path / "ps.parquet")
    assert r.scenario.strategy.kind == "ps" and r.scenario.network.latency_ns == 450_000
    assert any(n.startswith("replay: latency 450000ns per message = half the capture's 4-byte RPC round trip")
               for n in r.notes), r.notes


@pytest.mark.parametrize("facts, noted", [({"processes": 3, "host_cores": 2}, True), ({"processes": 2, "host_cores": 2}, False),
                                          ({"processes": 4, "host_cores": 16}, False), ({}, False),
                                          ({"processes": "3", "host_cores": 2}, False)])
def test_a_capture_with_more_processes_than_cores_is_noted_as_sharing_them(facts, noted):
    """Only a capture that records more processes than cores gets the shared-cores note (and says how many)."""
    from ddlsim.simulation.replay import shared_cores_note

    note = shared_cores_note({"source": "capture", "job": "ps", **facts})
    assert (note is not None) == noted
    if noted:
        assert note.startswith("replay: the capture ran 3 processes on 2 cores of one host")
