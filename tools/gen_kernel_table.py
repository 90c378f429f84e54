#!/usr/bin/env python3
"""Write the per-layer kernel tables of the roofline compute model
(``python/ddlsim/data/kernels/<model>.json``) from the real model definitions.

For every zoo CNN the script runs one training step (forward, ``sum`` of the
outputs, backward) on the ``meta`` device (shapes only, offline, seconds) and
records every aten op that launches work: its FLOPs (``torch.utils.flop_counter``
formulas) and the elements it reads and writes. Each op is charged to a zoo
layer the way tools/gen_model_zoo.py charges FLOPs: forward ops to the most
recently entered parameterised layer (so a ReLU, a pooling or a residual add
goes to the layer before it), backward ops to the layer whose saved tensors
the autograd node unpacked last. The step runs at batch 2 and at batch 4; every
count is linear in the batch, so each is stored as ``const + per_sample * B``.

    /work/zoo-venv/bin/python tools/gen_kernel_table.py [MODEL ...] [--out DIR]

ddlsim never needs torch at run time: it reads the JSON files
(``ddlsim.workload.roofline``).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tools"))
import gen_model_zoo as zoo  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "python" / "ddlsim" / "data" / "kernels"
META = torch.device("meta")
# ops that launch no kernel (views, metadata, allocation without a fill)
_FREE = {"detach", "alias", "view", "_unsafe_view", "t", "transpose", "permute", "expand", "reshape", "squeeze",
         "unsqueeze", "flatten", "as_strided", "empty", "empty_like", "empty_strided", "new_empty", "lift_fresh",
         "_reshape_alias", "slice", "select", "split", "split_with_sizes", "unbind", "chunk", "narrow", "_to_copy_free"}
CNNS = ["lenet5", "alexnet", "vgg16", "resnet18", "resnet50", "resnet101", "resnet152", "resnet200", "inception_v3",
        "googlenet"]


def _tensors(tree) -> list[torch.Tensor]:
    out = []
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return out


class KernelMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.phase = "fwd"
        self.fwd_layer: str | None = None
        self.bwd_layer: str | None = None
        self.kernels: dict = defaultdict(lambda: {"fwd": [], "bwd": []})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if name in _FREE or getattr(func, "is_view", False):
            return out
        formula = flop_registry.get(func._overloadpacket)
        flops = formula(*args, **kwargs, out_val=out) if formula is not None else 0
        ins, outs = _tensors((args, kwargs)), _tensors(out)
        in_ids = {id(t) for t in ins}
        outs = [t for t in outs if id(t) not in in_ids]  # an in-place op writes its input: count it once, as written

        def split(tensors):
            floats = sum(t.numel() for t in tensors if t.is_floating_point())
            other = sum(t.numel() * t.element_size() for t in tensors if not t.is_floating_point())
            return floats, other

        read, read_other = split(ins)
        written, written_other = split(outs)
        if name.endswith("_") and not outs:  # in-place: it writes what it read
            written = sum(t.numel() for t in ins[:1] if t.is_floating_point())
        layer = self.fwd_layer if self.phase == "fwd" else self.bwd_layer
        rows = self.kernels[layer][self.phase]
        if name == "convolution_backward":
            # cuDNN runs the input gradient (dgrad: reads grad_out and the weight, writes grad_in) and the
            # weight gradient (wgrad: reads grad_out and the input, writes grad_weight) as separate kernels
            # of equal FLOPs; the bias gradient (a reduction of grad_out) rides with wgrad
            grad_out, inp, weight = args[0], args[1], args[2]
            mask = list(args[10]) if len(args) > 10 else list(kwargs.get("output_mask", [True, True, True]))
            parts = [p for p, on in (("dgrad", mask[0]), ("wgrad", mask[1])) if on]
            for part in parts:
                if part == "dgrad":
                    rows.append(("convolution_backward_input", flops // len(parts),
                                 grad_out.numel() + weight.numel(), inp.numel(), 0))
                else:
                    rows.append(("convolution_backward_weight", flops // len(parts),
                                 grad_out.numel() + inp.numel(), weight.numel() + (weight.shape[0] if mask[2] else 0), 0))
            return out
        rows.append((name, flops, read, written, read_other + written_other))
        return out

    def pack(self, tensor):
        return self.fwd_layer, tensor

    def unpack(self, packed):
        self.bwd_layer, tensor = packed
        return tensor


def trace(model: nn.Module, inputs: dict) -> tuple[list[str], dict]:
    layers = zoo.param_layers(model)
    mode = KernelMode()
    order: list[str] = []

    def pre(name):
        def hook(_module, _args):
            if name not in order:
                order.append(name)
            mode.fwd_layer = name
        return hook

    handles = [m.register_forward_pre_hook(pre(n)) for n, m in layers.items()]
    model.train()
    try:
        with mode, saved_tensors_hooks(mode.pack, mode.unpack):
            outputs = zoo.output_tensors(model(**inputs))
            loss = sum(t.sum() for t in outputs if t.is_floating_point())
            mode.phase = "bwd"
            mode.bwd_layer = order[-1]
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    return order, mode.kernels


def _spec(name: str):
    if name == "resnet200":
        def build():
            from torchvision.models.resnet import Bottleneck, ResNet
            return ResNet(Bottleneck, [3, 24, 36, 3])
        return zoo.ModelSpec("resnet200", "ResNet-200", "", [3, 224, 224], build)
    return {s.name: s for s in zoo.MODELS}[name]


def generate(name: str) -> dict:
    spec = _spec(name)
    runs = {}
    for batch in (2, 4):
        zoo.BATCH = batch
        torch.manual_seed(0)
        with META:
            model = spec.build()
        make_input = spec.make_input if spec.make_input is not None else zoo._image_input(spec.input_shape)
        if spec.name != "bert_base":
            make_input = zoo._image_input(spec.input_shape)
        runs[batch] = trace(model, make_input())
    order, k2 = runs[2]
    order4, k4 = runs[4]
    assert order == order4, name
    layers = []
    for layer in order:
        entry = {"name": layer}
        for phase in ("fwd", "bwd"):
            a, b = k2[layer][phase], k4[layer][phase]
            assert [x[0] for x in a] == [x[0] for x in b], (name, layer, phase)
            rows = []
            for x2, x4 in zip(a, b):
                row = [x2[0]]
                for i in range(1, 5):
                    per = (x4[i] - x2[i]) // 2
                    assert per * 2 == x4[i] - x2[i], (name, layer, x2, x4)
                    const = x2[i] - 2 * per
                    row += [const, per]
                rows.append(row)
            entry[phase] = rows
        layers.append(entry)
    stray = k2.get(None)
    assert not stray or not (stray["fwd"] or stray["bwd"]), f"{name}: kernels outside any layer: {stray}"
    return {"name": name, "generator": "tools/gen_kernel_table.py", "torch_version": torch.__version__,
            "columns": ["op", "flops_const", "flops_per_sample", "read_const", "read_per_sample",
                        "write_const", "write_per_sample", "other_bytes_const", "other_bytes_per_sample"],
            "units": "flops; read/write in floating-point elements (bytes = elements x the precision's size); "
                     "other_bytes: integer tensors (e.g. pooling indices) in bytes",
            "layers": layers}


def to_json(doc: dict) -> str:
    head = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "layers"]
    layers = ",\n".join(f"    {json.dumps(layer, separators=(',', ':'))}" for layer in doc["layers"])
    text = "{\n" + ",\n".join(head) + ',\n  "layers": [\n' + layers + "\n  ]\n}\n"
    assert json.loads(text) == doc
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"default: {' '.join(CNNS)}")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models or CNNS:
        doc = generate(name)
        (args.out / f"{name}.json").write_text(to_json(doc))
        n = sum(len(layer["fwd"]) + len(layer["bwd"]) for layer in doc["layers"])
        print(f"wrote {name}.json: {len(doc['layers'])} layers, {n} kernels", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
