"""An interrupted capture leaves nothing behind: Ctrl-C or SIGTERM to `ddlsim capture` ends every rank and
removes the files of the run (never the user's); a launcher killed with SIGKILL takes its ranks along; an
--out that cannot be written is refused in one line. Real captures (torch, gloo, RPC) in subprocesses."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddlsim.capture.outdir import capture_dir, is_own_file
from ddlsim.errors import DdlsimError

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}
START_TIMEOUT_S = 180  # the ranks import torch; on 2 busy cores that can take a while
# A DDP capture that is still training when the signal comes (it is sent within a second of the ranks' first files,
# which they write just before the training loop): 10000 iterations of lenet5 last 10 s even at 1 ms each (12 ms on
# the 2-core CI machine). Not more: a DDP rank makes all its random batches before it starts (3.3 GB and ~15 s of
# a busy core each at 100000), which only delayed the interrupt.
LONG = "10000"


# ---------------------------------------------------------------- processes


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _live_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _stat(int(p))[:1] not in ([], ["Z"], ["X"])]


def _ranks_of(out: Path) -> set[int]:
    """Live processes whose command line names the capture directory `out`, but not the launcher."""
    return {p for p in _live_pids() if str(out) in _cmdline(p) and "rank_main" in _cmdline(p)}


def _in_sessions(sessions: set[int]) -> set[int]:
    """Live processes in the given sessions (each rank leads its own; its children stay in it)."""
    return {p for p in _live_pids() if len(_stat(p)) > 3 and int(_stat(p)[3]) in sessions}


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddlsim", "capture", *args], env=ENV, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_rank_files(proc: subprocess.Popen, rank_dir: Path, n: int) -> set[int]:
    """Waits until `n` ranks write their files in `rank_dir`; returns the ranks' pids."""
    end = time.monotonic() + START_TIMEOUT_S
    while len(list(rank_dir.glob("*.rank.jsonl"))) < n:
        if proc.poll() is not None:
            pytest.fail(f"the capture ended before its ranks wrote: {proc.communicate()}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"the ranks wrote no files in {START_TIMEOUT_S} s")
        time.sleep(0.2)
    return _ranks_of(rank_dir)


def _assert_nothing_runs(out: Path, ranks: set[int]) -> None:
    # The launcher waited for its ranks, so they are gone by the time it exits; no second chance is given.
    left = _ranks_of(out) | _in_sessions(ranks) | {p for p in ranks if _stat(p)[:1] not in ([], ["Z"], ["X"])}
    _kill(left)
    assert not left, f"processes of the capture still run: {[_cmdline(p) for p in left]}"


def _interrupt(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the capture did not exit within 60 s of the signal")
    return proc.returncode, err


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(path.rglob("*"))}


# ---------------------------------------------------------------- real captures, interrupted

torch_needed = pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None,
                                  reason="captures need PyTorch (pip install ddlsim[capture])")


# SIGINT and SIGTERM reach one handler in the CLI (cli/progress.py: _on_signal for both, exit 128 + signal) and one
# clean-up (outdir: KeyboardInterrupt and SystemExit alike), so each end-to-end capture below takes one of them: this
# one SIGTERM (also the PS and the shaped capture), the user's-directory and the connection-scaling ones SIGINT (which
# check the "interrupted" line). A SIGINT run of this test too was a fifth DDP capture checking nothing new.
@torch_needed
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])
def test_an_interrupted_ddp_capture_ends_its_ranks_and_removes_the_directory_it_made(tmp_path, sig):
    out = tmp_path / "new" / "run"  # neither exists: the capture makes both
    proc = _start(["ddp", "--model", "lenet5", "--workers", "2", "--iterations", LONG, "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 2)
    try:
        assert len(ranks) == 2
        code, err = _interrupt(proc, sig)
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))
    assert code == 128 + sig, err
    assert "Traceback" not in err and ("interrupted" if sig == signal.SIGINT else "terminated") in err
    assert not (tmp_path / "new").exists(), _snapshot(tmp_path)


