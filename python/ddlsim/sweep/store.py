"""The results store: one JSON summary per simulated scenario, keyed by a hash
of the canonical scenario JSON, the files it reads (a profile's contents),
the ddlsim version and the engine build (a hash of the loaded extension's
bytes: a rebuilt engine with the same version string does not get the old
engine's results), so a scenario that was run before is answered from disk."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import DdlsimError
from ..inputs import input_file
from ..simulation.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# Bumped when the stored summary changes shape, so old entries are not read as new ones.
SUMMARY_FORMAT = 1


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/ddlsim, else ~/.cache/ddlsim."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ddlsim"


def canonical_json(scenario: Scenario) -> str:
    return json.dumps(scenario.model_dump(mode="json", exclude={"base_dir"}), sort_keys=True, separators=(",", ":"))


def _profile_digest(scenario: Scenario) -> Optional[str]:
    """The profile's bytes take part in the key: the scenario names the file, not its times."""
    if not scenario.model.profile:
        return None
    path = Path(scenario.model.profile)
    if scenario.base_dir and not path.is_absolute():
        path = Path(scenario.base_dir) / path
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise DdlsimError(f"{path}: cannot read the profile of a sweep scenario ({exc.strerror or exc})") from None


@lru_cache(maxsize=1)
def engine_build_id() -> str:
    """SHA-256 of the loaded engine extension (ddlsim._core), read once per
    process. If the file cannot be read, an id of this process alone: its
    results are then never served to another process (nor stale ones to it)."""
    from .. import _core

    try:
        return hashlib.sha256(Path(_core.__file__).read_bytes()).hexdigest()
    except (OSError, TypeError, AttributeError):
        return f"unreadable-{uuid.uuid4().hex}"


