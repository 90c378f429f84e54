"""Workloads: model zoo, synthetic models, compute-time models."""

from .model import Layer, Model, Tensor
from .zoo import list_models, load_model
from .synthetic import synthetic_model, thesis_simulator_model
from .devices import DEVICES, Device

__all__ = ["Layer", "Model", "Tensor", "list_models", "load_model", "synthetic_model", "thesis_simulator_model", "DEVICES", "Device"]
