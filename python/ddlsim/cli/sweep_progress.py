"""The progress bar of a sweep (scenarios done of total, on stderr)."""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class SweepProgress:
    """A bar of scenarios done (cached or simulated), shown only when `enabled`
    (stderr is a terminal and no --quiet); use as a context manager and pass
    the instance as the sweep's on_progress."""

    def __init__(self, console: Console, enabled: bool, description: str = "simulating"):
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[label]}"),
                            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
                            disable=not enabled)
        self.description = description
        self.task: Optional[TaskID] = None

    def __enter__(self) -> "SweepProgress":
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=None, label="")
        return self

    def __exit__(self, *exc) -> bool:
        self.bar.stop()
        return False

    def __call__(self, done: int, total: int, label: str) -> None:
        self.bar.update(self.task, completed=done, total=total, label=label)
