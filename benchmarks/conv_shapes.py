#!/usr/bin/env python3
"""Convolution shape-class microbenchmark: the FLOP rate cuDNN reaches for
forward, input gradient (dgrad) and weight gradient (wgrad) over a grid of
generic convolution shapes, per precision (docs/compute-model.md,
"Convolutions by shape class"). Never a model's own layers or time.

    PYTHONPATH=python python benchmarks/conv_shapes.py --out conv.json               # on a CUDA machine, <= 120 s
    PYTHONPATH=python python benchmarks/conv_shapes.py --device cpu --quick --out /tmp/conv.json
    PYTHONPATH=python python benchmarks/conv_shapes.py --norm --out norm.json        # the BatchNorm grid, ~15 s
    PYTHONPATH=python python benchmarks/conv_shapes.py --extra --out extra.json      # 1x1, odd channel counts, ~20 s
    python benchmarks/conv_shapes.py --table conv.json extra.json --out python/ddlsim/data/kernels/conv_classes_h100.json
    python benchmarks/conv_shapes.py --table norm.json --out python/ddlsim/data/kernels/norm_classes_h100.json
    PYTHONPATH=python python benchmarks/conv_shapes.py --unequal --out unequal.json  # 3x3/5x5, C_out != C_in
    PYTHONPATH=python python benchmarks/conv_shapes.py --linear --budget-s 35 --out linear.json  # GEMMs, ~35 s
    python benchmarks/conv_shapes.py --table linear.json --out python/ddlsim/data/kernels/linear_classes_h100.json
    python benchmarks/conv_shapes.py --linear --dry-run --out /dev/null                # list the shapes, no torch

The grid: shape classes by kernel and stride (1x1, 1x1 stride 2, 3x3, 3x3
stride 2, 5x5, 1x7 / 7x1, 1x3 / 3x1, and stems with 3 input channels: 3x3,
3x3 stride 2, 7x7 stride 2, 11x11 stride 4), each over channel counts (32 to
2048) and spatial sizes (7 to 224) that span the zoo's CNNs, at batch 32 and
128; fp32 (TF32 off), tf32 (TF32 on) and fp16 (half tensors: the kernels
autocast runs, without its weight casts). Per point and direction the
kernel is issued once untimed (cuDNN's heuristics, allocator), then the
stream is held by a GPU sleep while `--repeats` timed calls, each between
two CUDA events, are queued behind it (so the GPU, not the host, sets the
pace); the median is kept. With ``--cold-l2`` (always for ``--linear`` and
``--pointwise``) a 256 MiB buffer is written before every timed call,
outside its events: the call reads its inputs from device memory, as a
layer of a training step reads its weights and most of its activations,
not from the L2 cache that the call before it filled. ``cudnn.benchmark`` stays off (PyTorch's
default), as in benchmarks/gpu_layer_times.py. FLOPs per direction are
2 x batch x C_out x H_out x W_out x C_in x kh x kw (torch.utils.flop_counter's
count, the kernel tables' too).

``--budget-s`` (default 110) stops before a shape once the run has taken that
long and still writes the JSON (``stopped_early``); shapes are ordered so
that an early stop loses the largest shapes of each class last-first, not a
whole class. The JSON is rewritten after every shape (atomically).

``--extra``: 1x1 convolutions with channel counts that are not powers of two
(48 to 1280 in, 32 to 384 out, 8 to 35 pixels), points that join the main
grid's in one table. ``--norm``: BatchNorm2d in training mode (the cuDNN
kernels nn.BatchNorm2d runs), forward and backward alone, 16 to 2048
channels, 1 to 149 pixels, batch 32 and 128, fp32 and fp16 inputs; the
effective bandwidth with the roofline's byte accounting. ``--linear``: GEMMs
as a Linear layer runs them (cuBLAS): forward ``addmm(bias, x, W^T)``, input
gradient ``dy @ W``, weight gradient ``x^T @ dy``, over a generic grid of
M (rows: 8 to 4096) and K, N (features: 256 to 27552, log-spaced by 2^0.75,
rounded to multiples of 8, so mostly not powers of two), up to 2^38 FLOPs a
call; FLOPs 2 M K N per direction. ``--table`` turns runs into the data
files ddlsim.workload.roofline reads (no torch needed); ``--dry-run`` lists
a grid's shapes without measuring.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/gpu_setup.py, also when loaded by path
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "python"))  # ddlsim's safe writes, without PYTHONPATH
from gpu_setup import torch_on, write_out as _write_file  # noqa: E402

PRECISIONS = ("fp32", "tf32", "fp16")
L2_FLUSH_BYTES = 256 * 2 ** 20  # written between timed calls with --cold-l2: 5x the H100's and H200's 50 MB L2
DIRECTIONS = ("fwd", "dgrad", "wgrad")
MAX_FLOPS_PER_SAMPLE = 4.0e9  # VGG-16's largest convolution is 3.7 GFLOP per sample


def out_size(hw: int, k: int, stride: int, pad: int) -> int:
    return (hw + 2 * pad - k) // stride + 1


def grid(quick: bool = False, extra: bool = False, unequal: bool = False) -> list[dict]:
    """The shapes, as dicts (class, kh, kw, stride, pad, c_in, c_out, hw, batch), in run order: round-robin over the
    classes, smaller shapes of a class first, so that an early stop trims every class from its large end. `extra`:
    instead, 1x1 convolutions with channel counts that are not powers of two (multiples of 16 to 64, as inception
    blocks have them) at odd spatial sizes, a second run whose points join the first's in one table. `unequal`:
    instead, 3x3 and 5x5 stride-1 convolutions whose output channels are 2x, 1.5x, 3x or half their input
    channels (the main grid's 3x3 and 5x5 keep them equal), a third such run."""
    per_class: dict[str, list[dict]] = {}

    def add(cls, kh, kw, stride, c_in, c_out, hw, pad=None):
        ph, pw = (kh // 2, kw // 2) if pad is None else (pad, pad)
        h_out, w_out = out_size(hw, kh, stride, ph), out_size(hw, kw, stride, pw)
        if 2 * c_in * c_out * kh * kw * h_out * w_out > MAX_FLOPS_PER_SAMPLE:
            return
        per_class.setdefault(cls, []).append({"class": cls, "kh": kh, "kw": kw, "stride": stride, "pad_h": ph,
                                              "pad_w": pw, "c_in": c_in, "c_out": c_out, "hw": hw})

    if unequal:
        for hw in (7, 14, 28, 56, 112):
            for ci, co in ((32, 64), (64, 128), (128, 256), (256, 512), (64, 32), (128, 64), (256, 128), (512, 256),
                           (64, 96), (128, 192), (256, 384)):
                add("3x3", 3, 3, 1, ci, co, hw)
        for hw in (14, 27, 35):
            for ci, co in ((16, 32), (32, 64), (64, 128), (16, 48), (32, 96), (64, 192)):
                add("5x5", 5, 5, 1, ci, co, hw)
        batches = (2,) if quick else (32, 128)
        if quick:
            per_class = {"3x3": per_class["3x3"][:1], "5x5": per_class["5x5"][:1]}
            for shapes in per_class.values():
                for sh in shapes:
                    sh["hw"] = 8
    elif extra:
        for hw in (8, 17, 28, 35):
            for ci in (48, 192, 288, 480, 768, 1280):
                for co in (32, 96, 160, 384):
                    add("1x1", 1, 1, 1, ci, co, hw)
        batches = (2,) if quick else (32, 128)
        if quick:
            per_class = {"1x1": per_class["1x1"][:2]}
            for shapes in per_class.values():
                for sh in shapes:
                    sh["hw"] = 8
    elif quick:
        add("1x1", 1, 1, 1, 8, 16, 8)
        add("3x3", 3, 3, 1, 8, 8, 8)
        add("3x3s2", 3, 3, 2, 8, 16, 8)
        add("1x7", 1, 7, 1, 8, 8, 8)
        add("stem7x7s2", 7, 7, 2, 3, 8, 16)
        batches = (2,)
    else:
        chans = (32, 128, 512, 2048)
        for hw in (7, 14, 28, 56):
            for ci in chans:
                for co in chans:
                    add("1x1", 1, 1, 1, ci, co, hw)
        for hw in (14, 28, 56):
            for ci, co in ((64, 128), (256, 512), (512, 1024), (1024, 2048)):
                add("1x1s2", 1, 1, 2, ci, co, hw, pad=0)
        for hw in (7, 14, 28, 56, 112, 224):
            for c in (32, 64, 128, 256, 512):
                add("3x3", 3, 3, 1, c, c, hw)
        for hw in (8, 17, 35):
            add("3x3", 3, 3, 1, 96, 192, hw)
            add("3x3", 3, 3, 1, 384, 384, hw)
        for hw in (14, 28, 56, 112):
            for c in (64, 128, 256, 512):
                add("3x3s2", 3, 3, 2, c, c, hw)
                add("3x3s2", 3, 3, 2, c, 2 * c, hw)
        for hw in (14, 27, 35):
            for c in (32, 64, 192):
                add("5x5", 5, 5, 1, c, c, hw)
        for hw in (8, 17, 35):
            for c in (64, 128, 192, 384):
                add("1x7", 1, 7, 1, c, c, hw)
                add("1x7", 7, 1, 1, c, c, hw)
                add("1x3", 1, 3, 1, c, c, hw)
                add("1x3", 3, 1, 1, c, c, hw)
        add("stem3x3", 3, 3, 1, 3, 64, 224)
        add("stem3x3s2", 3, 3, 2, 3, 32, 299, pad=0)
        add("stem7x7s2", 7, 7, 2, 3, 64, 224)
        add("stem11x11s4", 11, 11, 4, 3, 64, 224, pad=2)
        batches = (32, 128)
    for shapes in per_class.values():
        shapes.sort(key=lambda s: (2 * s["c_in"] * s["c_out"] * s["kh"] * s["kw"] * s["hw"] ** 2, s["hw"], s["c_in"]))
    out = []
    longest = max(len(v) for v in per_class.values())
    for i in range(longest):
        for cls in per_class:
            if i < len(per_class[cls]):
                for b in batches:
                    out.append(dict(per_class[cls][i], batch=b))
    return out


NORM_PRECISIONS = ("fp32", "fp16")  # tf32 changes no BatchNorm kernel
MAX_NORM_ELEMENTS_PER_SAMPLE = 1_700_000  # the zoo's largest BatchNorm input: 64 x 147 x 147 (Inception-v3)


def norm_grid(quick: bool = False) -> list[dict]:
    """BatchNorm2d shapes (training mode), in run order: per spatial size, channel counts (powers of two and the
    multiples of 32 and 96 that Inception and GoogLeNet use) at batch 32 and 128, up to the zoo's largest input."""
    if quick:
        return [{"channels": c, "hw": hw, "batch": 2} for c, hw in ((8, 8), (16, 4))]
    out = []
    for hw in (1, 5, 7, 8, 14, 17, 28, 35, 56, 73, 112, 149):
        for c in (16, 32, 64, 96, 192, 256, 384, 512, 768, 1024, 2048):
            if c * hw * hw <= MAX_NORM_ELEMENTS_PER_SAMPLE:
                out += [{"channels": c, "hw": hw, "batch": b} for b in (32, 128)]
    return out


LINEAR_ROWS = (8, 32, 128, 512, 2048, 4096)
# K and N: 256 x 2^(0.75 i), i = 0..9, rounded to multiples of 8: 256, 432, 728, ..., 16384, 27552
LINEAR_FEATURES = tuple(sorted({round(256 * 2 ** (0.75 * i) / 8) * 8 for i in range(10)}))
MAX_LINEAR_FLOPS = 2 ** 38  # per call: ~5 ms in fp32


def linear_grid(quick: bool = False) -> list[dict]:
    """GEMM shapes (m rows, k input and n output features), in run order: by FLOPs, smallest first, so that an early
    stop loses the largest shapes."""
    if quick:
        return [{"m": m, "k": k, "n": n} for m, k, n in ((4, 24, 16), (8, 40, 24))]
    out = [{"m": m, "k": k, "n": n} for m in LINEAR_ROWS for k in LINEAR_FEATURES for n in LINEAR_FEATURES
           if 2 * m * k * n <= MAX_LINEAR_FLOPS]
    out.sort(key=lambda s: (s["m"] * s["k"] * s["n"], s["m"], s["k"]))
    return out


# element-wise, pooling and concatenation kernels, by the aten names of the kernel tables; pooling by its stride
POINTWISE_OPS = ("relu_", "threshold_backward", "add", "add_", "mul", "div_", "bernoulli_", "cat",
                 "max_pool2d_with_indices/s2", "max_pool2d_with_indices_backward/s2",
                 "max_pool2d_with_indices/s1", "max_pool2d_with_indices_backward/s1",
                 "avg_pool2d/s1", "avg_pool2d_backward/s1")
POINTWISE_PRECISIONS = ("fp32", "fp16")  # tf32 changes none of these kernels
MAX_POINTWISE_ELEMENTS_PER_SAMPLE = 3_300_000  # VGG-16's largest activation: 64 x 224 x 224


def pointwise_grid(quick: bool = False) -> list[dict]:
    """Activation shapes (channels, hw, batch) for the element-wise / pooling grid, in run order: every second shape
    by size first, then the others, so that an early stop thins the grid over its whole range of sizes instead of
    losing its largest tensors. Spatial sizes from 7 to 224 (odd ones as Inception has them), channel counts 64 to
    1024, batch 32 and 128, up to the zoo's largest activation."""
    if quick:
        return [{"channels": 8, "hw": 8, "batch": 2}, {"channels": 16, "hw": 6, "batch": 2}]
    out = [{"channels": c, "hw": hw, "batch": b} for hw in (7, 17, 35, 56, 112, 224) for c in (64, 192, 512, 1024)
           for b in (32, 128) if c * hw * hw <= MAX_POINTWISE_ELEMENTS_PER_SAMPLE]
    out.sort(key=lambda s: (s["channels"] * s["hw"] ** 2 * s["batch"], s["hw"]))
    return out[::2] + out[1::2]


def pointwise_counts(op: str, n_in: int, n_out: int) -> tuple[int, int, int]:
    """(floating elements read, written, integer bytes) of `op` on an input of n_in elements (a pooling: output
    n_out), with the kernel tables' accounting (tools/gen_kernel_table.py: every floating tensor argument read,
    every output written, integer tensors such as pooling indices as bytes)."""
    base = op.split("/")[0]
    if base in ("relu_", "div_", "bernoulli_", "cat"):
        return n_in, n_in, 0
    if base in ("threshold_backward", "add", "add_", "mul"):
        return 2 * n_in, n_in, 0
    if base == "max_pool2d_with_indices":
        return n_in, n_out, 8 * n_out
    if base == "max_pool2d_with_indices_backward":
        return n_in + n_out, n_in, 8 * n_out
    if base == "avg_pool2d":
        return n_in, n_out, 0
    if base == "avg_pool2d_backward":
        return n_in + n_out, n_in, 0
    raise ValueError(f"unknown pointwise op {op}")


def flops(s: dict) -> int:
    h_out = out_size(s["hw"], s["kh"], s["stride"], s["pad_h"])
    w_out = out_size(s["hw"], s["kw"], s["stride"], s["pad_w"])
    return 2 * s["batch"] * s["c_out"] * h_out * w_out * s["c_in"] * s["kh"] * s["kw"]


TABLE_COLUMNS = ["class", "kh", "kw", "stride", "c_in", "c_out", "hw", "batch", "h_out", "w_out", "precision",
                 "fwd_tflops", "dgrad_tflops", "wgrad_tflops"]


NORM_TABLE_COLUMNS = ["channels", "hw", "batch", "precision", "fwd_gbps", "bwd_gbps"]


POINTWISE_TABLE_COLUMNS = ["op", "channels", "hw", "batch", "precision", "bytes", "gbps"]


def to_pointwise_table(doc: dict, source: str) -> dict:
    """The roofline's element-wise / pooling table (python/ddlsim/data/kernels/pointwise_h100.json) from a
    ``--pointwise`` run's JSON: one row per measured point and op, bandwidths to 5 significant digits."""
    rows = [[p["op"], p["channels"], p["hw"], p["batch"], p["precision"], p["bytes"], float(f"{p['gbps']:.5g}")]
            for p in doc["points"] if "error" not in p and p.get("gbps")]
    return {"generator": "benchmarks/conv_shapes.py --pointwise, --table", "source": source,
            "device": doc.get("device"), "torch": doc.get("torch"), "cudnn": doc.get("cudnn"),
            "stopped_early": doc.get("stopped_early"),
            "units": "GB/s (1e9 bytes/s) with the kernel tables' byte accounting (floating elements read and "
                     "written x the element size, plus integer bytes); bytes per call",
            "columns": POINTWISE_TABLE_COLUMNS, "points": rows}


LINEAR_TABLE_COLUMNS = ["m", "k", "n", "precision", "fwd_tflops", "dgrad_tflops", "wgrad_tflops"]


def to_linear_table(doc: dict, source: str) -> dict:
    """The roofline's GEMM table (python/ddlsim/data/kernels/linear_classes_<device>.json) from a ``--linear`` run's
    JSON: one row per measured point (points with an error or without any rate left out), rates to 5 significant
    digits."""
    rows = [[p["m"], p["k"], p["n"], p["precision"]] + [float(f'{p[f"{d}_tflops"]:.5g}') if p.get(f"{d}_tflops")
                                                       else None for d in DIRECTIONS]
            for p in doc["points"] if "error" not in p and any(p.get(f"{d}_tflops") for d in DIRECTIONS)]
    return {"generator": "benchmarks/conv_shapes.py --linear, --table", "source": source, "device": doc.get("device"),
            "torch": doc.get("torch"), "cudnn": doc.get("cudnn"), "stopped_early": doc.get("stopped_early"),
            "units": "TFLOP/s (1e12 FLOP/s) per direction; FLOPs = 2 x M x K x N (fwd: addmm with a bias; dgrad: "
                     "dy @ W; wgrad: x^T @ dy)", "columns": LINEAR_TABLE_COLUMNS, "points": rows}


def to_norm_table(doc: dict, source: str) -> dict:
    """The roofline's BatchNorm table (python/ddlsim/data/kernels/norm_classes_<device>.json) from a ``--norm``
    run's JSON: one row per measured point, bandwidths to 5 significant digits."""
    rows = [[p["channels"], p["hw"], p["batch"], p["precision"], float(f"{p['fwd_gbps']:.5g}"),
             float(f"{p['bwd_gbps']:.5g}")] for p in doc["points"]
            if "error" not in p and p.get("fwd_gbps") and p.get("bwd_gbps")]
    return {"generator": "benchmarks/conv_shapes.py --norm, --table", "source": source, "device": doc.get("device"),
            "torch": doc.get("torch"), "cudnn": doc.get("cudnn"), "stopped_early": doc.get("stopped_early"),
            "units": "GB/s (1e9 bytes/s) with the roofline's accounting: forward 3, backward 5 elements moved per "
                     "input element", "columns": NORM_TABLE_COLUMNS, "points": rows}


def to_table(doc: dict, source: str) -> dict:
    """The roofline's convolution table (python/ddlsim/data/kernels/conv_classes_<device>.json) from a run's JSON:
    one row per measured point (points with an error or without any rate left out), rates to 5 significant
    digits."""
    rows = []
    for p in doc["points"]:
        if "error" in p or not any(p.get(f"{d}_tflops") for d in DIRECTIONS):
            continue
        h_out = out_size(p["hw"], p["kh"], p["stride"], p["pad_h"])
        w_out = out_size(p["hw"], p["kw"], p["stride"], p["pad_w"])
        rows.append([p["class"], p["kh"], p["kw"], p["stride"], p["c_in"], p["c_out"], p["hw"], p["batch"], h_out,
                     w_out, p["precision"]] + [float(f'{p[f"{d}_tflops"]:.5g}') if p.get(f"{d}_tflops") else None
                                               for d in DIRECTIONS])
    return {"generator": "benchmarks/conv_shapes.py --table", "source": source, "device": doc.get("device"),
            "torch": doc.get("torch"), "cudnn": doc.get("cudnn"), "stopped_early": doc.get("stopped_early"),
            "units": "TFLOP/s (1e12 FLOP/s) per direction; FLOPs = 2 x batch x C_out x H_out x W_out x C_in x kh x kw",
            "columns": TABLE_COLUMNS, "points": rows}


def write_table(raws: list[Path], out: Path, source: str) -> int:
    raw = raws[0]
    if any(out.resolve() == r.resolve() for r in raws):
        print(f"error: --out {out} is one of the --table inputs; name another file for the table", file=sys.stderr)
        return 2
    try:
        doc = json.loads(raw.read_text())
        for more in raws[1:]:  # further runs of the same kind: their points join the first's
            raw = more
            other = json.loads(more.read_text())
            if other.get("kind") != doc.get("kind"):
                raise ValueError("a run of another kind (convolution, --norm and --linear runs make separate "
                                 "tables)")
            doc["points"] = doc["points"] + other["points"]
            doc["stopped_early"] = bool(doc.get("stopped_early")) or bool(other.get("stopped_early"))
        raw = raws[0] if len(raws) == 1 else raw
        src = source or f"benchmarks/conv_shapes.py on {doc.get('device')}, torch {doc.get('torch')}"
        convert = {"batchnorm": to_norm_table, "linear": to_linear_table,
                   "pointwise": to_pointwise_table}.get(doc.get("kind"), to_table)
        table = convert(doc, src)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        print(f"error: --table {raw}: not a benchmarks/conv_shapes.py result ({type(exc).__name__}: {exc}); "
              f"name the JSON a run wrote", file=sys.stderr)
        return 2
    lines = ",\n  ".join(json.dumps(r) for r in table["points"])
    head = json.dumps({k: v for k, v in table.items() if k != "points"}, indent=1, sort_keys=True)
    if not _write_file(out, head[:-2] + ',\n "points": [\n  ' + lines + "\n ]\n}\n", inputs=raws):
        return 2
    print(f"wrote {out}: {len(table['points'])} points", file=sys.stderr)
    return 0


def time_directions(row: dict, calls: dict, f: int, time_ms) -> None:
    """Time each direction's call (`calls`: direction -> function) into `row`: its ms and its TFLOP/s at `f` FLOPs."""
    for d in DIRECTIONS:
        ms = time_ms(calls[d])
        row[f"{d}_ms"] = ms
        row[f"{d}_tflops"] = f / ms / 1e9 if ms > 0 else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--table", type=Path, nargs="+", default=None,
                    help="convert these runs' JSON (of one kind: convolution or --norm) into the roofline's table (no "
                         "torch needed) instead of measuring")
    ap.add_argument("--extra", action="store_true",
                    help="the extra 1x1 grid (channel counts that are not powers of two) instead of the main grid")
    ap.add_argument("--cold-l2", action="store_true",
                    help="write a 256 MiB buffer before every timed call (outside its events), so that no call finds "
                         "its inputs in the L2 cache; always on for --linear and --pointwise")
    ap.add_argument("--unequal", action="store_true",
                    help="the 3x3 / 5x5 grid with output channels unlike the input's instead of the main grid")
    ap.add_argument("--source", default="", help="with --table: the table's source line")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true", help="a few tiny shapes at batch 2 (a smoke test)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per point and direction (default 7)")
    ap.add_argument("--budget-s", type=float, default=110.0, help="start no new shape after this many seconds")
    ap.add_argument("--precisions", nargs="*", default=list(PRECISIONS), choices=PRECISIONS)
    ap.add_argument("--norm", action="store_true",
                    help="the BatchNorm2d grid instead (training mode, forward and backward bandwidth, fp32/fp16)")
    ap.add_argument("--linear", action="store_true",
                    help="the GEMM grid instead (a Linear layer's forward, input and weight gradients, by M, K, N)")
    ap.add_argument("--pointwise", action="store_true",
                    help="the element-wise / pooling / concatenation grid instead (bandwidth by op and tensor size)")
    ap.add_argument("--dry-run", action="store_true", help="list the grid's shapes (one JSON line each) and stop")
    args = ap.parse_args(argv)
    if sum((args.norm, args.linear, args.extra, args.pointwise, args.unequal)) > 1:
        print("error: --norm, --linear, --pointwise, --extra and --unequal name different grids; give one of them",
              file=sys.stderr)
        return 2
    if args.table is not None:
        return write_table(args.table, args.out, args.source)
    if args.dry_run:
        shapes = (norm_grid(args.quick) if args.norm else linear_grid(args.quick) if args.linear
                  else pointwise_grid(args.quick) if args.pointwise else grid(args.quick, args.extra, args.unequal))
        try:
            for sh in shapes:
                print(json.dumps(sh, sort_keys=True), flush=True)
        except BrokenPipeError:  # the reader stopped early (| head): not an error
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        precs = NORM_PRECISIONS if args.norm else POINTWISE_PRECISIONS if args.pointwise else args.precisions
        print(f"{len(shapes)} shapes x {len(precs)} precisions" + (f" x {len(POINTWISE_OPS)} ops" if args.pointwise
                                                                   else ""), file=sys.stderr)
        return 0
    if args.out.exists() and not args.out.is_file():
        print(f"error: --out {args.out} exists and is not a regular file; name a file", file=sys.stderr)
        return 2

    setup = torch_on(args.device, " (--table and --dry-run need none)")
    if setup is None:
        return 2
    torch, dev, cuda = setup
    reps = args.repeats or (2 if args.quick else 7)
    t_start = time.monotonic()
    shapes = grid(args.quick, args.extra, args.unequal)
    doc = {"generator": "benchmarks/conv_shapes.py", "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0) if cuda else "cpu",
           "cudnn": torch.backends.cudnn.version() if cuda else None, "cudnn_benchmark": False,
           "python": platform.python_version(), "repeats": reps, "budget_s": args.budget_s,
           "shapes_planned": len(shapes), "stopped_early": False,
           "units": "ms per call (median of repeats, CUDA events); tflops = flops / ms / 1e9",
           "points": []}

    def write():
        doc["wall_s"] = round(time.monotonic() - t_start, 3)
        if not _write_file(args.out, json.dumps(doc, indent=1, sort_keys=True) + "\n", make_parent=True):
            raise SystemExit(2)

    cold = args.cold_l2 or args.linear or args.pointwise
    doc["cold_l2"] = cold
    flush_buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=dev) if cold and cuda else None

    def time_ms(fn) -> float:
        fn()  # untimed: cuDNN's heuristics, the allocator
        if not cuda:
            vals = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                vals.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(vals)
        torch.cuda.synchronize()
        torch.cuda._sleep(int(4e6))  # ~2 ms of GPU cycles: the timed calls queue behind it, back to back
        evs = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            if flush_buf is not None:
                flush_buf.zero_()  # outside the events: the call finds its inputs in device memory, not in L2
            a.record()
            fn()
            b.record()
            evs.append((a, b))
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in evs)

    if args.norm:
        return run_norm(args, torch, dev, cuda, doc, write, time_ms, t_start)
    if args.linear:
        return run_linear(args, torch, dev, cuda, doc, write, time_ms, t_start)
    if args.pointwise:
        return run_pointwise(args, torch, dev, cuda, doc, write, time_ms, t_start)
    conv = torch.ops.aten.convolution.default
    conv_bwd = torch.ops.aten.convolution_backward.default

    def measure(s, prec, row):
        f = flops(s)
        row["flops"] = f
        stride, pad = [s["stride"]] * 2, [s["pad_h"], s["pad_w"]]
        if cuda:
            torch.backends.cudnn.allow_tf32 = prec == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        dtype = torch.float16 if prec == "fp16" else torch.float32
        x = torch.randn(s["batch"], s["c_in"], s["hw"], s["hw"], device=dev, dtype=dtype)
        w = torch.randn(s["c_out"], s["c_in"], s["kh"], s["kw"], device=dev, dtype=dtype) * 0.01
        with torch.no_grad():
            y = conv(x, w, None, stride, pad, [1, 1], False, [0, 0], 1)
            dy = torch.randn_like(y)
            calls = {
                "fwd": lambda: conv(x, w, None, stride, pad, [1, 1], False, [0, 0], 1),
                "dgrad": lambda: conv_bwd(dy, x, w, None, stride, pad, [1, 1], False, [0, 0], 1, [True, False, False]),
                "wgrad": lambda: conv_bwd(dy, x, w, None, stride, pad, [1, 1], False, [0, 0], 1, [False, True, False]),
            }
            time_directions(row, calls, f, time_ms)

    try:
        return run_grid(args, doc, write, t_start, shapes, args.precisions, measure, "points",
                        lambda p: tuple(p[k] for k in ("class", "kh", "kw", "stride", "c_in", "c_out", "hw", "batch")))
    finally:
        if cuda:
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cuda.matmul.allow_tf32 = False


