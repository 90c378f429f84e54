"""Workloads: model zoo, synthetic models, compute-time models.

The names below are loaded on first use (PEP 562), so that importing one module of the package
(`ddlsim.workload.devices`, which the CLI's help reads) does not load numpy and the synthetic models."""

from importlib import import_module
from typing import Any

_WHERE = {"Layer": "model", "Model": "model", "Tensor": "model", "list_models": "zoo", "load_model": "zoo",
          "synthetic_model": "synthetic", "thesis_simulator_model": "synthetic", "DEVICES": "devices",
          "Device": "devices"}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
