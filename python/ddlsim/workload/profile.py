"""Measured per-layer compute profiles: a CSV (layer, fwd_ms, bwd_ms), or an
event log (captured or simulated) whose forward/backward compute rows give
each layer's times."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

from ..errors import ModelError
from ..inputs import input_file
from .model import Model

REQUIRED = ("layer", "fwd_ms", "bwd_ms")


def apply_profile(model: Model, path: str | Path, optional: set[str] | frozenset[str] = frozenset(),
                  job: int | None = None) -> Model:
    """Returns `model` with per-layer times taken from the profile at `path`:
    a CSV, or an event log (``.parquet``, see :func:`layer_times_from_log`).

    Every layer of the model must appear exactly once (by name), except the
    `optional` ones, which keep their FLOP-based times when absent; times
    are milliseconds per iteration at the profiled batch size. `job`: of an
    event log of several jobs, only that job's rows.
    """
    path = input_file(path, "profile file", f"give a CSV with columns {', '.join(REQUIRED)} or an event log (.parquet)",
                      error=ModelError)
    times = layer_times_from_log(path, job=job) if path.suffix == ".parquet" else _read_csv(path)
    return _with_times(model, times, path, optional)


def layer_times_from_log(log_or_path, job: int | None = None) -> dict[str, tuple[float, float]]:
    """Per layer name: (forward s, backward s), the median over worker ranks
    and iterations of each layer's compute time in an event log (rows with
    kind compute, op forward / backward; several rows of one layer in one
    iteration on one rank add up). The median keeps one slow iteration (a
    warm-up, a straggler) from setting the profile. `job`: only the rows of
    that job (the log's ``job`` column; a log of several jobs)."""
    import numpy as np

    from ..trace.coerce import as_columns

    source = str(log_or_path)
    if isinstance(log_or_path, (str, Path)):
        from ..trace.parquet import read_event_log

        log = read_event_log(log_or_path)
    else:
        log = as_columns(log_or_path)
    kind, op, name = log.column("kind"), log.column("op"), log.column("name")
    role = log.column("role")
    rows = (kind == "compute") & np.isin(op, ["forward", "backward"]) & (name != "")
    if job is not None:
        rows &= log.column("job") == job
        if not rows.any():
            raise ModelError(f"{source}: no forward/backward compute rows of job {job} (the log's job column), so no "
                             "layer times for it; give a job the log holds")
    if (role == "worker").any():
        rows &= role == "worker"
    rows = _without_sampled_warmup(log, rows)
    if not rows.any():
        raise ModelError(f"{source}: no forward/backward compute rows with a layer name, so no layer times; "
                         "give a log that records per-layer compute (ddlsim simulate, a capture, or a Chakra file whose "
                         "compute nodes name a layer and a phase, e.g. COMP_NODE_conv1_FWD or 'backward conv1')")
    duration = (log.column("end_ns") - log.column("start_ns"))[rows].astype(np.int64)
    keys = np.rec.fromarrays([name[rows].astype(str), op[rows].astype(str), log.column("rank")[rows], log.column("iteration")[rows]])
    unique, inverse = np.unique(keys, return_inverse=True)
    per_step = np.zeros(len(unique), dtype=np.int64)
    np.add.at(per_step, inverse, duration)
    times: dict[str, list[list[int]]] = {}
    for (layer, direction, _rank, _iteration), ns in zip(unique.tolist(), per_step.tolist()):
        times.setdefault(layer, [[], []])[0 if direction == "forward" else 1].append(ns)
    return {layer: tuple(float(np.median(v)) / 1e9 if v else 0.0 for v in fb) for layer, fb in times.items()}


def _without_sampled_warmup(log, rows):
    """`rows` without the warm-up iterations' layer rows in a capture with sampled layer rows (``layer_every`` > 1,
    ``ddlsim capture ddp --layer-every``), where the warm-up is always sampled: there it would be a large share of
    a layer's few samples (two of them when K is at least the iterations), so the median would be the warm-up's.
    The warm-up is :func:`ddlsim.analyze.breakdown.warmup_iterations` of the log's iterations, as everywhere else.
    Kept when no other iteration has layer rows. Any other log: `rows` as they are (the median over all iterations
    keeps one slow one from setting the profile)."""
    import numpy as np

    from ..analyze.breakdown import warmup_iterations

    meta = getattr(log, "metadata", None) or {}
    every = meta.get("layer_every")
    if not isinstance(every, int) or isinstance(every, bool) or every <= 1:
        return rows
    iteration = np.asarray(log.column("iteration"))
    iterations = np.unique(iteration[iteration >= 0])
    warmup = iterations[:warmup_iterations(meta, len(iterations))]
    kept = rows & ~np.isin(iteration, warmup)
    return kept if kept.any() else rows


def _read_csv(path: Path) -> dict[str, tuple[float, float]]:
    try:
        return _read_csv_rows(path)
    except UnicodeDecodeError as exc:
        raise ModelError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); a profile is a CSV "
                         f"with columns {', '.join(REQUIRED)}") from None
    except csv.Error as exc:
        raise ModelError(f"{path}: not a readable CSV ({exc}); a profile has columns {', '.join(REQUIRED)}") from None


def _read_csv_rows(path: Path) -> dict[str, tuple[float, float]]:
    times: dict[str, tuple[float, float]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ModelError(f"{path}: missing column(s) {', '.join(missing)}; the header must be {','.join(REQUIRED)}")
        for line, row in enumerate(reader, start=2):
            name = (row["layer"] or "").strip()
            try:
                fwd, bwd = float(row["fwd_ms"]), float(row["bwd_ms"])
            except (TypeError, ValueError):
                raise ModelError(f"{path}:{line}: fwd_ms/bwd_ms must be numbers, got {row['fwd_ms']!r}, {row['bwd_ms']!r}") from None
            if not (math.isfinite(fwd) and math.isfinite(bwd)) or fwd < 0 or bwd < 0:
                raise ModelError(f"{path}:{line}: times must be finite and >= 0")
            if name in times:
                raise ModelError(f"{path}:{line}: layer {name!r} appears twice")
            times[name] = (fwd / 1e3, bwd / 1e3)
    return times


def _with_times(model: Model, times: dict[str, tuple[float, float]], path: Path, optional: set[str] | frozenset[str]) -> Model:
    names = [layer.name for layer in model.layers]
    unknown = sorted(set(times) - set(names))
    if unknown:
        raise ModelError(f"{path}: layer(s) not in model {model.name}: {', '.join(unknown[:5])}")
    absent = [n for n in names if n not in times and n not in optional]
    if absent:
        raise ModelError(
            f"{path}: {len(absent)} layer(s) of {model.name} have no times, first: {absent[0]!r}; "
            "list every layer (see `ddlsim models --layers NAME`)"
        )
    layers = tuple(dataclasses.replace(layer, fwd_s=times[layer.name][0], bwd_s=times[layer.name][1]) if layer.name in times else layer
                   for layer in model.layers)
    return dataclasses.replace(model, layers=layers)
