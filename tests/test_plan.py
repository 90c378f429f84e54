"""Cost models (`ddlsim fit`), the planner (`ddlsim plan`) and the thesis
simulator's synthetic model."""

import json
from pathlib import Path
from decimal import Decimal

import forked_cli
import pytest

import ddlsim
from ddlsim.errors import PlanError
from ddlsim.plan.cost import CostModel, fit, fit_tables, point_to_point, read_table, table2
from ddlsim.plan.planner import make_plan
from ddlsim.simulation import grouping as gp
from ddlsim.simulation import grouping as gp
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict


def cli(*args, cwd=None):
    return forked_cli.run(list(args), cwd=cwd)


# ring all-reduce, alpha = 5 us, beta = 0.8 ns/B: a = 2(N-1) alpha, b = 2(N-1)/N beta
RING = {2: (10_000, Decimal("0.8")), 4: (30_000, Decimal("1.2")), 8: (70_000, Decimal("1.4")), 16: (150_000, Decimal("1.5"))}
SIZES = [2**k for k in range(2, 23, 2)]


def write_csv(path, header="size,time_ns,workers"):
    rows = [header] + [f"{m},{a + b * m},{n}" for n, (a, b) in RING.items() for m in SIZES]
    path.write_text("\n".join(rows) + "\n")
    return path


def osu_text(a_us, b_us_per_byte, full=False, version="7.3", binding=True):
    lines = ["[node1:4242] Rank 0 bound to package[0][core:0]"] if binding else []
    lines += [f"# OSU MPI Allreduce Latency Test v{version}"]
    if version.startswith("7"):
        lines.append("# Datatype: MPI_FLOAT.")
    if full:
        lines.append("# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations")
    else:
        lines.append("# Size       Avg Latency(us)")
    for k in range(2, 21):
        m = 2**k
        t = Decimal(a_us) + Decimal(b_us_per_byte) * m
        lines.append(f"{m:<10d}{t:>18}" + (f"{t - 1:>18}{t + 1:>18}{1000:>12}" if full else ""))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- fit


def test_fit_recovers_a_and_b_exactly_per_worker_count(tmp_path):
    model = fit(read_table(write_csv(tmp_path / "ar.csv")), "ring")
    assert [f.workers for f in model.fits] == [2, 4, 8, 16]
    for f in model.fits:
        a, b = RING[f.workers]
        assert f.a_ns == a and f.b_ns_per_byte == float(b)  # exact
        assert f.alpha_ns == 5000.0
        assert f.beta_ns_per_byte == pytest.approx(0.8, rel=1e-15)
        assert f.r2 == 1.0 and f.max_relative_error == 0.0
        assert f.points == len(SIZES) and (f.min_size_bytes, f.max_size_bytes) == (SIZES[0], SIZES[-1])
    # one alpha and beta for every worker count (joint least squares)
    assert model.alpha_ns == pytest.approx(5000.0, rel=1e-9)
    assert model.beta_ns_per_byte == pytest.approx(0.8, rel=1e-9)
    # a measured worker count is priced by its own line, another by Table II
    assert model.allreduce(8) == gp.AllReduceCost(70_000.0, 1.4)
    cost32 = model.allreduce(32)
    assert cost32.a == pytest.approx(2 * 31 * 5000, rel=1e-9) and cost32.b == pytest.approx(2 * 31 / 32 * 0.8, rel=1e-9)


def test_fit_reads_osu_allreduce_output(tmp_path):
    # 8 workers, ring: alpha = 10 us, beta = 0.892857 ns/B  <=>  a = 140 us, b = 1.5625e-3 us/B
    for i, (full, version) in enumerate([(False, "7.3"), (True, "7.3"), (False, "5.6.2"), (True, "5.9")]):
        path = tmp_path / f"osu{i}.txt"
        path.write_text(osu_text("140", "0.0015625", full=full, version=version))
        model = fit_tables([path], workers=[8])
        (f,) = model.fits
        assert (f.workers, f.points, f.a_ns, f.b_ns_per_byte) == (8, 19, 140_000.0, 1.5625)
        assert f.alpha_ns == 10_000.0 and f.beta_ns_per_byte == pytest.approx(1.5625 * 8 / 14, rel=1e-15)
        assert (model.alpha_ns, model.beta_ns_per_byte) == (f.alpha_ns, f.beta_ns_per_byte)