def run_grid(args, doc, write, t_start, shapes, precisions, measure, label, key) -> int:
    """The measuring loop every grid shares: per shape (none started after ``--budget-s``: ``stopped_early``) and
    precision, `measure(shape, precision, row)` fills the row (a dict of the shape and precision) or returns the
    rows to record instead; a shape that fails is recorded with its error and the others still run. The JSON is
    rewritten after every shape; `key` names a point's shape for ``shapes_done``."""
    for s in shapes:
        if time.monotonic() - t_start > args.budget_s:
            doc["stopped_early"] = True
            break
        for prec in precisions:
            row = dict(s, precision=prec)
            try:
                rows = measure(s, prec, row)
            except Exception as exc:  # noqa: BLE001 -- a shape that fails is recorded, the others still run
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows = None
            doc["points"] += [row] if rows is None else rows
        write()
    doc["shapes_done"] = len({key(p) for p in doc["points"]})
    write()
    print(f"wrote {args.out}: {len(doc['points'])} {label}, {doc['shapes_done']} of {len(shapes)} shapes in "
          f"{doc['wall_s']:.1f} s{' (stopped early: budget)' if doc['stopped_early'] else ''}", file=sys.stderr)
    return 0


def run_norm(args, torch, dev, cuda, doc, write, time_ms, t_start) -> int:
    """The BatchNorm2d grid: F.batch_norm in training mode (the path nn.BatchNorm2d takes: cuDNN's kernels on a
    GPU), fp32 and fp16 inputs (fp32 weights, as under autocast); forward, and the backward alone (autograd.grad of
    a kept graph); effective bandwidth with the roofline's accounting (forward 3, backward 5 elements moved per
    input element)."""
    import torch.nn.functional as F

    shapes = norm_grid(args.quick)
    doc.update(kind="batchnorm", shapes_planned=len(shapes),
               units="ms per call (median of repeats, CUDA events); gbps = bytes / ms / 1e6 with forward 3 and "
                     "backward 5 elements moved per input element")

    def measure(s, prec, row):
        dtype = torch.float16 if prec == "fp16" else torch.float32
        c = s["channels"]
        x = torch.randn(s["batch"], c, s["hw"], s["hw"], device=dev, dtype=dtype, requires_grad=True)
        w = torch.ones(c, device=dev, requires_grad=True)
        b = torch.zeros(c, device=dev, requires_grad=True)
        rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
        fwd_ms = time_ms(lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))
        y = F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
        dy = torch.randn_like(y)
        bwd_ms = time_ms(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))
        size = 2 if prec == "fp16" else 4
        elems = x.numel()
        row.update(fwd_ms=fwd_ms, bwd_ms=bwd_ms, fwd_gbps=3 * elems * size / fwd_ms / 1e6,
                   bwd_gbps=5 * elems * size / bwd_ms / 1e6)

    return run_grid(args, doc, write, t_start, shapes, NORM_PRECISIONS, measure, "BatchNorm points",
                    lambda p: (p["channels"], p["hw"], p["batch"]))


