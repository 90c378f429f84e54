"""`ddlsim capture ...`: run a real PyTorch job and record it as an event log.

Each job's command lives in its own module and registers itself on
`capture_app`; `merge` (here) turns a capture directory written by torchrun
ranks into the event log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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
    from ..capture.ddp_merge import SIDECAR_SUFFIX
    from ..capture.recorder import FILE_SUFFIX
    from ..safe_io import check_file_target
    from ..trace import write_event_log

    target = out_path or capture_dir / "events.parquet"
    read = [*capture_dir.glob(f"*{FILE_SUFFIX}"), *capture_dir.glob(f"*{SIDECAR_SUFFIX}"), config or capture_dir / "job.json"]
    check_file_target(target, inputs=read)  # never a directory, a device or the files merged
    log = merge_directory(capture_dir, config)
    write_event_log(log, target)
    flag = f"; partial ranks {log.metadata['partial_ranks']}" if log.metadata.get("partial") else ""
    out.print(f"wrote {target}: {log.table.num_rows} rows from {len(log.metadata['ranks'])} ranks{flag}", highlight=False)


def merge_directory(capture_dir: Path, config: Optional[Path] = None):
    """The event log of a capture directory's per-rank files (what ``ddlsim capture merge`` writes): a DDP
    capture's (it has the ranks' sidecar files) with its buckets and facts, a PS capture's with the facts of its
    job description (`config`, default ``CAPTURE_DIR/job.json``), any other's rows as they are."""
    import json

    from ..capture.ddp_merge import SIDECAR_SUFFIX, merge_ddp
    from ..capture.merge import merge_capture
    from ..errors import DdlsimError
    from ..inputs import input_file

    job_file = config or capture_dir / "job.json"
    if config is not None:
        input_file(config, "job description", "give the job.json the ranks were started with", label=f"--config {config}",
                   missing=f"--config {config}: no such file; give the job.json the ranks were started with")
    elif job_file.exists():  # the capture's own job.json, when there: a FIFO there would block the read below
        input_file(job_file, "job description", "give the job.json the ranks were started with")
    try:
        job = json.loads(job_file.read_text(encoding="utf-8")) if job_file.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, > 4300 digits
        raise DdlsimError(f"{job_file}: unreadable job description ({exc}); delete it to merge the rows without the job's facts") from None
    if not isinstance(job, dict):
        raise DdlsimError(f"{job_file}: not a job description (a JSON object such as ddlsim capture writes); delete it to "
                          "merge the rows without the job's facts")
    if any(capture_dir.glob(f"*{SIDECAR_SUFFIX}")):  # a DDP capture: buckets as groups, the job's facts
        return merge_ddp(capture_dir, write=False)
    if job.get("job") == "ps":
        from ..capture.ps import metadata, ps_config
        from .capture_ps_command import _add_client_cost

        try:
            config = ps_config(**{str(k): v for k, v in job.items() if k not in ("job", "world_size")})
        except DdlsimError as exc:
            raise DdlsimError(f"{job_file}: {exc}; correct it, or delete the file to merge the rows without the job's "
                              "facts") from None
        log = merge_capture(capture_dir, metadata=metadata(config))
        _add_client_cost(log)
        return log
    return merge_capture(capture_dir)


@capture_app.command("cleanup")
def cleanup() -> None:
    """Remove the network namespaces, veth links and qdiscs that shaped captures (--bandwidth) left behind when they
    were killed hard (SIGKILL), and say what was removed. Those of a capture still running are kept; nothing that
    ddlsim did not make is touched. Needs root."""
    from ..capture.launch import CaptureError
    from ..capture.shaping import find_leftovers, remove_leftovers
    from ..errors import DdlsimError

    if os.geteuid() != 0:
        raise DdlsimError(f"ddlsim capture cleanup: not running as root (uid {os.geteuid()}); shaped captures' namespaces "
                          "and links can only be removed as root: run it with sudo")
    if shutil.which("ip") is None:
        raise DdlsimError("ddlsim capture cleanup: `ip` is not installed (package iproute2), so no shaped capture ran here")
    try:
        found = find_leftovers()
        removed = remove_leftovers(found)
    except (CaptureError, OSError, subprocess.SubprocessError) as exc:
        raise DdlsimError(f"ddlsim capture cleanup: {exc}") from None
    for x in removed:
        out.print(f"removed {x.describe()}", highlight=False)
    kept = [x for x in found if x.owner_alive]
    for x in kept:
        out.print(f"kept {x.describe()}: that capture is still running", highlight=False)
    failed = [x for x in found if not x.owner_alive and x not in removed]
    if failed:
        raise DdlsimError("ddlsim capture cleanup: could not remove " + "; ".join(x.describe() for x in failed)
                          + "; remove them with `ip netns del NAME` / `ip link del NAME`")
    if not removed and not kept:
        out.print("nothing to remove: no network namespace or link of a shaped capture is left", highlight=False)


from . import capture_ddp_command, capture_ps_command  # noqa: E402

capture_ddp_command.register(capture_app)
capture_ps_command.register(capture_app)