@torch_needed
def test_an_interrupted_capture_into_the_users_directory_removes_only_its_own_files(tmp_path):
    out = tmp_path / "mine"
    (out / "logs").mkdir(parents=True)
    (out / "notes.txt").write_text("the user's\n")
    (out / "events.parquet").write_bytes(b"an older capture the user keeps")  # named like ours, not touched this run
    (out / "logs" / "mine.log").write_text("the user's log\n")
    before = _snapshot(out)
    proc = _start(["ddp", "--model", "lenet5", "--workers", "2", "--iterations", LONG, "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 2)
    try:
        code, err = _interrupt(proc, signal.SIGINT)
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert _snapshot(out) == before


@torch_needed
def test_an_interrupted_ps_capture_ends_its_ranks_and_leaves_no_file(tmp_path):
    out = tmp_path / "ps"
    proc = _start(["ps", "--model", "lenet5", "--workers", "2", "--servers", "1", "--iterations", "100000",
                   "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 3)
    try:
        code, err = _interrupt(proc, signal.SIGTERM)
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))
    assert code == 143 and "Traceback" not in err, err
    assert not out.exists(), _snapshot(out)


@torch_needed
def test_an_interrupted_connection_scaling_run_leaves_no_run_and_no_table(tmp_path):
    out = tmp_path / "scaling"
    out.mkdir()
    (out / "keep.csv").write_text("x\n1\n")
    proc = _start(["connections", "--connections", "1,2", "--requests", "100000000", "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out / "c1", 2)
    try:
        code, err = _interrupt(proc, signal.SIGINT)
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))
    assert code == 130 and "Traceback" not in err and "interrupted" in err, err
    assert _snapshot(out) == {"keep.csv": b"x\n1\n"}


@torch_needed
def test_ranks_die_with_a_launcher_killed_hard(tmp_path):
    """SIGKILL cannot be caught: the ranks end because the kernel kills them with their launcher (PDEATHSIG)."""
    out = tmp_path / "run"
    proc = _start(["ddp", "--model", "lenet5", "--workers", "2", "--iterations", LONG, "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 2)
    try:
        proc.kill()
        proc.communicate(timeout=30)
        end = time.monotonic() + 30
        while (_ranks_of(out) | _in_sessions(ranks)) and time.monotonic() < end:
            time.sleep(0.1)  # the kernel delivers the death signal at once; exiting takes the ranks a moment
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))


# ---------------------------------------------------------------- an --out that cannot be written

unshare = pytest.mark.skipif(os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0,
                             reason="needs root and unshare -m to mount a read-only file system privately")


@torch_needed
@unshare
@pytest.mark.parametrize("command", [
    ["ddp", "--model", "lenet5", "--workers", "2", "--iterations", "1"],
    ["ps", "--model", "lenet5", "--workers", "1", "--iterations", "1"],
    ["connections", "--connections", "1,2", "--requests", "10"],
], ids=["ddp", "ps", "connections"])
@pytest.mark.parametrize("where", ["existing", "missing"])
def test_a_read_only_out_is_refused_in_one_line(tmp_path, command, where):
    """Root writes through permissions, so the directory is a read-only mount, private to the command."""
    ro = tmp_path / "ro"
    ro.mkdir()
    out = ro if where == "existing" else ro / "sub" / "run"
    script = 'mount -t tmpfs -o ro,size=64k tmpfs "$0" && exec "$@"'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, str(ro), sys.executable, "-m", "ddlsim", "capture",
                           *command, "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out ") and "read-only file system" in lines[0].lower(), done.stderr
    assert "choose a writable directory" in lines[0]
    assert list(ro.iterdir()) == []  # the mount was private; nothing reached the directory beneath


# ---------------------------------------------------------------- what "own files" means (no subprocess)


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_removes_what_the_run_wrote_and_nothing_else(tmp_path, stop):
    out = tmp_path / "cap"
    users = {"notes.txt": "mine", "job.json": "an earlier job, untouched", "logs/other.log": "mine",
             "c3/requests.csv": "an earlier run, untouched", "data/0.rank.jsonl": "not a capture subdirectory"}
    _tree(out, users)
    with pytest.raises(stop):
        with capture_dir(out):
            _tree(out, {"0.rank.jsonl": "{}", "1.ddp.json": "{}", "1.ddp.json.tmp": "{}", "logs/rank0.log": "x",
                        "c1/0.rank.jsonl": "{}", "c1/logs/rank1.log": "x", "c1/events.parquet": "x", "fit.json": "{}",
                        "scaling.csv": "x", ".events.parquet.abc123.tmp": "x", "groups.parquet": "x"})
            (out / "c1" / "mine.txt").write_text("someone else's, in a directory the run made")
            (out / "new-by-someone.txt").write_text("not a name ddlsim writes")
            raise stop()
    left = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert left == {*users, "c1/mine.txt", "new-by-someone.txt"}
    assert not (out / "c1" / "logs").exists()  # made by the run and empty now
    assert all((out / name).read_text() == text for name, text in users.items())


def test_an_interrupt_removes_the_directories_the_run_created(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(KeyboardInterrupt):
        with capture_dir(out):
            _tree(out, {"job.json": "{}", "logs/rank0.log": "x", "0.rank.jsonl": "{}"})
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_failure_that_is_no_interrupt_keeps_the_partial_capture(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(DdlsimError):
        with capture_dir(out):
            _tree(out, {"0.rank.jsonl": "{}", "logs/rank0.log": "why it failed"})
            raise DdlsimError("rank 0 failed")
    assert (out / "logs" / "rank0.log").read_text() == "why it failed"


def test_a_changed_own_file_counts_as_the_runs(tmp_path):
    out = tmp_path / "run"
    _tree(out, {"job.json": "old", "logs/rank0.log": "old"})
    os.utime(out / "job.json", ns=(0, 0))
    with pytest.raises(KeyboardInterrupt):
        with capture_dir(out):
            (out / "job.json").write_text("this run's job")
            raise KeyboardInterrupt
    assert not (out / "job.json").exists() and (out / "logs" / "rank0.log").read_text() == "old"


def test_own_file_names():
    for name in ["job.json", "0.rank.jsonl", "12.ddp.json", "3.ddp.json.tmp", "rank7.log", "events.parquet",
                 "groups.parquet", ".events.parquet.x1y2.tmp", "fit.json", "scaling.csv", "requests.csv"]:
        assert is_own_file(name), name
    for name in ["notes.txt", "x.rank.jsonl", "rank.log", "events.parquet.bak", ".notes.txt.x.tmp", "data.parquet",
                 "0.rank.jsonl~"]:
        assert not is_own_file(name), name


def test_an_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "f"
    target.write_text("keep")
    with pytest.raises(DdlsimError, match=r"--out .*f: exists and is not a directory \(it is a file\)"):
        with capture_dir(target):
            pass
    assert target.read_text() == "keep"


# ---------------------------------------------------------------- shaped captures (network namespaces)


def _netns_usable() -> bool:
    if os.geteuid() != 0 or subprocess.run(["which", "tc"], capture_output=True).returncode != 0:
        return False
    probe = f"ddlsim-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True


netns_needed = pytest.mark.skipif(not _netns_usable(), reason="shaped captures need root, ip netns and tc")


def _made_by(pid: int) -> set[str]:
    """The namespaces and links of the shaped capture run by process `pid` (their names carry it)."""
    from ddlsim.capture.shaping import _base36

    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    names = {line.split(":")[1].strip().split("@")[0] for line in links}
    return {s for s in spaces if s.startswith(f"ddlsim-{pid}-")} | {n for n in names if n.startswith(f"ddls{_base36(pid, 5)}")}


@torch_needed
@netns_needed
def test_an_interrupted_shaped_capture_leaves_no_process_namespace_or_file(tmp_path):
    out = tmp_path / "run"
    proc = _start(["ddp", "--model", "lenet5", "--workers", "2", "--iterations", LONG, "--bandwidth", "1Gbps",
                   "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 2)
    try:
        assert len(_made_by(proc.pid)) == 2 + 3  # 2 namespaces, a bridge, 2 host links
        code, err = _interrupt(proc, signal.SIGTERM)
        _assert_nothing_runs(out, ranks)
    finally:
        _kill(ranks | _ranks_of(out))
    assert code == 143 and "Traceback" not in err, err
    assert _made_by(proc.pid) == set()
    assert not out.exists(), _snapshot(out)


@torch_needed
@netns_needed
def test_a_shaped_capture_killed_hard_leaves_namespaces_that_cleanup_removes(tmp_path):
    out = tmp_path / "run"
    proc = _start(["ddp", "--model", "lenet5", "--workers", "2", "--iterations", LONG, "--bandwidth", "1Gbps",
                   "--out", str(out)])
    ranks = _wait_for_rank_files(proc, out, 2)
    try:
        proc.kill()
        proc.communicate(timeout=30)
        left = _made_by(proc.pid)
        assert len(left) == 5  # SIGKILL: nobody could remove them
        end = time.monotonic() + 30
        while (_ranks_of(out) | _in_sessions(ranks)) and time.monotonic() < end:
            time.sleep(0.1)
        _assert_nothing_runs(out, ranks)  # the ranks inside the namespaces died with their launcher
        done = subprocess.run([sys.executable, "-m", "ddlsim", "capture", "cleanup"], env=ENV, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert all(f"{name} (owner pid {proc.pid}, gone)" in done.stdout for name in left), done.stdout
        assert _made_by(proc.pid) == set()
    finally:
        _kill(ranks | _ranks_of(out))
        from ddlsim.capture.shaping import find_leftovers, remove_leftovers

        remove_leftovers([x for x in find_leftovers() if x.owner_pid == proc.pid])


def test_a_second_signal_waits_for_the_clean_up_and_is_raised_after_it():
    from ddlsim.capture.launch import signals_deferred

    steps = []
    # a suite started in the background (`cmd &` from a script: CI) inherits SIGINT ignored, and the deferred
    # signal is then rightly ignored too: give the test the handler an interactive run has
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # Python would run the handler here
                steps.append("clean-up finished")
        assert steps == ["clean-up finished"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
