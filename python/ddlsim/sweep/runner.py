"""Runs many scenarios: answered from the results store when they were run
before, else simulated, in this process or on a local process pool."""

from __future__ import annotations

import json
import multiprocessing
import signal
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..simulation.scenario import Scenario
from .store import ResultStore, scenario_key

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
        # Leaving the block terminates the workers, also on an error or Ctrl-C: none outlives the sweep.
        with multiprocessing.get_context().Pool(min(jobs, len(todo)), initializer=_ignore_interrupts) as pool:
            tasks = [(indices, scenarios[indices[0]]) for indices in todo.values()]
            for indices, summary in pool.imap_unordered(_simulate_indexed, tasks):
                finish(indices, summary)
    return [r for r in results if r is not None], stats
