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


def test_hierarchical_ring_over_real_intra_host_links_is_bounded_by_its_closed_form():
    # intra-host transfers go over the per-rank NVLink-class ports, inter-host ones over the NIC;
    # the 8 inter-host rings of a host share its NIC, which the analytic links serialise and the
    # closed form does not see: the closed form is a lower bound
    kw = dict(model="resnet50", workers=32, iterations=1, algorithm="hierarchical-ring", ranks_per_host=8, network="analytic")
    steps = ddlsim.simulate(collective_model="steps", **kw)
    closed = ddlsim.simulate(collective_model="closed-form", **kw)
    assert steps.events.column("end_ns").max() >= closed.events.column("end_ns").max()
    flat = ddlsim.simulate(**{**kw, "algorithm": "ring"})
    assert steps.iteration_time_s < flat.iteration_time_s


@pytest.mark.parametrize("algorithm", ["ring", "halving-doubling", "double-binary-tree", "direct"])
def test_closed_form_mode_counts_the_bytes_the_steps_send(algorithm):
    # Before, closed-form runs reported 0 bytes sent.
    kw = dict(model="lenet5", workers=4, iterations=1, network="analytic", algorithm=algorithm)
    closed = ddlsim.simulate(collective_model="closed-form", **kw)
    steps = ddlsim.simulate(collective_model="steps", **kw)
    assert closed.stats["bytes_sent"] == steps.stats["bytes_sent"]
    assert closed.stats["bytes_received"] == steps.stats["bytes_received"]
    assert closed.summary()["bytes_sent_per_worker_per_iteration"] > 0
    assert not any("not counted" in n for n in closed.notes)


def test_closed_form_collectives_with_a_parameter_server_are_refused_naming_both():
    with pytest.raises(ScenarioError) as exc:
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", network="analytic", collective_model="closed-form")
    assert "network.collective_model" in str(exc.value) and "strategy.kind" in str(exc.value)


# ---------------------------------------------------------------- reduction cost (gamma)

GAMMA_TERMS = {
    # MG-WFBP Table II's gamma terms for p = 8 ranks and M bytes (every chunk whole):
    "ring": lambda m, p, g: (p - 1) * math.ceil(g * m / p),
    "direct": lambda m, p, g: (p - 1) * math.ceil(g * m / p),
    "halving-doubling": lambda m, p, g: sum(math.ceil(g * m / 2 ** (j + 1)) for j in range(int(math.log2(p)))),
    "recursive-doubling": lambda m, p, g: int(math.log2(p)) * math.ceil(g * m),
    "butterfly": lambda m, p, g: int(math.log2(p)) * math.ceil(g * m),
}


def _collective_ns(r) -> int:
    ev = r.events.to_pandas()
    rows = ev[ev.kind == "collective"]
    return int(rows.end_ns.max() - rows.start_ns.min())


@pytest.mark.parametrize("algorithm", sorted(GAMMA_TERMS))
def test_gamma_adds_table_ii_reduction_term_to_the_nanosecond(algorithm):
    m, p, g = 8 * 4000 * 3, 8, 0.37
    plain = one_tensor(m, p, algorithm, network={"fidelity": "analytic"})
    reducing = one_tensor(m, p, algorithm, network={"fidelity": "analytic"}, strategy={"gamma_ns_per_byte": g})
    assert _collective_ns(reducing) - _collective_ns(plain) == GAMMA_TERMS[algorithm](m, p, g)


def test_each_reduction_is_a_row_the_next_step_depends_on():
    m, p = 8 * 4000, 4
    r = one_tensor(m, p, "ring", strategy={"gamma_ns_per_byte": 1.0})
    ev = r.events.to_pandas().set_index("id")
    reduces = ev[ev.op == "reduce"]
    assert len(reduces) == p * (p - 1)  # every member reduces N-1 chunks
    assert (reduces.kind == "compute").all() and (reduces.end_ns - reduces.start_ns == m // p).all()
    # each reduction waited for a receipt on its own rank, and some send waited for it
    for rid, row in reduces.iterrows():
        assert any(ev.loc[d, "kind"] == "recv" and ev.loc[d, "rank"] == row["rank"] for d in row["deps"])
    waited_on = {d for deps in ev[ev.kind == "send"].deps for d in (deps if deps is not None else [])}
    assert set(reduces.index) <= waited_on  # every reduction is followed by a step that sends what it reduced


def test_gamma_with_the_closed_form_mode_equals_the_steps():
    m, p = 8 * 4000 * 3, 6
    kw = dict(strategy={"gamma_ns_per_byte": 0.25})
    steps = one_tensor(m, p, "ring", network={"fidelity": "analytic"}, **kw)
    closed = one_tensor(m, p, "ring", network={"fidelity": "analytic", "collective_model": "closed-form"}, **kw)
    assert closed.summary()["iteration_time_s"] == steps.summary()["iteration_time_s"]


def test_gamma_with_the_multicast_all_gather_is_refused_naming_both_fields():
    with pytest.raises(ScenarioError, match=r"gamma_ns_per_byte.*in_network"):
        ddlsim.simulate(workers=4, iterations=1, strategy={"kind": "ring", "in_network": "multicast", "gamma_ns_per_byte": 1.0})


def test_gamma_feeds_the_mg_wfbp_cost_model():
    from ddlsim.simulation.lowering import allreduce_cost
    from ddlsim.simulation.scenario import scenario_from_dict

    base = {"workers": 8, "network": {"bandwidth": "8Gbps", "latency": "3us"}}
    plain = allreduce_cost(scenario_from_dict(base))
    reducing = allreduce_cost(scenario_from_dict({**base, "strategy": {"kind": "ring", "gamma_ns_per_byte": 0.5}}))
    assert reducing.a == plain.a and reducing.b - plain.b == pytest.approx(7 / 8 * 0.5)
