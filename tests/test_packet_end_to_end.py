"""Packet fidelity end to end, on the engine's packet model (issue 17):
`--network packet` on simulate, replay and plan, the outputs a user gets,
the docs' example."""

import json
import re
import shlex
from pathlib import Path

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim import _core
from ddlsim.simulation import budget
from ddlsim.simulation.lowering import engine_json, network_document, training_document
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.trace import read_event_log

ROOT = Path(__file__).resolve().parent.parent


def ddlsim_cli(*args, cwd=None):
    return forked_cli.run([*args], cwd=cwd, timeout=600)


def _simulate(**kw):
    seen = []
    with budget.run_control(on_start=lambda sc, est: seen.append(est)):
        r = ddlsim.simulate(**{"model": "lenet5", "workers": 4, "iterations": 2, "network": "packet", **kw})
    return r, seen[0]


def test_a_ring_at_packet_level_gives_every_output():
    r, est = _simulate(record_flows=True, queue_sample="10us")
    packet = r.summary()["packet"]
    counters, ports = packet["counters"], packet["ports"]
    assert counters["packets_forwarded"] > 0 and counters["queues_truncated"] is False
    assert len(ports) == 2 * 4 and all("->" in p["name"] for p in ports)  # a star: each host's NIC and its switch port
    assert sum(p["packets"] for p in ports) == counters["packets_forwarded"]
    assert sum(p["drops"] for p in ports) == counters["drops"]
    assert sum(p["ecn_marks"] for p in ports) == counters["ecn_marks"] == 0  # NewReno packets are not ECN-capable
    flows = r.events.flows
    assert flows.num_rows > 0
    assert int(np.sum(flows.column("bytes").to_numpy())) == int(np.sum(r.stats["bytes_sent"]))
    assert int(np.sum(flows.column("drops").to_numpy())) <= counters["drops"]  # the network count includes ACKs
    assert int(np.sum(flows.column("retransmits").to_numpy())) == counters["retransmits"]
    queues = r.events.queues
    assert queues is not None and queues.num_rows > 0
    nodes = set(queues.column("node").to_pylist())
    assert nodes <= {0, 1, 2, 3, 4}  # the ranks' NICs and the switch (node = ranks + switch id)
    assert set(queues.column("band").to_pylist()) <= {0, 1, 2}
    if counters["retransmits"] == 0:
        assert est.packet_hops >= counters["packets_forwarded"]  # the budget's estimate bounds the real count


def test_packet_level_is_slower_than_flow_level_on_the_same_scenario():
    # headers, framing and ACKs on the wire, slow start: never faster than the fluid model
    packet, _ = _simulate()
    flow = ddlsim.simulate(model="lenet5", workers=4, iterations=2, network="flow")
    analytic = ddlsim.simulate(model="lenet5", workers=4, iterations=2, network="analytic")
    assert packet.iteration_time_s >= flow.iteration_time_s >= analytic.iteration_time_s * (1 - 1e-9)


def test_the_same_seed_gives_the_same_run():
    a, _ = _simulate(record_flows=True, queue_sample="10us", jitter=0.05, seed=3)
    b, _ = _simulate(record_flows=True, queue_sample="10us", jitter=0.05, seed=3)
    assert a.events.table.equals(b.events.table)
    assert a.events.flows.equals(b.events.flows) and a.events.queues.equals(b.events.queues)
    assert a.summary()["packet"] == b.summary()["packet"]


def test_dctcp_marks_and_newreno_does_not():
    common = dict(strategy="ps", servers=1, workers=8, queue_limit=100, queue_sample="10us")
    dctcp, _ = _simulate(transport="dctcp", ecn_threshold=5, **common)
    newreno, _ = _simulate(transport="newreno", **common)
    assert dctcp.summary()["packet"]["counters"]["ecn_marks"] > 0  # an 8-to-1 incast crosses K = 5
    assert newreno.summary()["packet"]["counters"]["ecn_marks"] == 0


