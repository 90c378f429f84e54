"""The capture's shaped links re-run on its own sends (:func:`ddlsim.simulation.tbf_queue.tbf_transit`): closed
forms worked on paper for the token buckets, and the engine's flow model (max-min fair sharing on the star's up
and down links, written separately in Rust) as the oracle where the buckets hold nothing."""

from __future__ import annotations

import numpy as np
import pytest

from ddlsim.simulation.flowset import Flow, network, run_flows
from ddlsim.simulation.tbf_queue import tbf_transit

R = 100e6  # bit/s
PER_NS = R / 8e9  # bytes per ns
B = 65_536  # tbf's bucket at 100 Mbit/s (default_burst_bytes)


def transit(messages, bucket=B, rate=R):
    """messages: (sent_ns, sender, receiver, bytes)."""
    sent, src, dst, size = (np.asarray(c) for c in zip(*messages))
    return tbf_transit(sent, src, dst, size.astype(float), rate, bucket)


def test_a_message_alone_passes_the_bucket_at_once_and_the_rest_at_the_rate():
    assert transit([(0, 0, 1, 50_000)]).tolist() == [0.0]
    assert transit([(7, 0, 1, 200_000)]) == pytest.approx([(200_000 - B) / PER_NS])


def test_two_senders_into_one_receiver_share_its_down_link():
    # both buckets full; the first takes the receiver's whole bucket, the second none of it. Both then share the
    # down link at R/2: the first's w - B end at 2 (w - B) / R, the second's last B at R after: (2w - B) / R
    w = 200_000
    assert transit([(0, 0, 2, w), (0, 1, 2, w)]) == pytest.approx([2 * (w - B) / PER_NS, (2 * w - B) / PER_NS])


def test_one_connection_sends_its_messages_in_order():
    # the second waits for the first, whose burst emptied the buckets: w1 + w2 - B at R in all
    got = transit([(0, 0, 1, 100_000), (0, 0, 1, 30_000)])
    assert got == pytest.approx([(100_000 - B) / PER_NS, (130_000 - B) / PER_NS])


def test_an_idle_link_refills_its_bucket_at_the_rate_up_to_its_size():
    gap = 2_000_000  # ns: refills 25 kB
    first = 10_000 / PER_NS  # the first empties the bucket (its burst) and ends then
    got = transit([(0, 0, 1, B + 10_000), (first + gap, 0, 1, 40_000)])
    assert got == pytest.approx([first, (40_000 - PER_NS * gap) / PER_NS])
    long_after = transit([(0, 0, 1, B + 10_000), (first + 1e9, 0, 1, 40_000)])  # full again, no more
    assert long_after[1] == 0.0


def test_where_the_buckets_hold_nothing_the_engine_s_flow_model_gives_the_same_times():
    rng = np.random.default_rng(20261127)
    for case in range(40):
        n, hosts = int(rng.integers(1, 14)), int(rng.integers(2, 5))
        messages = []
        for _ in range(n):
            src = int(rng.integers(hosts))
            dst = int((src + rng.integers(1, hosts)) % hosts)
            messages.append((int(rng.integers(0, 30_000_000)), src, dst, int(rng.integers(1, 300_000))))
        messages.sort(key=lambda m: m[0])
        # the oracle: one engine flow per message, each released after its connection's previous one is delivered
        flows, last = [], {}
        for i, (t, src, dst, size) in enumerate(messages):
            flows.append(Flow(src, dst, size, start_ns=t, after=last.get((src, dst))))
            last[(src, dst)] = i
        engine = [r.end_ns - f.start_ns for r, f in zip(run_flows(flows, network(R, 0, "flow")), flows)]
        assert transit(messages, bucket=1e-9) == pytest.approx(engine, abs=2.0), f"case {case}: {messages}"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="must be above 0"):
        transit([(0, 0, 1, 10)], bucket=0)
    with pytest.raises(ValueError, match="own sender"):
        transit([(0, 1, 1, 10)])
    with pytest.raises(ValueError, match="differ in length"):
        tbf_transit(np.zeros(2), np.zeros(1), np.ones(2), np.ones(2), R, B)
    assert tbf_transit(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), R, B).tolist() == []
