"""The simulate layer: scenario (workload + strategy + network), its
lowering into the engine's documents, and the engine bridge."""

from .run import SimulationRun, run_scenario
from .scenario import Scenario, load_scenario

__all__ = ["Scenario", "SimulationRun", "load_scenario", "run_scenario"]
