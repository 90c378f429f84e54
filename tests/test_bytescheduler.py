"""ByteScheduler's schedule (partition_bytes, credit_bytes): timings derived
on paper for two workers on an idle flow-level star at 1 byte/ns and 1 us
latency, the partition count in the log, and the scenario checks."""

from __future__ import annotations

import json

import forked_cli
import pytest

import ddlsim
from ddlsim.simulation.scenario import Scenario

MS = 1_000_000


def two_layers(credit: str | int, partition: str | int = 100_000, policy: str = "priority") -> dict[str, list[tuple[int, int]]]:
    """Layer 1 (400 kB, backward 1 ms) is ready first; layer 0 (1 kB) 20 us later.
    Returns, per tensor, the (start, end) of each of its all-reduces on rank 0, from 1 ms."""
    scenario = {
        "model": {"name": "two", "layers": [{"name": "l0", "params": 250, "fwd_ms": 0, "bwd_ms": 0.02},
                                            {"name": "l1", "params": 100_000, "fwd_ms": 0, "bwd_ms": 1.0}]},
        "iterations": 1, "workers": 2, "trace_detail": "collective",
        "strategy": {"kind": "ring", "stream_policy": policy, "partition_bytes": partition, "credit_bytes": credit},
        "network": {"fidelity": "flow", "bandwidth": "8Gbps", "latency": "1us"},
    }
    ev = ddlsim.simulate(scenario).events.to_pandas()
    rows = ev[(ev.kind == "collective") & (ev["rank"] == 0)].sort_values(["start_ns", "collective"])
    return {f"l{layer}": [(int(s) - MS, int(e) - MS) for s, e in zip(g.start_ns, g.end_ns)] for layer, g in rows.groupby("layer")}


def test_one_partition_at_a_time_lets_the_urgent_gradient_in_after_the_running_partition():
    # A 100 kB partition on 2 ranks: 2 ring steps of 1 us + 50 kB at 1 B/ns = 102 us.
    got = two_layers(credit=0)
    assert got["l1"] == [(0, 102_000), (105_000, 207_000), (207_000, 309_000), (309_000, 411_000)]
    # l0 (1 kB: 2 steps of 1 us + 500 ns) goes right after the first partition, before the other three.
    assert got["l0"] == [(102_000, 105_000)]


def test_a_credit_of_two_partitions_runs_them_side_by_side_and_makes_the_urgent_one_wait():
    # Credit 200 kB: partitions 1 and 2 start together and share each link,
    # 2 steps of 1 us + 100 kB = 202 us. l0 (ready at 20 us) finds 200 kB
    # running, not below the credit, and waits; at 202 us l0, partition 3 and
    # partition 4 start (running bytes stay below 200 kB until the third).
    # l0's 500 B steps share the link three ways (1/3 B/ns): 2 x (1.5 us + 1 us).
    # Partitions 3 and 4 send 100 kB + l0's 1 kB through the link in their
    # first step (102 us) and 100 kB in their second (101 us).
    got = two_layers(credit=200_000)
    assert got["l1"] == [(0, 202_000), (0, 202_000), (202_000, 405_000), (202_000, 405_000)]
    assert got["l0"] == [(202_000, 207_000)]


def test_the_credit_is_bytes_in_flight_not_a_count():
    # 200,001 B: after two partitions 200 kB run, below the credit, so a third
    # starts too; the three share each link: 2 steps of 1 us + 150 kB.
    got = two_layers(credit=200_001)
    assert got["l1"][:3] == [(0, 302_000)] * 3
    assert got["l1"][3][0] == got["l0"][0][0] == 302_000


def test_fifo_with_a_credit_keeps_the_ready_order():
    got = two_layers(credit=0, policy="fifo")
    assert got["l0"][0][0] == 4 * 102_000  # behind all of layer 1's partitions


def test_every_group_is_cut_into_ceil_bytes_over_partition_all_reduces():
    r = ddlsim.simulate(model="resnet50", workers=2, iterations=1, partition_bytes="1MB", trace_detail="collective")
    ev = r.events.to_pandas()
    colls = ev[(ev.kind == "collective") & (ev["rank"] == 0)]
    sizes = [t.bytes for t in r.model.tensors]
    assert len(colls) == sum(max(1, -(-b // 1_000_000)) for b in sizes)
    assert colls.bytes.max() <= 1_000_000 and int(colls.bytes.sum()) == sum(sizes)


@pytest.mark.parametrize("strategy, network, fix", [
    ({"credit_bytes": "16MB", "stream_policy": "priority", "preemption": "chunk"}, {}, 'preemption = "none"'),
    ({"credit_bytes": "16MB"}, {"fidelity": "analytic", "collective_model": "closed-form"}, 'collective_model = "steps"'),
    ({"partition_bytes": "4MB", "in_network": "multicast"}, {}, "remove one of strategy.partition_bytes"),
    ({"credit_bytes": "16 Mb"}, {}, "sizes are bytes"),
])
def test_impossible_bytescheduler_settings_name_the_fix(strategy, network, fix):
    with pytest.raises(ValueError) as e:
        Scenario.model_validate({"strategy": {"kind": "ring", **strategy}, "network": network})
    assert fix in str(e.value)


def test_the_cli_flags_reach_the_engine():
    run = forked_cli.run(["simulate", "--model", "resnet50", "--workers", "4", "--iterations", "2", "--stream-policy", "priority", "--partition", "4MB", "--credit", "16MB", "--no-barrier", "--json"], timeout=120)
    assert run.returncode == 0, run.stderr
    strategy = json.loads(run.stdout)["scenario"]["strategy"]
    assert (strategy["partition_bytes"], strategy["credit_bytes"], strategy["stream_policy"]) == ("4MB", "16MB", "priority")


def test_the_plan_sweeps_the_credit_and_its_json_reproduces_the_best():
    from ddlsim.plan.planner import make_plan

    plan = make_plan(model="resnet50", workers=4, barrier=False, iterations=2, bucket_caps_mb=[25], slice_bytes=[],
                     credit_bytes=[2_000_000, 16_000_000], partition_bytes=2_000_000, threads=1)
    data = plan.to_dict()["bytescheduler"]
    assert [row["credit_bytes"] for row in data["sweep"]] == [2_000_000, 16_000_000]
    assert data["iteration_time_s"] == min(row["iteration_time_s"] for row in data["sweep"])
    assert (data["partition_bytes"], data["strategy"]["stream_policy"]) == (2_000_000, "priority")
    again = ddlsim.simulate(plan.to_dict()["scenario"], grouping=data["grouping"], **data["strategy"])
    assert again.iteration_time_s == data["iteration_time_s"]
    # one all-reduce at a time is not what the sweep reports
    serial = ddlsim.simulate(plan.to_dict()["scenario"], grouping=data["grouping"], **{**data["strategy"], "credit_bytes": 0})
    assert serial.iteration_time_s != data["iteration_time_s"]


def test_the_plan_skips_the_credit_sweep_under_the_closed_form_model():
    from ddlsim.plan.planner import make_plan

    plan = make_plan(model="resnet50", workers=4, network="analytic", collective_model="closed-form", bucket_caps_mb=[25],
                     slice_bytes=[], threads=1)
    assert plan.best_bytescheduler is None and any("ByteScheduler" in note for note in plan.notes)
