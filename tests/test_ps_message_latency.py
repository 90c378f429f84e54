"""A PS capture's message latency while training, measured from its own RPC rows
(:func:`ddlsim.simulation.overheads.training_message_latency`), and replay's use of it at the capture's own
link (docs/validation.md, "PS with the RPC transport while training")."""

from __future__ import annotations

import numpy as np
import pytest

import ddlsim
from ddlsim.errors import DdlsimError
from ddlsim.simulation.overheads import training_message_latency
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log

LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
US = 1_000
SIZES = {i: t.bytes for i, t in enumerate(ddlsim.load_model("lenet5").tensors)}
L, K = 2_000 * US, 8  # transport of a message: L + K x bytes ns (K = 8 ns per byte: 1 Gbit/s)
SKEW = 123_456_789  # the server's clock runs this far behind the workers'


def ps_rows(workers=2, iterations=3, latency=L, per_byte=K, skew=SKEW, issue=100 * US, link=lambda size: 0):
    """A PS capture's rows whose every message (request and response) took ``latency + per_byte x bytes`` on the
    aligned clocks, from the end of the worker's send row (its rpc_async call) or the start of the server's send
    row to the receiver's recv row; the server (host 1) records on a clock `skew` ns behind. Per iteration and
    worker: LeNet-5's layers (1 ms each way), then per key a push (the gradient's bytes) and a pull (its
    response the parameter's bytes), one after another. Iteration 0 (the warm-up) takes 10 times longer. `link`: ns
    a message of so many bytes also spends on a link (once, also in the warm-up)."""
    rows, t, rpc = [], 0, 0
    for it in range(iterations):
        slow = 10 if it == 0 else 1
        end = t
        for w in range(workers):
            now = t
            for op, order in (("forward", LENET), ("backward", LENET[::-1])):
                for layer in order:
                    rows.append(dict(iteration=it, rank=w, role="worker", host=0, kind="compute", op=op, name=layer,
                                     start_ns=now, end_ns=now + 1_000 * US))
                    now += 1_000 * US
            for tensor, size in SIZES.items():
                for request, response, handler, req_bytes in (("push_request", "push_response", "ack", size),
                                                                ("pull_request", "pull_response", "apply", 0)):
                    rpc += 1
                    resp_bytes = size - req_bytes
                    rows.append(dict(iteration=it, rank=w, role="worker", host=0, kind="send", op=request, peer=workers,
                                     rpc=rpc, message=rpc, tensor=tensor, bytes=req_bytes, start_ns=now,
                                     end_ns=now + issue))
                    now += issue + slow * (latency + per_byte * req_bytes) + link(req_bytes)  # the request's arrival
                    server = dict(iteration=it, rank=workers, role="server", host=1, peer=w, rpc=rpc, tensor=tensor)
                    rows.append(dict(server, kind="recv", op=request, message=rpc, bytes=req_bytes,
                                     start_ns=now - skew, end_ns=now - skew))
                    now += 200 * US
                    rows.append(dict(server, kind="send", op=response, message=10_000 + rpc, bytes=resp_bytes,
                                     start_ns=now - skew, end_ns=now - skew + 50 * US))
                    now += slow * (latency + per_byte * resp_bytes) + link(resp_bytes)
                    rows.append(dict(iteration=it, rank=w, role="worker", host=0, kind="recv", op=response, peer=workers,
                                     rpc=rpc, message=10_000 + rpc, tensor=tensor, bytes=resp_bytes, start_ns=now,
                                     end_ns=now))
                    rows.append(dict(iteration=it, rank=w, role="worker", host=0, kind="compute", op=handler, rpc=rpc,
                                     tensor=tensor, start_ns=now, end_ns=now + 20 * US))
                    now += 20 * US
            end = max(end, now)
        t = end
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


def metadata(workers=2, **extra):
    return {"source": "capture", "job": "ps", "model": "lenet5", "workers": workers, "servers": 1, "sync": True,
            "clocks": {"0": {"offset_ns": 0}, "1": {"offset_ns": SKEW}},
            "ranks": {"0": {"rpc_round_trip_ns": 800_000.0}, "1": {"rpc_round_trip_ns": 1_000_000.0}}, **extra}


