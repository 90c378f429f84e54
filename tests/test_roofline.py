"""The per-layer roofline compute model (docs/compute-model.md): closed forms
derived on paper for single layers in the compute- and memory-bound regimes,
the host/GPU pipeline in its two limits, BatchNorm costed by its bytes, TF32
as a precision of its own, and the device presets equal to the datasheets."""

import dataclasses
import math

import pytest

from ddlsim.errors import ScenarioError
from ddlsim.simulation.model_build import build_model, layer_times_ns
from ddlsim.simulation.scenario import scenario_from_dict
from ddlsim.workload import roofline
from ddlsim.workload.devices import DEVICES, MICROBENCH, find_device
from ddlsim.workload.model import Layer, Model, Tensor
from ddlsim.workload.zoo import list_models, load_model

H100 = DEVICES["H100"]
# the H100 microbenchmark results the presets store (docs/compute-model.md), in the units they were measured in
CONV_FWD_TFLOPS = {"fp32": 37.615, "tf32": 103.055, "fp16": 140.40}
CONV_BWD_TFLOPS = {"fp32": 26.38, "tf32": 76.475, "fp16": 128.255}
GEMM_TFLOPS = {"fp32": 51.744, "tf32": 371.096, "fp16": 696.281}
COPY_BYTES_PER_S = 2973.432e9
HOST_CONV_FWD, HOST_CONV_BWD, HOST_BN_FWD, HOST_BN_BWD = 26.15e-6, 56.84e-6, 31.53e-6, 57.05e-6
HOST_RELU_FWD, HOST_RELU_BWD = 7.90e-6, 21.05e-6


@pytest.fixture(autouse=True)
def _h100_per_kernel_host_and_median_shares(monkeypatch):
    """The closed forms below are of the H100's kernel shares with per-kernel launch costs and the median
    convolution share: its host-dispatch, BatchNorm and convolution-table measurements are left out here (they
    have tests of their own: test_host_dispatch.py, test_roofline_conv_classes.py)."""
    monkeypatch.setitem(MICROBENCH, "H100", dataclasses.replace(MICROBENCH["H100"], host_dispatch=None,
                                                                norm_share=None, conv_3x3_share=None))
    table = roofline.conv_table
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: None if name == "H100" else table(name))
    norms = roofline.norm_table
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: None if name == "H100" else norms(name))
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: None)  # test_roofline_linear.py
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: None)  # test_roofline_pointwise.py


def one_layer(model_name: str, layer_name: str) -> Model:
    model = load_model(model_name)
    layer = next(layer for layer in model.layers if layer.name == layer_name)
    return dataclasses.replace(model, layers=(layer,))


@pytest.mark.parametrize("batch", [32, 128])
def test_a_3x3_convolution_in_tf32_is_compute_bound_with_the_closed_form(batch):
    # ResNet-50 layer1.0.conv2: 64 -> 64 channels, 3x3, 56x56 output, stride 1, no bias
    flops = 2 * 64 * 64 * 3 * 3 * 56 * 56 * batch
    activation = 64 * 56 * 56 * batch
    bytes_moved = 4 * (activation + 64 * 64 * 9 + activation)  # read input and weight, write output
    compute = flops / (CONV_FWD_TFLOPS["tf32"] * 1e12)
    memory = bytes_moved / COPY_BYTES_PER_S
    assert compute > memory  # compute-bound on paper
    model = one_layer("resnet50", "layer1.0.conv2")
    (cost,), _ = roofline.layer_costs(model, model.layers[0], "H100", "tf32", batch)
    assert cost.flops == flops and cost.bytes == bytes_moved and cost.bound == "compute"
    assert cost.gpu_s == pytest.approx(compute, rel=1e-12)
    # alone, a kernel costs its launch (host) time plus its roofline time
    (fwd, bwd), = roofline.layer_times_s(model, "H100", "tf32", batch)
    assert fwd == pytest.approx(HOST_CONV_FWD + compute, rel=1e-12)
    # backward: input gradient, then weight gradient (the same FLOPs each, one autograd node: one host cost);
    # the host issues it while the GPU still runs the forward (compute > HOST_CONV_BWD), so the backward
    # adds only the two kernels' GPU times
    dgrad = max(flops / (CONV_BWD_TFLOPS["tf32"] * 1e12), bytes_moved / COPY_BYTES_PER_S)
    wgrad = max(flops / (CONV_BWD_TFLOPS["tf32"] * 1e12), 4 * (2 * activation + 64 * 64 * 9) / COPY_BYTES_PER_S)
    assert compute > HOST_CONV_BWD
    assert bwd == pytest.approx(dgrad + wgrad, rel=1e-12)


