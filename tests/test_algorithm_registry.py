"""The one registry of all-reduce algorithms (ddlsim.simulation.algorithms):
the engine's list and the registry's are the same, every consumer reads it,
and each algorithm's alpha-beta-gamma cost is what the engine's own
step-by-step simulation (and its closed form) takes on an idle network."""

import math
import os
import subprocess
import sys
from typing import get_args

import pytest

import ddlsim
from ddlsim import _core
from ddlsim.errors import PlanError, ScenarioError
from ddlsim.plan import cost as plan_cost
from ddlsim.simulation import algorithms as reg
from ddlsim.simulation.lowering import allreduce_cost
from ddlsim.simulation.scenario import AllreduceAlgorithm, scenario_from_dict

NAMES = list(reg.names())
LATENCY_NS = 3000


def test_the_registry_is_the_engines_list():
    engine = [a["name"] for a in _core.algorithms()]
    assert engine == list(_core.ALGORITHM_NAMES)
    assert [a.engine_name for a in reg.all_algorithms()] == engine
    assert [a.code for a in reg.all_algorithms()] == list(range(len(engine)))
    assert NAMES == [n.replace("_", "-") for n in engine]


def test_every_engine_algorithm_is_a_valid_scenario_algorithm_and_nothing_else_is():
    assert list(get_args(AllreduceAlgorithm)) == NAMES
    for name in NAMES:
        assert scenario_from_dict({"strategy": {"kind": "ring", "algorithm": name}}).strategy.algorithm == name
    with pytest.raises(ScenarioError, match="algorithm"):
        scenario_from_dict({"strategy": {"kind": "ring", "algorithm": "no-such-algorithm"}})


def test_the_planner_and_the_fit_read_the_registry():
    assert plan_cost.SIMULATED_ALGORITHMS == reg.names()
    assert plan_cost.ALGORITHMS == tuple(a.name for a in reg.all_algorithms() if a.in_table2)
    assert set(plan_cost.ALGORITHMS) == {"ring", "halving-doubling", "recursive-doubling", "binary-tree"}
    # Every Table II algorithm is simulated, so a cost model fitted with any of them gives a network.
    for name in plan_cost.ALGORITHMS:
        overrides = plan_cost.CostModel(name, 5000.0, 0.8).network(8)
        assert overrides["algorithm"] == name
        assert scenario_from_dict({"strategy": {"kind": "ring", "algorithm": overrides["algorithm"]}})
    with pytest.raises(PlanError, match="Table II"):
        plan_cost.algorithm_name("butterfly")


def test_chunk_bytes_is_refused_exactly_for_the_algorithms_the_engine_does_not_partition():
    for a in reg.all_algorithms():
        data = {"strategy": {"kind": "ring", "algorithm": a.name, "chunk_bytes": 1000}}
        if a.partitions:
            scenario_from_dict(data)
        else:
            with pytest.raises(ScenarioError, match="chunk_bytes"):
                scenario_from_dict(data)


# ---------------------------------------------------------------- the cost, against the engine

