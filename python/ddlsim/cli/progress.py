"""The progress bar of long runs (on stderr), and clean exits on Ctrl-C / SIGTERM."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any, Optional

from ..units import format_seconds
from .consoles import real_console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Runs shorter than this show no bar.
SHOW_AFTER_S = 1.0


class EngineProgress:
    """The engine's progress callback (see ddlsim.simulation.budget.run_control):
    a bar of operations done with the iteration reached, simulated time and
    an ETA, shown once a run has gone on for SHOW_AFTER_S, only when
    `enabled` (a terminal on stderr, no --quiet)."""

    def __init__(self, console: Any, iterations: int, enabled: bool):
        self.console = console
        self.iterations = iterations
        self.enabled = enabled
        self.started = time.monotonic()
        self._bar: Optional["Progress"] = None
        self._task: Optional["TaskID"] = None

    def start(self, scenario, estimate) -> None:
        """The run was admitted (see budget.run_control's on_start)."""
        self.iterations = scenario.iterations

    def __enter__(self) -> "EngineProgress":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def _show(self, total: int) -> bool:
        if self._bar is None:
            if not self.enabled or time.monotonic() - self.started < SHOW_AFTER_S:
                return False
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=real_console(self.console),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("simulating", total=max(1, total), detail="")
        return True

    def __call__(self, now_ns: int, events: int, ops_done: int, ops_total: int) -> None:
        if not self._show(ops_total):
            return
        done = ops_done * self.iterations // max(1, ops_total)
        detail = f"iteration {done}/{self.iterations} · simulated {format_seconds(now_ns / 1e9)} · {events:,} events"
        self._bar.update(self._task, total=max(1, ops_total), completed=ops_done, detail=detail)

    def phase(self, name: str) -> None:
        """After the engine: `name` (analysing, writing) with the bar full."""
        if self._show(1):
            task = self._bar.tasks[0]
            self._bar.update(self._task, description=name, completed=task.total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class Interrupted(SystemExit):
    """Ctrl-C (exit 130) or SIGTERM (exit 143): unwinds like any exception,
    so that scratch directories are removed on the way out. A SystemExit, so
    that click does not turn it into 'Aborted!' and the engine's error
    handling lets it through."""


_first_signal: Optional[float] = None


def _on_signal(signum: int, frame) -> None:
    global _first_signal
    now = time.monotonic()
    # A second signal during clean-up is ignored for a moment, so that it cannot leave a scratch directory behind.
    if _first_signal is not None and now - _first_signal < 2.0:
        return
    _first_signal = now
    raise Interrupted(128 + signum)


# After a signal, Python gets this long to unwind before the native backstop ends the process.
GRACE_MS = 700
# `ddlsim capture` waits in Python (it never sits in a long C call), and its clean-up takes
# longer: ending the ranks (SIGTERM, SIGKILL a second later), removing the network namespaces
# of a shaped capture with `ip`, then this run's files. The backstop is only for a hang there.
CAPTURE_GRACE_MS = 8000


def install_signal_handlers(grace_ms: int = GRACE_MS) -> None:
    """Ctrl-C and SIGTERM raise Interrupted (in the main thread, also while
    the engine runs: it polls for signals every 50 ms). Python runs handlers
    only between bytecodes, so a long call into numpy or pyarrow could delay
    that; the native backstop then removes the scratch directories and exits
    GRACE_MS after the signal, with the same status."""
    from .. import _core

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    _core.arm_interrupt_watchdog(grace_ms)
