"""How ddlsim writes files: the one mechanism every writing command uses.

The rules (docs/cli.md, "What ddlsim writes"):

* **Only what was named.** A file output is written as a regular file at the
  path given. If that path exists and is a directory, a device (``/dev/full``),
  a FIFO or a socket, the command is refused: ddlsim never deletes, replaces
  or renames over it. A symbolic link to a regular file is written through
  (the file it points at gets the new content; the link stays).
* **Directory outputs keep what else is there.** A directory output (``--out
  DIR``, Kineto and SketchDLC directories) adds or replaces only the files of
  this output; the user's other files stay. A file of the output whose name
  is taken by a directory or a non-regular file is refused before anything
  is moved.
* **Never the command's own input.** An output that is one of the command's
  input files (the same path, a hard link or a symbolic link to it, found by
  ``st_dev``/``st_ino`` and by the resolved path) is refused.
* **All or nothing.** Everything is written into a scratch directory beside
  the target (the same filesystem) and renamed into place at the end; on any
  error, Ctrl-C or SIGTERM the scratch directory is removed and the target is
  left as it was. A scratch directory is made and registered in one native
  call (``_core.create_scratch``), and removed and forgotten in another
  (``_core.remove_scratch``), so that a signal can never fall between the two:
  once an interrupt has unwound, the CLI removes any that a signal landing
  in the Python between them left behind (:func:`remove_leftover_scratch`).
* **Failing I/O is one line.** A full disk, a read-only directory, a missing
  parent: a :class:`~ddlsim.errors.DdlsimError` naming the path (the CLI
  prints it and exits with status 2).
"""

from __future__ import annotations

import atexit
import os
import secrets
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from .errors import DdlsimError
from .inputs import kind_of as _kind

_NEW_FILE_MODE = 0o644


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _stat(path: Path, error: type[DdlsimError]) -> Optional[os.stat_result]:
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise error(f"{path}: cannot check the output path ({_why(exc)})") from None


class Inputs:
    """The files a command reads, by identity (st_dev, st_ino) and resolved path:
    an output must be none of them. A directory stands for the files in it
    (recursively). Paths that do not exist are left out."""

    def __init__(self, paths: Iterable["str | os.PathLike[str] | None"] = ()):
        self.ids: dict[tuple[int, int], Path] = {}
        self.real: dict[str, Path] = {}
        for path in paths:
            if path is not None:
                self.add(Path(path))

    def add(self, path: Path, named: Optional[Path] = None) -> None:
        named = named or path
        try:
            st = os.stat(path)
        except OSError:
            return
        self.ids[(st.st_dev, st.st_ino)] = named
        self.real[os.path.realpath(path)] = named
        if stat.S_ISDIR(st.st_mode):
            for root, _, files in os.walk(path):
                for name in files:
                    self.add_file(Path(root) / name, named)

    def add_file(self, path: Path, named: Path) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode):
            self.ids[(st.st_dev, st.st_ino)] = named
            self.real[os.path.realpath(path)] = named

    def which(self, path: Path, st: Optional[os.stat_result]) -> Optional[Path]:
        """The input `path` is (or None)."""
        if st is not None and (st.st_dev, st.st_ino) in self.ids:
            return self.ids[(st.st_dev, st.st_ino)]
        return self.real.get(os.path.realpath(path))

    def __bool__(self) -> bool:
        return bool(self.ids or self.real)


def _inputs(inputs: "Inputs | Sequence | None") -> Inputs:
    if isinstance(inputs, Inputs):
        return inputs
    return Inputs(inputs or ())


def check_file_target(path: "str | os.PathLike[str]", *, inputs: "Inputs | Sequence | None" = None, option: str = "--out",
                      error: type[DdlsimError] = DdlsimError, example: str = "out") -> Path:
    """Checks that `path` may receive a file output (see the module doc) and
    returns the path to write (a symbolic link resolved to its target).
    `example`: a file name to suggest inside a directory named by mistake."""
    named = Path(path)
    real = Path(os.path.realpath(named))
    st = _stat(real, error)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise error(f"{option} {named} is a directory, and this output is one file: name a file, "
                    f"e.g. {named / example} (the directory was left as it is)")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise error(f"{option} {named} is {_kind(st.st_mode)}; ddlsim writes only regular files and never replaces "
                    f"other kinds: choose another {option}")
    source = _inputs(inputs).which(real, st)
    if source is not None:
        raise error(f"{option} {named} is the command's own input ({source}); writing it would destroy the input: "
                    f"choose another {option}")
    return real


