"""Accelerator presets for the compute-time models.

Peak dense throughput per GPU in TFLOP/s and memory bandwidth in GB/s from
the vendors' datasheets (boost clocks, one GPU of a K80 board, SXM parts
where both exist; the datasheets quote tensor-core rates "with sparsity",
the dense rate is half of that). "fp32" is plain single precision on the
CUDA cores; "tf32" is fp32 matmuls and convolutions on the tensor cores
(Ampere and later; on older parts it is fp32); "fp16" (and "bf16") is half
precision on tensor cores where the part has them. docs/compute-model.md
lists every number with its datasheet.

Two compute models use them (ddlsim.workload.roofline):

- ``roofline`` (default): per kernel max(FLOPs / reachable peak of the
  precision, bytes / reachable memory bandwidth), issued by the host at a
  measured launch cost, host and GPU as a pipeline; the reachable shares
  come from device microbenchmarks (a large GEMM, a large copy, a stream of
  tiny kernels), see :data:`MICROBENCH`;
- ``flops`` (the old model): FLOPs x batch / (peak x efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class Device:
    name: str
    fp32_tflops: float
    fp16_tflops: float
    tf32_tflops: float | None = None  # None: no TF32 tensor cores, TF32 runs as fp32
    memory_gbps: float = 0.0  # datasheet HBM/GDDR bandwidth, GB/s (1e9 bytes/s)
    source: str = ""

    def peak_flops(self, precision: str) -> float:
        """Datasheet dense peak in FLOP/s of a matmul/convolution in `precision`."""
        precision = precision.lower()
        if precision in ("fp16", "bf16"):
            return self.fp16_tflops * 1e12
        if precision == "tf32":
            return (self.tf32_tflops if self.tf32_tflops is not None else self.fp32_tflops) * 1e12
        return self.fp32_tflops * 1e12

    @property
    def memory_bytes_per_s(self) -> float:
        return self.memory_gbps * 1e9


_NV = "NVIDIA datasheet"
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        # Kepler: no fast fp16; 480 GB/s per K80 board of two GPUs
        Device("K80", fp32_tflops=4.37, fp16_tflops=4.37, memory_gbps=240.0, source=f"{_NV}: Tesla K80 (per GPU)"),
        Device("P100", fp32_tflops=10.6, fp16_tflops=21.2, memory_gbps=732.0, source=f"{_NV}: Tesla P100 SXM2"),
        Device("V100", fp32_tflops=15.7, fp16_tflops=125.0, memory_gbps=900.0, source=f"{_NV}: Tesla V100 SXM2"),
        Device("T4", fp32_tflops=8.1, fp16_tflops=65.0, memory_gbps=320.0, source=f"{_NV}: Tesla T4"),
        # A100 80GB SXM: TF32 312 / FP16 624 TFLOPS with sparsity
        Device("A100", fp32_tflops=19.5, fp16_tflops=312.0, tf32_tflops=156.0, memory_gbps=2039.0,
               source=f"{_NV}: A100 80GB SXM"),
        # H100 SXM5: TF32 989 / BF16-FP16 1,979 TFLOPS with sparsity; 3.35 TB/s HBM3
        Device("H100", fp32_tflops=67.0, fp16_tflops=989.5, tf32_tflops=494.5, memory_gbps=3350.0,
               source=f"{_NV}: H100 Tensor Core GPU, SXM"),
        # H200 SXM: the H100's GH100 compute with 141 GB HBM3e at 4.8 TB/s
        Device("H200", fp32_tflops=67.0, fp16_tflops=989.5, tf32_tflops=494.5, memory_gbps=4800.0,
               source=f"{_NV}: H200 Tensor Core GPU, SXM"),
        # HGX B200, per GPU: TF32 2.2 / FP16-BF16 4.5 PFLOPS with sparsity, FP32 75 TFLOPS, 7.7 TB/s HBM3e
        Device("B200", fp32_tflops=75.0, fp16_tflops=2250.0, tf32_tflops=1100.0, memory_gbps=7700.0,
               source=f"{_NV}: HGX B200 (individual Blackwell GPU)"),
    )
}


HOST_MODES = ("fp32", "autocast")  # fp32 and tf32 issue the same calls; fp16 and bf16 run under autocast
# a call kind of tools/gen_host_calls.py -> (chain of benchmarks/host_dispatch.py, operations per chain element)
HOST_KIND_CHAINS = {
    "conv2d": ("conv2d", 1), "batchnorm2d": ("batchnorm2d", 1), "relu_module": ("relu_module", 1),
    "maxpool2d": ("maxpool2d", 1), "adaptive_avgpool2d": ("adaptive_avgpool2d", 1), "dropout": ("dropout", 1),
    "linear": ("linear", 1), "identity_module": ("identity_module", 1), "relu_fn": ("relu_fn", 1),
    "add_inplace": ("add_inplace", 1), "cat": ("cat4_split", 1), "view": ("view", 2), "op": ("mul", 1),
}
# call kinds a host benchmark may have and older runs lack: a Conv2d with a bias (the conv2d chain has none) and a
# Linear without one (the linear chain has one); the model uses each only where the run has it
HOST_KIND_OPTIONAL = {"conv2d_bias": ("conv2d_bias", 1), "linear_nobias": ("linear_nobias", 1)}


@dataclass(frozen=True)
class HostDispatch:
    """What the host spends per call of PyTorch eager, by call kind (a Conv2d module, an F.relu, a container
    module's call, a view, ...), in microseconds: forward with autograd recording, and the autograd backward that
    call creates; per mode ("fp32" for fp32 and tf32, "autocast" for fp16 and bf16). From
    benchmarks/host_dispatch.py on the device's host (chains of distinct calls, host clock, no synchronisation),
    never from a model's measured time. Also the host time of ``zero_grad(set_to_none=True)`` per parameter tensor
    and the GPU time of the shortest kernel (a floor under every kernel's roofline time)."""

    fwd_us: dict  # mode -> call kind -> us
    bwd_us: dict  # mode -> call kind -> us
    zero_grad_us_per_param: float
    kernel_floor_us: float
    source: str
    # the host time of a backward() call before its first node (the autograd engine's start), us; None: not measured
    backward_start_us: float | None = None

    def has(self, mode: str, kind: str) -> bool:
        """Whether the run measured call kind `kind` in `mode` (the optional kinds of HOST_KIND_OPTIONAL)."""
        return kind in self.fwd_us.get(mode, {})

    def call_us(self, mode: str, counts: dict) -> tuple[float, float]:
        """(forward us, backward us) of a layer's calls, `counts` {call kind: number}."""
        fwd, bwd = self.fwd_us[mode], self.bwd_us[mode]
        return (sum(n * fwd[k] for k, n in counts.items()), sum(n * bwd[k] for k, n in counts.items()))


def host_dispatch_from_benchmark(doc: dict, source: str = "") -> HostDispatch:
    """A :class:`HostDispatch` from the JSON that benchmarks/host_dispatch.py writes. A chain whose element issues
    several operations of its kind (the view chain: two views per element) is divided by their number."""
    fwd: dict = {}
    bwd: dict = {}
    for mode, key in (("fp32", "fp32"), ("autocast", "fp16_autocast")):
        chains = doc["host_us"][key]
        fwd[mode], bwd[mode] = {}, {}
        for kind, (chain, per) in HOST_KIND_CHAINS.items():
            entry = chains.get(chain)
            if not entry or "fwd_us" not in entry:
                raise ValueError(f"host benchmark: host_us.{key}.{chain} is missing or failed "
                                 f"({(entry or {}).get('error', 'absent')}); rerun benchmarks/host_dispatch.py")
            fwd[mode][kind] = entry["fwd_us"] / per
            bwd[mode][kind] = entry["bwd_us"] / per
        for kind, (chain, per) in HOST_KIND_OPTIONAL.items():  # where the run has them (a failed one: as absent)
            entry = chains.get(chain)
            if isinstance(entry, dict) and "fwd_us" in entry and "bwd_us" in entry:
                fwd[mode][kind] = entry["fwd_us"] / per
                bwd[mode][kind] = entry["bwd_us"] / per
    start = doc.get("backward_start_us")
    return HostDispatch(fwd, bwd, float(doc["zero_grad_us_per_param"]), float(doc.get("tiny_kernel_gpu_us", 0.0)),
                        source or f"benchmarks/host_dispatch.py on {doc.get('device')} ({doc.get('cpu')}), "
                                  f"torch {doc.get('torch')}",
                        None if start is None else float(start))


def norm_share_from_benchmark(doc: dict, device: "Device") -> dict:
    """BatchNorm's effective bandwidth as a share of `device`'s datasheet bandwidth, {"fp32" | "fp16": (forward,
    backward)}, from the JSON that benchmarks/host_dispatch.py writes on that device (a ResNet activation,
    128 x 256 x 56 x 56, with the roofline's byte accounting)."""
    try:
        bn = doc["batchnorm_bandwidth"]
        return {p: (float(bn[p]["fwd_gbps"]) / device.memory_gbps, float(bn[p]["bwd_gbps"]) / device.memory_gbps)
                for p in ("fp32", "fp16")}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"host benchmark: batchnorm_bandwidth is missing {exc}; rerun benchmarks/host_dispatch.py "
                         f"on a GPU") from None


# the two 3x3 stride-1 shapes of gpu_layer_times.py's convolution microbenchmark on the H100 (batch 128; TFLOP/s,
# docs/data/gpu-layer-times-h100-microbench.json)
_H100_CONV_3X3_B128 = {
    "3x3_64_56": {"fwd": {"fp32": 39.51, "tf32": 84.83, "fp16": 144.91}, "bwd": {"fp32": 35.84, "tf32": 77.51, "fp16": 158.21}},
    "3x3_256_14": {"fwd": {"fp32": 83.87, "tf32": 196.52, "fp16": 314.15},
                   "bwd": {"fp32": 43.11, "tf32": 159.7, "fp16": 274.27}},
}


def conv_3x3_share_from_benchmark(doc: dict, device: "Device") -> dict:
    """The 3x3 convolution share of the peak, {"fwd" | "bwd": {precision: share}}: per precision and direction the
    median over the 3x3 stride-1 shapes measured, the five VGG-like shapes at batch 32 of benchmarks/host_dispatch.py
    (``vgg_conv_b32``, on `device`) and the two of the H100's convolution microbenchmark at batch 128."""
    import statistics

    vgg = doc.get("vgg_conv_b32")
    if not vgg:
        raise ValueError("host benchmark: vgg_conv_b32 is missing; rerun benchmarks/host_dispatch.py on a GPU")
    out: dict = {"fwd": {}, "bwd": {}}
    for phase in ("fwd", "bwd"):
        for p in ("fp32", "tf32", "fp16"):
            shares = [v[f"{phase}_tflops"] / (device.peak_flops(p) / 1e12) for k, v in vgg.items() if k.endswith("_" + p)]
            shares += [v[phase][p] / (DEVICES["H100"].peak_flops(p) / 1e12) for v in _H100_CONV_3X3_B128.values()]
            out[phase][p] = statistics.median(shares)
        out[phase]["bf16"] = out[phase]["fp16"]
    return out


@dataclass(frozen=True)
class Microbench:
    """What kernels reach on the device, measured by microbenchmarks of single
    operations (never by timing a model): the share of the datasheet peak a
    large GEMM and typical convolutions reach per precision, the share of the
    datasheet bandwidth a large device-to-device copy reaches, and the host
    time PyTorch eager spends issuing one operation (dispatch, autograd,
    launch), per operation kind, forward and backward, in microseconds."""

    gemm_share: dict  # precision -> share of peak, 8192^3 matmul
    conv_fwd_share: dict  # precision -> median share over the convolution shapes of the microbenchmark
    conv_bwd_share: dict  # precision -> same, input + weight gradient
    copy_share: float
    host_us: dict  # aten op -> host microseconds per call (the first kernel of an autograd node carries the node)
    host_fwd_us: float  # any other forward op
    host_bwd_us: float  # any other backward op (an autograd node)
    source: str
    # host time per call kind (benchmarks/host_dispatch.py); None: the per-kernel host_us above (the older model)
    host_dispatch: HostDispatch | None = None
    # BatchNorm's own effective bandwidth as a share of the datasheet's, {"fp32" | "fp16": (forward, backward)}
    # (benchmarks/host_dispatch.py, with the roofline's byte accounting); None: the copy share
    norm_share: dict | None = None
    # share of the peak that 3x3 stride-1 convolutions reach, {"fwd" | "bwd": {precision: share}} (the median of the
    # 3x3 shapes of the microbenchmarks); None: every convolution at the median of the four typical shapes
    conv_3x3_share: dict | None = None


# One H100 SXM5 80GB (HBM3, 1980 MHz), PyTorch 2.11 + CUDA 13.0, cuDNN defaults (benchmark off), on the device
# machine's host CPU; the microbenchmarks are `benchmarks/gpu_layer_times.py --microbench-only` (docs/compute-model.md
# has the raw numbers). Devices without a measurement of their own use these shares and host times (the same GH100
# die for the H200; an assumption for the others, stated in the docs).
_H100_RAW = {
    "gemm_tflops": {"fp32": 51.744, "tf32": 371.096, "fp16": 696.281, "bf16": 682.181},
    "conv_fwd_tflops": {"fp32": 37.615, "tf32": 103.055, "fp16": 140.40},
    "conv_bwd_tflops": {"fp32": 26.38, "tf32": 76.475, "fp16": 128.255},
    "copy_gbps": 2973.432,
}


def _shares(raw: dict, device: "Device") -> dict:
    out = {p: v / (device.peak_flops(p) / 1e12) for p, v in raw.items()}
    out.setdefault("bf16", out["fp16"])
    return out


MICROBENCH: dict[str, Microbench] = {
    "H100": Microbench(
        gemm_share=_shares(_H100_RAW["gemm_tflops"], DEVICES["H100"]),
        conv_fwd_share=_shares(_H100_RAW["conv_fwd_tflops"], DEVICES["H100"]),
        conv_bwd_share=_shares(_H100_RAW["conv_bwd_tflops"], DEVICES["H100"]),
        copy_share=_H100_RAW["copy_gbps"] / DEVICES["H100"].memory_gbps,
        host_us={"convolution": 26.15, "convolution_backward": 56.84, "native_batch_norm": 31.53,
                 "native_batch_norm_backward": 57.05, "relu_": 7.90, "relu": 7.90, "threshold_backward": 21.05,
                 "add": 7.21, "add_": 7.21},
        host_fwd_us=7.90, host_bwd_us=21.05,
        source="microbenchmarks on one H100 SXM5 80GB, PyTorch 2.11, docs/compute-model.md"),
}


def host_microbench(base: Microbench, device: "Device", doc: dict, source: str) -> Microbench:
    """`base` (the device's kernel shares) with the host dispatch, BatchNorm bandwidth and 3x3-convolution shares
    of a benchmarks/host_dispatch.py run on `device` (its card and its host CPU)."""
    import dataclasses

    return dataclasses.replace(base, host_dispatch=host_dispatch_from_benchmark(doc, source),
                               norm_share=norm_share_from_benchmark(doc, device),
                               conv_3x3_share=conv_3x3_share_from_benchmark(doc, device), source=source)


def measured_on_other_device(recorded, device_name: str) -> str | None:
    """The preset that a run's recorded device (torch.cuda.get_device_name, e.g. "NVIDIA H100 80GB HBM3") names when
    it is not `device_name`, else None (the same preset, or a device that names none of them: "cpu", a test's)."""
    import re

    if not isinstance(recorded, str):
        return None
    named = [n for n in DEVICES if re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![0-9])", recorded, re.IGNORECASE)]
    if not named or device_name.upper() in named:
        return None
    return named[0]


def measured_host_microbench(base: Microbench, device: "Device", source: str, folder=None) -> Microbench | None:
    """`base` with the host constants of ``host_dispatch_<device>.json`` in `folder` (default: ddlsim's
    data/kernels), or None when there is no such file; a file that is not a benchmarks/host_dispatch.py result is a
    ModelError naming it."""
    import json
    from pathlib import Path

    from ..errors import ModelError

    folder = Path(__file__).resolve().parent.parent / "data" / "kernels" if folder is None else Path(folder)
    path = folder / f"host_dispatch_{device.name.lower()}.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        mb = host_microbench(base, device, doc, source)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"{path}: not a valid benchmarks/host_dispatch.py result ({type(exc).__name__}: {exc}); "
                         f"restore it from the ddlsim package or run benchmarks/host_dispatch.py again") from None
    other = measured_on_other_device(doc.get("device"), device.name)
    if other is not None:
        raise ModelError(f"{path}: measured on {doc.get('device')!r}, a {other}, not a {device.name}; name the run "
                         f"after the GPU that ran it (host_dispatch_{other.lower()}.json)")
    return mb


