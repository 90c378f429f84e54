"""Writing a run's results to a directory, all or nothing (through :mod:`ddlsim.safe_io`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .safe_io import staged_directory  # noqa: F401  (the one way results are written: see ddlsim.safe_io)
from .trace import write_chrome_trace, write_event_log


def save_result(result: Any, out_dir: Path, timeline: bool = True, prefix: str = "",
                inputs: Sequence[Any] = ()) -> dict[str, Path]:
    """The run's files in `out_dir`, all or nothing; none of them may be one of `inputs` (the files the run
    was made from, e.g. a replayed log or a profile)."""
    names = {
        "events": f"{prefix}events.parquet",
        "chrome_trace": f"{prefix}trace.json",
        "iterations": f"{prefix}iterations.csv",
        "summary": f"{prefix}summary.json",
    }
    if timeline:
        names["timeline"] = f"{prefix}timeline.png"
    with staged_directory(out_dir, inputs=inputs) as stage:
        write_result_files(result, stage, names)
    return {key: Path(out_dir) / name for key, name in names.items()}


# Above this many collective-step rows the Perfetto trace shows each rank's
# collective spans but not the steps inside them; above CHROME_ROW_LIMIT rows
# in all it shows the first iterations only (a trace of millions of slices
# is too slow to write and to open). The Parquet log keeps every row.
CHROME_STEP_LIMIT = 100_000
CHROME_ROW_LIMIT = 300_000
# Queue-occupancy samples (packet level) shown as Perfetto counters: the earliest this many.
CHROME_COUNTER_LIMIT = 200_000


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
    queues = getattr(view, "queues", None)
    if queues is not None and queues.num_rows > CHROME_COUNTER_LIMIT:
        import pyarrow.compute as pc

        order = pc.sort_indices(queues, sort_keys=[("time_ns", "ascending")])
        kept = queues.take(order[:CHROME_COUNTER_LIMIT])
        last = kept.column("time_ns")[-1].as_py()
        notes.append(
            f"the Perfetto trace shows queue occupancy up to {last / 1e6:.3f} ms ({CHROME_COUNTER_LIMIT:,} of "
            f"{queues.num_rows:,} samples); every sample is in queues.parquet"
        )
        validated = view.is_validated
        view = view.replace(queues=kept)
        if validated:  # the same rows, fewer samples of a checked table: no second validation
            view._validated = view.table
    return view, notes


def without_wall_time(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (a run's summary, a plan) as its file holds it: without `wall_s`, the time the work took here
    (printed, and in `--json` and the result), the one value that differs from run to run, so that identical inputs
    give identical files."""
    return {k: v for k, v in document.items() if k != "wall_s"}


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """A run's summary as summary.json (:func:`without_wall_time`)."""
    path.write_text(json.dumps(without_wall_time(summary), indent=2) + "\n", encoding="utf-8")


def write_result_files(result: Any, directory: Path, names: dict[str, str]) -> None:
    write_event_log(result.events, directory / names["events"])
    chrome_events, notes = chrome_view(result.events)
    write_chrome_trace(chrome_events, directory / names["chrome_trace"])
    result.notes.extend(notes)
    result.iterations.to_csv(directory / names["iterations"], index=False)
    write_summary(result.summary(), directory / names["summary"])
    if "timeline" in names:
        from .analyze.plot import save_figure, timeline_figure  # matplotlib only when a picture is wanted

        sc = result.scenario
        net = sc.network
        place = f" {net.hosts_per_leaf}/leaf {net.rack_placement}" if net.topology == "leaf-spine" else ""
        title = f"{result.model.display_name}, {sc.workers} workers, {sc.strategy.label}, {net.bandwidth} {net.topology}{place}"
        save_figure(timeline_figure(result.events, title), directory / names["timeline"])
