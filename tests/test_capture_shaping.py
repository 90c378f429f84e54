"""Shaped links for captures (ddlsim.capture.shaping), measured for real:
TCP streams between the ranks' namespaces and a gloo all-reduce.

Needs root, `ip` with network namespaces and `tc` with tbf; skipped otherwise.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from ddlsim.capture import CaptureError, shaped_network
from ddlsim.capture import shaping
from ddlsim.units import parse_bandwidth


def _namespaces_usable() -> str:
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "`ip` or `tc` (iproute2) not installed"
    probe = f"ddlsim-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    add = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if add.returncode != 0:
        return f"`ip netns add` failed: {add.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


_WHY_NOT = _namespaces_usable()
pytestmark = pytest.mark.skipif(bool(_WHY_NOT), reason=f"shaped links need root, ip netns and tc: {_WHY_NOT}")

# Receives on one port from `n` clients; prints total bytes and first-to-last-byte seconds as JSON.
SERVER = textwrap.dedent("""
    import json, socket, sys, threading, time
    addr, n = sys.argv[1], int(sys.argv[2])
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, 5001)); s.listen(n)
    print("ready", flush=True)
    marks, total = [], [0]
    lock = threading.Lock()
    def serve(c):
        while True:
            b = c.recv(1 << 20)
            now = time.monotonic()
            if not b:
                return
            with lock:
                total[0] += len(b); marks.append(now)
    threads = [threading.Thread(target=serve, args=(s.accept()[0],)) for _ in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(json.dumps({"bytes": total[0], "seconds": max(marks) - min(marks)}), flush=True)
""")
CLIENT = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection((sys.argv[1], 5001)); buf = b"x" * (1 << 20)
    for _ in range(int(sys.argv[2])): c.sendall(buf)
    c.close()
""")
MB = 4


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _ours(names: set[str], net) -> set[str]:
    return names & ({net.bridge, *net.host_links} | set(net.namespaces))


