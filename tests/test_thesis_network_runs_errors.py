"""`ddlsim reproduce thesis-network --runs DIR` skips the runs done in DIR and reads their tables (found by
tools/fuzz_readers.py's ``thesisruns`` target, 12 kinds of failure in its first 120 inputs): before, a table that
is not Parquet escaped as pyarrow's ArrowInvalid or OSError, a FIFO or a missing side table as FileNotFoundError, a
summary of no rows as IndexError, a column of text as TypeError. Each is now one line naming the file and the fix,
and following the fix (remove the run's summary, its done mark) makes the same command redo that run and succeed.
``python -m ddlsim.reproduce.adaptive_priority`` reads the same runs and now refuses the same way, and writes its
OUT_DIR all or nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddlsim.errors import DdlsimError
from ddlsim.reproduce.thesis_network import collect, parse_plan, run_all, small_flow_cdf

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--quick", "--ratios", "4", "--rates", "23"]
PLAN = parse_plan(True, None, [4], [23], None)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("thesis") / "runs"
    run_all(PLAN, runs)
    return runs


@pytest.fixture
def runs(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "runs"))


def ddlsim(*args: str, cwd: Path, module: str = "ddlsim") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})


def one_table(runs: Path, table: str) -> Path:
    return sorted((runs / "R4" / table).glob("*.parquet"))[0]


def rewrite(path: Path, change) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def set_column(name: str, values: pa.Array):
    return lambda t: t.set_column(t.schema.get_field_index(name), name, values)


DAMAGES = {
    "summary not parquet": ("summary", lambda p: p.write_bytes(p.read_bytes()[:-9]), "cannot read this run's summary table"),
    "flows not parquet": ("flows", lambda p: p.write_bytes(b"PAR1"), "cannot read this run's flows table"),
    "flows without end_ns": ("flows", lambda p: rewrite(p, lambda t: t.drop_columns(["end_ns"])),
                             "this run's flows table has no column 'end_ns'"),
    "iterations of text": ("iterations", lambda p: rewrite(p, lambda t: pa.table({"time_s": ["0.1"] * t.num_rows})),
                           "column 'time_s' of this run's iterations table holds string, not numbers"),
    "iterations of no rows": ("iterations", lambda p: rewrite(p, lambda t: t.slice(0, 0)),
                              "this run's iterations table has 0 rows, not at least 1"),
    "summary of no rows": ("summary", lambda p: rewrite(p, lambda t: t.slice(0, 0)),
                           "this run's summary table has 0 rows, not 1"),
    "an iteration time of 0": ("summary", lambda p: rewrite(p, lambda t: set_column(
        "iteration_time_s", pa.array([0.0] * t.num_rows))(t)),
        "column 'iteration_time_s' of this run's summary table holds a value that is not a finite number above 0"),
    "a missing flows table": ("flows", lambda p: p.unlink(), "sweep flows table not found"),
    "a FIFO for a flows table": ("flows", lambda p: (p.unlink(), os.mkfifo(p)), "is a FIFO (named pipe), not a sweep flows table"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_run_table_is_named_with_a_fix_that_works(runs, damage):
    table, change, why = DAMAGES[damage]
    victim = one_table(runs, table)
    summary = runs / "R4" / "summary" / victim.name
    change(victim)
    with pytest.raises(DdlsimError) as caught:
        collect(PLAN, runs)
    message = str(caught.value)
    assert message.startswith(f"{victim}: ") and why in message and "\n" not in message, message
    fix = f"remove {summary} (the run's done mark) and run the command that wrote it again: it redoes that run"
    assert message.endswith(fix), message  # ArrowInvalid, OSError, FileNotFoundError, IndexError, TypeError before
    if table == "flows":
        with pytest.raises(DdlsimError, match=why.replace("(", r"\(").replace(")", r"\)")):
            small_flow_cdf(PLAN, runs)
    if "FIFO" in damage:
        assert f"; move it away, then remove {summary}" in message  # the redone run could not write over it
        victim.unlink()
    summary.unlink()  # the fix
    run_all(PLAN, runs)
    assert len(collect(PLAN, runs)) == 3


def test_the_command_refuses_in_one_line_writes_nothing_and_runs_once_the_fix_is_followed(runs, tmp_path):
    victim = one_table(runs, "iterations")
    rewrite(victim, lambda t: pa.table({"time_s": ["x"] * t.num_rows}))  # TypeError before
    run = ddlsim("reproduce", "thesis-network", *ARGS, "--runs", str(runs), "--out", "out", "-q", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().startswith(f"error: {victim}: column 'time_s'") and "\n" not in run.stderr.strip()
    assert not (tmp_path / "out").exists()
    (runs / "R4" / "summary" / victim.name).unlink()
    run = ddlsim("reproduce", "thesis-network", *ARGS, "--runs", str(runs), "--out", "out", "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "runs.csv").is_file()


def test_adaptive_priority_refuses_a_damaged_run_and_an_output_that_is_not_a_directory(runs, tmp_path):
    module = "ddlsim.reproduce.adaptive_priority"
    report = ddlsim("report", str(runs / "R4"), str(runs / "R4-alone"), cwd=tmp_path, module=module)
    assert report.returncode == 0, report.stderr
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["cells.csv", "runs.csv", "table.md"]
    victim = one_table(runs, "summary")
    rewrite(victim, set_column("scenario", pa.array(["{not json"])))  # json's ValueError before
    run = ddlsim("again", str(runs / "R4"), cwd=tmp_path, module=module)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith(f"error: {victim}: its scenario is not one of a ddlsim sweep (JSONDecodeError")
    assert not (tmp_path / "again").exists()  # nothing written
    os.mkfifo(tmp_path / "fifo")
    (runs / "R4" / "summary" / victim.name).unlink()
    run = ddlsim("fifo", str(runs / "R4"), cwd=tmp_path, module=module)  # FileExistsError before
    assert run.returncode == 2 and "OUT_DIR fifo: exists and is not a directory (it is a FIFO" in run.stderr, run.stderr


def test_text_that_is_not_utf8_in_a_runs_summary_is_refused_where_the_table_is_read(runs):
    # found by the fuzzer (seed 2, input 160): pyarrow reads such a column and fails only where a value is taken,
    # a UnicodeDecodeError before
    from ddlsim.reproduce.adaptive_priority import collect as collect_adaptive

    victim = one_table(runs, "summary")
    rewrite(victim, set_column("scenario", pa.array([b"\xff\xfe{"], pa.binary()).view(pa.string())))
    with pytest.raises(DdlsimError, match=r"cannot read this run's summary table \(.*Invalid UTF8 sequence"):
        collect_adaptive([runs / "R4"])
