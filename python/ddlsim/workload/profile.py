"""Measured per-layer compute profiles (CSV: layer, fwd_ms, bwd_ms)."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

from ..errors import ModelError
from .model import Model

REQUIRED = ("layer", "fwd_ms", "bwd_ms")


def apply_profile(model: Model, path: str | Path) -> Model:
    """Returns `model` with per-layer times taken from the CSV at `path`.

    Every layer of the model must appear exactly once (by name); times are
    milliseconds per iteration at the profiled batch size.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: profile file not found; give a CSV with columns {', '.join(REQUIRED)}")
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
    names = [layer.name for layer in model.layers]
    unknown = sorted(set(times) - set(names))
    if unknown:
        raise ModelError(f"{path}: layer(s) not in model {model.name}: {', '.join(unknown[:5])}")
    absent = [n for n in names if n not in times]
    if absent:
        raise ModelError(
            f"{path}: {len(absent)} layer(s) of {model.name} have no times, first: {absent[0]!r}; "
            "list every layer (see `ddlsim models --layers NAME`)"
        )
    layers = tuple(dataclasses.replace(layer, fwd_s=times[layer.name][0], bwd_s=times[layer.name][1]) for layer in model.layers)
    return dataclasses.replace(model, layers=layers)
