"""Every all-reduce algorithm through the Python API: names, step counts,
closed forms on an idle star, byte conservation, and the closed-form mode."""

import math

import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation.lowering import steps_per_allreduce
from ddlsim.simulation.scenario import AllreduceAlgorithm
from typing import get_args

ALGORITHMS = list(get_args(AllreduceAlgorithm))


def one_tensor(m_bytes: int, n: int, algorithm: str, network=None, **kw):
    return ddlsim.simulate(
        {
            "model": {"name": "one-tensor", "layers": [{"name": "l0", "params": m_bytes // 4, "fwd_ms": 0, "bwd_ms": 0}]},
            "iterations": 1,
            "workers": n,
            "strategy": {"kind": "ring", "algorithm": algorithm, **kw.pop("strategy", {})},
            "network": {"bandwidth": "8Gbps", "latency": "3us", **(network or {})},
            "trace_detail": "step",
            **kw,
        }
    )


def test_every_engine_algorithm_has_a_scenario_name():
    assert sorted(a.replace("-", "_") for a in ALGORITHMS) == sorted(ddlsim._core.ALGORITHM_NAMES)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [2, 5, 8])
def test_steps_per_allreduce_matches_the_engine_and_bytes_are_conserved(algorithm, n):
    per_host = 2 if algorithm == "hierarchical-ring" and n % 2 == 0 else 1
    r = one_tensor(n * 4000, n, algorithm, network={"ranks_per_host": per_host})
    ev = r.events.to_pandas()
    sends, recvs = ev[ev["kind"] == "send"], ev[ev["kind"] == "recv"]
    assert sends["bytes"].sum() == recvs["bytes"].sum() > 0
    assert set(sends["algorithm"]) == {algorithm.replace("-", "_")}
    estimate = steps_per_allreduce(algorithm, n, per_host)
    if algorithm in ("binary-tree", "double-binary-tree"):
        trees = 1 if algorithm == "binary-tree" else 2
        assert len(sends) == trees * 2 * (n - 1) and estimate == math.ceil(trees * 2 * (n - 1) / n)
    elif algorithm in ("halving-doubling", "recursive-doubling", "butterfly") and n & (n - 1):
        # Off powers of two the estimate counts every rank in every stage (the folded ranks idle in the core).
        p = 1 << (n.bit_length() - 1)
        assert len(sends) == p * (estimate - 2) + 2 * (n - p) and len(sends) <= n * estimate
    else:
        assert len(sends) == n * estimate


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
def test_recursive_doubling_and_butterfly_closed_form(n):
    # 8 Gbit/s = 1 B/ns: log2(p) (alpha + M beta), + 2 (alpha + M beta) off powers of two.
    m = 4000 * n
    p = 1 << (n.bit_length() - 1)
    stages = int(math.log2(p)) + (0 if p == n else 2)
    for algorithm in ("recursive-doubling", "butterfly"):
        assert one_tensor(m, n, algorithm).events.to_pandas()["end_ns"].max() == stages * (3000 + m)


def test_chunk_bytes_partitions_the_ring_and_only_the_ring():
    n, m = 4, 4 * 6000
    r = one_tensor(m, n, "ring", strategy={"chunk_bytes": m // 3})
    sends = r.events.to_pandas().query("kind == 'send'")
    assert len(sends) == 3 * n * 2 * (n - 1) and sends["bytes"].max() == m // 3 // n
    assert sends["end_ns"].max() > 0
    with pytest.raises(ScenarioError, match="chunk_bytes"):
        one_tensor(m, n, "direct", strategy={"chunk_bytes": 100})


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "double-binary-tree"])
def test_closed_form_mode_gives_the_same_iteration_at_analytic_fidelity(algorithm):
    base = {
        "model": {"name": "resnet50"},
        "workers": 4,
        "iterations": 1,
        "strategy": {"kind": "ring", "algorithm": algorithm},
    }
    net = {"fidelity": "analytic", "bandwidth": "8Gbps", "latency": "2us"}
    steps = ddlsim.simulate({**base, "network": net})
    closed = ddlsim.simulate({**base, "network": {**net, "collective_model": "closed-form"}})
    # Equal up to the largest-chunk charge of uneven chunks (1 ns per stage per collective).
    assert 0 <= closed.iteration_time_s - steps.iteration_time_s < 1e-5
    assert closed.events.to_pandas().query("kind == 'send'").empty


def test_closed_form_mode_needs_analytic_and_no_preemption():
    with pytest.raises(ScenarioError, match="analytic"):
        ddlsim.simulate({"network": {"collective_model": "closed-form"}})
    with pytest.raises(ScenarioError, match="preempt"):
        ddlsim.simulate({"network": {"fidelity": "analytic", "collective_model": "closed-form"},
                         "strategy": {"kind": "ring", "stream_policy": "priority", "preemption": "chunk"}})


def test_hierarchical_ring_over_real_intra_host_links_equals_its_closed_form():
    # intra-host transfers go over the per-rank NVLink-class ports, inter-host ones over the NIC
    kw = dict(model="resnet50", workers=32, iterations=1, algorithm="hierarchical-ring", ranks_per_host=8, network="analytic")
    steps = ddlsim.simulate(collective_model="steps", **kw)
    closed = ddlsim.simulate(collective_model="closed-form", **kw)
    assert steps.events.column("end_ns").max() == closed.events.column("end_ns").max()
    flat = ddlsim.simulate(**{**kw, "algorithm": "ring"})
    assert steps.iteration_time_s < flat.iteration_time_s


def test_closed_form_mode_says_that_it_counts_no_bytes():
    r = ddlsim.simulate(model="lenet5", workers=4, iterations=1, network="analytic", collective_model="closed-form")
    assert r.summary()["bytes_sent_per_worker_per_iteration"] == 0
    assert any("bytes sent are not counted" in n for n in r.notes)


def test_closed_form_collectives_with_a_parameter_server_are_refused_naming_both():
    with pytest.raises(ScenarioError) as exc:
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", network="analytic", collective_model="closed-form")
    assert "network.collective_model" in str(exc.value) and "strategy.kind" in str(exc.value)
