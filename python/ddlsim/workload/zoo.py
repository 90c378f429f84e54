"""The model zoo: layer tables generated offline from the real model
definitions by `tools/gen_model_zoo.py` and shipped as JSON."""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources

from ..errors import ModelError
from .model import Layer, Model, Tensor

_DATA = "ddlsim.data.models"


def list_models() -> list[str]:
    """Names of the models in the zoo, sorted."""
    return sorted(p.name[:-5] for p in resources.files(_DATA).iterdir() if p.name.endswith(".json"))


def model_from_dict(data: dict, origin: str) -> Model:
    """Builds a Model from the zoo's JSON layout; `origin` names it in errors."""
    try:
        dtype_bytes = int(data.get("dtype_bytes", 4))
        layers = tuple(
            Layer(
                name=str(layer["name"]),
                type=str(layer.get("type", "")),
                tensors=tuple(Tensor(str(t["name"]), int(t["elements"]), dtype_bytes) for t in layer["tensors"]),
                fwd_flops=int(layer.get("fwd_flops", 0)),
                bwd_flops=int(layer.get("bwd_flops", 0)),
            )
            for layer in data["layers"]
        )
        return Model(
            name=str(data["name"]),
            display_name=str(data.get("display_name", data["name"])),
            layers=layers,
            source=str(data.get("source", "")),
            input_shape=tuple(data.get("input_shape", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{origin}: malformed model description ({exc!r}); see docs/model-zoo.md for the format") from None


@lru_cache(maxsize=None)
def load_model(name: str) -> Model:
    """Loads a zoo model by name (case and '-' insensitive: "ResNet-50" works)."""
    key = name.strip().lower().replace("-", "").replace("_", "")
    by_key = {n.replace("_", ""): n for n in list_models()}
    if key not in by_key:
        close = difflib.get_close_matches(key, list(by_key), n=3)
        hint = f" Did you mean {', '.join(by_key[c] for c in close)}?" if close else ""
        raise ModelError(
            f"unknown model {name!r}.{hint} Known models: {', '.join(list_models())} "
            "(or describe a custom model inline in a scenario file)."
        )
    file_name = by_key[key] + ".json"
    text = resources.files(_DATA).joinpath(file_name).read_text(encoding="utf-8")
    return model_from_dict(json.loads(text), origin=f"model zoo file {file_name}")
