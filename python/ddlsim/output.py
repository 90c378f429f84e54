"""Writing results to a directory, all or nothing."""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from . import _core
from .errors import DdlsimError
from .analyze.plot import save_figure, timeline_figure
from .simulation.run import scenario_json
from .trace import write_chrome_trace, write_event_log


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """Yields a scratch directory beside `out_dir`; on success its files
    move into `out_dir` (created if needed), on failure it vanishes."""
    out_dir = Path(out_dir)
    parent = out_dir.resolve().parent
    if out_dir.exists() and not out_dir.is_dir():
        raise DdlsimError(f"{out_dir}: exists and is not a directory; choose another --out")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=parent))
    except OSError as exc:
        raise DdlsimError(f"{out_dir}: cannot write here ({exc.strerror}); choose another --out") from None
    # If Ctrl-C / SIGTERM cannot unwind in time (a long call into C), the CLI's native backstop removes it.
    _core.register_scratch(str(stage))
    try:
        yield stage
        out_dir.mkdir(parents=True, exist_ok=True)
        for item in sorted(stage.iterdir()):
            target = out_dir / item.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            item.replace(target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        _core.unregister_scratch(str(stage))


def save_result(result: Any, out_dir: Path, timeline: bool = True, prefix: str = "") -> dict[str, Path]:
    names = {
        "events": f"{prefix}events.parquet",
        "chrome_trace": f"{prefix}trace.json",
        "iterations": f"{prefix}iterations.csv",
        "summary": f"{prefix}summary.json",
    }
    if timeline:
        names["timeline"] = f"{prefix}timeline.png"
    with staged_directory(out_dir) as stage:
        write_result_files(result, stage, names)
    return {key: Path(out_dir) / name for key, name in names.items()}


# Above this many ring-step rows the Perfetto trace shows each rank's
# all-reduce spans but not the steps inside them (a trace of millions of
# slices is too slow to write and to open); the Parquet log keeps them all.
CHROME_STEP_LIMIT = 100_000


def chrome_view(events):
    """The rows exported to the Perfetto trace, and a note if steps were left out."""
    steps = events["op"] == "ring_step"
    count = int(steps.sum())
    if count <= CHROME_STEP_LIMIT:
        return events, None
    return events[~steps], (
        f"{count:,} ring-step rows left out of the Perfetto trace (limit {CHROME_STEP_LIMIT:,}); "
        "the all-reduce spans are there and every step is in the Parquet event log"
    )


def write_result_files(result: Any, directory: Path, names: dict[str, str]) -> None:
    metadata = {"source": "simulate", "scenario": json.loads(scenario_json(result.scenario)), "model": result.model.name}
    write_event_log(result.events, directory / names["events"], metadata=metadata)
    chrome_events, note = chrome_view(result.events)
    write_chrome_trace(chrome_events, directory / names["chrome_trace"])
    if note:
        result.notes.append(note)
    result.iterations.to_csv(directory / names["iterations"], index=False)
    (directory / names["summary"]).write_text(json.dumps(result.summary(), indent=2) + "\n", encoding="utf-8")
    if "timeline" in names:
        sc = result.scenario
        title = f"{result.model.display_name}, {sc.workers} workers, {sc.strategy}, {sc.network.bandwidth}"
        save_figure(timeline_figure(result.events, title), directory / names["timeline"])
