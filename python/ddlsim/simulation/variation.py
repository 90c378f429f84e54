"""Per-rank compute variation in the engine's training document: the
captured ranks' per-layer time vectors a replay at scale draws from
(``model.rank_times = "sampled"``), and stragglers (``[[straggler]]``).
The engine side is crates/ddlsim-core/src/lower/variation.rs.

A *vector* is one captured (rank, iteration)'s forward and backward time of
every layer, so that a rank drawing one keeps the correlation between the
layers of one step (a slow step is slow in all its layers). The pool holds
every captured worker rank's iterations after the warm-up (see
:func:`ddlsim.analyze.breakdown.warmup_iterations`). At the captured rank
count, simulated rank r replays captured rank r's iterations in order
(cycled), so the replay is the capture's own per-rank compute; at any other
count, each simulated (rank, iteration) draws a vector uniformly from the
pool with the scenario's seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ModelError, ScenarioError

if TYPE_CHECKING:
    from ..workload.model import Model
    from .scenario import Scenario


@dataclass
class ComputePool:
    """Per-layer compute vectors of a log: `vectors[k, l] = (forward ns, backward ns)`
    of layer l in the k-th (rank, iteration); `ranks[k]`, `iterations[k]` say which."""

    vectors: np.ndarray  # (m, layers, 2) int64
    ranks: np.ndarray
    iterations: np.ndarray

    @property
    def totals_ns(self) -> np.ndarray:
        """Each vector's compute per iteration (all forwards and backwards), ns."""
        return self.vectors.sum(axis=(1, 2))

    def assignment(self, workers: int) -> list[list[int]]:
        """At the captured rank count, rank r's vectors in iteration order; else [] (the engine draws)."""
        captured = np.unique(self.ranks)
        if workers != len(captured):
            return []
        return [[int(k) for k in np.flatnonzero(self.ranks == r)] for r in captured]


