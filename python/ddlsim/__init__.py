"""ddlsim: capture, analyze, simulate and optimize the network communication
of distributed deep-learning training.

    >>> import ddlsim
    >>> result = ddlsim.simulate(model="resnet50", workers=8, strategy="ring")
    >>> result.iterations          # pandas DataFrame, one row per iteration
    >>> result.events              # the event log (pandas DataFrame)
"""

from ._lazy import lazy_exports
from .errors import DdlsimError, ModelError, ScenarioError, TraceError

# Loaded on first use, so that `import ddlsim` (and `ddlsim --version`) stay light.
_LAZY = {
    "SimulationResult": "api",
    "simulate": "api",
    "simulate_jobs": "api",
    "replay": "api",
    "replay_scaling": "api",
    "straggler_effect": "api",
    "Scenario": "simulation.scenario",
    "load_scenario": "simulation.scenario",
    "list_models": "workload",
    "load_model": "workload",
    "synthetic_model": "workload",
    "thesis_simulator_model": "workload",
    "CostModel": "plan.cost",
    "fit_cost_model": "plan.cost",
    "make_plan": "plan.planner",
    "apply_plan": "plan.apply",
    "measure_plan": "plan.apply",
    "make_jobs_plan": "plan.jobs_plan",
    "convert": "interop",
    "validate": "validation",
}


# Subpackages reachable as attributes of an imported ddlsim (`ddlsim.trace.read_event_log`), loaded on first use.
SUBPACKAGES = ("analyze", "capture", "interop", "plan", "reproduce", "simulation", "sweep", "trace", "units", "validation",
               "workload")

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), SUBPACKAGES)

__version__ = "0.1.0"

__all__ = ["DdlsimError", "ModelError", "ScenarioError", "TraceError", *_LAZY]
