"""Every input a command reads is a regular file: a FIFO, a directory, a device or a socket named as an input (or
found where a reader looks for one of its files) is one line and exit status 2, never a command that waits for ever.

Before `ddlsim.inputs`, `analyze`, `analyze --compare`, `replay --idle-curve`, `validate --idle-curve`, `capture ddp
--plan`, `capture merge` (a FIFO rank file), `convert` (a FIFO Chakra file) and `sweep --status` (a FIFO sweep.json)
blocked on a FIFO until killed; most other readers called it "not found"."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import forked_cli
import pytest

from ddlsim.errors import DdlsimError, TraceError
from ddlsim.inputs import input_file, kind_of

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------- input_file, os as oracle

def _things(tmp_path: Path) -> dict[str, Path]:
    """One path of each kind the file system has, made by the test."""
    regular = tmp_path / "regular.txt"
    regular.write_text("x\n")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    (tmp_path / "link").symlink_to(regular)
    (tmp_path / "link_to_fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return {"regular": regular, "dir": tmp_path / "dir", "fifo": tmp_path / "fifo", "sock": tmp_path / "sock",
            "link": tmp_path / "link", "link_to_fifo": tmp_path / "link_to_fifo", "dangling": tmp_path / "dangling",
            "loop": tmp_path / "loop", "missing": tmp_path / "missing", "device": Path("/dev/null"),
            "under_a_file": regular / "x"}


def test_input_file_accepts_what_os_stat_calls_a_regular_file_and_names_everything_else(tmp_path):
    import stat

    for name, path in _things(tmp_path).items():
        try:
            st = os.stat(path)
        except OSError as exc:
            st, errno = None, exc.errno
        if st is not None and stat.S_ISREG(st.st_mode):
            assert input_file(path, "profile", "give a CSV") == path, name
            continue
        with pytest.raises(TraceError) as raised:
            input_file(path, "profile", "give a CSV", error=TraceError)
        message = str(raised.value)
        assert message.startswith(f"{path}: ") and message.endswith("; give a CSV") and "\n" not in message, message
        if st is not None:
            assert f"is {kind_of(st.st_mode)}, not a profile" in message, (name, message)
        elif errno == 2 or errno == 20:  # ENOENT, ENOTDIR
            assert message == f"{path}: profile not found; give a CSV", (name, message)
        else:
            assert message.startswith(f"{path}: cannot read the profile ({os.strerror(errno)})"), (name, message)


def test_input_file_labels_missing_message_and_article():
    with pytest.raises(DdlsimError, match=r"^--plan p\.json: no such file; write one$"):
        input_file("/nonexistent/p.json", "plan", "x", label="--plan p.json", missing="--plan p.json: no such file; write one")
    with pytest.raises(DdlsimError, match=r"^/dev/null: is a character device, not an event log \(ddlsim reads regular "
                                          r"files only\)$"):
        input_file("/dev/null", "event log")
    with pytest.raises(DdlsimError, match=r"cannot read the idle curve"):
        input_file("a\0b", "idle curve")


# ---------------------------------------------------------------------------------------- every reader of the CLI

def _cli(args, cwd, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "COLUMNS": "400"}
    return forked_cli.run(args, cwd=cwd, env=env, timeout=timeout)  # its standard input: /dev/null


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A simulated event log, and its Chakra and Kineto exports (written once for the module)."""
    d = tmp_path_factory.mktemp("logs")
    for args in (["simulate", "--model", "lenet5", "--workers", "2", "--iterations", "1", "--out", "sim"],
                 ["export", "sim/events.parquet", "--format", "chakra", "--out", "chakra/trace"],
                 ["export", "sim/events.parquet", "--format", "kineto", "--out", "kineto"]):
        run = _cli(args, d)
        assert run.returncode == 0, run.stderr
    return d