def _h200_microbench() -> Microbench:
    """The H100's kernel shares (the same die) with the host dispatch, BatchNorm bandwidth and 3x3-convolution
    shares that benchmarks/host_dispatch.py measured on H200 machines, the median of its runs
    (data/kernels/host_dispatch_h200.json: the card and its host CPU; docs/compute-model.md, "Run 4")."""
    source = ("H100 kernel shares; host dispatch, BatchNorm and 3x3 shares: the median of benchmarks/host_dispatch.py "
              "runs on H200 machines")
    return measured_host_microbench(MICROBENCH["H100"], DEVICES["H200"], source) or MICROBENCH["H100"]


# The H100's host constants, where benchmarks/host_dispatch.py has run on the H100 machine
# (data/kernels/host_dispatch_h100.json); without that file the H100 preset keeps the per-kernel host times.
MICROBENCH["H100"] = measured_host_microbench(
    MICROBENCH["H100"], DEVICES["H100"],
    "microbenchmarks on one H100 SXM5 80GB, PyTorch 2.11; host dispatch, BatchNorm and 3x3 shares from "
    "the median of benchmarks/host_dispatch.py runs on H100 machines (data/kernels/host_dispatch_h100.json)"
) or MICROBENCH["H100"]
MICROBENCH["H200"] = _h200_microbench()


