#!/usr/bin/env python3
"""Measured forward+backward time of the zoo's torchvision CNNs on a GPU,
beside ddlsim's roofline prediction for the same model, batch, precision and
device (docs/compute-model.md).

    PYTHONPATH=python python benchmarks/gpu_layer_times.py --out gpu-run/            # on a CUDA machine, ~4 min on an H100
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --device cpu --quick --out /tmp/gpu-quick
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --report gpu-run/     # markdown table of a finished run
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --rescore gpu-run/    # the same run against today's model
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --rescore docs/data/gpu-layer-times-h100-summary.csv
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --cases alexnet:32:tf32 googlenet:128:fp16 --out run/
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --graph-only --cases alexnet:32:tf32 --out graph/
    PYTHONPATH=python python benchmarks/gpu_layer_times.py --graph-report graph/ --predict-device H100

For every (model, batch, precision): the whole forward + loss + backward
(no optimizer step) timed with CUDA events around it, after warm-up, the
median of repeats, with no hooks; then the same with per-layer hooks (a CUDA
event at each parameterised layer's forward pre-hook and at the start of its
backward), each layer's time being the span to the next event (so a ReLU,
pooling or residual add counts with the layer before it, as in ddlsim's
kernel tables). Precisions: fp32 (TF32 off), tf32 (TF32 on for matmuls and
cuDNN), fp16 (autocast). Also measured: microbenchmarks of the device (large
GEMM per precision, large copy, tiny-kernel issue interval), and a 1-rank
NCCL DDP capture through ddlsim's own capture (``--skip-ddp`` to leave out).

``--cases MODEL:BATCH:PRECISION ...`` measures just those cases (instead of
the models x batches x precisions product). ``--graph-only`` measures, per
case, the step as PyTorch eager runs it (no hooks) and the same step
captured once as a CUDA graph and replayed: the replay issues no host work,
so its time is the step's GPU time alone, which tells a host-bound step
from a GPU-bound one (OUT/graph.csv; ``--graph-report`` sets it beside the
model's host and GPU totals).

Writes OUT/gpu_layer_times.json (everything), OUT/summary.csv (one row per
case: measured, predicted, ratio) and OUT/layers.csv (per layer). Needs only
torch, torchvision and ddlsim's pure-Python workload package (json); the DDP
check needs ddlsim's capture (pyarrow, numpy).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

MODELS = ["resnet18", "resnet50", "resnet101", "resnet152", "vgg16", "alexnet", "googlenet", "inception_v3"]
IMAGE = {"inception_v3": 299}
PRECISIONS = ["fp32", "tf32", "fp16"]


def build(name: str):
    import torchvision.models as tvm

    if name in ("googlenet", "inception_v3"):
        return getattr(tvm, name)(weights=None, aux_logits=True, init_weights=False)
    return getattr(tvm, name)(weights=None)


class Timer:
    """CUDA events on a GPU, perf_counter on the CPU; elapsed in ms."""

    def __init__(self, cuda: bool):
        import torch

        self.cuda = cuda
        self.torch = torch

    def mark(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def set_precision(precision: str, cuda: bool):
    import contextlib

    import torch

    tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return lambda: torch.autocast("cuda" if cuda else "cpu", dtype=dtype if cuda else torch.bfloat16)
    return contextlib.nullcontext


def loss_of(out, target):
    import torch.nn.functional as F

    outs = [out] if not isinstance(out, (tuple, list)) else [o for o in out if o is not None]
    return sum(F.cross_entropy(o.float(), target) for o in outs)


def step(model, x, y, autocast):
    model.zero_grad(set_to_none=True)
    with autocast():
        out = model(x)
        loss = loss_of(out, y)
    loss.backward()


class LayerEvents:
    """Events at each parameterised layer's forward pre-hook and at the start of its backward."""

    def __init__(self, model, timer: Timer):
        self.timer = timer
        self.marks: list[tuple[str, str, object]] = []
        self.handles = []
        for name, m in model.named_modules():
            if next(m.parameters(recurse=False), None) is None:
                continue
            self.handles.append(m.register_forward_pre_hook(self._pre(name)))
            self.handles.append(m.register_forward_hook(self._post(name)))

    def _pre(self, name):
        def hook(_m, _a):
            self.marks.append((name, "fwd", self.timer.mark()))
        return hook

    def _post(self, name):
        def hook(_m, _a, out):
            node = _grad_fn(out)
            if node is not None:
                node.register_prehook(lambda _g: self.marks.append((name, "bwd", self.timer.mark())))
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def _grad_fn(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out.grad_fn
    if isinstance(out, (tuple, list)):
        for o in out:
            n = _grad_fn(o)
            if n is not None:
                return n
    return None


def hooked_step(model, x, y, autocast, ev: LayerEvents):
    t = ev.timer
    ev.marks = []
    model.zero_grad(set_to_none=True)
    with autocast():
        out = model(x)
        ev.marks.append(("(loss)", "fwd", t.mark()))
        loss = loss_of(out, y)
    ev.marks.append(("(loss)", "bwd", t.mark()))
    loss.backward()
    ev.marks.append(("(end)", "end", t.mark()))
    t.sync()
    spans: dict[tuple[str, str], float] = {}
    for (name, phase, a), (_n, _p, b) in zip(ev.marks, ev.marks[1:]):
        spans[(name, phase)] = spans.get((name, phase), 0.0) + t.ms(a, b)
    return spans, t.ms(ev.marks[0][2], ev.marks[-1][2])


def timed(fn, timer: Timer, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    timer.sync()
    out = []
    for _ in range(repeats):
        a = timer.mark()
        fn()
        b = timer.mark()
        timer.sync()
        out.append(timer.ms(a, b))
    return out


CONV_SHAPES = [("3x3_64_56", 64, 64, 3, 56), ("3x3_256_14", 256, 256, 3, 14), ("1x1_256_56", 256, 64, 1, 56),
               ("1x1_1024_14", 1024, 256, 1, 14)]


def microbench(cuda: bool, quick: bool) -> dict:
    """The device constants of ddlsim's roofline (ddlsim.workload.devices.MICROBENCH): large GEMM and typical
    convolutions per precision (TFLOP/s), a large copy (GB/s, read + write), and the host time of one eager call
    of a tiny convolution / BatchNorm / ReLU, forward and forward+backward (us)."""
    import torch

    dev = "cuda" if cuda else "cpu"
    timer = Timer(cuda)
    small = quick or not cuda
    n = 512 if small else 8192
    reps = 3 if small else 20
    res = {"gemm_n": n}
    for precision in PRECISIONS + ["bf16"]:
        set_precision(precision, cuda)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32) if cuda else torch.float32
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        ms = statistics.median(timed(lambda: torch.mm(a, b), timer, 3, reps))
        res[f"gemm_{precision}_tflops"] = 2 * n ** 3 / (ms / 1e3) / 1e12
    batch = 2 if small else 128
    for precision in PRECISIONS:
        set_precision(precision, cuda)
        dtype = torch.float16 if (precision == "fp16" and cuda) else torch.float32
        fwd, bwd = [], []
        for name, c_in, c_out, k, hw in CONV_SHAPES:
            x = torch.randn(batch, c_in, hw, hw, device=dev, dtype=dtype, requires_grad=True)
            conv = torch.nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=False).to(dev).to(dtype)
            flops = 2 * batch * c_in * c_out * k * k * hw * hw
            grad = torch.randn_like(conv(x))
            with torch.no_grad():
                f_ms = statistics.median(timed(lambda: conv(x), timer, 3, reps))
            fb_ms = statistics.median(timed(lambda: torch.autograd.grad(conv(x), (x, conv.weight), grad), timer, 3, reps))
            res[f"conv{name}_{precision}_fwd_tflops"] = flops / f_ms / 1e9
            res[f"conv{name}_{precision}_bwd_tflops"] = 2 * flops / max(fb_ms - f_ms, 1e-9) / 1e9
            fwd.append(res[f"conv{name}_{precision}_fwd_tflops"])
            bwd.append(res[f"conv{name}_{precision}_bwd_tflops"])
        res[f"conv_fwd_{precision}_tflops_median"] = statistics.median(fwd)
        res[f"conv_bwd_{precision}_tflops_median"] = statistics.median(bwd)
    set_precision("fp32", cuda)
    elems = (1 << 20) if small else (1 << 28)  # 1 GiB of fp32
    src = torch.empty(elems, device=dev)
    dst = torch.empty(elems, device=dev)
    ms = statistics.median(timed(lambda: dst.copy_(src), timer, 3, reps))
    res["copy_gbps"] = 2 * elems * 4 / (ms / 1e3) / 1e9  # read + write
    tiny = torch.zeros(1, device=dev)
    count = 200 if quick else 5000

    def many():
        for _ in range(count):
            tiny.add_(1.0)

    res["host_add_us"] = statistics.median(timed(many, timer, 1, 5)) * 1e3 / count
    x = torch.randn(1, 8, 8, 8, device=dev, requires_grad=True)
    modules = {"conv": torch.nn.Conv2d(8, 8, 3, padding=1).to(dev), "bn": torch.nn.BatchNorm2d(8).to(dev),
               "relu": torch.relu}
    calls = 50 if quick else 300
    for name, m in modules.items():
        def fwd_only(m=m):
            with torch.no_grad():
                for _ in range(calls):
                    m(x)

        def fwd_bwd(m=m):
            y = x
            for _ in range(calls):
                y = m(y)
            y.sum().backward()

        res[f"host_{name}_fwd_us"] = statistics.median(timed(fwd_only, timer, 1, 5)) * 1e3 / calls
        res[f"host_{name}_fwdbwd_us"] = statistics.median(timed(fwd_bwd, timer, 1, 5)) * 1e3 / calls
    return res