def test_fit_several_osu_files_one_worker_count_each(tmp_path):
    p4, p8 = tmp_path / "n4.txt", tmp_path / "n8.txt"
    p4.write_text(osu_text("60", "0.0012"))  # alpha 10 us, beta 0.8 ns/B on 4 workers
    p8.write_text(osu_text("140", "0.0014"))  # and on 8
    model = fit_tables([p4, p8], workers=[4, 8])
    assert [(f.workers, f.a_ns, f.b_ns_per_byte) for f in model.fits] == [(4, 60_000.0, 1.2), (8, 140_000.0, 1.4)]
    assert model.alpha_ns == pytest.approx(10_000, rel=1e-9) and model.beta_ns_per_byte == pytest.approx(0.8, rel=1e-9)


def test_fit_quality_is_r2_and_largest_relative_error(tmp_path):
    path = tmp_path / "noisy.csv"
    path.write_text("size,time_us\n0,1\n1,3\n2,3\n")
    (f,) = fit(read_table(path, workers=2)).fits
    # least squares: y = 4/3 + x; residuals -1/3, 2/3, -1/3; ss_tot = 8/3
    assert f.a_ns == pytest.approx(4000 / 3, rel=1e-15) and f.b_ns_per_byte == 1000.0
    assert f.r2 == pytest.approx(0.75, rel=1e-15)
    assert f.max_relative_error == pytest.approx(1 / 3, rel=1e-15)


def test_table2_is_inverted_exactly_enough():
    for algorithm in ("ring", "halving-doubling", "recursive-doubling", "binary-tree"):
        for n in (2, 3, 8, 64):
            cost = table2(algorithm, n, 7000.0, 0.5, 0.1)
            alpha, beta = point_to_point(algorithm, n, cost.a, cost.b, 0.1)
            assert alpha == pytest.approx(7000.0, rel=1e-12) and beta == pytest.approx(0.5, rel=1e-12)
    assert table2("ring", 8, 10.0, 1.0) == gp.AllReduceCost(140.0, 1.75)
    assert table2("tree", 8, 10.0, 1.0, 0.5) == gp.AllReduceCost(60.0, 7.5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("size,time_us\n1024,10\n2048,abc\n", ":3: time must be a number"),
        ("size,time_us\n1024,10\n-5,11\n", ":3: size (bytes) must not be negative"),
        ("size,time_us\n1024\n", ":2: expected at least 2 columns"),
        ("bytes,when\n1,2\n", ":1: header"),
        ("size,time_us,workers\n1,2,x\n", ":2: workers must be a whole number"),
        ("size,time_us\n1,2\n", ":2: no worker count"),
        ("# OSU MPI Allreduce Latency Test v7.3\n# Size  Avg Latency(us)\n4   1.5\noops\n", ":4: cannot read 'oops'"),
        ("# OSU MPI Broadcast Latency Test v7.3\n# Size  Avg Latency(us)\n4   1.5\n", ":1: this is the output of another OSU test"),
    ],
)
def test_malformed_tables_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(PlanError) as exc:
        fit_tables([path], workers=[] if "worker count" in message else [4])
    assert f"{path}" in str(exc.value) and message in str(exc.value)


def test_osu_output_needs_a_worker_count_and_two_sizes(tmp_path):
    path = tmp_path / "osu.txt"
    path.write_text(osu_text("140", "0.0015625"))
    with pytest.raises(PlanError, match="--workers"):
        fit_tables([path])
    path.write_text("# OSU MPI Allreduce Latency Test v7.3\n# Size  Avg Latency(us)\n4   1.5\n4   1.6\n")
    with pytest.raises(PlanError, match="two different message sizes"):
        fit_tables([path], workers=[4])


def test_cost_model_json_round_trip(tmp_path):
    model = fit(read_table(write_csv(tmp_path / "ar.csv")))
    model.save(tmp_path / "cost.json")
    assert CostModel.load(tmp_path / "cost.json") == model
    given = CostModel.from_dict({"algorithm": "halving-doubling", "alpha_ns": 2000, "beta_ns_per_byte": 0.4})
    assert given.allreduce(8) == table2("halving-doubling", 8, 2000, 0.4)
    (tmp_path / "bad.json").write_text('{"alpha_ns": 1, "beta": 2}')
    with pytest.raises(PlanError, match="unknown key"):
        CostModel.load(tmp_path / "bad.json")


