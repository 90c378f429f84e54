"""Every trace format ddlsim reads or writes, by name, and how a path's format is recognised.

=========  ======  =====  ===============================================
format     read    write  on disk
=========  ======  =====  ===============================================
events     yes     yes    native event log, ``*.parquet`` (+ side tables)
sketchdlc  yes     yes    directory of per-node text files ``w0.txt``...
chakra     yes     yes    ``<prefix>.<rank>.et`` protobuf files
kineto     yes     yes    directory of ``rank<r>.json`` (PyTorch profiler)
chrome     no      yes    one Perfetto / Chrome JSON file (``.json[.gz]``)
csv        no      yes    one CSV table (``.csv``)
netop      yes     no     send traces of the network-operator paper
=========  ======  =====  ===============================================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import TraceError
from .schema import EventLog, PS_OPS

READ_FORMATS = ("events", "sketchdlc", "chakra", "kineto", "netop")
WRITE_FORMATS = ("events", "sketchdlc", "chakra", "kineto", "chrome", "csv")
DIRECTORY_OUTPUTS = ("sketchdlc", "kineto")  # written as a directory; chakra as files <prefix>.<rank>.et
FORMATS = tuple(dict.fromkeys(READ_FORMATS + WRITE_FORMATS))


def _normal(fmt: str, allowed: tuple[str, ...], what: str) -> str:
    name = fmt.strip().lower()
    if name not in allowed:
        other = "write" if what == "read" else "read"
        hint = f" ({name} is {other}-only)" if name in FORMATS else ""
        raise TraceError(f"format {fmt!r} cannot be {what}{hint}; formats that can: {', '.join(allowed)}")
    return name


def infer_input_format(path: str | os.PathLike[str]) -> str:
    """The format of an input path, from its extension or the files in the directory."""
    path = Path(path)
    name = path.name.lower()
    if path.is_dir():
        kinds = {fmt for fmt, pattern in (("chakra", "*.et"), ("sketchdlc", "*.txt"), ("kineto", "*.json"),
                                          ("kineto", "*.json.gz")) if any(path.glob(pattern))}
        if len(kinds) == 1:
            return kinds.pop()
        found = ", ".join(sorted(kinds)) or "no *.et, *.txt or *.json files"
        raise TraceError(f"{path}: cannot tell the format of this directory ({found}); give --from FORMAT")
    if name.endswith(".parquet"):
        return "events"
    if name.endswith(".et") or (not path.exists() and any(path.parent.glob(f"{_escape(path.name)}.*.et"))):
        return "chakra"
    if name.endswith((".json", ".json.gz")):
        return "kineto"
    if name.endswith(".csv"):
        return "netop"
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    raise TraceError(f"{path}: cannot tell the format from the name (e.g. a .txt is SketchDLC or a netop trace); "
                     f"give --from FORMAT, one of {', '.join(READ_FORMATS)}")


def infer_output_format(path: str | os.PathLike[str]) -> str:
    """The format an output path asks for, from its extension."""
    name = Path(path).name.lower()
    for suffixes, fmt in (((".parquet",), "events"), ((".json", ".json.gz"), "chrome"), ((".csv",), "csv"),
                          ((".et",), "chakra")):
        if name.endswith(suffixes):
            return fmt
    raise TraceError(f"{path}: cannot tell the output format from the name (a directory can hold sketchdlc or "
                     f"kineto files); give --to FORMAT, one of {', '.join(WRITE_FORMATS)}")


def _escape(text: str) -> str:
    import glob

    return glob.escape(text)


def read_trace(path: str | os.PathLike[str], fmt: str | None = None) -> EventLog:
    """Read ``path`` (format inferred when ``fmt`` is None) into an event log."""
    fmt = infer_input_format(path) if fmt is None else _normal(fmt, READ_FORMATS, "read")
    if fmt == "events":
        from .parquet import read_event_log

        return read_event_log(path)
    if fmt == "sketchdlc":
        from .sketchdlc import read_sketchdlc

        return read_sketchdlc(path)
    if fmt == "chakra":
        from .chakra import read_chakra

        return read_chakra(path)
    if fmt == "kineto":
        from .kineto import read_kineto

        return read_kineto(path)
    from .netop import read_netop_trace

    return read_netop_trace(path)


def chakra_prefix(path: str | os.PathLike[str]) -> Path:
    """``out/trace.et`` and ``out/trace`` both mean the files ``out/trace.<rank>.et``."""
    path = Path(path)
    return path.with_name(path.name[:-3]) if path.name.endswith(".et") else path


def write_trace(log: EventLog, path: str | os.PathLike[str], fmt: str | None = None) -> list[Path]:
    """Write ``log`` to ``path`` in ``fmt`` (inferred from the name when None); returns the files written.
    Directory formats write into ``path``; chakra writes ``<path>.<rank>.et``."""
    fmt = infer_output_format(path) if fmt is None else _normal(fmt, WRITE_FORMATS, "written")
    path = Path(path)
    if fmt == "events":
        from .parquet import side_table_paths, write_event_log

        write_event_log(log, path)
        return [path] + [side_table_paths(path)[name] for name in log.side_tables()]
    if fmt == "chrome":
        from .chrome import write_chrome_trace

        return [write_chrome_trace(log, path)]
    if fmt == "csv":
        from .csv_table import write_csv

        return [write_csv(log, path)]
    if fmt == "chakra":
        from .chakra import write_chakra

        return write_chakra(log, chakra_prefix(path))
    if fmt == "kineto":
        from .kineto import write_kineto

        return write_kineto(log, path)
    import numpy as np

    from .sketchdlc import write_sketchdlc

    if not np.isin(log.column("op"), list(PS_OPS)).any():
        raise TraceError("SketchDLC describes parameter-server push/pull traffic; this log has none "
                         f"(no rows with op {', '.join(PS_OPS)})")
    return list(write_sketchdlc(log, path))