def ps_capture(path, rows=None, **meta):
    write_event_log(event_log_from_rows(ps_rows() if rows is None else rows, metadata=metadata(**meta)), path)
    return path


def test_the_rows_give_the_known_latency_and_per_byte_without_the_warm_up():
    found = training_message_latency(event_log_from_rows(ps_rows(), metadata=metadata()))
    assert found["iterations"] == [1, 2]
    assert found["messages"] == 2 * 2 * len(SIZES) * 2 * 2  # 2 counted iterations, 2 workers, per key 2 RPCs of 2 messages
    assert found["latency_ns"] == pytest.approx(L, rel=1e-12) and found["ns_per_byte"] == pytest.approx(K, rel=1e-12)
    assert found["worker_bytes"] == sum(SIZES.values())  # a worker's pushes (and its pull responses) per iteration
    # sizes alike (all 0) or a slope below 0: the mean, slope 0
    same = training_message_latency(event_log_from_rows(ps_rows(per_byte=0), metadata=metadata()))
    assert (same["latency_ns"], same["ns_per_byte"]) == (pytest.approx(L, rel=1e-12), 0.0)
    falling = event_log_from_rows(ps_rows(latency=5_000 * US, per_byte=-10), metadata=metadata())
    found = training_message_latency(falling)
    assert found["ns_per_byte"] == 0.0 and found["latency_ns"] == pytest.approx(found["mean_ns"], rel=1e-12)
    # not a PS capture, no RPC rows, or messages that took no time: nothing
    assert training_message_latency(event_log_from_rows(ps_rows(latency=0, per_byte=0), metadata=metadata())) is None
    assert training_message_latency(event_log_from_rows(ps_rows(), metadata=metadata(job="ddp"))) is None
    bare = [r for r in ps_rows() if r["kind"] == "compute" and "rpc" not in r]
    assert training_message_latency(event_log_from_rows(bare, metadata=metadata())) is None


def _transport(events, rows_kind):
    """Per (worker, tensor, RPC kind) of iteration 1: request and response transport times summed, ns."""
    c = {k: np.asarray(events.column(k)) for k in ("iteration", "rank", "kind", "op", "message", "tensor", "start_ns",
                                                  "end_ns", "peer")}
    if "clocks" in (events.metadata or {}):
        from ddlsim.trace.columns import aligned_times

        c["start_ns"], c["end_ns"] = aligned_times(events)
    recv = {(int(m), int(r)): int(e) for m, r, e, k in zip(c["message"], c["rank"], c["end_ns"], c["kind"]) if k == "recv"}
    out: dict[tuple[int, int, str], int] = {}
    for i in np.flatnonzero((c["kind"] == "send") & (c["iteration"] == 1)):
        op = str(c["op"][i])
        # the capture's request send row is the worker's rpc_async call (its issue cost); the replay's is the wire
        leaves = c["end_ns"][i] if rows_kind == "capture" and op.endswith("_request") else c["start_ns"][i]
        worker = int(c["rank"][i]) if op.endswith("_request") else int(c["peer"][i])
        key = (worker, int(c["tensor"][i]), op.split("_")[0])
        out[key] = out.get(key, 0) + recv[(int(c["message"][i]), int(c["peer"][i]))] - int(leaves)
    return out