def test_a_1x1_convolution_in_fp16_is_memory_bound_with_the_closed_form():
    batch = 128
    # ResNet-50 layer1.0.conv1: 64 -> 64 channels, 1x1, 56x56
    flops = 2 * 64 * 64 * 56 * 56 * batch
    bytes_moved = 2 * (2 * 64 * 56 * 56 * batch + 64 * 64)  # half precision: input + output + weight
    compute = flops / (CONV_FWD_TFLOPS["fp16"] * 1e12)
    memory = bytes_moved / COPY_BYTES_PER_S
    assert memory > compute  # memory-bound on paper
    model = one_layer("resnet50", "layer1.0.conv1")
    fwd_costs, _ = roofline.layer_costs(model, model.layers[0], "H100", "fp16", batch)
    conv, cast = fwd_costs
    assert conv.bound == "memory" and conv.gpu_s == pytest.approx(memory, rel=1e-12)
    # autocast's weight cast: read 4 bytes, write 2 bytes per weight element
    assert cast.op == "_to_copy" and cast.bytes == 6 * 64 * 64
    (fwd, _), = roofline.layer_times_s(model, "H100", "fp16", batch)
    # pipeline: conv issued at h_conv, runs to h_conv + memory; the cast is issued at h_conv + h_other (earlier than
    # the conv ends) and runs right after it
    assert fwd == pytest.approx(HOST_CONV_FWD + memory + 6 * 64 * 64 / COPY_BYTES_PER_S, rel=1e-12)


@pytest.mark.parametrize("precision, size", [("fp32", 4), ("fp16", 2)])
def test_batchnorm_is_no_longer_free(precision, size):
    batch = 32
    a = 64 * 56 * 56 * batch  # activation elements
    model = one_layer("resnet50", "layer1.0.bn1")  # BatchNorm2d(64) then the in-place ReLU
    fwd_costs, bwd_costs = roofline.layer_costs(model, model.layers[0], "H100", precision, batch)
    by_op = {c.op: c for c in fwd_costs + bwd_costs}
    # forward: read x for the statistics, read x again to normalise, write y; weight, bias, running stats (4 x 64)
    # in, saved mean and inverse std (2 x 64) out
    assert by_op["native_batch_norm"].bytes == size * (3 * a + 4 * 64 + 2 * 64)
    # backward: read x and dy for the reductions, again for dx, write dx; 5 x 64 parameters/statistics in, 2 x 64 out
    assert by_op["native_batch_norm_backward"].bytes == size * (5 * a + 5 * 64 + 2 * 64)
    assert by_op["relu_"].bytes == size * 2 * a and by_op["threshold_backward"].bytes == size * 3 * a
    (fwd, bwd), = roofline.layer_times_s(model, "H100", precision, batch)
    bw = COPY_BYTES_PER_S
    # the counter increment has no host time of its own (it is part of the BatchNorm call); each kernel's GPU time
    # here is longer than the next one's host time, so the GPU runs them back to back after the first launch
    gpu = [8 / bw, size * (3 * a + 6 * 64) / bw, size * 2 * a / bw]
    assert gpu[1] > HOST_RELU_FWD
    assert fwd == pytest.approx(HOST_BN_FWD + gpu[1] + gpu[2], rel=1e-12)  # the counter ran before BN was issued
    assert fwd > 0 and bwd > 0
    scenario = scenario_from_dict({"model": {"name": "resnet50", "device": "H100", "precision": precision}})
    times = layer_times_ns(build_model(scenario.model), scenario.model)
    bn_share = sum(f + b for layer, (f, b) in zip(load_model("resnet50").layers, times) if layer.type == "BatchNorm2d")
    assert bn_share / sum(f + b for f, b in times) > 0.05  # the old model counted 0


