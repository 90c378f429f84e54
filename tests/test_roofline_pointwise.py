"""Element-wise, pooling and concatenation kernels costed by a device bandwidth table (docs/compute-model.md,
"Element-wise and pooling kernels by size"): a kernel's class from its counts, the table's interpolation (the
convolution table's idw_log2) against a brute force written apart, the table in the roofline, and the byte
accounting of benchmarks/conv_shapes.py --pointwise equal to the kernel tables' own."""

import json
import math
import random

import pytest

from ddlsim.workload import roofline
from ddlsim.workload.zoo import load_model
from roofline_helpers import conv_shapes



def _kernel(model, layer, op, phase):
    fwd, bwd = roofline.kernel_table(model)[layer]
    return next(k for k in (fwd if phase == "fwd" else bwd) if k.op == op and k.write[1])  # not the step counter


@pytest.mark.parametrize("model,layer,op,phase,cls", [
    ("alexnet", "features.0", "max_pool2d_with_indices", "fwd", "max_pool2d_with_indices/s2"),  # 55 -> 27
    ("alexnet", "features.0", "max_pool2d_with_indices_backward", "bwd", "max_pool2d_with_indices_backward/s2"),
    ("resnet50", "bn1", "max_pool2d_with_indices", "fwd", "max_pool2d_with_indices/s2"),  # 112 -> 56, pad 1
    ("inception_v3", "Mixed_5b.branch3x3dbl_3.bn", "avg_pool2d", "fwd", "avg_pool2d/s1"),  # 3x3, pad 1
    ("inception_v3", "Mixed_5b.branch3x3dbl_3.bn", "avg_pool2d_backward", "bwd", "avg_pool2d_backward/s1"),
    ("inception_v3", "Mixed_5b.branch_pool.bn", "cat", "fwd", "cat"),
    ("alexnet", "features.0", "relu_", "fwd", "relu_"),
    ("alexnet", "features.0", "threshold_backward", "bwd", "threshold_backward"),
    ("alexnet", "features.0", "convolution", "fwd", None),
])
def test_class_of_known_kernels(model, layer, op, phase, cls):
    assert roofline.pointwise_class(_kernel(model, layer, op, phase)) == cls


def test_googlenets_stride_1_pools_and_the_benchmarks_classes():
    classes = set()
    for m in ["alexnet", "vgg16", "resnet50", "inception_v3", "googlenet"]:
        for fwd, bwd in roofline.kernel_table(m).values():
            classes |= {roofline.pointwise_class(k) for k in fwd + bwd} - {None}
    assert "max_pool2d_with_indices/s1" in classes  # GoogLeNet's branch pools: 3x3, stride 1, padding 1
    # every class the zoo's CNNs have is measured by the benchmark but Inception's auxiliary 5x5 stride-3 pool
    assert classes - set(conv_shapes.POINTWISE_OPS) == {"avg_pool2d/s2", "avg_pool2d_backward/s2"}


@pytest.mark.parametrize("model,layer,op,phase,n_in,n_out", [
    ("alexnet", "features.0", "max_pool2d_with_indices", "fwd", 64 * 55 * 55, 64 * 27 * 27),
    ("alexnet", "features.0", "max_pool2d_with_indices_backward", "bwd", 64 * 55 * 55, 64 * 27 * 27),
    ("inception_v3", "Mixed_5b.branch3x3dbl_3.bn", "avg_pool2d", "fwd", 192 * 35 * 35, 192 * 35 * 35),
    ("inception_v3", "Mixed_5b.branch3x3dbl_3.bn", "avg_pool2d_backward", "bwd", 192 * 35 * 35, 192 * 35 * 35),
    ("inception_v3", "Mixed_5b.branch_pool.bn", "cat", "fwd", 256 * 35 * 35, 256 * 35 * 35),
    ("alexnet", "features.0", "relu_", "fwd", 64 * 55 * 55, 64 * 55 * 55),
    ("alexnet", "features.0", "threshold_backward", "bwd", 64 * 55 * 55, 64 * 55 * 55),
    ("inception_v3", "Mixed_5b.branch1x1.conv", "add", "bwd", 192 * 35 * 35, 192 * 35 * 35),
    ("resnet50", "layer1.0.downsample.1", "add_", "fwd", 256 * 56 * 56, 256 * 56 * 56),
])
def test_the_benchmarks_byte_accounting_is_the_kernel_tables(model, layer, op, phase, n_in, n_out):
    k = _kernel(model, layer, op, phase)
    assert conv_shapes.pointwise_counts(op, n_in, n_out) == (k.read[1], k.write[1], k.other_bytes[1])


def _random_table(rng):
    ops = ["relu_", "cat", "max_pool2d_with_indices/s2"]
    rows = [[rng.choice(ops), 64, 7, 32, rng.choice(["fp32", "fp16"]), rng.choice([4096, 10 ** 6, 3 * 10 ** 7, 2 ** 30]),
             rng.uniform(100, 3000)] for _ in range(rng.randint(1, 12))]
    return {"columns": conv_shapes.POINTWISE_TABLE_COLUMNS, "points": rows}


