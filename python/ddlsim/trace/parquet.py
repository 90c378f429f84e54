"""The native event-log file: Parquet with the schema version and metadata.

The Parquet key-value metadata holds two keys:

``ddlsim.schema_version``
    :data:`~ddlsim.trace.schema.SCHEMA_VERSION` as a decimal string.
``ddlsim.metadata``
    a JSON object describing the run, e.g. ``{"source": "simulate",
    "scenario": {...}}``.

Writes are atomic: the file appears complete or not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TraceError
from .schema import (
    COLUMN_NAMES,
    EVENT_LOG_SCHEMA,
    METADATA_KEY,
    METADATA_VERSION_KEY,
    SCHEMA_VERSION,
    validate_event_log,
)

_NEW_FILE_MODE = 0o644


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` on success.

    The temporary file lives in the same directory so that ``os.replace`` is
    an atomic rename. If the body raises, the temporary file is removed and
    ``path`` is left exactly as it was.
    """
    target = Path(path)
    directory = target.parent
    if not directory.is_dir():
        raise TraceError(f"cannot write {target}: directory {directory} does not exist")
    try:
        handle, temporary_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise TraceError(f"cannot write {target}: {err.strerror or err}") from None
    os.close(handle)
    temporary = Path(temporary_name)
    try:
        yield temporary
        _flush_to_disk(temporary)
        # mkstemp creates the file private (0600); give it a normal mode.
        mode = target.stat().st_mode & 0o7777 if target.exists() else _NEW_FILE_MODE
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException as err:
        temporary.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise TraceError(f"cannot write {target}: {err.strerror or err}") from err
        raise


def _flush_to_disk(path: Path) -> None:
    with open(path, "rb+") as stream:
        os.fsync(stream.fileno())


def _metadata_json(metadata: Mapping[str, Any] | None, path: Path) -> str:
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise TraceError(f"cannot write {path}: metadata must be a dict, got {type(metadata).__name__}")
    bad_keys = [key for key in metadata if not isinstance(key, str)]
    if bad_keys:
        raise TraceError(f"cannot write {path}: metadata keys must be strings, got {bad_keys!r}")
    try:
        return json.dumps(dict(metadata), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TraceError(
            f"cannot write {path}: metadata is not JSON-serialisable ({err}); "
            "use str/int/float/bool/None, lists and dicts"
        ) from None


def write_event_log(
    df: pd.DataFrame, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None
) -> Path:
    """Validate ``df`` and write it to ``path`` as Parquet, atomically.

    ``metadata`` is a JSON-serialisable dict stored with the file (e.g.
    ``{"source": "simulate", "scenario": "ps-4w"}``); :func:`read_event_log`
    returns it unchanged. Nothing is written if validation fails.
    """
    path = Path(path)
    log = validate_event_log(df, source=f"event log for {path}")
    metadata_json = _metadata_json(metadata, path)
    table = pa.Table.from_pandas(log, schema=EVENT_LOG_SCHEMA, preserve_index=False)
    table = table.replace_schema_metadata(
        {METADATA_VERSION_KEY: str(SCHEMA_VERSION), METADATA_KEY: metadata_json}
    )
    with atomic_output(path) as temporary:
        pq.write_table(table, temporary)
    return path


def read_event_log(
    path: str | os.PathLike[str], *, check_causality: bool = True
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read and validate an event log written by :func:`write_event_log`.

    Returns ``(log, metadata)``. Files without ddlsim metadata (e.g. written
    by ``DataFrame.to_parquet``) are accepted if their columns validate; their
    metadata is ``{}``. Raises :class:`TraceError` naming the file otherwise.
    """
    path = Path(path)
    table = _read_table(path)
    raw = table.schema.metadata or {}
    _check_version(raw, path)
    metadata = _parse_metadata(raw, path)
    missing = [name for name in COLUMN_NAMES if name not in table.column_names]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {missing}; an event log needs all of {list(COLUMN_NAMES)} "
            "(was this file written by ddlsim?)"
        )
    frame = table.to_pandas(types_mapper=_nullable_integer_dtype)
    log = validate_event_log(frame, source=str(path), check_causality=check_causality)
    return log, metadata


def _read_table(path: Path) -> pa.Table:
    if not path.exists():
        raise TraceError(f"{path}: no such event log file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, expected an event-log Parquet file")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise TraceError(
            f"{path}: not a readable Parquet file ({err}); event logs are written by "
            "ddlsim (simulate/capture) or ddlsim.trace.write_event_log"
        ) from None


def _check_version(raw: Mapping[bytes, bytes], path: Path) -> None:
    text = raw.get(METADATA_VERSION_KEY.encode())
    if text is None:
        return
    try:
        version = int(text.decode())
    except (UnicodeDecodeError, ValueError):
        raise TraceError(f"{path}: {METADATA_VERSION_KEY} is {text!r}, expected an integer") from None
    if version > SCHEMA_VERSION:
        raise TraceError(
            f"{path}: written with event-log schema version {version}, but this ddlsim "
            f"reads versions up to {SCHEMA_VERSION}; upgrade ddlsim to read it"
        )
    if version < 1:
        raise TraceError(f"{path}: {METADATA_VERSION_KEY} is {version}, expected 1..{SCHEMA_VERSION}")


def _parse_metadata(raw: Mapping[bytes, bytes], path: Path) -> dict[str, Any]:
    text = raw.get(METADATA_KEY.encode())
    if text is None:
        return {}
    try:
        metadata = json.loads(text.decode())
    except (UnicodeDecodeError, ValueError) as err:
        raise TraceError(f"{path}: {METADATA_KEY} is not valid JSON ({err})") from None
    if not isinstance(metadata, dict):
        raise TraceError(f"{path}: {METADATA_KEY} must be a JSON object, got {type(metadata).__name__}")
    return metadata


_NULLABLE_INTEGERS = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
}


def _nullable_integer_dtype(arrow_type: pa.DataType) -> Any:
    # Keep nulls as nulls (not NaN floats) so validation can name the row.
    return _NULLABLE_INTEGERS.get(arrow_type)
