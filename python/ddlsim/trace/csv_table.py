"""The event log as one CSV table (write only): every column, ``deps`` as space-separated ids."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .parquet import atomic_output
from .schema import EventLog, validate_event_log


def write_csv(log: Any, path: str | os.PathLike[str]) -> Path:
    """Write every row and column of ``log`` to ``path`` (atomically); ``deps``
    becomes space-separated ids ('' for none and for unknown), nulls empty cells."""
    if not isinstance(log, EventLog) or not log.is_validated:
        log = validate_event_log(log, source="event log for CSV export", check_causality=False)
    path = Path(path)
    frame = log.to_pandas()
    frame["deps"] = frame["deps"].map(lambda deps: "" if deps is None else " ".join(str(int(d)) for d in deps))
    with atomic_output(path) as temporary:
        frame.to_csv(temporary, index=False)
    return path
