"""PS in-network mechanisms through the Python API and CLI: multicast of the
parameters, aggregation of the gradients in the switch, both ("multiagg")."""

import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.analyze import iteration_table
from ddlsim.cli.app import app
from test_trace_contract import engine_log

# 312_500 fp32 parameters = 1_250_000 B: exactly 1 ms at 10 Gbit/s.
PARAMS, TX_NS = 312_500, 1_000_000


def one_tensor(in_network, workers=8, fidelity="flow", latency="5us", **kw):
    return ddlsim.simulate(
        {
            "model": {"name": "one-tensor", "layers": [{"name": "l0", "params": PARAMS, "fwd_ms": 0, "bwd_ms": 0}]},
            "iterations": 1,
            "workers": workers,
            "strategy": {"kind": "ps", "in_network": in_network, "update_bandwidth": "100000GB/s", **kw},
            "network": {"fidelity": fidelity, "bandwidth": "10Gbps", "latency": latency},
        }
    )


def rows(ev, op, kind):
    return ev[(ev["op"] == op) & (ev["kind"] == kind)]


@pytest.mark.parametrize("fidelity", ["flow", "analytic"])
@pytest.mark.parametrize("n", [2, 8, 16])
def test_multicast_pull_is_one_transmission_plus_latency(fidelity, n):
    ev = one_tensor("multicast", workers=n, fidelity=fidelity).events.to_pandas()
    send, recvs = rows(ev, "param_multicast", "send"), rows(ev, "param_multicast", "recv")
    assert len(send) == 1 and len(recvs) == n
    assert sorted(recvs["rank"]) == list(range(n)) and (recvs["message"] == send["message"].iloc[0]).all()
    assert (recvs["end_ns"] - send["start_ns"].iloc[0] == TX_NS + 5_000).all()  # M/B + latency, not N*M/B
    assert send["end_ns"].iloc[0] - send["start_ns"].iloc[0] == TX_NS


@pytest.mark.parametrize("fidelity", ["flow", "analytic"])
@pytest.mark.parametrize("n", [2, 8, 16])
def test_aggregated_push_is_one_transmission_plus_latency(fidelity, n):
    ev = one_tensor("aggregation", workers=n, fidelity=fidelity).events.to_pandas()
    sends, recv = rows(ev, "push_request", "send"), rows(ev, "push_request", "recv")
    assert len(sends) == n and len(recv) == 1 and recv["rank"].iloc[0] == n
    assert (sends["message"] == recv["message"].iloc[0]).all()
    assert recv["end_ns"].iloc[0] == TX_NS + 5_000  # M/B + latency at the server, not N*M/B
    assert rows(ev, "update", "compute")["start_ns"].iloc[0] == TX_NS + 5_000


def test_multiagg_iteration_is_two_transmissions_and_two_latencies():
    ev = one_tensor("multiagg", workers=8).events.to_pandas()
    update = rows(ev, "update", "compute").iloc[0]
    assert update["start_ns"] == TX_NS + 5_000
    assert ev["end_ns"].max() == 2 * (TX_NS + 5_000) + (update["end_ns"] - update["start_ns"])


@pytest.mark.parametrize("mode", ["multicast", "aggregation", "multiagg"])
def test_bytes_are_conserved_counting_copies_and_contributions(mode):
    ev = ddlsim.simulate(model="resnet50", workers=4, iterations=2, strategy="ps", servers=2, in_network=mode, jitter=0.1).events.to_pandas()
    sends, recvs = ev[ev["kind"] == "send"], ev[ev["kind"] == "recv"]
    s_count, r_count = sends.groupby("message").size(), recvs.groupby("message").size()
    assert set(s_count.index) == set(r_count.index)
    r_count = r_count.loc[s_count.index]
    assert ((s_count == 1) | (r_count == 1)).all()
    size = sends.groupby("message")["bytes"].first()
    assert (sends.groupby("message")["bytes"].nunique() == 1).all() and (recvs.groupby("message")["bytes"].nunique() == 1).all()
    assert (recvs.groupby("message")["bytes"].first().loc[size.index] == size).all()
    delivered = (np.maximum(s_count, r_count) * size).sum()
    sent = (s_count * size).sum()
    copies = ((r_count - 1) * size)[s_count == 1].sum()
    assert sent + copies == delivered
    if mode != "aggregation":
        assert (s_count == 1).sum() and (r_count[s_count == 1] == 4).any(), "multicasts reach every worker"
    if mode != "multicast":
        assert (s_count == 4).any(), "aggregates join every worker's contribution"


@pytest.mark.parametrize("mode", ["multicast", "aggregation", "multiagg"])
def test_engine_logs_with_in_network_mechanisms_are_valid_v2_logs(mode):
    log = engine_log(model="resnet50", workers=4, iterations=2, strategy="ps", servers=2, in_network=mode, jitter=0.2, seed=5)
    assert len(iteration_table(log)) == 2


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_in_network_is_never_slower_than_plain_ps(seed):
    rnd = random.Random(seed)
    base = dict(
        model=rnd.choice(["resnet50", "vgg16", "alexnet"]),
        workers=rnd.randint(2, 10),
        servers=rnd.randint(1, 3),
        iterations=2,
        strategy="ps",
        seed=seed,
        jitter=rnd.choice([0.0, 0.1]),
        bandwidth=rnd.choice(["1Gbps", "10Gbps", "25Gbps"]),
        latency=rnd.choice(["1us", "10us", "50us"]),
        topology=rnd.choice(["star", "leaf-spine"]),
    )
    t = {m: ddlsim.simulate(**base, in_network=m).summary()["iteration_time_s"] for m in ["none", "multicast", "aggregation", "multiagg"]}
    assert t["multicast"] <= t["none"] and t["aggregation"] <= t["none"], (base, t)
    assert t["multiagg"] <= min(t["multicast"], t["aggregation"]), (base, t)