def test_mg_wfbp_grouping_takes_a_given_cost():
    cost = gp.AllReduceCost(500_000.0, 0.25)
    sc = scenario_from_dict({"model": {"name": "resnet50"}, "workers": 4,
                             "strategy": {"kind": "ring", "grouping": {"kind": "mg-wfbp", "a": "500us", "b_ns_per_byte": 0.25}}})
    r = ddlsim.simulate(sc)
    model = build_model(sc.model)
    bwd = [b for _, b in layer_times_ns(model, sc.model)]
    expected = gp.engine_groups(gp.mg_wfbp(model, bwd, cost))
    assert gp.engine_groups(r.engine_document["training"]["groups"]) == expected
    assert len(expected) < len(gp.mg_wfbp(model, bwd, gp.AllReduceCost(0.0, 0.25)))
    with pytest.raises(ddlsim.ScenarioError, match="b_ns_per_byte"):
        scenario_from_dict({"strategy": {"kind": "ring", "grouping": {"kind": "mg-wfbp", "a": "5us"}}})


# ----------------------------------------------------------------- plan


@pytest.fixture(scope="module")
def resnet_plan():
    return make_plan(model="resnet50", workers=8, bandwidth="10Gbps", latency="10us", bucket_caps_mb=(1, 5, 25, 50))


def test_plan_predictions_equal_separate_simulations(resnet_plan):
    p = resnet_plan
    for c in [p.wfbp, p.synceasgd, p.ddp_default, p.mg_wfbp, *p.ddp_sweep]:
        assert ddlsim.simulate(p.scenario, grouping=c.grouping).iteration_time_s == c.iteration_time_s, c.label
    # WFBP, SyncEASGD and DDP through their own passes
    assert ddlsim.simulate(p.scenario).iteration_time_s == p.wfbp.iteration_time_s
    assert ddlsim.simulate(p.scenario, grouping="synceasgd").iteration_time_s == p.synceasgd.iteration_time_s
    assert ddlsim.simulate(p.scenario, grouping="ddp").iteration_time_s == p.ddp_default.iteration_time_s
    # MG-WFBP through the scenario pass on the same network (the planner used the network's cost)
    assert ddlsim.simulate(p.scenario, grouping="mg-wfbp").iteration_time_s == p.mg_wfbp.iteration_time_s
    # and from the JSON alone
    data = json.loads(json.dumps(p.to_dict()))
    for section in (data["mg_wfbp"], data["ddp"], *data["baselines"].values()):
        assert ddlsim.simulate(data["scenario"], grouping=section["grouping"]).iteration_time_s == section["iteration_time_s"]


def test_plan_reports_speedups_and_the_best_bucket(resnet_plan):
    p = resnet_plan
    assert [c.bucket_cap_mb for c in p.ddp_sweep] == [1, 5, 25, 50]
    assert p.best_ddp.iteration_time_s == min(c.iteration_time_s for c in p.ddp_sweep)
    s = p.speedups(p.mg_wfbp)
    assert s["wfbp"] == p.wfbp.iteration_time_s / p.mg_wfbp.iteration_time_s
    assert s["synceasgd"] == p.synceasgd.iteration_time_s / p.mg_wfbp.iteration_time_s
    assert s["ddp_default"] == p.ddp_default.iteration_time_s / p.mg_wfbp.iteration_time_s
    assert p.ddp_default.bucket_cap_mb == 25 and p.ddp_default.grouping == {"kind": "ddp", "bucket_cap_mb": 25}
    # merged gradients beat one all-reduce per tensor here (161 tensors, 70 us startup per all-reduce)
    assert s["wfbp"] > 1 and s["synceasgd"] > 1
    assert p.simulations == len({frozenset(frozenset(g["tensors"]) for g in c.groups)
                                 for c in [p.wfbp, p.synceasgd, p.ddp_default, p.mg_wfbp, *p.ddp_sweep]}) + len(p.p3_sweep) + len(p.bytescheduler_sweep)
    assert len(p.bytescheduler_sweep) == 1 and p.best_bytescheduler.credit_bytes == 16_000_000  # ByteScheduler's default
    assert p.scenario.iterations == 1 and p.scenario.trace_detail == "collective"


