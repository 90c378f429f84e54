"""``ddlsim.convert``: one trace format to another, all or nothing (docs/interop.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import DdlsimError
from .trace.formats import DIRECTORY_OUTPUTS, chakra_prefix, infer_output_format, read_trace, write_trace


def write_output(log: Any, out: str | os.PathLike[str], fmt: str | None = None) -> list[Path]:
    """Write ``log`` in ``fmt`` through a staging directory: either every file
    of the output appears, or none does. Returns the final paths."""
    from .output import staged_directory

    out = Path(out)
    fmt = infer_output_format(out) if fmt is None else fmt.strip().lower()
    directory = fmt in DIRECTORY_OUTPUTS
    if directory and out.exists() and not out.is_dir():
        raise DdlsimError(f"{out}: exists and is not a directory; {fmt} output is a directory")
    target = out if directory else (chakra_prefix(out) if fmt == "chakra" else out).parent
    with staged_directory(target) as stage:
        written = write_trace(log, stage if directory else stage / (chakra_prefix(out) if fmt == "chakra" else out).name, fmt)
    return [target / path.relative_to(stage) for path in written]


def convert(source: str | os.PathLike[str], out: str | os.PathLike[str], *, from_format: str | None = None,
            to_format: str | None = None, notes: list[str] | None = None) -> list[Path]:
    """Read ``source`` and write it to ``out``; formats are inferred from the
    names when not given (``ddlsim.trace.formats``). Returns the files written.

    A Chrome / Perfetto trace is bounded as ``ddlsim simulate`` bounds its
    trace.json (:func:`ddlsim.output.chrome_view`); what it leaves out is
    appended to `notes`, or warned about (``UserWarning``) without a list.

    >>> ddlsim.convert("run1/events.parquet", "run1/chakra/trace.et")   # doctest: +SKIP
    """
    log = read_trace(source, from_format)
    fmt = infer_output_format(Path(out)) if to_format is None else to_format.strip().lower()
    if fmt == "chrome":
        from .output import chrome_view

        log, left_out = chrome_view(log)
        if notes is not None:
            notes.extend(left_out)
        else:
            import warnings

            for note in left_out:
                warnings.warn(note, stacklevel=2)
    return write_output(log, out, to_format)
