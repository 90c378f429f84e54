"""Parameter-server variants of the network-operator paper (§9) through
the Python API, the scenario files and the CLI."""

import json
import math

import numpy as np
import forked_cli
import pytest

import ddlsim
from ddlsim.simulation.lowering import place_tensors
from ddlsim.workload.zoo import load_model


def frame(run):
    return run.events.to_pandas()


def conserved(run):
    assert sum(run.stats["bytes_sent"]) == sum(run.stats["bytes_received"]) > 0


# Table 7 of the paper: (model, servers) -> (min share, max share, ideal share), round-robin placement.
TABLE7 = {
    ("vgg16", 4): (4e-5, 0.918, 0.25), ("vgg16", 8): (1e-5, 0.859, 0.125),
    ("inception_v3", 4): (0.0007, 0.451, 0.25), ("inception_v3", 8): (0.0003, 0.292, 0.125),
    ("resnet200", 4): (0.165, 0.33, 0.25), ("resnet200", 8): (0.002, 0.22, 0.125),
}
# Ours (torchvision variables: weights and BN weight/bias, no BN running statistics).
OURS = {
    ("vgg16", 4): (5e-5, 0.821), ("vgg16", 8): (1e-5, 0.764),
    ("inception_v3", 4): (0.186, 0.323), ("inception_v3", 8): (0.078, 0.181),
    ("resnet200", 4): (0.234, 0.268), ("resnet200", 8): (0.107, 0.140),
}


def shares(model, servers, placement="round-robin"):
    sizes = [t.bytes for t in load_model(model).tensors]
    load = [0] * servers
    for size, s in zip(sizes, place_tensors(sizes, servers, placement)):
        load[s] += size
    return [x / sum(sizes) for x in load]


@pytest.mark.parametrize("model, servers", sorted(TABLE7))
def test_round_robin_placement_shares_against_table7(model, servers):
    lo, hi, ideal = TABLE7[model, servers]
    got = shares(model, servers)
    assert 1 / servers == ideal
    assert min(got) == pytest.approx(OURS[model, servers][0], rel=0.05, abs=5e-6)
    assert max(got) == pytest.approx(OURS[model, servers][1], abs=5e-4)
    assert min(got) <= ideal <= max(got)
    if model == "vgg16":
        # Same model: the fully connected layer dominates one server, the least loaded holds almost nothing.
        assert min(got) < 1e-4 and lo < 1e-4
        assert max(got) == pytest.approx(hi, abs=0.1)


@pytest.mark.parametrize("servers", [4, 8])
def test_round_robin_imbalance_ranks_models_as_table7(servers):
    # max / ideal: VGG-16 > Inception-v3 > ResNet-200 in the paper and here.
    ours = [max(shares(m, servers)) * servers for m in ("vgg16", "inception_v3", "resnet200")]
    paper = [TABLE7[m, servers][1] * servers for m in ("vgg16", "inception_v3", "resnet200")]
    assert ours == sorted(ours, reverse=True) and paper == sorted(paper, reverse=True)


@pytest.mark.parametrize("model", ["vgg16", "resnet50"])
def test_split_placement_balances_bytes_within_one_tensors_rounding(model):
    r = ddlsim.simulate(model=model, workers=2, iterations=1, strategy="ps", servers=8, placement="split",
                        network="analytic")
    conserved(r)
    ev = frame(r)
    push = ev[(ev["op"] == "push_request") & (ev["kind"] == "send") & (ev["rank"] == 0)]
    per_server = push.groupby("peer")["bytes"].sum()
    assert len(per_server) == 8
    tensors = len(load_model(model).tensors)
    assert per_server.sum() == load_model(model).size_bytes
    # Each tensor's bytes split evenly: a server gets at most one byte more per tensor than another.
    assert per_server.max() - per_server.min() <= tensors
    # Round-robin for contrast.
    rr = shares(model, 8)
    assert max(rr) - min(rr) > 0.01


def pull_sends(r, server_rank, iteration=0):
    ev = frame(r)
    s = ev[(ev["op"] == "pull_response") & (ev["kind"] == "send") & (ev["rank"] == server_rank) & (ev["iteration"] == iteration)]
    return s.sort_values(["start_ns", "id"])


def test_block_and_round_robin_distribution_order_in_the_log():
    kw = dict(model="lenet5", workers=3, iterations=2, strategy="ps", servers=1, bandwidth="1Gbps")
    rr = pull_sends(ddlsim.simulate(distribution="round-robin", **kw), 3)
    block = pull_sends(ddlsim.simulate(distribution="block", **kw), 3)
    tensors = len(load_model("lenet5").tensors)
    assert len(rr) == len(block) == 3 * tensors
    # round-robin: one parameter to every worker, in model order; block: the whole model to worker 0 first.
    assert rr["peer"].tolist() == [0, 1, 2] * tensors
    assert rr["tensor"].tolist() == [t for t in range(tensors) for _ in range(3)]
    assert block["peer"].tolist() == [w for w in range(3) for _ in range(tensors)]
    assert block["tensor"].tolist() == list(range(tensors)) * 3
    # One send at a time per server.
    for s in (rr, block):
        assert (s["start_ns"].to_numpy()[1:] >= s["end_ns"].to_numpy()[:-1]).all()


