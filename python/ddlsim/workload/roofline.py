"""Per-layer roofline compute model (docs/compute-model.md).

Every layer of a zoo CNN carries the kernels its forward and its backward
launch (``ddlsim/data/kernels/<model>.json``, written from the real model
by tools/gen_kernel_table.py): per kernel its FLOPs and the elements it
reads and writes, each as ``const + per_sample x batch``. On the GPU a
kernel takes

    g = max(FLOPs / P, bytes / BW)

with P the peak of the precision (tensor cores for convolutions and matmuls
in tf32/fp16/bf16, CUDA cores in fp32) times the share a convolution / a
large GEMM reaches in the device's microbenchmarks, and BW the datasheet
memory bandwidth times the share a large copy reaches. Where the device has
measured tables (``data/kernels/<kind>_<device>.json`` from
benchmarks/conv_shapes.py) convolutions, Linear layers' matmuls, BatchNorm and
element-wise / pooling kernels take their rate or bandwidth from them,
interpolated by shape (:func:`idw_log2`). Bytes are elements x
4 (fp32, tf32) or x 2 (fp16, bf16 autocast) plus integer tensors (pooling
indices); batch normalisation reads its input twice in the forward
(statistics, then normalisation) and its input and output gradient twice in
the backward; under autocast every convolution/linear weight is cast to
half in the forward and its gradient back in the backward (one kernel each).

Before a kernel can run, the host spends h issuing it (PyTorch eager:
dispatch, autograd, launch; measured per operation kind). Host and GPU work
as a pipeline: the host issues kernel i at H_i = H_(i-1) + h_i, the GPU runs
it from max(H_i, G_(i-1)) to G_i = max(H_i, G_(i-1)) + g_i, forward in
layer order, then backward in reverse layer order. A layer's time is the
growth of G over its kernels. For one kernel alone this is h + max(FLOPs /
P, bytes / BW): the roofline plus the launch cost; in a stream of kernels
the host runs ahead during long kernels, so launches hide behind GPU work
unless the kernels are short (small batches, fp16), where the host sets the
pace. Layers without a kernel table (custom, synthetic, grown models) count
as one matmul-like kernel of their FLOPs reading their parameters.

Where the device has per-call host costs (``Microbench.host_dispatch``, from
benchmarks/host_dispatch.py) a zoo CNN's host time is costed per call
instead: each layer's calls by kind (module calls, containers, functional
operations; ``ddlsim/data/kernels/host_calls.json``, counted from the real
model by tools/gen_host_calls.py) times the measured forward / autograd
backward host cost of a call of that kind, spread evenly over the layer's
kernels; ``zero_grad`` opens the step on the host, the start of ``backward()``
(where the device's run measured it) comes before the first backward kernel,
and every kernel takes at least the device's shortest kernel time; a biased
convolution (an unbiased Linear) costs the call kind measured for it where
the run has one (:func:`call_counts`). ``pipeline`` is the max-plus
recurrence; docs/compute-model.md derives its closed form.

Pure Python (json only): importable without numpy, pydantic or torch.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from .devices import Device, find_device, measured_on_other_device, microbench

_DATA = "ddlsim.data.kernels"
MATMUL_OPS = ("convolution", "convolution_backward_input", "convolution_backward_weight", "mm", "addmm", "bmm",
              "baddbmm", "matmul", "_convolution", "cudnn_convolution")
NORM_FWD = ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
            "cudnn_batch_norm", "native_layer_norm")
NORM_BWD = ("native_batch_norm_backward", "cudnn_batch_norm_backward", "native_layer_norm_backward")


def dtype_size(precision: str) -> int:
    return 2 if precision.lower() in ("fp16", "bf16") else 4


@dataclass(frozen=True)
class Kernel:
    op: str
    flops: tuple[int, int]  # (const, per sample)
    read: tuple[int, int]  # floating-point elements
    write: tuple[int, int]
    other_bytes: tuple[int, int] = (0, 0)

    @staticmethod
    def from_row(row: list) -> "Kernel":
        op, fc, fs, rc, rs, wc, ws, oc, os_ = row
        return Kernel(str(op), (int(fc), int(fs)), (int(rc), int(rs)), (int(wc), int(ws)), (int(oc), int(os_)))


@dataclass(frozen=True)
class KernelCost:
    op: str
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    host_s: float

    @property
    def gpu_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def _at(pair: tuple[int, int], batch: int) -> int:
    return pair[0] + pair[1] * batch


def conv_shape_class(kernel: Kernel) -> str:
    """"3x3" for a forward convolution that is 3x3 with stride 1, else "other", from the kernel table's counts:
    K = C_in k^2 = FLOPs per sample / (2 x output elements per sample); C_out = weight elements / K (with a bias,
    / (K + 1)); then k^2 = K / C_in with C_in = input elements / (output elements / C_out), exact for a stride-1
    convolution that keeps its size (within rounding when it drops a border), a quarter of k^2 at stride 2."""
    if kernel.op != "convolution" or not kernel.write[1] or not kernel.flops[1]:
        return "other"
    k_dim = kernel.flops[1] // (2 * kernel.write[1])
    weights = kernel.read[0]
    if not k_dim or not weights or not kernel.read[1]:
        return "other"
    c_out = weights // k_dim if weights % k_dim == 0 else weights // (k_dim + 1)
    if not c_out:
        return "other"
    k2 = k_dim * kernel.write[1] / c_out / kernel.read[1]
    return "3x3" if round(k2) == 9 else "other"


# (kh, kw, stride) a convolution of a kernel table may have, in the order they are tried
CONV_CANDIDATES = ((1, 1, 1), (3, 3, 1), (1, 1, 2), (3, 3, 2), (5, 5, 1), (1, 7, 1), (7, 1, 1), (1, 3, 1), (3, 1, 1),
                   (7, 7, 2), (11, 11, 4), (7, 7, 1), (5, 5, 2))
# a device without a convolution table of its own uses the table of the device whose die it shares
CONV_TABLE_SAME_DIE = {"H200": "H100"}
CONV_DIRECTIONS = {"convolution": "fwd", "convolution_backward_input": "dgrad", "convolution_backward_weight": "wgrad",
                   "convolution_backward_weight_after_input": "wgrad"}
CONV_NEIGHBOURS = 4


@dataclass(frozen=True)
class ConvGeometry:
    kh: int
    kw: int
    stride: int
    c_in: int
    c_out: int
    hw_in: int  # square input, hw_in x hw_in
    h_out: int
    w_out: int
    bias: bool = False

    @property
    def shape_class(self) -> str:
        return conv_class_name(self.kh, self.kw, self.stride, self.c_in)


def conv_class_name(kh: int, kw: int, stride: int, c_in: int) -> str:
    """The shape class of a convolution, as benchmarks/conv_shapes.py names its grid: "KxK" for a square kernel,
    "1xK" for 1xK and Kx1 alike, "sS" appended for a stride S > 1, "stem" in front for an image input (<= 4
    channels): "1x1", "1x1s2", "3x3", "3x3s2", "5x5", "1x7", "1x3", "stem7x7s2", "stem11x11s4", ..."""
    k = max(kh, kw)
    name = f"{k}x{k}" if kh == kw else f"1x{k}"
    if stride > 1:
        name += f"s{stride}"
    return ("stem" + name) if c_in <= 4 else name


def conv_geometry(kernel: Kernel) -> ConvGeometry | None:
    """A forward convolution's geometry recovered from its kernel table counts (square inputs, as in the zoo): per
    sample FLOPs F = 2 x C_in kh kw x output elements O, so K = C_in kh kw = F / (2 O); C_out = weight elements /
    K (/ (K + 1) with a bias); then for each (kh, kw, stride) of CONV_CANDIDATES in turn, C_in = K / (kh kw) must
    divide the input elements into a square H x H, and some padding p_h <= kh/2, p_w <= kw/2 must give
    H_out W_out = O / C_out with H_out = (H + 2 p_h - kh) // stride + 1 >= 1 (W_out alike). The first fit wins (1x7 and
    7x1 cannot be told apart from counts: the same class). None when nothing fits."""
    if kernel.op != "convolution":
        return None
    fs, out_s, in_s, weights = kernel.flops[1], kernel.write[1], kernel.read[1], kernel.read[0]
    if not fs or not out_s or not in_s or not weights or fs % (2 * out_s):
        return None
    k_dim = fs // (2 * out_s)
    for bias in (0, 1):
        if weights % (k_dim + bias):
            continue
        c_out = weights // (k_dim + bias)
        if not c_out or out_s % c_out:
            continue
        p_out = out_s // c_out
        for kh, kw, stride in CONV_CANDIDATES:
            if k_dim % (kh * kw):
                continue
            c_in = k_dim // (kh * kw)
            if in_s % c_in:
                continue
            hw = math.isqrt(in_s // c_in)
            if hw * hw != in_s // c_in:
                continue
            for ph in range(kh // 2 + 1):
                for pw in range(kw // 2 + 1):
                    h_out, w_out = (hw + 2 * ph - kh) // stride + 1, (hw + 2 * pw - kw) // stride + 1
                    if h_out >= 1 and w_out >= 1 and h_out * w_out == p_out:
                        return ConvGeometry(kh, kw, stride, c_in, c_out, hw, h_out, w_out, bool(bias))
    return None


@dataclass(frozen=True)
class ConvTable:
    """The FLOP rates a device's convolutions reach by shape class (benchmarks/conv_shapes.py, converted with its
    ``--table``): per (class, precision) the measured points as (log2 C_in, log2 C_out, log2 M, {direction: log2
    FLOP/s}) with M = batch x H_out x W_out (the implicit GEMM's rows)."""

    points: dict  # (class, precision) -> tuple of (x1, x2, x3, {"fwd" | "dgrad" | "wgrad": log2 rate})
    source: str
    # rate() per (class, precision, direction, query point): a pure function of the points, so asked once
    _rates: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @staticmethod
    def from_doc(doc: dict) -> "ConvTable":
        cols = doc["columns"]
        idx = {c: cols.index(c) for c in ("class", "c_in", "c_out", "batch", "h_out", "w_out", "precision",
                                          "fwd_tflops", "dgrad_tflops", "wgrad_tflops")}
        points: dict = {}
        for row in doc["points"]:
            rates = {d: math.log2(row[idx[f"{d}_tflops"]] * 1e12) for d in ("fwd", "dgrad", "wgrad")
                     if row[idx[f"{d}_tflops"]]}
            m = row[idx["batch"]] * row[idx["h_out"]] * row[idx["w_out"]]
            points.setdefault((row[idx["class"]], row[idx["precision"]]), []).append(
                (math.log2(row[idx["c_in"]]), math.log2(row[idx["c_out"]]), math.log2(m), rates))
        return ConvTable({k: tuple(v) for k, v in points.items()}, str(doc.get("source", "")))

    def rate(self, geometry: ConvGeometry, batch: int, precision: str, direction: str) -> float | None:
        """FLOP/s of a convolution of `geometry` at `batch`: among the measured points of its class and precision
        (bf16 as fp16) that have `direction`, the CONV_NEIGHBOURS nearest in (log2 C_in, log2 C_out, log2 M)
        (Euclidean; ties by table order), their log2 rates averaged with weights 1 / distance^2; a point at
        distance 0 is used alone (several: their plain mean). None when the class has no point (then the
        device's median convolution share applies)."""
        p = "fp16" if precision.lower() == "bf16" else precision.lower()
        q = (math.log2(geometry.c_in), math.log2(geometry.c_out), math.log2(batch * geometry.h_out * geometry.w_out))
        key = (geometry.shape_class, p, direction, q)
        if key not in self._rates:
            pts = [pt for pt in self.points.get((geometry.shape_class, p), ()) if direction in pt[3]]
            self._rates[key] = idw_log2(pts, q, direction) if pts else None
        return self._rates[key]


def idw_log2(pts, q: tuple, key: str) -> float:
    """2 ** (inverse-square-distance weighted mean of the log2 values `pt[-1][key]` of the CONV_NEIGHBOURS points
    of `pts` nearest to `q` in their leading coordinates); a point at distance 0 alone (several: their mean)."""
    n = len(q)
    # the same as sorted(...)[:CONV_NEIGHBOURS] (heapq's documented equivalence), without sorting every point
    dist = heapq.nsmallest(CONV_NEIGHBOURS, [(math.dist(q, pt[:n]), i) for i, pt in enumerate(pts)])
    exact = [pts[i][-1][key] for d, i in dist if d == 0.0]
    if exact:
        return 2.0 ** (sum(exact) / len(exact))
    weights = [(1.0 / (d * d), pts[i][-1][key]) for d, i in dist]
    return 2.0 ** (sum(w * r for w, r in weights) / sum(w for w, _ in weights))


# a Linear layer's matmuls: the forward (addmm with a bias, mm without), and in the backward the input gradient
# (mm reading the weight) and the weight gradient (mm writing it)
LINEAR_OPS = ("addmm", "mm")


@dataclass(frozen=True)
class LinearGeometry:
    k: int  # input features
    n: int  # output features
    tokens: int = 1  # rows per sample (M = batch x tokens)
    bias: bool = False


def linear_geometry(kernel: Kernel) -> LinearGeometry | None:
    """A Linear layer's geometry from its forward matmul's counts: per sample it reads T x K input elements, writes
    T x N outputs and does 2 T K N FLOPs, so T = 2 x reads x writes / FLOPs, K = reads / T, N = writes / T; its
    constant reads are the weight, K x N (+ N with a bias). None when the counts are not those of a matmul."""
    if kernel.op not in LINEAR_OPS or kernel.flops[0] or kernel.write[0]:
        return None
    fs, rs, ws, weights = kernel.flops[1], kernel.read[1], kernel.write[1], kernel.read[0]
    if fs <= 0 or rs <= 0 or ws <= 0 or (2 * rs * ws) % fs:
        return None
    t = 2 * rs * ws // fs
    if not t or rs % t or ws % t:
        return None
    k, n = rs // t, ws // t
    if 2 * t * k * n != fs or weights not in (k * n, k * n + n):
        return None
    return LinearGeometry(k, n, t, weights == k * n + n)


def linear_direction(kernel: Kernel, phase: str) -> str | None:
    """"fwd" for a Linear layer's forward matmul, "dgrad" for the backward's matmul that reads the weight (the input
    gradient), "wgrad" for the one that writes it (the weight gradient); None for any other kernel."""
    if kernel.op not in LINEAR_OPS:
        return None
    if phase == "fwd":
        return "fwd"
    if kernel.write[0] and not kernel.read[0]:
        return "wgrad"
    if kernel.read[0] and not kernel.write[0]:
        return "dgrad"
    return None


@dataclass(frozen=True)
class LinearTable:
    """The FLOP rates a device's GEMMs reach by shape (benchmarks/conv_shapes.py --linear, converted with
    ``--table``): per precision the measured points as (log2 M, log2 K, log2 N, {"fwd" | "dgrad" | "wgrad": log2
    FLOP/s}), M the rows (batch x tokens), K the input and N the output features."""

    points: dict  # precision -> tuple of (x1, x2, x3, {direction: log2 rate})
    source: str

    @staticmethod
    def from_doc(doc: dict) -> "LinearTable":
        cols = doc["columns"]
        idx = {c: cols.index(c) for c in ("m", "k", "n", "precision", "fwd_tflops", "dgrad_tflops", "wgrad_tflops")}
        points: dict = {}
        for row in doc["points"]:
            rates = {d: math.log2(row[idx[f"{d}_tflops"]] * 1e12) for d in ("fwd", "dgrad", "wgrad")
                     if row[idx[f"{d}_tflops"]]}
            points.setdefault(row[idx["precision"]], []).append(
                (math.log2(row[idx["m"]]), math.log2(row[idx["k"]]), math.log2(row[idx["n"]]), rates))
        return LinearTable({k: tuple(v) for k, v in points.items()}, str(doc.get("source", "")))

    def rate(self, m: int, k: int, n: int, precision: str, direction: str) -> float | None:
        """FLOP/s of an M x K by K x N matmul's `direction` in `precision` (bf16 as fp16): the interpolation of
        :meth:`ConvTable.rate` (:func:`idw_log2`) in (log2 M, log2 K, log2 N); None without points."""
        p = "fp16" if precision.lower() == "bf16" else precision.lower()
        pts = [pt for pt in self.points.get(p, ()) if direction in pt[3]]
        if not pts or m <= 0 or k <= 0 or n <= 0:
            return None
        return idw_log2(pts, (math.log2(m), math.log2(k), math.log2(n)), direction)


# element-wise, pooling and concatenation kernels the device's pointwise table may have (benchmarks/conv_shapes.py
# --pointwise), by their kernel-table names; a pooling's class also has its stride (1 or 2, from its counts)
POINTWISE_OPS = ("relu_", "threshold_backward", "add", "add_", "mul", "div_", "bernoulli_", "cat")
POOL_OPS = ("max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward")


def pointwise_class(kernel: Kernel) -> str | None:
    """The pointwise table's class of a kernel: its op for an element-wise one or a concatenation; for a pooling,
    its op and "/s1" or "/s2": stride 1 when the output has more than half the input's elements (a forward reads
    the input, n_in per sample, and writes the output, n_out; a backward reads both and writes the input's
    gradient, n_in); None for any other kernel."""
    if kernel.flops != (0, 0) or not kernel.write[1]:
        return None
    if kernel.op in POINTWISE_OPS:
        return kernel.op
    if kernel.op not in POOL_OPS:
        return None
    if kernel.op.endswith("_backward"):
        n_in, n_out = kernel.write[1], kernel.read[1] - kernel.write[1]
    else:
        n_in, n_out = kernel.read[1], kernel.write[1]
    if n_in <= 0 or n_out <= 0:
        return None
    return f"{kernel.op}/s1" if 2 * n_out > n_in else f"{kernel.op}/s2"


@dataclass(frozen=True)
class PointwiseTable:
    """The bandwidth a device's element-wise, pooling and concatenation kernels reach by class and size
    (benchmarks/conv_shapes.py --pointwise, converted with ``--table``), with the kernel tables' byte accounting:
    per (class, precision) ("fp32" for fp32 and tf32, "fp16" for fp16 and bf16) the measured points as
    (log2 bytes, {"bw": log2 bytes/s})."""

    points: dict  # (class, precision) -> tuple of (log2 bytes, {"bw": log2 bytes/s})
    source: str

    @staticmethod
    def from_doc(doc: dict) -> "PointwiseTable":
        cols = doc["columns"]
        idx = {c: cols.index(c) for c in ("op", "precision", "bytes", "gbps")}
        points: dict = {}
        for row in doc["points"]:
            if row[idx["gbps"]] and row[idx["bytes"]]:
                points.setdefault((row[idx["op"]], row[idx["precision"]]), []).append(
                    (math.log2(row[idx["bytes"]]), {"bw": math.log2(row[idx["gbps"]] * 1e9)}))
        return PointwiseTable({k: tuple(v) for k, v in points.items()}, str(doc.get("source", "")))

    def bandwidth(self, cls: str, nbytes: float, size: int) -> float | None:
        """Bytes/s of a kernel of class `cls` moving `nbytes` bytes with elements of `size` bytes: the interpolation
        of :meth:`ConvTable.rate` (:func:`idw_log2`) in log2 bytes; None without points."""
        pts = self.points.get((cls, "fp16" if size == 2 else "fp32"), ())
        if not pts or nbytes <= 0:
            return None
        return idw_log2(pts, (math.log2(nbytes),), "bw")


@dataclass(frozen=True)
class NormTable:
    """The bandwidth a device's BatchNorm kernels reach by shape (benchmarks/conv_shapes.py --norm, converted with
    ``--table``), with the roofline's byte accounting: per precision ("fp32" for fp32 and tf32, "fp16" for fp16
    and bf16) the measured points as (log2 C, log2 M, {"fwd" | "bwd": log2 bytes/s}), M = batch x H x W."""

    points: dict  # precision -> tuple of (x1, x2, {"fwd" | "bwd": log2 bytes/s})
    source: str

    @staticmethod
    def from_doc(doc: dict) -> "NormTable":
        cols = doc["columns"]
        idx = {c: cols.index(c) for c in ("channels", "hw", "batch", "precision", "fwd_gbps", "bwd_gbps")}
        points: dict = {}
        for row in doc["points"]:
            rates = {d: math.log2(row[idx[f"{d}_gbps"]] * 1e9) for d in ("fwd", "bwd") if row[idx[f"{d}_gbps"]]}
            m = row[idx["batch"]] * row[idx["hw"]] ** 2
            points.setdefault(row[idx["precision"]], []).append((math.log2(row[idx["channels"]]), math.log2(m), rates))
        return NormTable({k: tuple(v) for k, v in points.items()}, str(doc.get("source", "")))

    def bandwidth(self, channels: int, m: int, size: int, direction: str) -> float | None:
        """Bytes/s of a BatchNorm of `channels` over M = batch x H x W elements per channel, elements of `size`
        bytes, `direction` "fwd" or "bwd": the same interpolation as :meth:`ConvTable.rate` in (log2 C, log2 M);
        None without points."""
        pts = [pt for pt in self.points.get("fp16" if size == 2 else "fp32", ()) if direction in pt[2]]
        if not pts or channels <= 0 or m <= 0:
            return None
        return idw_log2(pts, (math.log2(channels), math.log2(m)), direction)


def batch_norm_shape(kernel: Kernel) -> tuple[int, int] | None:
    """(C, H x W) of a batch-norm kernel of a kernel table: the forward reads weight, bias and the running mean and
    variance (4 C constant elements) and writes the running statistics (2 C); the backward writes the weight and
    bias gradients (2 C); per sample it writes C x H x W elements."""
    if "batch_norm" not in kernel.op:
        return None
    c = kernel.read[0] // 4 if kernel.op in NORM_FWD else kernel.write[0] // 2
    if c <= 0 or not kernel.write[1] or kernel.write[1] % c:
        return None
    return c, kernel.write[1] // c


def _read_table(path, kind, device_name: str | None = None):
    """A packaged (or `data_dir`) table file through `kind.from_doc`; a file that is not one, or one whose recorded
    ``device`` names another preset's GPU than `device_name` (the file's own, :func:`measured_on_other_device`), is a
    ModelError naming it."""
    from ..errors import ModelError

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        table = kind.from_doc(doc)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ModelError(f"{path}: not a valid {kind.__name__} file ({type(exc).__name__}: {exc}); restore it from "
                         f"the ddlsim package or write it again with benchmarks/conv_shapes.py --table") from None
    other = measured_on_other_device(doc.get("device"), device_name) if device_name else None
    if other is not None:
        raise ModelError(f"{path}: measured on {doc.get('device')!r}, a {other}, not a {device_name}; name the table "
                         f"after the GPU that ran it (conv_shapes.py --table ... --out <stem>_{other.lower()}.json)")
    return table


def _device_table(stem: str, kind, device_name: str, data_dir: str | None):
    """The device's table ``ddlsim/data/kernels/<stem>_<device>.json`` (or that of the device whose die it shares,
    CONV_TABLE_SAME_DIE) read through `kind`, or None when neither file exists. `data_dir`: another folder to look
    in (tests)."""
    from pathlib import Path

    folder = resources.files(_DATA) if data_dir is None else Path(data_dir)
    for name in (device_name, CONV_TABLE_SAME_DIE.get(device_name)):
        if name is None:
            continue
        path = folder.joinpath(f"{stem}_{name.lower()}.json")
        if path.is_file():
            return _read_table(path, kind, name)
    return None


@lru_cache(maxsize=None)
def norm_table(device_name: str, data_dir: str | None = None) -> NormTable | None:
    """The device's BatchNorm table, ``ddlsim/data/kernels/norm_classes_<device>.json`` (or that of the device whose
    die it shares), or None: BatchNorm then moves its bytes at the device's one BatchNorm share (or the copy
    share), as before."""
    return _device_table("norm_classes", NormTable, device_name, data_dir)


@lru_cache(maxsize=None)
def conv_table(device_name: str, data_dir: str | None = None) -> ConvTable | None:
    """The device's convolution table, ``ddlsim/data/kernels/conv_classes_<device>.json`` (or that of the device
    whose die it shares, CONV_TABLE_SAME_DIE), or None: every convolution then costs as before (the median share,
    and the 3x3 share where the device has one). `data_dir`: another folder to look in (tests)."""
    return _device_table("conv_classes", ConvTable, device_name, data_dir)


@lru_cache(maxsize=None)
def pointwise_table(device_name: str, data_dir: str | None = None) -> "PointwiseTable | None":
    """The device's element-wise / pooling table, ``ddlsim/data/kernels/pointwise_<device>.json`` (or that of the
    device whose die it shares), or None: those kernels then move their bytes at the copy share, as before."""
    return _device_table("pointwise", PointwiseTable, device_name, data_dir)


@lru_cache(maxsize=None)
def linear_table(device_name: str, data_dir: str | None = None) -> "LinearTable | None":
    """The device's GEMM table, ``ddlsim/data/kernels/linear_classes_<device>.json`` (or that of the device whose
    die it shares), or None: a Linear layer's matmuls then cost as before (the device's GEMM share)."""
    return _device_table("linear_classes", LinearTable, device_name, data_dir)


def _rate(op: str, device: Device, precision: str, phase: str, conv_class: str = "other") -> float:
    mb = microbench(device)
    p = precision.lower()
    if op.startswith("convolution"):
        if conv_class == "3x3" and mb.conv_3x3_share is not None:
            return device.peak_flops(p) * mb.conv_3x3_share[phase].get(p, 1.0)
        share = (mb.conv_fwd_share if phase == "fwd" else mb.conv_bwd_share).get(p, 1.0)
        return device.peak_flops(p) * share
    if op in MATMUL_OPS:
        return device.peak_flops(p) * mb.gemm_share.get(p, 1.0)
    return device.peak_flops("fp32") * mb.gemm_share.get("fp32", 1.0)  # element-wise work on the CUDA cores


def _host_s(kernel: Kernel, device: Device, phase: str) -> float:
    mb = microbench(device)
    op = kernel.op
    if op == "add_" and kernel.read == (0, 0) and kernel.write == (0, 0):
        return 0.0  # BatchNorm's integer step counter: part of the BatchNorm call the microbenchmark timed
    if op == "convolution_backward_weight_after_input":
        return 0.0  # the same autograd node as the input gradient, which carries its host time
    if op in BIAS_OPS:
        return 0.0  # issued inside the convolution's call (forward) or autograd node (backward), which carry it
    if op.startswith("convolution_backward"):
        return mb.host_us["convolution_backward"] * 1e-6
    if op in mb.host_us:
        return mb.host_us[op] * 1e-6
    return (mb.host_fwd_us if phase == "fwd" else mb.host_bwd_us) * 1e-6


def kernel_cost(kernel: Kernel, device: Device, precision: str, batch: int, phase: str = "fwd",
                conv_class: str = "other", conv_geom: ConvGeometry | None = None,
                linear_geom: LinearGeometry | None = None) -> KernelCost:
    """Time of one kernel at `batch` on `device` in `precision` (phase "fwd" or "bwd"; a convolution of shape
    class `conv_class`, see :func:`conv_shape_class`, and of geometry `conv_geom`, which the device's convolution
    table, where it has one, costs by its shape class: :meth:`ConvTable.rate`; a Linear layer's matmul of geometry
    `linear_geom`, which the device's GEMM table, where it has one, costs by its shape: :meth:`LinearTable.rate`)."""
    mb = microbench(device)
    size = dtype_size(precision)
    flops = _at(kernel.flops, batch)
    elements = _at(kernel.read, batch) + _at(kernel.write, batch)
    if kernel.op in NORM_FWD:  # statistics pass + normalisation pass: the input is read twice
        elements += _at(kernel.write, batch) - kernel.write[0]
    elif kernel.op in NORM_BWD:  # reductions of dy and dy*x_hat, then dx: x and dy read twice
        elements += 2 * (_at(kernel.write, batch) - kernel.write[0])
    nbytes = elements * size + _at(kernel.other_bytes, batch)
    bandwidth = device.memory_bytes_per_s * mb.copy_share
    if mb.norm_share is not None and kernel.op in NORM_FWD + NORM_BWD:
        bandwidth = device.memory_bytes_per_s * mb.norm_share["fp16" if size == 2 else "fp32"][0 if kernel.op in NORM_FWD else 1]
    if kernel.op in NORM_FWD + NORM_BWD:
        shape = batch_norm_shape(kernel)
        table = norm_table(device.name) if shape is not None else None
        if table is not None:
            bandwidth = table.bandwidth(shape[0], batch * shape[1], size, "fwd" if kernel.op in NORM_FWD else "bwd") \
                or bandwidth
    pointwise = pointwise_class(kernel)
    if pointwise is not None:
        table = pointwise_table(device.name)
        if table is not None:
            bandwidth = table.bandwidth(pointwise, nbytes, size) or bandwidth
    rate = None
    if conv_geom is not None and flops and kernel.op in CONV_DIRECTIONS:
        table = conv_table(device.name)
        if table is not None:
            rate = table.rate(conv_geom, batch, precision, CONV_DIRECTIONS[kernel.op])
    direction = linear_direction(kernel, phase) if linear_geom is not None and flops else None
    if direction is not None:
        table = linear_table(device.name)
        if table is not None:
            rate = table.rate(batch * linear_geom.tokens, linear_geom.k, linear_geom.n, precision, direction)
    if rate is None:
        rate = _rate(kernel.op, device, precision, phase, conv_class) if flops else 0.0
    return KernelCost(kernel.op, flops, nbytes, flops / rate if flops else 0.0,
                      nbytes / bandwidth if bandwidth else 0.0, _host_s(kernel, device, phase))


def _cast_kernels(layer_kernels: list[Kernel], phase: str) -> list[Kernel]:
    """Autocast's weight casts: fp32 -> half in the forward, the gradient back in the backward (elements counted
    at the half size, so a 4+2 byte cast is 3 half-size elements)."""
    out = []
    for k in layer_kernels:
        if k.op in ("convolution", "addmm", "mm") and k.read[0] > 0:
            weight = k.read[0]
            out.append(Kernel("_to_copy" if phase == "fwd" else "_to_copy_backward", (0, 0), (2 * weight, 0), (weight, 0)))
    return out


@lru_cache(maxsize=None)
def kernel_table(model_name: str) -> dict[str, tuple[tuple[Kernel, ...], tuple[Kernel, ...]]] | None:
    """Per layer name: (forward kernels, backward kernels) of a zoo model, or None when it has no table."""
    name = model_name.strip().lower().replace("-", "")
    path = resources.files(_DATA).joinpath(f"{name}.json")
    if not path.is_file():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {layer["name"]: (tuple(Kernel.from_row(r) for r in layer["fwd"]), tuple(Kernel.from_row(r) for r in layer["bwd"]))
            for layer in doc["layers"]}


# PyTorch's cuDNN path adds a convolution's bias in a kernel of its own after the convolution (cuDNN convolutions do
# not take a bias, ATen's cudnn/ConvShared.cpp) and reduces the output gradient for the bias gradient; the kernel
# tables, traced on the meta device, have one aten convolution per layer and show neither
BIAS_KERNELS = True
BIAS_OPS = ("convolution_bias_add", "convolution_bias_grad")


def _bias_kernels(fwd: list[Kernel], bwd: list[Kernel]) -> tuple[list[Kernel], list[Kernel]]:
    """A convolution with a bias (conv_geometry finds one): after the forward convolution, an in-place add of the
    bias to the output (reads the output and the bias, writes the output); in the backward, before the input and
    weight gradients, the bias gradient, a sum of the output gradient over batch and pixels (reads it, writes C_out).
    Both are element-wise work costed by their bytes."""
    conv = next((k for k in fwd if k.op == "convolution"), None)
    geom = conv_geometry(conv) if conv is not None else None
    if geom is None or not geom.bias:
        return fwd, bwd
    out = conv.write[1]
    i = fwd.index(conv) + 1
    fwd = fwd[:i] + [Kernel("convolution_bias_add", (0, 0), (geom.c_out, out), (0, out))] + fwd[i:]
    j = next((n for n, k in enumerate(bwd) if k.op.startswith("convolution_backward")), len(bwd))
    bwd = bwd[:j] + [Kernel("convolution_bias_grad", (0, 0), (0, out), (geom.c_out, 0))] + bwd[j:]
    return fwd, bwd


def layer_kernels(model, layer, precision: str) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) kernels of `layer` of `model`, autocast casts included."""
    table = kernel_table(model.name)
    if table is not None and layer.name in table:
        fwd, bwd = list(table[layer.name][0]), list(table[layer.name][1])
    else:  # no kernel table: one matmul-like kernel of the layer's FLOPs, reading its parameters
        params = sum(t.elements for t in layer.tensors)
        fwd = [Kernel("mm", (0, layer.fwd_flops), (params, 0), (0, 0))] if (layer.fwd_flops or params) else []
        bwd = [Kernel("mm", (0, layer.bwd_flops), (params, 0), (params, 0))] if (layer.bwd_flops or params) else []
    if BIAS_KERNELS:
        fwd, bwd = _bias_kernels(fwd, bwd)
    if dtype_size(precision) == 2:
        fwd += _cast_kernels(fwd, "fwd")
        bwd += _cast_kernels(fwd, "bwd")
    # a weight gradient right after the input gradient is the same autograd node (one host cost for both)
    bwd = [dataclasses.replace(k, op="convolution_backward_weight_after_input")
           if k.op == "convolution_backward_weight" and i and bwd[i - 1].op == "convolution_backward_input" else k
           for i, k in enumerate(bwd)]
    return fwd, bwd


def layer_costs(model, layer, device: Device | str, precision: str, batch: int) -> tuple[list[KernelCost], list[KernelCost]]:
    device = find_device(device) if isinstance(device, str) else device
    fwd, bwd = layer_kernels(model, layer, precision)
    # the layer's convolution shape class (its input and weight gradients share the forward's shape)
    cls = next((conv_shape_class(k) for k in fwd if k.op == "convolution"), "other")
    geom = next((conv_geometry(k) for k in fwd if k.op == "convolution"), None)
    # a Linear layer's geometry from its forward matmul (its input and weight gradients have the same M, K, N)
    lin = next((linear_geometry(k) for k in fwd if k.op in LINEAR_OPS), None) if geom is None else None
    return ([kernel_cost(k, device, precision, batch, "fwd", cls, geom, lin) for k in fwd],
            [kernel_cost(k, device, precision, batch, "bwd", cls, geom, lin) for k in bwd])


def host_mode(precision: str) -> str:
    """The host-call mode of a precision: fp16/bf16 run under autocast, fp32/tf32 plainly."""
    return "autocast" if dtype_size(precision) == 2 else "fp32"


@lru_cache(maxsize=None)
def _host_calls_doc() -> dict:
    path = resources.files(_DATA).joinpath("host_calls.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"models": {}}


def host_calls(model_name: str) -> dict | None:
    """Per layer name: {"fp32": {call kind: number}, "autocast": {...}} of a zoo CNN (tools/gen_host_calls.py),
    or None when the model has no counts."""
    entry = _host_calls_doc()["models"].get(model_name.strip().lower().replace("-", ""))
    return None if entry is None else entry["layers"]


def pipeline(steps, start_s: float = 0.0) -> list[float]:
    """The host/GPU pipeline, a max-plus recurrence over kernels in issue order: `steps` is (h_i, g_i) per kernel,
    h_i the host time spent before kernel i is launched and g_i its GPU time. The host clock is
    H_i = H_(i-1) + h_i from H_0 = start_s, the GPU clock G_i = max(G_(i-1), H_i) + g_i from G_0 = 0 (a kernel
    starts when it has been launched and the GPU is free). Returns G_1..G_n; in closed form
    G_n = max(max_k (H_k + g_k + ... + g_n), g_1 + ... + g_n)."""
    host, gpu, out = start_s, 0.0, []
    for h, g in steps:
        host += h
        gpu = max(gpu, host) + g
        out.append(gpu)
    return out


def layer_steps(model, device: Device | str, precision: str, batch: int) -> tuple[list, float]:
    """The pipeline's steps of one training step: per layer and phase (forward in layer order, backward in reverse)
    the list of (h, g) of its kernels, as ((layer index, phase), steps); and the host time before the first
    kernel (zero_grad). With the device's per-call host costs (HostDispatch) and the model's call counts, a layer's
    host time is its calls' forward (backward) host costs, spread evenly over its forward (backward) kernels, and
    every kernel takes at least the device's shortest kernel time; otherwise each kernel carries its own launch
    cost (the per-kernel host times)."""
    device = find_device(device) if isinstance(device, str) else device
    mb = microbench(device)
    hd = mb.host_dispatch
    calls = host_calls(model.name) if hd is not None else None
    mode = host_mode(precision)
    costs = [layer_costs(model, layer, device, precision, batch) for layer in model.layers]
    floor = hd.kernel_floor_us * 1e-6 if hd is not None else 0.0
    start = hd.zero_grad_us_per_param * 1e-6 * len(model.tensors) if calls is not None else 0.0
    per_layer = []
    for i, layer in enumerate(model.layers):
        counts = calls.get(layer.name) if calls is not None else None
        if counts is not None:
            h_fwd, h_bwd = (x * 1e-6 for x in hd.call_us(mode, call_counts(hd, mode, counts[mode], model, layer)))
        phases = []
        for phase, kernels in enumerate(costs[i]):
            if counts is None:
                phases.append([(c.host_s, c.gpu_s) for c in kernels])
                continue
            h = h_fwd if phase == 0 else h_bwd
            if not kernels:
                phases.append([(h, 0.0)] if h else [])
                continue
            phases.append([(h / len(kernels), max(c.gpu_s, floor)) for c in kernels])
        per_layer.append(phases)
    order = [(i, 0) for i in range(len(costs))] + [(i, 1) for i in reversed(range(len(costs)))]
    if calls is not None and hd.backward_start_us is not None and costs:
        # loss.backward(): the autograd engine's start, on the host before the first backward kernel is issued (a
        # measured start below zero, the noise of a fast host, counts as none)
        first = next((per_layer[i][1] for i, phase in order if phase == 1 and per_layer[i][1]), None)
        extra = max(hd.backward_start_us, 0.0) * 1e-6
        if first is not None:
            first[0] = (first[0][0] + extra, first[0][1])
        else:
            per_layer[len(costs) - 1][1].append((extra, 0.0))
    return [((i, phase), per_layer[i][phase]) for i, phase in order], start


def call_counts(hd, mode: str, counts: dict, model, layer) -> dict:
    """A layer's host calls by kind as the device's host benchmark `hd` can cost them: its Conv2d call counted as a
    ``conv2d_bias`` where the run measured that kind and the layer's convolution has a bias (its kernel table's
    counts, :func:`conv_geometry`), its Linear call as ``linear_nobias`` where the run measured that and the layer's
    Linear has none (:func:`linear_geometry`); otherwise `counts` unchanged."""
    swap_conv = counts.get("conv2d") and hd.has(mode, "conv2d_bias")
    swap_linear = counts.get("linear") and hd.has(mode, "linear_nobias")
    if not swap_conv and not swap_linear:
        return counts
    table = kernel_table(model.name)
    fwd = table[layer.name][0] if table is not None and layer.name in table else ()
    out = dict(counts)
    if swap_conv:
        geom = next((conv_geometry(k) for k in fwd if k.op == "convolution"), None)
        if geom is not None and geom.bias:
            out["conv2d_bias"] = out.get("conv2d_bias", 0) + out.pop("conv2d")
    if swap_linear:
        geom = next((linear_geometry(k) for k in fwd if k.op in LINEAR_OPS), None)
        if geom is not None and not geom.bias:
            out["linear_nobias"] = out.get("linear_nobias", 0) + out.pop("linear")
    return out


def layer_times_s(model, device: Device | str, precision: str, batch: int) -> list[tuple[float, float]]:
    """(forward s, backward s) per layer of `model` at `batch` on `device` in `precision`: the growth of the GPU's
    clock over the layer's kernels in the host/GPU pipeline (forward in layer order, backward in reverse)."""
    steps, start = layer_steps(model, device, precision, batch)
    flat = [st for _, layer_steps_ in steps for st in layer_steps_]
    clocks = pipeline(flat, start)
    fwd_s, bwd_s = [0.0] * len(model.layers), [0.0] * len(model.layers)
    before, pos = 0.0, 0
    for (i, phase), layer_steps_ in steps:
        pos += len(layer_steps_)
        after = clocks[pos - 1] if pos else 0.0
        (fwd_s if phase == 0 else bwd_s)[i] = after - before
        before = after
    return list(zip(fwd_s, bwd_s))


def step_totals_s(model, device: Device | str, precision: str, batch: int) -> tuple[float, float, float]:
    """(host s, GPU s, step s) of one training step: the host's total (zero_grad and every launch), the GPU's
    total (every kernel), and the pipeline's end, which lies between the larger of the two and their sum."""
    steps, start = layer_steps(model, device, precision, batch)
    flat = [st for _, layer_steps_ in steps for st in layer_steps_]
    clocks = pipeline(flat, start)
    return start + sum(h for h, _ in flat), sum(g for _, g in flat), clocks[-1] if clocks else start


def iteration_s(model, device: Device | str, precision: str, batch: int) -> float:
    """Forward + backward seconds of one iteration (no optimizer step, no communication)."""
    return sum(f + b for f, b in layer_times_s(model, device, precision, batch))