def _brute_force(doc, op, precision, nbytes):
    col = {c: i for i, c in enumerate(doc["columns"])}
    cands = sorted((abs(math.log(nbytes) - math.log(r[col["bytes"]])) / math.log(2), i, r[col["gbps"]] * 1e9)
                   for i, r in enumerate(doc["points"]) if r[col["op"]] == op and r[col["precision"]] == precision)
    if not cands:
        return None
    near = cands[:4]
    if near[0][0] == 0:
        same = [bw for d, _, bw in near if d == 0]
        return math.prod(same) ** (1 / len(same))
    return math.exp(sum(math.log(bw) / d ** 2 for d, _, bw in near) / sum(1 / d ** 2 for d, _, _ in near))


def test_bandwidth_matches_a_brute_force_on_seeded_random_tables():
    rng = random.Random(7)
    for trial in range(40):
        doc = _random_table(rng)
        table = roofline.PointwiseTable.from_doc(doc)
        for _ in range(15):
            nbytes = rng.choice([100, 4096, 5 * 10 ** 5, 10 ** 6, 10 ** 8, 2 ** 31])
            for op in ("relu_", "cat", "max_pool2d_with_indices/s2", "add"):
                for size, prec in ((4, "fp32"), (2, "fp16")):
                    got, want = table.bandwidth(op, nbytes, size), _brute_force(doc, op, prec, nbytes)
                    assert (got is None) == (want is None), (trial, op, nbytes, size)
                    if want is not None:
                        assert got == pytest.approx(want, rel=1e-9), (trial, op, nbytes, size)


def test_the_roofline_moves_the_bytes_at_the_tables_bandwidth(monkeypatch):
    rows = [["max_pool2d_with_indices_backward/s2", 64, 55, 32, "fp16", 10 ** 6, 500.0],
            ["threshold_backward", 64, 55, 32, "fp16", 10 ** 6, 1000.0]]
    table = roofline.PointwiseTable.from_doc({"columns": conv_shapes.POINTWISE_TABLE_COLUMNS, "points": rows})
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: table if name == "H100" else None)
    model = load_model("alexnet")
    layer = next(layer for layer in model.layers if layer.name == "features.0")
    _, bwd = roofline.layer_costs(model, layer, "H100", "fp16", 32)
    pool = next(c for c in bwd if c.op == "max_pool2d_with_indices_backward")
    thr = next(c for c in bwd if c.op == "threshold_backward")
    assert pool.bytes == (240256 * 2 + 193600 * 2 + 373248) * 32  # (read + write) x 2 bytes + the indices
    assert pool.memory_s == pytest.approx(pool.bytes / 500e9, rel=1e-12)  # one point: its bandwidth at any size
    assert thr.memory_s == pytest.approx(thr.bytes / 1000e9, rel=1e-12)
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: None)
    _, before = roofline.layer_costs(model, layer, "H100", "fp16", 32)
    conv = [c for c in bwd if c.op.startswith("convolution")]
    assert conv == [c for c in before if c.op.startswith("convolution")]  # the convolution is untouched
    assert next(c for c in before if c.op == "threshold_backward").memory_s != thr.memory_s
    _, fp32 = roofline.layer_costs(model, layer, "H100", "fp32", 32)  # no fp32 point: the copy share as before
    monkeypatch.setattr(roofline, "pointwise_table", lambda name, data_dir=None: table)
    assert roofline.layer_costs(model, layer, "H100", "fp32", 32)[1] == fp32


def test_quick_cpu_run_to_table_to_bandwidth_and_lookup(tmp_path):
    pytest.importorskip("torch")
    raw = tmp_path / "raw.json"
    assert conv_shapes.main(["--pointwise", "--device", "cpu", "--quick", "--out", str(raw)]) == 0
    path = tmp_path / "pointwise_h100.json"
    assert conv_shapes.main(["--table", str(raw), "--out", str(path)]) == 0
    doc = json.loads(raw.read_text())
    assert doc["kind"] == "pointwise" and {p["op"] for p in doc["points"]} == set(conv_shapes.POINTWISE_OPS)
    table = roofline.pointwise_table("H200", str(tmp_path))  # the H100's file, the same die
    assert table is not None and roofline.pointwise_table("A100", str(tmp_path)) is None
    for p in doc["points"]:
        same = [q["gbps"] for q in doc["points"] if (q["op"], q["precision"], q["bytes"]) ==
                (p["op"], p["precision"], p["bytes"])]
        want = math.prod(float(f"{g:.5g}") for g in same) ** (1 / len(same)) * 1e9
        got = table.bandwidth(p["op"], p["bytes"], 2 if p["precision"] == "fp16" else 4)
        assert got == pytest.approx(want, rel=1e-9)
