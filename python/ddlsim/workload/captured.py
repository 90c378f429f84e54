"""A model rebuilt from a DDP capture of a model that is not in the zoo (your own script under
``ddlsim.capture.attach``): the layers and parameter tensors the capture recorded.

A capture records its layers (the modules that own parameters directly, in registration order: ``layers``, and
since 2026-11-29 their module types, ``layer_types``) and every parameter tensor (``parameters``: name, elements,
bytes, in ``named_parameters()`` order). A parameter ``a.b.weight`` belongs to the layer ``a.b`` (the module that
owns it directly), one without a dot to the root module's layer ``""``. The rebuilt model has no FLOPs: its times
come from the capture's own rows, as every replayed model's do.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import ModelError
from .model import Layer, Model, Tensor

# A layer whose module type the capture did not record (captures made before layer_types).
UNKNOWN_TYPE = "Captured"


def captured_model(meta: dict[str, Any], source: str) -> Optional[Model]:
    """The model of the DDP capture whose metadata is `meta` (`source` names its file in messages), rebuilt from its
    recorded layers and parameters; None where it does not record them (a PS capture, a simulated log, a capture
    without the DDP facts). A record that does not add up (a parameter of no recorded layer, a size that is not a
    whole number of elements) is a :class:`ModelError` naming the file and the field."""
    layers, parameters = meta.get("layers"), meta.get("parameters")
    if (meta.get("source") != "capture" or meta.get("job") != "ddp" or not isinstance(layers, list)
            or not isinstance(parameters, list) or not layers or not parameters):
        return None
    fix = "capture the job again, or replay it as a zoo model with --model"
    if not all(isinstance(name, str) for name in layers) or len(set(layers)) != len(layers):
        raise ModelError(f"{source}: metadata 'layers' must be distinct layer names; {fix}")
    owned: dict[str, list[Tensor]] = {name: [] for name in layers}
    seen: set[str] = set()
    for i, p in enumerate(parameters):
        try:
            name, elements, size = p["name"], p["elements"], p["bytes"]
        except (KeyError, TypeError):
            raise ModelError(f"{source}: metadata 'parameters' entry {i} needs name, elements and bytes; {fix}") from None
        if (not isinstance(name, str) or isinstance(elements, bool) or not isinstance(elements, int)
                or isinstance(size, bool) or not isinstance(size, int) or elements < 0 or size < 0
                or (elements and size % elements) or (not elements and size)):
            raise ModelError(f"{source}: metadata 'parameters' entry {i} ({name!r}): bytes must be a whole number of "
                             f"elements ({size!r} bytes, {elements!r} elements); {fix}")
        if name in seen:
            raise ModelError(f"{source}: metadata 'parameters' names {name!r} twice; {fix}")
        seen.add(name)
        layer = name.rsplit(".", 1)[0] if "." in name else ""
        if layer not in owned:
            raise ModelError(f"{source}: parameter {name!r} belongs to layer {layer!r}, which metadata 'layers' does "
                             f"not list; {fix}")
        owned[layer].append(Tensor(name, elements, size // elements if elements else 4))
    types = meta.get("layer_types")
    if not (isinstance(types, list) and len(types) == len(layers) and all(isinstance(t, str) and t for t in types)):
        types = [UNKNOWN_TYPE] * len(layers)
    model = str(meta.get("model") or "captured")
    return Model(name=model, display_name=model, source=f"rebuilt from the capture {source}",
                 layers=tuple(Layer(name=name, type=kind, tensors=tuple(owned[name])) for name, kind in zip(layers, types)))


def in_zoo(name: str) -> bool:
    """Whether the zoo has a model of this name, by :func:`ddlsim.workload.zoo.load_model`'s own rule (case and '-'
    insensitive): where it does, the zoo's model is used and nothing is rebuilt."""
    from .zoo import load_model

    try:
        load_model(name)
    except ModelError:
        return False
    return True


def rebuilt_model(meta: dict[str, Any], name: str, source: str) -> Optional[Model]:
    """The model `name` rebuilt from the capture whose metadata is `meta` (:func:`captured_model`), where the zoo has
    no model of that name and the capture is of that model; None otherwise (a zoo model, or nothing to rebuild)."""
    if str(meta.get("model", "")) != name or in_zoo(name):
        return None
    return captured_model(meta, source)


def captured_model_of(profile: Any, name: str) -> Optional[Model]:
    """The model `name` rebuilt from the capture at `profile` (a path), where `profile` is a DDP capture of a model
    of that name that records its layers and parameters; None otherwise."""
    from pathlib import Path

    if Path(profile).suffix != ".parquet":
        return None
    from ..inputs import input_file
    from ..trace.parquet import read_log_metadata

    path = input_file(profile, "profile file", "give a CSV with columns layer, fwd_ms, bwd_ms or an event log (.parquet)",
                      error=ModelError)
    meta = read_log_metadata(path)
    if str(meta.get("model", "")) != name:
        return None
    return captured_model(meta, str(path))
