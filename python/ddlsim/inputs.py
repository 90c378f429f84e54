"""How ddlsim opens what it reads: an input file is a regular file.

A FIFO named as an input blocks its reader for ever (``open`` waits for a
writer, and a Parquet reader's seek never comes back), a device such as
``/dev/zero`` reads without end, and a socket cannot be opened. So every
reader checks the path it was given with :func:`input_file` before it opens
it: a missing path, a directory, a FIFO, a device or a socket gives a one-line
:class:`~ddlsim.errors.DdlsimError` (or the reader's own subclass) naming the
path, what it is, and the fix; the CLI prints it and exits with status 2.
A symbolic link to a regular file is read through.

:func:`kind_of` names a file type the same way for the writers
(:mod:`ddlsim.safe_io`), which refuse the same things as outputs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

from .errors import DdlsimError


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of `mode` (an ``st_mode``) is, as a phrase: "a directory", "a FIFO (named pipe)", ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def input_file(path: str | os.PathLike[str], what: str, fix: str = "", *, error: type[DdlsimError] = DdlsimError,
               label: Optional[str] = None, missing: Optional[str] = None) -> Path:
    """`path` as a Path if it names a regular file (through symbolic links); otherwise `error` with one line:

    * missing: ``missing`` if given, else ``"<label>: <what> not found; <fix>"``;
    * a directory, FIFO, device or socket: ``"<label>: is a FIFO (named pipe), not a <what>; <fix>"``;
    * not readable as a path (a name too long, a loop of links, no permission): the system's reason.

    `label` is how the message names the path (default: the path itself, e.g. ``"--plan plan.json"`` for an
    option). Nothing is opened: the check does not block on a FIFO."""
    path = Path(path)
    name = str(path) if label is None else label
    tail = f"; {fix}" if fix else ""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise error(missing if missing is not None else f"{name}: {what} not found{tail}") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        reason = getattr(exc, "strerror", None) or str(exc)
        raise error(f"{name[:300]}: cannot read the {what} ({reason}){tail}") from None
    if not stat.S_ISREG(st.st_mode):
        why = "" if stat.S_ISDIR(st.st_mode) else " (ddlsim reads regular files only)"
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise error(f"{name}: is {kind_of(st.st_mode)}, not {article} {what}{why}{tail}")
    return path