def test_tf32_is_a_precision_of_its_own():
    assert H100.peak_flops("tf32") == 494.5e12
    assert H100.peak_flops("fp32") == 67e12 and H100.peak_flops("fp16") == 989.5e12
    model = load_model("resnet50")
    fp32, tf32, fp16 = (roofline.iteration_s(model, "H100", p, 128) for p in ("fp32", "tf32", "fp16"))
    assert fp32 > tf32 > fp16
    # bytes: tf32 moves fp32 data, so a memory-bound layer takes exactly as long in tf32 as in fp32
    bn = one_layer("resnet50", "layer1.0.bn1")
    assert roofline.layer_times_s(bn, "H100", "tf32", 128) == roofline.layer_times_s(bn, "H100", "fp32", 128)
    # a part without TF32 tensor cores runs tf32 as fp32
    assert DEVICES["V100"].peak_flops("tf32") == DEVICES["V100"].peak_flops("fp32")
    sc32 = scenario_from_dict({"model": {"name": "resnet50", "device": "H100", "precision": "fp32"}})
    sctf = scenario_from_dict({"model": {"name": "resnet50", "device": "H100", "precision": "tf32"}})
    assert layer_times_ns(model, sctf.model) != layer_times_ns(model, sc32.model)


# Datasheet numbers as printed (tensor-core rates "with sparsity", dense = half), docs/compute-model.md
DATASHEET = {
    # name: (fp32 TFLOPS, TF32 sparse TFLOPS or None, FP16 sparse TFLOPS or dense where no sparsity, GB/s)
    "H100": (67.0, 989.0, 1979.0, 3350.0),  # H100 SXM
    "H200": (67.0, 989.0, 1979.0, 4800.0),  # H200 SXM
    "B200": (75.0, 2200.0, 4500.0, 7700.0),  # HGX B200, one GPU
    "A100": (19.5, 312.0, 624.0, 2039.0),  # A100 80GB SXM
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_presets_equal_the_datasheet_values(name):
    fp32, tf32_sparse, fp16_sparse, gbps = DATASHEET[name]
    d = DEVICES[name]
    assert d.fp32_tflops == fp32 and d.memory_gbps == gbps
    # NVIDIA prints 989 for H100/H200 TF32 (half of 1,979 rounded down)
    assert d.tf32_tflops == pytest.approx(tf32_sparse / 2, abs=0.5) and d.fp16_tflops == fp16_sparse / 2
    assert "datasheet" in d.source


def test_older_presets_keep_working():
    assert (DEVICES["V100"].fp32_tflops, DEVICES["V100"].fp16_tflops, DEVICES["V100"].memory_gbps) == (15.7, 125.0, 900.0)
    for name in ("K80", "P100", "V100", "T4", "A100", "H100", "H200", "B200"):
        assert roofline.iteration_s(load_model("resnet18"), name, "fp32", 32) > 0
    assert find_device("h200") is DEVICES["H200"]


def test_devices_without_their_own_microbenchmark():
    from ddlsim.workload.devices import microbench

    # H200 has its own host and BatchNorm measurements on top of the H100's kernel shares (test_host_dispatch.py)
    assert microbench(DEVICES["H200"]) is MICROBENCH["H200"] and microbench(DEVICES["B200"]) is MICROBENCH["H100"]
    v100 = microbench(DEVICES["V100"])
    assert v100.gemm_share["fp32"] == v100.conv_fwd_share["fp16"] == v100.conv_bwd_share["tf32"] == 0.5
    # a compute-bound matmul on a V100 costs its launch plus FLOPs / (half the datasheet peak)
    layer_model = _tiny_model(1, 10**12)
    (fwd, _), = roofline.layer_times_s(layer_model, "V100", "fp32", 1)
    assert fwd == pytest.approx(v100.host_fwd_us * 1e-6 + 1e12 / (15.7e12 * 0.5), rel=1e-12)


def test_microbenchmark_shares_are_the_measured_rates_over_the_datasheet():
    mb = MICROBENCH["H100"]
    for p in ("fp32", "tf32", "fp16"):
        assert mb.gemm_share[p] * H100.peak_flops(p) == pytest.approx(GEMM_TFLOPS[p] * 1e12, rel=1e-12)
        assert mb.conv_fwd_share[p] * H100.peak_flops(p) == pytest.approx(CONV_FWD_TFLOPS[p] * 1e12, rel=1e-12)
        assert 0 < mb.gemm_share[p] < 1 and 0 < mb.conv_bwd_share[p] < 1
    assert mb.copy_share * H100.memory_bytes_per_s == pytest.approx(COPY_BYTES_PER_S, rel=1e-12)


def _tiny_model(n: int, flops: int) -> Model:
    return Model("no-table", "no-table", tuple(Layer(f"l{i}", "Linear", (Tensor(f"l{i}.w", 16),), flops, 2 * flops)
                                                for i in range(n)))


def test_the_pipeline_is_host_bound_for_tiny_kernels_and_gpu_bound_for_large_ones():
    mb = MICROBENCH["H100"]
    h_fwd, h_bwd = mb.host_fwd_us * 1e-6, mb.host_bwd_us * 1e-6
    rate = H100.peak_flops("fp32") * mb.gemm_share["fp32"]
    n = 10
    tiny = _tiny_model(n, 2)  # each kernel runs far shorter than a launch
    times = roofline.layer_times_s(tiny, "H100", "fp32", 1)
    g_f = max(2 / rate, 16 * 4 / (H100.memory_bytes_per_s * mb.copy_share))
    g_b = max(4 / rate, 32 * 4 / (H100.memory_bytes_per_s * mb.copy_share))
    # host bound: the GPU finishes each kernel before the next is issued, so it ends at the last issue + its run
    assert sum(f + b for f, b in times) == pytest.approx(n * (h_fwd + h_bwd) + g_b, rel=1e-9)
    assert times[0][0] == pytest.approx(h_fwd + g_f, rel=1e-9) and times[1][0] == pytest.approx(h_fwd, rel=1e-9)
    big = _tiny_model(n, 10**12)  # each kernel runs far longer than a launch
    times = roofline.layer_times_s(big, "H100", "fp32", 1)
    # GPU bound: only the first launch shows, then the kernels run back to back
    assert sum(f + b for f, b in times) == pytest.approx(h_fwd + n * (1e12 + 2e12) / rate, rel=1e-12)


def test_every_zoo_cnn_layer_has_kernels_whose_flops_are_the_zoos():
    for name in list_models():
        table = roofline.kernel_table(name)
        if name == "bert_base":
            assert table is None
            continue
        model = load_model(name)
        assert set(table) == {layer.name for layer in model.layers}, name
        for layer in model.layers:
            fwd, bwd = table[layer.name]
            assert sum(k.flops[1] for k in fwd) == layer.fwd_flops, (name, layer.name)
            assert sum(k.flops[1] for k in bwd) == layer.bwd_flops, (name, layer.name)
            assert all(k.flops[0] == 0 for k in fwd + bwd)


def test_scenario_compute_model_choice():
    default = scenario_from_dict({"model": {"name": "resnet50"}})
    assert default.model.compute == "roofline"
    # a scenario written for the old model (an efficiency) keeps it
    old = scenario_from_dict({"model": {"name": "resnet50", "device": "A100", "efficiency": 0.4}})
    assert old.model.compute == "flops"
    model = build_model(old.model)
    rate = 19.5e12 * 0.4
    assert layer_times_ns(model, old.model)[0] == (round(model.layers[0].fwd_flops * 32 / rate * 1e9),
                                                   round(model.layers[0].bwd_flops * 32 / rate * 1e9))
    again = scenario_from_dict(old.model_dump(mode="json", exclude={"base_dir"}) | {"model": old.model.model_dump(mode="json")})
    assert again.model.compute == "flops"


def test_an_efficiency_the_roofline_would_ignore_is_refused_and_a_saved_roofline_scenario_loads_again():
    with pytest.raises(ScenarioError, match="model.efficiency .* roofline"):
        scenario_from_dict({"model": {"name": "resnet50", "compute": "roofline", "efficiency": 0.3}})
    saved = scenario_from_dict({"model": {"name": "resnet50"}})
    again = scenario_from_dict(saved.model_dump(mode="json", exclude={"base_dir"}))
    assert (again.model.compute, again.model.efficiency) == ("roofline", 0.5)


def test_the_roofline_is_deterministic_and_finite():
    model = load_model("inception_v3")
    a = roofline.layer_times_s(model, "B200", "bf16", 64)
    assert a == roofline.layer_times_s(model, "B200", "bf16", 64)
    assert all(math.isfinite(f) and math.isfinite(b) and f > 0 and b > 0 for f, b in a)
