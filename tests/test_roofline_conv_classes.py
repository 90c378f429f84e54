"""Convolutions costed by shape class (docs/compute-model.md, "Convolutions by shape class"): a convolution's
geometry recovered from the kernel tables' counts (checked on paper for layers whose shapes are known), the class
names shared with benchmarks/conv_shapes.py's grid, the table's interpolation rule against a brute-force
computation written separately, the table wired into the roofline, and no table = the model as before."""

import dataclasses
import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest

from ddlsim.workload import roofline
from ddlsim.workload.devices import DEVICES, MICROBENCH
from ddlsim.workload.zoo import load_model
from roofline_helpers import pin_host_runs, zoo_digest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("conv_shapes_bench", ROOT / "benchmarks" / "conv_shapes.py")
conv_shapes = importlib.util.module_from_spec(_spec)
sys.modules["conv_shapes_bench"] = conv_shapes
_spec.loader.exec_module(conv_shapes)

CNNS = ["alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "inception_v3", "googlenet"]


def _fwd_conv(model: str, layer: str):
    return next(k for k in roofline.kernel_table(model)[layer][0] if k.op == "convolution")


# --- geometry from the counts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,layer,expected", [
    # (kh, kw, stride, C_in, C_out, H_in, H_out, W_out), from the torchvision definitions
    ("resnet50", "conv1", (7, 7, 2, 3, 64, 224, 112, 112)),
    ("resnet50", "layer1.0.conv2", (3, 3, 1, 64, 64, 56, 56, 56)),
    ("resnet50", "layer2.0.conv2", (3, 3, 2, 128, 128, 56, 28, 28)),  # torchvision's v1.5: stride in the 3x3
    ("resnet50", "layer2.0.downsample.0", (1, 1, 2, 256, 512, 56, 28, 28)),
    ("resnet50", "layer4.2.conv3", (1, 1, 1, 512, 2048, 7, 7, 7)),
    ("alexnet", "features.0", (11, 11, 4, 3, 64, 224, 55, 55)),  # padding 2, with a bias
    ("alexnet", "features.3", (5, 5, 1, 64, 192, 27, 27, 27)),
    ("vgg16", "features.0", (3, 3, 1, 3, 64, 224, 224, 224)),
    ("inception_v3", "Conv2d_2a_3x3.conv", (3, 3, 1, 32, 32, 149, 147, 147)),  # no padding
    ("inception_v3", "Mixed_6a.branch3x3.conv", (3, 3, 2, 288, 384, 35, 17, 17)),
    ("inception_v3", "Mixed_6b.branch7x7_2.conv", (1, 7, 1, 128, 128, 17, 17, 17)),
    ("inception_v3", "Mixed_7b.branch3x3_2a.conv", (1, 3, 1, 384, 384, 8, 8, 8)),
])
def test_geometry_of_known_layers(model, layer, expected):
    g = roofline.conv_geometry(_fwd_conv(model, layer))
    assert (g.kh, g.kw, g.stride, g.c_in, g.c_out, g.hw_in, g.h_out, g.w_out) == expected


def test_every_zoo_convolution_has_a_geometry_consistent_with_its_counts_and_a_measured_class():
    grid_classes = {s["class"] for s in conv_shapes.grid()}
    for model in CNNS:
        for name, (fwd, _) in roofline.kernel_table(model).items():
            for k in fwd:
                if k.op != "convolution":
                    continue
                g = roofline.conv_geometry(k)
                assert g is not None, (model, name)
                # the counts back from the geometry
                assert k.flops[1] == 2 * g.c_in * g.kh * g.kw * g.c_out * g.h_out * g.w_out
                assert k.read[1] == g.c_in * g.hw_in ** 2 and k.write[1] == g.c_out * g.h_out * g.w_out
                assert g.shape_class in grid_classes, (model, name, g)


def test_class_names_agree_with_the_benchmark_grid():
    for s in conv_shapes.grid():
        assert roofline.conv_class_name(s["kh"], s["kw"], s["stride"], s["c_in"]) == s["class"], s
    assert roofline.conv_class_name(7, 1, 1, 128) == roofline.conv_class_name(1, 7, 1, 128) == "1x7"


