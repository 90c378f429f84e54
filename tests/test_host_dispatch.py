"""The host side of the roofline compute model (docs/compute-model.md, "Host
dispatch"): the host/GPU max-plus recurrence in closed forms derived on paper
(host-bound, device-bound, mixed), the per-call host costs from the host
microbenchmark's JSON, and the per-layer call counts of the zoo CNNs."""

import dataclasses
import random

import pytest

from ddlsim.workload import roofline
from ddlsim.workload.devices import MICROBENCH, HostDispatch, host_dispatch_from_benchmark
from ddlsim.workload.zoo import load_model

KINDS = ["conv2d", "batchnorm2d", "relu_module", "maxpool2d", "adaptive_avgpool2d", "dropout", "linear",
         "identity_module", "relu_fn", "add_inplace", "cat", "view", "op"]


# --- the max-plus recurrence -------------------------------------------------------------------------------------

def test_host_bound_pipeline_is_the_host_clock_plus_the_last_kernel():
    # every launch takes longer than the kernel before it (h_(i+1) >= g_i): the GPU always waits for the host, so
    # G_i = H_i + g_i: with H = 3, 6, 9, 12 (+ start 5): G = 9, 13, 15, 19
    h, g = [3, 3, 3, 3], [1, 2, 1, 2]
    assert roofline.pipeline(list(zip(h, g)), 5) == [9, 13, 15, 19]
    assert roofline.pipeline(list(zip(h, g)))[-1] == sum(h) + g[-1]


def test_device_bound_pipeline_is_the_first_launch_plus_all_kernels():
    # every kernel takes longer than the next launch (g_i >= h_(i+1)): the host runs ahead, the GPU never idles
    # after the first launch: G_i = h_1 + g_1 + ... + g_i
    h, g = [1, 1, 1, 1], [4, 3, 5, 2]
    assert roofline.pipeline(list(zip(h, g))) == [5, 8, 13, 15]


def test_mixed_pipeline_on_paper_and_not_a_sum_of_maxima():
    # h = 1, 5, 1, 1 and g = 4, 1, 1, 6: H = 1, 6, 7, 8
    # G1 = 1 + 4 = 5; G2 = max(5, 6) + 1 = 7 (the GPU idled 1 waiting for the slow launch); G3 = max(7, 7) + 1 = 8;
    # G4 = max(8, 8) + 6 = 14. Closed form max_k (H_k + g_k + ... + g_n): 1+12, 6+8, 7+7, 8+6 -> 14
    h, g = [1, 5, 1, 1], [4, 1, 1, 6]
    assert roofline.pipeline(list(zip(h, g))) == [5, 7, 8, 14]
    # a sum of per-kernel maxima would charge 4 + 5 + 1 + 6 = 16: the launches hide behind earlier kernels
    assert sum(max(a, b) for a, b in zip(h, g)) == 16


def test_pipeline_equals_its_closed_form_on_random_integer_cases():
    rng = random.Random(20)
    for _ in range(300):
        n = rng.randint(1, 12)
        h = [rng.randint(0, 9) for _ in range(n)]
        g = [rng.randint(0, 9) for _ in range(n)]
        start = rng.randint(0, 5)
        got = roofline.pipeline(list(zip(h, g)), start)
        for m in range(1, n + 1):  # every prefix: G_m = max_k (H_k + g_k + ... + g_m)
            host = [start + sum(h[: k + 1]) for k in range(m)]
            assert got[m - 1] == max(host[k] + sum(g[k:m]) for k in range(m))
        # never less than either resource alone, never more than both in series
        assert max(start + sum(h) + g[-1], sum(g)) <= got[-1] <= start + sum(h) + sum(g)


# --- per-call host costs from the microbenchmark -----------------------------------------------------------------

CHAINS = {"conv2d": (30.0, 40.0), "batchnorm2d": (35.0, 30.0), "relu_module": (8.0, 12.0), "maxpool2d": (10.0, 14.0),
          "adaptive_avgpool2d": (11.0, 13.0), "dropout": (12.0, 9.0), "linear": (25.0, 30.0),
          "identity_module": (2.0, 0.5), "relu_fn": (6.0, 12.0), "add_inplace": (7.0, 4.0), "cat4_split": (20.0, 16.0),
          "view": (6.0, 3.0), "mul": (7.0, 12.0), "cat_slice": (1.0, 1.0), "conv_bn_relu_block": (1.0, 1.0)}


