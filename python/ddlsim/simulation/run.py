"""Runs a scenario on the engine: scenario -> event log."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _core
from ..errors import ScenarioError, from_engine_error
from ..trace.columns import ArrayLog
from ..workload.model import Model
from . import budget
from .bridge import event_log_from_engine, raw_column
from .lowering import engine_json, network_document, resolve_trace_detail, training_document
from .model_build import build_model, layer_times_ns
from .scenario import Scenario, load_scenario, scenario_from_dict, with_overrides

if TYPE_CHECKING:
    from ..trace.schema import EventLog


@dataclass
class SimulationRun:
    """What one simulation produced: the resolved scenario, the model, the
    event log (`events`, validated when first used; `columns` without
    pyarrow) and the engine's counters."""

    scenario: Scenario
    model: Model
    columns: ArrayLog
    stats: dict[str, Any]
    engine_document: dict = field(repr=False)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @cached_property
    def events(self) -> "EventLog":
        from ..trace.schema import event_log_from_array_log

        return event_log_from_array_log(self.columns)


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


def _prepare(sc: Scenario, announce: bool) -> tuple[Model, dict, dict, str, "budget.RunControl"]:
    """Everything a simulation needs before the engine runs: the model, the
    engine's documents, the trace detail, and the budget's admission (a
    ScenarioError where the scenario cannot run, e.g. an unknown model or a
    run over budget). `announce`: tell the run control a run starts."""
    if sc.job:
        raise ScenarioError("the scenario has [[job]] tables (several jobs on one fabric): run it with "
                            "ddlsim.simulate_jobs or `ddlsim simulate` (docs/jobs.md)")
    if "job_stagger" in sc.model_fields_set and sc.job_stagger not in (0, "0s"):
        raise ScenarioError(f"job_stagger = {sc.job_stagger!r} staggers the starts of [[job]] tables, but the scenario has "
                            "none; remove job_stagger (--job-stagger) or add [[job]] tables (docs/jobs.md)")
    model = build_model(sc.model, sc.base_dir)
    times = layer_times_ns(model, sc.model)
    training = training_document(sc, model, times)
    network = network_document(sc)
    detail = resolve_trace_detail(sc, [g["bytes"] for g in training["groups"]])
    control = budget.current_control()
    compute_ns = sum(f + b for f, b in times)
    # Closed form: alike workers run once per class; the estimate counts the classes.
    classes = _core.rank_class_sizes(engine_json(training), engine_json(network)) if training.get("rank_classes") else None
    budget.check(budget.estimate(sc, len(training["layers"]), [g["bytes"] for g in training["groups"]], detail,
                                 network.get("tenants"), compute_ns, classes), sc, detail, control, announce=announce)
    return model, training, network, detail, control


def check_runnable(scenario: Scenario) -> None:
    """Refuses (ScenarioError) a scenario that `run_scenario` would refuse
    before simulating, without simulating it: what a sweep checks of every
    point before it writes or runs anything."""
    _prepare(scenario, announce=False)


def run_scenario(scenario: Scenario | dict | str | Path | None = None, **overrides: Any) -> SimulationRun:
    """Simulates a training job and returns its event log."""
    sc = _resolve(scenario, overrides)
    model, training, network, detail, control = _prepare(sc, announce=True)
    t0 = time.perf_counter()
    try:
        out = _core.simulate_training_json(engine_json(training), engine_json(network), detail, control.progress)
    except _core.EngineError as exc:
        raise from_engine_error(exc, lambda: save_crash_scenario(sc)) from None
    except BaseException as exc:  # a Rust panic (PanicException derives from BaseException)
        if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        raise from_engine_error(exc, lambda: save_crash_scenario(sc)) from None
    wall = time.perf_counter() - t0
    algorithm = getattr(sc.strategy, "algorithm", "") if sc.strategy.kind == "ring" else ""
    columns = event_log_from_engine(
        out,
        model=model,
        workers=sc.workers,
        host_of_rank=training["host_of_rank"],
        algorithm=algorithm.replace("-", "_"),
        groups=training["groups"],
        metadata={"source": "simulate", "scenario": json.loads(scenario_json(sc)), "model": model.name},
        rank_classes=out.get("rank_classes"),
    )
    stats = {k: out[k] for k in ("events", "transfers", "recomputations", "makespan_ns", "bytes_sent", "bytes_received")}
    document = {"training": training, "network": network, "trace_detail": detail}
    result = SimulationRun(scenario=sc, model=model, columns=columns, stats=stats, engine_document=document, wall_s=wall)
    result.notes.extend(sc.migration_notes)
    if out.get("rank_classes"):
        classes = len(raw_column(out["rank_classes"], "sizes"))
        result.notes.append(
            f"{sc.workers:,} workers simulated and logged as {classes:,} rank class(es) of alike workers "
            "(column class_size); ddlsim convert --expand gives the per-rank log, --per-rank simulates every worker"
        )
    if sc.trace_detail == "auto" and detail == "collective":
        result.notes.append(
            f"collective steps were simulated but not logged ({stats['transfers']:,} transfers); "
            "the log has one row per rank per all-reduce. Use --trace-detail step to log every step"
        )
    return result


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