# --- the interpolation rule against a brute force ----------------------------------------------------------------

def _random_table(rng, classes=("3x3", "1x1"), n=12):
    rows = []
    for cls in classes:
        for _ in range(n):
            c_in, c_out = rng.choice([16, 32, 48, 64, 96, 128, 256, 384, 512]), rng.choice([16, 32, 64, 128, 512])
            hw, batch = rng.choice([7, 13, 14, 28, 56]), rng.choice([8, 32, 128])
            for prec in ("fp32", "fp16"):
                rates = [rng.uniform(5, 300) for _ in range(3)]
                rows.append([cls, 3, 3, 1, c_in, c_out, hw, batch, hw, hw, prec] + rates)
    return {"columns": conv_shapes.TABLE_COLUMNS, "points": rows, "source": "random"}


def _brute_force(doc, cls, prec, direction, c_in, c_out, m):
    """Written apart from ConvTable: natural logs (a common scale of the distances leaves the neighbours and the
    inverse-square weights' ratios unchanged), every point's distance, the 4 nearest, the weighted geometric mean
    of their rates (1e12 x TFLOP/s)."""
    col = {c: i for i, c in enumerate(doc["columns"])}
    cands = []
    for i, r in enumerate(doc["points"]):
        if r[col["class"]] != cls or r[col["precision"]] != prec or not r[col[f"{direction}_tflops"]]:
            continue
        rm = r[col["batch"]] * r[col["h_out"]] * r[col["w_out"]]
        d2 = ((math.log(c_in) - math.log(r[col["c_in"]])) ** 2 + (math.log(c_out) - math.log(r[col["c_out"]])) ** 2
              + (math.log(m) - math.log(rm)) ** 2)
        cands.append((d2, i, r[col[f"{direction}_tflops"]] * 1e12))
    if not cands:
        return None
    cands.sort()
    near = cands[:4]
    if near[0][0] == 0:
        same = [rate for d2, _, rate in near if d2 == 0]
        return math.prod(same) ** (1 / len(same))
    wsum = sum(1 / d2 for d2, _, _ in near)
    return math.exp(sum(math.log(rate) / d2 for d2, _, rate in near) / wsum)


def test_rate_matches_a_brute_force_on_seeded_random_tables():
    rng = random.Random(2025)
    for trial in range(30):
        doc = _random_table(rng)
        table = roofline.ConvTable.from_doc(doc)
        for _ in range(20):
            g = roofline.ConvGeometry(3, 3, 1, rng.choice([5, 20, 64, 100, 300, 700]), rng.choice([8, 64, 200, 1000]),
                                      0, rng.choice([5, 14, 30]), rng.choice([5, 14, 30]))
            batch = rng.choice([1, 32, 128, 256])
            for prec in ("fp32", "fp16", "bf16"):
                for direction in ("fwd", "dgrad", "wgrad"):
                    got = table.rate(g, batch, prec, direction)
                    want = _brute_force(doc, "3x3", "fp16" if prec == "bf16" else prec, direction, g.c_in, g.c_out,
                                        batch * g.h_out * g.w_out)
                    assert got == pytest.approx(want, rel=1e-9), (trial, g, batch, prec, direction)


