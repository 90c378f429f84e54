#!/usr/bin/env python3
"""Host microbenchmarks of PyTorch eager on a GPU machine: what the host spends
issuing one call of each kind of layer, forward and autograd backward
(docs/compute-model.md, "Host dispatch"). Never a model's own time.

    PYTHONPATH=python python benchmarks/host_dispatch.py --out host.json               # on a CUDA machine, ~20 s
    PYTHONPATH=python python benchmarks/host_dispatch.py --device cpu --quick --out /tmp/host.json
    PYTHONPATH=python python benchmarks/host_dispatch.py --median host1.json host2.json host3.json --out host.json

For each call kind (a Conv2d module, the same with a bias, a BatchNorm2d
module, a ReLU module, an F.relu, a max pooling, a Linear (with its bias,
and without), a Dropout, an element-wise multiply, an in-place add, a view
(two per call), a concatenation of four parts (torch.split then
torch.cat), an empty nn.Identity module call, a BatchNorm2d + in-place ReLU
pair and a whole Conv-BN-ReLU block as checks, ...) a chain of N
distinct instances is run in training mode (autograd on): the host clock
(perf_counter) from a synchronised start to the moment the Python loop has
issued all N calls, without synchronising, divided by N, is the forward host
cost of one call; ``backward()`` on the chain's end, timed the same way (the
call returns when the autograd engine has issued every backward kernel) and
divided by N, is its backward host cost. The tensors are small (batch 32, 64
channels, 14x14) so that the GPU keeps up and the host clock measures the
host; the GPU time of the same chain is recorded beside it as a check
(``gpu_ms`` < ``host_ms`` means the host was the bottleneck). Each chain runs
plain (fp32) and under fp16 autocast. Also: ``model.zero_grad(set_to_none=True)``
per parameter, the start of ``backward()`` (the intercept of its host time over chains of
1 and N nodes, :func:`backward_start`), the bare tiny-op loop (``add_`` on one element, no autograd),
the GPU's minimum time per tiny kernel (kernels queued behind a sleep so
that the GPU, not the host, sets their pace), BatchNorm's effective memory
bandwidth forward and backward in fp32 and fp16 at a ResNet-sized
activation, and VGG-like 3x3 convolutions at batch 32 per precision. Checks
that are never constants: a Conv-BN-ReLU block chain at 56x56, a chain of
convolutions of 8 shapes in turn, and the host and GPU time of a few whole
torchvision training steps at batch 32 (``model_host_check``).
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
from gpu_setup import torch_on, write_out as _write_file  # noqa: E402


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def model_host_check(torch, dev, sync) -> dict:
    """A check, never a constant: the host time of whole torchvision training steps (forward issue time and
    backward issue time, host clock, no synchronisation) beside their GPU time, to tell a host-bound step from
    a GPU-bound one."""
    import torch.nn.functional as F

    try:
        import torchvision.models as tvm
    except ImportError as exc:
        return {"error": str(exc)}
    out = {}
    for name, batch, prec in (("googlenet", 32, "fp32"), ("googlenet", 32, "fp16"), ("resnet50", 32, "fp16"),
                              ("resnet152", 32, "fp16"), ("alexnet", 32, "fp32"), ("alexnet", 32, "fp16")):
        kw = {"aux_logits": True, "init_weights": False} if name == "googlenet" else {}
        model = getattr(tvm, name)(weights=None, **kw).to(dev).train()
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        ctx = (lambda: torch.autocast("cuda", dtype=torch.float16)) if prec == "fp16" else (
            lambda: torch.autocast("cuda", enabled=False))
        rows = []
        for rep in range(6):
            sync()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            with ctx():
                outs = model(x)
                outs = [outs] if isinstance(outs, torch.Tensor) else [o for o in outs if o is not None]
                loss = sum(F.cross_entropy(o.float(), y) for o in outs)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            b.record()
            sync()
            if rep:
                rows.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, a.elapsed_time(b)))
        out[f"{name}_b{batch}_{prec}"] = {"host_fwd_ms": statistics.median(r[0] for r in rows),
                                          "host_bwd_ms": statistics.median(r[1] for r in rows),
                                          "step_ms": statistics.median(r[2] for r in rows)}
        del model, x
        torch.cuda.empty_cache()
    return out


def median_doc(docs: list) -> dict:
    """Several runs' JSON documents as one: every number (not a bool) is the median (``statistics.median``: the
    middle one of an odd count, the mean of the two middle ones of an even count) of the runs that have a number at
    that place, so runs of an older version of this benchmark, which lack the newer call kinds, still count where
    they have a value; anything else (text, a flag, a chain that failed) is the first value found, in run order.
    Keys keep the order in which the runs first name them. ``median_of`` records how many runs were combined."""
    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def merge(values):
        dicts = [v for v in values if isinstance(v, dict)]
        if isinstance(values[0], dict):
            keys = list(dict.fromkeys(k for d in dicts for k in d))
            return {k: merge([d[k] for d in dicts if k in d]) for k in keys}
        numbers = [v for v in values if is_number(v)]
        if is_number(values[0]):
            return statistics.median(numbers)
        return values[0]

    out = merge(docs)
    out["median_of"] = len(docs)
    return out


def write_median(runs: list, out: Path) -> int:
    """--median RUN...: the median document of finished runs to `out`; exit 2 after one line on a file that is not
    a run of this benchmark."""
    docs = []
    for run in runs:
        try:
            doc = json.loads(Path(run).read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("host_us"), dict):
                raise ValueError("no host_us object")
        except (OSError, ValueError) as exc:
            print(f"error: --median {run}: not a benchmarks/host_dispatch.py result ({type(exc).__name__}: {exc}); "
                  f"name the JSON files its runs wrote", file=sys.stderr)
            return 2
        docs.append(doc)
    if not _write_file(out, json.dumps(median_doc(docs), indent=1, sort_keys=True) + "\n", inputs=runs):
        return 2
    print(f"wrote {out}: the median of {len(docs)} runs", file=sys.stderr)
    return 0


def intercept(t1: float, tn: float, n: int) -> float:
    """The fixed part of a cost linear in a chain's length, T(L) = S + L m, from T(1) and T(n): S = T(1) - (T(n) -
    T(1)) / (n - 1)."""
    return t1 - (tn - t1) / (n - 1)


def backward_start(torch, dev, sync, B, C, HW, n, reps) -> dict:
    """The host time of a ``backward()`` call before its first node: the autograd engine's start (the graph task,
    the hand-over to the device's worker thread) and the return after the last node. A chain of L multiplications
    of a leaf, ``backward(grad)`` on its end with a given gradient, timed on the host from the call to its return
    (synchronised before, not inside) for L = 1 and L = n in alternation, ``reps`` times each after a warm-up; with
    the medians T(1), T(n) of T(L) = S + L m, the start is S = T(1) - (T(n) - T(1)) / (n - 1) (``start_us``; S also
    holds the leaf's one gradient accumulation). The same for ``loss.backward()`` on the chain's ``.sum()`` (a
    scalar: its implicit gradient and the sum's node are part of S there: ``scalar_start_us``, a check)."""
    x0 = torch.randn(B, C, HW, HW, device=dev)

    def once(length: int, scalar: bool) -> float:
        x = x0.clone().requires_grad_(True)
        y = x * 1.0001
        for _ in range(length - 1):
            y = y * 1.0001
        if scalar:
            y = y.sum()
            grad = None
        else:
            grad = torch.ones_like(y)
        sync()
        t0 = time.perf_counter()
        y.backward(grad)
        t1 = time.perf_counter()
        sync()
        return (t1 - t0) * 1e6

    out: dict = {"n": n, "repeats": reps}
    for scalar, key in ((False, ""), (True, "scalar_")):
        t1s, tns = [], []
        for rep in range(reps + 1):
            a, b = once(1, scalar), once(n, scalar)
            if rep:  # the first pair is the warm-up
                t1s.append(a)
                tns.append(b)
        t1, tn = statistics.median(t1s), statistics.median(tns)
        out.update({f"{key}t1_us": t1, f"{key}tn_us": tn, f"{key}start_us": intercept(t1, tn, n),
                    f"{key}per_node_us": (tn - t1) / (n - 1)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true", help="fewer calls and repeats (a smoke test)")
    ap.add_argument("--no-model-check", action="store_true", help="leave out the whole-model host check (GPU only)")
    ap.add_argument("--median", type=Path, nargs="+", default=None, metavar="RUN",
                    help="measure nothing: write to --out the median of these runs' JSON files, number by number "
                         "(no torch needed)")
    ap.add_argument("--only", nargs="+", default=None, metavar="KIND",
                    help="run only these call kinds' chains (e.g. conv2d conv2d_bias; the other parts still run)")
    args = ap.parse_args(argv)
    if args.median is not None:
        return write_median(args.median, args.out)

    setup = torch_on(args.device)
    if setup is None:
        return 2
    torch, dev, cuda = setup
    import torch.nn.functional as F
    from torch import nn

    n = 20 if args.quick else 100
    reps = 2 if args.quick else 7
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t_start = time.monotonic()
    doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
           "cpu": _cpu_name(), "python": platform.python_version(), "chain_length": n, "repeats": reps,
           "generator": "benchmarks/host_dispatch.py", "host_us": {}}

    B, C, HW = (4, 8, 8) if args.quick else (32, 64, 14)

    def x4(dtype=torch.float32):
        return torch.randn(B, C, HW, HW, device=dev, dtype=dtype)

    # chain element builders: (modules or None, a function y -> y, input factory)
    kinds = {
        "conv2d": (lambda: nn.Conv2d(C, C, 3, padding=1, bias=False), None, x4),
        # the same convolution with a bias (AlexNet's and VGG-16's): cuDNN takes none, PyTorch adds it after
        "conv2d_bias": (lambda: nn.Conv2d(C, C, 3, padding=1, bias=True), None, x4),
        "batchnorm2d": (lambda: nn.BatchNorm2d(C), None, x4),
        "relu_module": (lambda: nn.ReLU(), None, x4),
        "batchnorm2d_relu_inplace": (lambda: nn.Sequential(nn.BatchNorm2d(C), nn.ReLU(inplace=True)), None, x4),
        "conv_bn_relu_block": (lambda: nn.Sequential(nn.Conv2d(C, C, 3, padding=1, bias=False), nn.BatchNorm2d(C),
                                                     nn.ReLU(inplace=True)), None, x4),
        "relu_fn": (None, lambda y: F.relu(y), x4),
        "maxpool2d": (lambda: nn.MaxPool2d(3, 1, 1), None, x4),
        "adaptive_avgpool2d": (lambda: nn.AdaptiveAvgPool2d((HW, HW)), None, x4),
        "dropout": (lambda: nn.Dropout(0.2), None, lambda: torch.randn(B, 256, device=dev)),
        "linear": (lambda: nn.Linear(256, 256), None, lambda: torch.randn(B, 256, device=dev)),  # with its bias
        "linear_nobias": (lambda: nn.Linear(256, 256, bias=False), None, lambda: torch.randn(B, 256, device=dev)),
        "identity_module": (lambda: nn.Identity(), None, x4),
        "mul": (None, lambda y: y * 1.0001, x4),
        "add_inplace": (None, "add_", x4),
        "view": (None, lambda y: y.view(y.shape[0], -1).view(y.shape), x4),
        "cat_slice": (None, lambda y: torch.cat([y[:, : C // 2], y[:, C // 2:]], 1), x4),
        "cat4_split": (None, lambda y: torch.cat(torch.split(y, C // 4, 1), 1), x4),
        # checks, not constants: a block at a ResNet-sized activation (56x56), and convolutions of 8 shapes in turn
        "conv_bn_relu_block_56x56": (lambda: nn.Sequential(nn.Conv2d(C, C, 3, padding=1, bias=False),
                                                           nn.BatchNorm2d(C), nn.ReLU(inplace=True)), None,
                                     lambda: torch.randn(B, C, 4 * HW, 4 * HW, device=dev)),
        "conv2d_8_shapes": ("shapes", None, x4),
    }
    widths = [C, C // 2, C * 2, C // 4, C * 3 // 2, C, C * 2, C // 2]
    if args.only is not None:
        unknown = sorted(set(args.only) - set(kinds))
        if unknown:
            print(f"error: --only {' '.join(unknown)}: no such call kind; known: {', '.join(kinds)}", file=sys.stderr)
            return 2
        kinds = {k: v for k, v in kinds.items() if k in args.only}

    def run_chain(kind: str, amp: bool) -> dict:
        make_module, fn, make_input = kinds[kind]
        if make_module == "shapes":  # widths cycle through 8 values: 8 distinct convolution shapes in turn
            ws = [widths[i % len(widths)] for i in range(n + 1)]
            ws[-1] = C
            mods = [nn.Conv2d(ws[i], ws[i + 1], 3, padding=1, bias=False).to(dev) for i in range(n)]
        else:
            mods = [make_module().to(dev).train() for _ in range(n)] if make_module else None
        others = [torch.randn(B, C, HW, HW, device=dev) for _ in range(n)] if fn == "add_" else None
        x0 = make_input()
        fwd, bwd, gpu = [], [], []
        for rep in range(reps + 1):
            x = x0.clone().requires_grad_(True)
            ctx = torch.autocast(args.device, dtype=torch.float16 if cuda else torch.bfloat16) if amp else None
            sync()
            ev0 = torch.cuda.Event(enable_timing=True) if cuda else None
            if cuda:
                ev0.record()
            if ctx is not None:
                ctx.__enter__()
            y = x * 1.0  # a non-leaf, so that in-place ops are allowed
            t0 = time.perf_counter()
            for i in range(n):
                if mods is not None:
                    y = mods[i](y)
                elif fn == "add_":
                    y += others[i]
                else:
                    y = fn(y)
            t1 = time.perf_counter()
            if ctx is not None:
                ctx.__exit__(None, None, None)
            grad = torch.ones_like(y)
            sync()
            t2 = time.perf_counter()
            y.backward(grad)
            t3 = time.perf_counter()
            if cuda:
                ev1 = torch.cuda.Event(enable_timing=True)
                ev1.record()
            sync()
            if rep:  # the first run is the warm-up (cuDNN plans, allocator)
                fwd.append((t1 - t0) / n * 1e6)
                bwd.append((t3 - t2) / n * 1e6)
                if cuda:
                    gpu.append(ev0.elapsed_time(ev1))
            if mods is not None:
                for m in mods:
                    m.zero_grad(set_to_none=True)
        out = {"fwd_us": statistics.median(fwd), "bwd_us": statistics.median(bwd)}
        if gpu:
            out["chain_gpu_ms"] = statistics.median(gpu)
            out["chain_host_ms"] = (out["fwd_us"] + out["bwd_us"]) * n / 1e3
        return out

    for amp in (False, True):
        key = "fp16_autocast" if amp else "fp32"
        doc["host_us"][key] = {}
        for kind in kinds:
            try:
                doc["host_us"][key][kind] = run_chain(kind, amp)
            except Exception as exc:  # noqa: BLE001 -- a kind that fails is recorded, the others still run
                doc["host_us"][key][kind] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(key, json.dumps({k: [round(v.get("fwd_us", -1), 2), round(v.get("bwd_us", -1), 2)]
                               for k, v in doc["host_us"][key].items()}), flush=True)

    doc["backward_start"] = backward_start(torch, dev, sync, B, C, HW, n, reps)
    doc["backward_start_us"] = doc["backward_start"]["start_us"]
    print("backward_start", json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                        for k, v in doc["backward_start"].items()}), flush=True)

    # model.zero_grad(set_to_none=True) per parameter (part of every training step)
    seq = nn.Sequential(*[nn.Conv2d(8, 8, 1) for _ in range(n)]).to(dev)
    for p in seq.parameters():
        p.grad = torch.zeros_like(p)
    params = sum(1 for _ in seq.parameters())
    times = []
    for _ in range(reps):
        for p in seq.parameters():
            p.grad = torch.zeros_like(p)
        t0 = time.perf_counter()
        seq.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) / params * 1e6)
    doc["zero_grad_us_per_param"] = statistics.median(times)

    # the bare tiny-op loop: add_ on one element, no autograd, no synchronisation
    tiny = torch.zeros(1, device=dev)
    count = 200 if args.quick else 5000
    times = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        for _ in range(count):
            tiny.add_(1.0)
        times.append((time.perf_counter() - t0) / count * 1e6)
    sync()
    doc["tiny_add_host_us"] = statistics.median(times)

    if cuda:
        # the GPU's own time per tiny kernel: queue them behind a long sleep so the GPU sets their pace
        k = 1000
        vals = []
        for _ in range(3):
            sync()
            torch.cuda._sleep(int(50e6))  # ~ tens of ms of GPU cycles, longer than issuing k kernels
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(k):
                tiny.add_(1.0)
            b.record()
            sync()
            vals.append(a.elapsed_time(b) * 1e3 / k)
        doc["tiny_kernel_gpu_us"] = statistics.median(vals)

        def gpu_ms(fn, r=5):
            fn()
            sync()
            out = []
            for _ in range(r):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                sync()
                out.append(a.elapsed_time(b))
            return statistics.median(out)

        # BatchNorm's effective bandwidth at a ResNet activation (batch 128, 256 x 56 x 56), the roofline's byte
        # accounting: forward reads x twice and writes y (3 elements per element), backward reads x and dy twice
        # and writes dx (5)
        bn_doc = {}
        for prec, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
            x = torch.randn(128, 256, 56, 56, device=dev, dtype=dtype, requires_grad=True)
            bn = nn.BatchNorm2d(256).to(dev)
            elems = x.numel()
            f = gpu_ms(lambda: bn(x))
            y = bn(x)
            dy = torch.randn_like(y)
            fb = gpu_ms(lambda: torch.autograd.grad(bn(x), (x,), dy))
            size = 2 if dtype == torch.float16 else 4
            bn_doc[prec] = {"fwd_ms": f, "fwd_bwd_ms": fb, "fwd_gbps": 3 * elems * size / f / 1e6,
                            "bwd_gbps": 5 * elems * size / max(fb - f, 1e-9) / 1e6}
            del x, y, dy
            torch.cuda.empty_cache()
        doc["batchnorm_bandwidth"] = bn_doc

        # VGG-like 3x3 convolutions at batch 32: TFLOP/s forward and backward (dgrad + wgrad) per precision
        conv_doc = {}
        for prec in ("fp32", "tf32", "fp16"):
            torch.backends.cuda.matmul.allow_tf32 = prec != "fp32"
            torch.backends.cudnn.allow_tf32 = prec != "fp32"
            dtype = torch.float16 if prec == "fp16" else torch.float32
            for c, hw in ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14)):
                x = torch.randn(32, c, hw, hw, device=dev, dtype=dtype, requires_grad=True)
                conv = nn.Conv2d(c, c, 3, padding=1).to(dev).to(dtype)
                flops = 2 * 32 * c * c * 9 * hw * hw
                dy = torch.randn_like(conv(x))
                with torch.no_grad():
                    f = gpu_ms(lambda: conv(x), 3)
                fb = gpu_ms(lambda: torch.autograd.grad(conv(x), (x, conv.weight), dy), 3)
                conv_doc[f"3x3_{c}_{hw}_{prec}"] = {"fwd_tflops": flops / f / 1e9,
                                                    "bwd_tflops": 2 * flops / max(fb - f, 1e-9) / 1e9}
                del x, dy, conv
            torch.cuda.empty_cache()
        doc["vgg_conv_b32"] = conv_doc
    def write() -> bool:
        doc["wall_s"] = time.monotonic() - t_start
        return _write_file(args.out, json.dumps(doc, indent=1, sort_keys=True) + "\n")

    if not write():  # the constants are safe before the whole-model check runs
        return 2
    if cuda and not args.no_model_check:
        try:
            doc["model_host_check"] = model_host_check(torch, dev, sync)
        except Exception as exc:  # noqa: BLE001 -- a check; the constants are already written
            doc["model_host_check"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        if not write():
            return 2
    print(f"wrote {args.out} in {doc['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