def _fifo_in_place_of(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


# case: (argv with {fifo} for a FIFO named as the input, or a setup that puts the FIFO where a reader looks)
CASES = {
    "simulate scenario": ["simulate", "{fifo}"],
    "simulate --profile": ["simulate", "--model", "lenet5", "--workers", "2", "--profile", "{fifo}"],
    "simulate --background cdf": ["simulate", "--model", "lenet5", "--workers", "2", "--background", "cdf={fifo}:load=0.1"],
    "plan scenario": ["plan", "{fifo}"],
    "plan --cost-model": ["plan", "--model", "lenet5", "--workers", "2", "--cost-model", "{fifo}"],
    "sweep scenario": ["sweep", "{fifo}", "--out", "sweep-out"],
    "replay": ["replay", "{fifo}"],
    "export": ["export", "{fifo}", "--format", "csv", "--out", "out.csv"],
    "analyze": ["analyze", "{fifo}"],
    "analyze --compare": ["analyze", "{logs}/sim/events.parquet", "--compare", "{fifo}"],
    "convert kineto": ["convert", "{fifo}", "out.parquet", "--from", "kineto"],
    "convert netop": ["convert", "{fifo}", "out.parquet", "--from", "netop"],
    "convert sketchdlc": ["convert", "{fifo}", "out.parquet", "--from", "sketchdlc"],
    "fit": ["fit", "{fifo}"],
    "validate --idle-curve": ["validate", "--quick", "--idle-curve", "{fifo}", "--out", "validate-out"],
    "capture merge --config": ["capture", "merge", "{logs}", "--config", "{fifo}", "--out", "merged.parquet"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fifo_named_as_an_input_is_one_line_and_exit_2(case, logs, tmp_path):
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    argv = [a.replace("{fifo}", str(fifo)).replace("{logs}", str(logs)) for a in CASES[case]]
    run = _cli(argv, tmp_path)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert f"{fifo}: is a FIFO (named pipe), not a" in lines[0], lines[0]
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["input.fifo"]  # nothing else written


def test_capture_ddp_plan_a_fifo_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("torch", reason="ddlsim capture needs PyTorch (the capture extra)")
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    run = _cli(["capture", "ddp", "--model", "lenet5", "--workers", "2", "--iterations", "2", "--plan", str(fifo),
                "--out", str(tmp_path / "run")], tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr[-2000:]
    assert f"--plan {fifo}: is a FIFO (named pipe), not a plan" in run.stderr
    assert not (tmp_path / "run").exists()


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


# a FIFO where a reader looks for one of its files: (name, what to run, the file made a FIFO)
FOUND = {
    "a side table of an event log": (["analyze", "{d}/events.parquet"], "sim", "groups.parquet"),
    "a Chakra file of a prefix": (["convert", "{d}/trace", "out.parquet"], "chakra", "trace.1.et"),
    "a Kineto file of a directory": (["convert", "{d}", "out.parquet", "--from", "kineto"], "kineto", "rank1.json"),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_a_fifo_found_where_a_reader_looks_is_one_line_and_exit_2(case, logs, tmp_path):
    argv, source, name = FOUND[case]
    d = _copy(logs / source, tmp_path / "in")
    fifo = _fifo_in_place_of(d / name)
    run = _cli([a.replace("{d}", str(d)) for a in argv], tmp_path)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr[-2000:]
    assert f"{fifo}: is a FIFO (named pipe), not a" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_capture_merge_of_a_fifo_rank_file_or_job_json_and_sweep_status_of_a_fifo_manifest(tmp_path):
    capture = tmp_path / "capture"
    capture.mkdir()
    os.mkfifo(capture / "0.rank.jsonl")
    run = _cli(["capture", "merge", str(capture)], tmp_path)
    assert run.returncode == 2 and f"{capture / '0.rank.jsonl'}: is a FIFO (named pipe), not a capture file" in run.stderr
    (capture / "0.rank.jsonl").unlink()
    os.mkfifo(capture / "job.json")
    run = _cli(["capture", "merge", str(capture)], tmp_path)
    assert run.returncode == 2 and f"{capture / 'job.json'}: is a FIFO (named pipe), not a job description" in run.stderr
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    os.mkfifo(sweep / "sweep.json")
    run = _cli(["sweep", "--status", str(sweep)], tmp_path)
    assert run.returncode == 2 and f"{sweep / 'sweep.json'}: is a FIFO (named pipe), not a sweep manifest" in run.stderr
    assert sorted(p.name for p in capture.iterdir()) == ["job.json"] and sorted(p.name for p in sweep.iterdir()) == ["sweep.json"]


def test_the_python_api_refuses_a_fifo_too(tmp_path):
    import ddlsim
    from ddlsim.analyze import Analysis, open_analysis
    from ddlsim.trace import read_event_log

    fifo = tmp_path / "events.parquet"
    os.mkfifo(fifo)
    for call in (lambda: ddlsim.replay(fifo), lambda: open_analysis(fifo), lambda: Analysis(fifo),
                 lambda: read_event_log(fifo)):
        with pytest.raises(DdlsimError, match="is a FIFO"):
            call()


def test_capture_merge_of_a_dangling_job_json_link_merges_without_the_job_s_facts_as_before(logs, tmp_path):
    """Only an existing job.json is checked (a FIFO there is refused above); a dangling link is a missing one."""
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "job.json").symlink_to(tmp_path / "nowhere")
    run = _cli(["capture", "merge", str(capture)], tmp_path)
    assert run.returncode == 2 and "--config None" not in run.stderr and "no per-rank capture files" in run.stderr, \
        run.stderr