def test_rate_on_paper():
    # two points, query midway in log space (C_in 64 between 32 and 128; C_out and M equal): equal weights, the
    # geometric mean of 10 and 40 TFLOP/s = 20
    rows = [["3x3", 3, 3, 1, 32, 64, 14, 32, 14, 14, "fp32", 10.0, 1.0, None],
            ["3x3", 3, 3, 1, 128, 64, 14, 32, 14, 14, "fp32", 40.0, 4.0, None]]
    table = roofline.ConvTable.from_doc({"columns": conv_shapes.TABLE_COLUMNS, "points": rows})
    g = roofline.ConvGeometry(3, 3, 1, 64, 64, 14, 14, 14)
    assert table.rate(g, 32, "fp32", "fwd") == pytest.approx(20e12, rel=1e-12)
    assert table.rate(g, 32, "fp32", "dgrad") == pytest.approx(2e12, rel=1e-12)
    assert table.rate(g, 32, "fp32", "wgrad") is None  # no point has the direction
    # on a measured point: that point's rate exactly
    assert table.rate(dataclasses.replace(g, c_in=128), 32, "fp32", "fwd") == pytest.approx(40e12, rel=1e-12)
    # a third of the way (log2 distance 1/3 and 2/3 of C_in 32 -> 128... weights 9 and 9/4): 2^((9 log 10 + 2.25
    # log 40) / 11.25)
    g2 = dataclasses.replace(g, c_in=round(32 * 2 ** (2 / 3)))
    d1, d2 = math.log2(g2.c_in / 32), math.log2(128 / g2.c_in)
    want = 2 ** ((math.log2(10) / d1 ** 2 + math.log2(40) / d2 ** 2) / (1 / d1 ** 2 + 1 / d2 ** 2)) * 1e12
    assert table.rate(g2, 32, "fp32", "fwd") == pytest.approx(want, rel=1e-12)
    # another class or precision: no point, None (the roofline falls back to the median share)
    assert table.rate(dataclasses.replace(g, kh=1, kw=1), 32, "fp32", "fwd") is None
    assert table.rate(g, 32, "tf32", "fwd") is None


# --- the table in the roofline ------------------------------------------------------------------------------------

def _constant_table(cls_rates: dict) -> roofline.ConvTable:
    """A table whose class has one point per precision with the given (fwd, dgrad, wgrad) TFLOP/s."""
    rows = [[cls, 3, 3, 1, 64, 64, 56, 32, 56, 56, prec] + list(r) for (cls, prec), r in cls_rates.items()]
    return roofline.ConvTable.from_doc({"columns": conv_shapes.TABLE_COLUMNS, "points": rows})


def test_the_roofline_costs_a_convolution_by_its_class_rate(monkeypatch):
    table = _constant_table({("3x3", "tf32"): (100.0, 50.0, 25.0)})
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: table if name == "H100" else None)
    model = load_model("resnet50")
    conv3 = next(layer for layer in model.layers if layer.name == "layer1.0.conv2")
    fwd, bwd = roofline.layer_costs(model, conv3, "H100", "tf32", 128)
    flops = 2 * 64 * 64 * 9 * 56 * 56 * 128
    assert fwd[0].op == "convolution" and fwd[0].compute_s == pytest.approx(flops / 100e12, rel=1e-12)
    dgrad = next(c for c in bwd if c.op == "convolution_backward_input")
    wgrad = next(c for c in bwd if c.op.startswith("convolution_backward_weight"))
    assert dgrad.compute_s == pytest.approx(flops / 50e12, rel=1e-12)
    assert wgrad.compute_s == pytest.approx(flops / 25e12, rel=1e-12)
    # a 1x1 convolution: its class is not in the table, so the median share as before
    conv1x1 = next(layer for layer in model.layers if layer.name == "layer1.0.conv1")
    with_table = roofline.layer_costs(model, conv1x1, "H100", "tf32", 128)
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: None)
    assert roofline.layer_costs(model, conv1x1, "H100", "tf32", 128) == with_table
    assert roofline.layer_costs(model, conv3, "H100", "tf32", 128)[0][0].compute_s != fwd[0].compute_s


def test_without_a_table_the_model_is_unchanged(monkeypatch):
    # per-layer forward and backward times of every zoo CNN on H100, H200, B200, A100 in every precision at batch
    # 32 and 128, hashed: the values of the model before convolution tables existed (branch gpu25's base, 0055438)
    # (and the H100 preset as it was then: no host-dispatch run of its own, which came with the table)
    pin_host_runs(monkeypatch)  # the stored host runs of that time (run 4 replaced them)
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: None)
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: None)
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: None)
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: None)
    monkeypatch.setattr(roofline, "BIAS_KERNELS", False)  # (and without the bias kernels, test_bias_kernels)
    monkeypatch.setitem(MICROBENCH, "H100", dataclasses.replace(MICROBENCH["H100"], host_dispatch=None,
                                                                norm_share=None, conv_3x3_share=None))
    assert zoo_digest() == "47f5b9454d30e853d9a94c3bf8ec59b7600efdf74a425a0e8e6d5d2307cc0e4c"


