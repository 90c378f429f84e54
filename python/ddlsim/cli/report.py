"""Terminal tables (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..units import format_bytes, format_seconds


def summary_table(summaries: dict[str, dict], title: str = "ddlsim") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("scenario")
    for name in ("iteration", "compute", "comm", "overlap", "exposed comm", "idle", "samples/s", "sent/worker/iter"):
        table.add_column(name, justify="right")
    for label, s in summaries.items():
        table.add_row(
            label,
            format_seconds(s["iteration_time_s"]),
            format_seconds(s["compute_s"]),
            format_seconds(s["communication_s"]),
            format_seconds(s["overlap_s"]),
            format_seconds(s["exposed_communication_s"]),
            format_seconds(s["idle_s"]),
            f"{s['throughput_samples_per_s']:.0f}",
            format_bytes(s["bytes_sent_per_worker_per_iteration"]),
        )
    return table


def print_summaries(summaries: dict[str, dict], title: str, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(summaries, title))