def bench_doc(scale_autocast=1.5):
    chains = {k: {"fwd_us": f, "bwd_us": b} for k, (f, b) in CHAINS.items()}
    amp = {k: {"fwd_us": f * scale_autocast, "bwd_us": b * scale_autocast} for k, (f, b) in CHAINS.items()}
    return {"host_us": {"fp32": chains, "fp16_autocast": amp}, "zero_grad_us_per_param": 1.25,
            "tiny_kernel_gpu_us": 2.5, "device": "test", "cpu": "test", "torch": "test"}


def test_host_costs_from_the_benchmark_json():
    hd = host_dispatch_from_benchmark(bench_doc())
    assert sorted(hd.fwd_us["fp32"]) == sorted(KINDS)
    assert hd.fwd_us["fp32"]["conv2d"] == 30.0 and hd.bwd_us["autocast"]["conv2d"] == 60.0
    assert hd.fwd_us["fp32"]["view"] == 3.0 and hd.bwd_us["fp32"]["view"] == 1.5  # two views per chain element
    assert hd.fwd_us["fp32"]["cat"] == 20.0 and hd.fwd_us["fp32"]["op"] == 7.0  # cat: the 4-way cat; op: a mul
    assert hd.zero_grad_us_per_param == 1.25 and hd.kernel_floor_us == 2.5
    # a layer's calls: 1 conv, 2 container calls, 1 view
    assert hd.call_us("fp32", {"conv2d": 1, "identity_module": 2, "view": 1}) == (30 + 4 + 3, 40 + 1 + 1.5)


def test_a_failed_chain_is_a_clear_error():
    doc = bench_doc()
    doc["host_us"]["fp16_autocast"]["conv2d"] = {"error": "RuntimeError: boom"}
    with pytest.raises(ValueError, match=r"host_us\.fp16_autocast\.conv2d .*boom"):
        host_dispatch_from_benchmark(doc)


# --- the model with host dispatch on -----------------------------------------------------------------------------

def one_layer(model_name, layer_name):
    model = load_model(model_name)
    layer = next(layer for layer in model.layers if layer.name == layer_name)
    return dataclasses.replace(model, layers=(layer,))


def with_host(monkeypatch, hd):
    monkeypatch.setitem(MICROBENCH, "H100", dataclasses.replace(MICROBENCH["H100"], host_dispatch=hd))


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_one_convolution_host_bound_on_paper(monkeypatch, precision):
    # ResNet-50 layer1.0.conv2 alone (1 parameter tensor, calls {conv2d: 1}), host costs far above its kernels:
    # forward: zero_grad, the launch, then its kernels run back to back after the last launch
    hd = host_dispatch_from_benchmark(bench_doc(), "test")
    hd = dataclasses.replace(hd, fwd_us={m: {k: v * 1000 for k, v in d.items()} for m, d in hd.fwd_us.items()},
                             bwd_us={m: {k: v * 1000 for k, v in d.items()} for m, d in hd.bwd_us.items()})
    with_host(monkeypatch, hd)
    model = one_layer("resnet50", "layer1.0.conv2")
    assert roofline.host_calls("resnet50")["layer1.0.conv2"] == {"fp32": {"conv2d": 1}, "autocast": {"conv2d": 1}}
    mode = "autocast" if precision == "fp16" else "fp32"
    fwd_k, bwd_k = roofline.layer_costs(model, model.layers[0], "H100", precision, 32)
    g_f = [max(c.gpu_s, 2.5e-6) for c in fwd_k]
    g_b = [max(c.gpu_s, 2.5e-6) for c in bwd_k]
    start = 1.25e-6
    h_f, h_b = hd.fwd_us[mode]["conv2d"] * 1e-6, hd.bwd_us[mode]["conv2d"] * 1e-6
    assert h_f / len(g_f) > max(g_f) and h_b / len(g_b) > max(g_f + g_b)  # host-bound on paper
    (fwd, bwd), = roofline.layer_times_s(model, "H100", precision, 32)
    # each kernel runs right after its own launch: G = H + g of the last kernel of each phase
    assert fwd == pytest.approx(start + h_f + g_f[-1], rel=1e-12)
    assert fwd + bwd == pytest.approx(start + h_f + h_b + g_b[-1], rel=1e-12)


