#!/usr/bin/env python3
"""Generate the ddlsim model zoo from the real PyTorch model definitions.

For every model in ``MODELS`` this script writes one JSON file,
``python/ddlsim/data/models/<name>.json``, describing the model's parameter
tensors grouped into layers (in forward execution order) together with the
forward and backward FLOPs of each layer for ONE training sample.

Usage (torch/torchvision/transformers live in a virtualenv outside the repo;
ddlsim itself never needs torch at runtime)::

    python3 -m venv /work/zoo-venv
    /work/zoo-venv/bin/pip install torch torchvision transformers
    /work/zoo-venv/bin/python tools/gen_model_zoo.py            # all models
    /work/zoo-venv/bin/python tools/gen_model_zoo.py resnet50   # just some

Everything runs offline: models are built with ``weights=None`` directly on the
``meta`` device (shapes only, no storage, no downloads), so even BERT-base and
VGG-16 are generated in a few seconds.

How the numbers are obtained
----------------------------
* Layers are the modules that directly own parameters (Conv2d, Linear,
  BatchNorm2d, LayerNorm, Embedding, ...). Their order is the order in which
  their forward pre-hooks fire in train mode (so auxiliary heads of
  Inception-v3 / GoogLeNet are included). A module executed several times
  keeps its first position and accumulates its FLOPs.
* FLOPs come from ``torch.utils.flop_counter``: the ops are intercepted by a
  ``TorchDispatchMode`` that applies ``flop_registry`` (the same formulas
  ``FlopCounterMode`` uses; matmul/conv/attention-like ops only) and sits
  directly beneath a ``FlopCounterMode`` so both see the very same ops.
  The model runs one training step (forward, ``sum`` of all outputs as the
  loss, backward) on a batch of 2, and counts are divided by 2.
* Forward ops are attributed to the most recently entered parameterised
  layer (so param-less ops such as attention matmuls go to the nearest
  preceding layer). Backward ops are attributed with saved-tensor hooks: every
  tensor autograd saves during the forward is tagged with the layer that was
  current then, and unpacking it in the backward (which an autograd node does
  right before it computes its gradients) makes that layer current again. So
  the backward of an op is charged to the same layer as its forward.
* Per-layer sums are checked against the ``FlopCounterMode`` global totals.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "python" / "ddlsim" / "data" / "models"
GENERATOR = "tools/gen_model_zoo.py"
BATCH = 2          # measured batch; FLOPs are reported per sample
DTYPE_BYTES = 4    # fp32
META = torch.device("meta")


# --------------------------------------------------------------------------
# Model definitions
# --------------------------------------------------------------------------
def _lenet5() -> nn.Module:
    """Classic LeNet-5 (LeCun et al. 1998) on 1x32x32 inputs, 61,706 params: the one the captures train."""
    sys.path.insert(0, str(REPO_ROOT / "python"))
    from ddlsim.capture.lenet import LeNet5

    return LeNet5()


def _torchvision(fn_name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision.models

        return getattr(torchvision.models, fn_name)(weights=None, **kwargs)

    return build


def _bert_base() -> nn.Module:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig())  # bert-base-uncased geometry, with pooler


def _image_input(shape: list[int]) -> Callable[[], dict]:
    return lambda: {"x": torch.zeros(BATCH, *shape, device=META)}


def _token_input(shape: list[int]) -> Callable[[], dict]:
    return lambda: {"input_ids": torch.zeros(BATCH, *shape, dtype=torch.long, device=META)}


@dataclass
class ModelSpec:
    name: str
    display_name: str
    source: str
    input_shape: list[int]
    build: Callable[[], nn.Module]
    make_input: Callable[[], dict] | None = None  # kwargs of forward(); default: image
    expected: dict = field(default_factory=dict)  # "parameters", "tensors"

    def __post_init__(self) -> None:
        if self.make_input is None:
            self.make_input = _image_input(self.input_shape)


TV = "torchvision.models."
MODELS = [
    ModelSpec("lenet5", "LeNet-5", "python/ddlsim/capture/lenet.py:LeNet5", [1, 32, 32], _lenet5,
              expected={"parameters": 61_706}),
    ModelSpec("alexnet", "AlexNet", TV + "alexnet(weights=None)", [3, 224, 224],
              _torchvision("alexnet"), expected={"parameters": 61_100_840}),
    ModelSpec("vgg16", "VGG-16", TV + "vgg16(weights=None)", [3, 224, 224],
              _torchvision("vgg16"), expected={"parameters": 138_357_544}),
    ModelSpec("resnet18", "ResNet-18", TV + "resnet18(weights=None)", [3, 224, 224],
              _torchvision("resnet18"),
              expected={"parameters": 11_689_512, "tensors": 62}),
    ModelSpec("resnet50", "ResNet-50", TV + "resnet50(weights=None)", [3, 224, 224],
              _torchvision("resnet50"),
              expected={"parameters": 25_557_032, "tensors": 161}),
    ModelSpec("resnet101", "ResNet-101", TV + "resnet101(weights=None)", [3, 224, 224],
              _torchvision("resnet101"), expected={"parameters": 44_549_160}),
    ModelSpec("resnet152", "ResNet-152", TV + "resnet152(weights=None)", [3, 224, 224],
              _torchvision("resnet152"), expected={"parameters": 60_192_808}),
    ModelSpec("inception_v3", "Inception-v3",
              TV + "inception_v3(weights=None, aux_logits=True, init_weights=False)",
              [3, 299, 299],
              _torchvision("inception_v3", aux_logits=True, init_weights=False),
              expected={"parameters": 27_161_264}),
    ModelSpec("googlenet", "GoogLeNet",
              TV + "googlenet(weights=None, aux_logits=True, init_weights=False)",
              [3, 224, 224],
              _torchvision("googlenet", aux_logits=True, init_weights=False),
              expected={"parameters": 13_004_888}),
    ModelSpec("bert_base", "BERT-base",
              "transformers.BertModel(transformers.BertConfig())", [128], _bert_base,
              make_input=_token_input([128]), expected={"parameters": 109_482_240}),
]


# --------------------------------------------------------------------------
# Layer discovery and FLOP attribution
# --------------------------------------------------------------------------
def param_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Modules that directly own parameters, keyed by qualified name."""
    return {name: mod for name, mod in model.named_modules()
            if next(mod.parameters(recurse=False), None) is not None}