def scenario_key(scenario: Scenario) -> str:
    from .. import __version__
    from .._core import __version__ as engine_version

    material = {
        "ddlsim": __version__,
        "engine": engine_version,
        "engine_build": engine_build_id(),
        "format": SUMMARY_FORMAT,
        "scenario": json.loads(canonical_json(scenario)),
        "profile_sha256": _profile_digest(scenario),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


_Seconds = Annotated[float, Field(allow_inf_nan=False, strict=True)]


class ResultStore:
    """Summaries as `<directory>/runs/<key[:2]>/<key>.json`, written atomically
    (a reader never sees half a file; concurrent writers of one key write the same bytes)."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / "runs" / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        path = self._path(key)
        if os.path.lexists(path):  # a FIFO there would block the read
            input_file(path, "results cache entry", "choose another --cache")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            return None  # damaged: simulated again and overwritten, as below
        except OSError as exc:
            raise DdlsimError(f"{path}: cannot read the results cache ({exc.strerror or exc}); choose another --cache") from None
        try:
            entry = json.loads(text)
        except (ValueError, RecursionError):  # not JSON (ValueError: also an int of over 4300 digits), too deep
            return None  # a damaged entry is simulated again and overwritten
        return entry if _cached_summary_ok(entry) else None  # one of the wrong shape too (found by fuzz_readers)

    def put(self, key: str, summary: dict[str, Any]) -> None:
        from ..safe_io import write_text_file

        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DdlsimError(f"{path.parent}: cannot write the results cache ({exc.strerror or exc}); choose another --cache") from None
        write_text_file(path, json.dumps(summary, sort_keys=True), option="--cache")  # atomic; never over a non-file

    def __len__(self) -> int:
        return sum(1 for _ in (self.directory / "runs").glob("*/*.json")) if (self.directory / "runs").is_dir() else 0


class _CachedSummary(BaseModel):
    """What :func:`ddlsim.sweep.runner.simulate_summary` writes, with the types its readers compute with (every
    iteration time finite, at least one); other keys pass as they are."""

    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(strict=True)]
    model_bytes: Annotated[int, Field(ge=0, strict=True)]
    workers: Annotated[int, Field(ge=1, strict=True)]
    iteration_times_s: Annotated[list[_Seconds], Field(min_length=1)]
    compute_s: list[_Seconds]
    exposed_communication_s: list[_Seconds]
    idle_s: list[_Seconds]
    bytes_sent_per_worker_per_iteration: _Seconds
    events: Annotated[int, Field(ge=0, strict=True)]
    transfers: Annotated[int, Field(ge=0, strict=True)]
    engine_wall_s: _Seconds
    wall_s: _Seconds
    notes: list[Annotated[str, Field(strict=True)]]
    scenario: dict[str, Any]


def _cached_summary_ok(entry: Any) -> bool:
    """Whether a results-cache entry is a :class:`_CachedSummary`."""
    try:
        _CachedSummary.model_validate(entry)
    except ValidationError:
        return False
    return True


# ----------------------------------------------------------------- a sweep's Parquet dataset

# The tables of one run, each a Parquet dataset of its own directory: summary/ (one row per run; a run is done
# when its summary file exists), and the side tables, written before it.
SUMMARY_TABLE = "summary"
SIDE_TABLES = ("iterations", "flows", "queues")
MANIFEST = "sweep.json"
LOCK_FILE = ".ddlsim-sweep.lock"
# what safe_io.atomic_file leaves beside a file when the process is killed (SIGKILL) while writing it
_SCRATCH = re.compile(r"^\.([0-9a-f]{64}\.parquet|sweep\.json)\..+\.tmp$")
_RUN_FILE = re.compile(r"^[0-9a-f]{64}\.parquet$")


class RunDataset:
    """A sweep's results in the directory the user named (docs/sweep.md)::

        sweep.json                  the grid (base scenario, axes, runs) of the latest sweep
        summary/<key>.parquet       one row per run: its axis values, iteration time, bytes, ...
        iterations/<key>.parquet    per iteration: time and breakdown
        flows/<key>.parquet         per network flow (when the scenario records flows)
        queues/<key>.parquet        queue samples (packet level, when sampled)

    `<key>` is :func:`scenario_key` (the canonical scenario, its files and the
    engine build). Each file is written atomically, the side files first and
    the summary last: a run is done when its summary file exists, so a sweep
    killed at any point keeps every run it finished and no half of one.
    Each directory reads as one Parquet dataset (``pyarrow.dataset``,
    ``pandas.read_parquet``; every table has a ``key`` column to join on)."""

    def __init__(self, directory: "str | Path"):
        self.directory = Path(directory)
        self._lock_fd: Optional[int] = None
        self._option = "--out"  # the flag that named the directory, for errors (writing())

    def path(self, table: str, key: str) -> Path:
        return self.directory / table / f"{key}.parquet"

    def done(self) -> set[str]:
        """Keys of the complete runs."""
        folder = self.directory / SUMMARY_TABLE
        if not folder.is_dir():
            return set()
        return {p.name[:-len(".parquet")] for p in folder.iterdir() if _RUN_FILE.match(p.name) and p.is_file()}

    # -- writing (inside `with dataset.writing():`)

    @contextmanager
    def writing(self, option: str = "--out") -> Iterator["RunDataset"]:
        """Creates the directory if needed, takes the sweep lock (one sweep
        writes a directory at a time; the lock goes with the process, also on
        SIGKILL) and removes the scratch files a killed sweep left."""
        from ..safe_io import ensure_directory

        ensure_directory(self.directory, option=option)
        lock = self.directory / LOCK_FILE
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise DdlsimError(f"{lock}: cannot create the sweep's lock file ({exc.strerror or exc}); choose another {option}") from None
        try:
            import fcntl

            # a POSIX record lock: not inherited by the process pool's forked workers, released when this process ends
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no fcntl (Windows): no lock
            pass
        except OSError:
            os.close(fd)
            raise DdlsimError(f"{option} {self.directory}: another ddlsim sweep is writing there; wait for it to finish "
                              f"or choose another {option}") from None
        self._lock_fd, self._option = fd, option
        try:
            self._remove_scratch()
            yield self
        finally:
            self._lock_fd = None
            os.close(fd)  # releases the lock

    def _remove_scratch(self) -> None:
        for folder in (self.directory, *(self.directory / t for t in (SUMMARY_TABLE, *SIDE_TABLES))):
            if not folder.is_dir():
                continue
            for item in folder.iterdir():
                if _SCRATCH.match(item.name) and item.is_dir() and not item.is_symlink():
                    shutil.rmtree(item, ignore_errors=True)

    def write_manifest(self, manifest: dict[str, Any], option: str = "--out") -> None:
        """sweep.json: never over the sweep's own scenario file (refused, one line)."""
        from ..safe_io import write_text_file

        inputs = [manifest["scenario_file"]] if manifest.get("scenario_file") else []
        write_text_file(self.directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n", option=option,
                        inputs=inputs)

    def put(self, key: str, summary: "pa.Table", tables: dict[str, "Optional[pa.Table]"]) -> None:
        """One run's tables: the side tables first, the summary (the run's "done" mark) last."""
        import pyarrow.parquet as pq

        from ..safe_io import atomic_file

        assert self._lock_fd is not None, "RunDataset.put outside writing()"
        for name, table in [*((n, tables.get(n)) for n in SIDE_TABLES), (SUMMARY_TABLE, summary)]:
            if table is None:
                continue
            with atomic_file(self.path(name, key), option=self._option, make_parent=True) as temporary:
                pq.write_table(table, temporary)

    # -- reading

    def read_manifest(self) -> dict[str, Any]:
        path = input_file(self.directory / MANIFEST, "sweep manifest", "run the sweep again to rewrite it",
                          missing=f"{self.directory / MANIFEST}: not found; is {self.directory} the --out of a ddlsim sweep?")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DdlsimError(f"{path}: not found; is {self.directory} the --out of a ddlsim sweep?") from None
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON, > 4300 digits
            raise DdlsimError(f"{path}: cannot read the sweep's manifest ({exc}); run the sweep again to rewrite it") from None
        runs = manifest.get("runs", []) if isinstance(manifest, dict) else None
        if not (isinstance(runs, list) and all(isinstance(r, dict) and isinstance(r.get("key"), str) for r in runs)):
            raise DdlsimError(f"{path}: not a sweep manifest (an object whose \"runs\" is a list of runs, each with "
                              "its \"key\"); run the sweep again to rewrite it")
        return manifest

    def read(self, table: str = SUMMARY_TABLE, keys: Optional[Sequence[str]] = None) -> "pa.Table":
        """The complete runs' `table` (summary, iterations, flows, queues) as
        one Arrow table, in the order of `keys` (default: every complete run,
        by key); runs without that side table are left out."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..trace.parquet import PARQUET_ERRORS

        order = sorted(self.done()) if keys is None else [k for k in keys if k in self.done()]
        parts = []
        for k in order:
            path = self.path(table, k)
            if not path.is_file():
                continue
            try:
                part = pq.read_table(input_file(path, "sweep result table", self.redo(k)))
                part.validate(full=True)  # e.g. text that is not UTF-8: refused here, not where a value is taken
                parts.append(part)
            except PARQUET_ERRORS as exc:
                why = _one_line(str(exc).replace(f"Parquet input source '{path}'", "it"))
                raise DdlsimError(f"{path}: cannot read this run's {table} table ({why}); "
                                  f"{self.redo(k)}") from None
        if not parts:
            return pa.table({"key": pa.array([], pa.string())})
        try:
            return pa.concat_tables(parts, promote_options="default")
        except pa.ArrowException as exc:  # a table whose columns are not the others' (not written by ddlsim sweep)
            odd = next((k for k, part in zip(order, parts) if not part.schema.equals(parts[0].schema)), order[-1])
            raise DdlsimError(f"{self.directory / table}: the runs' {table} tables do not agree ({_one_line(exc)}), "
                              f"e.g. {self.path(table, odd).name}; {self.redo(odd)}") from None


    def redo(self, key: str) -> str:
        """The fix for a run whose tables cannot be read: remove its summary (the run's "done" mark); the same sweep
        then runs it again and writes every table of it anew."""
        return (f"remove {self.path(SUMMARY_TABLE, key)} (the run's done mark) and run the command that wrote it "
                "again: it redoes that run")

    def read_run(self, table: str, key: str, columns: "dict[str, str]", rows: Optional[int] = None,
                 min_rows: int = 0) -> "pd.DataFrame":
        """One complete run's `table` as a DataFrame of `columns` (name -> ``"number"``: integers or floats, nulls
        allowed; ``"positive"``: finite and above 0, no nulls; ``"text"``: strings), each checked, with exactly
        `rows` rows if given and at least `min_rows`. A table the caller cannot use (missing, not Parquet, a column
        missing or of another type) is one line naming the file, the column and the fix (:meth:`redo`)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..trace.parquet import PARQUET_ERRORS

        path = self.path(table, key)
        redo = self.redo(key)
        try:
            # something else at the table's path (a FIFO, a directory): the redone run could not write its table there
            placed = path.exists() and not path.is_file()
            schema = pq.read_schema(input_file(path, f"sweep {table} table",
                                               f"move it away, then {redo}" if placed else redo))
            missing = [name for name in columns if name not in schema.names]
            if missing:
                raise DdlsimError(f"{path}: this run's {table} table has no column {missing[0]!r}; {redo}")
            data = pq.read_table(path, columns=list(columns))
            data.validate(full=True)  # e.g. text that is not UTF-8: refused here, not where a value is taken
        except PARQUET_ERRORS as exc:
            why = _one_line(str(exc).replace(f"Parquet input source '{path}'", "it"))
            raise DdlsimError(f"{path}: cannot read this run's {table} table ({why}); {redo}") from None
        if (rows is not None and data.num_rows != rows) or data.num_rows < min_rows:
            wanted = rows if rows is not None else f"at least {min_rows}"
            raise DdlsimError(f"{path}: this run's {table} table has {data.num_rows} rows, not {wanted}; {redo}")
        for name, kind in columns.items():
            column = data.column(name)
            numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
            if kind == "text" and not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise DdlsimError(f"{path}: column {name!r} of this run's {table} table holds {column.type}, not text; {redo}")
            if kind != "text" and not numeric:
                raise DdlsimError(f"{path}: column {name!r} of this run's {table} table holds {column.type}, not "
                                  f"numbers; {redo}")
            if kind == "positive":
                values = column.to_numpy(zero_copy_only=False).astype(float) if column.null_count == 0 else None
                if values is None or not (np.isfinite(values) & (values > 0)).all():
                    raise DdlsimError(f"{path}: column {name!r} of this run's {table} table holds a value that is not "
                                      f"a finite number above 0; {redo}")
        return data.to_pandas()



def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def read_sweep(directory: "str | Path", table: str = SUMMARY_TABLE) -> "pd.DataFrame":
    """A sweep's results as a DataFrame: `table` of every complete run, in the
    grid order of the directory's latest sweep (runs of earlier sweeps into the
    same directory after them)."""
    dataset = RunDataset(directory)
    try:
        order = [r["key"] for r in dataset.read_manifest().get("runs", [])]
    except DdlsimError:
        order = []
    keys = order + sorted(dataset.done() - set(order))
    return dataset.read(table, keys).to_pandas()
