"""A device's own measured tables (docs/compute-model.md, "Per-device tables"): the H200 reads its own --norm and
--pointwise tables (and host run) where they exist and the H100's otherwise; a file whose recorded device is another
preset's GPU is refused in one line, so that a table dropped under the wrong name cannot pass for a measurement."""

import dataclasses
import json
import math

import pytest

from ddlsim.errors import ModelError
from ddlsim.workload import roofline
from ddlsim.workload.devices import DEVICES, MICROBENCH, measured_host_microbench, measured_on_other_device
from ddlsim.workload.zoo import load_model

NORM_COLS = ["channels", "hw", "batch", "precision", "fwd_gbps", "bwd_gbps"]
PW_COLS = ["op", "channels", "hw", "batch", "precision", "bytes", "gbps"]


def norm_doc(gbps, device):
    pts = [[c, hw, b, p, gbps, gbps] for c in (64, 256, 1024) for hw in (7, 28, 112) for b in (32, 128)
           for p in ("fp32", "fp16")]
    return {"columns": NORM_COLS, "points": pts, "device": device}


def pw_doc(gbps, device):
    pts = [["relu_", 64, hw, 32, p, 2 * 32 * 64 * hw * hw * (2 if p == "fp16" else 4), gbps]
           for hw in (7, 28, 112) for p in ("fp32", "fp16")]
    return {"columns": PW_COLS, "points": pts, "device": device}


@pytest.mark.parametrize("stem,make,loader", [("norm_classes", norm_doc, "norm_table"),
                                              ("pointwise", pw_doc, "pointwise_table")])
def test_the_h200_reads_its_own_table_first_and_the_h100s_without_one(tmp_path, stem, make, loader):
    load = getattr(roofline, loader)
    (tmp_path / f"{stem}_h100.json").write_text(json.dumps(make(1000.0, "NVIDIA H100 80GB HBM3")))
    h100 = load("H100", str(tmp_path))
    assert load("H200", str(tmp_path)) == h100  # the fallback: the same die
    own = tmp_path / "own"
    own.mkdir()
    (own / f"{stem}_h100.json").write_text(json.dumps(make(1000.0, "NVIDIA H100 80GB HBM3")))
    (own / f"{stem}_h200.json").write_text(json.dumps(make(1200.0, "NVIDIA H200")))
    h200 = load("H200", str(own))
    assert h200 != h100 and load("H100", str(own)) == h100
    assert {v["bw" if stem == "pointwise" else "fwd"] for pts in h200.points.values() for *_, v in pts} == {
        math.log2(1200e9)}


@pytest.mark.parametrize("stem,make,loader", [("norm_classes", norm_doc, "norm_table"),
                                              ("pointwise", pw_doc, "pointwise_table"),
                                              ("conv_classes", None, "conv_table"),
                                              ("linear_classes", None, "linear_table")])
def test_a_table_measured_on_another_gpu_is_one_clear_error(tmp_path, stem, make, loader):
    cols = {"conv_classes": ["class", "c_in", "c_out", "batch", "h_out", "w_out", "precision", "fwd_tflops",
                             "dgrad_tflops", "wgrad_tflops"],
            "linear_classes": ["m", "k", "n", "precision", "fwd_tflops", "dgrad_tflops", "wgrad_tflops"]}
    doc = make(1000.0, "NVIDIA H100 80GB HBM3") if make else {"columns": cols[stem], "points": [],
                                                               "device": "NVIDIA H100 80GB HBM3"}
    (tmp_path / f"{stem}_h200.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=f"{stem}_h200.json") as info:
        getattr(roofline, loader)("H200", str(tmp_path))
    msg = str(info.value)
    assert "\n" not in msg and "H100" in msg and "not a H200" in msg
    # a run that names no preset (a CPU smoke run, a test's table) is accepted under any name
    doc["device"] = "cpu"
    (tmp_path / f"{stem}_h200.json").write_text(json.dumps(doc))
    getattr(roofline, loader).cache_clear()
    assert getattr(roofline, loader)("H200", str(tmp_path)) is not None


def test_the_recorded_device_names_a_preset_by_its_own_word():
    assert measured_on_other_device("NVIDIA H100 80GB HBM3", "H200") == "H100"
    assert measured_on_other_device("NVIDIA H200", "H200") is None
    assert measured_on_other_device("NVIDIA H200", "H100") == "H200"
    assert measured_on_other_device("NVIDIA A100-SXM4-80GB", "A100") is None
    assert measured_on_other_device("Tesla T4", "H100") == "T4"
    for anything in ("cpu", "test", None, 3, "NVIDIA GH100 engineering sample"):
        assert measured_on_other_device(anything, "H200") is None


def test_an_h200_batch_norm_moves_its_bytes_at_the_h200s_own_table(tmp_path, monkeypatch):
    """With norm_classes_h200.json beside the H100's, an H200 BatchNorm kernel takes the H200 table's bandwidth
    (every point 1,200 GB/s: the interpolation is that), the H100's kernel the H100's (1,000 GB/s)."""
    (tmp_path / "norm_classes_h100.json").write_text(json.dumps(norm_doc(1000.0, "NVIDIA H100 80GB HBM3")))
    (tmp_path / "norm_classes_h200.json").write_text(json.dumps(norm_doc(1200.0, "NVIDIA H200")))
    real = roofline.norm_table
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: real(name, str(tmp_path)))
    model = load_model("resnet50")
    layer = next(x for x in model.layers if x.name == "bn1")
    for device, gbps in (("H200", 1200e9), ("H100", 1000e9)):
        fwd, bwd = roofline.layer_costs(model, layer, device, "fp32", 32)
        for c in fwd + bwd:
            if "batch_norm" in c.op:
                assert c.memory_s == pytest.approx(c.bytes / gbps, rel=1e-12), (device, c.op)


def test_a_host_run_of_another_gpu_under_the_h200s_name_is_refused(tmp_path):
    from pathlib import Path

    stored = Path(roofline.__file__).resolve().parent.parent / "data" / "kernels" / "host_dispatch_h100.json"
    (tmp_path / "host_dispatch_h200.json").write_text(stored.read_text())  # the H100's run, misnamed
    base = dataclasses.replace(MICROBENCH["H100"], host_dispatch=None)
    with pytest.raises(ModelError, match="host_dispatch_h200.json") as info:
        measured_host_microbench(base, DEVICES["H200"], "x", tmp_path)
    assert "\n" not in str(info.value) and "host_dispatch_h100.json" in str(info.value)
    (tmp_path / "host_dispatch_h100.json").write_text(stored.read_text())
    assert measured_host_microbench(base, DEVICES["H100"], "x", tmp_path).host_dispatch is not None