def predict(name: str, batch: int, precision: str, device: str) -> dict:
    from ddlsim.workload import roofline
    from ddlsim.workload.devices import find_device
    from ddlsim.workload.zoo import load_model

    model = load_model(name)
    dev = find_device(device)
    per_layer = roofline.layer_times_s(model, dev, precision, batch)
    flops = (model.fwd_flops + model.bwd_flops) * batch
    return {"roofline_ms": sum(f + b for f, b in per_layer) * 1e3,
            "flat_efficiency_ms": flops / (dev.peak_flops("fp32" if precision == "tf32" else precision) * 0.5) * 1e3,
            "layers": {layer.name: (f * 1e3, b * 1e3) for layer, (f, b) in zip(model.layers, per_layer)}}


def measure_case(name, batch, precision, args, cuda) -> dict:
    import torch

    dev = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    model = build(name).to(dev).train()
    image = IMAGE.get(name, 224) if not args.quick else (75 if name == "inception_v3" else 64)
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    autocast = set_precision(precision, cuda)
    timer = Timer(cuda)
    whole = timed(lambda: step(model, x, y, autocast), timer, args.warmup, args.repeats)
    ev = LayerEvents(model, timer)
    runs = []
    for i in range(args.warmup + args.layer_repeats):
        spans, total = hooked_step(model, x, y, autocast, ev)
        if i >= args.warmup:
            runs.append((spans, total))
    ev.remove()
    keys = runs[0][0].keys()
    layers = {k: statistics.median(r[0].get(k, 0.0) for r in runs) for k in keys}
    del model, x, y, ev
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {"measured_ms": statistics.median(whole), "measured_min_ms": min(whole), "measured_max_ms": max(whole),
            "hooked_ms": statistics.median(r[1] for r in runs), "image": image, "layers_ms": layers}