def run_linear(args, torch, dev, cuda, doc, write, time_ms, t_start) -> int:
    """The GEMM grid: per shape and precision, the three matmuls of a Linear layer with a bias, as autograd issues
    them (fp32 with TF32 off, tf32 with it on, fp16 on half tensors: the kernels autocast runs, without its casts)."""
    shapes = linear_grid(args.quick)
    doc.update(kind="linear", shapes_planned=len(shapes),
               units="ms per call (median of repeats, CUDA events); tflops = 2 m k n / ms / 1e9")

    def measure(s, prec, row):
        f = 2 * s["m"] * s["k"] * s["n"]
        row["flops"] = f
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        dtype = torch.float16 if prec == "fp16" else torch.float32
        x = torch.randn(s["m"], s["k"], device=dev, dtype=dtype)
        w = torch.randn(s["n"], s["k"], device=dev, dtype=dtype) * 0.01
        b = torch.randn(s["n"], device=dev, dtype=dtype)
        dy = torch.randn(s["m"], s["n"], device=dev, dtype=dtype)
        with torch.no_grad():
            calls = {"fwd": lambda: torch.addmm(b, x, w.t()), "dgrad": lambda: torch.mm(dy, w),
                     "wgrad": lambda: torch.mm(x.t(), dy)}
            time_directions(row, calls, f, time_ms)

    try:
        return run_grid(args, doc, write, t_start, shapes, args.precisions, measure, "GEMM points",
                        lambda p: (p["m"], p["k"], p["n"]))
    finally:
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = False


