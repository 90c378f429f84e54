"""`ddlsim sweep`: a grid of scenarios on a local process pool or Ray, into a Parquet dataset (docs/sweep.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import DdlsimError
from .consoles import QUIET_HELP, err, out, real_console

# Rows of the results table printed; the dataset has them all.
SHOWN_ROWS = 40


def sweep(
    scenario: Optional[Path] = typer.Argument(
        None, help="Scenario TOML file; its [sweep] table gives the axes (default: the default scenario)."),
    sets: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=V1,V2", help="An axis: KEY=V1,V2,... with KEY a dotted scenario key (network.bandwidth) or a simulate flag's "
        "name (bandwidth); repeatable; replaces the file's axis of the same key."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory of the results (a Parquet dataset); "
                                           "runs already there are skipped."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Simulations in parallel: local processes, or the CPUs of "
                                       "a local Ray instance (default: the machine's CPUs)."),
    ray: bool = typer.Option(False, "--ray", help="Run on Ray: a local Ray instance started for the sweep (--jobs CPUs), "
                             "or the cluster of --ray-address. Needs pip install 'ddlsim[sweep]'."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", metavar="ADDRESS", help="Run on the Ray cluster at this address (HOST:6379, "
        "ray://HOST:10001, or auto: the cluster this machine belongs to); implies --ray."),
    status: Optional[Path] = typer.Option(
        None, "--status", help="Show the done and missing runs of the sweep in this directory (its grid, or the one "
        "SCENARIO and --set give) and exit."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory", help="Refuse a grid with a run estimated to need more memory than this, e.g. 16GB "
        "(default: half of RAM); a budget per run, checked for every point before any runs."),
    force: bool = typer.Option(False, "--force", help="Run even the points whose cost estimate is over budget."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Run a grid of scenarios (the cartesian product of the axes) and collect the results as a Parquet dataset."""
    from ..sweep.grid import load_grid

    ray_target = ray_address if ray_address is not None else ("local" if ray else None)
    if status is not None:
        _show_status(status, scenario, sets or [])
        return
    if out_dir is None:
        raise DdlsimError("ddlsim sweep: give --out DIR, the directory of the results (e.g. --out sweep-out)")
    if jobs is not None and jobs < 1:
        raise DdlsimError(f"--jobs {jobs}: give at least 1")
    from ..safe_io import check_directory_target
    from ..simulation.budget import parse_max_memory

    budget_bytes = parse_max_memory(max_memory)
    check_directory_target(out_dir)  # before the grid is validated and anything runs
    grid = load_grid(scenario, sets or [])
    jobs = jobs or os.cpu_count() or 1
    from ..sweep.runner import run_grid
    from .sweep_progress import SweepProgress

    with SweepProgress(real_console(err), enabled=err.is_terminal and not quiet,
                       description="sweeping on Ray" if ray_target is not None else "sweeping") as progress:
        stats = run_grid(grid, out_dir, jobs=jobs, ray=ray_target, on_progress=progress, max_memory=budget_bytes, force=force)
    _print_results(out_dir, grid, done=None)
    if not quiet:
        where = "on Ray" + (f" at {ray_target}" if ray_target != "local" else " (local instance)") if ray_target is not None else \
            f"on {min(jobs, max(1, stats.runs - stats.already_done))} local process(es)"
        out.print(f"{stats.runs} scenarios: {stats.simulated} simulated {where} ({stats.wall_s:.1f} s), "
                  f"{stats.already_done} already done in {out_dir}", highlight=False)
        out.print(f"wrote {out_dir}/ (summary/, iterations/, flows/ where recorded, sweep.json)", highlight=False)
    for note in grid.notes + _scenario_notes(grid):
        out.print(f"note: {note}", highlight=False)


def _scenario_notes(grid) -> list[str]:
    return list(dict.fromkeys(n for p in grid.points for n in p.scenario.migration_notes))


def _print_results(out_dir: Path, grid, done: Optional[set[str]]) -> None:
    """The grid as a table: one row per run, its axis values and results (or 'missing')."""
    from rich.table import Table

    from ..sweep.store import RunDataset

    dataset = RunDataset(out_dir)
    done = dataset.done() if done is None else done
    rows: dict[str, dict[str, Any]] = {}
    if done:
        table = dataset.read("summary", [p.key for p in grid.points])
        rows = {r["key"]: r for r in table.select([c for c in ("key", "iteration_time_s", "bytes_sent_per_worker_per_iteration")
                                                    if c in table.column_names]).to_pylist()}
    result = Table(title=f"sweep: {len(grid.points)} runs, {sum(p.key in done for p in grid.points)} done", title_justify="left")
    for axis in grid.axes:
        result.add_column(axis.key)
    for name in ("iteration (ms)", "sent/worker/iter (MB)", "run"):
        result.add_column(name, justify="right")
    for point in grid.points[:SHOWN_ROWS]:
        row = rows.get(point.key)
        cells = [str(point.values[a.key]) for a in grid.axes]
        if row is None:
            cells += ["", "", "missing"]
        else:
            cells += [f"{row['iteration_time_s'] * 1e3:.3f}", f"{row['bytes_sent_per_worker_per_iteration'] / 1e6:.3f}",
                      point.key[:12]]
        result.add_row(*cells)
    out.print(result)
    if len(grid.points) > SHOWN_ROWS:
        out.print(f"... and {len(grid.points) - SHOWN_ROWS} more runs (all in {out_dir}/summary)", highlight=False)


def _show_status(directory: Path, scenario: Optional[Path], sets: list[str]) -> None:
    from ..sweep.grid import grid_from_manifest, load_grid
    from ..sweep.store import MANIFEST, RunDataset

    dataset = RunDataset(directory)
    if not directory.is_dir():
        raise DdlsimError(f"--status {directory}: no such directory; give the --out of a sweep")
    if scenario is not None or sets:
        grid = load_grid(scenario, sets)
    else:
        grid = grid_from_manifest(dataset.read_manifest(), origin=str(directory / MANIFEST))
    done = dataset.done()
    _print_results(directory, grid, done)
    missing = [p for p in grid.points if p.key not in done]
    out.print(f"{len(grid.points) - len(missing)} of {len(grid.points)} runs done, {len(missing)} missing"
              + (": run the same ddlsim sweep again to finish them" if missing else ""), highlight=False)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
