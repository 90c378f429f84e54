"""Compute after a wait (docs/validation.md, "Compute after a wait"): a CPU training thread that idled computes
more slowly for a while, and a DDP rank idles while its last all-reduce is on the wire (16 ms per iteration for
LeNet-5 at 100 Mbit/s, 0.7 ms at 1 Gbit/s). A replay carries each row's captured time, so a capture made at one
link carries the slowdown of that link's wait to another.

The **idle curve** r(t), per op class (``step``: the optimizer step, ``forward``, ``backward``), is the ratio of
the class's time after the thread waited t to its time after no wait, measured apart by a microbenchmark: the
optimizer step, then a forward and a backward, timed right after a sleep of t (``benchmarks/idle_wake.py``, and
``ddlsim capture ddp`` on each rank after training). Piecewise linear through the measured medians, flat outside
them.

The replay scales each of a worker's forward and backward ops of an iteration by r(t) / r(t_c) of its class
(the engine's ``idle_wake``, crates/ddlsim-core/src/lower/idle_wake.rs): t is the idle the replay's compute stream
had before the iteration (from its previous compute op's end to the iteration's first op's start: the wait for
the last all-reduce), t_c the idle the capture measured there
(:func:`ddlsim.simulation.overheads.captured_idle_ns`). The first layer's forward op also holds the optimizer step (:func:`ddlsim.simulation.overheads.with_overheads`): its curve is the
step's and the forward's, weighted by their shares of it.

Nothing here is fitted to the captured job's own iteration times: the curve is the microbenchmark's, t_c the
capture's rows' idle, t the replay's.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DdlsimError
from ..inputs import input_file

CLASSES = ("step", "forward", "backward")
# trial columns (benchmarks/idle_wake.py --out): the wait and each class's time
TRIAL_FIELDS = ("idle_ms", "step_ms", "forward_ms", "backward_ms")


def curve_from_trials(trials: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """The idle curve of microbenchmark trials (each: ``idle_ms``, ``step_ms``, ``forward_ms``, ``backward_ms``;
    a ``mode`` of ``spin`` is left out: a rank blocked on its all-reduce sleeps): per class, per idle length, the
    median time over the trials, as a ratio to the median at the shortest idle. Raises ValueError (a message
    without the file's name) where the trials do not give one."""
    kept = [t for t in trials if str(t.get("mode", "sleep")) != "spin"]
    if not kept:
        raise ValueError("no trial waited by sleeping (mode sleep); run the benchmark with --modes sleep")
    by_idle: dict[float, list[dict[str, Any]]] = {}
    for t in kept:
        by_idle.setdefault(float(t["idle_ms"]), []).append(t)
    idles = sorted(by_idle)
    if len(idles) < 2:
        raise ValueError(f"the trials wait {len(idles)} idle length(s); a curve needs at least 2 (e.g. --idles 0,0.5,2,8,16,32)")
    out: dict[str, Any] = {"source": source, "trials": len(kept)}
    for cls in CLASSES:
        medians = [statistics.median(float(t[f"{cls}_ms"]) for t in by_idle[i]) for i in idles]
        for idle, median in zip(idles, medians):  # a ratio of 0 would make the replayed compute take no time
            if median <= 0:
                raise ValueError(f"the {cls} at idle {idle:g} ms has a median of {median + 0.0:g} ms; it must be > 0")
        out[cls] = [[i, m / medians[0]] for i, m in zip(idles, medians)]
    return out


def read_curve(path: str | Path) -> dict[str, Any]:
    """The idle curve of a ``benchmarks/idle_wake.py --out`` CSV (its trials; :func:`curve_from_trials`).
    Bad input: a :class:`DdlsimError` naming the file, the row or field, and the fix."""
    path = Path(path)
    fix = "give the CSV that benchmarks/idle_wake.py --out writes"
    input_file(path, "idle curve", fix)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in TRIAL_FIELDS if c not in (reader.fieldnames or [])]
            if missing:
                raise DdlsimError(f"{path}: no column {missing[0]!r} (an idle curve needs {', '.join(TRIAL_FIELDS)}); {fix}")
            trials = []
            for line, row in enumerate(reader, start=2):
                trial = {"mode": row.get("mode") or "sleep"}
                for c in TRIAL_FIELDS:
                    try:
                        value = float(row[c])
                    except (TypeError, ValueError):
                        raise DdlsimError(f"{path}, line {line}: {c} = {row[c]!r} is not a number; {fix}") from None
                    if not math.isfinite(value) or value < 0:
                        raise DdlsimError(f"{path}, line {line}: {c} = {row[c]!r} must be a finite number >= 0; {fix}")
                    trial[c] = value
                trials.append(trial)
    except OSError as exc:
        raise DdlsimError(f"{path}: cannot read the idle curve ({exc.strerror or exc}); {fix}") from None
    except UnicodeDecodeError:
        raise DdlsimError(f"{path}: not a text CSV; {fix}") from None
    except csv.Error as exc:  # e.g. a field over csv's 131,072 characters (found by tools/fuzz_readers.py)
        raise DdlsimError(f"{path}: not a readable CSV ({exc}); {fix}") from None
    try:
        return curve_from_trials(trials, source=str(path))
    except ValueError as exc:
        raise DdlsimError(f"{path}: {exc}") from None


