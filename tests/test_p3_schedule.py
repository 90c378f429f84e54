"""P3-style scheduling: tensors sliced into chunk_bytes messages, the lowest
layer first, a running all-reduce preempted only between slices
(preemption = "message"). Expected times derived on paper for an idle
analytic star at 1 byte/ns and 1 us latency."""

from __future__ import annotations

import pytest

import ddlsim
from ddlsim.plan.planner import make_plan

MS = 1_000_000


def two_layers(workers: int, preemption: str, chunk_bytes: int = 100_000) -> dict[str, tuple[int, int]]:
    """Layer 1 (400 kB, backward 1 ms) is all-reduced first; layer 0 (1 kB) is ready 20 us later."""
    scenario = {
        "model": {"name": "two", "layers": [{"name": "l0", "params": 250, "fwd_ms": 0, "bwd_ms": 0.02},
                                            {"name": "l1", "params": 100_000, "fwd_ms": 0, "bwd_ms": 1.0}]},
        "iterations": 1, "workers": workers, "trace_detail": "step",
        "strategy": {"kind": "ring", "chunk_bytes": chunk_bytes, "stream_policy": "priority", "preemption": preemption},
        "network": {"fidelity": "analytic", "bandwidth": "8Gbps", "latency": "1us"},
    }
    ev = ddlsim.simulate(scenario).events.to_pandas()
    rows = ev[ev.kind == "collective"]
    return {name: (int(g.start_ns.min()) - MS, int(g.end_ns.max()) - MS) for name, g in rows.groupby("name")}


@pytest.mark.parametrize("workers", [2, 4, 5])
def test_p3_preempts_the_big_all_reduce_only_between_its_slices(workers):
    n = workers
    # a ring step of a 100 kB slice: 1 us + 100000/n ns; a slice: 2(n-1) steps; the big tensor: 4 slices
    step = 1_000 + 100_000 // n
    slice_ns = 2 * (n - 1) * step
    small = 2 * (n - 1) * (1_000 + 1_000 // n)  # the 1 kB tensor's own all-reduce
    ready = 20_000  # layer 0's gradient, 20 us into the big all-reduce
    assert 0 < ready < step  # inside the first step of the first slice
    got = two_layers(n, "message")
    # P3: the small all-reduce waits for the first slice to finish, then runs alone
    assert got["l0.weight"] == (slice_ns, slice_ns + small)
    assert got["l1.weight"] == (0, 4 * slice_ns + small)
    # no preemption: it waits for the whole big all-reduce
    assert two_layers(n, "none")["l0.weight"] == (4 * slice_ns, 4 * slice_ns + small)


def test_with_two_workers_step_preemption_switches_at_the_first_step():
    step = 1_000 + 50_000
    assert two_layers(2, "chunk")["l0.weight"] == (step, step + 2 * (1_000 + 500))


def test_one_slice_per_tensor_makes_p3_non_preemptive():
    assert two_layers(4, "message", chunk_bytes=0) == two_layers(4, "none", chunk_bytes=0)


@pytest.mark.parametrize("model,workers", [("resnet50", 8), ("vgg16", 5)])
def test_p3_on_zoo_models_finishes_and_conserves_bytes(model, workers):
    r = ddlsim.simulate(model=model, workers=workers, iterations=2, barrier=False, stream_policy="priority",
                        preemption="message", chunk_bytes=1 << 20, trace_detail="step")
    ev = r.events.to_pandas()
    sent, received = ev[ev.kind == "send"].bytes.sum(), ev[ev.kind == "recv"].bytes.sum()
    assert sent == received > 0


def test_the_plan_sweeps_p3_slices_and_its_json_reproduces_the_best():
    plan = make_plan(model="resnet50", workers=4, barrier=False, iterations=2, bucket_caps_mb=[25],
                     slice_bytes=[1 << 20, 8 << 20], threads=1)
    data = plan.to_dict()
    assert [row["slice_bytes"] for row in data["p3"]["sweep"]] == [1 << 20, 8 << 20]
    best = data["p3"]
    assert best["iteration_time_s"] == min(row["iteration_time_s"] for row in best["sweep"])
    again = ddlsim.simulate(data["scenario"], grouping=best["grouping"], **best["strategy"])
    assert again.iteration_time_s == best["iteration_time_s"]


def test_the_plan_skips_p3_for_algorithms_without_slices():
    plan = make_plan(model="resnet50", workers=4, algorithm="halving-doubling", bucket_caps_mb=[25], threads=1)
    assert plan.best_p3 is None and any("P3" in note for note in plan.notes)
