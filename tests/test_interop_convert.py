"""`ddlsim convert` and `ddlsim.convert`: format inference, every pair through the event log, all-or-nothing output."""

import subprocess
import sys

import forked_cli
import pytest

import ddlsim
from ddlsim.errors import TraceError
from ddlsim.trace import read_event_log, write_event_log
from ddlsim.trace.formats import READ_FORMATS, WRITE_FORMATS, infer_input_format, infer_output_format


def cli(*args, cwd=None):
    return forked_cli.run([*args], cwd=cwd)


@pytest.fixture(scope="module")
def ps_events(tmp_path_factory):
    path = tmp_path_factory.mktemp("ps") / "events.parquet"
    write_event_log(ddlsim.simulate(model="lenet5", workers=2, strategy="ps", iterations=2).events, path)
    return path


def message_tuples(log):
    frame = log.to_pandas(["kind", "op", "rank", "peer", "bytes", "tensor"]).query("kind in ['send', 'recv']")
    return sorted(map(tuple, frame.itertuples(index=False)))


@pytest.mark.parametrize("target, fmt", [("dlc", "sketchdlc"), ("ck/trace.et", None), ("kin", "kineto"), ("copy.parquet", None)])
def test_every_readable_writer_round_trips_the_messages(ps_events, tmp_path, target, fmt):
    """Whatever a format keeps of a PS log, its messages (op, ranks, bytes, key) survive out and back."""
    out = tmp_path / target
    ddlsim.convert(ps_events, out, to_format=fmt)
    back_path = tmp_path / "back.parquet"
    ddlsim.convert(out.with_name("trace") if target.endswith(".et") else out, back_path)
    assert message_tuples(read_event_log(back_path)) == message_tuples(read_event_log(ps_events))


def test_inference_and_ambiguity(tmp_path, ps_events):
    assert infer_output_format("a/t.json") == "chrome" and infer_output_format("x.csv") == "csv"
    assert infer_output_format("x.et") == "chakra" and infer_output_format("x.parquet") == "events"
    with pytest.raises(TraceError, match="a directory can hold sketchdlc or kineto files"):
        infer_output_format(tmp_path / "out")
    assert infer_input_format(ps_events) == "events"
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "w0.txt").write_text("")
    (tmp_path / "mixed" / "rank0.json").write_text("{}")
    with pytest.raises(TraceError, match=r"cannot tell the format of this directory \(kineto, sketchdlc\)"):
        infer_input_format(tmp_path / "mixed")
    (tmp_path / "t.txt").write_text("")
    with pytest.raises(TraceError, match="a .txt is SketchDLC or a netop trace"):
        infer_input_format(tmp_path / "t.txt")
    assert set(READ_FORMATS) - set(WRITE_FORMATS) == {"netop"}
    assert set(WRITE_FORMATS) - set(READ_FORMATS) == {"chrome", "csv"}


def test_cli_convert_and_its_errors(tmp_path, ps_events):
    p = cli("convert", str(ps_events), str(tmp_path / "k"), "--to", "kineto")
    assert p.returncode == 0 and "wrote" in p.stdout and (tmp_path / "k" / "rank2.json").exists(), p.stderr
    p = cli("convert", str(tmp_path / "k"), str(tmp_path / "t.csv"))
    assert p.returncode == 0, p.stderr
    p = cli("convert", str(ps_events), str(tmp_path / "out"))
    assert p.returncode == 2 and "give --to FORMAT" in p.stderr and "Traceback" not in p.stderr
    p = cli("convert", str(tmp_path / "t.csv"), str(tmp_path / "x.parquet"), "--from", "csv")
    assert p.returncode == 2 and "format 'csv' cannot be read (csv is write-only)" in p.stderr
    p = cli("convert", str(ps_events), str(tmp_path / "x"), "--to", "netop")
    assert p.returncode == 2 and "(netop is read-only)" in p.stderr


def test_a_failed_conversion_leaves_nothing(tmp_path):
    ring = tmp_path / "ring.parquet"
    write_event_log(ddlsim.simulate(model="lenet5", workers=2, strategy="ring", iterations=1).events, ring)
    p = cli("convert", str(ring), str(tmp_path / "dlc"), "--to", "sketchdlc")
    assert p.returncode == 2 and "SketchDLC describes parameter-server push/pull traffic" in p.stderr
    assert not (tmp_path / "dlc").exists()
    p = cli("export", str(ring), "-f", "sketchdlc", "-o", str(tmp_path / "dlc2"))
    assert p.returncode == 2 and not (tmp_path / "dlc2").exists()


def test_export_is_convert_with_the_event_log_as_input(tmp_path, ps_events):
    for fmt, target in (("chakra", "c/t"), ("kineto", "k"), ("csv", "e.csv")):
        assert cli("export", str(ps_events), "-f", fmt, "-o", str(tmp_path / "export" / target)).returncode == 0
        ddlsim.convert(ps_events, tmp_path / "convert" / target, to_format=fmt)
    exported = sorted(p.relative_to(tmp_path / "export") for p in (tmp_path / "export").rglob("*") if p.is_file())
    converted = sorted(p.relative_to(tmp_path / "convert") for p in (tmp_path / "convert").rglob("*") if p.is_file())
    assert exported == converted
    for path in exported:
        assert (tmp_path / "export" / path).read_bytes() == (tmp_path / "convert" / path).read_bytes(), path


def test_the_examples_of_docs_interop_run(tmp_path):
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "interop.md").read_text(encoding="utf-8")
    commands = [line.split("#", 1)[0].strip() for line in re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1).splitlines()]
    for command in filter(None, commands):
        run = cli(*shlex.split(command)[1:], cwd=tmp_path)
        assert run.returncode == 0, (command, run.stderr[-2000:])
    python = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    run = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "out.json").exists() and (tmp_path / "ck" / "trace.2.et").exists()


def test_chakra_files_are_named_the_same_way_in_and_out(tmp_path, ps_events):
    """`convert X ck/trace.et` writes ck/trace.<rank>.et; `convert ck/trace.et Y` reads them back (and so do the
    prefix ck/trace and the directory ck/)."""
    out = cli("convert", str(ps_events), "ck/trace.et", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["trace.0.et", "trace.1.et", "trace.2.et"]
    expected = message_tuples(read_event_log(ps_events))
    for source in ("ck/trace.et", "ck/trace", "ck"):
        back = cli("convert", source, "back.parquet", cwd=tmp_path)
        assert back.returncode == 0, (source, back.stderr)
        assert message_tuples(read_event_log(tmp_path / "back.parquet")) == expected
        (tmp_path / "back.parquet").unlink()
    from ddlsim.trace import read_trace

    assert message_tuples(read_trace(tmp_path / "ck" / "trace.et")) == expected
    assert "no Chakra files" in cli("convert", "ck/other.et", "x.parquet", cwd=tmp_path).stderr
