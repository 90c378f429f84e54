"""Workload what-ifs (network-operator paper §4, §8.5, §8.6) and the
shape-arithmetic layer tables (ResNet-200, Inception-v3 modules)."""

import json
from importlib import resources

import numpy as np
import pytest

import ddlsim
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.workload.growth import grow, module_layers
from ddlsim.workload.shapes import inception_a, inception_c, resnet_bottleneck
from ddlsim.workload.zoo import load_model


def zoo_layers(name):
    return json.loads(resources.files("ddlsim.data.models").joinpath(f"{name}.json").read_text())["layers"]


@pytest.mark.parametrize("name, blocks", [("resnet50", [3, 4, 6, 3]), ("resnet101", [3, 4, 23, 3]), ("resnet152", [3, 8, 36, 3])])
def test_shape_arithmetic_reproduces_the_torch_generated_resnets(name, blocks):
    assert resnet_bottleneck(blocks) == zoo_layers(name)


def test_shape_arithmetic_reproduces_the_inception_v3_modules():
    layers = zoo_layers("inception_v3")
    assert inception_a("Mixed_5d") == [x for x in layers if x["name"].startswith("Mixed_5d.")]
    assert inception_c("Mixed_6e") == [x for x in layers if x["name"].startswith("Mixed_6e.")]


def test_resnet200_in_the_zoo():
    m = load_model("ResNet-200")
    assert m.parameters == 64_673_832  # "ResNet-200 has 64.7 M parameters"
    assert len(m.tensors) == 611 and len(m.layers) == 407
    assert zoo_layers("resnet200") == resnet_bottleneck([3, 24, 36, 3])
    assert m.fwd_flops == 30_014_963_712


def test_stagger_delays_backprop_by_exactly_the_skew():
    kw = dict(model="lenet5", workers=4, iterations=1, strategy="ps", servers=1)
    base, skew = ddlsim.simulate(**kw).events.to_pandas(), ddlsim.simulate(stagger="3ms", **kw).events.to_pandas()
    first = lambda ev: ev[(ev["op"] == "backward")].groupby("rank")["start_ns"].min()
    np.testing.assert_array_equal((first(skew) - first(base)).to_numpy(), [0, 3_000_000, 6_000_000, 9_000_000])
    # Forward passes (before the skew) are untouched.
    fwd = lambda ev: ev[ev["op"] == "forward"][["rank", "layer", "start_ns", "end_ns"]].to_numpy()
    np.testing.assert_array_equal(fwd(base), fwd(skew))


def test_random_stagger_leaves_the_jitter_draws_unchanged():
    kw = dict(model="lenet5", workers=4, iterations=2, jitter=0.3, seed=5)
    a = ddlsim.simulate(**kw).events.to_pandas()
    b = ddlsim.simulate(stagger="2ms", stagger_mode="random", **kw).events.to_pandas()
    dur = lambda ev: sorted(map(tuple, ev[ev["op"].isin(["forward", "backward"])][["rank", "iteration", "layer", "op"]]
                                .assign(d=ev["end_ns"] - ev["start_ns"]).to_numpy().tolist()))
    assert dur(a) == dur(b)
    st = b[b["op"] == "stagger"]
    assert len(st) > 0 and ((st["end_ns"] - st["start_ns"]) <= 2_000_000).all()
    assert (st["end_ns"] - st["start_ns"]).nunique() > 1


@pytest.mark.parametrize("kinds", [["Conv"], ["Linear"], ["Conv", "Linear"]])
def test_faster_compute_scales_exactly_the_chosen_layer_kinds(kinds):
    base_cfg = scenario_from_dict({"model": {"name": "resnet50"}}).model
    fast_cfg = scenario_from_dict({"model": {"name": "resnet50", "compute_speedup": 2.5, "speedup_kinds": kinds}}).model
    model = build_model(base_cfg)
    base, fast = layer_times_ns(model, base_cfg), layer_times_ns(model, fast_cfg)
    for layer, (f0, b0), (f1, b1) in zip(model.layers, base, fast):
        if any(layer.type.startswith(k) for k in kinds):
            assert abs(f1 - f0 / 2.5) <= 1 and abs(b1 - b0 / 2.5) <= 1
        else:
            assert (f1, b1) == (f0, b0)