def test_ordered_distribution_waits_for_the_server_barrier_and_pipelines_the_forward():
    r = ddlsim.simulate(model="lenet5", workers=2, iterations=2, strategy="ps", servers=2, distribution="round-robin")
    conserved(r)
    ev = frame(r)
    it0 = ev[ev["iteration"] == 0]
    last_update = it0[it0["op"] == "update"]["end_ns"].max()
    first_pull = it0[(it0["op"] == "pull_response") & (it0["kind"] == "send")]["start_ns"].min()
    assert first_pull >= last_update
    recv = it0[(it0["op"] == "pull_response") & (it0["kind"] == "recv")]
    fwd1 = ev[(ev["op"] == "forward") & (ev["iteration"] == 1)]
    arrived = recv.groupby(["rank", "layer"])["end_ns"].max()
    for _, row in fwd1.iterrows():
        if (row["rank"], row["layer"]) in arrived.index:
            assert row["start_ns"] >= arrived[(row["rank"], row["layer"])]
    # The first layer starts before the last layer's parameters arrived.
    w0 = fwd1[fwd1["rank"] == 0]
    assert w0[w0["layer"] == 0]["start_ns"].iloc[0] < arrived[0].max()


def test_message_pipelining_for_ps():
    r = ddlsim.simulate(model="vgg16", workers=2, iterations=1, strategy="ps", servers=2, chunk_bytes=4 << 20,
                        network="analytic")
    conserved(r)
    ev = frame(r)
    push = ev[(ev["op"] == "push_request") & (ev["kind"] == "send") & (ev["rank"] == 0)]
    assert push["bytes"].max() <= 4 << 20
    assert push["bytes"].sum() == load_model("vgg16").size_bytes
    sizes = [t.bytes for t in load_model("vgg16").tensors]
    assert len(push) == sum(max(1, math.ceil(b / (4 << 20))) for b in sizes)


def test_asynchronous_ps_with_staleness_bound():
    kw = dict(model="lenet5", workers=3, iterations=5, strategy="ps", servers=1, asynchronous=True,
              stagger="2ms", jitter=0.1, seed=3)
    free = frame(ddlsim.simulate(**kw))
    starts = free[(free["op"] == "forward") & (free["layer"] == 0)].pivot(index="iteration", columns="rank", values="start_ns")
    assert starts[0].iloc[-1] < starts[2].iloc[2]  # worker 0 runs far ahead of the slow worker 2
    for s in (0, 1):
        r = ddlsim.simulate(staleness=s, **kw)
        conserved(r)
        ev = frame(r)
        done = ev[ev["op"] == "update"].groupby("iteration")["end_ns"].max()
        starts = ev[(ev["op"] == "forward") & (ev["layer"] == 0)]
        for _, row in starts.iterrows():
            if row["iteration"] > s:
                assert row["start_ns"] >= done[row["iteration"] - s - 1]


def test_gamma_adds_exactly_its_per_byte_reduction_cost():
    kw = dict(model="lenet5", workers=4, iterations=1, strategy="ps", servers=1)
    base = ddlsim.simulate(**kw).engine_document["training"]["groups"]
    gamma = ddlsim.simulate(gamma_ns_per_byte=2.0, **kw).engine_document["training"]["groups"]
    bw = 20e9  # the default update bandwidth, bytes/s
    for b, g in zip(base, gamma):
        assert b["update_ns"] == math.ceil(b["bytes"] * 4 / bw * 1e9)
        assert g["update_ns"] == math.ceil(b["bytes"] * 4 / bw * 1e9 + 3 * b["bytes"] * 2.0)


def test_same_seed_same_log_with_every_variant():
    kw = dict(model="lenet5", workers=4, iterations=2, strategy="ps", servers=2, placement="split", chunk_bytes=4096,
              distribution="block", jitter=0.2, stagger="1ms", stagger_mode="random", seed=11)
    a, b = frame(ddlsim.simulate(**kw)), frame(ddlsim.simulate(**kw))
    for col in ("start_ns", "end_ns", "rank", "op", "bytes"):
        np.testing.assert_array_equal(a[col].to_numpy(), b[col].to_numpy())
    c = frame(ddlsim.simulate(**{**kw, "seed": 12}))
    assert not np.array_equal(a["end_ns"].to_numpy(), c["end_ns"].to_numpy())


def test_scenario_file_and_errors(tmp_path):
    p = tmp_path / "ps.toml"
    p.write_text('workers = 2\niterations = 1\nstagger = "1ms"\n[model]\nname = "lenet5"\n'
                 '[strategy]\nkind = "ps"\nservers = 2\nplacement = "split"\ndistribution = "block"\nchunk_bytes = 8192\n')
    r = ddlsim.simulate(str(p))
    assert r.engine_document["training"]["ps_split"] and r.engine_document["training"]["distribution"] == "block"
    assert r.engine_document["training"]["stagger_ns"] == 1_000_000
    with pytest.raises(ddlsim.ScenarioError, match="asynchronous"):
        ddlsim.simulate(model="lenet5", strategy="ps", staleness=2)
    with pytest.raises(ddlsim.ScenarioError, match="distribution"):
        ddlsim.simulate(model="lenet5", strategy="ps", asynchronous=True, distribution="block")


def test_cli_flags():
    p = forked_cli.run(["simulate", "--model", "lenet5", "--workers", "3", "--iterations", "1", "--strategy", "ps", "--servers", "2", "--placement", "split", "--distribution", "round-robin", "--gamma", "1.5", "--stagger", "1ms", "--json"])
    assert p.returncode == 0, p.stderr
    sc = json.loads(p.stdout)["scenario"]
    assert sc["strategy"]["placement"] == "split" and sc["strategy"]["distribution"] == "round-robin"
    assert sc["strategy"]["gamma_ns_per_byte"] == 1.5 and sc["stagger"] == "1ms"
    p = forked_cli.run(["simulate", "--model", "lenet5", "--workers", "3", "--iterations", "2", "--strategy", "ps", "--async", "--staleness", "1", "--json"])
    assert p.returncode == 0, p.stderr
    sc = json.loads(p.stdout)["scenario"]
    assert sc["strategy"]["asynchronous"] is True and sc["strategy"]["staleness"] == 1
