"""`ddlsim capture ...`: run a real PyTorch job and record it as an event log.

Each job's command lives in its own module and registers itself on
`capture_app`; `merge` (here) turns a capture directory written by torchrun
ranks into the event log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .consoles import out

capture_app = typer.Typer(
    help="Run a real PyTorch job (DDP, parameter server over RPC) and record it as an event log; needs `pip install ddlsim[capture]`.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@capture_app.command("merge")
def merge(
    capture_dir: Path = typer.Argument(..., help="Capture directory holding the ranks' *.rank.jsonl files."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Event log to write (default: CAPTURE_DIR/events.parquet)."),
) -> None:
    """Merge the per-rank files of a capture (e.g. one started with torchrun) into one event log."""
    from ..capture.merge import merge_capture
    from ..trace import write_event_log

    log = merge_capture(capture_dir)
    target = out_path or capture_dir / "events.parquet"
    write_event_log(log, target)
    flag = f"; partial ranks {log.metadata['partial_ranks']}" if log.metadata.get("partial") else ""
    out.print(f"wrote {target}: {log.table.num_rows} rows from {len(log.metadata['ranks'])} ranks{flag}", highlight=False)


from . import capture_ddp_command, capture_ps_command  # noqa: E402

capture_ddp_command.register(capture_app)
capture_ps_command.register(capture_app)