def ddp_check(out: Path, cuda: bool, quick: bool) -> dict:
    """A 1-rank DDP capture through ddlsim (NCCL + CUDA timings on a GPU, gloo on the CPU)."""
    code = ("import json,sys; from pathlib import Path; from ddlsim.capture.ddp_run import run_ddp_capture; "
            "log, failure = run_ddp_capture(json.loads(sys.argv[1]), 1, Path(sys.argv[2]), timeout_s=240); "
            "import numpy as np; k = log.column('kind'); op = log.column('op'); d = log.column('end_ns') - log.column('start_ns'); "
            "c = (k == 'compute'); from ddlsim.workload.profile import layer_times_from_log; "
            "prof = layer_times_from_log(Path(sys.argv[2]) / 'events.parquet'); print(json.dumps({'failure': str(failure) if failure else None, 'rows': int(len(k)), "
            "'compute_rows': int(c.sum()), 'collective_rows': int((k == 'collective').sum()), "
            "'forward_ms_per_iter': float(d[c & (op == 'forward')].sum()) / 1e6 / 5, "
            "'backward_ms_per_iter': float(d[c & (op == 'backward')].sum()) / 1e6 / 5, "
            "'profile_layers': len(prof), 'profile_fwd_bwd_ms': sum(f + b for f, b in prof.values()) * 1e3, "
            "'job': json.loads((Path(sys.argv[2]) / '0.ddp.json').read_text())['job']}))")
    config = {"model": "resnet18", "iterations": 5, "batch_size": 32, "image_size": 64 if quick else 224,
              "device": "cuda" if cuda else "cpu"}
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(config), str(out / "ddp_capture")],
                              capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return {"config": config, "ok": False, "error": "timed out after 300 s"}
    result = {"config": config, "ok": proc.returncode == 0, "returncode": proc.returncode,
              "stderr_tail": proc.stderr[-2000:]}
    if proc.returncode == 0 and proc.stdout.strip():
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return result


