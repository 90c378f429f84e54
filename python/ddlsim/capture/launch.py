"""Runs a capture job: one process per rank on this machine, or this
process as one rank under ``torchrun`` (multi-node).

Every rank runs ``python -m ddlsim.capture.rank_main JOB --config FILE``
with the environment torchrun would give it (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), so the same entry point
serves both: ``torchrun --nnodes 2 --nproc-per-node 4 -m
ddlsim.capture.rank_main ddp --config job.json`` on each node, then
``ddlsim capture merge OUT`` on the shared output directory.

If one rank fails, the others are stopped (after ``grace_s``) so a job never
hangs; their files stay, flagged partial by the merge.

Each rank runs in its own session (so its own process group): Ctrl-C in the
terminal reaches only the launcher, which ends every rank's group on an
interrupt (SIGINT, or SIGTERM turned into ``SystemExit``): SIGTERM, then
SIGKILL after :data:`INTERRUPT_GRACE_S`, and waits for them before it
re-raises. A rank also asks the kernel to kill it when the launcher dies
(``PR_SET_PDEATHSIG``, see :mod:`.rank_main`), so even a SIGKILLed launcher
leaves no rank running. Removing the files of an interrupted capture is the
caller's part (:mod:`.outdir`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence

from ..errors import DdlsimError
from ..safe_io import write_text_file

JOBS = {
    "ddp": "ddlsim.capture.ddp:run_rank",
    "ps": "ddlsim.capture.ps:run_rank",
    "connections": "ddlsim.capture.connections:run_rank",
}


# The environment variable that names the launcher's pid to its ranks (see rank_main).
LAUNCHER_ENV = "DDLSIM_LAUNCHER_PID"
# On an interrupt, ranks get this long after SIGTERM before SIGKILL (the CLI's native backstop,
# ddlsim.cli.progress.CAPTURE_GRACE_MS, leaves `ddlsim capture` 8 s to clean up).
INTERRUPT_GRACE_S = 1.0
# When a rank failed or the job ran too long, the others get this long to exit on SIGTERM.
STOP_GRACE_S = 3.0


class CaptureError(DdlsimError):
    """A capture job failed; the message names the rank and its last output."""


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM would kill Python without running `finally`; turn it into SystemExit(143)
    so that ranks, links and files are cleaned up. Only where nobody handles SIGTERM yet
    (the CLI does) and only in the main thread (Python runs handlers there)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Holds SIGINT and SIGTERM back while a clean-up runs (a second Ctrl-C must not cut it
    short); one that came meanwhile is raised again when the block ends. Main thread only
    (Python runs its handlers there, whichever thread the signal hit); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum, frame):
        caught.append(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])


# The rendezvous port is picked by the launcher and bound by rank 0 seconds later, once it has imported PyTorch. A
# port the kernel hands out in between, for another process's connection or bind to port 0 (the ranks of another
# capture connecting to each other, say), made rank 0 fail with "address already in use". The kernel hands out only
# the ports of its ephemeral range (/proc/sys/net/ipv4/ip_local_port_range; 32768-60999 by default), so the port is
# picked at random below that range and at or above PORT_FLOOR (under it are the ports servers name, Ray's workers'
# 10002-19999 among them): only a program that names the same port can take it in between.
PORT_FLOOR = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_port_low() -> int:
    """The first port of the kernel's ephemeral range (32768, Linux's default, where it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))  # every address: a port bound on any of them is taken
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port nothing is bound to, outside the kernel's ephemeral range (see PORT_FLOOR); the kernel's pick of a
    free port where that range leaves fewer than 1000 ports below it, or none of 64 tries is free."""
    low = ephemeral_port_low()
    if low - PORT_FLOOR >= 1000:
        pick = random.SystemRandom()  # not seeded, on purpose: two captures started together pick different ports
        for _ in range(64):
            port = pick.randrange(PORT_FLOOR, low)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankResult:
    rank: int
    returncode: int
    stderr_tail: str


def host_cores() -> int:
    """The cores the ranks this process launches can run on: its CPU affinity, which they inherit (e.g. under
    ``taskset``); the machine's cores where there is no affinity."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 0


def cores_note(processes: int) -> Optional[str]:
    """A note for a capture about to run more processes than :func:`host_cores` (they will take turns on the cores,
    which its times will show and replay does not simulate); None where every process has a core."""
    cores = host_cores()
    if cores <= 0 or processes <= cores:
        return None
    return (f"{processes} processes on {cores} cores: they take turns on the cores, which the captured times hold "
            "and ddlsim replay does not simulate (docs/validation.md)")


def host_facts(processes: int) -> dict:
    """What a capture launched on this one machine records of it: ``processes`` (the rank processes it ran side by
    side) and ``host_cores`` (:func:`host_cores`). More processes than cores take turns on the cores, which replay
    does not simulate (:func:`ddlsim.simulation.replay.shared_cores_note`)."""
    return {"processes": int(processes), "host_cores": int(host_cores())}


def check_timeout(timeout: float, option: str = "--timeout") -> None:
    """A capture's timeout in seconds: positive and finite (one line naming the option, before anything runs)."""
    if not 0 < timeout < float("inf"):
        raise DdlsimError(f"{option} {timeout:g}: give a positive number of seconds, e.g. {option} 300")


