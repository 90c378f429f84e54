"""Scenarios: what to simulate (workload + strategy + network), validated.

A scenario is a TOML file or a dict with the same shape; every field has a
default that serves the common case (ResNet-50, 8 workers, ring, 10 Gbit/s,
10 us, flow-level star). Errors name the file and field and say the fix.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ScenarioError
from .units import parse_bandwidth, parse_duration_ns, parse_size_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Quantity = Union[str, float, int]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class NetworkConfig(_Strict):
    fidelity: Literal["analytic", "flow"] = "flow"
    bandwidth: Quantity = "10Gbps"
    latency: Quantity = "10us"
    topology: Literal["star", "leaf-spine"] = "star"
    hosts_per_leaf: int = Field(8, ge=1)
    spines: int = Field(2, ge=1)
    oversubscription: float = Field(1.0, gt=0)

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth(cls, v: Quantity) -> Quantity:
        bps = parse_bandwidth(v)
        if not bps > 0:
            raise ValueError(f"bandwidth must be positive, got {v!r}; write e.g. \"10Gbps\"")
        return v

    @field_validator("latency")
    @classmethod
    def _latency(cls, v: Quantity) -> Quantity:
        if parse_duration_ns(v) < 0:
            raise ValueError(f"latency must be >= 0, got {v!r}; write e.g. \"10us\"")
        return v

    @property
    def bandwidth_bps(self) -> float:
        return parse_bandwidth(self.bandwidth)

    @property
    def latency_ns(self) -> int:
        return parse_duration_ns(self.latency)


class SyntheticConfig(_Strict):
    layers: int = Field(100, ge=1)
    model_size: Quantity = "100MB"
    compute: Quantity = "900ms"
    forward_share: float = Field(1 / 3, gt=0, lt=1)
    first_to_last_forward: float = Field(2.0, gt=0)
    size_distribution: str = "thesis"

    @field_validator("model_size")
    @classmethod
    def _size(cls, v: Quantity) -> Quantity:
        if parse_size_bytes(v) <= 0:
            raise ValueError("model_size must be positive, e.g. \"100MB\"")
        return v

    @field_validator("compute")
    @classmethod
    def _compute(cls, v: Quantity) -> Quantity:
        if parse_duration_ns(v) < 0:
            raise ValueError("compute must be >= 0, e.g. \"900ms\"")
        return v


class CustomLayer(_Strict):
    name: str
    params: int = Field(ge=0, description="number of parameters (elements)")
    fwd_ms: float = Field(ge=0)
    bwd_ms: float = Field(ge=0)


class ModelConfig(_Strict):
    name: str = "resnet50"
    batch_size: int = Field(32, ge=1)
    device: str = "V100"
    precision: Literal["fp32", "fp16"] = "fp32"
    efficiency: float = Field(0.5, gt=0, le=1)
    profile: Optional[str] = None
    synthetic: Optional[SyntheticConfig] = None
    layers: Optional[list[CustomLayer]] = None
    dtype_bytes: int = Field(4, ge=1)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        from .workload.devices import DEVICES

        if v.strip().upper() not in DEVICES:
            raise ValueError(f"unknown device {v!r}; choose one of {', '.join(DEVICES)}")
        return v.strip().upper()


class PSConfig(_Strict):
    servers: int = Field(1, ge=1)
    placement: Literal["round-robin", "size-balanced"] = "round-robin"
    update_bandwidth: Quantity = "20GB/s"
    header_bytes: int = Field(0, ge=0)

    @field_validator("update_bandwidth")
    @classmethod
    def _update_bw(cls, v: Quantity) -> Quantity:
        if not parse_bandwidth(v) > 0:
            raise ValueError("update_bandwidth must be positive, e.g. \"20GB/s\"")
        return v


class Scenario(_Strict):
    model: ModelConfig = Field(default_factory=ModelConfig)
    workers: int = Field(8, ge=1, le=65536)
    strategy: Literal["ring", "ps"] = "ring"
    ps: PSConfig = Field(default_factory=PSConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    iterations: int = Field(3, ge=1)
    seed: int = Field(0, ge=0, lt=2**63)
    jitter: float = Field(0.0, ge=0, le=1, description="coefficient of variation of compute times")
    barrier: bool = True
    trace_detail: Literal["auto", "step", "collective"] = "auto"
    # Where relative paths (model.profile) are resolved from.
    base_dir: Optional[str] = Field(None, exclude=True)


# Flat names accepted by simulate(**overrides) and the CLI flags.
FLAT_KEYS = {
    "model": ("model", "name"),
    "batch_size": ("model", "batch_size"),
    "device": ("model", "device"),
    "precision": ("model", "precision"),
    "efficiency": ("model", "efficiency"),
    "profile": ("model", "profile"),
    "servers": ("ps", "servers"),
    "placement": ("ps", "placement"),
    "bandwidth": ("network", "bandwidth"),
    "latency": ("network", "latency"),
    "network": ("network", "fidelity"),
    "fidelity": ("network", "fidelity"),
    "topology": ("network", "topology"),
    "hosts_per_leaf": ("network", "hosts_per_leaf"),
    "spines": ("network", "spines"),
    "oversubscription": ("network", "oversubscription"),
}


def _known_keys(model_cls: type[BaseModel]) -> list[str]:
    return [k for k in model_cls.model_fields if k != "base_dir"]


def _field_model(loc: tuple) -> type[BaseModel]:
    """The pydantic class that owns the field at `loc[:-1]`."""
    cls: type[BaseModel] = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        ann = cls.model_fields[part].annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            inner = [x for a in args for x in getattr(a, "__args__", ()) if isinstance(x, type) and issubclass(x, BaseModel)]
            nested = inner
        if not nested:
            break
        cls = nested[0]
    return cls


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = _known_keys(_field_model(loc))
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            lines.append(f"unknown key {field!r}: {hint}known keys here: {', '.join(known)}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"field {field!r}: {msg} (got {err.get('input')!r})")
    return f"{origin}: invalid scenario:\n  " + "\n  ".join(lines)


def scenario_from_dict(data: dict[str, Any], origin: str = "scenario") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(exc, origin)) from None


def load_scenario(path: str | Path) -> Scenario:
    """Reads and validates a TOML scenario file."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file; a scenario is TOML") from None
    scenario = scenario_from_dict(data, origin=str(path))
    return scenario.model_copy(update={"base_dir": str(path.resolve().parent)})


def with_overrides(scenario: Scenario, overrides: dict[str, Any], origin: str = "arguments") -> Scenario:
    """Applies flat (`workers=16`, `bandwidth="25Gbps"`) or nested overrides."""
    data = scenario.model_dump(exclude={"base_dir"})
    for key, value in overrides.items():
        if value is None:
            continue
        if key in FLAT_KEYS:
            section, field = FLAT_KEYS[key]
            data.setdefault(section, {})[field] = value
        else:
            data[key] = value
    result = scenario_from_dict(data, origin=origin)
    return result.model_copy(update={"base_dir": scenario.base_dir})
