"""The Python API: `ddlsim.simulate(...)` and what it returns."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path
from typing import Any

from typing import TYPE_CHECKING

import numpy as np

from .analyze.breakdown import iteration_arrays
from .simulation.run import SimulationRun, run_scenario
from .simulation.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass
class SimulationResult(SimulationRun):
    """A simulation and its analysis: `events` is the event log,
    `iterations` and `rpcs` the analysis tables, `save` writes it all."""

    @cached_property
    def iterations(self) -> "pd.DataFrame":
        """Per-iteration time and breakdown (see ddlsim.analyze.breakdown)."""
        import pandas as pd

        return pd.DataFrame(self._iteration_arrays)

    @cached_property
    def _iteration_arrays(self) -> dict:
        return iteration_arrays(self.columns)

    @cached_property
    def rpcs(self) -> "pd.DataFrame":
        """Per-RPC latency breakdown (PS only; see ddlsim.analyze.rpc)."""
        from .analyze.rpc import rpc_table

        return rpc_table(self.events)

    @property
    def iteration_time_s(self) -> float:
        return float(self._iteration_arrays["time_s"].mean())

    def packet_stats(self) -> dict[str, Any] | None:
        """Packet fidelity: the network-wide counters (packets forwarded, drops,
        ECN marks, retransmits, timeouts) and one row per directed link (port)
        with its packets, bytes, drops, ECN marks and peak occupancy; None at
        analytic and flow fidelity. Stored in the log's metadata as
        ``network_stats`` (docs/event-log.md)."""
        if self.scenario.network.fidelity != "packet":
            return None
        stats = self.columns.metadata.get("network_stats") or {}
        ports = stats.get("ports") or {}
        names = [k for k in ports if isinstance(ports[k], list)]
        rows = [dict(zip(names, values)) for values in zip(*(ports[k] for k in names))] if names else []
        return {"counters": dict(stats.get("counters") or {}), "ports": rows}

    def summary(self) -> dict[str, Any]:
        """Machine-readable summary (the CLI's --json); needs no pandas."""
        extra = {}
        packet = self.packet_stats()
        if packet is not None:
            extra["packet"] = packet
        return {**self._summary(), **extra}

    def _summary(self) -> dict[str, Any]:
        it = self._iteration_arrays
        sc = self.scenario
        workers = sc.workers
        sent = np.asarray(self.stats["bytes_sent"], dtype=np.int64)
        return {
            "model": self.model.name,
            "parameters": self.model.parameters,
            "model_bytes": self.model.size_bytes,
            "workers": workers,
            "servers": sc.servers,
            "strategy": sc.strategy.kind,
            "algorithm": getattr(sc.strategy, "algorithm", None),
            "in_network": getattr(sc.strategy, "in_network", "none"),
            "stream_policy": sc.strategy.stream_policy,
            "fidelity": sc.network.fidelity,
            "topology": sc.network.topology,
            "bandwidth_bps": sc.network.bandwidth_bps,
            "latency_ns": sc.network.latency_ns,
            "batch_size": sc.model.batch_size,
            "iterations": sc.iterations,
            "seed": sc.seed,
            "iteration_time_s": float(it["time_s"].mean()),
            "iteration_times_s": [float(x) for x in it["time_s"]],
            "compute_s": float(it["compute_s"].mean()),
            "communication_s": float(it["communication_s"].mean()),
            "overlap_s": float(it["overlap_s"].mean()),
            "exposed_communication_s": float(it["exposed_communication_s"].mean()),
            "idle_s": float(it["idle_s"].mean()),
            "overlap_ratio": float(it["overlap_ratio"].mean()),
            "throughput_samples_per_s": workers * sc.model.batch_size / float(it["time_s"].mean())
            if float(it["time_s"].mean()) > 0
            else float("inf"),
            "bytes_sent_per_worker_per_iteration": float(sent[:workers].mean() / sc.iterations),
            "trace_detail": self.engine_document["trace_detail"],
            "events": int(self.stats["events"]),
            "transfers": int(self.stats["transfers"]),
            "log_rows": len(self.columns),
            "wall_s": self.wall_s,
            "notes": list(self.notes),
            "scenario": self.scenario.model_dump(mode="json", exclude={"base_dir"}),
        }

    def save(self, out_dir: str | Path, timeline: bool = True) -> dict[str, Path]:
        """Writes events.parquet, trace.json (Perfetto), iterations.csv,
        summary.json and timeline.png into `out_dir`; returns the paths.
        Never over the run's own inputs (its profile, e.g. the log it replays)."""
        from .output import save_result
        from .trace.parquet import with_side_tables

        profile = self.scenario.model.profile
        if profile and self.scenario.base_dir and not Path(profile).is_absolute():
            profile = str(Path(self.scenario.base_dir) / profile)
        return save_result(self, Path(out_dir), timeline=timeline, inputs=with_side_tables(profile))


def simulate(scenario: Scenario | dict | str | Path | None = None, **overrides: Any) -> SimulationResult:
    """Simulates a training job and returns its event log and analysis.

    >>> r = simulate(model="resnet50", workers=8, strategy="ring", bandwidth="10Gbps")
    >>> r.iteration_time_s  # doctest: +SKIP
    """
    from .simulation.run import _resolve

    sc = _resolve(scenario, overrides)
    if sc.job:  # several jobs on one fabric (docs/jobs.md)
        return simulate_jobs(sc)  # type: ignore[return-value]
    run = run_scenario(sc)
    return SimulationResult(**{f.name: getattr(run, f.name) for f in dataclasses.fields(SimulationRun) if f.init})


def simulate_jobs(scenario: Scenario | dict | str | Path, alone: bool = True, **overrides: Any):
    """Simulates the [[job]] tables of a scenario in one run on one fabric and returns a
    :class:`ddlsim.simulation.jobs.JobsRun`: ``jobs()`` (per job: iteration times with the others and alone,
    slowdown, contended links), ``contention()``, ``events`` (one log, a ``job`` column), ``save(dir)``.
    ``alone=False`` skips the runs of each job alone (no slowdown then). See docs/jobs.md."""
    from .simulation.jobs import run_jobs

    return run_jobs(scenario, alone=alone, **overrides)


def replay(events: str | Path, model: str | None = None, jobs: list[str] | str | None = None, **overrides: Any) -> SimulationResult:
    """Replays the run an event log recorded (its model, workers and measured
    layer times; see ddlsim.simulation.replay), with `overrides` applied:
    ``replay("run/events.parquet", bandwidth="25Gbps", strategy="ps", servers=4)``.
    A log of several jobs on one fabric replays every job together and returns a
    :class:`ddlsim.simulation.jobs.JobsRun` as :func:`simulate_jobs` does, with each
    job's recorded iteration time beside its replayed one; `jobs` (names) replays
    only those jobs, on the same fabric without the others (docs/jobs.md)."""
    from .arguments import path_arg
    from .simulation.replay import attach_recorded, replay_plan

    scenario, notes = replay_plan(path_arg(events, "events"), model=model, jobs=jobs, **overrides)
    result = simulate(scenario)
    result.notes[:0] = notes
    attach_recorded(result, events)
    return result


def straggler_effect(result: Any) -> dict[str, Any]:
    """What a run's stragglers ([[straggler]]) cost: the same scenario simulated
    without them, and the mean iteration time with and without
    (``{"with_s", "without_s", "difference_s", "ratio"}``). For several jobs
    (``[[job]]``, each job's ranks counted within the job): one such dict per
    job under ``"jobs"``, with its ``job`` and ``name``."""
    from .simulation.jobs import JobsRun

    if isinstance(result, JobsRun):
        from .simulation.jobs import run_jobs

        alone = run_jobs(result.scenario.model_copy(update={"straggler": []}), alone=False)
        rows = []
        for w, wo in zip(result.jobs(), alone.jobs()):
            with_s, without_s = w["iteration_time_s"], wo["iteration_time_s"]
            rows.append({"job": w["job"], "name": w["name"], "with_s": with_s, "without_s": without_s,
                         "difference_s": with_s - without_s,
                         "ratio": with_s / without_s if without_s > 0 else float("nan")})
        return {"jobs": rows}
    base = simulate(result.scenario.model_copy(update={"straggler": []}))
    with_s, without_s = result.iteration_time_s, base.iteration_time_s
    return {"with_s": with_s, "without_s": without_s, "difference_s": with_s - without_s,
            "ratio": with_s / without_s if without_s > 0 else float("nan")}


def replay_scaling(events: str | Path, workers: list[int], model: str | None = None, **overrides: Any) -> list[dict[str, Any]]:
    """The replay of `events` at each worker count: iteration time mean, spread
    and compute part per count (see :func:`ddlsim.simulation.replay.replay_scaling`);
    ``replay_scaling("capture/events.parquet", [8, 128, 1024], rank_times="sampled")``."""
    from .arguments import path_arg
    from .simulation.replay import replay_scaling as scaling

    return scaling(path_arg(events, "events"), workers, model=model, **overrides)
