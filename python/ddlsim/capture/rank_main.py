"""One rank of a capture job: ``python -m ddlsim.capture.rank_main JOB --config FILE --out DIR``.

Reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the
environment (as torchrun sets them) and calls the job's ``run_rank(config,
rank, world_size, out_dir)`` (see :data:`ddlsim.capture.launch.JOBS`).

Started by ``ddlsim capture`` (``DDLSIM_LAUNCHER_PID`` set), a rank first asks
the kernel to SIGKILL it when its launcher dies (Linux ``PR_SET_PDEATHSIG``),
and exits at once if the launcher is already gone: a launcher killed with
SIGKILL leaves no rank running on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import import_module
from pathlib import Path


PR_SET_PDEATHSIG = 1


def die_with_launcher() -> bool:
    """Arms PR_SET_PDEATHSIG for the launcher named in the environment; False when it is already gone."""
    launcher = os.environ.get("DDLSIM_LAUNCHER_PID", "")
    if not launcher.isdigit() or not sys.platform.startswith("linux"):
        return True
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return True
    return os.getppid() == int(launcher)  # after arming, so that a launcher dying in between is seen


def main(argv: list[str] | None = None) -> int:
    from .launch import JOBS

    if not die_with_launcher():
        print("error: the launcher (ddlsim capture) is gone; not starting", file=sys.stderr)
        return 1

    parser = argparse.ArgumentParser(prog="python -m ddlsim.capture.rank_main")
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("--config", required=True, help="job configuration (JSON), as `ddlsim capture` writes it")
    parser.add_argument("--out", required=True, help="capture directory shared by all ranks")
    args = parser.parse_args(argv)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        print(f"error: {', '.join(missing)} not set; start ranks with `ddlsim capture` or torchrun", file=sys.stderr)
        return 2
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    module, _, function = JOBS[args.job].partition(":")
    run_rank = getattr(import_module(module), function)
    run_rank(config, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), Path(args.out))
    return 0


def exit_now(status: int) -> None:
    """Ends the rank once its job returned: every file it writes is closed by then (the recorder fsyncs and closes
    its trace, sidecars are written whole, rank 0 merged). Python's own finalization of torch (its modules, the
    process group's and the RPC agent's threads) would take another 1-4 s of a busy core per rank, which the
    launcher and the user wait for; a failed job (an exception) still ends the ordinary way, with its traceback."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