def test_a_replay_at_the_capture_s_own_link_takes_as_long_per_rpc_as_the_rows_did(tmp_path):
    """Oracle: the rows' own transport times. Unshaped (10 Gbit/s assumed), so the per-byte term (1 ns per byte:
    8 Gbit/s) bounds the rate. One worker whose requests leave 1 ms apart (its issue cost, longer than any
    message's bytes take), so no message queues behind another and each replayed one takes latency + its bytes
    at that rate, as its row did."""
    rows = ps_rows(workers=1, per_byte=1, issue=1_000 * US)
    path = ps_capture(tmp_path / "ps.parquet", rows=rows, workers=1)
    r = ddlsim.replay(path, network="analytic")
    assert r.scenario.network.latency_ns == L and r.scenario.network.bandwidth_bps == pytest.approx(8e9, rel=1e-12)
    assert any(n.startswith(f"replay: latency {L}ns per message = what the capture's own RPC messages took while "
                            "training") for n in r.notes), r.notes
    assert not any("4-byte RPC round trip" in n for n in r.notes), r.notes
    measured = _transport(read_event_log(path), "capture")
    replayed = _transport(r.events, "replay")
    assert len(measured) == 2 * len(SIZES) and replayed == measured


def test_old_values_where_the_rows_do_not_give_it_or_are_overridden(tmp_path):
    """The fallbacks keep the old replay: half the round trip (450 us) as latency, the link model's rate."""
    bare_rows = [r for r in ps_rows() if r["kind"] == "compute" and "rpc" not in r]
    bare = ps_capture(tmp_path / "bare.parquet", rows=bare_rows)
    plain = ddlsim.replay(bare)
    assert plain.scenario.network.latency_ns == 450_000
    assert any(n.startswith("replay: latency 450000ns per message = half the capture's 4-byte RPC round trip")
               for n in plain.notes)
    assert not any("while training" in n for n in plain.notes)
    same = ddlsim.replay(bare, latency="450000ns")
    assert plain.events.table.equals(same.events.table)  # the rows add nothing where there are none
    path = ps_capture(tmp_path / "ps.parquet")
    default = ddlsim.Scenario().network.bandwidth_bps
    for kw, latency, bandwidth in ((dict(overheads=False), 450_000, default), (dict(latency="1us"), 1_000, default)):
        r = ddlsim.replay(path, **kw)
        assert (r.scenario.network.latency_ns, r.scenario.network.bandwidth_bps) == (latency, bandwidth), kw
        assert not any("while training" in n for n in r.notes), kw
    # a shaped link that bound (a worker's 246,824 bytes per iteration exceed tbf's 64 KiB bucket at 100 Mbit/s):
    # the transport times hold the link's own queueing, so the round trip stays
    shaped = ddlsim.replay(ps_capture(tmp_path / "shaped.parquet", bandwidth="100Mbps"))
    assert shaped.scenario.network.latency_ns == 450_000
    assert not any("while training" in n for n in shaped.notes)
    # one that did not bind (1 Gbit/s: a 500 kB bucket holds a worker's 258,074 wire bytes per iteration): the rows'
    # latency, and the link is the unshaped one, bounded by the per-byte term (8 ns/byte: 1 Gbit/s)
    fast = ddlsim.replay(ps_capture(tmp_path / "fast.parquet", bandwidth="1Gbps"))
    assert fast.scenario.network.latency_ns == L
    assert fast.scenario.network.bandwidth_bps == pytest.approx(1e9, rel=1e-12)


def test_a_shaped_link_that_does_not_bind_replays_as_fast_as_the_rows_messages_went(tmp_path):
    """Oracle: the rows' own transport times. Shaped at 1 Gbit/s, but tbf's 500 kB token bucket holds the 258,074 wire
    bytes a worker sends per iteration, so no message waited for the shaped rate: the rows' messages took 2 ms + 2 ns
    per byte (4 Gbit/s, faster than the shaped rate). The replay takes the unshaped link bounded by that per-byte term
    (before: the shaped 956 Mbit/s payload rate, under which fc1's 192 kB took 1.6 ms instead of 0.38 ms). One worker
    whose requests leave 1 ms apart, so no message queues behind another."""
    rows = ps_rows(workers=1, per_byte=2, issue=1_000 * US)
    path = ps_capture(tmp_path / "ps.parquet", rows=rows, workers=1, bandwidth="1Gbps")
    r = ddlsim.replay(path, network="analytic")
    assert r.scenario.network.latency_ns == L and r.scenario.network.bandwidth_bps == pytest.approx(4e9, rel=1e-12)
    assert any("the shaped link does not bind" in n for n in r.notes), r.notes
    assert not any(n.startswith(("replay: payload rate ", "replay: link bandwidth ")) for n in r.notes), r.notes
    measured = _transport(read_event_log(path), "capture")
    replayed = _transport(r.events, "replay")
    assert len(measured) == 2 * len(SIZES) and replayed == measured
    # a link that binds (100 Mbit/s: a 64 KiB bucket) keeps the link model and the round trip
    shaped = ddlsim.replay(ps_capture(tmp_path / "shaped.parquet", rows=rows, workers=1, bandwidth="100Mbps"))
    assert shaped.scenario.network.bandwidth_bps == pytest.approx(1e8 * 1448 / 1514, rel=1e-12)


