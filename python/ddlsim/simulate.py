"""`simulate`: scenario -> event log (+ iteration table and summary)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from . import _core
from .analyze.breakdown import iteration_table
from .analyze.rpc import fill_rpc_breakdown, rpc_table
from .errors import ScenarioError
from .scenario import Scenario, load_scenario, scenario_from_dict, with_overrides
from .strategy import engine_document, engine_json
from .workload.build import build_model, layer_times_ns
from .workload.model import Model


@dataclass
class SimulationResult:
    """What one simulation produced. `events` is the event log."""

    scenario: Scenario
    model: Model
    events: pd.DataFrame
    stats: dict[str, Any]
    engine_document: dict = field(repr=False)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """Per-iteration time and breakdown (see ddlsim.analyze.breakdown)."""
        return iteration_table(self.events)

    @cached_property
    def rpcs(self) -> pd.DataFrame:
        """Per-RPC latency breakdown (PS only; see ddlsim.analyze.rpc)."""
        return rpc_table(self.events)

    @property
    def iteration_time_s(self) -> float:
        return float(self.iterations["time_s"].mean())

    def summary(self) -> dict[str, Any]:
        """Machine-readable summary (the CLI's --json)."""
        it = self.iterations
        sc = self.scenario
        workers = sc.workers
        sent = np.asarray(self.stats["bytes_sent"], dtype=np.int64)
        return {
            "model": self.model.name,
            "parameters": self.model.parameters,
            "model_bytes": self.model.size_bytes,
            "workers": workers,
            "servers": sc.ps.servers if sc.strategy == "ps" else 0,
            "strategy": sc.strategy,
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
            "log_rows": int(len(self.events)),
            "wall_s": self.wall_s,
            "notes": list(self.notes),
        }

    def save(self, out_dir: str | Path, timeline: bool = True) -> dict[str, Path]:
        """Writes events.parquet, trace.json (Perfetto), iterations.csv,
        summary.json and timeline.png into `out_dir`; returns the paths."""
        from .output import save_result

        return save_result(self, Path(out_dir), timeline=timeline)


def _resolve(scenario: Scenario | dict | str | Path | None, overrides: dict[str, Any]) -> Scenario:
    if scenario is None:
        base = Scenario()
    elif isinstance(scenario, Scenario):
        base = scenario
    elif isinstance(scenario, dict):
        base = scenario_from_dict(scenario)
    elif isinstance(scenario, (str, Path)):
        base = load_scenario(scenario)
    else:
        raise ScenarioError(f"scenario must be a Scenario, dict or TOML path, not {type(scenario).__name__}")
    nested = {k: v for k, v in overrides.items() if isinstance(v, dict)}
    flat = {k: v for k, v in overrides.items() if not isinstance(v, dict)}
    if nested:
        data = base.model_dump(exclude={"base_dir"})
        for key, value in nested.items():
            if isinstance(data.get(key), dict):
                data[key].update(value)
            else:
                data[key] = value
        base = scenario_from_dict(data, origin="arguments").model_copy(update={"base_dir": base.base_dir})
    return with_overrides(base, flat) if flat else base


def simulate(scenario: Scenario | dict | str | Path | None = None, **overrides: Any) -> SimulationResult:
    """Simulates a training job and returns its event log and analysis.

    >>> r = simulate(model="resnet50", workers=8, strategy="ring", bandwidth="10Gbps")
    >>> r.iteration_time_s  # doctest: +SKIP
    """
    sc = _resolve(scenario, overrides)
    model = build_model(sc.model, sc.base_dir)
    times = layer_times_ns(model, sc.model)
    document = engine_document(sc, model, times)
    t0 = time.perf_counter()
    try:
        columns, stats = _core.simulate_training_json(engine_json(document))
    except ValueError as exc:
        raise ScenarioError(f"the engine rejected the scenario: {exc}") from None
    wall = time.perf_counter() - t0
    events = events_frame(columns, model, sc.workers)
    if sc.strategy == "ps":
        events = fill_rpc_breakdown(events)
    result = SimulationResult(scenario=sc, model=model, events=events, stats=dict(stats), engine_document=document, wall_s=wall)
    if sc.trace_detail == "auto" and document["trace_detail"] == "collective":
        result.notes.append(
            f"ring steps were simulated but not logged ({stats['transfers']:,} transfers); "
            "the log has one row per rank per all-reduce. Use --trace-detail step to log every step"
        )
    return result


def _column(columns: dict, name: str) -> np.ndarray:
    dtype, raw = columns[name]
    return np.frombuffer(raw, dtype=np.dtype(dtype))


def events_frame(columns: dict, model: Model, workers: int) -> pd.DataFrame:
    """The engine's raw columns as an event-log DataFrame (schema v1)."""
    kinds = np.array(_core.KIND_NAMES, dtype=object)
    ops = np.array(_core.OP_NAMES, dtype=object)
    rank = _column(columns, "rank")
    layer = _column(columns, "layer")
    tensor = _column(columns, "tensor")
    layer_names = np.array([layer.name for layer in model.layers] + [""], dtype=object)
    tensor_names = np.array([t.name for t in model.tensors] + [""], dtype=object)
    op = ops[_column(columns, "op_code")]
    name = np.where(tensor >= 0, tensor_names[tensor], layer_names[layer])
    name = np.where(op == "barrier", "barrier", name)
    offsets = _column(columns, "dep_offsets")
    deps_values = _column(columns, "deps")
    deps = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32) if offsets[-1] < 2**31 else offsets), pa.array(deps_values))
    n = len(rank)
    null_int = pd.array([pd.NA] * n, dtype="Int64") if n else pd.array([], dtype="Int64")
    frame = pd.DataFrame(
        {
            "id": _column(columns, "id"),
            "iteration": _column(columns, "iteration"),
            "rank": rank,
            "role": np.where(rank < workers, "worker", "server").astype(object),
            "kind": kinds[_column(columns, "kind_code")],
            "op": op,
            "name": name,
            "layer": layer,
            "tensor": tensor,
            "peer": _column(columns, "peer"),
            "bytes": _column(columns, "bytes"),
            "priority": _column(columns, "priority"),
            "collective": _column(columns, "collective"),
            "step": _column(columns, "step"),
            "rpc": _column(columns, "rpc"),
            "ready_ns": _column(columns, "ready_ns"),
            "start_ns": _column(columns, "start_ns"),
            "end_ns": _column(columns, "end_ns"),
            "deps": deps.to_pandas(zero_copy_only=False),
        }
    )
    for col in ("w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns"):
        frame[col] = null_int.copy()
    return frame


def scenario_json(sc: Scenario) -> str:
    return json.dumps(sc.model_dump(exclude={"base_dir"}), sort_keys=True)
