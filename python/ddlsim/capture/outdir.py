"""The output directory of a capture command, and what the command made in it.

An interrupted capture (Ctrl-C, SIGTERM) leaves no partial output::

    with capture_dir(out) as out:        # creates `out` if missing; a clear error if it cannot
        launch_local(...); merge ...     # interrupted: this run's files go, nothing else

On ``KeyboardInterrupt`` or ``SystemExit`` (SIGTERM under the CLI or
:func:`.launch.sigterm_as_exit`) the block removes the files that this run
wrote or changed, and only files ddlsim writes in a capture directory (see
:func:`is_own_file`: rank files, sidecars, ``job.json``, ``logs/rank*.log``,
``events.parquet`` and its side tables, the connection-scaling tables),
then the directories this run created, if they are empty. A file the user
keeps there, even one named like ddlsim's, that this run did not touch stays.
If the CLI's native backstop must end the process before Python has unwound,
it removes the output directory when this run created it.

Any other failure (a rank that crashed, a merge error) leaves the output as
it is: the partial trace and the rank logs are what the user needs then.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ..errors import DdlsimError
from ..safe_io import check_directory_target

_SUBDIRS = re.compile(r"^(logs|c\d+)$")  # c<C>: one connection-scaling run
_OWN_NAMES = {"job.json", "events.parquet", "scaling.csv", "fit.json", "requests.csv"}
_OWN_PATTERNS = re.compile(r"^(\d+\.rank\.jsonl|\d+\.ddp\.json(\.tmp)?|rank\d+\.log)$")


def _side_tables() -> set[str]:
    from ..trace.parquet import SIDE_TABLES

    return {f"{table}.parquet" for table in SIDE_TABLES}


def is_own_file(name: str) -> bool:
    """Whether `name` is a file ddlsim writes into a capture directory (or a temporary of one)."""
    own = _OWN_NAMES | _side_tables()
    if name.startswith(".") and name.endswith(".tmp"):  # write_event_log's atomic temporaries: .NAME.XXXX.tmp
        return any(name.startswith(f".{n}.") for n in own)
    return name in own or bool(_OWN_PATTERNS.match(name))


def _identity(path: Path) -> Optional[tuple]:
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _walk(root: Path) -> Iterator[Path]:
    """Every entry of `root` and of its capture subdirectories (logs/, c<C>/, c<C>/logs/), directories last."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if _SUBDIRS.match(entry.name) and entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry)
        yield entry


class CaptureDir:
    """See the module docstring; made by :func:`capture_dir`."""

    def __init__(self, path: Path):
        self.path = path
        self.created: list[Path] = []  # directories this run created, outermost first
        self.before: dict[Path, tuple] = {}

    def open(self) -> None:
        from .. import _core

        out = self.path
        missing = check_out_dir(out)
        try:
            for directory in reversed(missing):
                try:
                    if directory == out:
                        # made and registered for the CLI's backstop in one call: never there unregistered
                        _core.create_scratch(str(directory))
                    else:
                        directory.mkdir()
                except FileExistsError:  # made meanwhile by someone else: not ours to remove
                    continue
                self.created.append(directory)
        except OSError as exc:
            self._remove_created_dirs()
            raise DdlsimError(f"--out {out}: cannot create {directory} ({exc.strerror or exc}); "
                              "choose a writable directory") from None
        try:
            check_out_dir(out)
        except DdlsimError:
            self._remove_created_dirs()
            raise
        self.before = {p: _identity(p) for p in _walk(out)}

    def discard(self) -> list[Path]:
        """Removes what this run wrote (see the module docstring); returns the removed paths."""
        removed = []
        for path in _walk(self.path):
            if path.is_dir() and not path.is_symlink():
                continue
            if not is_own_file(path.name) or (path in self.before and self.before[path] == _identity(path)):
                continue
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError:
                pass  # a file we cannot remove stays; the clean-up goes on
        for path in sorted((p for p in _walk(self.path) if p.is_dir() and not p.is_symlink() and p not in self.before),
                           key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()  # empty only: never a directory with someone else's files
                removed.append(path)
            except OSError:
                pass
        removed.extend(self._remove_created_dirs())
        return removed

    def _remove_created_dirs(self) -> list[Path]:
        from .. import _core

        removed = []
        for directory in reversed(self.created):
            try:
                directory.rmdir()
                removed.append(directory)
            except OSError:
                break  # not empty (or gone): so are its parents
        if self.path in self.created:
            _core.unregister_scratch(str(self.path))
        self.created = []
        return removed


def check_out_dir(out: Path) -> list[Path]:
    """Refuses (one-line :class:`DdlsimError`) an `out` that is no directory or cannot be written, without
    writing anything; returns the directories that are missing, innermost first."""
    check_directory_target(out)  # a file, device, FIFO or socket there is refused, never replaced
    missing = []
    probe = out
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    if probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only(probe) else "permission denied"
        where = "there" if probe == out else f"in {probe}"
        raise DdlsimError(f"--out {out}: cannot write the capture {where} ({why}); choose a writable directory")
    return missing


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextmanager
def capture_dir(out_dir: str | Path) -> Iterator[Path]:
    """Creates `out_dir` if missing (a one-line :class:`DdlsimError` when it cannot be
    written) and yields it; on Ctrl-C or SIGTERM removes what this run wrote there."""
    from .launch import sigterm_as_exit

    with sigterm_as_exit():
        with _capture_dir(Path(out_dir)) as out:
            yield out


@contextmanager
def _capture_dir(out_dir: Path) -> Iterator[Path]:
    from .launch import signals_deferred

    from .. import _core

    cap = CaptureDir(out_dir)
    cap.open()  # registers the output directory if it made it: the CLI's native backstop removes it if Python
    # cannot unwind in time, and so does the CLI if an interrupt cut the clean-up below short
    backstop = str(cap.path) if cap.path in cap.created else None
    try:
        yield cap.path
    except (KeyboardInterrupt, SystemExit):
        with signals_deferred():
            cap.discard()
        raise
    finally:
        if backstop is not None:
            _core.unregister_scratch(backstop)