def _throughput_bps(net, receiver: int, senders: list[int], mb: int = MB) -> float:
    """Goodput (bit/s) into `receiver` from all `senders` at once, first to last byte seen by the receiver."""
    server = subprocess.Popen(net.wrap(receiver, [sys.executable, "-c", SERVER, net.addresses[receiver], str(len(senders))]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        clients = [subprocess.Popen(net.wrap(s, [sys.executable, "-c", CLIENT, net.addresses[receiver], str(mb)])) for s in senders]
        for c in clients:
            assert c.wait(timeout=60) == 0
        result = json.loads(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
    assert result["bytes"] == mb * len(senders) << 20
    return result["bytes"] * 8 / result["seconds"]


def test_tcp_throughput_follows_the_rate_in_both_directions():
    rate = parse_bandwidth("100Mbps")
    with shaped_network(2, rate) as net:
        assert net.wrap(1, ["true"])[:4] == ["ip", "netns", "exec", net.namespaces[1]]
        assert net.env == {"GLOO_SOCKET_IFNAME": "ddl0", "TP_SOCKET_IFNAME": "ddl0"}
        assert net.master_addr == net.addresses[0] and net.describe()["rate_bps"] == rate
        up = _throughput_bps(net, receiver=1, senders=[0])
        down = _throughput_bps(net, receiver=0, senders=[1])
        # Independent of our numbers: the kernel's own counters say both qdiscs of a link carried the stream.
        for dev, ns in ((net.host_links[0], None), ("ddl0", net.namespaces[0])):
            stats = subprocess.run(["tc", *(["-n", ns] if ns else []), "-s", "-j", "qdisc", "show", "dev", dev],
                                   capture_output=True, text=True, check=True).stdout
            tbf = [q for q in json.loads(stats) if q["kind"] == "tbf"]
            assert tbf and tbf[0]["bytes"] >= MB << 20, (dev, tbf)
    # Goodput is below the rate (tbf counts the Ethernet/IP/TCP headers too) but not far below.
    for measured in (up, down):
        assert 0.90 * rate <= measured <= 1.02 * rate, (up, down)
    with shaped_network(2, parse_bandwidth("50Mbps")) as net:
        half = _throughput_bps(net, receiver=1, senders=[0])
    print(f"\nset 100 Mbit/s: rank 0->1 {up / 1e6:.1f} Mbit/s, 1->0 {down / 1e6:.1f} Mbit/s; set 50 Mbit/s: 0->1 {half / 1e6:.1f} Mbit/s")
    assert 0.45 <= half / up <= 0.55, (half, up)


def test_the_receiving_end_is_shaped_too():
    """Two senders into one rank share its download link: together they get the rate, not twice it.
    Without the tbf on the bridge end each would get its own full upload rate."""
    rate = parse_bandwidth("100Mbps")
    with shaped_network(3, rate) as net:
        incast = _throughput_bps(net, receiver=0, senders=[1, 2], mb=3)
    print(f"\nset 100 Mbit/s: ranks 1+2 -> 0 together {incast / 1e6:.1f} Mbit/s")
    assert 0.85 * rate <= incast <= 1.02 * rate, incast


def test_everything_is_removed_after_the_block_also_when_it_raises():
    links, spaces = _links(), _netns()
    with shaped_network(2, 1e8) as net:
        assert _ours(_links(), net) == {net.bridge, *net.host_links}
        assert _ours(_netns(), net) == set(net.namespaces)
        # a rank that outlives the job must not keep the links alive
        straggler = subprocess.Popen(net.wrap(1, ["sleep", "60"]))
    assert straggler.wait(timeout=10) != 0
    assert (_links(), _netns()) == (links, spaces)
    with pytest.raises(ZeroDivisionError):
        with shaped_network(2, 1e8) as net:
            1 / 0
    assert (_links(), _netns()) == (links, spaces)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_remove_everything(sig, tmp_path):
    links, spaces = _links(), _netns()
    script = textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # started in the background it would inherit SIG_IGN
        from ddlsim.capture import shaped_network
        with shaped_network(2, 1e8) as net:
            print("up", flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "up"
    assert _netns() != spaces
    child.send_signal(sig)
    child.wait(timeout=30)
    assert (_links(), _netns()) == (links, spaces)


def test_a_failing_step_names_itself_and_leaves_nothing(monkeypatch):
    """A real tc failure half-way (rank 0 built, rank 1's qdisc refused) is reported and undone."""
    real_run = shaping._run

    def run(argv, what):
        if what.startswith("shaping the link from rank 1"):
            argv = [a.replace("tbf", "nosuchqdisc") for a in argv]
        return real_run(argv, what)

    monkeypatch.setattr(shaping, "_run", run)
    links, spaces = _links(), _netns()
    with pytest.raises(CaptureError, match=r"shaping the link from rank 1 \(tc tbf on ddl0.*nosuchqdisc.*needs root and `ip netns`/`tc`.*without --bandwidth"):
        with shaped_network(2, 1e8):
            pass
    assert (_links(), _netns()) == (links, spaces)


def test_refuses_clearly_without_root(monkeypatch):
    monkeypatch.setattr(shaping.os, "geteuid", lambda: 1000)
    with pytest.raises(CaptureError, match=r"not running as root.*needs root and `ip netns`/`tc`.*run without --bandwidth"):
        with shaped_network(2, 1e8):
            pass


def test_rates_are_parsed_with_ddlsim_units_and_bursts_cover_a_timer_tick():
    with shaped_network(1, "1Gbps") as net:
        assert net.rate_bps == 1e9
        assert net.burst_bytes == 500_000  # 4 ms at 1 Gbit/s
    assert shaping.default_burst_bytes(1e6) == 64 * 1024  # never below one GSO packet
    with pytest.raises(CaptureError, match="has no unit"):
        with shaped_network(1, "100"):
            pass


GLOO = textwrap.dedent("""
    import json, os, time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(16))  # connections up before timing
    x = torch.full((1 << 20,), float(dist.get_rank() + 1))  # 4 MB of float32
    dist.barrier()
    t0 = time.monotonic()
    dist.all_reduce(x)
    seconds = time.monotonic() - t0
    assert torch.all(x == 3.0), x[:4]
    print(json.dumps({"seconds": seconds}), flush=True)
    dist.destroy_process_group()
""")


def test_gloo_all_reduce_runs_over_the_shaped_links():
    pytest.importorskip("torch")
    rate = parse_bandwidth("100Mbps")
    with shaped_network(2, rate) as net:
        port = "29517"
        procs = [subprocess.Popen(net.wrap(r, [sys.executable, "-c", GLOO]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, **net.env, "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": net.master_addr,
                                       "MASTER_PORT": port, "OMP_NUM_THREADS": "1"})
                 for r in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    seconds = max(json.loads(out)["seconds"] for out, _ in outs)
    print(f"\ngloo all_reduce of 4 MiB, 2 ranks, 100 Mbit/s: {seconds:.3f} s")
    # A ring all-reduce of S = 4 MiB over 2 ranks sends S/2 + S/2 per rank and direction: 33.6 Mbit, 0.34 s at 100 Mbit/s.
    floor = (4 << 20) * 8 / rate
    assert 0.95 * floor <= seconds <= 4 * floor, seconds


# ---------------------------------------------------------------- leftovers of a capture killed hard

HOLDER = textwrap.dedent("""
    import json, subprocess, sys, time
    from ddlsim.capture import shaped_network
    with shaped_network(2, 1e8) as net:
        rank = subprocess.Popen(net.wrap(1, ["sleep", "600"]))  # a process inside a namespace, as a rank would be
        print(json.dumps({"namespaces": net.namespaces, "links": [net.bridge, *net.host_links], "rank": rank.pid}), flush=True)
        time.sleep(600)
""")


def _free_pid() -> int:
    pid = 4_000_000  # above the usual pid_max of 32768..4194304 in use: no process has it
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("how", ["capture cleanup", "next start"])
def test_leftovers_of_a_killed_capture_are_removed_and_nothing_else(how):
    tag = uuid.uuid4().hex[:6]
    me = os.getpid()
    with open(f"/proc/{me}/stat") as f:
        my_start = f.read().rsplit(")", 1)[1].split()[19]
    # Not ddlsim's, or not dead: a foreign namespace, one with our prefix but another shape, one of a capture that
    # still runs (this process), and a link named like a dead capture's bridge that is no bridge (a veth pair).
    decoy_ns = [f"user-{tag}", f"ddlsim-probe-{tag}", f"ddlsim-{me}-{my_start}-{int(tag, 16) % 999}-r0"]
    decoy_link = f"ddls{shaping._base36(_free_pid(), 5)}zzb"
    holder = None
    try:
        for ns in decoy_ns:
            subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "link", "add", decoy_link, "type", "veth", "peer", "name", f"usr{tag}"], check=True,
                       capture_output=True)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
        made = json.loads(holder.stdout.readline())
        holder.kill()  # SIGKILL: no `finally` runs
        holder.wait(timeout=30)
        assert set(made["namespaces"]) <= _netns() and set(made["links"]) <= _links()  # the leftovers

        if how == "capture cleanup":
            done = subprocess.run([sys.executable, "-m", "ddlsim", "capture", "cleanup"], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr
            for name in made["namespaces"] + made["links"]:
                assert f"removed " in done.stdout and name in done.stdout, done.stdout
            assert f"kept network namespace {decoy_ns[2]}" in done.stdout and "still running" in done.stdout
            assert decoy_link not in done.stdout and decoy_ns[0] not in done.stdout and decoy_ns[1] not in done.stdout
        else:
            notes = []
            with shaped_network(1, 1e8, on_note=notes.append):
                pass
            said = "\n".join(notes)
            assert all(name in said for name in made["namespaces"] + made["links"]), said
        assert not (set(made["namespaces"]) & _netns()) and not (set(made["links"]) & _links())
        assert set(decoy_ns) <= _netns() and decoy_link in _links()
        end = time.monotonic() + 10
        while _alive(made["rank"]) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(made["rank"])  # the process left inside a namespace was ended with it
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        for ns in decoy_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", decoy_link], capture_output=True)
        shaping.remove_leftovers([x for x in shaping.find_leftovers() if x.owner_pid == (holder.pid if holder else -1)])


def test_cleanup_says_when_there_is_nothing_to_remove():
    done = subprocess.run([sys.executable, "-m", "ddlsim", "capture", "cleanup"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("removed") or "nothing to remove" in done.stdout or "kept" in done.stdout


def test_cleanup_without_root_is_one_line(monkeypatch):
    from typer.testing import CliRunner

    from ddlsim.cli.app import app

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(app, ["capture", "cleanup"])
    assert result.exit_code != 0 and "not running as root" in str(result.exception)
