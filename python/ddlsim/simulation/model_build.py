"""Turns a scenario's model section into a Model and per-layer times."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelError, ScenarioError
from ..units import parse_duration_ns, parse_size_bytes
from ..workload.captured import captured_model_of
from ..workload.devices import find_device
from ..workload.growth import grow
from ..workload.model import Layer, Model, Tensor
from ..workload.profile import apply_profile
from ..workload.synthetic import synthetic_model, thesis_simulator_model
from ..workload.zoo import load_model
from .scenario import ModelConfig, SyntheticConfig


def build_model(config: ModelConfig, base_dir: str | None = None) -> Model:
    if config.layers is not None:
        if not config.layers:
            raise ScenarioError("field 'model.layers': a custom model needs at least one layer")
        layers = tuple(
            Layer(
                name=layer.name,
                type="Custom",
                tensors=(Tensor(f"{layer.name}.weight", layer.params, config.dtype_bytes),) if layer.params else (),
                fwd_s=layer.fwd_ms / 1e3,
                bwd_s=layer.bwd_ms / 1e3,
            )
            for layer in config.layers
        )
        model = Model(name=config.name, display_name=config.name, layers=layers, source="inline scenario layers")
    elif config.name == "synthetic" or config.synthetic is not None:
        s = config.synthetic
        if s is None:
            s = SyntheticConfig()
        if s.profile == "thesis-simulator":
            model = thesis_simulator_model(
                layers=s.layers,
                model_size_bytes=parse_size_bytes(s.model_size),
                compute_s=parse_duration_ns(s.compute) / 1e9,
                forward_share=s.forward_share,
                dtype_bytes=config.dtype_bytes,
            )
        else:
            model = synthetic_model(
                layers=s.layers,
                model_size_bytes=parse_size_bytes(s.model_size),
                compute_s=parse_duration_ns(s.compute) / 1e9,
                forward_share=s.forward_share,
                first_to_last_forward=s.first_to_last_forward,
                size_distribution=s.size_distribution,
                dtype_bytes=config.dtype_bytes,
            )
    else:
        model = _named_model(config, base_dir)
    base_layers = {layer.name for layer in model.layers}
    if config.grow_count:
        model = grow(model, config.grow_module, config.grow_count)
    if config.profile or config.layers_from:
        path = _profile_path(config, base_dir) if config.profile else _resolved(config.layers_from, base_dir)
        # modules added by growth take their times from the profile when it has them (a replayed
        # grown run), else from their FLOPs
        model = apply_profile(model, path, optional={layer.name for layer in model.layers} - base_layers,
                              job=config.profile_job)
        if config.overheads and path.suffix == ".parquet":
            from ..trace.parquet import read_event_log
            from .overheads import framework_overheads, with_overheads

            log = read_event_log(path)
            model = with_overheads(model, framework_overheads(log, log.metadata, job=config.profile_job))
    return model


def _resolved(value: str, base_dir: str | None) -> Path:
    path = Path(value)
    return Path(base_dir) / path if base_dir and not path.is_absolute() else path


def _profile_path(config: ModelConfig, base_dir: str | None) -> Path:
    return _resolved(config.profile, base_dir)


def _named_model(config: ModelConfig, base_dir: str | None) -> Model:
    """The model rebuilt from the capture `config.layers_from`; else the zoo model `config.name`, or, where the zoo
    has none of that name and the profile is a DDP capture of a model so named that records its layers and
    parameters (your own script's), the model rebuilt from that."""
    if config.layers_from:
        captured = captured_model_of(_resolved(config.layers_from, base_dir), config.name)
        if captured is None:
            raise ModelError(f"model.layers_from {config.layers_from}: not a DDP capture of model {config.name!r} that "
                             "records its layers and parameters; name the capture the model was recorded in, or "
                             "leave layers_from out for a zoo model")
        return captured
    try:
        return load_model(config.name)
    except ModelError:
        captured = captured_model_of(_profile_path(config, base_dir), config.name) if config.profile else None
        if captured is None:
            raise
        return captured


def sped_up(layer: Layer, config: ModelConfig) -> bool:
    """Whether the faster-compute what-if applies to `layer` (type prefix, any case)."""
    return config.compute_speedup != 1.0 and any(layer.type.lower().startswith(k.lower()) for k in config.speedup_kinds)


def layer_times_ns(model: Model, config: ModelConfig) -> list[tuple[int, int]]:
    """(forward, backward) ns per layer: given times win, else the compute model (roofline or FLOPs x efficiency)
    on the device."""
    if not model.layers:
        raise ModelError(f"model {model.name} has no layers")
    if config.compute_speedup != 1.0 and not any(sped_up(layer, config) for layer in model.layers):
        # a faster-compute what-if that would change nothing (a typo in a kind, a model without that type)
        types = ", ".join(dict.fromkeys(layer.type for layer in model.layers if layer.type)) or "none recorded"
        raise ScenarioError(
            f"model.compute_speedup = {config.compute_speedup:g} speeds up layers whose type starts with "
            f"{' or '.join(repr(k) for k in config.speedup_kinds)}, but no layer of {model.name} has such a type "
            f"(its types: {types}); set model.speedup_kinds (--speedup-kind) to one of them")
    device = find_device(config.device)
    if config.compute == "roofline":
        from ..workload.roofline import layer_times_s

        modelled = layer_times_s(model, device, config.precision, config.batch_size)
    else:
        rate = device.peak_flops(config.precision) * config.efficiency
        modelled = [(layer.fwd_flops * config.batch_size / rate, layer.bwd_flops * config.batch_size / rate)
                    for layer in model.layers]
    times = []
    for layer, (fwd_s, bwd_s) in zip(model.layers, modelled):
        scale = 1.0 / config.compute_speedup if sped_up(layer, config) else 1.0
        if layer.fwd_s is not None and layer.bwd_s is not None:
            fwd_s, bwd_s = layer.fwd_s, layer.bwd_s
        times.append((round(fwd_s * 1e9 * scale), round(bwd_s * 1e9 * scale)))
    return times