def report(run_dir: Path) -> str:
    """A markdown table of a finished run (its summary.csv): measured against predicted, per case."""
    with (run_dir / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    lines = ["| model | batch | precision | measured ms | with hooks ms | roofline ms | error | flat-efficiency ms |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    errors = []
    for r in rows:
        err = float(r["roofline_ms"]) / float(r["measured_ms"]) - 1
        errors.append(abs(err))
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {float(r['measured_ms']):.2f} | "
                     f"{float(r['hooked_ms']):.2f} | {float(r['roofline_ms']):.2f} | {err * 100:+.1f} % | "
                     f"{float(r['flat_efficiency_ms']):.2f} |")
    if errors:
        within = sum(e <= 0.15 for e in errors)
        lines.append(f"\n{within} of {len(errors)} cases within 15 %; median |error| "
                     f"{statistics.median(errors) * 100:.1f} %, largest {max(errors) * 100:.1f} %.")
    return "\n".join(lines)


def rescore(run_dir: Path, device: str = "H100") -> str:
    """A markdown table of a finished run (its summary.csv) against ddlsim's prediction as it is now (the run's
    own prediction beside it; the model's host and GPU totals after it): the way to test a changed model blind
    against a run made before the change."""
    with (run_dir if run_dir.is_file() else run_dir / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    from ddlsim.workload import roofline
    from ddlsim.workload.zoo import load_model

    lines = ["| model | batch | precision | measured ms | run's roofline ms | error | roofline now ms | error | "
             "host ms | GPU ms |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    before, after = [], []
    for r in rows:
        measured = float(r["measured_ms"])
        now = predict(r["model"], int(r["batch"]), r["precision"], device)["roofline_ms"]
        e0, e1 = float(r["roofline_ms"]) / measured - 1, now / measured - 1
        before.append(abs(e0))
        after.append(abs(e1))
        host, gpu, _ = roofline.step_totals_s(load_model(r["model"]), device, r["precision"], int(r["batch"]))
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {measured:.2f} | {float(r['roofline_ms']):.2f} | "
                     f"{e0 * 100:+.1f} % | {now:.2f} | {e1 * 100:+.1f} % | {host * 1e3:.2f} | {gpu * 1e3:.2f} |")
    if rows:
        for label, errs in (("the run's roofline", before), ("the roofline now", after)):
            lines.append(f"\n{label}: {sum(e <= 0.15 for e in errs)} of {len(errs)} cases within 15 %; median |error| "
                         f"{statistics.median(errs) * 100:.1f} %, largest {max(errs) * 100:.1f} %.")
        lines += ["", "| model | within 15 % (run's) | median abs error (run's) | within 15 % (now) | "
                  "median abs error (now) |", "| --- | ---: | ---: | ---: | ---: |"]
        for model in dict.fromkeys(r["model"] for r in rows):
            idx = [i for i, r in enumerate(rows) if r["model"] == model]
            b, a = [before[i] for i in idx], [after[i] for i in idx]
            lines.append(f"| {model} | {sum(e <= 0.15 for e in b)} of {len(b)} | {statistics.median(b) * 100:.1f} % | "
                         f"{sum(e <= 0.15 for e in a)} of {len(a)} | {statistics.median(a) * 100:.1f} % |")
    return "\n".join(lines)


def parse_case(text: str) -> tuple[str, int, str]:
    """"MODEL:BATCH:PRECISION" -> (model, batch, precision); ValueError naming what is wrong."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--cases {text}: not MODEL:BATCH:PRECISION (e.g. alexnet:32:tf32)")
    model, batch, precision = parts
    if model not in MODELS:
        raise ValueError(f"--cases {text}: unknown model {model!r}; known: {', '.join(MODELS)}")
    if not batch.isdigit() or int(batch) < 1:
        raise ValueError(f"--cases {text}: batch {batch!r} is not a positive whole number")
    if precision not in PRECISIONS:
        raise ValueError(f"--cases {text}: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    return model, int(batch), precision


def graph_case(name, batch, precision, args) -> dict:
    """One case's step as PyTorch eager runs it (no hooks; median of args.repeats after args.warmup) and the same
    step captured once as a CUDA graph and replayed (median of as many replays): forward, loss and backward with the
    gradients set to None before the capture, as PyTorch's whole-network capture does (warm-up iterations on a side
    stream first; autocast without its weight-cast cache, which a capture cannot keep). The replay issues no host
    work, so its time is the step's GPU time alone."""
    import contextlib

    import torch

    torch.manual_seed(0)
    model = build(name).cuda().train()
    image = IMAGE.get(name, 224)
    x = torch.randn(batch, 3, image, image, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    autocast = set_precision(precision, True)
    timer = Timer(True)
    eager = timed(lambda: step(model, x, y, autocast), timer, args.warmup, args.repeats)
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        graph_ctx = lambda: torch.autocast("cuda", dtype=dtype, cache_enabled=False)  # noqa: E731
    else:
        graph_ctx = contextlib.nullcontext
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(model, x, y, graph_ctx)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with graph_ctx():
            loss = loss_of(model(x), y)
        loss.backward()
    replay = timed(graph.replay, timer, args.warmup, args.repeats)
    del graph, loss, model, x, y
    torch.cuda.empty_cache()
    return {"model": name, "batch": batch, "precision": precision, "image": image,
            "measured_ms": round(statistics.median(eager), 4), "graph_ms": round(statistics.median(replay), 4),
            "graph_min_ms": round(min(replay), 4), "graph_max_ms": round(max(replay), 4)}


def graph_report(run: Path, device: str = "H100") -> str:
    """A markdown table of a --graph-only run (its graph.csv): per case the eager step, the CUDA-graph replay (the
    GPU's time alone) and what is left for the host, beside the model's host, GPU and step totals."""
    with (run if run.is_file() else run / "graph.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    from ddlsim.workload import roofline
    from ddlsim.workload.zoo import load_model

    lines = ["| model | batch | precision | eager ms | GPU alone (graph) ms | eager - graph ms | model host ms | "
             "model GPU ms | model step ms | model GPU error |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if not r.get("graph_ms"):
            lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | failed: {r.get('error', '')[:80]} "
                         "| | | | | | |")
            continue
        eager, graph = float(r["measured_ms"]), float(r["graph_ms"])
        host, gpu, total = roofline.step_totals_s(load_model(r["model"]), device, r["precision"], int(r["batch"]))
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {eager:.2f} | {graph:.2f} | "
                     f"{eager - graph:.2f} | {host * 1e3:.2f} | {gpu * 1e3:.2f} | {total * 1e3:.2f} | "
                     f"{(gpu * 1e3 / graph - 1) * 100:+.1f} % |")
    return "\n".join(lines)


def graph_only(cases, args) -> int:
    """--graph-only: graph_case per case (a case that fails is recorded with its error; the others still run),
    OUT/graph.csv and OUT/graph.json."""
    import torch

    t0 = time.monotonic()
    rows, doc = [], {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": []}
    cols = ["model", "batch", "precision", "image", "measured_ms", "graph_ms", "graph_min_ms", "graph_max_ms", "error"]
    for name, batch, precision in cases:
        if time.monotonic() - t0 > args.budget_s:
            rows.append({"model": name, "batch": batch, "precision": precision, "error": "budget"})
            continue
        try:
            row = graph_case(name, batch, precision, args)
        except Exception as exc:  # noqa: BLE001 -- a capture that fails is recorded, the other cases still run
            row = {"model": name, "batch": batch, "precision": precision, "error": f"{type(exc).__name__}: {exc}"[:200]}
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 -- the next case will tell
                pass
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)  # written after every case: a timeout keeps what is done
        with (args.out / "graph.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
    doc["cases"] = rows
    doc["elapsed_s"] = time.monotonic() - t0
    (args.out / "graph.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    return 0


def write_csvs(out: Path, summary: list, layer_rows: list) -> None:
    for fname, rows in (("summary.csv", summary), ("layers.csv", layer_rows)):
        with (out / fname).open("w", newline="") as fh:
            if rows:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)


def _one_line_error(option: str, target: str, exc: Exception) -> int:
    why = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, KeyError) and not why.startswith("unknown device"):
        why = f"no {why!r} column: not a {'graph' if option == '--graph-report' else 'summary'}.csv of this benchmark"
    print(f"error: {option} {target}: {why}; give a finished run's directory (or its CSV) and a known "
          "--predict-device", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="directory for the JSON and CSV files (created)")
    ap.add_argument("--report", type=Path, default=None, metavar="RUN",
                    help="measure nothing: a markdown table of a finished run (its directory or summary.csv)")
    ap.add_argument("--rescore", type=Path, default=None, metavar="RUN",
                    help="measure nothing: a finished run's summary.csv against the model as it is now")
    ap.add_argument("--graph-report", type=Path, default=None, metavar="RUN",
                    help="measure nothing: a --graph-only run's graph.csv beside the model's host and GPU totals")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true", help="one small model, small images, few repeats (a smoke test)")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--batches", nargs="*", type=int, default=None)
    ap.add_argument("--precisions", nargs="*", default=None, choices=PRECISIONS)
    ap.add_argument("--cases", nargs="+", default=None, metavar="MODEL:BATCH:PRECISION",
                    help="measure just these cases instead of --models x --batches x --precisions")
    ap.add_argument("--graph-only", action="store_true",
                    help="per case (--cases) the eager step and its CUDA-graph replay (the GPU's time alone); GPU only")
    ap.add_argument("--predict-device", default="H100", help="ddlsim device preset for the prediction (default H100)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--layer-repeats", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=270.0, help="stop starting new cases after this many seconds")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--skip-microbench", action="store_true")
    ap.add_argument("--microbench-only", action="store_true", help="only the device microbenchmarks")
    args = ap.parse_args(argv)
    for option, target, fn in (("--report", args.report, lambda t: report(t)),
                               ("--rescore", args.rescore, lambda t: rescore(t, args.predict_device)),
                               ("--graph-report", args.graph_report, lambda t: graph_report(t, args.predict_device))):
        if target is None:
            continue
        try:
            print(fn(Path(target)))
        except (OSError, KeyError, ValueError) as exc:  # no such run, a CSV without the columns, an unknown device
            return _one_line_error(option, str(target), exc)
        return 0
    if args.out is None:
        print("error: --out DIR is needed to measure (or give --report, --rescore or --graph-report RUN)",
              file=sys.stderr)
        return 2
    try:
        cases = [parse_case(c) for c in args.cases] if args.cases else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.graph_only and (not cases or args.device != "cuda"):
        print("error: --graph-only needs --cases and a GPU (--device cuda)", file=sys.stderr)
        return 2

    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no GPU; run with --device cpu --quick for a smoke test", file=sys.stderr)
        return 2
    models = args.models or (["resnet18"] if args.quick else MODELS)
    batches = args.batches or ([2] if args.quick else [32, 128])
    precisions = args.precisions or (["fp32", "fp16"] if args.quick and not cuda else PRECISIONS)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    args.repeats = args.repeats if args.repeats is not None else (2 if args.quick else 10)
    args.layer_repeats = args.layer_repeats if args.layer_repeats is not None else (1 if args.quick else 3)
    if cuda:
        torch.backends.cudnn.benchmark = False  # PyTorch's default, recorded below
    if args.graph_only:
        return graph_only(cases, args)
    if cases is None:
        cases = [(m, b, p) for m in models for b in batches for p in precisions]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    doc = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
           "cudnn": torch.backends.cudnn.version() if cuda else None, "cudnn_benchmark": torch.backends.cudnn.benchmark,
           "predict_device": args.predict_device, "quick": args.quick, "cases": [], "skipped": []}
    if not args.skip_microbench:
        doc["microbench"] = microbench(cuda, args.quick)
        print("microbench:", json.dumps({k: round(v, 3) for k, v in doc["microbench"].items()}), flush=True)
    if args.microbench_only:
        models = []
        args.skip_ddp = True
    print(f"{'model':<13}{'batch':>6} {'prec':<5}{'measured ms':>12}{'hooked ms':>10}{'roofline ms':>12}{'ratio':>7}"
          f"{'flat-eff ms':>12}", flush=True)
    summary, layer_rows = [], []
    for name, batch, precision in ([] if args.microbench_only else cases):
        if time.monotonic() - t0 > args.budget_s:
            doc["skipped"].append([name, batch, precision])
            continue
        try:
            m = measure_case(name, batch, precision, args, cuda)
        except RuntimeError as exc:  # e.g. out of memory: record and go on
            doc["skipped"].append([name, batch, precision, str(exc)[:200]])
            if cuda:
                torch.cuda.empty_cache()
            continue
        p = predict(name, batch, precision, args.predict_device)
        ratio = p["roofline_ms"] / m["measured_ms"]
        row = {"model": name, "batch": batch, "precision": precision, "image": m["image"],
               "measured_ms": round(m["measured_ms"], 4), "hooked_ms": round(m["hooked_ms"], 4),
               "roofline_ms": round(p["roofline_ms"], 4), "ratio": round(ratio, 4),
               "flat_efficiency_ms": round(p["flat_efficiency_ms"], 4)}
        summary.append(row)
        doc["cases"].append({**row, "measured_min_ms": m["measured_min_ms"], "measured_max_ms": m["measured_max_ms"],
                             "layers_measured_ms": {f"{k[0]}|{k[1]}": v for k, v in m["layers_ms"].items()},
                             "layers_predicted_ms": p["layers"]})
        for layer, (f, b) in p["layers"].items():
            layer_rows.append({"model": name, "batch": batch, "precision": precision, "layer": layer,
                               "measured_fwd_ms": round(m["layers_ms"].get((layer, "fwd"), 0.0), 5),
                               "measured_bwd_ms": round(m["layers_ms"].get((layer, "bwd"), 0.0), 5),
                               "predicted_fwd_ms": round(f, 5), "predicted_bwd_ms": round(b, 5)})
        print(f"{name:<13}{batch:>6} {precision:<5}{m['measured_ms']:>12.3f}{m['hooked_ms']:>10.3f}"
              f"{p['roofline_ms']:>12.3f}{ratio:>7.2f}{p['flat_efficiency_ms']:>12.3f}", flush=True)
        write_csvs(args.out, summary, layer_rows)  # after every case: a timeout keeps what is done
    if not args.skip_ddp:
        doc["ddp"] = ddp_check(args.out, cuda, args.quick)
        print("ddp capture:", json.dumps({k: v for k, v in doc["ddp"].items() if k != "stderr_tail"}), flush=True)
        if not doc["ddp"]["ok"]:
            print(doc["ddp"].get("stderr_tail", ""), file=sys.stderr)
    doc["elapsed_s"] = time.monotonic() - t0
    (args.out / "gpu_layer_times.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    write_csvs(args.out, summary, layer_rows)
    print(f"wrote {args.out}/gpu_layer_times.json, summary.csv, layers.csv in {doc['elapsed_s']:.0f} s; "
          f"skipped {len(doc['skipped'])} case(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