def test_a_ps_capture_replayed_as_a_ring_does_not_take_its_rpc_latency_for_a_ring_step(tmp_path):
    """The latency the capture's RPC messages got while training is a PS message's; a what-if with another
    strategy keeps the recorded latency (the link's), not the RPC transport's."""
    path = ps_capture(tmp_path / "ps.parquet", rows=ps_rows(workers=2, per_byte=1, issue=1_000 * US), workers=2)
    ring = ddlsim.replay(path, network="analytic", strategy="ring", iterations=1)
    assert ring.scenario.strategy.kind == "ring" and ring.scenario.network.latency_ns != L
    assert not any("what the capture's own RPC messages took while training" in n for n in ring.notes), ring.notes


def test_job_stagger_on_a_log_of_one_job_is_refused_in_one_line(tmp_path):
    path = ps_capture(tmp_path / "ps.parquet", rows=ps_rows(workers=2), workers=2)
    with pytest.raises(DdlsimError, match="--job-stagger .* holds one job; leave it out"):
        ddlsim.replay(path, network="analytic", job_stagger="10ms")


def test_at_another_rate_whose_token_bucket_holds_a_worker_s_bytes_the_transport_is_carried(tmp_path):
    """Oracle: the rows' own transport times. An unshaped capture (its link never held a message back) replayed on a
    1 Gbit/s tbf link (``--bandwidth 1Gbps --wire tbf``, as a cross-prediction is), whose 500 kB token bucket holds
    the 246,824 wire bytes a worker sends per iteration: no message waits for either link's rate, so each replayed
    message takes what its row took, as at the capture's own link (before: half the 4-byte round trip, 450 us, and
    the shaped payload rate). Where the target's bucket does not hold them (100 Mbit/s: 64 KiB), the round trip
    stays (from a capture whose own shaped link bound: the next test; on a bare link: the test after it)."""
    rows = ps_rows(workers=1, per_byte=1, issue=1_000 * US)
    path = ps_capture(tmp_path / "ps.parquet", rows=rows, workers=1)
    r = ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="tbf")
    assert r.scenario.network.latency_ns == L and r.scenario.network.bandwidth_bps == pytest.approx(8e9, rel=1e-12)
    assert any("the capture's own link did not bind either" in n for n in r.notes), r.notes
    assert not any(n.startswith(("replay: payload rate ", "replay: link bandwidth ")) for n in r.notes), r.notes
    assert _transport(r.events, "replay") == _transport(read_event_log(path), "capture")
    for kw in (dict(bandwidth="100Mbps", wire="tbf"),):
        other = ddlsim.replay(path, network="analytic", **kw)
        assert other.scenario.network.latency_ns == 450_000, kw
        assert not any("while training" in n for n in other.notes), kw