def _ddp_buckets_given_a_cap(sizes_in_ready_order, cap_bytes):
    """Oracle, written apart from ddlsim's grouping: DDP given bucket_cap_mb (torch/nn/parallel/distributed.py keeps
    its small first bucket for the default only) appends tensors in ready order to the open bucket and closes it as
    soon as it holds at least the cap."""
    buckets, open_, held = [], [], 0
    for i, size in enumerate(sizes_in_ready_order):
        open_.append(i)
        held += size
        if held >= cap_bytes:
            buckets.append(open_)
            open_, held = [], 0
    return buckets + ([open_] if open_ else [])


def test_a_plan_without_a_capture_builds_ddps_buckets_for_a_given_cap_as_torch_does(resnet_plan):
    """The plan's ddp_kwargs pass bucket_cap_mb, so each swept size is DDP's buckets with the first as large as the
    others; only DDP's default (no bucket_cap_mb) has the 1 MiB first bucket. Before, every swept size had the 1 MiB
    first bucket, so the plan simulated buckets its own ddp_kwargs do not build (ResNet-50 at 25 MB: 5 planned, 4
    built; at 50 MB: 3 planned, 2 built)."""
    p = resnet_plan
    tensors = list(reversed(p.model.tensors))  # ready order: the last layer's gradients first
    last = len(tensors) - 1
    for c in p.ddp_sweep:
        want = sorted(sorted(last - i for i in b) for b in _ddp_buckets_given_a_cap([t.bytes for t in tensors],
                                                                                     int(c.bucket_cap_mb * 1024 * 1024)))
        assert sorted(sorted(g["tensors"]) for g in c.groups) == want, c.bucket_cap_mb
        assert ddlsim.simulate(p.scenario, grouping=c.grouping).iteration_time_s == c.iteration_time_s
    assert p.ddp_default.groups == gp.ddp(p.model)
    assert any(n.startswith("DDP's buckets for each bucket_cap_mb: the first as large") for n in p.notes)


def test_the_plan_says_when_ddps_default_beats_every_bucket_cap_it_swept(resnet_plan):
    p = resnet_plan
    default_wins = p.ddp_default.iteration_time_s < p.best_ddp.iteration_time_s
    said = [n for n in p.notes if n.startswith("DDP's default (1 MiB first bucket")]
    assert bool(said) == default_wins
    one = make_plan(model="resnet50", workers=8, bandwidth="10Gbps", latency="10us", bucket_caps_mb=(100,),
                    slice_bytes=(), credit_bytes=())
    # one bucket of all 102 MB after the backward pass against DDP's default's 5 overlapping ones
    assert one.ddp_default.iteration_time_s < one.best_ddp.iteration_time_s
    assert any(n.startswith("DDP's default (1 MiB first bucket") and n.endswith("give DDP no bucket_cap_mb")
               for n in one.notes)


