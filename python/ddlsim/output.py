"""Writing results to a directory, all or nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import _core
from .errors import DdlsimError
from .trace import write_chrome_trace, write_event_log


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """Yields a scratch directory inside `out_dir` (created if needed); on
    success its files move into `out_dir`, on any failure (an error, Ctrl-C)
    the scratch directory vanishes, and so does `out_dir` if this call
    created it. Staging inside the target keeps every rename on one
    filesystem and needs no write access to the parent."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise DdlsimError(f"{out_dir}: exists and is not a directory; choose another --out")
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".ddlsim-staging-", dir=out_dir))
    except OSError as exc:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise DdlsimError(f"{out_dir}: cannot write here ({exc.strerror or exc}); choose another --out") from None
    done = False
    # If Ctrl-C / SIGTERM cannot unwind in time (a long call into C), the CLI's native backstop removes
    # the scratch directory, and the output directory too if this call created it.
    scratch = [str(stage)] + ([str(out_dir)] if created else [])
    for path in scratch:
        _core.register_scratch(path)
    try:
        yield stage
        for item in sorted(stage.iterdir()):
            target = out_dir / item.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(item, target)
        done = True
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        for path in scratch:
            _core.unregister_scratch(path)
        if created and not done:
            shutil.rmtree(out_dir, ignore_errors=True)


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


# Above this many collective-step rows the Perfetto trace shows each rank's
# collective spans but not the steps inside them; above CHROME_ROW_LIMIT rows
# in all it shows the first iterations only (a trace of millions of slices
# is too slow to write and to open). The Parquet log keeps every row.
CHROME_STEP_LIMIT = 100_000
CHROME_ROW_LIMIT = 300_000


def chrome_view(log):
    """The rows exported to the Perfetto trace, and notes on what was left out."""
    notes = []
    codes, dictionary = log.codes("kind")
    point_to_point = [i for i, k in enumerate(dictionary) if k in ("send", "recv")]
    steps = np.isin(codes, point_to_point) & (log.column("step") >= 0)
    count = int(steps.sum())
    view = log
    if count > CHROME_STEP_LIMIT:
        view = log.filter(~steps)
        notes.append(
            f"{count:,} collective-step rows left out of the Perfetto trace (limit {CHROME_STEP_LIMIT:,}); "
            "the collective spans are there and every step is in the Parquet event log"
        )
    if len(view) > CHROME_ROW_LIMIT:
        iteration = view.column("iteration")
        numbers, counts = np.unique(iteration[iteration >= 0], return_counts=True)
        budget = CHROME_ROW_LIMIT - int((iteration < 0).sum())
        fits = max(1, int(np.searchsorted(np.cumsum(counts), budget, side="right")))
        keep = (iteration < 0) | np.isin(iteration, numbers[:fits])
        if int(keep.sum()) > CHROME_ROW_LIMIT:  # one iteration alone is too big: its earliest rows
            start = view.column("start_ns")
            cutoff = np.sort(start[keep])[CHROME_ROW_LIMIT - 1]
            keep &= start <= cutoff
        total = len(view)
        view = view.filter(keep)
        shown = f"iteration {numbers[0]}" if fits == 1 else f"iterations {numbers[0]}-{numbers[fits - 1]}"
        notes.append(
            f"the Perfetto trace shows {shown} of {len(numbers)} ({len(view):,} of {total:,} rows, limit "
            f"{CHROME_ROW_LIMIT:,}); every row is in the Parquet event log"
        )
    return view, notes


def write_result_files(result: Any, directory: Path, names: dict[str, str]) -> None:
    write_event_log(result.events, directory / names["events"])
    chrome_events, notes = chrome_view(result.events)
    write_chrome_trace(chrome_events, directory / names["chrome_trace"])
    result.notes.extend(notes)
    result.iterations.to_csv(directory / names["iterations"], index=False)
    (directory / names["summary"]).write_text(json.dumps(result.summary(), indent=2) + "\n", encoding="utf-8")
    if "timeline" in names:
        from .analyze.plot import save_figure, timeline_figure  # matplotlib only when a picture is wanted

        sc = result.scenario
        net = sc.network
        place = f" {net.hosts_per_leaf}/leaf {net.rack_placement}" if net.topology == "leaf-spine" else ""
        title = f"{result.model.display_name}, {sc.workers} workers, {sc.strategy.label}, {net.bandwidth} {net.topology}{place}"
        save_figure(timeline_figure(result.events, title), directory / names["timeline"])