def test_table_file_lookup_and_the_shared_die(tmp_path):
    doc = _random_table(random.Random(1))
    (tmp_path / "conv_classes_h100.json").write_text(json.dumps(doc))
    h100 = roofline.conv_table("H100", str(tmp_path))
    assert h100 is not None and roofline.conv_table("H200", str(tmp_path)) == h100  # the same GH100 die
    assert roofline.conv_table("B200", str(tmp_path)) is None and roofline.conv_table("A100", str(tmp_path)) is None


def test_quick_cpu_run_to_table_to_rate(tmp_path):
    pytest.importorskip("torch")
    raw, table_path = tmp_path / "raw.json", tmp_path / "conv_classes_cpu.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(raw)]) == 0
    assert conv_shapes.main(["--table", str(raw), "--out", str(table_path)]) == 0
    doc = json.loads(raw.read_text())
    table = roofline.ConvTable.from_doc(json.loads(table_path.read_text()))
    for p in doc["points"]:
        h_out = (p["hw"] + 2 * p["pad_h"] - p["kh"]) // p["stride"] + 1
        w_out = (p["hw"] + 2 * p["pad_w"] - p["kw"]) // p["stride"] + 1
        g = roofline.ConvGeometry(p["kh"], p["kw"], p["stride"], p["c_in"], p["c_out"], p["hw"], h_out, w_out)
        for d in ("fwd", "dgrad", "wgrad"):
            assert table.rate(g, p["batch"], p["precision"], d) == pytest.approx(p[f"{d}_tflops"] * 1e12, rel=1e-4)