def test_from_a_capture_whose_link_bound_the_machine_s_part_of_each_message_is_carried(tmp_path):
    """Oracle: the time the rows' messages took beyond their shaped links, set by hand. A capture at 100 Mbit/s,
    whose 64 KiB token bucket holds less than a worker's bytes per iteration (the link bound): each message took
    C = 10 ms plus what the link gives a message alone with a full bucket (its wire bytes beyond the bucket at
    100 Mbit/s: fc1's 192 kB took 11 ms more). One worker, and 20 ms or more between two messages on a link, so
    every message finds its buckets full. Replayed at 1 Gbit/s on a tbf link (its 500 kB bucket holds a worker's
    bytes), every message takes C on the unshaped link (before: half the 4-byte round trip, 450 us, and the
    100 Mbit/s capture's message times were not used); every message the mean, not its own time (docs/validation.md,
    "PS from a link that bound"). At the capture's own link the engine queues the messages itself: unchanged."""
    from ddlsim.capture.shaping import default_burst_bytes
    from ddlsim.simulation.overheads import wire_fraction

    c, bucket, per_ns = 10_000 * US, default_burst_bytes(100e6), 100e6 / 8e9
    rows = ps_rows(workers=1, latency=c, per_byte=0, issue=1_000 * US,
                   link=lambda size: round(max(0.0, size / wire_fraction("tbf") - bucket) / per_ns))
    path = ps_capture(tmp_path / "bound.parquet", rows=rows, workers=1, bandwidth="100Mbps")
    r = ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="tbf")
    assert abs(r.scenario.network.latency_ns - c) <= 1
    assert r.scenario.network.bandwidth_bps == pytest.approx(10e9, rel=1e-12)  # the unshaped default
    assert r.scenario.strategy.message_latency.is_empty()
    assert any("link bound" in n and "what the machine took, carried" in n for n in r.notes), r.notes
    assert not any(n.startswith(("replay: payload rate ", "replay: link bandwidth ")) for n in r.notes), r.notes
    own = ddlsim.replay(path, network="analytic")
    assert own.scenario.network.latency_ns == 450_000 and not any("link bound" in n for n in own.notes)


def test_carried_from_the_loopback_the_replay_says_a_veth_or_nic_costs_each_message_more(tmp_path):
    """An unshaped capture whose ranks all ran on one host sent its messages over the loopback; carried to a tbf
    link (a veth pair between namespaces), the transport is the loopback's, which measured 11-24 % short in 5 of 9
    validation grids: the note says so. Not where the ranks ran on two hosts (a real network), or where a host is
    not known, or from a shaped capture."""
    from ddlsim.simulation.overheads import on_the_loopback

    rows = ps_rows(workers=1, per_byte=1, issue=1_000 * US)
    one_host = {"0": {"rpc_round_trip_ns": 800_000.0, "host": "h"}, "1": {"rpc_round_trip_ns": 1e6, "host": "h"}}
    two_hosts = {"0": {"host": "a"}, "1": {"host": "b"}}
    cases = {"loopback": dict(ranks=one_host), "two hosts": dict(ranks=two_hosts), "hosts unknown": {},
             "shaped": dict(ranks=one_host, bandwidth="10Gbps")}
    for name, meta in cases.items():
        path = ps_capture(tmp_path / f"{name}.parquet", rows=rows, workers=1, **meta)
        r = ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="tbf")
        said = [n for n in r.notes if "went over the loopback" in n]
        assert bool(said) == (name == "loopback") == on_the_loopback(read_event_log(path).metadata), (name, r.notes)
        assert any("no message waits for a link's rate" in n for n in r.notes), name  # the transport is carried
    assert "predicted 11 to 24 % short in 5 of 9 grids (12 % long in one" in said_note(tmp_path / "loopback.parquet")


def said_note(path) -> str:
    return next(n for n in ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="tbf").notes
                if "went over the loopback" in n)


@pytest.mark.parametrize("shaped", [None, "1Gbps", "100Mbps"])
def test_naming_a_captures_own_wire_or_rate_replays_it_exactly_as_leaving_them_out(tmp_path, shaped):
    """Oracle: the replay without options. ``--wire`` defaults to the capture's own framing (tbf for a shaped capture,
    none for an unshaped one); naming it, or a shaped capture's own rate, asks for the same link. Before, the PS
    messages' own times were taken only where --wire and --bandwidth were both left out: an unshaped capture with
    --wire none, or a 1 Gbit/s one with --wire tbf or --bandwidth 1Gbps, took half the 4-byte round trip instead
    (on a real capture: 25.42 against 14.01 ms, and 26.45 against 18.59 ms)."""
    rows = ps_rows(workers=2, per_byte=1, issue=300 * US)
    path = ps_capture(tmp_path / "ps.parquet", rows=rows, workers=2, **({"bandwidth": shaped} if shaped else {}))
    plain = ddlsim.replay(path, network="analytic")
    named = [dict(wire="tbf" if shaped else "none")] + ([dict(bandwidth=shaped), dict(bandwidth=shaped, wire="tbf")]
                                                          if shaped else [])
    for kw in named:
        again = ddlsim.replay(path, network="analytic", **kw)
        assert again.events.table.equals(plain.events.table), kw
        assert again.scenario.network.latency_ns == plain.scenario.network.latency_ns, kw


