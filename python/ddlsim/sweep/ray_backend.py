"""Runs a sweep's simulations on Ray: a local instance started for the sweep,
or a cluster at an address. Ray is an optional extra (`pip install
'ddlsim[sweep]'`), imported only here and only when --ray is given."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Optional, Sequence

from ..errors import DdlsimError

# The object store of a local instance started for a sweep: results pass through it once, on their way to
# the driver, which writes them and lets them go; a small store is enough (Ray spills to disk past it).
LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2
# Tries to start a local instance (its processes get a fixed 30 s to come up, which a busy machine can miss).
LOCAL_START_ATTEMPTS = 2
# A task whose worker is lost (a node down, a killed process) is run again this many times.
MAX_RETRIES = 3
INSTALL_HINT = "pip install 'ddlsim[sweep]'"


def import_ray():
    """The ray module, or a one-line DdlsimError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise DdlsimError(f"--ray needs Ray, which is not installed here ({exc}); install it with {INSTALL_HINT}, "
                          "or leave --ray out to run on local processes") from None
    return ray


def start_ray(ray, address: str, cpus: int) -> bool:
    """Connects to (or starts) Ray unless this process already did; True if it did now."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING, configure_logging=True)
    what = "start a local Ray instance" if address == "local" else f"connect to the Ray cluster at {address}"
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            if address == "local":
                ray.init(num_cpus=max(1, cpus), object_store_memory=LOCAL_OBJECT_STORE_BYTES, **quiet)
            else:
                ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
            break
        except Exception as exc:  # Ray raises plain Exception, ConnectionError, ValueError, RuntimeError...
            try:
                ray.shutdown()  # what a failed start left running
            except Exception:
                pass
            if address == "local" and attempt < LOCAL_START_ATTEMPTS:
                continue  # Ray gives its processes a fixed 30 s to start: a busy machine may need a second try
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DdlsimError(f"--ray: cannot {what} ({first}); check the address (ray status on the head node), "
                              "or leave --ray out to run on local processes") from None
    return True


class RaySession:
    """`with RaySession(address, cpus):` Ray connected (or a local instance
    started) on entry, before a sweep writes anything: an address that cannot
    be reached is a one-line DdlsimError, in seconds. On exit, a Ray instance
    this session started or connected is shut down."""

    def __init__(self, address: str, cpus: int) -> None:
        self.address, self.cpus, self.started = address, cpus, False

    def __enter__(self) -> "RaySession":
        if self.address != "local":
            check_address(self.address)  # in seconds, before Ray's import (seconds too)
        ray = import_ray()
        self.started = start_ray(ray, self.address, self.cpus)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.started:
            import_ray().shutdown()
            self.started = False


# How long the check of a cluster's address waits for its port to answer.
REACH_TIMEOUT_S = 5.0


def check_address(address: str) -> None:
    """Refuses (one line) a --ray-address that is empty, or whose HOST:PORT
    does not take a TCP connection within REACH_TIMEOUT_S: Ray itself waits
    minutes there, printing warnings. "auto" is left to Ray (it looks for the
    cluster this machine belongs to and says at once when there is none)."""
    import socket

    hint = "give HOST:PORT (the head node's GCS, 6379 by default), ray://HOST:PORT (Ray Client, 10001) or auto"
    text = address.strip()
    if not text:
        raise DdlsimError(f"--ray-address {address!r}: empty; {hint}")
    if text == "auto":
        return
    rest = text[len("ray://"):] if text.startswith("ray://") else text
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DdlsimError(f"--ray-address {address!r}: not an address; {hint}")
    try:
        with socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__ if not isinstance(exc, socket.timeout) else f"no answer in {REACH_TIMEOUT_S:g} s"
        raise DdlsimError(f"--ray-address {address}: cannot reach {host} port {port} ({why}); check the address "
                          "(ray status on the head node), or leave --ray out to run on local processes") from None


def ray_map(fn: Callable[[Any], tuple[int, Any]], tasks: Sequence[Any],
            labels: Optional[Sequence[str]] = None) -> Iterator[tuple[int, Any]]:
    """fn(task) for every task as Ray tasks (inside a RaySession), yielded as
    they finish. Closing the iterator (the caller's `finally`) cancels what is
    still running. A task that fails is a DdlsimError naming it (its own
    message when it raised one)."""
    ray = import_ray()
    pending: list = []
    try:
        remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(fn)
        refs = {remote.remote(task): i for i, task in enumerate(tasks)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = refs[ref]
                label = labels[i] if labels is not None else f"#{i}"
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, DdlsimError):
                        raise DdlsimError(f"run {label}: {cause}") from None
                    raise DdlsimError(f"run {label} failed on Ray: {type(cause).__name__ if cause else 'error'}: "
                                      f"{str(cause or exc).splitlines()[0]}") from None
                except ray.exceptions.RayError as exc:  # a worker or node lost more often than the retries
                    raise DdlsimError(f"run {label}: Ray lost it ({type(exc).__name__}) after {MAX_RETRIES} retries; "
                                      "run the sweep again to finish it (the runs done are kept)") from None
                yield result
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished or gone
                pass
