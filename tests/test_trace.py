"""Tests of the trace layer: event-log schema, Parquet, Chrome and SketchDLC."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddlsim.errors import DdlsimError, TraceError
from ddlsim.trace import (
    COLUMN_NAMES,
    SCHEMA_VERSION,
    SKETCHDLC_COLUMNS,
    empty_event_log,
    event_log_from_rows,
    read_event_log,
    read_sketchdlc,
    to_chrome_trace,
    to_sketchdlc,
    validate_event_log,
    write_chrome_trace,
    write_event_log,
    write_sketchdlc,
)

US = 1000  # ns per microsecond
BASE_US = 1_516_622_729_000_000  # a wall-clock epoch, as in the SketchDLC paper's sample


# --------------------------------------------------------------------------
# hand-made logs


def small_log() -> pd.DataFrame:
    """One worker (rank 0), one server (rank 1): compute, two overlapping
    transfers, a collective, a barrier and an RPC breakdown."""
    return event_log_from_rows(
        [
            dict(id=0, iteration=0, rank=0, role="worker", kind="compute", op="forward", name="fc1", layer=0,
                 ready_ns=0, start_ns=0, end_ns=1500),
            dict(id=1, iteration=0, rank=0, role="worker", kind="transfer", op="push_request", name="fc1.weight",
                 tensor=0, peer=1, bytes=4096, rpc=7, ready_ns=1500, start_ns=1500, end_ns=4000, deps=[0]),
            dict(id=2, iteration=0, rank=0, role="worker", kind="transfer", op="send", tensor=1, peer=1,
                 bytes=64, priority=2, ready_ns=1500, start_ns=2000, end_ns=3000, deps=[0]),
            dict(id=3, iteration=0, rank=1, role="server", kind="transfer", op="push_response", tensor=0,
                 peer=0, bytes=16, rpc=7, ready_ns=4000, start_ns=4250, end_ns=5000, deps=[1],
                 w_proc_ns=10, w_queue_ns=20, ps_proc_ns=250, ps_queue_ns=0, n_tx_ns=3250),
            dict(id=4, iteration=0, rank=0, role="worker", kind="collective", op="allreduce", collective=3,
                 bytes=4096, ready_ns=5000, start_ns=5000, end_ns=6000, deps=[3]),
            dict(id=5, iteration=0, rank=0, role="worker", kind="barrier", op="barrier",
                 ready_ns=6000, start_ns=6000, end_ns=6000, deps=[4]),
        ]
    )


def ps_iteration_log() -> pd.DataFrame:
    """2 workers (ranks 0, 1), 1 server (rank 2), 2 tensors: one full PS
    iteration plus the first push of iteration 1 (times in microseconds)."""
    rows = []

    def add(kind, op, rank, start, end, deps=(), role=None, ready=None, **extra):
        role = role or ("server" if rank == 2 else "worker")
        rows.append(dict(id=len(rows), rank=rank, role=role, kind=kind, op=op,
                         ready_ns=(BASE_US + (start if ready is None else ready)) * US,
                         start_ns=(BASE_US + start) * US, end_ns=(BASE_US + end) * US, deps=list(deps), **extra))
        return len(rows) - 1

    def transfer(op, rank, peer, tensor, start, end, deps, rpc, iteration=0, ready=None):
        size = {"push_request": 4000 + tensor, "push_response": 19, "pull_request": 28, "pull_response": 4003 + tensor}
        return add("transfer", op, rank, start, end, deps, ready=ready, peer=peer, tensor=tensor,
                   iteration=iteration, bytes=size[op], rpc=rpc, name=f"t{tensor}")

    bw01 = add("compute", "backward", 0, 0, 100, iteration=0, layer=1, name="l1")  # id 0
    bw00 = add("compute", "backward", 0, 100, 200, [bw01], iteration=0, layer=0, name="l0")  # id 1
    push01 = transfer("push_request", 0, 2, 1, 100, 150, [bw01], rpc=0)  # id 2
    push00 = transfer("push_request", 0, 2, 0, 200, 250, [bw00], rpc=1)  # id 3
    bw11 = add("compute", "backward", 1, 0, 120, iteration=0, layer=1, name="l1")  # id 4
    bw10 = add("compute", "backward", 1, 120, 240, [bw11], iteration=0, layer=0, name="l0")  # id 5
    push11 = transfer("push_request", 1, 2, 1, 120, 170, [bw11], rpc=2)  # id 6
    push10 = transfer("push_request", 1, 2, 0, 240, 290, [bw10], rpc=3)  # id 7
    up1 = add("compute", "update", 2, 170, 180, [push01, push11], iteration=0, tensor=1)  # id 8
    ack01 = transfer("push_response", 2, 0, 1, 180, 210, [up1], rpc=0)  # id 9
    ack11 = transfer("push_response", 2, 1, 1, 181, 215, [up1], rpc=2, ready=180)  # id 10
    up0 = add("compute", "update", 2, 290, 300, [push00, push10], iteration=0, tensor=0)  # id 11
    ack00 = transfer("push_response", 2, 0, 0, 300, 320, [up0], rpc=1)  # id 12
    ack10 = transfer("push_response", 2, 1, 0, 301, 325, [up0], rpc=3, ready=300)  # id 13
    pull01 = transfer("pull_request", 0, 2, 1, 210, 230, [ack01], rpc=4)  # id 14
    pull11 = transfer("pull_request", 1, 2, 1, 215, 235, [ack11], rpc=5)  # id 15
    pull00 = transfer("pull_request", 0, 2, 0, 320, 340, [ack00], rpc=6)  # id 16
    pull10 = transfer("pull_request", 1, 2, 0, 325, 345, [ack10], rpc=7)  # id 17
    param01 = transfer("pull_response", 2, 0, 1, 232, 270, [pull01], rpc=4, ready=230)  # id 18
    param11 = transfer("pull_response", 2, 1, 1, 236, 275, [pull11], rpc=5, ready=235)  # id 19
    param00 = transfer("pull_response", 2, 0, 0, 340, 380, [pull00], rpc=6)  # id 20
    param10 = transfer("pull_response", 2, 1, 0, 345, 390, [pull10], rpc=7)  # id 21
    fw0 = add("compute", "forward", 0, 380, 480, [param01, param00], iteration=1)  # id 22
    fw1 = add("compute", "forward", 1, 390, 500, [param11, param10], iteration=1)  # id 23
    transfer("push_request", 0, 2, 1, 480, 530, [fw0], rpc=8, iteration=1)  # id 24
    transfer("push_request", 1, 2, 1, 500, 560, [fw1], rpc=9, iteration=1)  # id 25
    return event_log_from_rows(rows)


# --------------------------------------------------------------------------
# schema


def test_errors_share_a_user_facing_base():
    assert issubclass(TraceError, DdlsimError)
    from ddlsim.errors import ModelError, ScenarioError

    assert issubclass(ScenarioError, DdlsimError) and issubclass(ModelError, DdlsimError)


def test_empty_event_log_has_every_column_with_its_dtype():
    empty = empty_event_log()
    assert list(empty.columns) == list(COLUMN_NAMES)
    assert len(empty) == 0
    assert empty["iteration"].dtype == np.int32
    assert empty["start_ns"].dtype == np.int64
    assert empty["n_tx_ns"].dtype == pd.Int64Dtype()
    assert validate_event_log(empty).dtypes.equals(empty.dtypes)


def test_validate_normalises_dtypes_and_keeps_values():
    log = small_log()
    widened = log.astype({"iteration": "int64", "rank": "int16", "deps": object})
    widened["deps"] = [np.array(d, dtype=np.int64) for d in log["deps"]]
    widened = widened[list(reversed(COLUMN_NAMES))]
    pd.testing.assert_frame_equal(validate_event_log(widened), log)
    assert log["deps"].tolist() == [[], [0], [0], [1], [3], [4]]
    assert log["rpc"].tolist() == [-1, 7, -1, 7, -1, -1]
    assert log["n_tx_ns"].tolist()[3] == 3250 and pd.isna(log["n_tx_ns"].iloc[0])


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda df: df.drop(columns=["end_ns"]), "missing column(s) ['end_ns']"),
        (lambda df: df.assign(extra=1), "unexpected column(s) ['extra']"),
        (lambda df: df.assign(start_ns=df["start_ns"].astype(float)), "column 'start_ns': has dtype float64"),
        (lambda df: df.assign(kind=df["kind"].replace("barrier", "nap")), "column 'kind', row 5 (id=5): unknown kind 'nap'"),
        (lambda df: df.assign(op=df["op"].replace("forward", "push_request")), "column 'op', row 0 (id=0): op 'push_request' is not a compute op"),
        (lambda df: df.assign(id=[0, 1, 2, 3, 4, 1]), "column 'id', row 5 (id=1): id 1 appears more than once"),
        (lambda df: df.assign(ready_ns=df["ready_ns"].where(df["id"] != 2, 2500)), "column 'start_ns', row 2 (id=2): start_ns=2000 is before ready_ns=2500"),
        (lambda df: df.assign(end_ns=df["end_ns"].where(df["id"] != 1, 1000)), "column 'end_ns', row 1 (id=1): end_ns=1000 is before start_ns=1500"),
        (lambda df: df.assign(peer=df["peer"].where(df["id"] != 1, 0)), "column 'peer', row 1 (id=1): transfer from rank 0 has peer 0"),
        (lambda df: df.assign(peer=df["peer"].where(df["id"] != 0, 1)), "column 'peer', row 0 (id=0): peer 1 on a non-transfer row"),
        (lambda df: df.assign(deps=[[], [0], [0], [9], [3], [4]]), "column 'deps', row 3 (id=3): depends on id 9, which is not in the log"),
        (lambda df: df.assign(deps=[[], [0], [0], [1], [4], [4]]), "column 'deps', row 4 (id=4): depends on itself"),
        (lambda df: df.assign(deps=[[], [0], [0], [1], [3], ["4"]]), "column 'deps', row 5 (id=5): has ['4']"),
        (lambda df: df.assign(deps=[[], [0], [0], [1], [3], [3]], ready_ns=df["ready_ns"].where(df["id"] != 1, 1000), start_ns=df["start_ns"].where(df["id"] != 1, 1000)), "column 'start_ns', row 1 (id=1): start_ns=1000 but it depends on id 0, which ends at 1500"),
        (lambda df: df.assign(role=df["role"].where(df["id"] != 5, "server")), "column 'role', row 5 (id=5): rank 0 appears with roles ['server', 'worker']"),
        (lambda df: df.assign(name=df["name"].astype(object).where(df["id"] != 2, None)), "column 'name', row 2 (id=2): has None"),
        (lambda df: df.assign(tensor=df["tensor"].where(df["id"] != 2, -5)), "column 'tensor', row 2 (id=2): value -5 is out of range; tensor must be >= -1 (-1 means none)"),
        (lambda df: df.assign(iteration=df["iteration"].astype("int64").where(df["id"] != 0, 2**40)), "column 'iteration', row 0 (id=0): value 1099511627776 is out of range"),
        (lambda df: df.assign(ps_proc_ns=pd.array([None, None, None, -3, None, None], dtype="Int64")), "column 'ps_proc_ns', row 3 (id=3): value -3 is negative"),
    ],
)
def test_validate_names_column_row_and_fix(change, expected):
    with pytest.raises(TraceError) as caught:
        validate_event_log(change(small_log()), source="my.parquet")
    message = str(caught.value)
    assert message.startswith("my.parquet: ")
    assert expected in message


def test_validate_can_skip_causality():
    log = small_log().assign(ready_ns=lambda df: df["ready_ns"].where(df["id"] != 1, 1000))
    log["start_ns"] = log["start_ns"].where(log["id"] != 1, 1000)
    validate_event_log(log, check_causality=False)  # no error
    with pytest.raises(TraceError, match="start_ns=1000 but it depends on id 0"):
        validate_event_log(log)


def test_event_log_from_rows_requires_the_essential_fields():
    with pytest.raises(TraceError, match="row 0 has no 'end_ns'"):
        event_log_from_rows([dict(id=0, rank=0, role="worker", kind="compute", op="forward", ready_ns=0, start_ns=0)])
    with pytest.raises(TraceError, match=r"unknown column\(s\) \['duration'\]"):
        event_log_from_rows([dict(id=0, rank=0, role="worker", kind="compute", op="forward", ready_ns=0,
                                  start_ns=0, end_ns=5, duration=5)])


# --------------------------------------------------------------------------
# Parquet


METADATA = {"source": "simulate", "scenario": {"name": "ps-2w1s", "workers": 2, "seed": 7}, "note": "ünïcode"}


def test_parquet_round_trip_is_exact_including_metadata(tmp_path):
    log = ps_iteration_log()
    path = write_event_log(log, tmp_path / "run.parquet", METADATA)
    assert path == tmp_path / "run.parquet"
    back, metadata = read_event_log(path)
    pd.testing.assert_frame_equal(back, log)
    assert metadata == METADATA
    assert back["deps"].tolist() == log["deps"].tolist()

    raw = pq.read_schema(path).metadata
    assert raw[b"ddlsim.schema_version"] == str(SCHEMA_VERSION).encode()
    assert json.loads(raw[b"ddlsim.metadata"]) == METADATA
    assert b"pandas" not in raw
    assert pq.read_schema(path).field("iteration").type == pa.int32()
    assert pq.read_schema(path).field("deps").type == pa.list_(pa.int64())


def test_parquet_round_trip_keeps_nulls_and_breakdown(tmp_path):
    log = small_log()
    back, metadata = read_event_log(write_event_log(log, tmp_path / "small.parquet", {}))
    pd.testing.assert_frame_equal(back, log)
    assert metadata == {}
    assert back.loc[3, ["w_proc_ns", "w_queue_ns", "ps_proc_ns", "ps_queue_ns", "n_tx_ns"]].tolist() == [10, 20, 250, 0, 3250]
    assert back["w_proc_ns"].isna().sum() == 5


def test_parquet_round_trip_of_empty_log(tmp_path):
    back, metadata = read_event_log(write_event_log(empty_event_log(), tmp_path / "empty.parquet", {"a": 1}))
    pd.testing.assert_frame_equal(back, empty_event_log())
    assert metadata == {"a": 1}


def _directory_listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_write_leaves_no_file_when_validation_fails(tmp_path):
    bad = small_log().drop(columns=["deps"])
    with pytest.raises(TraceError, match="missing column"):
        write_event_log(bad, tmp_path / "bad.parquet", {})
    assert _directory_listing(tmp_path) == []


def test_failed_overwrite_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "run.parquet"
    write_event_log(small_log(), path, {"version": "old"})
    before = path.read_bytes()

    bad = small_log().assign(kind="nap")
    with pytest.raises(TraceError, match="unknown kind 'nap'"):
        write_event_log(bad, path, {"version": "new"})

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    with pytest.raises(TraceError, match=f"cannot write {path}: No space left on device"):
        write_event_log(small_log(), path, {"version": "new"})

    assert path.read_bytes() == before
    assert _directory_listing(tmp_path) == ["run.parquet"]


def test_write_rejects_metadata_that_is_not_json(tmp_path):
    with pytest.raises(TraceError, match="metadata is not JSON-serialisable"):
        write_event_log(small_log(), tmp_path / "run.parquet", {"when": object()})
    assert _directory_listing(tmp_path) == []


def test_write_into_a_missing_directory_says_so(tmp_path):
    with pytest.raises(TraceError, match="directory .*nowhere does not exist"):
        write_event_log(small_log(), tmp_path / "nowhere" / "run.parquet", {})


def test_read_missing_file_names_it(tmp_path):
    path = tmp_path / "absent.parquet"
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    assert str(caught.value) == f"{path}: no such event log file"


def test_read_non_parquet_names_the_file(tmp_path):
    path = tmp_path / "notes.parquet"
    path.write_text("this is not parquet\n")
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    assert str(caught.value).startswith(f"{path}: not a readable Parquet file")


def test_read_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "foreign.parquet"
    small_log().drop(columns=["end_ns", "rpc"]).to_parquet(path)
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: missing column(s) ['rpc', 'end_ns']")


def test_read_wrong_column_type_names_file_and_column(tmp_path):
    path = tmp_path / "floaty.parquet"
    small_log().assign(start_ns=lambda df: df["start_ns"] / 1.0).to_parquet(path)
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    assert str(caught.value).startswith(f"{path}: column 'start_ns': has dtype float64")


def test_read_null_in_required_column_names_the_row(tmp_path):
    path = tmp_path / "nulls.parquet"
    table = pa.Table.from_pandas(small_log(), preserve_index=False)
    bytes_column = pa.array([0, 4096, None, 16, 4096, 0], type=pa.int64())
    table = table.set_column(table.column_names.index("bytes"), "bytes", bytes_column)
    pq.write_table(table, path)
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    assert str(caught.value).startswith(f"{path}: column 'bytes', row 2 (id=2): is null")


def test_read_newer_schema_version_is_refused(tmp_path):
    path = write_event_log(small_log(), tmp_path / "future.parquet", {})
    table = pq.read_table(path)
    table = table.replace_schema_metadata({"ddlsim.schema_version": str(SCHEMA_VERSION + 1), "ddlsim.metadata": "{}"})
    pq.write_table(table, path)
    with pytest.raises(TraceError) as caught:
        read_event_log(path)
    assert str(caught.value) == (
        f"{path}: written with event-log schema version {SCHEMA_VERSION + 1}, but this ddlsim "
        f"reads versions up to {SCHEMA_VERSION}; upgrade ddlsim to read it"
    )


def test_read_accepts_plain_pandas_parquet(tmp_path):
    path = tmp_path / "plain.parquet"
    small_log().to_parquet(path)
    back, metadata = read_event_log(path)
    pd.testing.assert_frame_equal(back, small_log())
    assert metadata == {}


# --------------------------------------------------------------------------
# Chrome / Perfetto


def _events(trace, ph, name=None):
    return [e for e in trace["traceEvents"] if e["ph"] == ph and (name is None or e["name"] == name)]


def test_chrome_trace_structure():
    trace = to_chrome_trace(small_log())
    assert trace["displayTimeUnit"] == "ns"
    json.dumps(trace, allow_nan=False)  # valid JSON

    # pid = rank + 1 and tids from 1: Perfetto reserves pid 0 and treats tid 0 as unset
    processes = {e["pid"]: e["args"]["name"] for e in _events(trace, "M", "process_name")}
    assert processes == {1: "worker 0", 2: "server 0"}
    sort_index = {e["pid"]: e["args"]["sort_index"] for e in _events(trace, "M", "process_sort_index")}
    assert sort_index == {1: 0, 2: 1}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(trace, "M", "thread_name")}
    assert threads == {
        (1, 1): "compute",
        (1, 2): "comm",
        (1, 3): "network",
        (1, 7): "network (2)",  # the overlapping second transfer gets a second lane
        (1, 4): "sync",
        (2, 3): "network",
    }

    slices = {e["args"]["id"]: e for e in _events(trace, "X") if e["cat"] != "transfer_recv"}
    assert sorted(slices) == [0, 1, 2, 3, 4, 5]
    forward = slices[0]
    assert forward == {
        "ph": "X", "name": "forward fc1", "cat": "compute", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.5,
        "args": {"id": 0, "op": "forward", "iteration": 0, "bytes": 0, "peer": -1, "tensor": -1, "deps": [],
                 "ready_ns": 0, "queue_ns": 0, "name": "fc1", "layer": 0},
    }  # fmt: skip
    push = slices[1]
    assert (push["name"], push["cat"], push["pid"], push["tid"], push["ts"], push["dur"]) == (
        "push_request fc1.weight", "transfer", 1, 3, 1.5, 2.5
    )
    assert push["args"]["bytes"] == 4096 and push["args"]["peer"] == 1 and push["args"]["deps"] == [0]
    assert push["args"]["rpc"] == 7 and push["args"]["tensor"] == 0
    assert (slices[2]["tid"], slices[2]["args"]["priority"], slices[2]["ts"], slices[2]["dur"]) == (7, 2, 2.0, 1.0)
    response = slices[3]
    assert (response["pid"], response["tid"], response["args"]["queue_ns"]) == (2, 3, 250)
    assert response["args"]["ps_proc_ns"] == 250 and response["args"]["n_tx_ns"] == 3250
    assert (slices[4]["tid"], slices[4]["cat"], slices[4]["args"]["collective"]) == (2, "collective", 3)
    assert (slices[5]["tid"], slices[5]["dur"]) == (4, 0.0)

    receives = {e["args"]["id"]: e for e in _events(trace, "X") if e["cat"] == "transfer_recv"}
    assert {i: (e["pid"], e["tid"], e["ts"], e["dur"]) for i, e in receives.items()} == {
        1: (2, 3, 4.0, 0.0),
        2: (2, 3, 3.0, 0.0),
        3: (1, 3, 5.0, 0.0),
    }

    starts = {e["id"]: (e["pid"], e["tid"], e["ts"]) for e in _events(trace, "s")}
    finishes = {e["id"]: (e["pid"], e["tid"], e["ts"], e["bp"]) for e in _events(trace, "f")}
    assert starts == {1: (1, 3, 1.5), 2: (1, 7, 2.0), 3: (2, 3, 4.25)}
    assert finishes == {1: (2, 3, 4.0, "e"), 2: (2, 3, 3.0, "e"), 3: (1, 3, 5.0, "e")}

    # slices come in time order, flows after the slices they bind to
    timed = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    kinds = [e["ph"] for e in trace["traceEvents"]]
    assert kinds.index("s") > max(i for i, ph in enumerate(kinds) if ph == "X")


def test_chrome_lanes_never_overlap_within_a_thread():
    trace = to_chrome_trace(ps_iteration_log())
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for event in _events(trace, "X"):
        by_thread.setdefault((event["pid"], event["tid"]), []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in by_thread.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end
    assert {e["args"]["name"] for e in _events(trace, "M", "process_name")} == {"worker 0", "worker 1", "server 0"}


def test_write_chrome_trace_plain_and_gzip(tmp_path):
    plain = write_chrome_trace(small_log(), tmp_path / "trace.json")
    assert json.loads(plain.read_text()) == to_chrome_trace(small_log())
    packed = write_chrome_trace(small_log(), tmp_path / "trace.json.gz")
    with gzip.open(packed, "rt") as stream:
        assert json.load(stream) == to_chrome_trace(small_log())
    with pytest.raises(TraceError, match="missing column"):
        write_chrome_trace(small_log().drop(columns=["op"]), tmp_path / "bad.json")
    assert _directory_listing(tmp_path) == ["trace.json", "trace.json.gz"]


# --------------------------------------------------------------------------
# SketchDLC


def _records(table: pd.DataFrame) -> list[tuple]:
    return list(table[["operation", "op_id", "num_pp", "dep_type", "d_time", "id_dep"]].itertuples(index=False, name=None))


def test_sketchdlc_export_worker_records():
    tables = to_sketchdlc(ps_iteration_log())
    assert list(tables) == ["w0", "w1", "s0"]
    w0 = tables["w0"]
    assert list(w0.columns) == list(SKETCHDLC_COLUMNS)
    assert w0["id"].tolist() == list(range(9))
    assert _records(w0) == [
        ("Push_Send_Worker", "1-0-s0", 1, 0, 0, "-1"),
        ("Push_Send_Worker", "0-0-s0", 2, 0, 0, "-1"),
        ("Push_Recv_Worker", "1-1-s0", 1, 1, 110, "1-0-s0"),
        ("Pull_Send_Worker", "1-2-s0", 3, 2, 0, "1-1-s0"),
        ("Pull_Recv_Worker", "1-3-s0", 3, 3, 60, "1-2-s0"),
        ("Push_Recv_Worker", "0-1-s0", 2, 1, 120, "0-0-s0"),
        ("Pull_Send_Worker", "0-2-s0", 4, 2, 0, "0-1-s0"),
        ("Pull_Recv_Worker", "0-3-s0", 4, 3, 60, "0-2-s0"),
        ("Push_Send_Worker", "1-4-s0", 5, 4, 100, "0-3-s0"),
    ]
    assert w0[["src", "dst"]].values.tolist() == [[0, 2], [0, 2], [2, 0], [0, 2], [2, 0], [2, 0], [0, 2], [2, 0], [0, 2]]
    assert w0["length"].tolist() == [4001, 4000, 19, 28, 4004, 19, 28, 4003, 4001]
    assert w0["time_sec"].unique().tolist() == [1516622729]
    assert w0["time_usec"].tolist() == [100, 200, 210, 210, 270, 320, 320, 380, 480]
    # string columns: "str" with pandas 3, object (of str) with pandas 2
    assert w0["id"].dtype == np.int64 and pd.api.types.is_string_dtype(w0["op_id"])

    w1 = tables["w1"]
    assert w1["num_pp"].tolist() == [1, 1, 2, 3, 2, 3, 4, 4, 5]
    assert w1["operation"].tolist()[-1] == "Push_Send_Worker"
    assert (w1["op_id"].tolist()[-1], w1["dep_type"].tolist()[-1], w1["id_dep"].tolist()[-1]) == ("1-4-s0", 4, "0-3-s0")
    assert w1[["src", "dst"]].values.tolist()[0] == [1, 2]


def test_sketchdlc_export_server_records():
    s0 = to_sketchdlc(ps_iteration_log())["s0"]
    assert _records(s0) == [
        ("Push_Recv_Server", "1-0-w0", 1, 0, 0, "-1"),
        ("Push_Recv_Server", "1-0-w1", 1, 0, 0, "-1"),
        ("Push_Send_Server", "1-1-w0", 1, 1, 10, "1-0-w1"),  # waits for the last worker's gradient
        ("Push_Send_Server", "1-1-w1", 1, 1, 11, "1-0-w1"),
        ("Pull_Recv_Server", "1-2-w0", 3, 2, 50, "1-1-w0"),
        ("Pull_Send_Server", "1-3-w0", 3, 3, 2, "1-2-w0"),
        ("Pull_Recv_Server", "1-2-w1", 2, 2, 54, "1-1-w1"),
        ("Pull_Send_Server", "1-3-w1", 2, 3, 1, "1-2-w1"),
        ("Push_Recv_Server", "0-0-w0", 2, 0, 0, "-1"),
        ("Push_Recv_Server", "0-0-w1", 3, 0, 0, "-1"),
        ("Push_Send_Server", "0-1-w0", 2, 1, 10, "0-0-w1"),
        ("Push_Send_Server", "0-1-w1", 3, 1, 11, "0-0-w1"),
        ("Pull_Recv_Server", "0-2-w0", 4, 2, 40, "0-1-w0"),
        ("Pull_Send_Server", "0-3-w0", 4, 3, 0, "0-2-w0"),
        ("Pull_Recv_Server", "0-2-w1", 4, 2, 44, "0-1-w1"),
        ("Pull_Send_Server", "0-3-w1", 4, 3, 0, "0-2-w1"),
        ("Push_Recv_Server", "1-4-w0", 5, 4, 190, "0-3-w0"),
        ("Push_Recv_Server", "1-4-w1", 5, 4, 215, "0-3-w1"),
    ]
    assert s0[["src", "dst"]].values.tolist()[:3] == [[0, 2], [1, 2], [2, 0]]


def test_sketchdlc_numbers_workers_before_servers_whatever_the_ranks():
    # Server at rank 0, workers at ranks 1 and 2: nodes w0=0, w1=1, s0=2 (eqs. 2-3).
    log = ps_iteration_log()
    remap = {0: 1, 1: 2, 2: 0}
    log["rank"] = log["rank"].map(remap).astype("int32")
    log["peer"] = log["peer"].map(lambda p: remap.get(p, -1)).astype("int32")
    tables = to_sketchdlc(log)
    assert list(tables) == ["w0", "w1", "s0"]
    assert tables["w0"][["src", "dst"]].values.tolist()[0] == [0, 2]
    assert _records(tables["s0"]) == _records(to_sketchdlc(ps_iteration_log())["s0"])


def test_sketchdlc_rejects_logs_without_ps_transfers():
    with pytest.raises(TraceError, match="no parameter-server transfers"):
        to_sketchdlc(small_log().iloc[[0, 2, 4, 5]].assign(deps=[[], [], [], []]))


def test_sketchdlc_rejects_a_push_sent_by_a_server():
    log = small_log()
    log.loc[1, "op"] = "push_response"  # rank 0 is a worker
    with pytest.raises(TraceError, match="row id=1: a push_response is sent by a server, but its rank 0 is a worker"):
        to_sketchdlc(log)


def _transfer_tuples(log: pd.DataFrame) -> list[tuple]:
    columns = ["iteration", "rank", "role", "op", "tensor", "peer", "bytes", "start_ns", "end_ns"]
    transfers = log[log["kind"] == "transfer"][columns]
    return sorted(transfers.itertuples(index=False, name=None))


def test_sketchdlc_files_round_trip_the_transfers(tmp_path):
    log = ps_iteration_log()
    paths = write_sketchdlc(log, tmp_path / "sketch")
    assert [p.name for p in paths] == ["w0.txt", "w1.txt", "s0.txt"]
    lines = paths[0].read_text().splitlines()
    assert lines[0].startswith("# SketchDLC trace of node w0 (worker)")
    header = next(line for line in lines if not line.startswith("#"))
    assert header.split("\t") == list(SKETCHDLC_COLUMNS)
    assert "2\t2\t0\t19\t1\tPush_Recv_Worker\t1-1-s0\t1\t110\t1516622729\t210\t1-0-s0" in lines

    back = read_sketchdlc(paths)
    assert list(back.columns) == list(COLUMN_NAMES)
    assert _transfer_tuples(back) == _transfer_tuples(log)
    assert (back["ready_ns"] == back["start_ns"]).all()
    assert back["id"].tolist() == list(range(18))

    def row(op, rank, tensor, iteration=0):
        match = back[(back["op"] == op) & (back["rank"] == rank) & (back["tensor"] == tensor) & (back["iteration"] == iteration)]
        assert len(match) == 1
        return match.iloc[0]

    # request and response of one push / pull share an rpc id
    assert row("push_request", 0, 1)["rpc"] == back[(back["op"] == "push_response") & (back["peer"] == 0) & (back["tensor"] == 1)]["rpc"].item()
    assert back["rpc"].nunique() == 10
    # deps come back from id_dep: pull request after the push ack, server ack after the last gradient
    ack_to_w0 = back[(back["op"] == "push_response") & (back["peer"] == 0) & (back["tensor"] == 1)].iloc[0]
    assert row("pull_request", 0, 1)["deps"] == [ack_to_w0["id"]]
    assert ack_to_w0["deps"] == [row("push_request", 1, 1)["id"]]
    param_t0_to_w0 = back[(back["op"] == "pull_response") & (back["peer"] == 0) & (back["tensor"] == 0)].iloc[0]
    assert row("push_request", 0, 1, iteration=1)["deps"] == [param_t0_to_w0["id"]]
    assert row("push_request", 0, 1)["deps"] == []


def test_read_sketchdlc_accepts_a_directory_and_the_paper_layout(tmp_path):
    log = ps_iteration_log()
    write_sketchdlc(log, tmp_path)
    w0 = tmp_path / "w0.txt"
    lines = w0.read_text().splitlines()
    paper_style = [line for line in lines if not line.startswith("#")][1:]  # no header line
    paper_style = [line.replace("Push_", "OP:= Push_").replace("Pull_", "OP:= Pull_") for line in paper_style]
    paper_style.insert(0, "0\t0\t2\t25\t0\tOP:= SendCom_TO_Servers\t\t\t\t\t\t")
    w0.write_text("\n".join(paper_style) + "\n")
    assert _transfer_tuples(read_sketchdlc(tmp_path)) == _transfer_tuples(log)


def _corrupt(path: Path, record_index: int, column: str, value: str) -> int:
    """Set one field of the record_index-th record; return its line number."""
    lines = path.read_text().splitlines()
    data_lines = [n for n, line in enumerate(lines) if line and not line.startswith("#")][1:]
    line_index = data_lines[record_index]
    fields = lines[line_index].split("\t")
    fields[SKETCHDLC_COLUMNS.index(column)] = value
    lines[line_index] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return line_index + 1


@pytest.mark.parametrize(
    "column, value, expected",
    [
        ("length", "12x", "field 'length' is '12x', expected an integer"),
        ("operation", "Push_Jump_Worker", "unknown operation 'Push_Jump_Worker'"),
        ("op_id", "1-s0", "op_id '1-s0' is not key-operation_num-node"),
        ("op_id", "1-2-s0", "operation_num 2 of a Push_Recv_Worker should be 4*iteration + 1"),
        ("op_id", "1-1-w0", "op_id names node w..., but the peer of a Push_Recv_Worker is a server"),
        ("time_usec", "1000000", "time_usec 1000000 is not in [0, 999999]"),
        ("dep_type", "7", "dep_type 7 is not 0..4"),
        ("src", "1", "record of worker node 1, but the file's earlier records are of worker node 0"),
    ],
)
def test_read_sketchdlc_malformed_record_names_file_and_line(tmp_path, column, value, expected):
    paths = write_sketchdlc(ps_iteration_log(), tmp_path)
    # record 2 of w0 is the Push_Recv_Worker 1-1-s0 (src 2, dst 0)
    target = paths[0]
    if column == "src":
        line_number = _corrupt(target, 1, column, value)  # a Push_Send_Worker, whose src is its node
    else:
        line_number = _corrupt(target, 2, column, value)
    with pytest.raises(TraceError) as caught:
        read_sketchdlc(paths)
    assert str(caught.value).startswith(f"{target}:{line_number}: ")
    assert expected in str(caught.value)


def test_read_sketchdlc_wrong_field_count_names_the_line(tmp_path):
    paths = write_sketchdlc(ps_iteration_log(), tmp_path)
    lines = paths[2].read_text().splitlines()
    lines[8] = "\t".join(lines[8].split("\t")[:7])
    paths[2].write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as caught:
        read_sketchdlc(paths)
    assert str(caught.value).startswith(f"{paths[2]}:9: expected 12 tab-separated fields")
    assert str(caught.value).endswith("found 7")


def test_read_sketchdlc_needs_every_node(tmp_path):
    w0, w1, s0 = write_sketchdlc(ps_iteration_log(), tmp_path)
    with pytest.raises(TraceError) as caught:
        read_sketchdlc([w0, w1])
    message = str(caught.value)
    assert message.startswith(f"{w0}:")
    assert "has no matching Push_Recv_Server record because no file of node 2 (s0) was given" in message


def test_read_sketchdlc_unmatched_record_names_the_peer_file(tmp_path):
    w0, w1, s0 = write_sketchdlc(ps_iteration_log(), tmp_path)
    lines = s0.read_text().splitlines()
    s0.write_text("\n".join(line for line in lines if "\t1-0-w0\t" not in line) + "\n")
    with pytest.raises(TraceError) as caught:
        read_sketchdlc([w0, w1, s0])
    assert f"Push_Send_Worker 1-0-s0 has no matching Push_Recv_Server record in {s0}" in str(caught.value)


def test_read_sketchdlc_of_files_without_records_is_an_empty_log(tmp_path):
    path = tmp_path / "w0.txt"
    path.write_text("# nothing yet\n" + "\t".join(SKETCHDLC_COLUMNS) + "\n")
    pd.testing.assert_frame_equal(read_sketchdlc([path]), empty_event_log())


def test_read_sketchdlc_missing_file_and_duplicate_node(tmp_path):
    w0, w1, s0 = write_sketchdlc(ps_iteration_log(), tmp_path)
    with pytest.raises(TraceError, match="no such SketchDLC file"):
        read_sketchdlc([w0, tmp_path / "w9.txt"])
    copy = tmp_path / "copy" / "w0.txt"
    copy.parent.mkdir()
    copy.write_text(w0.read_text())
    with pytest.raises(TraceError, match="holds node 0, like"):
        read_sketchdlc([w0, w1, s0, copy])
    with pytest.raises(TraceError, match="no SketchDLC files given"):
        read_sketchdlc([])