#: the least resident memory of one rank process: it imports PyTorch and its backend (measured 0.7-1.0 GiB per rank
#: for a 2-rank LeNet-5 DDP capture on the reference machine; the floor leaves room for smaller ones)
RANK_MEMORY_FLOOR_BYTES = 512 << 20


def available_memory_bytes() -> Optional[int]:
    """The memory the kernel says new processes can use (MemAvailable of /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_world_fits(world_size: int, option: str = "--workers") -> None:
    """Refuses, before anything starts, a capture whose rank processes cannot all fit in this machine's memory
    (`world_size` x :data:`RANK_MEMORY_FLOOR_BYTES` above what is available): thousands of ranks would otherwise be
    started one by one until the machine runs out of memory."""
    available = available_memory_bytes()
    need = int(world_size) * RANK_MEMORY_FLOOR_BYTES
    if available is not None and need > available:
        raise DdlsimError(f"{option}: {world_size} rank processes on this machine need at least {need / 2**30:.1f} GiB "
                          f"(each imports PyTorch: {RANK_MEMORY_FLOOR_BYTES >> 20} MiB or more), but "
                          f"{available / 2**30:.1f} GiB is available; give at most "
                          f"{max(1, available // RANK_MEMORY_FLOOR_BYTES)} ranks here, or spread them over machines "
                          "with torchrun (docs/capture.md)")


def launch_local(job: str, config: dict, world_size: int, out_dir: str | Path, *, timeout_s: float = 600.0,
                 grace_s: float = 5.0, env: Optional[dict] = None, wrap: Optional[Callable[[int, list[str]], list[str]]] = None,
                 master_addr: str = "127.0.0.1", on_poll: Optional[Callable[[], None]] = None) -> list[RankResult]:
    """Starts `world_size` rank processes of `job` and waits for them.

    `wrap(rank, argv)` may rewrite a rank's command line (e.g. to run it in a
    network namespace). Raises :class:`CaptureError` if a rank fails or the
    job runs past `timeout_s`; the per-rank logs are in ``out_dir/logs``.
    """
    if job not in JOBS:
        raise CaptureError(f"unknown capture job {job!r}; choose one of {', '.join(JOBS)}")
    check_world_fits(world_size, "--workers" if job != "connections" else "--connections")
    out = Path(out_dir)
    config_path = out / "job.json"
    try:
        (out / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # not a CaptureError: the job did not start, there is no partial trace to merge
        raise DdlsimError(f"--out {out}: cannot write the capture there ({exc.strerror or exc}); "
                          "choose a writable directory") from None
    write_text_file(config_path, json.dumps({"job": job, "world_size": world_size, **config}, indent=2) + "\n")
    port = free_port()
    procs: list[subprocess.Popen] = []
    logs = []
    deadline = time.monotonic() + timeout_s
    failed_at: Optional[float] = None
    first_failed: Optional[int] = None  # the rank that failed first: the others usually fail because it did
    with sigterm_as_exit():
        try:
            for rank in range(world_size):
                rank_env = {**os.environ, **(env or {}), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                            "MASTER_ADDR": master_addr, "MASTER_PORT": str(port), LAUNCHER_ENV: str(os.getpid()),
                            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
                # VALUE joined to its option: a path that starts with "-" (--out=-1) is not read as an option
                argv = [sys.executable, "-m", "ddlsim.capture.rank_main", job, f"--config={config_path}", f"--out={out}"]
                if wrap is not None:
                    argv = wrap(rank, argv)
                log = open(out / "logs" / f"rank{rank}.log", "w", encoding="utf-8")
                logs.append(log)
                procs.append(subprocess.Popen(argv, env=rank_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):
                if on_poll is not None:
                    on_poll()
                now = time.monotonic()
                if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                    failed_at = now
                    first_failed = next(r for r, p in enumerate(procs) if p.poll() not in (None, 0))
                if now > deadline or (failed_at is not None and now - failed_at > grace_s):
                    _stop(procs, STOP_GRACE_S)
                    break
                time.sleep(0.05)
        except BaseException:  # Ctrl-C, SIGTERM (SystemExit), or a failure to start a rank: no rank may outlive us
            with signals_deferred():
                _stop(procs, INTERRUPT_GRACE_S)
            raise
        finally:
            for log in logs:
                log.close()
    results = [RankResult(r, p.wait(), _tail(out / "logs" / f"rank{r}.log")) for r, p in enumerate(procs)]
    bad = [r for r in results if r.returncode != 0]
    if bad:
        first = next((r for r in bad if r.rank == first_failed), None) or \
            min(bad, key=lambda r: (r.returncode in (-signal.SIGTERM, -signal.SIGKILL), r.rank))
        why = "ran past the time limit" if time.monotonic() > deadline else f"exited with status {first.returncode}"
        raise CaptureError(f"capture job {job!r}: rank {first.rank} {why}; its log ({out / 'logs' / f'rank{first.rank}.log'}) "
                           f"ends with:\n{first.stderr_tail}")
    return results


def _signal_running(procs: Sequence[subprocess.Popen], sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """Ends every rank's process group: SIGTERM, SIGKILL after `grace_s`, and waits for them."""
    _signal_running(procs, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.01)
    _signal_running(procs, signal.SIGKILL)
    for p in procs:
        p.wait()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
