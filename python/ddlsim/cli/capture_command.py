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
    config: Optional[Path] = typer.Option(
        None, "--config", help="The job's configuration (the --config the ranks ran with; default: CAPTURE_DIR/job.json)."),
) -> None:
    """Merge the per-rank files of a capture (e.g. one started with torchrun) into one event log.

    A DDP capture's bucket table and facts come from the ranks' sidecar files; a PS capture's facts from the job's
    configuration."""
    import json

    from ..capture.ddp_merge import SIDECAR_SUFFIX, merge_ddp
    from ..capture.merge import merge_capture
    from ..errors import DdlsimError
    from ..trace import write_event_log

    job_file = config or capture_dir / "job.json"
    if config is not None and not config.is_file():
        raise DdlsimError(f"--config {config}: no such file; give the job.json the ranks were started with")
    try:
        job = json.loads(job_file.read_text(encoding="utf-8")) if job_file.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, > 4300 digits
        raise DdlsimError(f"{job_file}: unreadable job description ({exc}); delete it to merge the rows without the job's facts") from None
    if any(capture_dir.glob(f"*{SIDECAR_SUFFIX}")):  # a DDP capture: buckets as groups, the job's facts
        log = merge_ddp(capture_dir, write=False)
    elif job.get("job") == "ps":
        from ..capture.ps import metadata, ps_config

        log = merge_capture(capture_dir, metadata=metadata(ps_config(**{k: v for k, v in job.items() if k not in ("job", "world_size")})))
    else:
        log = merge_capture(capture_dir)
    target = out_path or capture_dir / "events.parquet"
    write_event_log(log, target)
    flag = f"; partial ranks {log.metadata['partial_ranks']}" if log.metadata.get("partial") else ""
    out.print(f"wrote {target}: {log.table.num_rows} rows from {len(log.metadata['ranks'])} ranks{flag}", highlight=False)


from . import capture_ddp_command, capture_ps_command  # noqa: E402

capture_ddp_command.register(capture_app)
capture_ps_command.register(capture_app)
