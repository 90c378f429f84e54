"""Synthetic growth (network-operator paper §8.5): a model with k extra
Inception-v3 modules, either compute-intensive (the 35x35x288 module,
torchvision InceptionA(288, pool_features=64), as Mixed_5d) or
network-intensive (the 17x17x768 module, InceptionC(768, channels_7x7=192),
as Mixed_6e). Sizes and FLOPs come from shape arithmetic
(:mod:`ddlsim.workload.shapes`, checked against the torch-generated
Inception-v3 zoo file).

The copies go right after the last module of the same shape when the model
has one (Inception-v3: after Mixed_5d or Mixed_6e, where they fit the
feature map), else before the model's last layer (its classifier).
"""

from __future__ import annotations

from ..errors import ModelError
from .model import Layer, Model, Tensor
from .shapes import inception_a, inception_c

# module name -> (aliases, layer-table builder, the Inception-v3 module it copies)
MODULES = {
    "inception-35x35x288": (("compute", "compute-intensive"), inception_a, "Mixed_5d"),
    "inception-17x17x768": (("network", "network-intensive"), inception_c, "Mixed_6e"),
}


def module_name(name: str) -> str:
    key = name.strip().lower()
    for canonical, (aliases, _, _) in MODULES.items():
        if key == canonical or key in aliases:
            return canonical
    raise ModelError(f"unknown growth module {name!r}; choose one of {', '.join(MODULES)} (or compute / network)")


def module_layers(name: str, prefix: str, dtype_bytes: int = 4) -> tuple[Layer, ...]:
    _, build, _ = MODULES[module_name(name)]
    return tuple(
        Layer(name=d["name"], type=d["type"], fwd_flops=d["fwd_flops"], bwd_flops=d["bwd_flops"],
              tensors=tuple(Tensor(t["name"], t["elements"], dtype_bytes) for t in d["tensors"]))
        for d in build(prefix)
    )


def grow(model: Model, module: str, count: int) -> Model:
    """`model` with `count` copies of `module` inserted (see the module docstring)."""
    if count <= 0:
        return model
    canonical = module_name(module)
    anchor = MODULES[canonical][2]
    layers = list(model.layers)
    positions = [i for i, layer in enumerate(layers) if layer.name.startswith(anchor + ".")]
    at = positions[-1] + 1 if positions else max(len(layers) - 1, 0)
    dtype = layers[0].tensors[0].dtype_bytes if layers and layers[0].tensors else 4
    extra = tuple(layer for k in range(count) for layer in module_layers(canonical, f"grow{k}", dtype))
    return Model(
        name=model.name,
        display_name=f"{model.display_name} + {count} x {canonical}",
        layers=tuple(layers[:at]) + extra + tuple(layers[at:]),
        source=model.source,
        input_shape=model.input_shape,
    )