def check_curve(curve: Any, where: str) -> dict[str, Any]:
    """`curve` as a scenario's ``model.idle_wake`` holds it (``step``, ``forward``, ``backward``: lists of
    [idle ms, ratio], idle strictly ascending, ratio finite and > 0; ``source`` optional), or a ValueError naming
    `where` and the field."""
    if not isinstance(curve, dict):
        raise ValueError(f"{where} must be a table with step, forward and backward curves")
    unknown = sorted(set(curve) - set(CLASSES) - {"source", "trials", "captured_ms", "replayed_ms"})
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field; give step, forward and backward (and source)")
    out: dict[str, Any] = {k: curve[k] for k in ("source", "trials") if k in curve}
    for key in ("captured_ms", "replayed_ms"):  # the capture's idle from its rows, its own replay's (see below)
        if key in curve:
            v = curve[key]
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{where}.{key} = {v!r}: give an idle >= 0 in ms")
            out[key] = float(v)
    for cls in CLASSES:
        points = curve.get(cls)
        if not isinstance(points, (list, tuple)) or not points:
            raise ValueError(f"{where}.{cls} must be a non-empty list of [idle ms, ratio] points")
        clean = []
        for k, p in enumerate(points):
            ok = isinstance(p, (list, tuple)) and len(p) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in p)
            if not ok or p[0] < 0 or p[1] <= 0:
                raise ValueError(f"{where}.{cls}[{k}] = {p!r}: give [idle ms >= 0, ratio > 0]")
            clean.append([float(p[0]), float(p[1])])
        if any(b[0] <= a[0] for a, b in zip(clean, clean[1:])):
            raise ValueError(f"{where}.{cls}: the idle lengths must be strictly ascending")
        out[cls] = clean
    return out


def ratio(points: list[list[float]], idle_ms: float) -> float:
    """The curve `points` ([idle ms, ratio], ascending) at `idle_ms`: linear between points, flat outside."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return float(np.interp(idle_ms, xs, ys))


def replayed_idle_ns(columns) -> float | None:
    """The idle a replay's workers' compute had before each iteration: per worker rank and iteration from the
    second on, its first forward or backward row's start less the end of its previous iteration's last one (the
    ops of the compute stream; not a collective's ``reduce`` rows, which run beside it); the median, ns. None where
    there is none (one iteration)."""
    kind = np.asarray(columns.column("kind"))
    op = np.asarray(columns.column("op"))
    rank, it = np.asarray(columns.column("rank")), np.asarray(columns.column("iteration"))
    start, end = np.asarray(columns.column("start_ns")), np.asarray(columns.column("end_ns"))
    sel = np.flatnonzero((kind == "compute") & np.isin(op, ["forward", "backward"]) & (it >= 0))
    first: dict[tuple[int, int], int] = {}
    last: dict[tuple[int, int], int] = {}
    for i in sel:
        key = (int(rank[i]), int(it[i]))
        first[key] = min(first.get(key, int(start[i])), int(start[i]))
        last[key] = max(last.get(key, int(end[i])), int(end[i]))
    idles = [max(0, s - last[(r, i - 1)]) for (r, i), s in first.items() if (r, i - 1) in last]
    return float(np.median(idles)) if idles else None


def shifted(points: list[list[float]], delta_ms: float) -> list[list[float]]:
    """The curve t -> r(t + delta) (idle ms), still piecewise linear and flat outside its points: the points move
    by -delta; those that would fall below 0 are replaced by one point at 0 with r(delta)."""
    moved = [[x - delta_ms, y] for x, y in points]
    kept = [p for p in moved if p[0] > 0]
    if len(kept) < len(moved):
        kept.insert(0, [0.0, ratio(points, delta_ms)])
    return kept


def _mixed(a: list[list[float]], b: list[list[float]], wa: float, ta: float, tb: float) -> list[list[float]]:
    """wa a(t) / a(t_c) + (1 - wa) b(t) / b(t_c) at the union of both curves' idles (piecewise linear, flat outside
    them, as both are): the curve of an op holding both parts, 1 at the captured idle."""
    xs = sorted({p[0] for p in a} | {p[0] for p in b})
    return [[x, wa * ratio(a, x) / ta + (1 - wa) * ratio(b, x) / tb] for x in xs]


def engine_document(curve: dict[str, Any], captured_ns: float, optimizer_share: float,
                    layers: int) -> dict[str, Any]:
    """The engine's ``idle_wake`` (crates/ddlsim-core/src/lower/idle_wake.rs) for a model of `layers` layers:
    curves in ns, every layer's forward on the forward curve and backward on the backward curve, but the first
    layer's forward, which holds the optimizer step (`optimizer_share` of its time), on their mix."""
    tc_ms = captured_ns / 1e6
    w = min(1.0, max(0.0, optimizer_share))
    first = _mixed(curve["step"], curve["forward"], w, ratio(curve["step"], tc_ms), ratio(curve["forward"], tc_ms))

    def ns(points):
        return [[round(x * 1e6), float(y)] for x, y in points]

    return {"curves": [ns(first), ns(curve["forward"]), ns(curve["backward"])],
            "layers": [[0, 2]] + [[1, 2]] * (layers - 1),
            "captured_ns": round(captured_ns)}