def _one_tensor(m_bytes: int, n: int, algorithm: str, gamma: float, per_host: int, collective_model: str = "steps"):
    return {
        "model": {"name": "one-tensor", "layers": [{"name": "l0", "params": m_bytes // 4, "fwd_ms": 0, "bwd_ms": 0}]},
        "iterations": 1,
        "workers": n,
        "barrier": False,
        "strategy": {"kind": "ring", "algorithm": algorithm, "gamma_ns_per_byte": gamma},
        # 8 Gbit/s: 1 ns per byte; intra-host 8 GB/s: 1/8 ns per byte. Every transfer is a whole number of ns.
        "network": {"fidelity": "analytic", "bandwidth": "8Gbps", "latency": f"{LATENCY_NS}ns", "ranks_per_host": per_host,
                    "intra_host_bandwidth": "8GB/s", "intra_host_latency": "1us", "collective_model": collective_model},
        "trace_detail": "step",
    }


CASES = [(a, n, per_host) for a in NAMES for n in (2, 3, 4, 5, 6, 7, 8, 12, 16)
         for per_host in ((1, 2, 4) if a == "hierarchical-ring" else (1,))]


@pytest.mark.parametrize("algorithm,n,per_host", CASES)
def test_cost_equals_the_engines_time_on_an_idle_network(algorithm, n, per_host):
    # M divisible by every chunking (n, p, 2 trees, hosts x 8 for the intra-host rate, 4 for gamma's quarter):
    m = 8 * 2 * 4 * 16 * 3 * 5 * 7 * 8 * 11
    for gamma in (0.0, 0.25):
        doc = _one_tensor(m, n, algorithm, gamma, per_host)
        cost = allreduce_cost(scenario_from_dict(doc))  # what `grouping = "mg-wfbp"` plans with
        expected = cost(m)
        closed = ddlsim.simulate(_one_tensor(m, n, algorithm, gamma, per_host, "closed-form"))
        assert closed.events.column("end_ns").max() == pytest.approx(expected, abs=1e-6), "closed form"
        if algorithm == "double-binary-tree":  # its two trees queue on shared senders step by step
            continue
        steps = ddlsim.simulate(doc).events.column("end_ns").max()
        if algorithm == "hierarchical-ring" and per_host > 1:
            # Step by step, the ranks of a host share its NIC (analytic links are FIFO servers), which the
            # schedule's idle-network cost leaves out: there it is a lower bound (docs/modelling.md).
            assert steps >= expected - 1e-6, "steps"
        else:
            assert steps == pytest.approx(expected, abs=1e-6), "steps"


def test_cost_is_table_ii_where_the_schedules_agree():
    alpha, beta, gamma = 7000.0, 0.5, 0.1
    for n in (2, 4, 8, 16, 64):
        for name in ("ring", "recursive-doubling", "halving-doubling"):
            got = reg.get(name).cost(n, alpha, beta, gamma)
            want = reg.get(name).table2(n, alpha, beta, gamma)
            assert got.a == pytest.approx(want.a) and got.b == pytest.approx(want.b), (name, n)


def _tree_brute_force(n: int) -> tuple[int, int]:
    """The in-order tree built from its rule on paper (parent of r: clear r's lowest set bit's
    neighbourhood...) by searching, for every rank, its parent among all ranks; then the reduce
    (children one after the other) and broadcast depths by simulation over time steps."""
    def children(r):  # r's children: the ranks whose parent is r
        return [c for c in range(1, n) if parent(c) == r]

    def parent(c):
        b = c & -c
        if c == 1 << (n - 1).bit_length() - 1 and b == c:
            return 0  # the root's only child: the largest power of two below n
        # c is r - b_r/2 (left child) or r + h (right child, the largest h < b_r with r + h < n)
        for r in range(1, n):
            br = r & -r
            if br > 1 and c == r - br // 2:
                return r
            h = br // 2
            while h > 0 and r + h >= n:
                h //= 2
            if br > 1 and h > 0 and c == r + h:
                return r
        raise AssertionError(c)

    ready = {}
    for _ in range(n):  # relax until fixed: R(v) = fold(max(t, R(c)) + 1)
        for v in range(n):
            t = 0
            for c in sorted(children(v), key=lambda c: (c >= v, c)):  # left (smaller) child first
                t = max(t, ready.get(c, 0)) + 1
            ready[v] = t
    got = {0: 0}
    end = 0
    queue = [0]
    while queue:
        v = queue.pop()
        kids = sorted(children(v), key=lambda c: (c >= v, c))
        for i, c in enumerate(kids):
            got[c] = got[v] + i + 1
            queue.append(c)
        end = max(end, got[v] + len(kids))
    return ready[0], end


@pytest.mark.parametrize("n", range(2, 40))
def test_tree_depths_match_a_brute_force_tree(n):
    assert reg.tree_depths(n) == _tree_brute_force(n)


def test_tree_on_a_power_of_two_costs_4_log2_n_minus_2_transfers():
    # binary_tree.rs: a complete tree below the root costs (4 log2 N - 2) u, 10 u for N = 8
    for n in (2, 4, 8, 16, 32):
        up, down = reg.tree_depths(n)
        assert up + down == 4 * int(math.log2(n)) - 2


def test_steps_per_rank_counts_the_engines_send_rows():
    m = 8 * 3 * 5 * 7 * 16
    for a in reg.all_algorithms():
        for n in (2, 4, 8):
            per_host = 2 if a.uses_hosts else 1
            r = ddlsim.simulate(_one_tensor(m, n, a.name, 0.0, per_host))
            ev = r.events.to_pandas()
            sends = ev[ev["kind"] == "send"]
            assert set(sends["op"]) == {a.step_op}
            if a.engine_name not in ("binary_tree", "double_binary_tree"):  # trees: ceil of the mean
                assert len(sends) == n * a.steps_per_rank(n, per_host), (a.name, n)


# ---------------------------------------------------------------- MG-WFBP with every algorithm

@pytest.mark.parametrize("algorithm", NAMES)
def test_mg_wfbp_grouping_runs_with_every_algorithm_from_the_cli(algorithm, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "ddlsim", "simulate", "--model", "lenet5", "--workers", "4", "--iterations", "1",
         "--grouping", "mg-wfbp", "--algorithm", algorithm, "--json", "--network", "analytic", "--ranks-per-host", "2"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "100"}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def test_unknown_algorithm_names_the_choices():
    with pytest.raises(ValueError, match="choose one of ring, halving-doubling"):
        reg.get("ringg")
    assert reg.get("RING").name == "ring" and reg.get("halving_doubling").name == "halving-doubling"
    assert reg.get("dbt").name == "double-binary-tree"


def test_the_cli_algorithm_help_lists_the_registry():
    import importlib
    import inspect

    cli = importlib.import_module("ddlsim.cli.app")

    for command in (cli.simulate, cli.plan):
        help_text = inspect.signature(command).parameters["algorithm"].default.help
        assert all(name in help_text for name in NAMES), (command.__name__, help_text)


@pytest.mark.parametrize("algorithm", NAMES)
def test_plan_prices_and_simulates_every_algorithm(algorithm):
    result = ddlsim.make_plan(model="lenet5", workers=4, algorithm=algorithm, network="analytic", bucket_caps_mb=(25,),
                              slice_bytes=(), credit_bytes=())
    sc = result.scenario
    assert sc.strategy.algorithm == algorithm
    assert result.cost == allreduce_cost(sc)  # the MG-WFBP plan is priced with the registry's cost of that algorithm
    assert result.mg_wfbp.iteration_time_s > 0
    # a cost model naming an algorithm Table II lacks prices it by its schedule
    model = plan_cost.CostModel(algorithm, 10_000.0, 0.8)
    assert model.allreduce(4) == reg.get(algorithm).cost(4, 10_000.0, 0.8) or reg.get(algorithm).in_table2
