"""``ddlsim.convert``: one trace format to another, all or nothing (docs/interop.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .errors import DdlsimError
from .trace.formats import DIRECTORY_OUTPUTS, chakra_prefix, infer_output_format, read_trace, write_trace


EXAMPLE_NAMES = {"events": "events.parquet", "chrome": "trace.json", "csv": "events.csv"}


def write_output(log: Any, out: str | os.PathLike[str], fmt: str | None = None, *,
                 inputs: Sequence[str | os.PathLike[str]] = (), option: str = "output") -> list[Path]:
    """Write ``log`` in ``fmt`` through a staging directory: either every file
    of the output appears, or none does. Returns the final paths. The rules of
    :mod:`ddlsim.safe_io` apply: a file output never replaces a directory, a
    device, a FIFO or one of ``inputs``; a directory output keeps the other
    files in the directory. ``option``: how messages name ``out`` (``--out`` for `ddlsim export`)."""
    from .safe_io import Inputs, check_directory_target, check_file_target, staged_directory

    out = Path(out)
    fmt = infer_output_format(out) if fmt is None else fmt.strip().lower()
    directory = fmt in DIRECTORY_OUTPUTS
    sources = Inputs(inputs)
    if directory:
        check_directory_target(out, option=option)
        target = out
        name = None
    else:
        named = chakra_prefix(out) if fmt == "chakra" else out
        if fmt == "chakra" and named.name in ("", ".", ".."):
            raise DdlsimError(f"{option} {str(out) or repr(str(out))}: a Chakra output is a prefix of files, e.g. "
                              "out/trace (written as out/trace.<rank>.et); name one")
        if fmt != "chakra":  # a Chakra prefix names no file itself; its <prefix>.<rank>.et files are checked when moved
            named = check_file_target(named, inputs=sources, option=option, example=EXAMPLE_NAMES.get(fmt, "out"))
        target, name = named.parent, named.name
    with staged_directory(target, inputs=sources, option=option) as stage:
        written = write_trace(log, stage if directory else stage / name, fmt)
    return [target / path.relative_to(stage) for path in written]


def input_files(source: str | os.PathLike[str]) -> list[Path]:
    """The files reading ``source`` touches: itself (a directory: the files in it), an event log's side tables,
    a Chakra prefix's ``<prefix>.<rank>.et`` files. An output must be none of them."""
    import glob

    from .trace.parquet import with_side_tables

    files = with_side_tables(source)
    prefix = chakra_prefix(source)
    if not Path(source).exists():
        files += prefix.parent.glob(f"{glob.escape(prefix.name)}.*.et")
    return files


def convert(source: str | os.PathLike[str], out: str | os.PathLike[str], *, from_format: str | None = None,
            to_format: str | None = None, notes: list[str] | None = None, option: str = "output",
            expand: bool = False) -> list[Path]:
    """Read ``source`` and write it to ``out``; formats are inferred from the
    names when not given (``ddlsim.trace.formats``). Returns the files written.
    ``out`` may not be ``source`` or any file it is read from (checked before reading).

    A Chrome / Perfetto trace is bounded as ``ddlsim simulate`` bounds its
    trace.json (:func:`ddlsim.output.chrome_view`); what it leaves out is
    appended to `notes`, or warned about (``UserWarning``) without a list.
    ``expand``: a log of rank classes (closed form) is written per rank.

    >>> ddlsim.convert("run1/events.parquet", "run1/chakra/trace.et")   # doctest: +SKIP
    """
    from .arguments import path_arg

    source, out = path_arg(source, "source"), path_arg(out, "out")
    inputs = input_files(source)
    fmt = infer_output_format(out) if to_format is None else to_format.strip().lower()
    if fmt not in DIRECTORY_OUTPUTS and fmt != "chakra":
        from .safe_io import check_file_target

        check_file_target(out, inputs=inputs, option=option, example=EXAMPLE_NAMES.get(fmt, "out"))  # before the read
    log = read_trace(source, from_format)
    if expand:  # a log of rank classes as the per-rank log it stands for (ddlsim.trace.classes)
        from .trace.classes import expand as expand_rank_classes

        log = expand_rank_classes(log)
    if fmt == "chrome":
        from .output import chrome_view

        log, left_out = chrome_view(log)
        if notes is not None:
            notes.extend(left_out)
        else:
            import warnings

            for note in left_out:
                warnings.warn(note, stacklevel=2)
    return write_output(log, out, to_format, inputs=inputs, option=option)