# Devices without microbenchmarks of their own. Hopper and Blackwell (H200: the H100's die; B200: an assumption) take
# the H100's; older parts take the flat model's long-standing assumption, half of the datasheet peak for every kernel
# kind (the H100's shares would be an extrapolation across architectures: its fp32 convolutions reach a much smaller
# share than a V100's), with the H100's copy share and host times.
_SAME_AS_H100 = ("H200", "B200")
_HALF_PEAK = Microbench(
    gemm_share={p: 0.5 for p in PRECISIONS}, conv_fwd_share={p: 0.5 for p in PRECISIONS},
    conv_bwd_share={p: 0.5 for p in PRECISIONS}, copy_share=MICROBENCH["H100"].copy_share,
    host_us=MICROBENCH["H100"].host_us, host_fwd_us=MICROBENCH["H100"].host_fwd_us,
    host_bwd_us=MICROBENCH["H100"].host_bwd_us,
    source="no microbenchmark: half of the datasheet peak (the flat model's assumption), the H100's copy share and "
           "host times")


def microbench(device: Device) -> Microbench:
    if device.name in MICROBENCH:
        return MICROBENCH[device.name]
    return MICROBENCH["H100"] if device.name in _SAME_AS_H100 else _HALF_PEAK


def find_device(name: str) -> Device:
    key = name.strip().upper()
    if key not in DEVICES:
        raise KeyError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")
    return DEVICES[key]
