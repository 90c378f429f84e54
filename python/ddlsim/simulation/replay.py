"""Replay: the run an event log recorded, as a scenario to simulate again,
under its own conditions or other ones.

The replayed job is the data-parallel iteration the log shows: its model
(the recorded scenario's for a simulated log, a zoo model by name for an
imported or captured one), its worker count, and each layer's forward and
backward time as the log measured them (the median over workers and
iterations, see :func:`ddlsim.workload.profile.layer_times_from_log`).
Communication is not replayed: it is lowered again under the scenario's
strategy and network, which is the point — "what would this job have done
on another network, or with another synchronisation?".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..errors import DdlsimError
from .scenario import Scenario, scenario_from_dict, with_overrides

# What the recorded layer times already contain, so a replay must not apply it again.
_TIME_FIELDS = ("device", "precision", "efficiency", "compute", "compute_speedup", "speedup_kinds", "profile")


def recorded_metadata(path: Path) -> dict[str, Any]:
    """The event log's metadata (no rows read)."""
    from ..trace.parquet import read_log_metadata

    return read_log_metadata(path)


def replay_scenario(log_path: str | Path, model: Optional[str] = None, **overrides: Any) -> Scenario:
    """The scenario that replays the run in `log_path` (an events.parquet),
    with `overrides` (as :func:`ddlsim.simulate` takes them) applied."""
    return replay_plan(log_path, model=model, **overrides)[0]


def replay_plan(log_path: str | Path, model: Optional[str] = None, **overrides: Any) -> tuple[Scenario, list[str]]:
    """:func:`replay_scenario`, with the notes that say what the replay took
    from the log and what it assumed (its gradient groups and link bandwidth):
    ``ddlsim replay`` prints them, :func:`ddlsim.replay` keeps them in the
    result's notes."""
    path = Path(log_path)
    if not path.is_file():
        raise DdlsimError(f"{path}: event log not found; give the events.parquet of a run (ddlsim simulate --out, a capture, "
                          "or ddlsim convert)")
    if path.suffix != ".parquet":
        raise DdlsimError(f"{path}: replay reads an event log in Parquet; convert other formats first: "
                          f"ddlsim convert {path} {path.with_suffix('.parquet').name}")
    meta = recorded_metadata(path)
    recorded = meta.get("scenario") if isinstance(meta.get("scenario"), dict) else None
    notes: list[str] = []
    if recorded is not None and (model is None or model == recorded.get("model", {}).get("name")):
        data = {k: v for k, v in recorded.items() if k != "base_dir"}
        data["model"] = {k: v for k, v in data.get("model", {}).items() if k not in _TIME_FIELDS}
        origin = "the recorded scenario's"
    else:
        name = model or meta.get("model")
        if not name:
            raise DdlsimError(f"{path}: the log does not say which model ran; give it with --model (a zoo model, see ddlsim models)")
        workers, iterations = _workers_and_iterations(path)
        settings = capture_settings(meta)
        if meta.get("source") == "capture" and meta.get("job") == "ddp":
            buckets, group_note = captured_buckets(meta, str(name))
            if buckets is not None:
                settings["strategy"]["grouping"] = {"kind": "groups", "groups": buckets}
            if "grouping" not in overrides:
                notes.append(group_note)
        data = {"model": {"name": str(name)}, "workers": workers, "iterations": iterations, **settings}
        origin = "the capture's shaped" if "network" in settings else None
    data["model"]["profile"] = str(path.resolve())
    scenario = with_overrides(scenario_from_dict(data, origin=f"{path} (recorded scenario)"), overrides)
    notes.append(_bandwidth_note(scenario, overrides, origin))
    return scenario, notes


def _bandwidth_note(scenario: Scenario, overrides: dict[str, Any], origin: Optional[str]) -> str:
    rate = f"{scenario.network.bandwidth} ({scenario.network.bandwidth_bps / 1e9:g} Gbit/s)"
    if "bandwidth" in overrides or "bandwidth" in (overrides.get("network") or {}):
        return f"replay: link bandwidth {rate}, as given"
    if origin is not None:
        return f"replay: link bandwidth {rate}, {origin} link rate"
    return (f"replay: link bandwidth {rate} ASSUMED (the scenario default): the log does not record its link rate "
            "(an unshaped capture); give --bandwidth to replay the rate it ran at")


def captured_buckets(meta: dict[str, Any], model: str) -> tuple[Optional[list[list[str]]], str]:
    """A DDP capture's own buckets (its last layout), as lists of tensor names
    of the zoo `model`, and a note saying so; (None, note) when the capture
    does not record them or they name tensors the zoo model lacks (the replay
    then derives them with DDP's rule from the capture's bucket cap)."""
    buckets, parameters = meta.get("buckets") or [], meta.get("parameters") or []
    cap = meta.get("bucket_cap_mb") or 25
    fallback = f"re-derived by DDP's rule from the capture's bucket cap ({cap:g} MiB)"
    if not buckets or not parameters:
        return None, f"replay: gradient buckets {fallback}: the capture does not record its buckets"
    try:
        names = [[str(parameters[int(t)]["name"]) for t in b["tensors"]] for b in buckets]
    except (KeyError, IndexError, TypeError, ValueError):
        return None, f"replay: gradient buckets {fallback}: the capture's bucket table does not match its parameter list"
    from ..errors import ModelError
    from ..workload import load_model

    try:
        known = {t.name for t in load_model(model).tensors}
    except (ModelError, OSError):
        return None, f"replay: gradient buckets {fallback}"
    missing = [n for group in names for n in group if n not in known]
    if missing:
        return None, (f"replay: gradient buckets {fallback}: the captured buckets name tensors that zoo model {model} "
                      f"does not have (e.g. {missing[0]!r})")
    sizes = ", ".join(f"{int(b.get('bytes', 0)) / 2**20:.2f}" for b in buckets)
    return names, f"replay: gradient buckets = the capture's {len(names)} DDP buckets ({sizes} MiB), not re-derived"


def capture_settings(meta: dict[str, Any]) -> dict[str, Any]:
    """What a capture's metadata says about how it synchronised and on which
    links: the strategy (DDP buckets with their cap, or the parameter servers,
    their placement and sync mode) and a shaped link's bandwidth. Anything the capture does not say keeps the scenario default."""
    if meta.get("source") != "capture":
        return {}
    data: dict[str, Any] = {}
    job = meta.get("job")
    if job == "ddp":
        cap = meta.get("bucket_cap_mb")
        data["strategy"] = {"kind": "ring", "grouping": {"kind": "ddp", **({"bucket_cap_mb": cap} if cap else {})}}
    elif job == "ps":
        strategy: dict[str, Any] = {"kind": "ps", "servers": int(meta.get("servers", 1))}
        if meta.get("placement") in ("round-robin", "size-balanced"):
            strategy["placement"] = meta["placement"]
        if meta.get("sync") is False:
            strategy["asynchronous"] = True
        data["strategy"] = strategy
    if meta.get("bandwidth"):
        data["network"] = {"bandwidth": str(meta["bandwidth"])}
    return data


def _workers_and_iterations(path: Path) -> tuple[int, int]:
    """How many worker ranks and iterations the log shows."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["rank", "role", "iteration"])
    ranks, iterations = table.column("rank").to_numpy(), table.column("iteration").to_numpy()
    workers = np.asarray(table.column("role").to_pylist(), dtype=object) == "worker"
    if not workers.any():
        raise DdlsimError(f"{path}: no worker rows, so no workers to replay")
    return int(len(np.unique(ranks[workers]))), max(1, int(len(np.unique(iterations[workers & (iterations >= 0)]))))