def test_table_of_a_file_that_is_not_a_run_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"x\": 1}")
    out = tmp_path / "t.json"
    assert conv_shapes.main(["--table", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--table" in err and "not a benchmarks/conv_shapes.py result" in err and len(err.splitlines()) == 1
    assert not out.exists()


def h200_or(h100_table, stem):
    """What the H200 preset reads: its own stored table where the package has one (a device run of its own, dropped
    in by the lead: tests/test_roofline_device_tables.py), else the H100's (the same die)."""
    own = ROOT / "python" / "ddlsim" / "data" / "kernels" / f"{stem}_h200.json"
    if not own.is_file():
        return h100_table
    kind = {"norm_classes": roofline.NormTable, "conv_classes": roofline.ConvTable,
            "linear_classes": roofline.LinearTable, "pointwise": roofline.PointwiseTable}[stem]
    return kind.from_doc(json.loads(own.read_text()))


def test_the_h100_and_h200_presets_use_the_stored_h100_table():
    """conv_classes_h100.json: benchmarks/conv_shapes.py's full grid, its --extra grid and its --unequal grid on the
    H100 (382 + 192 + 128 shapes x 3 precisions), read by the H100 and by the H200 (the same die); the B200 and older
    parts have none.
    norm_classes_h100.json: the --norm grid (216 shapes x fp32 / fp16), read by both too."""
    doc = json.loads((ROOT / "python" / "ddlsim" / "data" / "kernels" / "conv_classes_h100.json").read_text())
    assert doc["columns"] == conv_shapes.TABLE_COLUMNS
    assert len(doc["points"]) == (len(conv_shapes.grid()) + len(conv_shapes.grid(extra=True))
                                   + len(conv_shapes.grid(unequal=True))) * 3
    norm = roofline.norm_table("H100")
    assert norm is not None and roofline.norm_table("H200") == h200_or(norm, "norm_classes")
    assert roofline.norm_table("A100") is None
    assert "H100" in doc["device"] and doc["stopped_early"] is False
    table = roofline.conv_table("H100")
    assert table is not None and roofline.conv_table("H200") == h200_or(table, "conv_classes")
    assert roofline.conv_table("B200") is None and roofline.conv_table("A100") is None
    # every grid point of the file is returned exactly at its own coordinates
    col = {c: i for i, c in enumerate(doc["columns"])}
    for row in doc["points"][::37]:
        g = roofline.ConvGeometry(row[col["kh"]], row[col["kw"]], row[col["stride"]], row[col["c_in"]],
                                  row[col["c_out"]], row[col["hw"]], row[col["h_out"]], row[col["w_out"]])
        same = [r for r in doc["points"] if r[col["class"]] == row[col["class"]] and r[col["precision"]] ==
                row[col["precision"]] and (r[col["c_in"]], r[col["c_out"]], r[col["batch"]] * r[col["h_out"]] *
                r[col["w_out"]]) == (g.c_in, g.c_out, row[col["batch"]] * g.h_out * g.w_out)]
        want = math.prod(r[col["fwd_tflops"]] for r in same) ** (1 / len(same)) * 1e12
        assert table.rate(g, row[col["batch"]], row[col["precision"]], "fwd") == pytest.approx(want, rel=1e-9)


def test_the_stored_h100_gemm_and_pointwise_tables_are_read_by_the_h100_and_h200_and_give_their_points_back():
    """linear_classes_h100.json (conv_shapes.py --linear on the H100, smallest shapes first: 520 of its 557 shapes
    before the 30 s budget) and pointwise_h100.json (--pointwise), read by the H100 and the H200 only; a stored GEMM
    point is returned at its own coordinates (no other point shares them)."""
    kernels = ROOT / "python" / "ddlsim" / "data" / "kernels"
    lin = json.loads((kernels / "linear_classes_h100.json").read_text())
    assert "H100" in lin["device"] and len(lin["points"]) == 520 * 3
    table = roofline.linear_table("H100")
    assert table is not None and roofline.linear_table("H200") == h200_or(table, "linear_classes")
    assert roofline.linear_table("A100") is None
    col = {c: i for i, c in enumerate(lin["columns"])}
    for row in lin["points"][::53]:
        for direction in ("fwd", "dgrad", "wgrad"):
            got = table.rate(row[col["m"]], row[col["k"]], row[col["n"]], row[col["precision"]], direction)
            assert got == pytest.approx(row[col[f"{direction}_tflops"]] * 1e12, rel=1e-9)
    pw = roofline.pointwise_table("H100")
    assert pw is not None and roofline.pointwise_table("H200") == h200_or(pw, "pointwise")
    assert roofline.pointwise_table("B200") is None


# --- BatchNorm by shape (conv_shapes.py --norm) -------------------------------------------------------------------

def test_batch_norm_shape_of_known_layers_and_every_zoo_batch_norm():
    bn1 = roofline.kernel_table("resnet50")["bn1"]
    assert [roofline.batch_norm_shape(k) for k in bn1[0] + bn1[1] if "batch_norm" in k.op] == [(64, 112 * 112)] * 2
    stem = roofline.kernel_table("inception_v3")["Conv2d_2a_3x3.bn"]
    assert roofline.batch_norm_shape(next(k for k in stem[0] if "batch_norm" in k.op)) == (32, 147 * 147)
    grid = conv_shapes.norm_grid()
    c_range = (min(s["channels"] for s in grid), max(s["channels"] for s in grid))
    hw_range = (min(s["hw"] for s in grid), max(s["hw"] for s in grid))
    for model in CNNS:
        for name, (fwd, bwd) in roofline.kernel_table(model).items():
            shapes = {roofline.batch_norm_shape(k) for k in fwd + bwd if "batch_norm" in k.op}
            assert None not in shapes and len(shapes) <= 1, (model, name, shapes)
            for c, hw2 in shapes:  # inside the grid's ranges: interpolation, not extrapolation
                hw = math.isqrt(hw2)
                assert hw * hw == hw2 and c_range[0] <= c <= c_range[1] and hw_range[0] <= hw <= hw_range[1]
                assert c * hw2 <= conv_shapes.MAX_NORM_ELEMENTS_PER_SAMPLE


def _random_norm_doc(rng):
    rows = []
    for _ in range(15):
        c, hw, b = rng.choice([32, 64, 96, 192, 512, 2048]), rng.choice([7, 8, 17, 35, 56]), rng.choice([32, 128])
        for prec in ("fp32", "fp16"):
            rows.append([c, hw, b, prec, rng.uniform(200, 3000), rng.uniform(200, 3000)])
    return {"columns": conv_shapes.NORM_TABLE_COLUMNS, "points": rows}


def test_norm_bandwidth_matches_a_brute_force():
    rng = random.Random(7)
    for _ in range(30):
        doc = _random_norm_doc(rng)
        table = roofline.NormTable.from_doc(doc)
        for _ in range(20):
            c, m = rng.choice([20, 64, 100, 800, 3000]), rng.choice([32 * 49, 5000, 128 * 35 * 35, 10 ** 6])
            for size, prec in ((4, "fp32"), (2, "fp16")):
                for d in ("fwd", "bwd"):
                    cands = sorted(((math.log(c) - math.log(r[0])) ** 2 + (math.log(m) - math.log(r[2] * r[1] ** 2))
                                    ** 2, i, r[4 if d == "fwd" else 5] * 1e9)
                                   for i, r in enumerate(doc["points"]) if r[3] == prec)[:4]
                    if cands[0][0] == 0:
                        same = [v for d2, _, v in cands if d2 == 0]
                        want = math.prod(same) ** (1 / len(same))
                    else:
                        want = math.exp(sum(math.log(v) / d2 for d2, _, v in cands) / sum(1 / d2 for d2, _, _ in cands))
                    assert table.bandwidth(c, m, size, d) == pytest.approx(want, rel=1e-9)


def test_the_roofline_moves_batch_norm_bytes_at_the_tables_bandwidth(monkeypatch):
    rows = [[64, 112, 32, "fp32", 1000.0, 500.0]]
    table = roofline.NormTable.from_doc({"columns": conv_shapes.NORM_TABLE_COLUMNS, "points": rows})
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: table if name == "H100" else None)
    model = load_model("resnet50")
    bn1 = next(layer for layer in model.layers if layer.name == "bn1")
    fwd, bwd = roofline.layer_costs(model, bn1, "H100", "fp32", 32)
    f = next(c for c in fwd if "batch_norm" in c.op)
    b = next(c for c in bwd if "batch_norm" in c.op)
    elems = 32 * 64 * 112 * 112
    # forward: x read twice, y written (+ the 4 C parameters read and 2 C statistics written): 3 elements of 4 bytes
    assert f.bytes == 4 * (3 * elems + 6 * 64) and f.memory_s == pytest.approx(f.bytes / 1000e9, rel=1e-12)
    assert b.memory_s == pytest.approx(b.bytes / 500e9, rel=1e-12)
    # only a precision the table has: fp16 keeps the device's BatchNorm share
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: None)
    without = roofline.layer_costs(model, bn1, "H100", "fp16", 32)
    monkeypatch.setattr(roofline, "norm_table", lambda name, data_dir=None: table if name == "H100" else None)
    assert roofline.layer_costs(model, bn1, "H100", "fp16", 32) == without


