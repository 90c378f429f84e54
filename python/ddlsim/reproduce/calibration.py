"""Per-model compute calibrated once to the network-operator paper's Table 3.

Table 3 gives, per model, the forward-pass compute time and the backprop
compute time *without the first backprop layer* (batch 32, TensorFlow 1.4 on
EC2). ddlsim's zoo gives each layer's forward and backward FLOPs. We keep the
zoo's split of work over layers and fix two factors per model:

    forward time of layer l  = fwd_flops(l) x 32 x fwd_s_per_flop
    backward time of layer l = bwd_flops(l) x 32 x bwd_s_per_flop

    fwd_s_per_flop = T3 forward / (32 x sum of fwd_flops)
    bwd_s_per_flop = T3 backprop / (32 x sum of bwd_flops over all layers but the last one)

(the last layer in forward order is the first one of backprop). The first
backprop layer then costs its own FLOPs at the backward rate; Table 3 does not
give it. The times are handed to ddlsim as a profile CSV (layer, fwd_ms,
bwd_ms), so the zoo's tensors and layer types (which the faster-compute
what-if selects by) stay as they are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..workload.model import Layer, Model
from ..workload.zoo import load_model
from .paper_values import TABLE3

BATCH = 32


@dataclass(frozen=True)
class Calibration:
    model: str
    fwd_s_per_flop: float
    bwd_s_per_flop: float
    fwd_s: float                   # forward total after calibration (= Table 3)
    bwd_without_first_s: float     # backprop without its first layer (= Table 3)
    first_bwd_layer_s: float       # the first backprop layer, at the backward rate
    first_bwd_layer: str

    @property
    def fwd_tflops(self) -> float:
        """Effective TFLOP/s the forward calibration implies."""
        return 1e-12 / self.fwd_s_per_flop

    @property
    def bwd_tflops(self) -> float:
        return 1e-12 / self.bwd_s_per_flop


def calibrate(model_name: str) -> Calibration:
    model = load_model(model_name)
    t3 = TABLE3[model_name]
    *rest, first = model.layers
    fwd_flops = sum(layer.fwd_flops for layer in model.layers) * BATCH
    bwd_flops = sum(layer.bwd_flops for layer in rest) * BATCH
    fwd_rate = t3["fwd_s"] / fwd_flops
    bwd_rate = t3["bwd_s"] / bwd_flops
    return Calibration(model=model_name, fwd_s_per_flop=fwd_rate, bwd_s_per_flop=bwd_rate, fwd_s=t3["fwd_s"],
                       bwd_without_first_s=t3["bwd_s"], first_bwd_layer_s=first.bwd_flops * BATCH * bwd_rate,
                       first_bwd_layer=first.name)


def layer_times_s(layer: Layer, cal: Calibration) -> tuple[float, float]:
    return layer.fwd_flops * BATCH * cal.fwd_s_per_flop, layer.bwd_flops * BATCH * cal.bwd_s_per_flop


def profile_csv(model: Model, cal: Calibration) -> str:
    lines = ["layer,fwd_ms,bwd_ms"]
    for layer in model.layers:
        fwd, bwd = layer_times_s(layer, cal)
        lines.append(f"{layer.name},{fwd * 1e3:.9f},{bwd * 1e3:.9f}")
    return "\n".join(lines) + "\n"


def write_profile(model_name: str, directory: Path) -> str:
    """Writes the calibrated profile of `model_name` into `directory` (atomically, only when it changed);
    returns its file name, relative to `directory`."""
    text = profile_csv(load_model(model_name), calibrate(model_name))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    name = f"{model_name}-table3-{digest}.csv"
    path = directory / name
    if not path.is_file():
        from ..errors import DdlsimError
        from ..safe_io import write_text_file

        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DdlsimError(f"{directory}: cannot write the results cache ({exc.strerror or exc}); "
                              "choose another --cache") from None
        write_text_file(path, text, option="--cache")
    return name


def calibration_table(models) -> "pd.DataFrame":
    import pandas as pd

    rows = []
    for name in models:
        cal = calibrate(name)
        model = load_model(name)
        t3 = TABLE3[name]
        net = model.size_bytes * 8 / 25e9
        rows.append({
            "model": name,
            "paper_fwd_s": t3["fwd_s"], "ddlsim_fwd_s": cal.fwd_s,
            "paper_bwd_without_first_s": t3["bwd_s"], "ddlsim_bwd_without_first_s": cal.bwd_without_first_s,
            "first_bwd_layer": cal.first_bwd_layer, "ddlsim_first_bwd_layer_s": cal.first_bwd_layer_s,
            "fwd_effective_tflops": cal.fwd_tflops, "bwd_effective_tflops": cal.bwd_tflops,
            "paper_net_25g_s": t3["net_25g_s"], "ddlsim_net_25g_s": net,
            "paper_ratio": t3["ratio"], "ddlsim_ratio": cal.bwd_without_first_s / net,
            "ddlsim_model_mb": model.size_bytes / 1e6,
        })
    return pd.DataFrame(rows)