def test_a_tensor_beyond_the_switch_memory_is_aggregated_at_the_server():
    model = {
        "name": "three",
        "layers": [
            {"name": "a", "params": 250_000, "fwd_ms": 0, "bwd_ms": 1},  # 1 MB
            {"name": "b", "params": 750_000, "fwd_ms": 0, "bwd_ms": 1},  # 3 MB
            {"name": "c", "params": 125_000, "fwd_ms": 0, "bwd_ms": 1},  # 0.5 MB
        ],
    }
    r = ddlsim.simulate({"model": model, "iterations": 1, "workers": 4,
                         "strategy": {"kind": "ps", "in_network": "aggregation", "switch_memory": "1.5MB"}})
    ev = r.events.to_pandas()
    recvs = rows(ev, "push_request", "recv").groupby("layer").size().to_dict()
    # Tensor order a, b, c: a fits (1 MB), b (3 MB) does not and goes to the server, c fits the 0.5 MB left.
    assert recvs == {0: 1, 1: 4, 2: 1}


def test_cli_flags_reach_the_scenario():
    res = CliRunner().invoke(app, ["simulate", "--strategy", "ps", "--in-network", "multiagg", "--switch-memory", "10MB",
                                   "--workers", "4", "--iterations", "1", "--json"])
    assert res.exit_code == 0, res.output
    multiagg = json.loads(res.output)["iteration_time_s"]
    assert json.loads(res.output)["in_network"] == "multiagg"
    res = CliRunner().invoke(app, ["simulate", "--strategy", "ps", "--workers", "4", "--iterations", "1", "--json"])
    assert multiagg < json.loads(res.output)["iteration_time_s"]
    assert json.loads(res.output)["in_network"] == "none"


def test_unknown_in_network_mode_is_an_error_naming_the_choices():
    with pytest.raises(Exception, match="multiagg"):
        ddlsim.simulate(strategy="ps", in_network="broadcast")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_with_multicast_all_gather_saves_n_minus_2_latencies(n):
    # M/N = 2500 B: 2000 ns per chunk at 10 Gbit/s; latency 7 us.
    m_bytes = n * 2500
    model = {"name": "one-tensor", "layers": [{"name": "l0", "params": m_bytes // 4, "fwd_ms": 0, "bwd_ms": 0}]}
    net = {"bandwidth": "10Gbps", "latency": "7us"}
    plain = ddlsim.simulate({"model": model, "iterations": 1, "workers": n, "strategy": {"kind": "ring"}, "network": net})
    mc = ddlsim.simulate({"model": model, "iterations": 1, "workers": n, "strategy": {"kind": "ring", "in_network": "multicast"}, "network": net})
    ev = mc.events.to_pandas()
    assert plain.events.to_pandas()["end_ns"].max() == 2 * (n - 1) * (2000 + 7000)
    assert ev["end_ns"].max() == (n - 1) * (2000 + 7000) + (n - 1) * 2000 + 7000
    assert len(rows(ev, "ring_multicast", "send")) == n and len(rows(ev, "ring_multicast", "recv")) == n * (n - 1)


def test_ring_multicast_logs_are_valid_and_need_the_ring():
    log = engine_log(model="resnet50", workers=4, iterations=2, strategy="ring", in_network="multicast", jitter=0.1, seed=2)
    assert len(iteration_table(log)) == 2
    with pytest.raises(Exception, match="algorithm"):
        ddlsim.simulate(strategy="ring", algorithm="halving-doubling", in_network="multicast")
    with pytest.raises(Exception, match="aggregation|multicast"):
        ddlsim.simulate(strategy="ring", in_network="aggregation")


def test_recorded_flows_are_one_per_tree_and_end_with_its_copies(tmp_path):
    import pyarrow.parquet as pq

    r = ddlsim.simulate(model="lenet5", workers=4, iterations=1, strategy="ps", in_network="multiagg", record_flows=True)
    r.save(tmp_path / "o", timeline=False)
    flows = pq.read_table(tmp_path / "o" / "flows.parquet").to_pandas()
    log = r.events.to_pandas()
    assert len(flows) == r.stats["transfers"] == log[log["kind"] == "send"]["message"].nunique()
    recv_end = log[log["kind"] == "recv"].groupby("message")["end_ns"].agg(["min", "max"])
    merged = flows.set_index("message").join(recv_end)
    # On a star every copy of a multicast lands at once: the flow ends with each of them.
    assert (merged["end_ns"] == merged["min"]).all() and (merged["end_ns"] == merged["max"]).all()


@pytest.mark.parametrize("variant", [dict(placement="split"), dict(distribution="block"), dict(asynchronous=True),
                                     dict(chunk_bytes=1 << 20)])
def test_in_network_with_a_ps_variant_it_does_not_model_is_refused_naming_both(variant):
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError) as exc:
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", in_network="multicast", **variant)
    assert "strategy.in_network" in str(exc.value) and f"strategy.{next(iter(variant))}" in str(exc.value)