def run_pointwise(args, torch, dev, cuda, doc, write, time_ms, t_start) -> int:
    """The element-wise grid: per activation shape and precision, each of POINTWISE_OPS as the zoo's layers issue it
    (NCHW tensors; pooling 3x3 with padding 1, stride 2 and 1, and 2x2 stride 2 as a second stride-2 point; the
    concatenation of four equal channel slices; the backward kernels called alone on kept inputs); the bandwidth
    with the kernel tables' byte accounting (pointwise_counts)."""
    import torch.nn.functional as F

    aten = torch.ops.aten
    shapes = pointwise_grid(args.quick)
    doc.update(kind="pointwise", shapes_planned=len(shapes),
               units="ms per call (median of repeats, CUDA events); gbps = bytes / ms / 1e6")

    def measure(s, prec, row):
        dtype = torch.float16 if prec == "fp16" else torch.float32
        size = 2 if prec == "fp16" else 4
        shape = (s["batch"], s["channels"], s["hw"], s["hw"])
        rows = []
        x = torch.randn(shape, device=dev, dtype=dtype)
        y = torch.randn(shape, device=dev, dtype=dtype)
        parts = list(torch.randn(shape, device=dev, dtype=dtype).chunk(4, dim=1))
        parts = [t.contiguous() for t in parts]
        pools = {}
        for name, k, st, pad in (("s2", 3, 2, 1), ("s2k2", 2, 2, 0), ("s1", 3, 1, 1)):
            out, idx = aten.max_pool2d_with_indices(x, [k, k], [st, st], [pad, pad])
            pools[name] = (k, st, pad, out, idx, torch.randn_like(out))
        avg = F.avg_pool2d(x, 3, 1, 1)
        davg = torch.randn_like(avg)
        calls = {
            "relu_": (lambda: x.relu_(), x.numel()),
            "threshold_backward": (lambda: aten.threshold_backward(y, x, 0), x.numel()),
            "add": (lambda: x + y, x.numel()),
            "add_": (lambda: x.add_(y), x.numel()),
            "mul": (lambda: x * y, x.numel()),
            "div_": (lambda: x.div_(1.0), x.numel()),
            "bernoulli_": (lambda: y.bernoulli_(0.5), x.numel()),
            "cat": (lambda: torch.cat(parts, 1), x.numel()),
            "avg_pool2d/s1": (lambda: F.avg_pool2d(x, 3, 1, 1), x.numel()),
            "avg_pool2d_backward/s1": (lambda: aten.avg_pool2d_backward(davg, x, [3, 3], [1, 1], [1, 1],
                                                                        False, True, None), x.numel()),
        }
        for name, (k, st, pad, out, idx, dout) in pools.items():
            cls = "s2" if st == 2 else "s1"
            calls[f"max_pool2d_with_indices/{cls}" + ("" if name != "s2k2" else "#k2")] = (
                lambda k=k, st=st, pad=pad: aten.max_pool2d_with_indices(x, [k, k], [st, st], [pad, pad]),
                out.numel())
            calls[f"max_pool2d_with_indices_backward/{cls}" + ("" if name != "s2k2" else "#k2")] = (
                lambda k=k, st=st, pad=pad, idx=idx, dout=dout: aten.max_pool2d_with_indices_backward(
                    dout, x, [k, k], [st, st], [pad, pad], [1, 1], False, idx), out.numel())
        with torch.no_grad():
            for key, (fn, n_out) in calls.items():
                op = key.split("#")[0]
                r, w, other = pointwise_counts(op, x.numel(), n_out)
                nbytes = (r + w) * size + other
                ms = time_ms(fn)
                rows.append(dict(row, op=op, variant=key, bytes=nbytes, ms=ms,
                                 gbps=nbytes / ms / 1e6 if ms > 0 else None))
        return rows

    return run_grid(args, doc, write, t_start, shapes, POINTWISE_PRECISIONS, measure, "element-wise points",
                    lambda p: (p["channels"], p["hw"], p["batch"]))


if __name__ == "__main__":
    sys.exit(main())
