"""Runs a scenario on the engine: scenario -> event log."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .. import _core
from ..errors import InternalError, ScenarioError
from ..workload.model import Model
from . import budget
from .lowering import engine_json, network_document, resolve_trace_detail, training_document
from .model_build import build_model, layer_times_ns
from .scenario import Scenario, load_scenario, scenario_from_dict, with_overrides


@dataclass
class SimulationRun:
    """What one simulation produced: the resolved scenario, the model, the
    event log (`events`) and the engine's counters."""

    scenario: Scenario
    model: Model
    events: pd.DataFrame
    stats: dict[str, Any]
    engine_document: dict = field(repr=False)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)


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
    return with_overrides(base, overrides) if overrides else base


def run_scenario(scenario: Scenario | dict | str | Path | None = None, **overrides: Any) -> SimulationRun:
    """Simulates a training job and returns its event log."""
    sc = _resolve(scenario, overrides)
    model = build_model(sc.model, sc.base_dir)
    times = layer_times_ns(model, sc.model)
    training = training_document(sc, model, times)
    network = network_document(sc)
    detail = resolve_trace_detail(sc, len(training["groups"]))
    control = budget.current_control()
    budget.check(budget.estimate(sc, len(training["layers"]), len(training["groups"]), detail), sc, detail, control)
    t0 = time.perf_counter()
    try:
        out = _core.simulate_training_json(engine_json(training), engine_json(network), detail, control.progress)
    except ValueError as exc:
        raise ScenarioError(f"the engine rejected the scenario: {exc}") from None
    except BaseException as exc:  # RuntimeError or a Rust panic (PanicException derives from BaseException)
        if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        raise InternalError(f"engine: {exc}", save_crash_scenario(sc)) from None
    wall = time.perf_counter() - t0
    events = events_frame(out["columns"], out["op_names"], model, sc.workers)
    stats = {k: out[k] for k in ("events", "transfers", "recomputations", "makespan_ns", "bytes_sent", "bytes_received")}
    document = {"training": training, "network": network, "trace_detail": detail}
    result = SimulationRun(scenario=sc, model=model, events=events, stats=stats, engine_document=document, wall_s=wall)
    result.notes.extend(sc.migration_notes)
    if sc.trace_detail == "auto" and detail == "collective":
        result.notes.append(
            f"collective steps were simulated but not logged ({stats['transfers']:,} transfers); "
            "the log has one row per rank per all-reduce. Use --trace-detail step to log every step"
        )
    return result


def _column(columns: dict, name: str) -> np.ndarray:
    dtype, raw = columns[name]
    return np.frombuffer(raw, dtype=np.dtype(dtype))


# The engine's kinds (schema v2) as this event-log schema names them: a
# message's send and recv rows become one transfer row (delivered at the
# recv row's end), and deps on a recv row point at that transfer row.
_V1_KIND = {"compute": "compute", "send": "transfer", "collective": "collective", "barrier": "barrier", "marker": "barrier"}


def events_frame(columns: dict, op_names: list[str], model: Model, workers: int) -> pd.DataFrame:
    """The engine's raw columns as an event-log DataFrame."""
    kinds = np.array(_core.KIND_NAMES, dtype=object)[_column(columns, "kind_code")]
    ids = _column(columns, "id")
    message = _column(columns, "message")
    end = _column(columns, "end_ns").copy()
    is_send = kinds == "send"
    is_recv = kinds == "recv"
    send_pos = np.flatnonzero(is_send)
    recv_pos = np.flatnonzero(is_recv)
    order = np.argsort(message[send_pos], kind="stable")
    sends_by_message = send_pos[order]
    match = sends_by_message[np.searchsorted(message[send_pos][order], message[recv_pos])]
    end[match] = _column(columns, "end_ns")[recv_pos]
    remap = np.arange(int(ids.max()) + 1 if len(ids) else 0, dtype=np.int64)
    remap[ids[recv_pos]] = ids[match]
    offsets = _column(columns, "dep_offsets")
    deps_all = pa.ListArray.from_arrays(pa.array(offsets), pa.array(remap[_column(columns, "deps")]))
    keep = np.flatnonzero(~is_recv)
    deps = deps_all.take(pa.array(keep))
    rank = _column(columns, "rank")[keep]
    layer = _column(columns, "layer")[keep]
    tensor = _column(columns, "tensor")[keep]
    layer_names = np.array([layer.name for layer in model.layers] + [""], dtype=object)
    tensor_names = np.array([t.name for t in model.tensors] + [""], dtype=object)
    op = np.array(op_names, dtype=object)[_column(columns, "op_code")[keep]]
    name = np.where(tensor >= 0, tensor_names[tensor], layer_names[layer])
    name = np.where(op == "barrier", "barrier", name)
    n = len(keep)
    null_int = pd.array([pd.NA] * n, dtype="Int64") if n else pd.array([], dtype="Int64")
    frame = pd.DataFrame(
        {
            "id": ids[keep],
            "iteration": _column(columns, "iteration")[keep],
            "rank": rank,
            "role": np.where(rank < workers, "worker", "server").astype(object),
            "kind": pd.Series(kinds[keep]).map(_V1_KIND).to_numpy(dtype=object),
            "op": op,
            "name": name,
            "layer": layer,
            "tensor": tensor,
            "peer": _column(columns, "peer")[keep],
            "bytes": _column(columns, "bytes")[keep],
            "priority": _column(columns, "priority")[keep],
            "collective": _column(columns, "collective")[keep],
            "step": _column(columns, "step")[keep],
            "rpc": _column(columns, "rpc")[keep],
            "ready_ns": _column(columns, "ready_ns")[keep],
            "start_ns": _column(columns, "start_ns")[keep],
            "end_ns": end[keep],
            "deps": deps.to_pandas(zero_copy_only=False),
        }
    )
    for col in ("w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns"):
        frame[col] = null_int.copy()
    return frame


def save_crash_scenario(sc: Scenario) -> str | None:
    """Writes the scenario for a bug report; returns its path, None if that failed too."""
    try:
        fd, path = tempfile.mkstemp(prefix="ddlsim-crash-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(scenario_json(sc) + "\n")
        return path
    except OSError:
        return None


def scenario_json(sc: Scenario) -> str:
    return json.dumps(sc.model_dump(exclude={"base_dir"}), sort_keys=True)