def test_one_convolution_device_bound_on_paper(monkeypatch):
    # host costs of zero: the layer is its kernels' GPU time, each at least the floor
    hd = HostDispatch({m: {k: 0.0 for k in KINDS} for m in ("fp32", "autocast")},
                      {m: {k: 0.0 for k in KINDS} for m in ("fp32", "autocast")}, 0.0, 2.5, "test")
    with_host(monkeypatch, hd)
    model = one_layer("resnet50", "layer1.0.conv2")
    fwd_k, bwd_k = roofline.layer_costs(model, model.layers[0], "H100", "fp32", 128)
    (fwd, bwd), = roofline.layer_times_s(model, "H100", "fp32", 128)
    assert fwd == pytest.approx(sum(max(c.gpu_s, 2.5e-6) for c in fwd_k), rel=1e-12)
    assert bwd == pytest.approx(sum(max(c.gpu_s, 2.5e-6) for c in bwd_k), rel=1e-12)


def test_host_dispatch_changes_a_small_batch_and_layer_times_add_up(monkeypatch):
    model = load_model("googlenet")
    off = roofline.iteration_s(model, "H100", "fp16", 32)
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(), "test"))
    times = roofline.layer_times_s(model, "H100", "fp16", 32)
    on = roofline.iteration_s(model, "H100", "fp16", 32)
    assert on != off and all(f >= 0 and b >= 0 for f, b in times)
    steps, start = roofline.layer_steps(model, "H100", "fp16", 32)
    clocks = roofline.pipeline([s for _, st in steps for s in st], start)
    assert sum(f + b for f, b in times) == pytest.approx(clocks[-1], rel=1e-12)
    # the host alone is a lower bound: every call's forward and backward host time, plus zero_grad
    calls = roofline.host_calls("googlenet")
    hd = MICROBENCH["H100"].host_dispatch
    host = sum(sum(hd.call_us("autocast", calls[layer.name]["autocast"])) for layer in model.layers) * 1e-6
    assert on >= host + 1.25e-6 * len(model.tensors)


def test_the_h100_preset_host_dispatch_is_off_or_the_stored_measurement():
    hd = MICROBENCH["H100"].host_dispatch
    if hd is None:  # no measurement: the per-kernel launch costs of the older model
        return
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parent.parent / "python" / "ddlsim" / "data" / "kernels"
                      / "host_dispatch_h100.json").read_text())
    ref = host_dispatch_from_benchmark(doc)
    assert hd.fwd_us == ref.fwd_us and hd.bwd_us == ref.bwd_us
    assert hd.zero_grad_us_per_param == ref.zero_grad_us_per_param and hd.kernel_floor_us == ref.kernel_floor_us


# --- call counts per layer (tools/gen_host_calls.py) -------------------------------------------------------------

def totals(model_name, mode):
    out = {}
    for counts in roofline.host_calls(model_name).values():
        for kind, n in counts[mode].items():
            out[kind] = out.get(kind, 0) + n
    return out


def test_resnet50_calls_per_kind_from_its_architecture():
    # 1 stem conv + 16 bottlenecks x 3 convs + 4 downsample convs = 53, as many BatchNorms; self.relu is called
    # once in the stem and 3 times per bottleneck = 49; 16 residual adds + the loss's sum (0 + loss) = 17;
    # containers: the model, 4 stages, 16 bottlenecks, 4 downsample Sequentials = 25; views: the flatten (the
    # detach autograd makes of log_softmax's output when it saves it is part of that call); the loss:
    # log_softmax and nll_loss (and under autocast the .float() of the fp16 logits)
    fp32 = totals("resnet50", "fp32")
    assert fp32 == {"conv2d": 53, "batchnorm2d": 53, "relu_module": 49, "maxpool2d": 1, "adaptive_avgpool2d": 1,
                    "linear": 1, "add_inplace": 17, "identity_module": 25, "view": 1, "op": 2}
    assert totals("resnet50", "autocast") == {**fp32, "op": 3}


