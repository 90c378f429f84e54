"""Gradient grouping passes (python/ddlsim/simulation/grouping.py): each
rule on hand-computed cases, MG-WFBP against a brute-force search over all
merge sets, DDP against PyTorch's own assignment where torch is installed,
closed forms through the simulator, and per-tensor output unchanged."""

import itertools
import json
import random
import time

import forked_cli
import pytest

import ddlsim
from ddlsim.errors import ScenarioError
from ddlsim.simulation import grouping as gp
from ddlsim.simulation.lowering import engine_json, training_document
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict, with_overrides
from ddlsim.workload import list_models, load_model
from ddlsim.workload.model import Layer, Model, Tensor


def toy(*layers: tuple[int, ...]) -> Model:
    """A model whose layer i holds tensors of the given byte sizes (names L{i}.t{j})."""
    return Model(
        name="toy",
        display_name="toy",
        layers=tuple(
            Layer(f"L{i}", "Custom", tuple(Tensor(f"L{i}.t{j}", b, 1) for j, b in enumerate(sizes)))
            for i, sizes in enumerate(layers)
        ),
    )


def col(table, name):
    return table.column(name).to_pylist()


def members(groups):
    return [g["tensors"] for g in groups]


def check_partition(model, groups):
    """Every tensor in exactly one group; layers, bytes and tensor consistent with the members."""
    tensors = gp.tensor_infos(model)
    seen = sorted(t for g in groups for t in g["tensors"])
    assert seen == list(range(len(tensors)))
    for g in groups:
        assert g["layers"] == sorted({tensors[t].layer for t in g["tensors"]})
        assert g["bytes"] == sum(tensors[t].bytes for t in g["tensors"])
        assert g["tensor"] == (g["tensors"][0] if len(g["tensors"]) == 1 else -1)


# ----------------------------------------------------------------- per tensor


def reference_per_tensor(model):
    """The pass as it was before the grouping module (kept verbatim as the reference)."""
    groups, tensor = [], 0
    for layer_index, layer in enumerate(model.layers):
        for t in layer.tensors:
            groups.append({"layers": [layer_index], "tensor": tensor, "bytes": t.bytes})
            tensor += 1
    return groups


@pytest.mark.parametrize("name", list_models())
def test_per_tensor_is_unchanged(name):
    model = load_model(name)
    assert gp.per_tensor(model) == reference_per_tensor(model)


def test_default_scenario_engine_document_is_per_tensor_and_unchanged():
    for data in ({}, {"strategy": {"kind": "ring", "grouping": "per-tensor"}}):
        sc = scenario_from_dict({"model": {"name": "resnet50"}, **data})
        model = build_model(sc.model)
        doc = training_document(sc, model, layer_times_ns(model, sc.model))
        assert doc["groups"] == reference_per_tensor(model)
        assert json.loads(engine_json(doc))["groups"] == reference_per_tensor(model)
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1)
    assert set(col(r.events.groups, "kind")) == {"tensor"}


# ----------------------------------------------------------------- SyncEASGD


def test_synceasgd_is_one_group_of_everything():
    model = toy((4, 2), (), (8,))
    (g,) = gp.synceasgd(model)
    assert g == {"layers": [0, 2], "tensor": -1, "bytes": 14, "tensors": [0, 1, 2], "kind": "synceasgd"}


