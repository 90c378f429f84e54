"""Workloads: model zoo, synthetic models, compute-time models.

The names below are loaded on first use (`ddlsim._lazy`), so that importing one module of the package
(`ddlsim.workload.devices`, which the CLI's help reads) does not load numpy and the synthetic models."""

from .._lazy import lazy_exports

_HOME = {"Layer": "model", "Model": "model", "Tensor": "model", "list_models": "zoo", "load_model": "zoo",
         "synthetic_model": "synthetic", "thesis_simulator_model": "synthetic", "DEVICES": "devices",
         "Device": "devices"}

__all__ = list(_HOME)

__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals())
