"""The run budget at packet level (issue 17): packet hops from the bytes the
lowering puts on the network. The byte counts are checked against the
engine's own (every algorithm, worker counts that are and are not powers of
two, PS with headers, split placement and pipelining), the hop count against
a hand computation, and the refusal against its limit."""

import math

import numpy as np
import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation import algorithms, budget
from ddlsim.simulation.lowering import resolve_trace_detail, training_document
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict


def _run(**kw):
    seen = []
    with budget.run_control(force=True, on_start=lambda sc, est: seen.append(est)):
        r = ddlsim.simulate(model="lenet5", iterations=2, network="analytic", **kw)
    return r, seen[0]


def _groups(r):
    return [g["bytes"] for g in r.engine_document["training"]["groups"]]


@pytest.mark.parametrize("algorithm", algorithms.names())
@pytest.mark.parametrize("workers", [2, 3, 5, 8])
def test_allreduce_bytes_are_the_engines(algorithm, workers):
    r, _ = _run(workers=workers, algorithm=algorithm)
    sent = int(np.sum(r.stats["bytes_sent"]))
    per_iteration = budget.network_bytes_per_iteration(r.scenario, _groups(r), r.stats["transfers"] // 2)
    assert per_iteration * 2 == sent


@pytest.mark.parametrize("strategy", [
    {"strategy": "ps", "servers": 2},
    {"strategy": "ps", "servers": 3, "placement": "split", "header_bytes": 100},
    {"strategy": "ps", "servers": 2, "chunk_bytes": 100_000, "header_bytes": 10},
    {"strategy": "ps", "servers": 2, "asynchronous": True, "header_bytes": 7},
])
def test_ps_bytes_are_the_engines(strategy):
    r, est = _run(workers=3, **strategy)
    sent = int(np.sum(r.stats["bytes_sent"]))
    assert est.transfers == r.stats["transfers"]
    assert budget.network_bytes_per_iteration(r.scenario, _groups(r), est.transfers // 2) * 2 == sent


def test_the_closed_forms_of_the_byte_counts():
    assert budget.allreduce_bytes("ring", 8, 100) == 1400
    assert budget.allreduce_bytes("recursive-doubling", 8, 100) == 2400  # 8 log2 8
    assert budget.allreduce_bytes("butterfly", 6, 10) == (4 * 2 + 2 * 2) * 10  # p = 4, two ranks fold in and out
    assert budget.allreduce_bytes("ring", 1, 100) == 0


def _estimate(data):
    sc = scenario_from_dict(data)
    model = build_model(sc.model, None)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    groups = [g["bytes"] for g in training["groups"]]
    return sc, groups, budget.estimate(sc, len(training["layers"]), groups, resolve_trace_detail(sc, groups))


def test_packet_hops_by_hand():
    # the chapter 5 base case: 8 workers, one switch, a 50-layer 100 MB model, ring; 3 iterations
    sc, groups, est = _estimate({"workers": 8, "iterations": 3, "network": {"fidelity": "packet"},
                                 "model": {"name": "synthetic", "synthetic": {"layers": 50, "model_size": "100MB"}}})
    assert sum(groups) == 100_000_000
    messages = est.transfers  # one message per ring step
    assert messages == 3 * 8 * 50 * 2 * 7
    segments = math.ceil(3 * 14 * 100_000_000 / 1460) + messages
    assert est.packet_hops == 2 * 2 * segments  # data and ACK, two links on a star
    assert est.engine_s == pytest.approx(est.events / budget.EVENTS_PER_S + est.packet_hops / budget.PACKET_HOPS_PER_S)
    assert "packet hops" in est.describe()
    # a leaf-spine path has four links; timestamps shrink the MSS
    _, _, leaf = _estimate({"workers": 8, "iterations": 3, "network": {"fidelity": "packet", "topology": "leaf-spine",
                                                                       "packet": {"tcp_timestamps": True}},
                            "model": {"name": "synthetic", "synthetic": {"layers": 50, "model_size": "100MB"}}})
    assert leaf.packet_hops == 2 * 4 * (math.ceil(3 * 14 * 100_000_000 / 1448) + messages)


def test_no_packet_hops_at_the_other_fidelities():
    for fidelity in ("analytic", "flow"):
        _, _, est = _estimate({"workers": 4, "network": {"fidelity": fidelity}, "model": {"name": "lenet5"}})
        assert est.packet_hops == 0 and "packet hops" not in est.describe()


def test_packet_memory_grows_with_the_queues_table_cap():
    base = {"workers": 4, "model": {"name": "lenet5"}}
    _, _, flow = _estimate({**base, "network": {"fidelity": "flow"}})
    _, _, plain = _estimate({**base, "network": {"fidelity": "packet"}})
    _, _, sampled = _estimate({**base, "network": {"fidelity": "packet", "packet": {"queue_sample": "1us",
                                                                                   "queue_sample_cap": 1000}}})
    assert plain.memory_bytes > flow.memory_bytes
    assert sampled.memory_bytes - plain.memory_bytes == 1000 * budget.QUEUE_ROW_BYTES


def test_the_packets_that_can_exist_are_bounded_by_the_buffers():
    # 2 workers on a star: 4 ports of 3 bands of 1000 packets (+ what the wires hold), far below 2 connections' windows
    sc, groups, est = _estimate({"workers": 2, "model": {"name": "lenet5"}, "network": {"fidelity": "packet"}})
    per_port = 3 * 1000 + int(10e9 * 10_000 / 8e9 / budget.MIN_PACKET_BYTES) + 1 + 1
    connections = 2
    packets = min(4 * per_port, connections * 2 * (-(-6291456 // 1460) + 1))
    _, _, flow = _estimate({"workers": 2, "model": {"name": "lenet5"}, "network": {"fidelity": "flow"}})
    assert est.memory_bytes - flow.memory_bytes == (connections * budget.CONNECTION_BYTES + 4 * 3 * budget.PORT_BAND_BYTES
                                                    + packets * budget.PACKET_BYTES)


def test_a_run_over_the_packet_hop_limit_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.setattr(budget, "MAX_PACKET_HOPS", 1000)
    with pytest.raises(ScenarioError) as info:
        ddlsim.simulate(model="lenet5", workers=2, iterations=1, network="packet")
    message = str(info.value)
    assert "the limit of 1,000 packet hops" in message and "--network flow" in message and "--force" in message
    assert len(message.splitlines()) == 1