@pytest.mark.parametrize("fidelity", ["analytic", "flow"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_synceasgd_iteration_is_fwd_plus_bwd_plus_one_ring_allreduce(fidelity, n):
    # M = 19,000 B; M/N = 9500, 4750, 2375 B: whole ns at 10 Gbit/s.
    layers = [
        {"name": "a", "params": 1000, "fwd_ms": 1.0, "bwd_ms": 2.0},
        {"name": "b", "params": 2500, "fwd_ms": 0.5, "bwd_ms": 1.0},
        {"name": "c", "params": 1250, "fwd_ms": 0.25, "bwd_ms": 0.5},
    ]
    r = ddlsim.simulate(
        {"model": {"name": "three", "layers": layers}, "iterations": 2, "workers": n,
         "strategy": {"kind": "ring", "grouping": {"kind": "synceasgd"}},
         "network": {"fidelity": fidelity, "bandwidth": "10Gbps", "latency": "7us"}}
    )
    m_bytes = 19_000
    ring_ns = 2 * (n - 1) * (m_bytes / n * 8 / 10 + 7000)
    compute_ns = (1.75 + 3.5) * 1e6
    ev = r.events.to_pandas()
    ends = ev.groupby("iteration")["end_ns"].max()
    assert ends[0] == compute_ns + ring_ns
    assert ends[1] - ends[0] == compute_ns + ring_ns
    assert ev.loc[ev["collective"] >= 0, "collective"].nunique() == 2  # one all-reduce per iteration
    g = r.events.groups
    assert col(g, "tensor") == [0, 1, 2] and set(col(g, "kind")) == {"synceasgd"}
    assert col(g, "offset") == [0, 4000, 14000]


# ----------------------------------------------------------------- thesis fusion


def test_thesis_fusion_packs_whole_layers_strictly_below_the_buffer():
    model = toy((4,), (2, 2), (4,), (10,), (1,), (), (1,))
    groups = gp.thesis_fusion(model, 9)
    # 4 + 4 = 8 < 9; + 4 = 12 >= 9 closes; 4 + 10 closes; 10 alone (above the size); 1 + 1 = 2
    assert members(groups) == [[0, 1, 2], [3], [4], [5, 6]]
    assert [g["layers"] for g in groups] == [[0, 1], [2], [3], [4, 6]]
    check_partition(model, groups)
    # strictly below: 4 + 5 = 9 is not < 9
    assert members(gp.thesis_fusion(toy((4,), (5,)), 9)) == [[0], [1]]
    assert members(gp.thesis_fusion(toy((4,), (5,)), 10)) == [[0, 1]]


# ----------------------------------------------------------------- DDP


def test_ddp_assignment_closes_a_bucket_when_it_reaches_the_limit():
    kib, mib = 1024, 1024 * 1024
    sizes = [512 * kib, 600 * kib, 100 * kib, 30 * mib, 1_000_000, 1_000_000, 3 * mib]
    # 512K + 600K >= 1 MiB closes the first; then 2 MiB: 100K + 30M closes, 1M + 1M < 2 MiB, + 3M closes
    assert gp.ddp_bucket_assignment(sizes, [mib, 2 * mib]) == [[0, 1], [2, 3], [4, 5, 6]]
    assert gp.ddp_bucket_assignment([mib, 10, 10], [mib, 15]) == [[0], [1, 2]]  # reaching the limit exactly closes
    assert gp.ddp_bucket_assignment([5, 5], [100]) == [[0, 1]]


def test_ddp_buckets_follow_reverse_registration_order():
    mib = 1024 * 1024
    model = toy((3 * mib, 1000), (mib // 2,), (mib // 4, mib // 2), (100,))
    # ready order: t5 (100), t4 (512K), t3 (256K), t2 (512K), t1 (1000), t0 (3M)
    # first bucket 1 MiB: 100 + 512K + 256K + 512K >= 1 MiB -> {5,4,3,2}; then cap 1 MiB: 1000 + 3M -> {1,0}
    groups = gp.ddp(model, bucket_cap_mb=1)
    assert members(groups) == [[1, 0], [5, 4, 3, 2]]
    assert [g["layers"] for g in groups] == [[0], [1, 2, 3]]
    check_partition(model, groups)
    assert members(gp.ddp(model)) == [[1, 0], [5, 4, 3, 2]]  # 25 MiB cap: the rest in one bucket


def test_ddp_default_buckets_for_resnet50():
    model = load_model("resnet50")
    groups = gp.ddp(model)
    check_partition(model, groups)
    ready = list(reversed(groups))  # ready order: the last layers' bucket first
    assert ready[0]["bytes"] >= gp.DDP_FIRST_BUCKET_BYTES
    assert ready[0]["bytes"] - model.tensors[min(ready[0]["tensors"])].bytes < gp.DDP_FIRST_BUCKET_BYTES
    for g in ready[1:-1]:
        first_added = min(g["tensors"])  # the tensor that closed the bucket is its last in ready order
        assert g["bytes"] >= 25 * 1024 * 1024 > g["bytes"] - model.tensors[first_added].bytes


@pytest.mark.parametrize("name", list_models())
def test_ddp_equals_pytorch(name):
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    model = load_model(name)
    order = list(reversed(model.tensors))
    params = [torch.empty(t.elements, dtype=torch.float32, device="meta") for t in order]
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024]
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == gp.DDP_FIRST_BUCKET_BYTES
    try:  # torch >= 1.10: tensor_indices given = the tensors are in gradient-ready order (no re-sorting)
        result = dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params), list(range(len(params))))
    except TypeError:  # older torch: buckets sorted by their lowest index, the same order here
        result = dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))
    indices = result[0] if isinstance(result, tuple) else result
    assert [list(b) for b in indices] == gp.ddp_bucket_assignment([t.bytes for t in order], limits)


