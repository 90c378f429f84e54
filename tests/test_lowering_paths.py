"""One lowering path: a training description run in one call
(`simulate_training_json`) and the same description lowered to graph
columns and run from them (`lower_training_json` + `run_graph_columns`)
give byte-identical event logs, flows and counters, for every strategy:
each all-reduce algorithm, the multicast all-gather, ByteScheduler,
preemption at steps and at messages, closed-form collectives, and every
parameter-server variant and in-network mode, at both fidelities."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ddlsim import _core
from ddlsim.simulation.lowering import engine_json, network_document, training_document
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict

ALGORITHMS = ["ring", "halving-doubling", "recursive-doubling", "binary-tree", "double-binary-tree", "direct", "butterfly",
              "hierarchical-ring"]
MODEL = {"name": "five", "layers": [{"name": f"l{i}", "params": p, "fwd_ms": 0.05, "bwd_ms": 0.1}
                                    for i, p in enumerate([3000, 250_000, 40_000, 600_000, 9000])]}


def strategies():
    for alg in ALGORITHMS:
        yield alg, {"kind": "ring", "algorithm": alg}, {}
    yield "ring-chunks-priority-preempt-steps", {"kind": "ring", "stream_policy": "priority", "preemption": "chunk", "chunk_bytes": 200_000}, {}
    yield "ring-chunks-priority-preempt-messages", {"kind": "ring", "stream_policy": "priority", "preemption": "message", "chunk_bytes": 200_000}, {}
    yield "ring-priority", {"kind": "ring", "stream_policy": "priority"}, {}
    yield "ring-gamma", {"kind": "ring", "gamma_ns_per_byte": 0.5}, {}
    yield "bytescheduler", {"kind": "ring", "stream_policy": "priority", "partition_bytes": 100_000, "credit_bytes": 300_000}, {}
    yield "bytescheduler-fifo", {"kind": "ring", "partition_bytes": 100_000, "credit_bytes": 250_000}, {}
    yield "ring-multicast-all-gather", {"kind": "ring", "in_network": "multicast"}, {}
    for alg in ALGORITHMS:
        yield f"closed-form-{alg}", {"kind": "ring", "algorithm": alg}, {"fidelity": "analytic", "collective_model": "closed-form"}
    for name, ps in [("ps", {}), ("ps-split", {"servers": 2, "placement": "split"}), ("ps-chunks", {"chunk_bytes": 100_000}),
                     ("ps-round-robin", {"distribution": "round-robin"}), ("ps-block", {"distribution": "block", "servers": 2}),
                     ("ps-async", {"asynchronous": True}), ("ps-stale", {"asynchronous": True, "staleness": 1}),
                     ("ps-multicast", {"in_network": "multicast"}), ("ps-aggregation", {"in_network": "aggregation"}),
                     ("ps-multiagg", {"in_network": "multiagg", "servers": 2}),
                     ("ps-switch-memory", {"in_network": "aggregation", "switch_memory": "1MB"}),
                     ("ps-priority-preempt", {"stream_policy": "priority", "preemption": "chunk", "servers": 2}),
                     ("ps-client-wakeup", {"client_cost": {"issue": "20us", "receive": "5us", "wakeup": "30us"}})]:
        yield name, {"kind": "ps", **ps}, {}


CASES = [(f"{name}-{fid}", strategy, {"fidelity": fid, **net}) for name, strategy, net in strategies()
         for fid in (["analytic"] if net else ["flow", "analytic"])]


def engine_documents(strategy: dict, network: dict) -> tuple[str, str, str]:
    sc = scenario_from_dict({"model": MODEL, "iterations": 2, "workers": 4, "seed": 3, "trace_detail": "step",
                             "strategy": strategy, "network": {"bandwidth": "10Gbps", "latency": "2us", "record_flows": True,
                                                               **network}})
    if sc.network.collective_model == "closed-form":
        sc = sc.model_copy(update={"trace_detail": "collective"})
    model = build_model(sc.model, sc.base_dir)
    training = training_document(sc, model, layer_times_ns(model, sc.model))
    training.pop("rank_classes", None)  # graph columns hold every worker (tests/test_rank_classes.py: the classes)
    return engine_json(training), engine_json(network_document(sc)), sc.trace_detail


def comparable(out: dict) -> dict:
    got = {f"columns.{k}": np.frombuffer(raw, dtype=np.dtype(dtype)).tolist() for k, (dtype, raw) in out["columns"].items()}
    got.update({f"flows.{k}": np.frombuffer(raw, dtype=np.dtype(dtype)).tolist() for k, (dtype, raw) in out["flows"].items()})
    for k in ("op_names", "stream_names", "events", "transfers", "recomputations", "makespan_ns", "bytes_sent", "bytes_received"):
        got[k] = out[k]
    return got


@pytest.mark.parametrize("name, strategy, network", CASES, ids=[c[0] for c in CASES])
def test_one_call_and_the_graph_columns_give_the_same_log(name, strategy, network):
    training, net, detail = engine_documents(strategy, network)
    direct = comparable(_core.simulate_training_json(training, net, detail))
    columns = _core.lower_training_json(training, net)
    via_columns = comparable(_core.run_graph_columns(columns, net, detail))
    differing = [k for k in direct if direct[k] != via_columns.get(k)]
    assert not differing, f"{name}: the two paths differ in {differing[:6]}"
    assert direct["events"] > 0 and len(direct["columns.id"]) > 0


def test_the_matrix_covers_fans_closed_form_and_message_preemption():
    # The features a lossy round trip dropped are in the matrix: fans, the closed-form cost, preempt_at_messages.
    names = [c[0] for c in CASES]
    for needed in ("ps-multiagg", "ring-multicast-all-gather", "closed-form-ring", "preempt-messages"):
        assert any(needed in n for n in names), needed
    training, net, _ = engine_documents({"kind": "ps", "in_network": "multiagg"}, {"fidelity": "flow"})
    columns = _core.lower_training_json(training, net)
    kinds = np.frombuffer(columns["fan_kind"][1], dtype=columns["fan_kind"][0])
    assert set(kinds.tolist()) == {0, 1}, "a multiagg graph has multicast and aggregation fans"
    training, net, _ = engine_documents({"kind": "ring"}, {"fidelity": "analytic", "collective_model": "closed-form"})
    latency_ns, bandwidth_bps, _intra = _core.lower_training_json(training, net)["closed_form"]
    assert (latency_ns, bandwidth_bps) == (2000, 10e9)
    assert _core.lower_training_json(engine_documents({"kind": "ring"}, {"fidelity": "flow"})[0])["closed_form"] is None


def test_a_closed_form_description_needs_the_network_to_lower():
    training, _, _ = engine_documents({"kind": "ring"}, {"fidelity": "analytic", "collective_model": "closed-form"})
    with pytest.raises(ValueError, match="network"):
        _core.lower_training_json(training)


def test_old_graph_columns_without_the_new_tables_still_run():
    training, net, detail = engine_documents({"kind": "ring"}, {"fidelity": "flow"})
    columns = _core.lower_training_json(training, net)
    for key in ("fan_kind", "fan_offsets", "fan_ops", "closed_form", "preempt_at_messages", "release_ops", "release_ns", "wakeup_ops", "wakeup_ns",
                "continuation_ops"):
        columns.pop(key)
    assert comparable(_core.run_graph_columns(columns, net, detail)) == comparable(_core.simulate_training_json(training, net, detail))


def test_release_times_travel_in_the_columns():
    import numpy as np

    training, net, detail = engine_documents({"kind": "ring"}, {"fidelity": "flow"})
    columns = _core.lower_training_json(training, net)
    base = comparable(_core.run_graph_columns(columns, net, detail))
    # Hold op 0 (the first forward on rank 0) back 1 ms: everything after it on rank 0 moves.
    columns["release_ops"] = ("<u4", np.asarray([0], dtype="<u4").tobytes())
    columns["release_ns"] = ("<u8", np.asarray([1_000_000], dtype="<u8").tobytes())
    held = comparable(_core.run_graph_columns(columns, net, detail))
    row = held["columns.id"].index(0)
    assert held["columns.ready_ns"][row] == held["columns.start_ns"][row] == 1_000_000
    assert held["makespan_ns"] > base["makespan_ns"]


def test_json_documents_are_what_the_engine_reads():
    training, net, _ = engine_documents({"kind": "ps", "in_network": "aggregation"}, {"fidelity": "flow"})
    assert json.loads(training)["in_network"]["mode"] == "aggregation"
    assert json.loads(net)["record_flows"] is True


def test_the_graph_columns_carry_the_workers_wake_ups():
    # a PS graph with a wake-up lists each response's handle row in wakeup_ops; run without them, the log changes
    training, net, detail = engine_documents({"kind": "ps", "client_cost": {"receive": "5us", "wakeup": "30us"}}, {"fidelity": "flow"})
    columns = _core.lower_training_json(training, net)
    ops = np.frombuffer(columns["wakeup_ops"][1], dtype=columns["wakeup_ops"][0])
    ns = np.frombuffer(columns["wakeup_ns"][1], dtype=columns["wakeup_ns"][0])
    names = np.asarray(columns["op_names"])[np.frombuffer(columns["name"][1], dtype=columns["name"][0])]
    assert len(ops) > 0 and set(ns.tolist()) == {30_000} and set(names[ops].tolist()) == {"handle"}
    woken = comparable(_core.run_graph_columns(columns, net, detail))
    for key in ("wakeup_ops", "wakeup_ns"):
        columns.pop(key)
    assert comparable(_core.run_graph_columns(columns, net, detail))["makespan_ns"] < woken["makespan_ns"]


def test_the_graph_columns_carry_the_servers_continuations():
    # a serial update (the server's one thread) is a continuation: continuation_ops lists exactly the update ops;
    # the columns run as the one call does, and without the continuations each update queues behind the requests
    # that arrived before its last push was served, so the log changes
    strategy = {"kind": "ps", "server_cost": {"a": "200us", "update": "300us", "update_ns_per_byte": 0.5}}  # a busy thread
    training, net, detail = engine_documents(strategy, {"fidelity": "flow"})
    columns = _core.lower_training_json(training, net)
    ops = np.frombuffer(columns["continuation_ops"][1], dtype=columns["continuation_ops"][0])
    names = np.asarray(columns["op_names"])[np.frombuffer(columns["name"][1], dtype=columns["name"][0])]
    assert len(ops) > 0 and set(names[ops].tolist()) == {"update"} and len(ops) == int((names == "update").sum())
    direct = comparable(_core.simulate_training_json(training, net, detail))
    assert comparable(_core.run_graph_columns(columns, net, detail)) == direct
    columns.pop("continuation_ops")
    assert comparable(_core.run_graph_columns(columns, net, detail)) != direct
    # no serial update: no continuation
    plain = _core.lower_training_json(engine_documents({"kind": "ps", "server_cost": {"a": "20us"}}, {"fidelity": "flow"})[0], net)
    assert len(np.frombuffer(plain["continuation_ops"][1], dtype=plain["continuation_ops"][0])) == 0
