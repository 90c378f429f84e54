"""Shaped links for real captures: every rank in its own network namespace,
joined by rate-limited veth links, so a capture "at 100 Mbit/s" really runs
at 100 Mbit/s.

Topology (the simulator's star, one host per rank)::

    ns ddlsim-<pid>-<start>-<n>-r0: lo, ddl0 10.x.y.1/24 ==veth== ddls<pid><n>h00 --+
    ns ddlsim-<pid>-<start>-<n>-r1: lo, ddl0 10.x.y.2/24 ==veth== ddls<pid><n>h01 --+-- bridge ddls<pid><n>b
    ...                                                                       (root ns, no address)

Each rank's link is shaped in both directions by a ``tbf`` qdisc: on the
egress of the namespace end (what the rank sends) and on the egress of the
bridge end (what the rank receives), so every host has a full-duplex link of
the given rate, and the bridge is the non-blocking switch. The interface has
the same name (``ddl0``) in every namespace, so ``GLOO_SOCKET_IFNAME`` /
``TP_SOCKET_IFNAME`` in :attr:`ShapedNetwork.env` name it for every rank.

Usage (what the capture CLI does with ``--bandwidth``)::

    with shaped_network(world_size, parse_bandwidth("100Mbps")) as net:
        launch_local(job, config, world_size, out, wrap=net.wrap,
                     master_addr=net.master_addr, env=net.env)

Needs root (``CAP_NET_ADMIN`` + ``CAP_SYS_ADMIN``), ``ip`` with netns support
and ``tc`` with the tbf qdisc; otherwise :class:`CaptureError` says so.
Everything is removed when the block ends, also on an exception, Ctrl-C or
SIGTERM; processes still running inside the namespaces are killed then.
There is no added delay (no netem): the links have the rate, not a latency.

Leftovers: a process killed hard (SIGKILL) cannot remove its namespaces and
links. Their names carry the owner: namespaces ``ddlsim-<pid>-<start>-...``
(``<start>``: the owner's start time in clock ticks, /proc/PID/stat field
22, so a reused pid is not mistaken for the owner), links ``ddls`` + the pid
in 5 base-36 digits + a counter (interface names have at most 15
characters), with the alias ``ddlsim owner=<pid>:<start>``. Every
:func:`shaped_network` first removes the leftovers whose owner is gone
(:func:`remove_leftovers`, also ``ddlsim capture cleanup``); nothing else is
ever touched, neither other namespaces and links nor those of a capture still
running.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from .launch import CaptureError, sigterm_as_exit, signals_deferred

IFNAME = "ddl0"  # the rank's interface, same name in every namespace
DEFAULT_LATENCY_MS = 50.0
MIN_BURST_BYTES = 64 * 1024  # one GSO/TSO super-packet: veth hands tbf up to 64 KiB at once
BURST_SECONDS = 0.004  # the bucket refills per timer tick; 4 ms = 1/HZ at HZ=250 (also right for HZ=1000)
_FIX = "needs root and `ip netns`/`tc` (the tbf qdisc); run as root or run without --bandwidth"
NS_PREFIX = "ddlsim"
LINK_PREFIX = "ddls"
# ddlsim-<pid>-<start ticks>-<counter>-r<rank>
# (ddlsim 0.1.0 named them ddlsim-<pid>-<counter>-r<rank>, without the start time: the pid alone tells)
_NS_NAME = re.compile(rf"^{NS_PREFIX}-(?P<pid>[1-9][0-9]*)(-(?P<start>[0-9]+))?-(?P<seq>[0-9]+)-r[0-9]+$")
# ddls<pid: 5 base-36><counter: 2 base-36>b (bridge) or ...h<rank: 2 base-36> (host end of a veth pair)
_LINK_NAME = re.compile(rf"^{LINK_PREFIX}(?P<pid>[0-9a-z]{{5}})(?P<seq>[0-9a-z]{{2}})(?P<role>b|h[0-9a-z]{{2}})$")
_ALIAS = re.compile(r"^ddlsim owner=(?P<pid>[0-9]+):(?P<start>[0-9]+)$")
_seq = itertools.count()
_seq_lock = threading.Lock()


def default_burst_bytes(rate_bps: float) -> int:
    """tbf bucket size for `rate_bps`.

    tbf can send at most one bucket per timer tick, so a bucket smaller than
    rate/HZ caps the throughput below the rate (at 1 Gbit/s and HZ=250: 500 kB);
    and it must hold a whole 64 KiB GSO packet, else tbf splits every
    super-packet (costly) or drops it. A larger bucket lets a burst of that
    size through at line speed, which is negligible next to megabyte messages.
    """
    return max(MIN_BURST_BYTES, math.ceil(rate_bps / 8 * BURST_SECONDS))


def _start_ticks(pid: int) -> Optional[int]:
    """The start time of process `pid` (clock ticks after boot), None when there is no such live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] in ("Z", "X"):  # a zombie has ended
        return None
    return int(fields[19])  # field 22 of stat; fields[0] is field 3