def test_quick_cpu_norm_run_to_table_to_bandwidth(tmp_path):
    pytest.importorskip("torch")
    raw, table_path = tmp_path / "raw.json", tmp_path / "norm_classes_cpu.json"
    assert conv_shapes.main(["--norm", "--device", "cpu", "--quick", "--out", str(raw)]) == 0
    assert conv_shapes.main(["--table", str(raw), "--out", str(table_path)]) == 0
    doc = json.loads(raw.read_text())
    assert doc["kind"] == "batchnorm" and doc["shapes_done"] == len(conv_shapes.norm_grid(quick=True))
    table = roofline.NormTable.from_doc(json.loads(table_path.read_text()))
    for p in doc["points"]:
        size = 2 if p["precision"] == "fp16" else 4
        elems = p["batch"] * p["channels"] * p["hw"] ** 2
        assert p["fwd_gbps"] == pytest.approx(3 * elems * size / p["fwd_ms"] / 1e6)
        for d in ("fwd", "bwd"):
            got = table.bandwidth(p["channels"], p["batch"] * p["hw"] ** 2, size, d)
            assert got == pytest.approx(p[f"{d}_gbps"] * 1e9, rel=1e-4)
    (tmp_path / "norm_classes_h100.json").write_text(table_path.read_text())
    assert roofline.norm_table("H200", str(tmp_path)) == roofline.norm_table("H100", str(tmp_path)) is not None


# --- the convolution bias's own kernels ---------------------------------------------------------------------------

