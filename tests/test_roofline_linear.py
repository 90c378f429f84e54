"""Linear layers costed by a device GEMM table (docs/compute-model.md, "Linear layers by shape"): a Linear layer's
M, K, N recovered from the kernel tables' counts, the table's interpolation (the convolution table's, one function)
against a brute-force computation written separately, the table wired into the roofline for the forward, input and
weight gradient matmuls, and no table = the model exactly as before."""

import json
import math
import random

import pytest

from ddlsim.workload import roofline
from ddlsim.workload.zoo import load_model
from roofline_helpers import conv_shapes, pin_host_runs, zoo_digest


CNNS = ["alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "inception_v3", "googlenet"]


@pytest.mark.parametrize("model,layer,k,n", [
    ("alexnet", "classifier.1", 9216, 4096), ("alexnet", "classifier.6", 4096, 1000),
    ("vgg16", "classifier.0", 25088, 4096), ("googlenet", "aux1.fc1", 2048, 1024),
    ("inception_v3", "AuxLogits.fc", 768, 1000), ("resnet50", "fc", 2048, 1000), ("lenet5", "fc3", 84, 10)])
def test_geometry_of_known_layers(model, layer, k, n):
    fwd, bwd = roofline.kernel_table(model)[layer]
    mm = next(kern for kern in fwd if kern.op in roofline.LINEAR_OPS)
    assert roofline.linear_geometry(mm) == roofline.LinearGeometry(k, n, 1, True)  # torchvision: all with a bias
    dirs = [roofline.linear_direction(kern, "bwd") for kern in bwd if kern.op in roofline.LINEAR_OPS]
    assert sorted(dirs) == ["dgrad", "wgrad"]
    assert roofline.linear_direction(mm, "fwd") == "fwd"


def test_geometry_on_paper_and_what_is_not_a_linear():
    # 3 tokens per sample, K = 10, N = 6, no bias: reads 30, writes 18, 2 x 3 x 10 x 6 = 360 FLOPs per sample
    k = roofline.Kernel("mm", (0, 360), (60, 30), (0, 18))
    assert roofline.linear_geometry(k) == roofline.LinearGeometry(10, 6, 3, False)
    assert roofline.linear_geometry(roofline.Kernel("mm", (0, 360), (66, 30), (0, 18))).bias is True
    assert roofline.linear_geometry(roofline.Kernel("mm", (0, 360), (61, 30), (0, 18))) is None  # weight != K N
    # a layer without a kernel table (one matmul-like kernel reading only its parameters) has no geometry
    assert roofline.linear_geometry(roofline.Kernel("mm", (0, 1000), (50, 0), (0, 0))) is None
    assert roofline.linear_geometry(roofline.Kernel("relu_", (0, 0), (0, 8), (0, 8))) is None
    assert roofline.linear_direction(roofline.Kernel("sum", (0, 0), (0, 8), (8, 0)), "bwd") is None


def test_every_zoo_linear_has_a_consistent_geometry():
    seen = 0
    for m in CNNS + ["lenet5"]:
        for fwd, bwd in roofline.kernel_table(m).values():
            mms = [k for k in fwd if k.op in roofline.LINEAR_OPS]
            if not mms:
                continue
            g = roofline.linear_geometry(mms[0])
            assert g is not None and 2 * g.tokens * g.k * g.n == mms[0].flops[1]
            for kern in bwd:
                if kern.op in roofline.LINEAR_OPS:
                    assert kern.flops[1] == mms[0].flops[1]
            seen += 1
    assert seen == 3 + 3 + 4 + 2 + 5 + 3  # AlexNet, VGG-16, the four ResNets, Inception-v3, GoogLeNet, LeNet-5


# --- the interpolation against a brute force written apart --------------------------------------------------------

def _random_table(rng: random.Random) -> dict:
    rows = []
    for _ in range(rng.randint(1, 25)):
        rates = [rng.choice([None, rng.uniform(0.5, 900.0)]) for _ in range(3)]
        if not any(rates):
            rates[0] = 1.0
        rows.append([rng.choice([8, 32, 100, 128, 4096]), rng.choice([256, 432, 1000, 9216]),
                     rng.choice([64, 1000, 4096, 27552]), rng.choice(["fp32", "tf32", "fp16"])] + rates)
    return {"columns": conv_shapes.LINEAR_TABLE_COLUMNS, "points": rows}


def _brute_force(doc, precision, direction, m, k, n):
    col = {c: i for i, c in enumerate(doc["columns"])}
    cands = []
    for i, r in enumerate(doc["points"]):
        if r[col["precision"]] != precision or not r[col[f"{direction}_tflops"]]:
            continue
        d2 = sum((math.log(a) - math.log(r[col[c]])) ** 2 for a, c in ((m, "m"), (k, "k"), (n, "n")))
        cands.append((d2, i, r[col[f"{direction}_tflops"]] * 1e12))
    if not cands:
        return None
    near = sorted(cands)[:4]
    if near[0][0] == 0:
        same = [rate for d2, _, rate in near if d2 == 0]
        return math.prod(same) ** (1 / len(same))
    return math.exp(sum(math.log(rate) / d2 for d2, _, rate in near) / sum(1 / d2 for d2, _, _ in near))


def test_rate_matches_a_brute_force_on_seeded_random_tables():
    rng = random.Random(2026)
    for trial in range(40):
        doc = _random_table(rng)
        table = roofline.LinearTable.from_doc(doc)
        for _ in range(20):
            m, k, n = rng.choice([1, 8, 32, 128, 500]), rng.choice([84, 256, 768, 9216, 25088]), rng.choice([10, 1000, 4096])
            for prec in ("fp32", "tf32", "fp16", "bf16"):
                for direction in ("fwd", "dgrad", "wgrad"):
                    got = table.rate(m, k, n, prec, direction)
                    want = _brute_force(doc, "fp16" if prec == "bf16" else prec, direction, m, k, n)
                    assert (got is None) == (want is None), (trial, m, k, n, prec, direction)
                    if want is not None:
                        assert got == pytest.approx(want, rel=1e-9), (trial, m, k, n, prec, direction)


def test_rate_on_paper():
    # two points, query midway in log space (M 64 between 32 and 128; K, N equal): the geometric mean of 10 and 40
    rows = [[32, 4096, 1000, "fp16", 10.0, 1.0, None], [128, 4096, 1000, "fp16", 40.0, 4.0, None]]
    table = roofline.LinearTable.from_doc({"columns": conv_shapes.LINEAR_TABLE_COLUMNS, "points": rows})
    assert table.rate(64, 4096, 1000, "fp16", "fwd") == pytest.approx(20e12, rel=1e-12)
    assert table.rate(64, 4096, 1000, "bf16", "dgrad") == pytest.approx(2e12, rel=1e-12)
    assert table.rate(64, 4096, 1000, "fp16", "wgrad") is None
    assert table.rate(128, 4096, 1000, "fp16", "fwd") == pytest.approx(40e12, rel=1e-12)
    assert table.rate(64, 4096, 1000, "fp32", "fwd") is None


# --- the table in the roofline ------------------------------------------------------------------------------------

def test_the_roofline_costs_a_linear_layer_by_the_tables_rate(monkeypatch):
    rows = [[32, 9216, 4096, "fp32", 8.0, 4.0, 2.0]]
    table = roofline.LinearTable.from_doc({"columns": conv_shapes.LINEAR_TABLE_COLUMNS, "points": rows})
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: table if name == "H100" else None)
    model = load_model("alexnet")
    fc = next(layer for layer in model.layers if layer.name == "classifier.1")
    fwd, bwd = roofline.layer_costs(model, fc, "H100", "fp32", 32)
    flops = 2 * 32 * 9216 * 4096
    assert fwd[0].op == "addmm" and fwd[0].compute_s == pytest.approx(flops / 8e12, rel=1e-12)
    mms = [c for c in bwd if c.op == "mm"]
    assert [c.compute_s for c in mms] == pytest.approx([flops / 4e12, flops / 2e12], rel=1e-12)  # dgrad, wgrad
    # the other kernels (ReLU, dropout, the bias gradient) and convolutions are untouched; another device too
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: None)
    without = roofline.layer_costs(model, fc, "H100", "fp32", 32)
    assert [c for c in without[0] if c.op != "addmm"] == [c for c in fwd if c.op != "addmm"]
    assert without[0][0].compute_s != fwd[0].compute_s
    conv = next(layer for layer in model.layers if layer.name == "features.3")
    assert roofline.layer_costs(model, conv, "H100", "fp32", 32) == without_conv(monkeypatch, table, model, conv)


