"""Malformed inputs that crashed a reader with a Python exception (found by tools/fuzz_readers.py):
each must be one of ddlsim's own errors naming the file (and line or field), and exit 2 from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import forked_cli
import pytest

import ddlsim
from ddlsim.capture import RankRecorder, merge_capture
from ddlsim.errors import PlanError, ScenarioError, TraceError
from ddlsim.plan.cost import CostModel
from ddlsim.simulation.scenario import load_scenario
from ddlsim.trace import read_event_log, write_trace
from ddlsim.trace.chakra import _message_classes
from ddlsim.trace.formats import read_trace
from ddlsim.trace.kineto import read_kineto
from ddlsim.trace.netop import read_netop_trace
from ddlsim.trace.sketchdlc import SKETCHDLC_COLUMNS, read_sketchdlc

TINY = {"name": "tiny", "layers": [{"name": "a", "params": 1000, "fwd_ms": 0.1, "bwd_ms": 0.2}]}
DEEP = 5000


def cli(*args):
    return forked_cli.run(list(args))


@pytest.fixture(scope="module")
def ps_log():
    return ddlsim.simulate({"workers": 2, "iterations": 1, "strategy": {"kind": "ps", "servers": 1}, "model": TINY}).events


@pytest.fixture()
def sketch_dir(ps_log, tmp_path):
    write_trace(ps_log, tmp_path / "dlc", "sketchdlc")
    return tmp_path / "dlc"


@pytest.fixture()
def kineto_dir(ps_log, tmp_path):
    write_trace(ps_log, tmp_path / "kin", "kineto")
    return tmp_path / "kin"


def _set_field(path: Path, line_index: int, column: str, value: str) -> int:
    """Set one field of the line_index-th record of a SketchDLC file; returns its 1-based line number."""
    lines = path.read_text().splitlines()
    records = [i for i, line in enumerate(lines) if line and not line.startswith("#") and not line.startswith("id\t")]
    number = records[line_index]
    fields = lines[number].split("\t")
    fields[SKETCHDLC_COLUMNS.index(column)] = value
    lines[number] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return number + 1


@pytest.mark.parametrize("column, value", [("length", str(10 ** 30)), ("length", "1e30"), ("time_sec", str(10 ** 15)),
                                           ("num_pp", "9" * 40)])
def test_sketchdlc_number_out_of_range_names_file_line_and_field(sketch_dir, column, value):
    line = _set_field(sketch_dir / "w0.txt", 0, column, value)
    with pytest.raises(TraceError) as caught:
        read_sketchdlc(sketch_dir)
    message = str(caught.value)
    assert f"w0.txt:{line}" in message and column in message and "\n" not in message


def _kineto_event(path: Path, predicate) -> tuple[dict, dict]:
    trace = json.loads(path.read_text())
    return trace, next(e for e in trace["traceEvents"] if predicate(e))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e30])
def test_kineto_timestamp_not_finite_or_huge(kineto_dir, value):
    path = kineto_dir / "rank0.json"
    trace, event = _kineto_event(path, lambda e: e.get("ph") == "X" and e.get("cat") == "kernel")
    event["ts"] = value
    path.write_text(json.dumps(trace))  # NaN / Infinity, as Python's json writes them
    with pytest.raises(TraceError) as caught:
        read_kineto(kineto_dir)
    assert "rank0.json" in str(caught.value) and "'ts'" in str(caught.value)


def test_kineto_pid_as_a_list(kineto_dir):
    path = kineto_dir / "rank0.json"
    trace, event = _kineto_event(path, lambda e: e.get("ph") == "X" and e.get("cat") == "cpu_op")
    event["pid"] = [1, {"a": 2}]
    path.write_text(json.dumps(trace))
    with pytest.raises(TraceError, match=r"rank0\.json: traceEvents\[\d+\]: 'pid' is \[1, \{'a': 2\}\]"):
        read_kineto(kineto_dir)


def test_kineto_correlation_as_a_dict(kineto_dir):
    """An id that is no int or string is ignored (it links nothing), not a crash."""
    path = kineto_dir / "rank0.json"
    trace = json.loads(path.read_text())
    for event in trace["traceEvents"]:
        if event.get("cat") == "cuda_runtime":
            event["args"]["correlation"] = {"x": 1}
        if event.get("cat") == "kernel":
            event["args"].pop("ddlsim")
            event["args"]["correlation"] = [1]
    path.write_text(json.dumps(trace))
    assert len(read_kineto(path)) > 0


def test_kineto_deeply_nested_json(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": ' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(TraceError, match="rank0.json: JSON nested too deeply"):
        read_kineto(path)


def test_cli_convert_of_a_nan_kineto_trace_exits_2_with_one_line(kineto_dir, tmp_path):
    path = kineto_dir / "rank0.json"
    trace, event = _kineto_event(path, lambda e: e.get("ph") == "X" and e.get("cat") == "kernel")
    event["dur"] = float("nan")
    path.write_text(json.dumps(trace))
    run = cli("convert", str(kineto_dir), str(tmp_path / "out.parquet"))
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "rank0.json" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.parquet").exists()


# ------------------------------------------------------------------ chakra


def _chakra_records(data: bytes) -> list[bytes]:
    records, position = [], 0
    while position < len(data):
        length, shift = 0, 0
        while True:
            byte = data[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        records.append(data[position:position + length])
        position += length
    return records


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _rewrite_chakra(path: Path, index: int, change) -> None:
    classes = _message_classes()
    records = _chakra_records(path.read_bytes())
    message = (classes["GlobalMetadata"] if index == 0 else classes["Node"])()
    message.ParseFromString(records[index])
    change(message)
    records[index] = message.SerializeToString()
    path.write_bytes(b"".join(_varint(len(r)) + r for r in records))


@pytest.fixture()
def chakra_prefix(ps_log, tmp_path):
    (tmp_path / "ck").mkdir()
    write_trace(ps_log, tmp_path / "ck" / "trace", "chakra")
    return tmp_path / "ck" / "trace"


@pytest.mark.parametrize("text, expected", [('{"source": "simulate", "model": ', "not valid JSON"),
                                            ("[1, 2]", "expected a JSON object"),
                                            ("[" * DEEP + "]" * DEEP, "nested too deeply")])
def test_chakra_malformed_metadata_json(chakra_prefix, text, expected):
    path = chakra_prefix.with_name("trace.0.et")

    def change(meta):
        next(a for a in meta.attr if a.name == "ddlsim_metadata").string_val = text

    _rewrite_chakra(path, 0, change)
    with pytest.raises(TraceError) as caught:
        read_trace(chakra_prefix, "chakra")
    assert "trace.0.et" in str(caught.value) and "ddlsim_metadata" in str(caught.value) and expected in str(caught.value)


def test_chakra_metadata_of_another_type(chakra_prefix):
    def change(meta):
        attribute = next(a for a in meta.attr if a.name == "ddlsim_metadata")
        attribute.int64_val = 3

    _rewrite_chakra(chakra_prefix.with_name("trace.0.et"), 0, change)
    with pytest.raises(TraceError, match="ddlsim_metadata: is a int, expected a JSON string"):
        read_trace(chakra_prefix, "chakra")


def test_chakra_remote_deps_not_a_list(chakra_prefix):
    def change(node):
        attribute = next(a for a in node.attr if a.name == "ddlsim_remote_deps")
        attribute.int64_val = 7

    path = chakra_prefix.with_name("trace.2.et")
    classes = _message_classes()
    records = _chakra_records(path.read_bytes())
    index = next(i for i, r in enumerate(records[1:], start=1)
                 if any(a.name == "ddlsim_remote_deps" for a in _parsed(classes["Node"], r).attr))
    _rewrite_chakra(path, index, change)
    with pytest.raises(TraceError, match=rf"trace\.2\.et: record {index} .*ddlsim_remote_deps is 7, expected a list"):
        read_trace(chakra_prefix, "chakra")


def _parsed(cls, payload):
    message = cls()
    message.ParseFromString(payload)
    return message


# ------------------------------------------------------------------ parquet


def _rewrite_metadata(path: Path, key: bytes, value: bytes) -> None:
    table = pq.read_table(path)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), key: value})
    pq.write_table(table, path)


@pytest.fixture()
def events_path(ps_log, tmp_path):
    path = tmp_path / "run.events.parquet"
    write_trace(ps_log, path, "events")
    return path


@pytest.mark.parametrize("value", ['{"groups": ""}', '{"groups": "."}'])
def test_parquet_side_table_with_an_empty_name(events_path, value):
    _rewrite_metadata(events_path, b"ddlsim.side_tables", value.encode())
    with pytest.raises(TraceError, match="ddlsim.side_tables is"):
        read_event_log(events_path)


def test_parquet_metadata_nested_too_deeply(events_path):
    _rewrite_metadata(events_path, b"ddlsim.metadata", ("[" * DEEP + "]" * DEEP).encode())
    with pytest.raises(TraceError, match="ddlsim.metadata: JSON nested too deeply"):
        read_event_log(events_path)


def test_parquet_column_name_not_utf8(events_path):
    table = pq.read_table(events_path)
    pq.write_table(table, events_path, store_schema=False)  # names only in the Parquet footer
    events_path.write_bytes(events_path.read_bytes().replace(b"start_ns", b"\xff\xfeart_ns"))
    with pytest.raises(TraceError, match="column name is not UTF-8"):
        read_event_log(events_path)


def test_parquet_string_data_not_utf8(events_path):
    table = pq.read_table(events_path).replace_schema_metadata(None)
    pq.write_table(table, events_path, store_schema=False, compression="none")
    data = events_path.read_bytes()
    assert b"compute" in data
    events_path.write_bytes(data.replace(b"compute", b"c\xf2mpute"))
    with pytest.raises(TraceError, match="run.events.parquet: damaged Parquet data .*UTF8"):
        read_event_log(events_path)


@pytest.mark.parametrize("clocks, expected", [
    ({"1": {"offset_ns": -10 ** 30, "domain": "x"}}, "entry for host '1'"),
    ({"1": {"offset_ns": float("nan"), "domain": "x"}}, "entry for host '1'"),
    ({str(10 ** 12): {"offset_ns": 5, "domain": "x"}}, "has host '1000000000000'"),
    ({"-3": {"offset_ns": 5, "domain": "x"}}, "has host '-3'"),
])
def test_parquet_clock_offsets_out_of_range(events_path, clocks, expected):
    metadata = json.loads(pq.read_schema(events_path).metadata[b"ddlsim.metadata"])
    _rewrite_metadata(events_path, b"ddlsim.metadata", json.dumps({**metadata, "clocks": clocks}).encode())
    with pytest.raises(TraceError, match=f"metadata 'clocks' {expected}"):
        read_event_log(events_path)


def test_a_large_host_number_with_a_clock_offset_is_looked_up_not_tabled():
    from ddlsim.trace.columns import host_offsets
    import numpy as np

    hosts = np.array([0, 2 ** 31 - 1, 5, 2 ** 31 - 1])
    offsets = host_offsets({"clocks": {str(2 ** 31 - 1): {"offset_ns": 7}, "5": {"offset_ns": -2}}}, hosts)
    assert offsets.tolist() == [0, 7, -2, 7]


# ------------------------------------------------------------------ capture JSONL


@pytest.fixture()
def capture_dir(tmp_path):
    out = tmp_path / "cap"
    worker = RankRecorder(out, 0, "worker", host="a")
    message = worker.new_message()
    worker.row("send", "push_request", 10, 20, deps=[], peer=1, message=message, bytes=8)
    worker.close()
    server = RankRecorder(out, 1, "server", host="a")
    server.row("recv", "push_request", 15, 30, deps=[], peer=0, message=message, bytes=8)
    server.close()
    return out


def _edit_line(path: Path, number: int, change) -> None:
    lines = path.read_text().splitlines()
    obj = json.loads(lines[number - 1])
    change(obj)
    lines[number - 1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("line, change, field", [
    (1, lambda o: o["header"].pop("rank"), "'rank'"),
    (1, lambda o: o["header"].update(rank=float("inf")), "'rank'"),
    (1, lambda o: o["header"].pop("role"), "'role'"),
    (1, lambda o: o["header"].update(clock_offset_ns=[1]), "'clock_offset_ns'"),
    (2, lambda o: o.update(start_ns="12"), "'start_ns'"),
    (2, lambda o: o.update(deps=[{"a": 1}]), "'deps'"),
])
def test_capture_damaged_fields_name_file_and_line(capture_dir, line, change, field):
    _edit_line(capture_dir / "0.rank.jsonl", line, change)
    with pytest.raises(TraceError) as caught:
        merge_capture(capture_dir)
    assert f"0.rank.jsonl:{line}:" in str(caught.value) and field in str(caught.value)


def test_capture_send_without_message_id(capture_dir):
    _edit_line(capture_dir / "0.rank.jsonl", 2, lambda o: o.pop("message"))
    with pytest.raises(TraceError, match="column 'message', row 0 .*send row has message -1"):
        merge_capture(capture_dir)


def test_capture_not_utf8_and_deeply_nested(capture_dir):
    path = capture_dir / "1.rank.jsonl"
    path.write_bytes(path.read_bytes().replace(b"server", b"serv\xf0r", 1))
    with pytest.raises(TraceError, match=r"1\.rank\.jsonl: not UTF-8"):
        merge_capture(capture_dir)
    lines = (capture_dir / "0.rank.jsonl").read_text().splitlines()
    lines.insert(1, "[" * DEEP + "]" * DEEP)
    (capture_dir / "0.rank.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"0\.rank\.jsonl:2: JSON nested too deeply"):
        merge_capture(capture_dir)


def test_capture_same_rank_twice(capture_dir):
    path = capture_dir / "1.rank.jsonl"
    _edit_line(path, 1, lambda o: o["header"].update(rank=0))
    with pytest.raises(TraceError, match="rank 0 again"):
        merge_capture(capture_dir)


# ------------------------------------------------------------------ scenario and cost model


def test_scenario_nested_too_deeply(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("workers = " + "[" * DEEP + "]" * DEEP + "\n")
    with pytest.raises(ScenarioError, match="s.toml: not valid TOML: .*nested too deeply"):
        load_scenario(path)


def test_cost_model_nested_too_deeply(tmp_path):
    path = tmp_path / "cost.json"
    path.write_text('{"alpha_ns": ' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(PlanError, match="cost.json: not valid JSON"):
        CostModel.load(path)


# ------------------------------------------------------------------ empty traces are refused


def test_empty_sketchdlc_is_refused_naming_the_file(tmp_path):
    directory = tmp_path / "dlc"
    directory.mkdir()
    (directory / "w0.txt").write_text("# nothing yet\n" + "\t".join(SKETCHDLC_COLUMNS) + "\n")
    with pytest.raises(TraceError, match=r"w0\.txt: no SketchDLC push/pull records"):
        read_sketchdlc(directory)
    run = cli("convert", str(directory), str(tmp_path / "out.parquet"), "--from", "sketchdlc")
    assert run.returncode == 2 and "w0.txt" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("text", ["", "# time_s, parameter, bytes, source, destination\n\n",
                                  "time, name, size, src, dst\n"])
def test_empty_netop_trace_is_refused_naming_the_file(tmp_path, text):
    path = tmp_path / "sends.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"sends\.csv: no send records"):
        read_netop_trace(path)
    run = cli("convert", str(path), str(tmp_path / "out.parquet"))
    assert run.returncode == 2 and "sends.csv" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("text, field", [("1e30, w, 8, worker0, ps0\n", "time"),
                                         ("0.5, w, " + "9" * 30 + ", worker0, ps0\n", "size")])
def test_netop_numbers_out_of_range(tmp_path, text, field):
    path = tmp_path / "sends.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=rf"sends\.csv:1: {field}"):
        read_netop_trace(path)


@pytest.mark.parametrize("content, expected", [(b"layer,fwd_ms,bwd_ms\nconv1,0.1,0.\xff2\n", "not UTF-8"),
                                               (b"layer,fwd_ms,bwd_ms\n" + b"x" * 200_000 + b",0.1,0.2\n",
                                                "not a readable CSV .*field larger than field limit")])
def test_scenario_profile_csv_damaged(tmp_path, content, expected):
    from ddlsim.errors import ModelError
    from ddlsim.simulation.model_build import build_model

    (tmp_path / "profile.csv").write_bytes(content)
    (tmp_path / "s.toml").write_text('[model]\nname = "lenet5"\nprofile = "profile.csv"\n')
    scenario = load_scenario(tmp_path / "s.toml")
    with pytest.raises(ModelError, match=f"profile.csv: {expected}"):
        build_model(scenario.model, scenario.base_dir)


def test_fit_csv_with_a_field_over_the_csv_limit(tmp_path):
    from ddlsim.plan.cost import read_table

    path = tmp_path / "times.csv"
    path.write_text("size,time_us\n" + "1" * 200_000 + ",5\n")
    with pytest.raises(PlanError, match="times.csv: not a readable CSV .*field larger than field limit"):
        read_table(path, workers=4)


# ------------------------------------------------------------------ integers of more than 4300 digits
# (Python refuses to convert them with a ValueError that is no JSONDecodeError / TOMLDecodeError)

HUGE = "7" * 5000


def test_capture_integer_of_5000_digits(capture_dir):
    path = capture_dir / "0.rank.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"bytes":8', f'"bytes":{HUGE}')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"0\.rank\.jsonl:2: not a JSON object \(Exceeds the limit"):
        merge_capture(capture_dir)


def test_scenario_integer_of_5000_digits(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(f"workers = {HUGE}\n")
    with pytest.raises(ScenarioError, match="s.toml: not valid TOML: Exceeds the limit"):
        load_scenario(path)


def test_cost_model_integer_of_5000_digits(tmp_path):
    path = tmp_path / "cost.json"
    path.write_text(f'{{"alpha_ns": {HUGE}, "beta_ns_per_byte": 1}}')
    with pytest.raises(PlanError, match="cost.json: not valid JSON"):
        CostModel.load(path)


def test_osu_size_of_5000_digits(tmp_path):
    from ddlsim.plan.cost import read_table

    path = tmp_path / "osu.txt"
    path.write_text(f"# OSU MPI Allreduce Latency Test v7.1\n# Size       Avg Latency(us)\n4 1.5\n{HUGE} 2.0\n")
    with pytest.raises(PlanError, match=r"osu.txt:4: cannot read"):
        read_table(path, workers=4)


def test_netop_task_of_5000_digits(tmp_path):
    path = tmp_path / "sends.csv"
    path.write_text(f"0.5, w, 8, worker{HUGE}, ps0\n")
    with pytest.raises(TraceError, match=r"sends\.csv:1: source device"):
        read_netop_trace(path)


def test_sketchdlc_id_dep_of_5000_digits(sketch_dir):
    line = _set_field(sketch_dir / "w0.txt", 1, "id_dep", f"{HUGE}-0-s0")
    with pytest.raises(TraceError, match=rf"w0\.txt:{line}: id_dep .* more than 18 digits"):
        read_sketchdlc(sketch_dir)


def test_cli_convert_of_damaged_sketchdlc_and_chakra_exits_2_with_one_line(sketch_dir, chakra_prefix, tmp_path):
    _set_field(sketch_dir / "s0.txt", 0, "length", str(10 ** 30))

    def change(meta):
        next(a for a in meta.attr if a.name == "ddlsim_metadata").string_val = "{"

    _rewrite_chakra(chakra_prefix.with_name("trace.1.et"), 0, change)
    for source, name in ((sketch_dir, "s0.txt"), (chakra_prefix, "trace.1.et")):
        run = cli("convert", str(source), str(tmp_path / "out.parquet"),
                  "--from", "sketchdlc" if source == sketch_dir else "chakra")
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and name in lines[0] and "Traceback" not in run.stderr, run.stderr
        assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("ts", [4.6e15, 9e15])
def test_kineto_largest_accepted_times_do_not_overflow(kineto_dir, ts):
    """ts and dur at the bound: their end in nanoseconds still fits an int64 (a read); beyond it, refused."""
    path = kineto_dir / "rank0.json"
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for event in events:
        event["args"] = {}
    events[-1].update(ts=ts, dur=ts, cat="cpu_op", name="ddlsim::late")
    path.write_text(json.dumps(trace))
    if ts * 2 * 1000 >= 2 ** 63:
        with pytest.raises(TraceError, match="'ts' is 9000000000000000.0, expected a finite number of microseconds"):
            read_kineto(path)
        return
    assert read_kineto(path).column("end_ns").max() == round(ts * 2 * 1000)


def test_kineto_damaged_gzip(kineto_dir):
    import gzip

    data = bytearray(gzip.compress((kineto_dir / "rank0.json").read_bytes(), mtime=0))
    data[40] ^= 0xFF  # inside the deflate stream: zlib.error, not an OSError
    path = kineto_dir / "rank0.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=r"rank0\.json\.gz: cannot read as UTF-8 text"):
        read_kineto(path)


@pytest.mark.parametrize("latency", ["1e999999", "1e-999999", "1e31"])
def test_fit_latency_out_of_range(tmp_path, latency):
    """Once an OverflowError in the fit (1e999999), or minutes of work on a million-digit fraction."""
    from ddlsim.plan.cost import fit_tables

    path = tmp_path / "osu.txt"
    path.write_text(f"# OSU MPI Allreduce Latency Test v7.1\n# Size       Avg Latency(us)\n4 1.5\n8 {latency}\n16 3.0\n")
    with pytest.raises(PlanError, match=r"osu.txt:4: latency .* is out of range"):
        fit_tables([path], workers=[4])


@pytest.mark.parametrize("time", ["inf", "nan", "1e999999", "-1e999999"])
def test_fit_csv_time_not_finite(tmp_path, time):
    from ddlsim.plan.cost import fit_tables

    path = tmp_path / "times.csv"
    path.write_text(f"size,time_us\n4,1.5\n8,{time}\n16,3.0\n")
    with pytest.raises(PlanError, match=r"times.csv:3: time .* is out of range"):
        fit_tables([path], workers=[4])


def test_fit_csv_worker_count_of_40_digits(tmp_path):
    """Once a numpy casting error in the joint fit over several worker counts."""
    from ddlsim.plan.cost import fit_tables

    path = tmp_path / "times.csv"
    huge = "9" * 40
    path.write_text(f"size,time_us,workers\n1024,90,2\n4096,93,2\n1024,270,{huge}\n4096,278,{huge}\n")
    with pytest.raises(PlanError, match=r"times.csv:4: workers must be a whole number from 1 to 1000000"):
        fit_tables([path])


def test_scenario_profile_name_too_long(tmp_path):
    """Path.is_file() raises ENAMETOOLONG (an OSError) for a name over the file system's limit."""
    from ddlsim.errors import ModelError
    from ddlsim.simulation.model_build import build_model

    (tmp_path / "s.toml").write_text('[model]\nname = "lenet5"\nprofile = "' + "p" * 5000 + '.csv"\n')
    scenario = load_scenario(tmp_path / "s.toml")
    with pytest.raises(ModelError, match="cannot read the profile file .*too long"):
        build_model(scenario.model, scenario.base_dir)


# ------------------------------------------------------------------ regular expressions that backtracked quadratically


def test_osu_row_with_a_long_digit_run_is_refused_quickly(tmp_path):
    """'512  777...7'7 634.82' (200,000 digits): the number pattern \\d+\\.?\\d* backtracked for minutes."""
    from ddlsim.plan.cost import read_table

    path = tmp_path / "osu.txt"
    path.write_text("# OSU MPI Allreduce Latency Test v7.1\n# Size       Avg Latency(us)\n4 1.5\n"
                    f"512  {'7' * 100_000}'{'7' * 100_000}   634.82\n")
    with pytest.raises(PlanError, match=r"osu.txt:4: cannot read '512  7+' as an osu_allreduce row") as caught:
        read_table(path, workers=4)
    assert len(str(caught.value)) < 400  # the line is cut in the message