def test_bias_kernels_of_a_convolution_with_a_bias_and_none_without():
    model = load_model("vgg16")
    layer = next(layer for layer in model.layers if layer.name == "features.2")  # 64 -> 64, 3x3, 224x224, bias
    fwd, bwd = roofline.layer_kernels(model, layer, "fp32")
    assert [k.op for k in fwd][:2] == ["convolution", "convolution_bias_add"]
    assert [k.op for k in bwd][-3:] == ["convolution_bias_grad", "convolution_backward_input",
                                        "convolution_backward_weight_after_input"]
    costs_f, costs_b = roofline.layer_costs(model, layer, "H200", "fp32", 32)
    out = 32 * 64 * 224 * 224
    add = next(c for c in costs_f if c.op == "convolution_bias_add")
    grad = next(c for c in costs_b if c.op == "convolution_bias_grad")
    # the add reads the output and the 64 biases and writes the output; the gradient reads dy and writes 64 values
    assert add.bytes == 4 * (2 * out + 64) and grad.bytes == 4 * (out + 64)
    bw = DEVICES["H200"].memory_bytes_per_s * MICROBENCH["H200"].copy_share
    assert add.gpu_s == pytest.approx(add.bytes / bw, rel=1e-12) and add.host_s == 0 == grad.host_s
    # every VGG-16 and AlexNet convolution has a bias, no ResNet-50 or Inception-v3 one has
    for name, n in (("vgg16", 13), ("alexnet", 5), ("resnet50", 0), ("inception_v3", 0)):
        m = load_model(name)
        ops = [k.op for layer in m.layers for k in roofline.layer_kernels(m, layer, "fp16")[0]]
        assert ops.count("convolution_bias_add") == n, name


def test_geometry_never_has_an_empty_output():
    # a 3x3 convolution (padding 1) on a 1x1 map, 8 -> 16 channels: without padding the output would be -1 x -1,
    # whose product is the right 1: the geometry must take padding 1
    k = roofline.Kernel("convolution", (0, 2 * 8 * 9 * 16), (16 * 72, 8), (0, 16))
    g = roofline.conv_geometry(k)
    assert (g.kh, g.kw, g.c_in, g.c_out, g.hw_in, g.h_out, g.w_out) == (3, 3, 8, 16, 1, 1, 1)


@pytest.mark.parametrize("name,loader", [("conv_classes_h100.json", "conv_table"),
                                         ("norm_classes_h100.json", "norm_table")])
def test_a_damaged_table_file_is_one_clear_error(tmp_path, name, loader):
    from ddlsim.errors import ModelError

    (tmp_path / name).write_text("{\"columns\": [\"x\"]")  # cut short
    with pytest.raises(ModelError, match=name) as info:
        getattr(roofline, loader)("H100", str(tmp_path))
    assert "\n" not in str(info.value) and "conv_shapes.py --table" in str(info.value)
    (tmp_path / name).write_text("[1, 2]")
    with pytest.raises(ModelError, match=name):
        getattr(roofline, loader)("H200", str(tmp_path))


def test_the_unequal_grid_has_unequal_channels_and_joins_the_main_runs_table(tmp_path):
    shapes = conv_shapes.grid(unequal=True)
    assert shapes and all(s["c_in"] != s["c_out"] and s["stride"] == 1 and s["class"] in ("3x3", "5x5")
                          for s in shapes)
    assert {s["batch"] for s in shapes} == {32, 128}
    pytest.importorskip("torch")
    main, unequal, table_path = tmp_path / "main.json", tmp_path / "unequal.json", tmp_path / "t.json"
    assert conv_shapes.main(["--device", "cpu", "--quick", "--out", str(main)]) == 0
    assert conv_shapes.main(["--unequal", "--device", "cpu", "--quick", "--out", str(unequal)]) == 0
    assert conv_shapes.main(["--table", str(main), str(unequal), "--out", str(table_path)]) == 0
    doc = json.loads(table_path.read_text())
    raw = json.loads(main.read_text())["points"] + json.loads(unequal.read_text())["points"]
    assert len(doc["points"]) == len(raw) and any(p["c_in"] != p["c_out"] and p["class"] == "5x5" for p in raw)