def without_conv(monkeypatch, table, model, conv):
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: table)
    return roofline.layer_costs(model, conv, "H100", "fp32", 32)


def test_without_a_linear_table_the_model_is_unchanged(monkeypatch):
    # per-layer forward and backward times of every zoo CNN on H100, H200, B200, A100 in every precision at batch
    # 32 and 128, hashed: the model before GEMM and pointwise tables existed (branch roof26's base, 9907d0c)
    # and the convolution table as it was then: the --unequal grid's points were appended to it after (run 3)
    from pathlib import Path
    doc = json.loads((Path(roofline.__file__).parent.parent / "data" / "kernels" / "conv_classes_h100.json").read_text())
    doc["points"] = doc["points"][:(len(conv_shapes.grid()) + len(conv_shapes.grid(extra=True))) * 3]
    before = roofline.ConvTable.from_doc(doc)
    pin_host_runs(monkeypatch)  # the stored host runs of that time (run 4 replaced them)
    monkeypatch.setattr(roofline, "conv_table", lambda name, data_dir=None: before if name in ("H100", "H200") else None)
    monkeypatch.setattr(roofline, "linear_table", lambda name, data_dir=None: None)
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: None)
    assert zoo_digest() == "e4b97a69b174dca0e45488e05106fa0d15357f3453861b832b86a2fb08e5671f"


