"""The trace layer: the event-log schema and its readers / writers.

* :mod:`.schema` - the event-log columns, :func:`validate_event_log`.
* :mod:`.parquet` - the native file: :func:`write_event_log`, :func:`read_event_log`.
* :mod:`.chrome` - Chrome / Perfetto JSON export.
* :mod:`.sketchdlc` - SketchDLC per-node text traces, export and import.
"""

from .chrome import to_chrome_trace, write_chrome_trace
from .parquet import read_event_log, write_event_log
from .schema import (
    BREAKDOWN_COLUMNS,
    COLUMN_NAMES,
    COLUMNS,
    EVENT_LOG_SCHEMA,
    KINDS,
    OPS_BY_KIND,
    PS_OPS,
    ROLES,
    SCHEMA_VERSION,
    empty_event_log,
    event_log_from_rows,
    rank_roles,
    validate_event_log,
)
from .sketchdlc import SKETCHDLC_COLUMNS, read_sketchdlc, to_sketchdlc, write_sketchdlc

__all__ = [
    "BREAKDOWN_COLUMNS",
    "COLUMN_NAMES",
    "COLUMNS",
    "EVENT_LOG_SCHEMA",
    "KINDS",
    "OPS_BY_KIND",
    "PS_OPS",
    "ROLES",
    "SCHEMA_VERSION",
    "SKETCHDLC_COLUMNS",
    "empty_event_log",
    "event_log_from_rows",
    "rank_roles",
    "read_event_log",
    "read_sketchdlc",
    "to_chrome_trace",
    "to_sketchdlc",
    "validate_event_log",
    "write_chrome_trace",
    "write_event_log",
    "write_sketchdlc",
]