@pytest.mark.parametrize("strategy", [{"strategy": "ps", "servers": 2, "placement": "split"},
                                      {"algorithm": "halving-doubling"}, {"algorithm": "double-binary-tree"},
                                      {"stream_policy": "priority", "preemption": "chunk", "priority_bands": True},
                                      {"strategy": "ps", "servers": 2, "stream_policy": "priority", "priority_bands": True},
                                      {"topology": "leaf-spine", "hosts_per_leaf": 2, "spines": 2}])
def test_other_strategies_run_at_packet_level(strategy):
    r, _ = _simulate(**strategy)
    assert r.iteration_time_s > 0 and r.summary()["packet"]["counters"]["packets_forwarded"] > 0


def test_the_cli_writes_the_packet_outputs(tmp_path):
    out = tmp_path / "run"
    p = ddlsim_cli("simulate", "--model", "lenet5", "--workers", "4", "--iterations", "1", "--network", "packet",
                   "--record-flows", "--queue-sample", "10us", "--rto-min", "10ms", "--bands", "2", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "ports (packet level)" in p.stdout and "packets forwarded" in p.stdout
    names = {f.name for f in out.iterdir()}
    assert {"events.parquet", "flows.parquet", "queues.parquet", "trace.json", "summary.json"} <= names
    log = read_event_log(out / "events.parquet")
    assert log.metadata["network_stats"]["counters"]["packets_forwarded"] > 0
    trace = json.loads((out / "trace.json").read_text())
    assert any(e["ph"] == "C" and e["name"].startswith("queue ") for e in trace["traceEvents"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fidelity"] == "packet" and summary["scenario"]["network"]["packet"]["bands"] == 2


def test_replay_and_plan_at_packet_level(tmp_path):
    p = ddlsim_cli("simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--network", "analytic",
                   "--out", str(tmp_path / "run"))
    assert p.returncode == 0, p.stderr
    p = ddlsim_cli("replay", str(tmp_path / "run" / "events.parquet"), "--network", "packet", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["packet"]["counters"]["packets_forwarded"] > 0
    p = ddlsim_cli("plan", "--model", "lenet5", "--workers", "2", "--network", "packet", "--bucket-caps", "25",
                   "--slice-sizes", "none", "--credits", "none", "--json")
    assert p.returncode == 0, p.stderr


def test_the_docs_example_runs(tmp_path):
    text = (ROOT / "docs" / "packet-model.md").read_text(encoding="utf-8")
    section = text.split("## Running at packet level", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) >= 2
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "ddlsim"
        p = ddlsim_cli(*argv[1:], cwd=tmp_path)
        assert p.returncode == 0, (command, p.stderr[-2000:])


def test_transfers_within_a_host_are_timed_as_at_analytic_fidelity():
    # Both workers on one host: every transfer uses the intra-host ports only,
    # which the packet model times as FIFO servers, exactly as the analytic model.
    kw = {"model": "lenet5", "workers": 2, "iterations": 2, "ranks_per_host": 2}
    packet = ddlsim.simulate(**kw, network="packet")
    analytic = ddlsim.simulate(**kw, network="analytic")
    assert packet.events.table.column("end_ns").to_pylist() == analytic.events.table.column("end_ns").to_pylist()
    assert packet.summary()["packet"]["counters"]["packets_forwarded"] == 0


@pytest.mark.parametrize("kw", [{"ranks_per_host": 2, "algorithm": "hierarchical-ring"},
                                {"strategy": "ps", "servers": 2, "server_hosts": "colocated"}])
def test_strategies_with_ranks_sharing_a_host_run_at_packet_level(kw):
    packet, _ = _simulate(**kw)
    flow = ddlsim.simulate(**{"model": "lenet5", "workers": 4, "iterations": 2, "network": "flow", **kw})
    assert packet.summary()["packet"]["counters"]["packets_forwarded"] > 0
    assert packet.iteration_time_s >= flow.iteration_time_s * 0.99