def _scratch_directory(directory: Path, prefix: str, suffix: str = "") -> Path:
    """A new directory `directory/<prefix><random><suffix>` (mode 0700), made and
    registered in one native call: whenever it exists, it is registered, so that
    :func:`remove_leftover_scratch` finds it. The caller removes it with
    ``_core.remove_scratch``. OSError as from os.mkdir."""
    from . import _core

    while True:
        path = directory / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            _core.create_scratch(str(path), 0o700)
        except FileExistsError:
            continue
        return path


@contextmanager
def scratch_directory(prefix: str, parent: "str | os.PathLike[str] | None" = None) -> Iterator[Path]:
    """A private working directory `<parent>/<prefix><random>` (parent: the
    system's temporary directory by default), removed when the block ends,
    also when an interrupt cuts that short (:func:`remove_leftover_scratch`)."""
    from . import _core

    path = _scratch_directory(Path(parent) if parent is not None else Path(tempfile.gettempdir()), prefix)
    try:
        yield path
    finally:
        _core.remove_scratch(str(path))


def remove_leftover_scratch() -> int:
    """Removes every scratch directory of this process that is still there
    (registered and not yet forgotten) and returns how many. The CLI calls it
    when an interrupt has unwound: Ctrl-C lands between two bytecodes, so one
    that lands after a directory is made and before the `try` that removes it,
    or in a `finally` before its removal call, skips that removal."""
    from . import _core

    return _core.remove_registered_scratch()


_OWNER = os.getpid()


def _remove_leftover_scratch_at_exit() -> None:
    """At the interpreter's exit, the same for the Python API (a KeyboardInterrupt that cut a clean-up short);
    never in a forked child, which inherits the registry but not the directories' ownership."""
    if os.getpid() == _OWNER:
        remove_leftover_scratch()


atexit.register(_remove_leftover_scratch_at_exit)


def check_directory_target(path: "str | os.PathLike[str]", *, option: str = "--out",
                           error: type[DdlsimError] = DdlsimError) -> Path:
    """Checks that `path` is a directory or absent (a directory output)."""
    named = Path(path)
    st = _stat(named, error)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        what = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise error(f"{option} {named}: exists and is not a directory (it is {what}); this output is a directory: "
                    f"choose another {option}")
    return named


def ensure_directory(path: "str | os.PathLike[str]", *, option: str = "--out", error: type[DdlsimError] = DdlsimError) -> Path:
    """Creates the directory `path` (and its parents) if needed and checks that
    files can be created in it; a one-line error otherwise."""
    named = check_directory_target(path, option=option, error=error)
    from . import _core

    try:
        named.mkdir(parents=True, exist_ok=True)
        _core.remove_scratch(str(_scratch_directory(named, ".ddlsim-probe-")))
    except OSError as exc:
        raise error(f"{option} {named}: cannot write here ({_why(exc)}); choose another {option}") from None
    return named


def _plan_moves(stage: Path, out_dir: Path, inputs: Inputs, option: str, error: type[DdlsimError],
                moves: list[tuple[Path, Path]]) -> None:
    """Every (staged item, target) to rename, checked before anything moves."""
    for item in sorted(stage.iterdir()):
        target = out_dir / item.name
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            st = _stat(target, error)  # what the link points at decides
        if item.is_dir() and not item.is_symlink():
            if st is None:
                moves.append((item, target))
            elif stat.S_ISDIR(st.st_mode):
                _plan_moves(item, target, inputs, option, error, moves)
            else:
                what = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
                raise error(f"{target} is {what}, where this output puts a directory; it was left as it is "
                            f"(nothing was written): choose another {option}")
            continue
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise error(f"{target} is {_kind(st.st_mode)}, where this output puts a file; ddlsim never replaces it "
                        f"(nothing was written): choose another {option}")
        source = inputs.which(target, st)
        if source is not None:
            raise error(f"{target} is the command's own input ({source}); writing it would destroy the input "
                        f"(nothing was written): choose another {option}")
        moves.append((item, target))


