#!/usr/bin/env python3
"""Count, per layer of every zoo CNN, the calls PyTorch eager makes on the host
in one training step, by call kind (``python/ddlsim/data/kernels/host_calls.json``).

The host side of the roofline compute model (docs/compute-model.md, "Host
dispatch") charges each call the host time that benchmarks/host_dispatch.py
measures for a call of its kind, forward and autograd backward. This tool
counts the calls: it runs the real model definition (torchvision, or
``ResNet(Bottleneck, [3, 24, 36, 3])`` for ResNet-200) for one training step
as benchmarks/gpu_layer_times.py times it -- ``zero_grad``, forward, the sum
of the cross-entropy of every output, backward -- on the CPU at batch 2,
plainly (fp32; TF32 issues the same calls) and under autocast (CPU bfloat16
autocast standing in for CUDA fp16 autocast: the same ops are cast), and
records

- every module call by the module's kind (``conv2d``, ``batchnorm2d``,
  ``relu_module``, ``maxpool2d``, ``adaptive_avgpool2d``, ``dropout``,
  ``linear``); any other module (``Sequential``, ``Bottleneck``, an Inception
  block, the model itself) is a container, ``identity_module``: its call costs
  the module-call overhead and its own operations count on their own;
- every aten operation issued outside those modules (a torchvision block's
  ``F.relu``, ``out += identity``, ``torch.cat``, ``torch.flatten``, the loss):
  ``relu``/``relu_`` -> ``relu_fn``, ``add``/``add_`` -> ``add_inplace``, ``cat``
  -> ``cat``, views and other operations without a kernel -> ``view``, any
  other -> ``op`` (one generic operation); a ``detach`` is autograd saving the
  output of the operation before it, part of that call as the microbenchmark
  times it, and is not counted.

Calls are charged to layers as the kernel tables charge kernels: to the most
recently entered parameterised layer (a container entered before the first
layer goes to the first); layers are listed in the order they first run. The counts do not depend on the batch or the image
size (checked: batch 2 and 4 give the same counts). Also stored: the number of
parameter tensors (``zero_grad`` walks them).

    PYTHONPATH=python python tools/gen_host_calls.py [MODEL ...] [--out FILE]

Needs torch and torchvision; ddlsim reads the JSON at run time without them.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tools"))
import gen_kernel_table as kt  # noqa: E402
import gen_model_zoo as zoo  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "python" / "ddlsim" / "data" / "kernels" / "host_calls.json"
MODULE_KINDS = [(nn.Conv2d, "conv2d"), (nn.BatchNorm2d, "batchnorm2d"), (nn.ReLU, "relu_module"),
                (nn.MaxPool2d, "maxpool2d"), (nn.AdaptiveAvgPool2d, "adaptive_avgpool2d"),
                (nn.AvgPool2d, "adaptive_avgpool2d"), (nn.Dropout, "dropout"), (nn.Linear, "linear")]
KINDS = ["conv2d", "batchnorm2d", "relu_module", "maxpool2d", "adaptive_avgpool2d", "dropout", "linear",
         "identity_module", "relu_fn", "add_inplace", "cat", "view", "op"]
# image sizes for the count (the counts do not depend on them; Inception-v3's auxiliary head needs 299)
IMAGE = {"inception_v3": 299, "lenet5": 32}


def module_kind(module: nn.Module) -> str:
    for cls, kind in MODULE_KINDS:
        if isinstance(module, cls):
            return kind
    return "identity_module"


def op_kind(name: str) -> str | None:
    if name == "detach":  # autograd saving an operation's output: part of that operation's measured call
        return None
    if name in ("relu", "relu_"):
        return "relu_fn"
    if name in ("add", "add_"):
        return "add_inplace"
    if name == "cat":
        return "cat"
    if name in kt._FREE:
        return "view"
    return "op"


class CallCounter(TorchDispatchMode):
    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names  # id(param layer module) -> layer name
        self.layer: str | None = None
        self.leaf_depth = 0
        self.first_layer_pending: Counter = Counter()
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.order: list[str] = []  # parameterised layers in the order they first ran
        self.active = True

    def charge(self, kind: str) -> None:
        if self.layer is None:
            self.first_layer_pending[kind] += 1
        else:
            self.counts[self.layer][kind] += 1

    def pre(self, module, _args):
        if id(module) in self.names:
            self.layer = self.names[id(module)]
            if self.layer not in self.order:
                self.order.append(self.layer)
            if self.first_layer_pending:
                self.counts[self.layer].update(self.first_layer_pending)
                self.first_layer_pending.clear()
        kind = module_kind(module)
        self.charge(kind)
        if kind != "identity_module":
            self.leaf_depth += 1

    def post(self, module, _args, _out):
        if module_kind(module) != "identity_module":
            self.leaf_depth -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        kind = op_kind(func._overloadpacket.__name__)
        if self.active and self.leaf_depth == 0 and kind is not None:
            self.charge(kind)
        return out


def count(name: str, batch: int, autocast: bool) -> tuple[list[str], dict, int]:
    spec = kt._spec(name)
    torch.manual_seed(0)
    model = spec.build().train()
    layers = zoo.param_layers(model)
    counter = CallCounter({id(m): n for n, m in layers.items()})
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(counter.pre))
        handles.append(module.register_forward_hook(counter.post))
    size = IMAGE.get(name, 64)
    x = torch.randn(batch, *spec.input_shape[:-2], size, size)
    target = torch.zeros(batch, dtype=torch.long)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    try:
        with counter:
            counter.active = False  # zero_grad is costed per parameter, not per operation
            model.zero_grad(set_to_none=True)
            counter.active = True
            with ctx:
                outs = zoo.output_tensors(model(x))
                loss = sum(F.cross_entropy(o.float(), target) for o in outs if o.is_floating_point())
            counter.active = False  # backward: costed per forward call (benchmarks/host_dispatch.py)
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    assert not counter.first_layer_pending, name
    params = sum(1 for _ in model.parameters())
    order = counter.order
    assert sorted(order) == sorted(layers), f"{name}: layers that never ran"
    return order, {layer: dict(sorted(counter.counts[layer].items())) for layer in order}, params


def generate(name: str) -> dict:
    entry = {}
    for mode, autocast in (("fp32", False), ("autocast", True)):
        order, counts, params = count(name, 2, autocast)
        order4, counts4, _ = count(name, 4, autocast)
        assert (order, counts) == (order4, counts4), f"{name} {mode}: counts depend on the batch"
        entry[mode] = counts
    entry["parameter_tensors"] = params
    entry["layers"] = order
    return entry


def to_json(doc: dict) -> str:
    lines = ["{"]
    head = [k for k in doc if k != "models"]
    for k in head:
        lines.append(f"  {json.dumps(k)}: {json.dumps(doc[k])},")
    lines.append('  "models": {')
    models = []
    for name, entry in doc["models"].items():
        rows = [f'    {json.dumps(name)}: {{"parameter_tensors": {entry["parameter_tensors"]}, "layers": {{']
        rows.append(",\n".join(f"      {json.dumps(layer)}: {json.dumps({m: entry[m][layer] for m in ('fp32', 'autocast')}, separators=(',', ':'))}"
                               for layer in entry["layers"]))
        rows.append("    }}")
        models.append("\n".join(rows))
    lines.append(",\n".join(models))
    lines.append("  }")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"default: {' '.join(kt.CNNS)}")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    doc = {"generator": "tools/gen_host_calls.py", "torch_version": torch.__version__,
           "kinds": KINDS,
           "note": "per layer: calls by kind in one training step (forward + loss), plain (fp32, tf32) and under "
                   "autocast (fp16, bf16); the backward is costed per forward call",
           "models": {}}
    for name in args.models or kt.CNNS:
        doc["models"][name] = generate(name)
        total = sum(sum(c.values()) for c in doc["models"][name]["fp32"].values())
        print(f"{name}: {len(doc['models'][name]['layers'])} layers, {total} calls (fp32)", file=sys.stderr)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(to_json(doc))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
