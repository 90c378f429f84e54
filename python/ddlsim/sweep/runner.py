"""Runs many scenarios: answered from the results store when they were run
before, else simulated, in this process or on a local process pool."""

from __future__ import annotations

import json
import multiprocessing
import signal
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from ..errors import DdlsimError
from ..simulation.scenario import Scenario
from .store import ResultStore, scenario_key

if TYPE_CHECKING:
    import pyarrow as pa

    from .grid import Grid, GridPoint

# on_progress(done, total, label): called after every scenario, cached or simulated.
Progress = Callable[[int, int, str], None]


@dataclass
class SweepStats:
    simulated: int = 0
    cached: int = 0
    simulation_wall_s: float = 0.0  # time spent simulating (sum over scenarios, as measured where they ran)


def simulate_summary(scenario: Scenario) -> dict[str, Any]:
    """One simulation reduced to what a sweep keeps: per-iteration times and the breakdown (seconds), traffic."""
    import time

    import numpy as np

    from ..analyze.breakdown import iteration_arrays
    from ..simulation.run import run_scenario

    t0 = time.perf_counter()
    run = run_scenario(scenario)
    it = iteration_arrays(run.events)
    sent = np.asarray(run.stats["bytes_sent"], dtype=np.int64)
    return {
        "model": run.model.name,
        "model_bytes": run.model.size_bytes,
        "workers": scenario.workers,
        "iteration_times_s": [float(x) for x in it["time_s"]],
        "compute_s": [float(x) for x in it["compute_s"]],
        "exposed_communication_s": [float(x) for x in it["exposed_communication_s"]],
        "idle_s": [float(x) for x in it["idle_s"]],
        "bytes_sent_per_worker_per_iteration": float(sent[: scenario.workers].mean() / scenario.iterations),
        "events": int(run.stats["events"]),
        "transfers": int(run.stats["transfers"]),
        "engine_wall_s": run.wall_s,
        "wall_s": time.perf_counter() - t0,
        "notes": list(run.notes),
        "scenario": json.loads(json.dumps(scenario.model_dump(mode="json", exclude={"base_dir"}))),
    }