# ----------------------------------------------------------------- fixed, Horovod fusion, user groups


def test_fixed_size_groups_hold_at_most_the_size_in_ready_order():
    model = toy((5,), (3, 3), (2,), (12,), (1,))
    # ready order t5(1) t4(12) t3(2) t2(3) t1(3) t0(5); at most 6: {5} {4} {3,2} {1} {0}? 2+3=5, +3=8 > 6
    groups = gp.fixed(model, 6)
    assert members(groups) == [[0], [1], [3, 2], [4], [5]]
    check_partition(model, groups)
    assert all(g["bytes"] <= 6 or len(g["tensors"]) == 1 for g in groups)


def test_horovod_fusion_fuses_what_is_ready_in_a_cycle_up_to_the_threshold():
    ms = 1_000_000
    model = toy((4,), (3,), (2, 2))
    bwd = [3 * ms, 1 * ms, 1 * ms]  # backward ends: layer 2 at 1 ms, layer 1 at 2 ms, layer 0 at 5 ms
    # Horovod's defaults: one 5 ms cycle holds everything, 11 B fit in 64 MiB
    assert members(gp.horovod_fusion(model, bwd)) == [[3, 2, 1, 0]]
    # 1.5 ms cycles: flushed at 1.5 ms (layer 2), 3 ms (layer 1), 6 ms (layer 0)
    assert members(gp.horovod_fusion(model, bwd, cycle_time_ns=1_500_000)) == [[0], [1], [3, 2]]
    # threshold 5 B within one cycle: 2 + 2 = 4, + 3 > 5 -> new buffer, 3 + 4 > 5 -> new buffer
    assert members(gp.horovod_fusion(model, bwd, threshold=5)) == [[0], [1], [3, 2]]
    # threshold 7: 2 + 2 + 3 = 7 fits; + 4 > 7
    assert sorted(members(gp.horovod_fusion(model, bwd, threshold=7))) == [[0], [3, 2, 1]]
    # threshold 0 disables fusion
    assert members(gp.horovod_fusion(model, bwd, threshold=0)) == [[0], [1], [2], [3]]


def test_horovod_defaults_are_horovods():
    g = scenario_from_dict({"strategy": {"kind": "ring", "grouping": "fusion"}}).strategy.grouping
    assert g.threshold_bytes == 64 * 1024 * 1024 == gp.HOROVOD_FUSION_THRESHOLD_BYTES
    assert g.cycle_time_ns == 5_000_000 == gp.HOROVOD_CYCLE_TIME_NS


def test_user_groups_by_tensor_name():
    model = toy((1, 2), (3,), (4,))
    groups = gp.user_groups(model, [["L2.t0", "L0.t1"]])
    assert members(groups) == [[0], [3, 1], [2]]
    check_partition(model, groups)
    with pytest.raises(ScenarioError, match="did you mean 'L2.t0'"):
        gp.user_groups(model, [["L2.t9"]])
    with pytest.raises(ScenarioError, match="one group"):
        gp.user_groups(model, [["L1.t0"], ["L1.t0"]])


# ----------------------------------------------------------------- MG-WFBP


