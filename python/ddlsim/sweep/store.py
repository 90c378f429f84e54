"""The results store: one JSON summary per simulated scenario, keyed by a hash
of the canonical scenario JSON, the files it reads (a profile's contents),
the ddlsim version and the engine build (a hash of the loaded extension's
bytes: a rebuilt engine with the same version string does not get the old
engine's results), so a scenario that was run before is answered from disk."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from ..errors import DdlsimError
from ..simulation.scenario import Scenario

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


class ResultStore:
    """Summaries as `<directory>/runs/<key[:2]>/<key>.json`, written atomically
    (a reader never sees half a file; concurrent writers of one key write the same bytes)."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / "runs" / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        path = self._path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DdlsimError(f"{path}: cannot read the results cache ({exc.strerror or exc}); choose another --cache") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return None  # a damaged entry is simulated again and overwritten

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
