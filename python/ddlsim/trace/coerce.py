"""Analysis input as anything that answers column()/codes(), without importing pyarrow when it already does."""

from __future__ import annotations

from typing import Any


def as_columns(log: Any, source: str = "event log") -> Any:
    """``log`` if it can answer column()/codes() (an EventLog or ArrayLog), else
    validated into an EventLog (a table, a DataFrame...)."""
    if hasattr(log, "column") and hasattr(log, "codes") and hasattr(log, "metadata"):
        return log
    from .schema import as_event_log

    return as_event_log(log, source)