def test_every_layer_has_its_own_module_call_and_the_kernel_tables_names():
    kinds = {"Conv2d": "conv2d", "BatchNorm2d": "batchnorm2d", "Linear": "linear"}
    for name in ["alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "googlenet", "inception_v3"]:
        calls = roofline.host_calls(name)
        model = load_model(name)
        assert list(calls) == [layer.name for layer in model.layers] == list(roofline.kernel_table(name))
        for layer in model.layers:
            for mode in ("fp32", "autocast"):
                assert set(calls[layer.name][mode]) <= set(KINDS)
                if layer.type in kinds:
                    assert calls[layer.name][mode][kinds[layer.type]] == 1, (name, layer.name)
        assert roofline._host_calls_doc()["models"][name]["parameter_tensors"] == len(model.tensors)


# --- BatchNorm at its own measured bandwidth ---------------------------------------------------------------------

@pytest.mark.parametrize("precision, size", [("fp32", 4), ("fp16", 2)])
def test_batchnorm_at_its_measured_bandwidth(monkeypatch, precision, size):
    from ddlsim.workload.devices import DEVICES, norm_share_from_benchmark

    doc = {"batchnorm_bandwidth": {"fp32": {"fwd_gbps": 2400.0, "bwd_gbps": 2000.0},
                                   "fp16": {"fwd_gbps": 1200.0, "bwd_gbps": 1000.0}}}
    # the one measured BatchNorm share, as a device without a BatchNorm table (norm_classes_<device>.json) uses it
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: None)
    monkeypatch.setitem(MICROBENCH, "H100", dataclasses.replace(MICROBENCH["H100"],
                                                                norm_share=norm_share_from_benchmark(doc, DEVICES["H100"])))
    batch = 128
    model = one_layer("resnet50", "bn1")
    fwd, bwd = roofline.layer_costs(model, model.layers[0], "H100", precision, batch)
    bn_f = next(c for c in fwd if c.op in roofline.NORM_FWD)
    bn_b = next(c for c in bwd if c.op in roofline.NORM_BWD)
    n = 64 * 112 * 112 * batch  # bn1: 64 channels at 112x112
    # forward: x read twice, y written (+ 4 per-channel vectors read, 2 written); backward: x and dy twice, dx written
    assert bn_f.bytes == size * (3 * n + 6 * 64)
    assert bn_f.memory_s == pytest.approx(bn_f.bytes / (doc["batchnorm_bandwidth"][precision]["fwd_gbps"] * 1e9))
    assert bn_b.memory_s == pytest.approx(bn_b.bytes / (doc["batchnorm_bandwidth"][precision]["bwd_gbps"] * 1e9))
    with pytest.raises(ValueError, match="batchnorm_bandwidth"):
        norm_share_from_benchmark({}, DEVICES["H100"])


def test_step_totals_bound_the_step(monkeypatch):
    with_host(monkeypatch, host_dispatch_from_benchmark(bench_doc(), "test"))
    for name, batch in (("resnet50", 32), ("vgg16", 128)):
        host, gpu, step = roofline.step_totals_s(load_model(name), "H100", "tf32", batch)
        assert max(host, gpu) <= step <= host + gpu
        assert step == pytest.approx(roofline.iteration_s(load_model(name), "H100", "tf32", batch), rel=1e-12)


# --- convolutions by shape class ---------------------------------------------------------------------------------

def test_conv_shape_class_from_the_kernel_tables():
    # VGG-16: thirteen 3x3 stride-1 convolutions; ResNet-50: 16 3x3 convolutions, 3 of them stride 2 (other), 36 1x1
    # and the 7x7 stem (other); AlexNet: 11x11/4 and 5x5 (other), three 3x3
    def classes(name):
        out = {}
        for layer in roofline.kernel_table(name).values():
            for k in layer[0]:
                if k.op == "convolution":
                    c = roofline.conv_shape_class(k)
                    out[c] = out.get(c, 0) + 1
        return out

    assert classes("vgg16") == {"3x3": 13}
    assert classes("resnet50") == {"3x3": 13, "other": 40}
    assert classes("alexnet") == {"3x3": 3, "other": 2}


def test_3x3_convolutions_at_their_class_share(monkeypatch):
    from ddlsim.workload.devices import DEVICES, conv_3x3_share_from_benchmark

    vgg = {f"3x3_{c}_{hw}_{p}": {"fwd_tflops": f, "bwd_tflops": b}
           for (c, hw), (f, b) in zip([(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)],
                                      [(60, 50), (70, 55), (65, 52), (62, 51), (40, 30)])
           for p in ("fp32", "tf32", "fp16")}
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: None)  # the rule without a table
    share = conv_3x3_share_from_benchmark({"vgg_conv_b32": vgg}, DEVICES["H100"])
    # fp32 forward: the median of 60, 70, 65, 62, 40 and the H100's two batch-128 shapes 39.51, 83.87 -> 62
    assert share["fwd"]["fp32"] == pytest.approx(62 / 67.0)
    assert share["bwd"]["fp32"] == pytest.approx(50 / 67.0)  # 50, 55, 52, 51, 30, 35.84, 43.11 -> 50
    monkeypatch.setitem(MICROBENCH, "H100", dataclasses.replace(MICROBENCH["H100"], conv_3x3_share=share))
    model = one_layer("vgg16", "features.2")  # 3x3, 64 -> 64 at 224x224
    fwd, bwd = roofline.layer_costs(model, model.layers[0], "H100", "fp32", 32)
    flops = 2 * 64 * 64 * 9 * 224 * 224 * 32
    assert fwd[0].flops == flops and fwd[0].compute_s == pytest.approx(flops / 62e12)
    # input and weight gradient: the forward's FLOPs each, at the backward share
    assert [c.compute_s for c in bwd if c.op.startswith("convolution_backward")] == [pytest.approx(flops / 50e12)] * 2
    # a 1x1 convolution keeps the median of the four typical shapes
    one = one_layer("resnet50", "layer1.0.conv1")
    (c1,), _ = roofline.layer_costs(one, one.layers[0], "H100", "fp32", 32)
    assert c1.compute_s == pytest.approx(c1.flops / (MICROBENCH["H100"].conv_fwd_share["fp32"] * 67e12))
    with pytest.raises(ValueError, match="vgg_conv_b32"):
        conv_3x3_share_from_benchmark({}, DEVICES["H100"])


