"""The rendezvous port a local capture's launcher picks is outside the kernel's ephemeral range, so that no other
process's connection or bind to port 0 can be handed it in the seconds before rank 0 binds it. Before, the launcher
took the kernel's own pick (bind to port 0), a port of that range: two captures at once (or one capture and any
program making connections) could take it in between, and rank 0 failed with "address already in use"."""

from __future__ import annotations

import socket

import pytest

from ddlsim.capture import launch
from ddlsim.capture.launch import PORT_FLOOR, ephemeral_port_low, free_port

pytestmark = pytest.mark.skipif(not launch.EPHEMERAL_RANGE.exists(), reason="no /proc/sys/net/ipv4 (Linux's)")
roomy = pytest.mark.skipif(not launch.EPHEMERAL_RANGE.exists() or ephemeral_port_low() - PORT_FLOOR < 1000,
                           reason="this machine's ephemeral range leaves no room below it")


def _kernel_range() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    return low, high


@roomy
def test_every_pick_is_below_the_kernels_ephemeral_range_and_free():
    low, _ = _kernel_range()
    for _ in range(300):
        port = free_port()
        assert PORT_FLOOR <= port < low
        with socket.socket() as s:
            s.bind(("", port))  # free when picked


@roomy
def test_a_port_something_listens_on_is_not_picked(monkeypatch):
    while True:  # a port below the range, bound and listened on here
        port = free_port()
        busy = socket.socket()
        try:
            busy.bind(("127.0.0.1", port))
            break
        except OSError:
            busy.close()
    busy.listen()
    other = free_port()
    assert other != port

    class Tries:
        def __init__(self):
            self.ports = iter([port, port, other])

        def randrange(self, a, b):
            return next(self.ports)

    monkeypatch.setattr(launch.random, "SystemRandom", Tries)
    assert free_port() == other  # the listened-on port, twice, then a free one
    busy.close()


def test_without_room_below_the_range_the_kernel_picks(monkeypatch, tmp_path):
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text(f"{PORT_FLOOR + 500}\t60999\n")
    monkeypatch.setattr(launch, "EPHEMERAL_RANGE", narrow)
    assert ephemeral_port_low() == PORT_FLOOR + 500
    low, high = _kernel_range()
    assert low <= free_port() <= high  # bind to port 0: the kernel's range


def test_an_unreadable_range_is_linuxs_default(monkeypatch, tmp_path):
    for text in (None, "", "not a number\n"):
        path = tmp_path / "range"
        if text is None:
            path = tmp_path / "missing"
        else:
            path.write_text(text)
        monkeypatch.setattr(launch, "EPHEMERAL_RANGE", path)
        assert ephemeral_port_low() == 32768
