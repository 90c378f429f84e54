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
    from ..errors import DdlsimError

    module, _, function = JOBS[args.job].partition(":")
    try:
        config = read_config(args.config)
        run_rank = getattr(import_module(module), function)
        run_rank(config, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), Path(args.out))
    except DdlsimError as exc:  # a job description the job refuses: one line, as ddlsim's commands say it
        print(f"error: rank {os.environ['RANK']}: {exc}", file=sys.stderr)
        return 2
    return 0


def read_config(path: str) -> dict:
    """The job description a rank was started with (``--config``): a JSON object, as ``ddlsim capture`` and
    ``ddlsim.capture.ps.ps_config`` write it; anything else is a DdlsimError naming the file."""
    from ..errors import DdlsimError
    from ..inputs import input_file

    fix = "give the job.json that ddlsim capture wrote (or ddlsim.capture.ps.ps_config's, with \"job\")"
    input_file(path, "job description", fix, label=f"--config {path}")
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON, > 4300 digits
        raise DdlsimError(f"--config {path}: cannot read the job description ({' '.join(str(exc).split())[:200]}); "
                          f"{fix}") from None
    if not isinstance(config, dict):
        raise DdlsimError(f"--config {path}: not a job description (a JSON object); {fix}")
    return config


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
