"""The trace layer: the event-log schema (v2) and its readers / writers.

* :mod:`.schema` - the columns, :class:`EventLog`, :func:`event_log_from_arrays`,
  :func:`validate_event_log`.
* :mod:`.parquet` - the native files: :func:`write_event_log`, :func:`read_event_log`
  (reads schema v1 files too).
* :mod:`.chrome` - Chrome / Perfetto JSON export.
* :mod:`.sketchdlc` - SketchDLC per-node text traces, export and import.
* :mod:`.columns` - the vocabulary and :class:`ArrayLog`, the columns without pyarrow.
* :mod:`.chakra` - MLCommons Chakra execution traces, export and import.
* :mod:`.kineto` - PyTorch-profiler (Kineto) JSON, export and import.
* :mod:`.netop` - send traces of the network-operator paper, import.
* :mod:`.csv_table` - one CSV table, export.
* :mod:`.formats` - the formats by name: :func:`read_trace`, :func:`write_trace`.
"""

from .._lazy import lazy_exports

# Each name loads its module on first use, so that `import ddlsim.trace.columns`
# (the simulate path) does not import pyarrow, pandas or the writers.
_HOME = {
    **dict.fromkeys(("to_chrome_trace", "write_chrome_trace"), "chrome"),
    **dict.fromkeys(("read_event_log", "side_table_paths", "write_event_log"), "parquet"),
    **dict.fromkeys(("SKETCHDLC_COLUMNS", "read_sketchdlc", "read_sketchdlc_records", "to_sketchdlc", "write_sketchdlc"), "sketchdlc"),
    **dict.fromkeys(("read_chakra", "write_chakra"), "chakra"),
    **dict.fromkeys(("read_kineto", "to_kineto", "write_kineto"), "kineto"),
    **dict.fromkeys(("read_netop_trace",), "netop"),
    **dict.fromkeys(("write_csv",), "csv_table"),
    **dict.fromkeys(("READ_FORMATS", "WRITE_FORMATS", "read_trace", "write_trace"), "formats"),
    **dict.fromkeys(("BREAKDOWN_COLUMNS", "COLL_TYPES", "EXTENSION_PREFIX", "KINDS", "PS_OPS", "ROLES", "ArrayLog",
                     "aligned_times"), "columns"),
    **dict.fromkeys(("COLUMN_NAMES", "COLUMNS", "EVENT_LOG_SCHEMA", "REQUIRED_COLUMNS", "SCHEMA_VERSION", "SIDE_TABLES",
                     "EventLog", "as_event_log", "empty_event_log", "event_log_from_arrays", "event_log_from_array_log", "event_log_from_rows",
                     "rank_roles", "validate_event_log"), "schema"),
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals())

__all__ = sorted(_HOME)
