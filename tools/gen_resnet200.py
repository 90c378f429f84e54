#!/usr/bin/env python3
"""Write python/ddlsim/data/models/resnet200.json by shape arithmetic.

torchvision has no ResNet-200 constructor; the model is
``torchvision.models.resnet.ResNet(Bottleneck, [3, 24, 36, 3])``. torch is not
needed: ``ddlsim.workload.shapes.resnet_bottleneck`` computes the layer table
(parameters and per-sample FLOPs with the zoo generator's conventions) and is
checked to reproduce the torch-generated ResNet-50/101/152 files exactly.
ResNet-200 has 64,673,832 parameters (asserted here).

    python3 tools/gen_resnet200.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _shapes():
    """ddlsim/workload/shapes.py on its own (no numpy needed to run this tool)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shapes", REPO_ROOT / "python" / "ddlsim" / "workload" / "shapes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

PARAMETERS = 64_673_832


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "python" / "ddlsim" / "data" / "models")
    args = ap.parse_args()
    layers = _shapes().resnet_bottleneck([3, 24, 36, 3])
    params = sum(t["elements"] for layer in layers for t in layer["tensors"])
    assert params == PARAMETERS, params
    head = {
        "name": "resnet200",
        "display_name": "ResNet-200",
        "source": "torchvision.models.resnet.ResNet(Bottleneck, [3, 24, 36, 3]) by shape arithmetic",
        "generator": "tools/gen_resnet200.py",
        "input_shape": [3, 224, 224],
        "dtype_bytes": 4,
        "parameters": params,
    }
    text = json.dumps(head, indent=2)[:-2] + ',\n  "layers": [\n'
    text += ",\n".join("    " + json.dumps(layer) for layer in layers) + "\n  ]\n}\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resnet200.json").write_text(text, encoding="utf-8")
    print(f"resnet200: {len(layers)} layers, {params:,} parameters")


if __name__ == "__main__":
    main()
