"""Helpers of the roofline tests: benchmarks/conv_shapes.py as a module, and the digest of the zoo's per-layer times
that the tests pinning "no table = the model as before" compare."""

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

from ddlsim.workload import roofline
from ddlsim.workload.zoo import load_model

ROOT = Path(__file__).resolve().parent.parent


def _load_conv_shapes():
    spec = importlib.util.spec_from_file_location("conv_shapes_bench_helpers", ROOT / "benchmarks" / "conv_shapes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["conv_shapes_bench_helpers"] = module
    spec.loader.exec_module(module)
    return module


conv_shapes = _load_conv_shapes()

# the host-dispatch runs that were the H100's and the H200's host tables up to 426b26f (one run each; run 4 pooled them
# with three more), for the digests pinned on trees of that time: a newer stored run changes the presets, not the
# model code these tests guard
HOST_RUNS_BEFORE_RUN4 = {"H100": ROOT / "docs" / "data" / "host-dispatch-h100-run1.json",
                         "H200": ROOT / "docs" / "data" / "host-dispatch-h200-run1.json"}


def pin_host_runs(monkeypatch) -> None:
    """The H100 and H200 presets with the host-dispatch runs of HOST_RUNS_BEFORE_RUN4 instead of the stored tables,
    and the H200 without BatchNorm and pointwise tables of its own (it borrowed the H100's until run 4)."""
    from ddlsim.workload.devices import DEVICES, MICROBENCH, host_microbench

    base = MICROBENCH["H100"]
    for name in ("H100", "H200"):
        doc = json.loads(HOST_RUNS_BEFORE_RUN4[name].read_text())
        monkeypatch.setitem(MICROBENCH, name, host_microbench(base, DEVICES[name], doc, MICROBENCH[name].source))
    for name in ("norm_table", "pointwise_table"):
        own = getattr(roofline, name)
        monkeypatch.setattr(roofline, name, lambda device, data_dir=None, own=own: own(
            "H100" if device == "H200" else device, data_dir))


CNNS = ["alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "inception_v3", "googlenet"]


def zoo_digest() -> str:
    """The roofline's per-layer forward and backward times of every zoo CNN on the H100, H200, B200 and A100 in every
    precision at batch 32 and 128, hashed (the tables and presets as the calling test has monkeypatched them)."""
    rows = []
    for m in CNNS + ["lenet5"]:
        model = load_model(m)
        for dev in ["H100", "H200", "B200", "A100"]:
            for p in ["fp32", "tf32", "fp16", "bf16"]:
                for b in [32, 128]:
                    rows.append([m, dev, p, b, [list(t) for t in roofline.layer_times_s(model, dev, p, b)]])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
