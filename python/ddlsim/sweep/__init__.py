"""Many scenarios at once: a results store keyed by the scenario, a runner on
a local process pool or Ray, and `ddlsim sweep`'s grids and Parquet datasets
(docs/sweep.md)."""

from .grid import Axis, Grid, GridPoint, load_grid
from .runner import GridStats, SweepStats, run_grid, run_sweep, simulate_run, simulate_summary
from .store import ResultStore, RunDataset, default_cache_dir, read_sweep, scenario_key

__all__ = ["Axis", "Grid", "GridPoint", "GridStats", "ResultStore", "RunDataset", "SweepStats", "default_cache_dir",
           "load_grid", "read_sweep", "run_grid", "run_sweep", "scenario_key", "simulate_run", "simulate_summary"]