def test_table_file_lookup_the_shared_die_and_a_damaged_file(tmp_path):
    from ddlsim.errors import ModelError

    (tmp_path / "linear_classes_h100.json").write_text(json.dumps(_random_table(random.Random(3))))
    h100 = roofline.linear_table("H100", str(tmp_path))
    assert h100 is not None and roofline.linear_table("H200", str(tmp_path)) == h100
    assert roofline.linear_table("A100", str(tmp_path)) is None
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "linear_classes_h100.json").write_text("{\"columns\": [\"m\"]")
    with pytest.raises(ModelError, match="linear_classes_h100.json") as info:
        roofline.linear_table("H100", str(bad))
    assert "\n" not in str(info.value) and "conv_shapes.py --table" in str(info.value)


# --- the benchmark ------------------------------------------------------------------------------------------------

def test_the_grid_is_generic_and_ordered_for_an_early_stop():
    grid = conv_shapes.linear_grid()
    feats = conv_shapes.LINEAR_FEATURES
    assert feats[0] == 256 and 16384 in feats and max(feats) >= 25088  # VGG-16's 25088 inside the grid's span
    assert all(f % 8 == 0 for f in feats) and sum(f & (f - 1) == 0 for f in feats) == 3  # 256, 2048, 16384
    assert {s["m"] for s in grid} == set(conv_shapes.LINEAR_ROWS) and {32, 128} <= set(conv_shapes.LINEAR_ROWS)
    assert all(2 * s["m"] * s["k"] * s["n"] <= conv_shapes.MAX_LINEAR_FLOPS for s in grid)
    work = [s["m"] * s["k"] * s["n"] for s in grid]
    assert work == sorted(work)


def test_quick_cpu_run_to_table_to_rate(tmp_path):
    pytest.importorskip("torch")
    raw, path = tmp_path / "raw.json", tmp_path / "linear_classes_cpu.json"
    assert conv_shapes.main(["--linear", "--device", "cpu", "--quick", "--out", str(raw)]) == 0
    assert conv_shapes.main(["--table", str(raw), "--out", str(path)]) == 0
    doc = json.loads(raw.read_text())
    assert doc["kind"] == "linear" and len(doc["points"]) == 2 * 3
    table = roofline.LinearTable.from_doc(json.loads(path.read_text()))
    for p in doc["points"]:
        for d in ("fwd", "dgrad", "wgrad"):
            assert table.rate(p["m"], p["k"], p["n"], p["precision"], d) == pytest.approx(p[f"{d}_tflops"] * 1e12,
                                                                                          rel=1e-4)


def test_runs_of_different_kinds_do_not_join_and_two_grids_are_refused(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"kind": "linear", "points": []}))
    b.write_text(json.dumps({"kind": "batchnorm", "points": []}))
    out = tmp_path / "t.json"
    assert conv_shapes.main(["--table", str(a), str(b), "--out", str(out)]) == 2
    assert conv_shapes.main(["--linear", "--norm", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "another kind" in err[0] and "--linear" in err[1]
    assert not out.exists()


def test_dry_run_lists_the_grid_and_measuring_without_a_gpu_is_one_clear_error(tmp_path, capsys, monkeypatch):
    out = tmp_path / "linear.json"
    assert conv_shapes.main(["--linear", "--dry-run", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == conv_shapes.linear_grid()
    assert not out.exists()
    pytest.importorskip("torch")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    assert conv_shapes.main(["--linear", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device cuda but torch sees no GPU") and len(err.splitlines()) == 1
    assert not out.exists()