class LayerFlopMode(TorchDispatchMode):
    """Adds the ``flop_registry`` FLOPs of every op to the current layer.

    ``fwd_layer`` is set by forward pre-hooks, ``bwd_layer`` by the unpacking
    of saved tensors during the backward; ``phase`` selects which one is used.
    """

    def __init__(self) -> None:
        super().__init__()
        self.phase = "fwd"
        self.fwd_layer: str | None = None
        self.bwd_layer: str | None = None
        self.flops: dict[str | None, dict[str, int]] = defaultdict(
            lambda: {"fwd": 0, "bwd": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            layer = self.fwd_layer if self.phase == "fwd" else self.bwd_layer
            self.flops[layer][self.phase] += formula(*args, **kwargs, out_val=out)
        return out

    # saved-tensor hooks: remember the forward layer, restore it in backward
    def pack(self, tensor: torch.Tensor):
        return self.fwd_layer, tensor

    def unpack(self, packed):
        self.bwd_layer, tensor = packed
        return tensor


def output_tensors(out) -> list[torch.Tensor]:
    """All tensors in a model output (tensor, (named)tuple, dict/ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # transformers ModelOutput is an OrderedDict
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out if item is not None for t in output_tensors(item)]
    return []


def profile(model: nn.Module, inputs: dict) -> tuple[list[str], dict, dict]:
    """Run one training step on the meta device.

    Returns (layer names in first-execution order, per-layer FLOP dict,
    FlopCounterMode global totals) -- all FLOPs for the whole batch.
    """
    layers = param_layers(model)
    mode = LayerFlopMode()
    order: list[str] = []

    def pre_hook_for(name: str):
        def hook(_module, _args):
            if name not in order:
                order.append(name)
            mode.fwd_layer = name
        return hook

    handles = [mod.register_forward_pre_hook(pre_hook_for(name))
               for name, mod in layers.items()]
    model.train()
    try:
        with mode:  # entered first => sits beneath FlopCounterMode's mode
            with FlopCounterMode(display=False) as fwd_counter, \
                    saved_tensors_hooks(mode.pack, mode.unpack):
                outputs = output_tensors(model(**inputs))
                loss = sum(t.sum() for t in outputs if t.is_floating_point())
            mode.phase = "bwd"
            with FlopCounterMode(display=False) as bwd_counter:
                loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    totals = {"fwd": fwd_counter.get_total_flops(), "bwd": bwd_counter.get_total_flops()}
    return order, dict(mode.flops), totals


# --------------------------------------------------------------------------
# Document assembly and checks
# --------------------------------------------------------------------------
def per_sample(flops: int, what: str) -> int:
    if flops % BATCH:
        raise AssertionError(f"{what}: {flops} FLOPs not divisible by batch {BATCH}")
    return flops // BATCH


def build_layers(model: nn.Module, order: list[str], flops: dict) -> list[dict]:
    modules = dict(model.named_modules())
    layers = []
    for name in order:
        module = modules[name]
        counts = flops.get(name, {"fwd": 0, "bwd": 0})
        prefix = f"{name}." if name else ""
        layers.append({
            "name": name,
            "type": type(module).__name__,
            "fwd_flops": per_sample(counts["fwd"], f"{name} fwd"),
            "bwd_flops": per_sample(counts["bwd"], f"{name} bwd"),
            "tensors": [{"name": prefix + pname, "elements": p.numel()}
                        for pname, p in module.named_parameters(recurse=False)],
        })
    return layers


def check(spec: ModelSpec, model: nn.Module, doc: dict, flops: dict, totals: dict) -> None:
    """Consistency checks; raise AssertionError on any mismatch."""
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    tensors = [t for layer in doc["layers"] for t in layer["tensors"]]
    names = [t["name"] for t in tensors]
    missing = set(param_layers(model)) - {layer["name"] for layer in doc["layers"]}

    assert not missing, f"{spec.name}: layers never executed in forward: {sorted(missing)}"
    assert len(names) == len(set(names)), f"{spec.name}: duplicate tensors"
    assert names_match(model, names), f"{spec.name}: tensor names != named_parameters()"
    assert len(tensors) == len(params), f"{spec.name}: {len(tensors)} != {len(params)} tensors"
    assert sum(t["elements"] for t in tensors) == n_params == doc["parameters"]
    for key, value in spec.expected.items():
        got = len(params) if key == "tensors" else n_params
        assert got == value, f"{spec.name}: {key} {got} != expected {value}"

    for phase in ("fwd", "bwd"):
        stray = flops.get(None, {}).get(phase, 0)
        assert stray == 0, f"{spec.name}: {stray} {phase} FLOPs outside any layer"
        layer_sum = sum(layer[f"{phase}_flops"] for layer in doc["layers"]) * BATCH
        assert abs(layer_sum - totals[phase]) <= 0.01 * totals[phase], (
            f"{spec.name}: {phase} layer sum {layer_sum} != FlopCounterMode {totals[phase]}")


def names_match(model: nn.Module, names: list[str]) -> bool:
    return sorted(names) == sorted(name for name, _ in model.named_parameters())


def generate(spec: ModelSpec) -> dict:
    with META:
        model = spec.build()
    order, flops, totals = profile(model, spec.make_input())
    doc = {
        "name": spec.name,
        "display_name": spec.display_name,
        "source": spec.source,
        "generator": GENERATOR,
        "torch_version": torch.__version__,
        "input_shape": spec.input_shape,
        "dtype_bytes": DTYPE_BYTES,
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": build_layers(model, order, flops),
    }
    check(spec, model, doc, flops, totals)
    return doc


def to_json(doc: dict) -> str:
    """Pretty JSON with one line per layer (compact and diff-friendly)."""
    head = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "layers"]
    layers = ",\n".join(f"    {json.dumps(layer)}" for layer in doc["layers"])
    text = "{\n" + ",\n".join(head) + ',\n  "layers": [\n' + layers + "\n  ]\n}\n"
    assert json.loads(text) == doc
    return text


# --------------------------------------------------------------------------
# Reporting and CLI
# --------------------------------------------------------------------------
TABLE_HEADER = ("| model | layers | tensors | params | MB fp32 | GFLOPs fwd | GFLOPs bwd |\n"
                "|---|---:|---:|---:|---:|---:|---:|")


def table_row(doc: dict) -> str:
    layers = doc["layers"]
    fwd = sum(layer["fwd_flops"] for layer in layers) / 1e9
    bwd = sum(layer["bwd_flops"] for layer in layers) / 1e9
    n_tensors = sum(len(layer["tensors"]) for layer in layers)
    mb = doc["parameters"] * doc["dtype_bytes"] / 1e6
    return (f"| {doc['name']} | {len(layers)} | {n_tensors} | {doc['parameters']:,} "
            f"| {mb:.2f} | {fwd:.3f} | {bwd:.3f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR,
                        help=f"output directory (default: {DEFAULT_OUT_DIR})")
    args = parser.parse_args(argv)

    known = {spec.name: spec for spec in MODELS}
    unknown = [name for name in args.models if name not in known]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {sorted(known)}")
    specs = [known[name] for name in args.models] if args.models else MODELS

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in specs:
        doc = generate(spec)
        (args.out / f"{spec.name}.json").write_text(to_json(doc))
        rows.append(table_row(doc))
        print(f"wrote {spec.name}.json", file=sys.stderr)
    print("FLOPs are per sample (training step: forward + backward), 1 GFLOP = 1e9 FLOPs")
    print(TABLE_HEADER)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
