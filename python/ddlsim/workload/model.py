"""A model as the simulator sees it: layers in forward order, each with its
parameter tensors and compute cost (FLOPs per sample, or measured times)."""

from __future__ import annotations

from dataclasses import dataclass, field



@dataclass(frozen=True)
class Tensor:
    name: str
    elements: int
    dtype_bytes: int = 4

    @property
    def bytes(self) -> int:
        return self.elements * self.dtype_bytes


@dataclass(frozen=True)
class Layer:
    name: str
    type: str
    tensors: tuple[Tensor, ...]
    fwd_flops: int = 0
    bwd_flops: int = 0
    # Measured or given times (seconds, per iteration at the model's batch);
    # when set they win over FLOPs.
    fwd_s: float | None = None
    bwd_s: float | None = None


@dataclass(frozen=True)
class Model:
    name: str
    display_name: str
    layers: tuple[Layer, ...]
    source: str = ""
    input_shape: tuple[int, ...] = field(default_factory=tuple)

    @property
    def tensors(self) -> list[Tensor]:
        return [t for layer in self.layers for t in layer.tensors]

    @property
    def parameters(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def size_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    @property
    def fwd_flops(self) -> int:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops(self) -> int:
        return sum(layer.bwd_flops for layer in self.layers)

    def tensor_table(self) -> "pd.DataFrame":
        import pandas as pd

        """One row per parameter tensor: layer, name, elements, bytes."""
        rows = [
            {"layer_index": i, "layer": layer.name, "tensor": t.name, "elements": t.elements, "bytes": t.bytes}
            for i, layer in enumerate(self.layers)
            for t in layer.tensors
        ]
        return pd.DataFrame(rows)

    def layer_table(self) -> "pd.DataFrame":
        import pandas as pd

        """One row per layer: name, type, tensors, bytes, FLOPs per sample."""
        return pd.DataFrame(
            {
                "layer": [layer.name for layer in self.layers],
                "type": [layer.type for layer in self.layers],
                "tensors": [len(layer.tensors) for layer in self.layers],
                "bytes": [sum(t.bytes for t in layer.tensors) for layer in self.layers],
                "fwd_flops": [layer.fwd_flops for layer in self.layers],
                "bwd_flops": [layer.bwd_flops for layer in self.layers],
            }
        )
