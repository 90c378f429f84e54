"""Many scenarios at once: a results store keyed by the scenario, and a runner with an optional process pool."""

from .runner import SweepStats, run_sweep, simulate_summary
from .store import ResultStore, default_cache_dir, scenario_key

__all__ = ["ResultStore", "SweepStats", "default_cache_dir", "run_sweep", "scenario_key", "simulate_summary"]