@contextmanager
def staged_directory(out_dir: "str | os.PathLike[str]", *, inputs: "Inputs | Sequence | None" = None, option: str = "--out",
                     error: type[DdlsimError] = DdlsimError) -> Iterator[Path]:
    """Yields a scratch directory inside `out_dir` (created if needed); on
    success its files move into `out_dir` (after checking every one of them
    against the rules above), on any failure (an error, Ctrl-C) the scratch
    directory vanishes, and so does `out_dir` if this call created it.
    Staging inside the target keeps every rename on one filesystem and needs
    no write access to the parent. An OSError while writing becomes a
    one-line `error` naming `out_dir`."""
    from . import _core

    out_dir = check_directory_target(out_dir, option=option, error=error)
    checked = _inputs(inputs)
    # Registered from the moment they exist until done with (see remove_leftover_scratch): the scratch
    # directory, and the output directory while it holds nothing finished, if this call makes it.
    created = False
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            _core.create_scratch(str(out_dir))  # registered as soon as it exists: ours until it holds the output
        except FileExistsError:
            pass
        else:
            created = True
        stage = _scratch_directory(out_dir, ".ddlsim-staging-")
    except OSError as exc:
        if created:
            _core.remove_scratch(str(out_dir))
        raise error(f"{option} {out_dir}: cannot write here ({_why(exc)}); choose another {option}") from None
    done = False
    try:
        try:
            yield stage
            moves: list[tuple[Path, Path]] = []
            _plan_moves(stage, out_dir, checked, option, error, moves)
            for item, target in moves:
                os.replace(item, target)
        except OSError as exc:
            raise error(f"cannot write {out_dir}: {_why(exc)} (nothing was written)") from None
        done = True
        if created:
            _core.unregister_scratch(str(out_dir))  # finished: no longer ours to remove
    finally:
        _core.remove_scratch(str(stage))  # one native call: an interrupt cannot cut it short
        if created and not done:
            _core.remove_scratch(str(out_dir))


@contextmanager
def atomic_file(path: "str | os.PathLike[str]", *, inputs: "Inputs | Sequence | None" = None, option: str = "--out",
                error: type[DdlsimError] = DdlsimError, make_parent: bool = False) -> Iterator[Path]:
    """Yields a temporary path beside `path` (in a scratch directory in the
    same directory); on success it is flushed to disk and renamed onto `path`,
    on any error or interrupt it is removed and `path` is left as it was.
    `path` is checked first (:func:`check_file_target`). The parent directory
    must exist unless `make_parent`."""
    from . import _core

    named = Path(path)
    target = check_file_target(named, inputs=inputs, option=option, error=error)
    directory = target.parent
    if make_parent:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise error(f"cannot write {named}: cannot create {directory} ({_why(exc)})") from None
    if not directory.is_dir():
        raise error(f"cannot write {named}: directory {directory} does not exist")
    try:
        scratch = _scratch_directory(directory, f".{target.name}.", ".tmp")
    except OSError as exc:
        raise error(f"cannot write {named}: {_why(exc)}") from None
    temporary = scratch / target.name
    try:
        yield temporary
        if not temporary.exists():
            raise error(f"internal error: nothing was written for {named}")
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        check_file_target(named, inputs=inputs, option=option, error=error)  # still a file (or absent) just before the rename
        existing = _stat(target, error)
        os.chmod(temporary, existing.st_mode & 0o7777 if existing is not None else _NEW_FILE_MODE)
        os.replace(temporary, target)
    except OSError as exc:
        raise error(f"cannot write {named}: {_why(exc)} (nothing was written)") from None
    finally:
        _core.remove_scratch(str(scratch))  # one native call: an interrupt cannot cut it short


def write_text_file(path: "str | os.PathLike[str]", text: str, **kwargs) -> Path:
    """`text` (UTF-8) as the file `path`, through :func:`atomic_file`."""
    with atomic_file(path, **kwargs) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)


class GuardedStream:
    """Stands for a text stream (standard output) and remembers the last
    OSError a write or flush raised, so that the CLI can tell a failed write
    to standard output (a full device, a closed pipe) from any other error."""

    def __init__(self, stream):
        self._stream = stream
        self.failure: Optional[OSError] = None

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            self.failure = exc
            raise

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            self.failure = exc
            raise

    def __getattr__(self, name):
        return getattr(self._stream, name)


def stdout_failure(exc: BaseException, guard: Optional[GuardedStream]) -> Optional[str]:
    """If `exc` is a failed write to standard output (watched by `guard`), the
    one-line message for it; None for any other error."""
    if guard is None or not isinstance(exc, OSError) or guard.failure is not exc:
        return None
    return f"cannot write to standard output: {_why(exc)}"


def silence_stdout() -> None:
    """After a failed write to standard output: point it at /dev/null, so that
    the interpreter's own flush at exit does not fail a second time."""
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