@pytest.mark.parametrize("rate", ["10Gbps", "1Gbps"])
def test_on_a_bare_link_at_another_rate_each_message_takes_the_longer_of_its_own_time_and_its_bytes_there(tmp_path,
                                                                                                         rate):
    """Oracle: the closed form max(the row's transport time, its bytes at the bare link's rate) per message. A capture
    whose messages took 2 ms + 1 ns per byte (its link never held one back) replayed on a bare link (no token bucket:
    an unshaped capture's default framing, and ``--wire none`` of a shaped one whose link did not bind) at 10 Gbit/s
    (0.8 ns per byte; the capture's own per-byte term, 8 Gbit/s, bounds it as at its own link) or 1 Gbit/s (8 ns per
    byte: fc1's 192 kB take 1.5 ms there, less than the 2.19 ms its row took): each message's own time is the
    longer, so each replayed message alone takes what its row took. One worker whose requests leave 2 ms apart, so
    no message waits for the link behind another. Before 2026-11-28, half the 4-byte round trip (450 us) and the
    bytes at the rate: on real captures 32-34 % short at 1 Gbit/s."""
    rows = ps_rows(workers=1, per_byte=1, issue=2_000 * US)
    measured = None
    for name, kw in (("unshaped", dict(bandwidth=rate)), ("shaped", dict(bandwidth=rate, wire="none"))):
        path = ps_capture(tmp_path / f"{name}.parquet", rows=rows, workers=1,
                          **({"bandwidth": "1Gbps"} if name == "shaped" else {}))
        measured = _transport(read_event_log(path), "capture")
        r = ddlsim.replay(path, network="analytic", **kw)
        given = ddlsim.units.parse_bandwidth(rate)
        assert r.scenario.network.bandwidth_bps == pytest.approx(min(given, 8e9), rel=1e-12), name
        assert r.scenario.network.latency_ns != 450_000, name
        assert _transport(r.events, "replay") == measured, name
        assert any(f"carried to the bare {given / 1e6:g} Mbit/s link" in n for n in r.notes), (name, r.notes)
    assert len(measured) == 2 * len(SIZES)


def test_on_a_bare_link_from_a_capture_whose_link_bound_what_the_machine_took_is_carried(tmp_path):
    """A capture whose 100 Mbit/s link bound (a worker's bytes per iteration exceed its 64 KiB bucket) replayed on a
    bare 1 Gbit/s link (``--wire none``): its messages' times hold that link's queueing, so each message is taken
    less what the shaped links took it, and every message takes that fitted latency, as to a tbf link whose bucket
    holds (the test above); the link stays the bare 1 Gbit/s one."""
    path = ps_capture(tmp_path / "bound.parquet", rows=ps_rows(workers=1, per_byte=8, issue=1_000 * US), workers=1,
                      bandwidth="100Mbps")
    bare = ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="none")
    to_tbf = ddlsim.replay(path, network="analytic", bandwidth="1Gbps", wire="tbf")
    assert bare.scenario.network.latency_ns == to_tbf.scenario.network.latency_ns != 450_000
    assert bare.scenario.strategy.message_latency.is_empty()
    assert bare.scenario.network.bandwidth_bps == pytest.approx(1e9, rel=1e-12)
    assert any("what the machine took, carried to the bare 1000 Mbit/s link" in n for n in bare.notes), bare.notes