def _owner_alive(pid: int, start: Optional[int]) -> bool:
    """Whether the process that made a leftover still runs: its pid lives, with the same start time when known.
    A live pid of unknown start counts as the owner, so that nothing of a running capture is ever removed."""
    now = _start_ticks(pid)
    return now is not None and (start is None or now == start)


def _base36(n: int, width: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    for _ in range(width):
        n, d = divmod(n, 36)
        out = digits[d] + out
    return out


@dataclass
class ShapedNetwork:
    """A set of namespaces joined by shaped links; see the module docstring."""

    world_size: int
    rate_bps: float
    burst_bytes: int
    latency_ms: float
    namespaces: list[str]
    addresses: list[str]
    bridge: str
    host_links: list[str]
    ifname: str = IFNAME
    env: dict[str, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str:
        return self.addresses[0]

    def wrap(self, rank: int, argv: list[str]) -> list[str]:
        """`argv` run inside rank `rank`'s namespace (``ip netns exec`` keeps the environment)."""
        if not 0 <= rank < self.world_size:
            raise CaptureError(f"rank {rank} is outside the shaped network of {self.world_size} ranks")
        return ["ip", "netns", "exec", self.namespaces[rank], *argv]

    def describe(self) -> dict:
        """Metadata for the capture's log: what the links were."""
        return {
            "shaping": "tbf", "topology": "star (bridge), one veth link per rank, shaped in both directions",
            "rate_bps": self.rate_bps, "burst_bytes": self.burst_bytes, "latency_ms": self.latency_ms,
            "added_delay": None, "interface": self.ifname, "addresses": list(self.addresses),
            "namespaces": list(self.namespaces),
        }  # fmt: skip


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise CaptureError(f"shaped network: {what} failed: `{argv[0]}` is not installed; {_FIX}") from None
    except subprocess.TimeoutExpired:
        raise CaptureError(f"shaped network: {what} failed: `{' '.join(argv)}` hung for 30 s; {_FIX}") from None
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip().splitlines()
        raise CaptureError(f"shaped network: {what} failed: `{' '.join(argv)}`: {err[-1] if err else f'exit status {done.returncode}'}; {_FIX}")


def _quiet(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, timeout=30, check=False)


def _tbf(rate_bps: float, burst: int, latency_ms: float) -> list[str]:
    return ["tbf", "rate", f"{int(round(rate_bps))}bit", "burst", str(burst), "latency", f"{latency_ms:g}ms"]


def _kill_namespace_processes(namespaces: list[str]) -> None:
    """Kills what still runs inside our namespaces (a rank that outlived its job) so they can go."""
    pids = set()
    for ns in namespaces:
        done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30, check=False)
        pids |= {int(p) for p in done.stdout.split() if p.isdigit() and int(p) != os.getpid()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = set()
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.add(pid)
            except ProcessLookupError:
                pass
        pids = alive
        end = time.monotonic() + 2
        while pids and time.monotonic() < end:
            pids = {p for p in pids if os.path.exists(f"/proc/{p}") and _state(p) != "Z"}
            time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _teardown(namespaces: list[str], host_links: list[str], bridge: str) -> None:
    _kill_namespace_processes(namespaces)
    for link in host_links:
        _quiet(["ip", "link", "del", link])  # deletes the pair, even if a process still pins the namespace
    for ns in namespaces:
        _quiet(["ip", "netns", "del", ns])
    _quiet(["ip", "link", "del", bridge])


@dataclass
class Leftover:
    """A namespace or link that a shaped capture made (see the module docstring)."""

    kind: str  # "namespace", "bridge", "veth"
    name: str
    owner_pid: int
    owner_alive: bool

    def describe(self) -> str:
        what = {"namespace": "network namespace", "bridge": "bridge", "veth": "veth link (with its peer and qdiscs)"}[self.kind]
        return f"{what} {self.name} (owner pid {self.owner_pid}, {'running' if self.owner_alive else 'gone'})"


def find_leftovers() -> list[Leftover]:
    """Every namespace and link in the names of shaped captures, with whether its owner still runs."""
    found = []
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=False).stdout
    for line in listing.splitlines():
        name = line.split(" ", 1)[0].strip()
        m = _NS_NAME.match(name)
        if m:
            pid, start = int(m["pid"]), (int(m["start"]) if m["start"] is not None else None)
            found.append(Leftover("namespace", name, pid, _owner_alive(pid, start)))
    done = subprocess.run(["ip", "-d", "-j", "link", "show"], capture_output=True, text=True, timeout=30, check=False)
    try:
        links = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    except json.JSONDecodeError:
        links = []
    for link in links:
        name = link.get("ifname", "")
        m = _LINK_NAME.match(name)
        kind = (link.get("linkinfo") or {}).get("info_kind")
        if not m or kind != ("bridge" if m["role"] == "b" else "veth"):
            continue
        pid = int(m["pid"], 36)
        alias = _ALIAS.match(link.get("ifalias") or "")
        if alias and int(alias["pid"]) != pid:
            continue  # named like ours, but not ours
        found.append(Leftover(kind, name, pid, _owner_alive(pid, int(alias["start"]) if alias else None)))
    return found


def remove_leftovers(found: Optional[list[Leftover]] = None) -> list[Leftover]:
    """Removes the namespaces and links of shaped captures whose owner is gone (with the processes still
    inside those namespaces and the links' qdiscs); returns what it removed."""
    gone = [x for x in (find_leftovers() if found is None else found) if not x.owner_alive]
    namespaces = [x.name for x in gone if x.kind == "namespace"]
    _kill_namespace_processes(namespaces)
    # Host ends first (each takes its peer in the namespace along), then the namespaces, then the bridges.
    for x in sorted(gone, key=lambda x: ("veth", "namespace", "bridge").index(x.kind)):
        _quiet(["ip", "netns", "del", x.name] if x.kind == "namespace" else ["ip", "link", "del", x.name])
    if not gone:
        return []
    still = {(x.kind, x.name) for x in find_leftovers()}
    return [x for x in gone if (x.kind, x.name) not in still]


def _check_permitted() -> None:
    if os.geteuid() != 0:
        raise CaptureError(f"shaped network: not running as root (uid {os.geteuid()}); {_FIX}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise CaptureError(f"shaped network: `{tool}` is not installed (package iproute2); {_FIX}")


@contextmanager
def shaped_network(world_size: int, rate_bps: float, *, burst_bytes: Optional[int] = None,
                   latency_ms: float = DEFAULT_LATENCY_MS, on_note: Optional[Callable[[str], None]] = None) -> Iterator[ShapedNetwork]:
    """Builds the namespaces and shaped links for `world_size` ranks at `rate_bps` (bit/s, per
    direction per host), yields a :class:`ShapedNetwork`, and removes everything afterwards.

    `latency_ms` is tbf's queue bound (the longest a packet may wait before it is dropped),
    not an added delay. Leftovers of earlier captures whose process is gone are removed first;
    `on_note(text)` is told about each.
    """
    if not isinstance(world_size, int) or not 1 <= world_size <= 250:
        raise CaptureError(f"shaped network: world_size must be 1..250 (one /24 subnet), got {world_size!r}")
    if isinstance(rate_bps, str):
        from ..units import parse_bandwidth

        try:
            rate_bps = parse_bandwidth(rate_bps)
        except ValueError as e:
            raise CaptureError(f"shaped network: {e}") from None
    if not rate_bps > 0 or not math.isfinite(rate_bps):
        raise CaptureError(f"shaped network: the rate must be a positive bit/s value, got {rate_bps!r}")
    burst = int(burst_bytes) if burst_bytes is not None else default_burst_bytes(rate_bps)
    if burst < 1600:
        raise CaptureError(f"shaped network: burst {burst} B is smaller than one packet; use at least {MIN_BURST_BYTES} B")
    _check_permitted()
    for x in remove_leftovers():
        if on_note is not None:
            on_note(f"removed a leftover of an earlier shaped capture: {x.describe()}")

    with _seq_lock:
        seq = next(_seq)
    pid = os.getpid()
    start = _start_ticks(pid)
    alias = f"ddlsim owner={pid}:{start}"
    # Interface names are limited to 15 characters: 4 of the prefix + pid (5 base-36 digits) + use (2).
    tag = f"{LINK_PREFIX}{_base36(pid, 5)}{_base36(seq % 36**2, 2)}"
    bridge = f"{tag}b"
    host_links = [f"{tag}h{_base36(r, 2)}" for r in range(world_size)]
    namespaces = [f"{NS_PREFIX}-{pid}-{start}-{seq}-r{r}" for r in range(world_size)]
    subnet = (pid * 97 + seq) % (254 * 256)  # the namespaces are isolated, so overlaps between uses do no harm
    base = f"10.{1 + subnet // 256}.{subnet % 256}"
    addresses = [f"{base}.{r + 1}" for r in range(world_size)]
    net = ShapedNetwork(world_size, float(rate_bps), burst, latency_ms, namespaces, addresses, bridge, host_links,
                        env={"GLOO_SOCKET_IFNAME": IFNAME, "TP_SOCKET_IFNAME": IFNAME})
    with sigterm_as_exit():
        try:
            _run(["ip", "link", "add", bridge, "type", "bridge"], f"creating bridge {bridge}")
            _run(["ip", "link", "set", bridge, "alias", alias, "up"], f"bringing up bridge {bridge}")
            for r, (ns, host, addr) in enumerate(zip(namespaces, host_links, addresses)):
                _run(["ip", "netns", "add", ns], f"creating network namespace {ns}")
                _run(["ip", "link", "add", host, "type", "veth", "peer", "name", IFNAME, "netns", ns],
                     f"creating the veth link of rank {r}")
                _run(["ip", "link", "set", host, "alias", alias, "master", bridge, "up"], f"attaching {host} to {bridge}")
                _run(["ip", "-n", ns, "link", "set", "lo", "up"], f"bringing up loopback in {ns}")
                _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", IFNAME], f"addressing rank {r}")
                _run(["ip", "-n", ns, "link", "set", IFNAME, "up"], f"bringing up {IFNAME} in {ns}")
                _run(["tc", "qdisc", "add", "dev", host, "root", *_tbf(rate_bps, burst, latency_ms)],
                     f"shaping the link to rank {r} (tc tbf on {host})")
                _run(["tc", "-n", ns, "qdisc", "add", "dev", IFNAME, "root", *_tbf(rate_bps, burst, latency_ms)],
                     f"shaping the link from rank {r} (tc tbf on {IFNAME} in {ns})")
            yield net
        finally:
            with signals_deferred():  # a second Ctrl-C must not leave half of it behind
                _teardown(namespaces, host_links, bridge)