def compute_pool(path: str | Path, model: "Model", times_ns: list[tuple[int, int]], scale: list[float] | None = None,
                 job: int | None = None) -> ComputePool:
    """The per-(rank, iteration) layer-time vectors of the event log at `path`,
    in `model`'s layer order: rows as :func:`ddlsim.workload.profile.layer_times_from_log`
    reads them (several rows of one layer in one step add up), warm-up
    iterations left out; a layer a step lacks takes its `times_ns` entry.
    `scale`: per-layer factor (a compute speedup), 1 when None; `job`: only
    that job's rows (a log of several jobs)."""
    from ..analyze.breakdown import warmup_iterations
    from ..trace.parquet import read_event_log

    log = read_event_log(path)
    kind, op, name, role = log.column("kind"), log.column("op"), log.column("name"), log.column("role")
    rows = (kind == "compute") & np.isin(op, ["forward", "backward"]) & (name != "")
    if job is not None:
        rows &= log.column("job") == job
    if (role == "worker").any():
        rows &= role == "worker"
    iteration = log.column("iteration").astype(np.int64)
    rows &= iteration >= 0
    used = np.unique(iteration[rows])
    skip = warmup_iterations(log.metadata, len(used))
    rows &= np.isin(iteration, used[skip:])
    if not rows.any():
        raise ModelError(f"{path}: no forward/backward compute rows with a layer name after the warm-up, so no per-rank "
                         "layer times to draw; use model.rank_times = \"median\"")
    index = {layer.name: i for i, layer in enumerate(model.layers)}
    names = name[rows].astype(str)
    layer = np.fromiter((index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
    known = layer >= 0
    rank, it = log.column("rank")[rows].astype(np.int64)[known], iteration[rows][known]
    backward = (op[rows] == "backward").astype(np.int64)[known]
    duration = (log.column("end_ns") - log.column("start_ns"))[rows].astype(np.int64)[known]
    steps, step = np.unique(np.stack([rank, it]), axis=1, return_inverse=True)
    step = step.reshape(-1)
    m, n_layers = steps.shape[1], len(model.layers)
    vectors = np.zeros((m, n_layers, 2), dtype=np.float64)
    seen = np.zeros((m, n_layers, 2), dtype=bool)
    np.add.at(vectors, (step, layer[known], backward), duration)
    seen[step, layer[known], backward] = True
    factors = np.ones(n_layers) if scale is None else np.asarray(scale, dtype=np.float64)
    vectors = np.rint(vectors * factors[None, :, None]).astype(np.int64)
    fill = np.broadcast_to(np.asarray(times_ns, dtype=np.int64)[None, :, :], vectors.shape)
    vectors = np.where(seen, vectors, fill)
    return ComputePool(vectors=vectors, ranks=steps[0], iterations=steps[1])


def variation_document(scenario: "Scenario", model: "Model", times_ns: list[tuple[int, int]], limit_ns: int) -> dict[str, Any]:
    """The training document's per-rank fields (`compute_pool`, `compute_assign`,
    `stragglers`, `transient_stragglers`); {} when the scenario asks for none.
    ScenarioError when the slowest compute could pass the engine's clock limit `limit_ns`."""
    out: dict[str, Any] = {}
    persistent = [{"rank": s.rank, "factor": s.factor} for s in scenario.straggler if s.rank is not None]
    transient = [{"probability": s.probability, "factor": s.factor} for s in scenario.straggler if s.rank is None]
    if persistent:
        out["stragglers"] = persistent
    if transient:
        out["transient_stragglers"] = transient
    longest = sum(f + b for f, b in times_ns)
    if scenario.model.rank_times == "sampled":
        pool = scenario_pool(scenario, model, times_ns)
        if scenario.model.overheads:  # the capture's framework gaps and optimizer step, as the median replay has them
            from .overheads import overheads_ns

            pool = dataclasses.replace(pool, vectors=pool.vectors + overheads_ns(Path(str(scenario.model.profile)), model,
                                                                               scenario.model.profile_job))
        out["compute_pool"] = [{"fwd_ns": v[:, 0].tolist(), "bwd_ns": v[:, 1].tolist()} for v in pool.vectors]
        assign = pool.assignment(scenario.workers)
        if assign:
            out["compute_assign"] = assign
        longest = max(longest, int(pool.totals_ns.max()))
    slowest = float(np.prod([s.factor for s in scenario.straggler if s.factor > 1])) if scenario.straggler else 1.0
    if out and longest * scenario.iterations * slowest * (1 + 6 * scenario.jitter) >= limit_ns:
        raise ScenarioError(
            f"the compute of {scenario.iterations} iterations with stragglers x{slowest:g} would overflow the engine's "
            f"64-bit nanosecond clock (limit {limit_ns} ns); use fewer iterations or smaller straggler factors")
    return out


def scenario_pool(scenario: "Scenario", model: "Model", times_ns: list[tuple[int, int]], base_dir: str | None = None) -> ComputePool:
    """The pool of the scenario's event-log profile (model.profile), with its compute speedup."""
    from .model_build import sped_up

    path = Path(str(scenario.model.profile))
    base = base_dir or scenario.base_dir
    if base and not path.is_absolute():
        path = Path(base) / path
    scale = [1.0 / scenario.model.compute_speedup if sped_up(layer, scenario.model) else 1.0 for layer in model.layers]
    return compute_pool(path, model, times_ns, scale, job=scenario.model.profile_job)


def expected_max(samples, n: int) -> tuple[float, float]:
    """Mean and standard deviation of the maximum of `n` independent uniform
    draws (with replacement) from `samples`: with x_(1) <= ... <= x_(m),
    P(max <= x_(k)) = (k / m)^n."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    m = len(x)
    k = np.arange(1, m + 1, dtype=np.float64)
    weight = (k / m) ** n - ((k - 1) / m) ** n
    mean = float((weight * x).sum())
    return mean, float(np.sqrt(max(0.0, (weight * x * x).sum() - mean * mean)))


def compute_part_ns(columns) -> np.ndarray:
    """Per iteration (ascending): from its first forward start to its last
    backward end over the workers, ns: the slowest rank's compute when a
    barrier starts every rank together."""
    kind, op, role = columns.column("kind"), columns.column("op"), columns.column("role")
    rows = (kind == "compute") & np.isin(op, ["forward", "backward"]) & (role == "worker")
    it = columns.column("iteration").astype(np.int64)[rows]
    start, end = columns.column("start_ns")[rows].astype(np.int64), columns.column("end_ns")[rows].astype(np.int64)
    numbers, inverse = np.unique(it, return_inverse=True)
    first = np.full(len(numbers), np.iinfo(np.int64).max)
    last = np.zeros(len(numbers), dtype=np.int64)
    np.minimum.at(first, inverse, start)
    np.maximum.at(last, inverse, end)
    return last - first