def test_the_h200_preset_is_its_stored_measurement():
    """H200: the H100's kernel shares with the host dispatch, BatchNorm and 3x3 shares of the stored H200
    measurement (data/kernels/host_dispatch_h200.json), nothing else."""
    import json
    from pathlib import Path

    from ddlsim.workload.devices import DEVICES, conv_3x3_share_from_benchmark, norm_share_from_benchmark

    doc = json.loads((Path(__file__).resolve().parent.parent / "python" / "ddlsim" / "data" / "kernels"
                      / "host_dispatch_h200.json").read_text())
    h200, h100 = MICROBENCH["H200"], MICROBENCH["H100"]
    ref = host_dispatch_from_benchmark(doc)
    assert h200.host_dispatch.fwd_us == ref.fwd_us and h200.host_dispatch.bwd_us == ref.bwd_us
    assert h200.norm_share == norm_share_from_benchmark(doc, DEVICES["H200"])
    assert h200.conv_3x3_share == conv_3x3_share_from_benchmark(doc, DEVICES["H200"])
    assert h200.gemm_share == h100.gemm_share and h200.conv_fwd_share == h100.conv_fwd_share
    assert "H200" in doc["device"]


def test_a_host_dispatch_run_becomes_a_preset_the_same_way_for_any_device():
    """host_microbench: the H200's path, usable for the H100 (data/kernels/host_dispatch_h100.json): the base
    preset's kernel shares kept, the run's host dispatch, BatchNorm and 3x3 shares taken (the H200 run's JSON as a
    stand-in for an H100 run: the shares are divided by the H100's datasheet numbers)."""
    import json
    from pathlib import Path

    from ddlsim.workload.devices import (DEVICES, conv_3x3_share_from_benchmark, host_microbench,
                                         norm_share_from_benchmark)

    doc = json.loads((Path(__file__).resolve().parent.parent / "python" / "ddlsim" / "data" / "kernels"
                      / "host_dispatch_h200.json").read_text())
    base = dataclasses.replace(MICROBENCH["H100"], host_dispatch=None, norm_share=None, conv_3x3_share=None)
    mb = host_microbench(base, DEVICES["H100"], doc, "a test")
    assert mb.source == "a test" and mb.gemm_share == base.gemm_share and mb.copy_share == base.copy_share
    assert mb.host_dispatch.fwd_us == host_dispatch_from_benchmark(doc).fwd_us
    assert mb.host_dispatch.kernel_floor_us == doc["tiny_kernel_gpu_us"]
    # BatchNorm: GB/s over the H100's 3,350 GB/s
    assert mb.norm_share["fp16"][0] == doc["batchnorm_bandwidth"]["fp16"]["fwd_gbps"] / 3350.0
    assert mb.norm_share == norm_share_from_benchmark(doc, DEVICES["H100"])
    assert mb.conv_3x3_share == conv_3x3_share_from_benchmark(doc, DEVICES["H100"])


def test_a_damaged_host_dispatch_file_is_one_clear_error(tmp_path):
    from ddlsim.errors import ModelError
    from ddlsim.workload.devices import DEVICES, measured_host_microbench

    base = MICROBENCH["H100"]
    assert measured_host_microbench(base, DEVICES["H100"], "x", tmp_path) is None  # no file: no measurement
    (tmp_path / "host_dispatch_h100.json").write_text("{\"host_us\": {}}")
    with pytest.raises(ModelError, match="host_dispatch_h100.json") as info:
        measured_host_microbench(base, DEVICES["H100"], "x", tmp_path)
    assert "\n" not in str(info.value)
    (tmp_path / "host_dispatch_h100.json").write_text("not json")
    with pytest.raises(ModelError, match="host_dispatch.py"):
        measured_host_microbench(base, DEVICES["H100"], "x", tmp_path)