@pytest.mark.parametrize("model, kinds", [("lenet5", ["Convv"]), ("bert_base", ["Conv"]), ("resnet50", ["BatchNorm3d", "Pool3d"])])
def test_a_speedup_that_would_change_no_layer_is_refused(model, kinds):
    # before: a kind no layer has (a typo, a model without convolutions) ran as if no speedup were asked for
    from ddlsim.errors import ScenarioError

    with pytest.raises(ScenarioError, match=rf"no layer of {model} has such a type \(its types: .*\); set model.speedup_kinds"):
        ddlsim.simulate(model=model, workers=2, iterations=1, network="analytic", compute_speedup=2.0, speedup_kinds=kinds)
    # one kind that matches is enough; without a speedup the kinds are not read
    ddlsim.simulate(model=model, workers=2, iterations=1, network="analytic", speedup_kinds=kinds)
    ddlsim.simulate(model=model, workers=2, iterations=1, network="analytic", compute_speedup=2.0,
                    speedup_kinds=[*kinds, "L"])


def test_faster_compute_in_a_run():
    base = ddlsim.simulate(model="resnet50", workers=2, iterations=1, network="analytic").events.to_pandas()
    fast = ddlsim.simulate(model="resnet50", workers=2, iterations=1, network="analytic", compute_speedup=2.0).events.to_pandas()
    conv = [i for i, layer in enumerate(load_model("resnet50").layers) if layer.type == "Conv2d"]
    d = lambda ev: ev[(ev["op"] == "forward") & (ev["rank"] == 0)].set_index("layer").eval("end_ns - start_ns")
    db, df = d(base), d(fast)
    for l in db.index:
        if l in conv:
            assert abs(df[l] - db[l] / 2) <= 1
        else:
            assert df[l] == db[l]


@pytest.mark.parametrize("module, anchor, params, flops", [
    ("inception-35x35x288", "Mixed_5d", 285_152, 696_192_000),
    ("inception-17x17x768", "Mixed_6e", 2_141_952, 1_235_828_736),
])
def test_synthetic_growth_adds_exactly_k_modules(module, anchor, params, flops):
    # params / FLOPs by hand: InceptionA(288, 64) convs hold 284,160 weights (+ 992 BN), 2 x 35 x 35 FLOPs each;
    # InceptionC(768, 192) 4 x 768 x 192 + 6 x 192 x 192 x 7 = 2,138,112 weights (+ 3,840 BN), 2 x 17 x 17 FLOPs each.
    base = load_model("inception_v3")
    one = module_layers(module, "x")
    assert sum(t.elements for layer in one for t in layer.tensors) == params
    assert sum(layer.fwd_flops for layer in one) == flops
    # the module equals the model's own block of that shape
    own = [layer for layer in base.layers if layer.name.startswith(anchor + ".")]
    assert [(l.type, [t.elements for t in l.tensors], l.fwd_flops, l.bwd_flops) for l in own] == \
           [(l.type, [t.elements for t in l.tensors], l.fwd_flops, l.bwd_flops) for l in one]
    for k in (1, 3):
        grown = grow(base, module, k)
        assert grown.parameters == base.parameters + k * params
        assert grown.fwd_flops == base.fwd_flops + k * flops
        assert len(grown.layers) == len(base.layers) + k * len(one)
        last = max(i for i, layer in enumerate(base.layers) if layer.name.startswith(anchor + "."))
        assert [l.name for l in grown.layers[last + 1:last + 1 + k * len(one)]][0].startswith("grow0.")
        assert grown.layers[last + 1 + k * len(one)].name == base.layers[last + 1].name


def test_growth_through_the_scenario_and_elsewhere():
    r = ddlsim.simulate(model="inception_v3", workers=2, iterations=1, grow_module="compute", grow_count=2)
    assert r.model.parameters == 27_161_264 + 2 * 285_152
    # A model without the anchor block: the modules go before its classifier.
    g = grow(load_model("resnet50"), "network", 1)
    assert g.layers[-1].name == "fc" and g.layers[-2].name.startswith("grow0.")
    with pytest.raises(ddlsim.ScenarioError, match="grow_module"):
        ddlsim.simulate(model="lenet5", grow_count=2)
