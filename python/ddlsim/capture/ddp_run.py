"""Runs the built-in DDP capture on this machine and merges it: what
``ddlsim capture ddp`` does, without the printing.

A failed rank still leaves a trace: the ranks' files are merged into a
log flagged ``partial`` and the failure is returned beside it. An
interrupted capture (Ctrl-C, SIGTERM) leaves nothing: see :mod:`.outdir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import DdlsimError
from .ddp_merge import SIDECAR_SUFFIX, merge_ddp
from .outdir import capture_dir
from .recorder import FILE_SUFFIX


def prepare_out_dir(out: Path) -> None:
    """Creates `out`, removing rank files of an earlier capture (they would be merged with the new ones)."""
    if out.exists() and not out.is_dir():
        raise DdlsimError(f"--out {out} is a file; give a directory for the capture (it is created if missing)")
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob(f"*{FILE_SUFFIX}"), *out.glob(f"*{SIDECAR_SUFFIX}")]:
        stale.unlink()


def run_ddp_capture(config: dict, workers: int, out: Path, *, timeout_s: float = 600.0,
                    bandwidth_bps: Optional[float] = None, on_note: Optional[Callable[[str], None]] = None):
    """(event log, CaptureError or None). Raises DdlsimError when nothing could be recorded.

    `on_note(text)` hears about leftovers of earlier shaped captures removed at the start."""
    from .launch import check_world_fits

    check_world_fits(workers)  # before the directory, the namespaces or any rank
    with capture_dir(out) as out:
        return _run(config, workers, out, timeout_s, bandwidth_bps, on_note)


def _run(config: dict, workers: int, out: Path, timeout_s: float, bandwidth_bps: Optional[float],
         on_note: Optional[Callable[[str], None]]):
    from .launch import CaptureError, host_facts, launch_local

    prepare_out_dir(out)
    config = {**config, "merge": False}
    failure: Optional[CaptureError] = None
    try:
        if bandwidth_bps is None:
            launch_local("ddp", config, workers, out, timeout_s=timeout_s)
        else:
            try:
                from .shaping import shaped_network
            except ImportError:
                raise DdlsimError("--bandwidth needs shaped links (ddlsim.capture.shaping), which this installation "
                                  "does not have; run the capture without --bandwidth") from None
            with shaped_network(workers, bandwidth_bps, on_note=on_note) as net:
                launch_local("ddp", config, workers, out, timeout_s=timeout_s, wrap=net.wrap, master_addr=net.master_addr,
                             env=net.env)
    except CaptureError as exc:
        failure = exc
    if not list(out.glob(f"*{FILE_SUFFIX}")):
        if failure is not None:
            raise DdlsimError(f"{failure}\nno rank recorded anything, so there is no trace to merge") from None
        raise DdlsimError(f"{out}: the capture finished but no rank wrote a file; see {out / 'logs'}")
    shaped = {} if bandwidth_bps is None else {"bandwidth": f"{bandwidth_bps / 1e6:g}Mbps"}
    return merge_ddp(out, metadata={**shaped, **host_facts(workers)}), failure
