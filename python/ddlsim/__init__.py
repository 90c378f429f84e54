"""ddlsim: capture, analyze, simulate and optimize the network communication
of distributed deep-learning training.

    >>> import ddlsim
    >>> result = ddlsim.simulate(model="resnet50", workers=8, strategy="ring")
    >>> result.iterations          # pandas DataFrame, one row per iteration
    >>> result.events              # the event log (pandas DataFrame)
"""

from .errors import DdlsimError, ModelError, ScenarioError, TraceError
from .api import SimulationResult, simulate
from .simulation.scenario import Scenario, load_scenario
from .workload import list_models, load_model, synthetic_model

__version__ = "0.1.0"

__all__ = [
    "DdlsimError",
    "ModelError",
    "ScenarioError",
    "TraceError",
    "Scenario",
    "SimulationResult",
    "load_scenario",
    "simulate",
    "list_models",
    "load_model",
    "synthetic_model",
]