def _ignore_interrupts() -> None:
    """In pool workers: Ctrl-C goes to the parent, which ends the pool; SIGTERM ends a worker at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _simulate_indexed(task: tuple[list[int], Scenario]) -> tuple[list[int], dict[str, Any]]:
    indices, scenario = task
    return indices, simulate_summary(scenario)


def run_sweep(scenarios: Sequence[Scenario], store: Optional[ResultStore] = None, jobs: int = 1,
              on_progress: Optional[Progress] = None, labels: Optional[Sequence[str]] = None) -> tuple[list[dict], SweepStats]:
    """Summaries of `scenarios`, in order. With a store, known scenarios are read
    from it and new ones written to it as they finish (an interrupted sweep keeps
    what it had done). `jobs` > 1 simulates on that many local processes."""
    labels = list(labels) if labels is not None else [f"{s.model.name} {s.strategy.label}" for s in scenarios]
    stats = SweepStats()
    total = len(scenarios)
    results: list[Optional[dict]] = [None] * total
    keys = [scenario_key(s) if store is not None else "" for s in scenarios]
    done = 0
    todo: dict[str, list[int]] = {}  # one simulation for scenarios that are equal
    for i, key in enumerate(keys):
        cached = store.get(key) if store is not None else None
        if cached is not None:
            results[i] = cached
            stats.cached += 1
            done += 1
        else:
            todo.setdefault(key or str(i), []).append(i)
    if on_progress:
        on_progress(done, total, "cached results" if done else "")

    def finish(indices: list[int], summary: dict) -> None:
        nonlocal done
        if store is not None:
            store.put(keys[indices[0]], summary)
        stats.simulated += 1
        stats.simulation_wall_s += summary["wall_s"]
        for i in indices:
            results[i] = summary
        done += len(indices)
        if on_progress:
            on_progress(done, total, labels[indices[0]])

    if jobs <= 1 or len(todo) <= 1:
        for indices in todo.values():
            finish(indices, simulate_summary(scenarios[indices[0]]))
    else:
        tasks = [(indices, scenarios[indices[0]]) for indices in todo.values()]
        for indices, summary in local_pool(_simulate_indexed, tasks, jobs):
            finish(indices, summary)
    return [r for r in results if r is not None], stats


def local_pool(fn: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> Iterator[Any]:
    """fn(task) for every task on `jobs` local processes, as they finish.
    Leaving the loop terminates the workers, also on an error or Ctrl-C: none
    outlives the sweep."""
    with multiprocessing.get_context().Pool(min(jobs, len(tasks)), initializer=_ignore_interrupts) as pool:
        yield from pool.imap_unordered(fn, tasks)


# ----------------------------------------------------------------- `ddlsim sweep`: a grid into a Parquet dataset

# Summary columns that hold timings (they differ from one run of the same scenario to the next).
TIMING_COLUMNS = ("engine_wall_s", "wall_s")


def simulate_run(scenario: Scenario) -> dict[str, Any]:
    """One simulation of a sweep: its summary (scalars) and its tables
    (per iteration; flows and queue samples where the scenario records
    them), with the engine build that ran it. Runs in a pool or Ray worker."""
    import time

    import numpy as np
    import pyarrow as pa

    from ..analyze.breakdown import iteration_arrays
    from ..simulation.run import run_scenario
    from .store import engine_build_id

    t0 = time.perf_counter()
    run = run_scenario(scenario)
    log = run.events
    it = iteration_arrays(log)
    sent = np.asarray(run.stats["bytes_sent"], dtype=np.int64)
    times = np.asarray(it["time_s"], dtype=float)
    summary = {
        "model": run.model.name,
        "workers": scenario.workers,
        "iterations": len(times),
        "iteration_time_s": float(times.mean()) if len(times) else float("nan"),
        "iteration_time_min_s": float(times.min()) if len(times) else float("nan"),
        "iteration_time_max_s": float(times.max()) if len(times) else float("nan"),
        "compute_s": float(np.mean(it["compute_s"])) if len(times) else float("nan"),
        "exposed_communication_s": float(np.mean(it["exposed_communication_s"])) if len(times) else float("nan"),
        "idle_s": float(np.mean(it["idle_s"])) if len(times) else float("nan"),
        "model_bytes": int(run.model.size_bytes),
        "bytes_sent_total": int(sent.sum()),
        "bytes_sent_per_worker_per_iteration": float(sent[: scenario.workers].mean() / max(1, scenario.iterations)),
        "events": int(run.stats["events"]),
        "transfers": int(run.stats["transfers"]),
        "flows": int(log.flows.num_rows) if log.flows is not None else -1,
        "notes": "; ".join(run.notes),
        "engine_wall_s": float(run.wall_s),
    }
    tables = {"iterations": pa.table({k: np.asarray(v) for k, v in it.items()}), "flows": log.flows, "queues": log.queues}
    summary["wall_s"] = time.perf_counter() - t0
    return {"summary": summary, "tables": tables, "engine_build": engine_build_id()}


def _with_key(table: "Optional[pa.Table]", key: str) -> "Optional[pa.Table]":
    import pyarrow as pa

    if table is None:
        return None
    return table.add_column(0, "key", pa.array([key] * table.num_rows, pa.string()))


def summary_table(point: "GridPoint", grid: "Grid", result: dict[str, Any]) -> "pa.Table":
    """The one-row summary table of a run: key, build, the axis values (one
    column per axis, named by its key), the results, the canonical scenario."""
    import pyarrow as pa

    from .. import __version__
    from .store import canonical_json

    columns: dict[str, "pa.Array"] = {
        "key": pa.array([point.key], pa.string()),
        "engine_build": pa.array([result["engine_build"]], pa.string()),
        "ddlsim_version": pa.array([__version__], pa.string()),
    }
    for axis in grid.axes:
        columns[axis.key] = pa.array([axis.column(point.values[axis.key])], axis.arrow_type())
    for name, value in result["summary"].items():
        if name not in columns:
            columns[name] = pa.array([value])
    columns["scenario"] = pa.array([canonical_json(point.scenario)], pa.string())
    return pa.table(columns)


@dataclass
class GridStats:
    runs: int = 0
    simulated: int = 0
    already_done: int = 0
    simulation_wall_s: float = 0.0  # sum over runs, as measured where they ran
    wall_s: float = 0.0  # of the whole sweep, here


def _simulate_point(task: tuple[int, Scenario, Optional[int], bool]) -> tuple[int, dict[str, Any]]:
    from ..simulation.budget import run_control

    index, scenario, max_memory, force = task
    with run_control(max_memory=max_memory, force=force, settings="sweep"):  # the sweep's budget, where the point runs
        return index, simulate_run(scenario)


def run_grid(grid: "Grid", out_dir: "str | Path", jobs: int = 1, ray: Optional[str] = None,
             on_progress: Optional[Progress] = None, max_memory: Optional[int] = None, force: bool = False,
             option: str = "--out") -> GridStats:
    """Runs the points of `grid` not yet done in `out_dir` (a RunDataset) and
    writes each one's tables as it finishes. `jobs`: local processes (or the
    CPUs of a local Ray instance); `ray`: None for the local pool, "local" for
    a Ray instance started for this sweep, else the address of a Ray cluster
    to connect to (or "auto"). `max_memory` (bytes) and `force`: each run's
    budget, as `ddlsim simulate --max-memory / --force` (a point over it is
    refused before anything runs). `option`: the flag that named `out_dir`, for
    errors. Returns the counts; a run that fails stops
    the sweep with its error (the runs done so far are kept)."""
    import time

    from .store import RunDataset

    t0 = time.perf_counter()
    stats = GridStats(runs=len(grid.points))
    dataset = RunDataset(out_dir)
    check_points(grid, done=dataset.done(), max_memory=max_memory, force=force)  # before anything is written or runs
    if ray is not None:
        from .ray_backend import RaySession

        # connected (or refused, one line) before anything is written; a Ray instance it started ends with it
        session: Any = RaySession(ray, jobs)
    else:
        session = nullcontext()
    with session:
        _run_points(grid, dataset, stats, jobs, ray is not None, on_progress, (max_memory, force), option)
    stats.wall_s = time.perf_counter() - t0
    return stats


def check_points(grid: "Grid", done: "set[str]" = frozenset(), max_memory: Optional[int] = None, force: bool = False) -> None:
    """Refuses (one line naming the point) a grid with a point that would fail
    before simulating (an unknown model, a run over the budget of `max_memory`
    and `force`...), so that no run of it starts and nothing is written;
    points in `done` are not checked."""
    from ..errors import InternalError, ScenarioError
    from ..simulation.budget import run_control
    from ..simulation.run import check_runnable

    for point in grid.points:
        if point.key in done:
            continue
        try:
            with run_control(max_memory=max_memory, force=force, settings="sweep"):
                check_runnable(point.scenario)
        except DdlsimError as exc:
            if isinstance(exc, InternalError):
                raise
            text = " ".join(str(exc).split()).rstrip(".")
            raise ScenarioError(f"sweep point {point.label}: {text}; nothing was run") from None


def _run_points(grid: "Grid", dataset: Any, stats: GridStats, jobs: int, ray: bool,
                on_progress: Optional[Progress], limits: tuple[Optional[int], bool], option: str) -> None:
    from .store import engine_build_id

    with dataset.writing(option=option):
        dataset.write_manifest(grid.manifest(), option=option)
        done_keys = dataset.done()
        todo = [i for i, p in enumerate(grid.points) if p.key not in done_keys]
        stats.already_done = len(grid.points) - len(todo)
        done = stats.already_done
        if on_progress:
            on_progress(done, len(grid.points), "already done" if done else "")
        tasks = [(i, grid.points[i].scenario, *limits) for i in todo]
        if not tasks:
            results: Iterator[tuple[int, dict[str, Any]]] = iter(())
        elif ray:
            from .ray_backend import ray_map

            results = ray_map(_simulate_point, tasks, labels=[grid.points[i].label for i in todo])
        elif jobs <= 1 or len(tasks) <= 1:
            results = (_simulate_point(t) for t in tasks)
        else:
            results = local_pool(_simulate_point, tasks, jobs)
        build = engine_build_id()
        try:
            for index, result in results:
                point = grid.points[index]
                if result["engine_build"] != build:
                    raise DdlsimError(f"run {point.label}: a worker ran another ddlsim engine build ({result['engine_build'][:12]}, "
                                      f"here {build[:12]}); install the same ddlsim on every node of the Ray cluster")
                tables = {name: _with_key(t, point.key) for name, t in result["tables"].items()}
                dataset.put(point.key, summary_table(point, grid, result), tables)
                stats.simulated += 1
                stats.simulation_wall_s += result["summary"]["wall_s"]
                done += 1
                if on_progress:
                    on_progress(done, len(grid.points), point.label)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()  # ends the pool's workers / the Ray tasks still running