def test_torch_gives_a_given_bucket_cap_no_small_first_bucket(tmp_path):
    """The rule the planner assumes without a capture, checked on the torch installed here."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
        default, given = DistributedDataParallel(module), DistributedDataParallel(module, bucket_cap_mb=5)
        if not hasattr(given, "bucket_bytes_cap_default"):
            pytest.skip("this torch does not expose whether it uses the small first bucket")
        assert default.bucket_bytes_cap_default and not given.bucket_bytes_cap_default
    finally:
        dist.destroy_process_group()


def test_plan_ddp_json_configures_ddp_and_round_trips(resnet_plan):
    p = resnet_plan
    data = json.loads(json.dumps(p.to_dict()))
    ddp = data["ddp"]
    model = p.model
    names = [t.name for t in model.tensors]
    assert ddp["parameter_order"] == names and ddp["ddp_kwargs"] == {"bucket_cap_mb": ddp["bucket_cap_mb"]}
    # DDP's own assignment: reverse registration order, limits [1 MiB, cap MiB]
    sizes = [t.bytes for t in model.tensors][::-1]
    cap = int(ddp["bucket_cap_mb"] * 1024 * 1024)
    expected = [[len(names) - 1 - i for i in b] for b in gp.ddp_bucket_assignment(sizes, [1024 * 1024, cap])]
    assert [b["parameter_indices"] for b in ddp["buckets"]] == expected
    assert [b["tensors"] for b in ddp["buckets"]] == [[names[i] for i in b] for b in expected]
    assert [b["index"] for b in ddp["buckets"]] == list(range(len(expected)))
    # the bucket membership by name, given back as a scenario grouping, reproduces DDP's groups
    by_name = ddlsim.simulate(data["scenario"], grouping={"kind": "groups", "groups": [b["tensors"] for b in ddp["buckets"]]})
    by_cap = ddlsim.simulate(data["scenario"], grouping={"kind": "ddp", "bucket_cap_mb": ddp["bucket_cap_mb"]})
    strip = lambda gs: [{k: v for k, v in g.items() if k != "kind"} for g in gs]  # noqa: E731
    assert strip(by_name.engine_document["training"]["groups"]) == strip(by_cap.engine_document["training"]["groups"])
    assert by_name.iteration_time_s == by_cap.iteration_time_s == ddp["iteration_time_s"]
    # the MG-WFBP plan by name covers every tensor once, forward order
    plan_names = [n for g in data["mg_wfbp"]["plan"] for n in g["tensors"]]
    assert sorted(plan_names) == sorted(names) and len(plan_names) == len(names)


def test_plan_with_a_cost_model_sets_the_network_and_the_planner(tmp_path):
    cost = CostModel("ring", alpha_ns=250_000.0, beta_ns_per_byte=0.8)  # a slow start-up: merging pays
    p = make_plan(model="resnet50", workers=4, cost_model=cost, bucket_caps_mb=(25,))
    assert p.scenario.network.latency_ns == 250_000 and p.scenario.network.bandwidth_bps == pytest.approx(1e10)
    assert p.cost == table2("ring", 4, 250_000.0, 0.8)
    model = p.model
    bwd = [b for _, b in layer_times_ns(model, p.scenario.model)]
    assert p.mg_wfbp.groups == gp.mg_wfbp(model, bwd, p.cost)
    assert len(p.mg_wfbp.groups) < len(gp.mg_wfbp(model, bwd, gp.AllReduceCost(0.0, 0.6)))
    assert p.mg_wfbp.iteration_time_s < p.wfbp.iteration_time_s


def test_plan_rejects_what_it_cannot_plan():
    with pytest.raises(PlanError, match="ring"):
        make_plan(model="lenet5", workers=4, strategy="ps")
    with pytest.raises(PlanError, match="2 workers"):
        make_plan(model="lenet5", workers=1)
    with pytest.raises(PlanError, match="bucket caps"):
        make_plan(model="lenet5", workers=2, bucket_caps_mb=(0,))


# ----------------------------------------------------------------- synthetic models


def test_thesis_simulator_profile_exact_values():
    sc = scenario_from_dict({"model": {"name": "synthetic", "synthetic": {"profile": "thesis-simulator"}}})
    model = build_model(sc.model)
    times = layer_times_ns(model, sc.model)
    assert len(times) == 100
    # forward (L - l) x 2F / (L (L + 1)) = (100 - l) x 59,405.94 ns; backward l x 2B / (L (L - 1)) = l x 121,212.12 ns,
    # each the difference of the running sum rounded to the ns
    assert times[0] == (5_940_594, 0) and times[99] == (59_406, 12_000_000)
    assert times[1] == (5_881_188, 121_212) and times[50] == (2_970_297, 6_060_607)
    elements = [layer.tensors[0].elements for layer in model.layers]
    assert set(elements[:50]) == {55_555, 55_556} and set(elements[50:75]) == {222_222}
    assert set(elements[75:]) == {666_667} and elements[:50].count(55_556) == 25
    assert model.size_bytes == 100_000_000
    assert sum(f for f, _ in times) == 300_000_000 and sum(b for _, b in times) == 600_000_000
    # the same through the Python API
    direct = ddlsim.thesis_simulator_model()
    assert [(x.fwd_s, x.bwd_s) for x in direct.layers] == [(x.fwd_s, x.bwd_s) for x in model.layers]


def test_thesis_simulator_profile_scales_and_refuses_foreign_options():
    m = ddlsim.thesis_simulator_model(layers=8, model_size_bytes=9 * 8 * 4 * 10, compute_s=0.0112)
    # F = 3,733,333.3 ns over 36 steps of 103,703.7 ns; B = 7,466,666.7 ns over 28 steps of 266,666.7 ns
    fwd = [round(x.fwd_s * 1e9) for x in m.layers]
    bwd = [round(x.bwd_s * 1e9) for x in m.layers]
    assert sum(fwd) == 3_733_333 and sum(bwd) == 7_466_667
    assert all(abs(f - (8 - l) * 3_733_333.3333 / 36) < 1 for l, f in enumerate(fwd))
    assert all(abs(b - l * 7_466_666.6667 / 28) < 1 for l, b in enumerate(bwd))
    assert [x.tensors[0].elements for x in m.layers] == [20] * 4 + [80] * 2 + [240] * 2
    with pytest.raises(ddlsim.ScenarioError, match="size_distribution"):
        scenario_from_dict({"model": {"synthetic": {"profile": "thesis-simulator", "size_distribution": "uniform"}}})
    with pytest.raises(ddlsim.ModelError, match="model_size"):
        ddlsim.thesis_simulator_model(layers=100, model_size_bytes=1000)


def test_default_synthetic_backward_rises_with_the_layer_index():
    m = ddlsim.synthetic_model()
    fwd = [x.fwd_s for x in m.layers]
    bwd = [x.bwd_s for x in m.layers]
    assert all(b2 > b1 for b1, b2 in zip(bwd, bwd[1:]))  # thesis §4.4: rises in back-propagation
    assert all(f2 < f1 for f1, f2 in zip(fwd, fwd[1:]))  # and falls in forward propagation
    assert bwd[-1] == pytest.approx(2 * bwd[0]) and bwd[0] == pytest.approx(2 * fwd[-1])
    assert sum(bwd) == pytest.approx(2 * sum(fwd), rel=1e-12)


# ----------------------------------------------------------------- CLI


def test_cli_fit_osu_json_and_table(tmp_path):
    path = tmp_path / "osu.txt"
    path.write_text(osu_text("140", "0.0015625"))
    p = cli("fit", str(path), "--workers", "8", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["fits"][0]["a_ns"] == 140_000.0 and data["fits"][0]["b_ns_per_byte"] == 1.5625
    assert data["alpha_ns"] == 10_000.0 and data["algorithm"] == "ring"
    out = tmp_path / "cost.json"
    p = cli("fit", str(path), "-n", "8", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "R²" in p.stdout and "1.000000" in p.stdout and "0.00%" in p.stdout
    assert CostModel.load(out).fits[0].a_ns == 140_000.0


def test_cli_fit_bad_input_errors_without_traceback(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("size,time_us,workers\n1024,10,8\n2048,ten,8\n")
    p = cli("fit", str(path))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{path}:3" in p.stderr.replace("\n", "") and "must be a number" in p.stderr
    p = cli("fit", str(tmp_path / "missing.txt"))
    assert p.returncode == 2 and "Traceback" not in p.stderr and "not found" in p.stderr
    p = cli("fit", str(path), "--algorithm", "butterfly")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "unknown all-reduce algorithm" in p.stderr


def test_cli_plan_writes_json_and_prints_a_table(tmp_path):
    osu = tmp_path / "osu.txt"
    osu.write_text(osu_text("60", "0.0012"))  # 4 workers: alpha 10 us, beta 0.8 ns/B (10 Gbit/s)
    assert cli("fit", str(osu), "-n", "4", "-o", str(tmp_path / "cost.json")).returncode == 0
    out = tmp_path / "plan.json"
    p = cli("plan", "--model", "resnet50", "--workers", "4", "--cost-model", str(tmp_path / "cost.json"),
            "--bucket-caps", "5,25", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "MG-WFBP" in p.stdout and "SyncEASGD" in p.stdout and "best DDP: bucket_cap_mb=" in p.stdout
    data = json.loads(out.read_text())
    assert data["cluster"]["workers"] == 4 and data["cluster"]["latency_ns"] == 10_000
    assert data["cluster"]["bandwidth_bps"] == pytest.approx(1e10)
    assert data["cluster"]["allreduce_a_ns"] == 60_000.0 and data["cluster"]["allreduce_b_ns_per_byte"] == 1.2
    assert [s["bucket_cap_mb"] for s in data["ddp"]["sweep"]] == [5, 25]
    r = ddlsim.simulate(data["scenario"], grouping=data["mg_wfbp"]["grouping"])
    assert r.iteration_time_s == data["mg_wfbp"]["iteration_time_s"]
    p = cli("plan", "--model", "lenet5", "--workers", "2", "--bucket-caps", "1", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["model"]["name"] == "lenet5"
    assert p.stderr == ""  # no progress bar when stderr is not a terminal


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "resnet51"], "unknown model"),
        (["--model", "lenet5", "--cost-model", "nope.json"], "not found"),
        (["--model", "lenet5", "--bucket-caps", "a,b"], "--bucket-caps"),
        (["--model", "lenet5", "--cost-model", "x.json", "--bandwidth", "1Gbps"], "--cost-model"),
        (["--model", "lenet5", "--bandwidth", "10"], "bandwidth"),
    ],
)
def test_cli_plan_bad_input_errors_without_traceback(tmp_path, args, message):
    p = cli("plan", *args, cwd=tmp_path)
    assert p.returncode == 2, p.stdout
    assert "Traceback" not in p.stderr and message in p.stderr


def test_plan_from_a_scenario_file_with_a_relative_profile(tmp_path):
    model = ddlsim.load_model("lenet5")
    rows = ["layer,fwd_ms,bwd_ms"] + [f"{layer.name},{1 + i},{2 + 3 * i}" for i, layer in enumerate(model.layers)]
    (tmp_path / "prof.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "job.toml").write_text('workers = 4\n[model]\nname = "lenet5"\nprofile = "prof.csv"\n'
                                       '[network]\nbandwidth = "1Gbps"\nlatency = "50us"\n')
    p = cli("plan", str(tmp_path / "job.toml"), "--bucket-caps", "1", "--json", cwd="/")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["scenario"]["model"]["profile"] == str((tmp_path / "prof.csv").resolve())
    sc = scenario_from_dict(data["scenario"])
    assert layer_times_ns(build_model(sc.model), sc.model)[1] == (2_000_000, 5_000_000)
    assert data["cluster"]["workers"] == 4 and data["cluster"]["latency_ns"] == 50_000
    r = ddlsim.simulate(data["scenario"], grouping=data["mg_wfbp"]["grouping"])
    assert r.iteration_time_s == data["mg_wfbp"]["iteration_time_s"]


@pytest.mark.parametrize("algorithm", ["ring", "halving-doubling"])
@pytest.mark.parametrize("workers", [2, 8])
def test_the_network_of_a_cost_model_reproduces_its_line_in_the_simulator(algorithm, workers):
    cm = CostModel(algorithm, alpha_ns=10_000, beta_ns_per_byte=0.8)
    for nbytes in (4_000, 4_000_000):
        sc = {"model": {"name": "one", "layers": [{"name": "l", "params": nbytes // 4, "fwd_ms": 0, "bwd_ms": 0}]},
              "workers": workers, "iterations": 1}
        r = ddlsim.simulate(sc, **cm.network(workers))
        assert r.iteration_time_s * 1e9 == pytest.approx(cm.allreduce(workers)(nbytes), rel=1e-12)


def test_fit_out_into_a_missing_directory_fails_clearly_and_writes_nothing(tmp_path):
    osu = Path(__file__).resolve().parent.parent / "examples" / "osu_allreduce_8nodes.txt"
    run = cli("fit", str(osu), "--workers", "8", "--out", str(tmp_path / "missing" / "cost.json"))
    assert run.returncode == 2 and "does not exist" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "missing").exists()


def test_a_plan_file_is_the_same_bytes_for_the_same_inputs(tmp_path):
    # before: plan.json held the planning's wall time (wall_s), different in every run
    outs = [tmp_path / f"plan{k}.json" for k in range(2)]
    for out in outs:
        assert cli("plan", "--model", "lenet5", "--workers", "2", "--network", "analytic", "--bucket-caps", "1,5",
                   "--out", str(out)).returncode == 0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert "wall_s" not in json.loads(outs[0].read_text())