def brute_force(ready, sizes, cost):
    """The best merge set over all 2^(L-1) of them, by the paper's Eq. 20-21."""
    n = len(ready)
    best = None
    for mask in range(1 << max(n - 1, 0)):
        merged = {u for u in range(1, n) if mask >> (u - 1) & 1}
        end = gp.comm_schedule(ready, sizes, merged, cost)[2]
        if best is None or end < best:
            best = end
    return best


def random_case(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    bwd = [rng.uniform(0.05, 10.0) for _ in range(n)]
    ready = gp.backward_end_ns(bwd)
    sizes = [0.0 if rng.random() < 0.1 else rng.uniform(0.1, 20.0) for _ in range(n)]
    cost = gp.AllReduceCost(rng.uniform(0.0, 6.0), rng.uniform(0.01, 2.0))
    return ready, sizes, cost


@pytest.mark.parametrize("seed", range(150))
def test_mg_wfbp_optimal_equals_brute_force(seed):
    ready, sizes, cost = random_case(seed)
    plan = gp.mg_wfbp_optimal(ready, sizes, cost)
    best = brute_force(ready, sizes, cost)
    assert plan.iteration_end == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert gp.comm_schedule(ready, sizes, plan.merged, cost)[2] == plan.iteration_end
    assert 0 not in plan.merged  # layer 1 is never merged (2 <= l <= L)
    # Algorithm 1 is never better than the optimum
    assert gp.mg_wfbp_merge(ready, sizes, cost).iteration_end >= best - 1e-9


@pytest.mark.parametrize("seed", range(150))
def test_mg_wfbp_algorithm1_satisfies_theorem1(seed):
    ready, sizes, cost = random_case(seed)
    plan = gp.mg_wfbp_merge(ready, sizes, cost)
    tau, tc, end = gp.comm_schedule(ready, sizes, plan.merged, cost)
    assert end == pytest.approx(plan.iteration_end)
    n = len(ready)
    # Eq. 27 on the plan's own schedule: l is merged iff tau_b^(l-2) - tau_c^(l) < a,
    # tau_b^(l-2) being the end of layer l-1's backward (ready[u-1], 0-based)
    assert plan.merged == {u for u in range(1, n) if ready[u - 1] - tau[u] < cost.a}
    for u in plan.merged:
        assert tc[u] == 0  # Eq. 14
        # C.3 never merges: the end of layer l-1's backward is before layer l's communication would end alone
        p_alone = sizes[u] + sum(sizes[v] for v in range(u + 1, n) if all(w in plan.merged for w in range(u + 1, v + 1)))
        assert ready[u - 1] < tau[u] + cost(p_alone)


def test_mg_wfbp_algorithm1_is_not_always_optimal():
    """Three layers, t_b = (2, 1, 1), one byte each, T_ar(M) = 2 + M.
    Backward ends: layer 3 at 1, layer 2 at 2, layer 1 at 4. Algorithm 1
    merges layer 3 into 2 (2 - 1 < a = 2): {3,2} starts at 2, ends at 6;
    layer 1 then starts at 6 (4 - 2 < 2 fails) and ends at 9. Merging
    layer 2 into 1 instead: layer 3 runs 1..4, {2,1} runs 4..8."""
    ready, sizes, cost = gp.backward_end_ns([2, 1, 1]), [1, 1, 1], gp.AllReduceCost(2, 1)
    assert ready == [4, 2, 1]
    greedy, best = gp.mg_wfbp_merge(ready, sizes, cost), gp.mg_wfbp_optimal(ready, sizes, cost)
    assert (greedy.merged, greedy.iteration_end) == ({2}, 9)
    assert (best.merged, best.iteration_end) == ({1}, 8) and brute_force(ready, sizes, cost) == 8


def test_mg_wfbp_case1_merges_nothing_when_communication_hides():
    # every layer's all-reduce (1 + 0.1 x 10 = 2) is shorter than the backward of the layer before (5)
    ready = gp.backward_end_ns([5.0] * 6)
    plan = gp.mg_wfbp_optimal(ready, [10.0] * 6, gp.AllReduceCost(1.0, 0.1))
    assert plan.merged == frozenset() and plan.iteration_end == ready[0] + 2.0
    assert gp.mg_wfbp_merge(ready, [10.0] * 6, gp.AllReduceCost(1.0, 0.1)).merged == frozenset()


def test_mg_wfbp_groups_are_contiguous_layers_and_fast_for_resnet152():
    model = load_model("resnet152")
    sc = scenario_from_dict({"model": {"name": "resnet152"}, "workers": 64})
    bwd = [b for _, b in layer_times_ns(model, sc.model)]
    from ddlsim.simulation.lowering import allreduce_cost

    cost = allreduce_cost(sc)
    assert cost.a == 2 * 63 * 10_000 and cost.b == pytest.approx(2 * 63 / 64 * 0.8)
    t0 = time.perf_counter()
    groups = gp.mg_wfbp(model, bwd, cost)
    assert time.perf_counter() - t0 < 1.0
    check_partition(model, groups)
    learnable = [i for i, layer in enumerate(model.layers) if layer.tensors]
    for g in groups:
        pos = [learnable.index(layer) for layer in g["layers"]]
        assert pos == list(range(pos[0], pos[0] + len(pos)))


# ----------------------------------------------------------------- scenario, CLI, event log


def test_grouping_forms_and_errors():
    def grouping(value):
        return scenario_from_dict({"strategy": {"kind": "ring", "grouping": value}}).strategy.grouping

    assert grouping("DDP").bucket_cap_mb == 25
    assert grouping("ddp:bucket_cap_mb=50").bucket_cap_mb == 50
    assert grouping({"kind": "fusion", "threshold": "32MiB", "cycle_time": "2ms"}).cycle_time_ns == 2_000_000
    assert grouping("wfbp").kind == "per-tensor"
    assert grouping({"kind": "thesis-fusion"}).fusion_buffer_bytes == 5_333_329
    for bad, message in [
        ({"kind": "fusion", "cycle_time": 5}, "no unit"),
        ({"kind": "fusoin"}, "did you mean 'fusion'"),
        ({"kind": "fixed"}, "strategy.grouping.size"),
        ({"kind": "fusion", "bucket_cap_mb": 3}, 'option of kind = "ddp"'),
        ({"kind": "ddp", "bucket_cap": 3}, "did you mean 'bucket_cap_mb'"),
        ("ddp:50", "cannot read grouping option"),
    ]:
        with pytest.raises(ScenarioError, match=message):
            grouping(bad)
    with pytest.raises(ScenarioError, match="mg-wfbp"):
        scenario_from_dict({"strategy": {"kind": "ps", "grouping": "mg-wfbp"}})
    # the grouping survives a change of strategy kind, like stream_policy
    sc = with_overrides(scenario_from_dict({"strategy": {"kind": "ring", "grouping": "ddp"}}), {"strategy": "ps"})
    assert sc.strategy.kind == "ps" and sc.strategy.grouping.kind == "ddp"


@pytest.mark.parametrize("kind", ["synceasgd", "mg-wfbp", "fusion", "thesis-fusion", "ddp", "fixed:size=4MB"])
def test_every_pass_runs_and_logs_its_groups(kind):
    r = ddlsim.simulate(model="resnet50", workers=4, iterations=1, grouping=kind, trace_detail="collective")
    groups = r.engine_document["training"]["groups"]
    check_partition(r.model, groups)
    table = r.events.groups
    assert len(table) == len(r.model.tensors)
    assert set(col(table, "kind")) == {kind.split(":")[0]}
    ev = r.events.to_pandas()
    assert ev.loc[ev["collective"] >= 0, "group"].nunique() == len(groups)


def test_ps_with_ddp_buckets():
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=1, strategy="ps", servers=2, grouping="ddp:bucket_cap_mb=0.01")
    assert len(r.engine_document["training"]["groups"]) < len(r.model.tensors)


def test_cli_grouping_flag():
    def run(*extra):
        p = forked_cli.run(["simulate", "--model", "resnet50", "--workers", "16", "--bandwidth", "10Gbps", "--network", "analytic", "--iterations", "1", "--json", *extra])
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["iteration_time_s"]

    assert run("--grouping", "mg-wfbp") < run("--grouping", "per-tensor")
    p = forked_cli.run(["simulate", "--grouping", "bogus"])
    assert p.returncode != 0 and "unknown grouping kind 'bogus'" in p.stderr
