"""Tests of the trace layer: event-log schema v2, Parquet (v2 and v1 files),
Chrome and SketchDLC."""

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
from trace_logs import BASE_US, US, ps_iteration_log, ps_iteration_rows, random_log, small_log, small_rows

from ddlsim.errors import DdlsimError, TraceError
from ddlsim.trace import (
    COLUMN_NAMES,
    EVENT_LOG_SCHEMA,
    KINDS,
    SCHEMA_VERSION,
    SKETCHDLC_COLUMNS,
    EventLog,
    empty_event_log,
    event_log_from_arrays,
    event_log_from_rows,
    read_event_log,
    read_sketchdlc,
    side_table_paths,
    to_chrome_trace,
    to_sketchdlc,
    validate_event_log,
    write_chrome_trace,
    write_event_log,
    write_sketchdlc,
)


def decoded(log: EventLog) -> dict[str, list]:
    """Every column as plain Python values (dictionary encodings compared by value)."""
    return {name: log.table.column(name).cast(pa.string()).to_pylist()
            if pa.types.is_dictionary(log.table.schema.field(name).type) else log.table.column(name).to_pylist()
            for name in log.table.column_names}


def assert_same_log(a: EventLog, b: EventLog) -> None:
    assert a.table.column_names == b.table.column_names
    assert a.table.schema.remove_metadata() == b.table.schema.remove_metadata()
    assert decoded(a) == decoded(b)
    assert a.metadata == b.metadata
    for name in ("groups", "flows", "queues"):
        left, right = getattr(a, name), getattr(b, name)
        assert (left is None) == (right is None), name
        if left is not None:
            assert left.to_pylist() == right.to_pylist(), name


# --------------------------------------------------------------------------
# schema and building


def test_errors_share_a_user_facing_base():
    assert issubclass(TraceError, DdlsimError)


def test_schema_version_and_column_order():
    assert SCHEMA_VERSION == 3
    assert COLUMN_NAMES == (
        "id", "iteration", "rank", "role", "host", "device", "stream", "kind", "op", "name", "layer", "tensor",
        "group", "slice", "peer", "message", "bytes", "priority", "tenant", "job", "collective", "coll_type", "algorithm",
        "step", "rpc", "ready_ns", "start_ns", "end_ns", "deps", "class_size",
    )  # fmt: skip
    assert KINDS == ("compute", "send", "recv", "collective", "barrier", "marker")
    assert pa.types.is_dictionary(EVENT_LOG_SCHEMA.field("op").type)
    assert EVENT_LOG_SCHEMA.field("deps").type == pa.list_(pa.int64())
    assert EVENT_LOG_SCHEMA.field("ready_ns").nullable and EVENT_LOG_SCHEMA.field("deps").nullable
    assert not EVENT_LOG_SCHEMA.field("start_ns").nullable


def test_empty_event_log_has_the_schema():
    log = empty_event_log({"source": "test"})
    assert len(log) == 0 and log.table.schema == EVENT_LOG_SCHEMA
    assert log.metadata == {"source": "test", "schema_version": 3}


def test_from_arrays_fills_defaults_and_encodes_strings():
    log = event_log_from_arrays(
        {"id": [0, 1], "rank": [3, 4], "role": np.array(["worker", "worker"], dtype=object),
         "kind": np.array(["compute", "compute"], dtype=object), "op": np.array(["forward", "backward"], dtype=object),
         "start_ns": [0, 5], "end_ns": [5, 9]}
    )
    assert log.table.schema == EVENT_LOG_SCHEMA
    assert log.column("host").tolist() == [3, 4]  # host defaults to the rank
    assert log.column("iteration").tolist() == [-1, -1] and log.column("bytes").tolist() == [0, 0]
    assert log.column("device").tolist() == ["", ""] and log.column("coll_type").tolist() == ["", ""]
    assert log.table.column("ready_ns").null_count == 2 and log.table.column("deps").null_count == 2
    assert log.column("op").dtype == object and log.column("op").tolist() == ["forward", "backward"]
    assert log.column("id").dtype == np.int64 and log.column("rank").dtype == np.int32
    assert log.is_validated


def test_string_columns_accept_codes_dictionary_arrays_and_categoricals():
    base = {"id": np.arange(3), "rank": np.array([0, 1, 0]), "start_ns": np.zeros(3, np.int64),
            "end_ns": np.ones(3, np.int64), "role": "worker"}
    kinds = ["compute", "marker", "compute"]
    forms = [
        np.array(kinds, dtype=object),
        (np.array([0, 1, 0], dtype=np.int8), ["compute", "marker"]),
        (np.array([2, 0, 2]), pa.array(["marker", "unused", "compute"])),
        pa.array(kinds).dictionary_encode(),
        pa.chunked_array([pa.array(kinds[:1]), pa.array(kinds[1:])]),
        pd.Series(kinds, dtype="category"),
        pd.Series(kinds, dtype="str"),
        kinds,
    ]
    for form in forms:
        log = event_log_from_arrays({**base, "kind": form, "op": form})
        assert log.column("kind").tolist() == kinds, form
        assert log.table.schema.field("kind").type == pa.dictionary(pa.int32(), pa.string())


def test_deps_as_csr_lists_or_unknown():
    base = {"id": [0, 1, 2], "rank": 0, "role": "worker", "kind": "compute", "op": "forward",
            "start_ns": [0, 10, 20], "end_ns": [10, 20, 30]}
    csr = event_log_from_arrays(base, deps_offsets=np.array([0, 0, 1, 3]), deps_values=np.array([0, 0, 1]))
    assert csr.column("deps").tolist() == [[], [0], [0, 1]]
    lists = event_log_from_arrays({**base, "deps": [[], [0], [0, 1]]})
    assert decoded(lists) == decoded(csr)
    unknown = event_log_from_arrays({**base, "deps": [None, [0], None]})
    assert unknown.column("deps").tolist() == [None, [0], None]
    assert event_log_from_arrays({**base, "deps": None}).table.column("deps").null_count == 3


def test_column_helpers_and_filter():
    log = ps_iteration_log()
    ready = log.column("ready_ns")
    assert isinstance(ready, np.ma.MaskedArray) and ready.mask.any()
    codes, dictionary = log.codes("kind")
    assert dictionary[codes].tolist() == log.column("kind").tolist()
    sends = log.filter(log.column("kind") == "send")
    assert set(sends.column("kind")) == {"send"} and len(sends) == 18
    assert sends.metadata == log.metadata and not sends.is_validated
    frame = log.to_pandas()
    assert frame["op"].dtype == "str" and str(frame["ready_ns"].dtype) == "Int64"
    assert frame["deps"].iloc[2] == [0]
    assert str(log.to_pandas(categories=True)["op"].dtype) == "category"


def test_validate_accepts_table_dataframe_and_eventlog_alike():
    log = ps_iteration_log(metadata={"source": "test"})
    assert_same_log(validate_event_log(log), log)
    assert decoded(validate_event_log(log.table)) == decoded(log)
    assert decoded(validate_event_log(log.to_pandas())) == decoded(log)
    assert decoded(validate_event_log(log.to_pandas(categories=True))) == decoded(log)
    plain = log.table.cast(pa.schema([pa.field(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                                      for f in log.table.schema]))
    assert decoded(validate_event_log(plain)) == decoded(log)


def test_multicast_and_aggregation_share_a_message_id():
    rows = [
        dict(id=0, rank=0, role="worker", kind="send", op="broadcast_chunk", peer=9, message=1, start_ns=0, end_ns=10),
        *[dict(id=i, rank=i, role="worker", kind="recv", op="broadcast_chunk", peer=0, message=1, start_ns=10,
               end_ns=20 + i) for i in (1, 2, 3)],
        *[dict(id=10 + i, rank=i, role="worker", kind="send", op="aggregate", peer=9, message=2, start_ns=30 + i,
               end_ns=40) for i in (1, 2, 3)],
        dict(id=20, rank=9, role="switch", kind="recv", op="aggregate", peer=1, message=2, start_ns=40, end_ns=45),
    ]
    log = event_log_from_rows(rows)
    assert len(log) == 8
    rows[-1]["end_ns"] = 32  # before the last contribution was sent
    rows[-1]["start_ns"] = 32
    with pytest.raises(TraceError, match=r"row 7 \(id=20\): recv of message 2 ends at 32, before its send starts at 33"):
        event_log_from_rows(rows)


def _rows_with(**change):
    rows = small_rows()
    position = change.pop("row", 1)
    rows[position].update(change)
    return rows


@pytest.mark.parametrize(
    "change, expected",
    [
        (dict(kind="transfer"), "column 'kind', row 1 (id=1): unknown kind 'transfer'; kind is one of ['compute', 'send'"),
        (dict(role="gpu"), "column 'role', row 1 (id=1): unknown role 'gpu'; role is one of ['worker', 'server', 'switch', 'host']"),
        (dict(op=""), "column 'op', row 1 (id=1): empty op ''; op names the operation"),
        (dict(coll_type="allgather"), "column 'coll_type', row 1 (id=1): unknown coll_type 'allgather'"),
        (dict(id=0), "column 'id', row 1 (id=0): id 0 appears more than once; ids must be unique"),
        (dict(id=-4), "column 'id', row 1: value -4 is out of range; id must be >= 0"),
        (dict(end_ns=1400), "column 'end_ns', row 1 (id=1): end_ns=1400 is before start_ns=1500; end_ns must be >= start_ns"),
        (dict(ready_ns=1600), "column 'start_ns', row 1 (id=1): start_ns=1500 is before ready_ns=1600; nothing starts before it is ready"),
        (dict(peer=-1), "column 'peer', row 1 (id=1): send on rank 0 has peer -1; a send's peer is its receiver rank"),
        (dict(peer=1, row=2), "column 'peer', row 2 (id=2): recv on rank 1 has peer 1; a recv's peer is its sender rank"),
        (dict(peer=1, row=0), "column 'peer', row 0 (id=0): peer 1 on a compute row; peer is -1 except on send and recv rows"),
        (dict(message=-1), "column 'message', row 1 (id=1): send row has message -1; send and recv rows carry a message id"),
        (dict(message=8, row=2), "column 'message', row 2 (id=2): recv of message 8 has no send row with that message"),
        (dict(start_ns=900, ready_ns=900, end_ns=1000, row=2),
         "column 'end_ns', row 2 (id=2): recv of message 7 ends at 1000, before its send starts at 1500"),
        (dict(deps=[42]), "column 'deps', row 1 (id=1): depends on id 42, which is not in the log; deps list ids of rows"),
        (dict(deps=[1]), "column 'deps', row 1 (id=1): depends on itself"),
        (dict(start_ns=1400, ready_ns=1400), "column 'start_ns', row 1 (id=1): start_ns=1400 but it depends on id 0, which ends at 1500"),
        (dict(role="server"), "column 'role', row 1 (id=1): rank 0 appears with roles ['server', 'worker']; each rank has exactly one role"),
        (dict(layer=2**31), "column 'layer', row 1 (id=1): value 2147483648 is out of range; layer is int32"),
        (dict(tensor=-2), "column 'tensor', row 1 (id=1): value -2 is out of range; tensor must be >= -1 (-1 means none)"),
        (dict(bytes=-1), "column 'bytes', row 1 (id=1): value -1 is out of range; bytes must be >= 0"),
        (dict(bytes="4k"), "column 'bytes', row 1 (id=1): has '4k' (str); bytes holds integers"),
        (dict(op=3), "column 'op', row 1 (id=1): has 3 (int); op holds text"),
        (dict(start_ns=1.5e3), "column 'start_ns', row 1 (id=1): has 1500.0 (float); start_ns holds integers nanoseconds"),
        (dict(deps=["a"]), "column 'deps', row 1 (id=1): has ['a']; deps holds a list of row ids per row"),
        (dict(group=5), None),  # fine without a groups table
    ],
)
def test_validation_names_column_row_and_fix(change, expected):
    rows = _rows_with(**change)
    if expected is None:
        event_log_from_rows(rows)
        return
    with pytest.raises(TraceError) as caught:
        event_log_from_rows(rows, source="my log")
    assert str(caught.value).startswith("my log: ")
    assert expected in str(caught.value)


@pytest.mark.parametrize("message", [5, 5_000_000])
def test_a_recv_in_a_log_without_any_send_gets_the_one_line_error(message):
    """A log with recv rows and no send row at all: a large message id took the sorted lookup, which indexed an empty
    array (IndexError traceback) instead of naming the recv."""
    rows = [dict(id=0, rank=2, role="server", kind="recv", op="x", peer=0, message=message, start_ns=0, end_ns=0),
            dict(id=1, rank=0, role="worker", kind="compute", op="y", start_ns=0, end_ns=1)]
    with pytest.raises(TraceError) as caught:
        event_log_from_rows(rows, source="my log")
    assert f"column 'message', row 0 (id=0): recv of message {message} has no send row with that message" in str(caught.value)


def test_validation_of_whole_columns():
    log = small_log()
    table = log.table
    with pytest.raises(TraceError, match=r"missing column\(s\) \['op'\]; an event log needs"):
        validate_event_log(table.drop(["op"]))
    with pytest.raises(TraceError, match=r"unknown column\(s\) \['score'\]; extra columns must be named 'x_<name>'"):
        validate_event_log(table.append_column("score", pa.array([1.0] * 6)))
    with pytest.raises(TraceError, match="column 'start_ns': has type double; start_ns holds integers nanoseconds; convert with"):
        validate_event_log(table.set_column(26, "start_ns", table.column("start_ns").cast(pa.float64())))
    with pytest.raises(TraceError, match="column 'layer': has boolean values"):
        validate_event_log(table.set_column(10, "layer", pa.array([True] * 6)))
    with pytest.raises(TraceError, match=r"column 'iteration', row 2 \(id=2\): is null; iteration holds integers and may not be null"):
        validate_event_log(table.set_column(1, "iteration", pa.array([0, 0, None, 0, 0, 0], pa.int32())))
    with pytest.raises(TraceError, match=r"duplicated column\(s\) \['op'\]"):
        validate_event_log(pd.concat([log.to_pandas(), log.to_pandas()[["op"]]], axis=1))
    with pytest.raises(TraceError, match="expected an EventLog, a pyarrow Table or a pandas DataFrame, got list"):
        validate_event_log([1, 2])
    columns = {name: log.column(name) for name in ("id", "rank", "role", "kind", "start_ns", "end_ns")}
    with pytest.raises(TraceError, match=r"column 'op', row 1 \(id=1\): code 5 is outside the dictionary of 2 values"):
        event_log_from_arrays({**columns, "op": (np.array([0, 5, 0, 0, 1, 1]), ["a", "b"])})
    with pytest.raises(TraceError, match="column 'deps': deps_offsets has 3 entries for 6 rows; CSR offsets have n \\+ 1"):
        event_log_from_arrays({**columns, "op": "x"}, deps_offsets=[0, 0, 0], deps_values=[])
    with pytest.raises(TraceError, match="column 'rank': has 2 rows, but 'id' has 6"):
        event_log_from_arrays({**columns, "op": "x", "rank": [0, 1]})
    with pytest.raises(TraceError, match=r"missing column\(s\) \['op'\]; an event log needs \['id', 'rank', 'role', 'kind', 'op', 'start_ns', 'end_ns'\]"):
        event_log_from_arrays(columns)


def test_causality_can_be_skipped_but_not_the_rest():
    rows = _rows_with(start_ns=1400, ready_ns=1600)
    log = event_log_from_rows(rows, check_causality=False)
    assert len(log) == 6 and not log.is_validated  # writers check it again
    with pytest.raises(TraceError, match="depends on id 42"):
        event_log_from_rows(_rows_with(deps=[42]), check_causality=False)


def test_unknown_deps_and_ready_skip_their_checks():
    log = event_log_from_rows(_rows_with(deps=None, ready_ns=None, start_ns=1000))  # would be acausal with deps [0]
    assert log.column("deps")[1] is None


def test_extension_columns_are_kept_and_ignored():
    rows = small_rows()
    for index, row in enumerate(rows):
        row["x_kernel"] = f"k{index}"
    rows[0]["x_flops"] = 123
    log = event_log_from_rows(rows)
    assert log.table.column_names[-2:] == ["x_kernel", "x_flops"]
    assert log.extension_columns == ["x_kernel", "x_flops"]
    assert log.column("x_flops").tolist()[:2] == [123, None]  # a masked array: null where not given
    assert log.table.column("x_flops").null_count == 5
    assert list(log.to_pandas().columns[-2:]) == ["x_kernel", "x_flops"]


def test_groups_side_table_and_its_checks():
    groups = {"group": [0, 0, 1], "tensor": [0, 1, 2], "kind": np.array(["bucket"] * 3, dtype=object),
              "bytes": [10, 20, 30]}
    log = event_log_from_rows(_rows_with(group=1), groups=groups)
    assert log.groups.column_names == ["group", "tensor", "kind", "offset", "bytes", "job"]
    assert log.groups.column("offset").to_pylist() == [0, 0, 0]
    with pytest.raises(TraceError, match=r"column 'group', row 1 \(id=1\): group 4 is not in the groups table"):
        event_log_from_rows(_rows_with(group=4), groups=groups)
    with pytest.raises(TraceError, match=r"groups table: missing column\(s\) \['tensor'\]"):
        event_log_from_rows(small_rows(), groups={"group": [0]})
    with pytest.raises(TraceError, match=r"flows table: unknown column\(s\) \['fct'\]"):
        event_log_from_rows(small_rows(), flows={"flow": [0], "src": [0], "dst": [1], "start_ns": [0], "end_ns": [1],
                                                 "fct": [1]})
    with pytest.raises(TraceError, match=r"flows table: column 'end_ns', row 0: end_ns=0 is before start_ns=5"):
        event_log_from_rows(small_rows(), flows={"flow": [0], "src": [0], "dst": [1], "start_ns": [5], "end_ns": [0]})


def test_clock_offsets_apply_to_cross_host_checks():
    rows = small_rows()
    rows[2].update(host=5, start_ns=1000, ready_ns=1000, end_ns=1200, deps=[])  # recv on another clock
    rows[3]["deps"] = []
    with pytest.raises(TraceError, match="before its send starts at 1500"):
        event_log_from_rows(rows)
    clocks = {"5": {"offset_ns": 2000, "domain": "server-tsc"}}
    log = event_log_from_rows(rows, metadata={"clocks": clocks})
    assert log.metadata["clocks"] == clocks
    with pytest.raises(TraceError, match=r"clock offsets applied\); a message is received after it is sent"):
        event_log_from_rows(rows, metadata={"clocks": {"5": {"offset_ns": 100, "domain": "x"}}})
    with pytest.raises(TraceError, match="metadata 'clocks' entry for host '5' is"):
        event_log_from_rows(rows, metadata={"clocks": {"5": {"offset_ns": 1.5}}})
    with pytest.raises(TraceError, match="metadata 'clocks' has host 'a'"):
        event_log_from_rows(rows, metadata={"clocks": {"a": {"offset_ns": 1}}})


# --------------------------------------------------------------------------
# Parquet


def test_parquet_round_trip_is_exact_including_metadata_and_side_tables(tmp_path):
    log = event_log_from_rows(
        [dict(row, x_tag=f"r{row['id']}") for row in ps_iteration_rows()],
        metadata={"source": "capture", "scenario": {"workers": 2}, "clocks": {"2": {"offset_ns": 0, "domain": "s"}}},
        groups={"group": [0, 0], "tensor": [0, 1]},
        flows={"flow": [0, 1], "message": [2, 4], "src": [0, 0], "dst": [2, 2], "bytes": [4001, 4000],
               "band": [0, 1], "start_ns": [10, 20], "end_ns": [30, 40], "x_path": ["a", "b"]},
        queues={"time_ns": [0, 5], "node": [2, 2], "bytes": [0, 1500]},
    )
    path = write_event_log(log, tmp_path / "events.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet", "flows.parquet", "groups.parquet",
                                                           "queues.parquet"]
    back = read_event_log(path)
    assert_same_log(back, log)
    assert back.metadata["clocks"] == {"2": {"offset_ns": 0, "domain": "s"}}
    assert back.is_validated
    raw = pq.read_schema(path).metadata
    assert raw[b"ddlsim.schema_version"] == b"3"
    assert json.loads(raw[b"ddlsim.side_tables"]) == {"flows": "flows.parquet", "groups": "groups.parquet",
                                                      "queues": "queues.parquet"}


@pytest.mark.parametrize("seed", range(6))
def test_random_logs_round_trip(tmp_path, seed):
    log = random_log(seed, rows=50 + 40 * seed, offsets={0: 1000 * seed, 1: -37} if seed % 2 else None,
                     extension=seed % 3 == 0)
    back = read_event_log(write_event_log(log, tmp_path / f"run{seed}.parquet"))
    assert_same_log(back, log)
    # and through pandas
    assert decoded(validate_event_log(back.to_pandas(), metadata=back.metadata)) == decoded(log)


def test_side_table_names():
    assert side_table_paths("/r/events.parquet")["flows"] == Path("/r/flows.parquet")
    assert side_table_paths("/r/ring-events.parquet")["queues"] == Path("/r/ring-queues.parquet")
    assert side_table_paths("/r/run.parquet")["groups"] == Path("/r/run.groups.parquet")


def test_only_the_side_tables_an_events_file_names_are_read(tmp_path):
    with_flows = event_log_from_rows(small_rows(), flows={"flow": [0], "src": [0], "dst": [1], "start_ns": [0],
                                                          "end_ns": [5]})
    write_event_log(with_flows, tmp_path / "events.parquet")
    write_event_log(small_log(), tmp_path / "events.parquet")  # rewrite without: flows.parquet is stale
    assert (tmp_path / "flows.parquet").exists()
    assert read_event_log(tmp_path / "events.parquet").flows is None
    write_event_log(with_flows, tmp_path / "events.parquet")
    (tmp_path / "flows.parquet").unlink()
    with pytest.raises(TraceError, match="names its flows table flows.parquet, but .* does not exist"):
        read_event_log(tmp_path / "events.parquet")


def test_write_validates_what_is_not_known_valid(tmp_path):
    bad = small_log().table.set_column(26, "start_ns", pa.array([0, 1500, 3000, 4000, 6000, 7000]))
    with pytest.raises(TraceError, match=r"event log for .*bad.parquet: column 'end_ns', row 5"):
        write_event_log(bad, tmp_path / "bad.parquet")
    assert list(tmp_path.iterdir()) == []
    write_event_log(small_log().to_pandas(), tmp_path / "ok.parquet", {"source": "pandas"})
    assert read_event_log(tmp_path / "ok.parquet").metadata == {"source": "pandas", "schema_version": 3}
    acausal = event_log_from_rows(_rows_with(start_ns=1400, ready_ns=1400), check_causality=False)
    with pytest.raises(TraceError, match="depends on id 0"):
        write_event_log(acausal, tmp_path / "acausal.parquet")


def test_failed_overwrite_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "events.parquet"
    write_event_log(small_log(), path)
    before = path.read_bytes()

    def broken_write(table, where, **kwargs):
        Path(where).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken_write)
    with pytest.raises(TraceError, match="No space left on device"):
        write_event_log(ps_iteration_log(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet"]


def test_write_rejects_metadata_that_is_not_json_and_missing_directories(tmp_path):
    with pytest.raises(TraceError, match="not JSON-serialisable"):
        write_event_log(small_log(), tmp_path / "x.parquet", {"when": object()})
    with pytest.raises(TraceError, match="directory .*nope does not exist"):
        write_event_log(small_log(), tmp_path / "nope" / "x.parquet")


def test_read_errors_name_the_file(tmp_path):
    with pytest.raises(TraceError, match="no such event log file"):
        read_event_log(tmp_path / "missing.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(TraceError, match="junk.parquet: not a readable Parquet file"):
        read_event_log(tmp_path / "junk.parquet")
    table = small_log().table
    pq.write_table(table.drop(["kind"]), tmp_path / "nokind.parquet")
    with pytest.raises(TraceError, match=r"nokind.parquet: missing column\(s\) \['kind'\]"):
        read_event_log(tmp_path / "nokind.parquet")
    pq.write_table(table.set_column(8, "op", pa.array([1] * 6)), tmp_path / "intop.parquet")
    with pytest.raises(TraceError, match="intop.parquet: column 'op': has type int64; op holds text"):
        read_event_log(tmp_path / "intop.parquet")
    pq.write_table(table.replace_schema_metadata({"ddlsim.schema_version": "4"}), tmp_path / "new.parquet")
    with pytest.raises(TraceError, match="schema version 4, but this ddlsim reads versions up to 3; upgrade"):
        read_event_log(tmp_path / "new.parquet")


def test_read_accepts_plain_pandas_parquet(tmp_path):
    log = ps_iteration_log()
    log.to_pandas().to_parquet(tmp_path / "plain.parquet")
    back = read_event_log(tmp_path / "plain.parquet")
    assert decoded(back) == decoded(log) and back.metadata == {"schema_version": 3}


# --------------------------------------------------------------------------
# schema v1 files

V1_SCHEMA = pa.schema([
    ("id", pa.int64()), ("iteration", pa.int32()), ("rank", pa.int32()), ("role", pa.string()),
    ("kind", pa.string()), ("op", pa.string()), ("name", pa.string()), ("layer", pa.int32()),
    ("tensor", pa.int32()), ("peer", pa.int32()), ("bytes", pa.int64()), ("priority", pa.int32()),
    ("collective", pa.int64()), ("step", pa.int32()), ("rpc", pa.int64()), ("ready_ns", pa.int64()),
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("deps", pa.list_(pa.int64())),
    ("w_proc_ns", pa.int64()), ("w_queue_ns", pa.int64()), ("ps_proc_ns", pa.int64()),
    ("ps_queue_ns", pa.int64()), ("n_tx_ns", pa.int64()),
])  # fmt: skip


def write_v1(path: Path, rows: list[dict], metadata: dict | None = None) -> None:
    defaults = dict(iteration=0, name="", layer=-1, tensor=-1, peer=-1, bytes=0, priority=0, collective=-1,
                    step=-1, rpc=-1, deps=[], w_proc_ns=None, w_queue_ns=None, ps_proc_ns=None, ps_queue_ns=None,
                    n_tx_ns=None)
    full = [{**defaults, **row} for row in rows]
    table = pa.Table.from_pylist(full, schema=V1_SCHEMA)
    kv = {"ddlsim.schema_version": "1", "ddlsim.metadata": json.dumps(metadata or {})}
    pq.write_table(table.replace_schema_metadata(kv), path)


def test_v1_files_are_converted_to_send_and_recv_rows(tmp_path):
    write_v1(tmp_path / "v1.parquet", [
        dict(id=0, rank=0, role="worker", kind="compute", op="backward", ready_ns=0, start_ns=0, end_ns=100),
        dict(id=1, rank=0, role="worker", kind="transfer", op="push_request", tensor=3, peer=2, bytes=400, rpc=0,
             ready_ns=100, start_ns=100, end_ns=150, deps=[0]),
        dict(id=2, rank=2, role="server", kind="compute", op="update", tensor=3, ready_ns=150, start_ns=150,
             end_ns=160, deps=[1]),
        dict(id=3, rank=2, role="server", kind="transfer", op="push_response", tensor=3, peer=0, bytes=8, rpc=0,
             ready_ns=160, start_ns=160, end_ns=170, deps=[2], w_proc_ns=0, w_queue_ns=0, ps_proc_ns=10,
             ps_queue_ns=0, n_tx_ns=60),
        dict(id=4, rank=0, role="worker", kind="transfer", op="ring_step", peer=1, bytes=8, collective=5, step=0,
             ready_ns=170, start_ns=170, end_ns=190, deps=[3]),
        dict(id=5, rank=0, role="worker", kind="collective", op="allreduce", collective=5, ready_ns=170,
             start_ns=170, end_ns=200, deps=[3]),
        dict(id=6, rank=0, role="worker", kind="barrier", op="barrier", ready_ns=200, start_ns=200, end_ns=200,
             deps=[5, 4]),
    ], metadata={"source": "simulate", "seed": 7})
    log = read_event_log(tmp_path / "v1.parquet")
    assert log.metadata == {"source": "simulate", "seed": 7, "schema_version": 3, "converted_from_schema_version": 1}
    assert not any(name.endswith("_ns") and name.startswith(("w_", "ps_", "n_")) for name in log.table.column_names)
    rows = {row["id"]: row for row in log.to_pandas().to_dict("records")}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    # each v1 transfer row: a send row (its own id) and a recv row (a new id), one message
    assert [(rows[i]["kind"], rows[i]["rank"], rows[i]["peer"], rows[i]["message"]) for i in (1, 7)] == [
        ("send", 0, 2, 1), ("recv", 2, 0, 1)]
    assert (rows[7]["role"], rows[7]["op"], rows[7]["tensor"], rows[7]["bytes"], rows[7]["rpc"]) == (
        "server", "push_request", 3, 400, 0)
    assert (rows[7]["start_ns"], rows[7]["end_ns"]) == (100, 150) and pd.isna(rows[7]["ready_ns"])
    assert rows[7]["deps"] is None
    assert (rows[8]["kind"], rows[8]["rank"], rows[8]["message"]) == ("recv", 0, 3)
    assert (rows[9]["rank"], rows[9]["role"], rows[9]["coll_type"], rows[9]["algorithm"]) == (1, "worker", "allreduce", "ring")
    # deps on a transfer (delivered) now point at its recv row
    assert rows[2]["deps"] == [7] and rows[4]["deps"] == [8] and rows[6]["deps"] == [5, 9]
    assert (rows[5]["coll_type"], rows[5]["algorithm"]) == ("allreduce", "")
    assert set(log.column("host").tolist()) == {0, 1, 2}


def test_v1_file_errors_name_the_file(tmp_path):
    write_v1(tmp_path / "v1.parquet", [dict(id=0, rank=0, role="worker", kind="send", op="x", ready_ns=0,
                                            start_ns=0, end_ns=1)])
    with pytest.raises(TraceError, match=r"v1.parquet \(schema v1\): column 'kind', row 0: unknown v1 kind 'send'"):
        read_event_log(tmp_path / "v1.parquet")
    pq.write_table(pq.read_table(tmp_path / "v1.parquet").drop(["deps"]), tmp_path / "nodeps.parquet")
    with pytest.raises(TraceError, match=r"missing column\(s\) \['deps'\]; a schema v1 event log has"):
        read_event_log(tmp_path / "nodeps.parquet")


# --------------------------------------------------------------------------
# Chrome / Perfetto


def _events(trace, ph, name=None):
    return [e for e in trace["traceEvents"] if e["ph"] == ph and (name is None or e.get("name") == name)]


def test_chrome_trace_structure():
    trace = to_chrome_trace(small_log())
    assert trace["displayTimeUnit"] == "ns" and trace["otherData"]["schema_version"] == 3
    names = {e["pid"]: e["args"]["name"] for e in _events(trace, "M", "process_name")}
    assert names == {1: "worker 0", 2: "server 0"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(trace, "M", "thread_name")}
    assert threads == {(1, 1): "compute", (1, 2): "comm", (1, 3): "network", (1, 4): "sync", (2, 3): "network",
                       (2, 4): "sync"}
    slices = {e["args"]["id"]: e for e in _events(trace, "X")}
    assert len(slices) == 6
    send, recv = slices[1], slices[2]
    assert (send["pid"], send["tid"], send["ts"], send["dur"]) == (1, 3, 1.5, 1.5)
    assert (recv["pid"], recv["tid"], recv["ts"], recv["dur"], recv["cat"]) == (2, 3, 3.0, 1.0, "recv")
    assert send["args"]["deps"] == [0] and send["args"]["queue_ns"] == 0 and send["args"]["rpc"] == 7
    assert slices[0]["args"]["device"] == "cuda:0" and slices[0]["name"] == "forward fc1"
    assert slices[3]["args"]["coll_type"] == "allreduce" and slices[3]["args"]["algorithm"] == "ring"
    assert "queue_ns" not in slices[4]["args"] and slices[4]["args"]["ready_ns"] is None
    (start,), (finish,) = _events(trace, "s"), _events(trace, "f")
    assert (start["pid"], start["tid"], start["ts"]) == (1, 3, 1.5)
    assert (finish["pid"], finish["tid"], finish["ts"], finish["bp"]) == (2, 3, 3.0, "e")
    assert start["id"] == finish["id"]
    json.dumps(trace, allow_nan=False)


def test_chrome_multicast_gets_one_arrow_per_copy():
    rows = [dict(id=0, rank=0, role="worker", kind="send", op="bcast", peer=1, message=4, start_ns=0, end_ns=5)]
    rows += [dict(id=i, rank=i, role="worker", kind="recv", op="bcast", peer=0, message=4, start_ns=5, end_ns=9)
             for i in (1, 2, 3)]
    trace = to_chrome_trace(event_log_from_rows(rows))
    assert sorted(e["pid"] for e in _events(trace, "f")) == [2, 3, 4]
    assert len({e["id"] for e in _events(trace, "s")}) == 3


def test_chrome_lanes_never_overlap_within_a_thread():
    trace = to_chrome_trace(random_log(3, rows=300))
    by_thread: dict = {}
    for event in _events(trace, "X"):
        start = round(event["ts"] * 1000)
        by_thread.setdefault((event["pid"], event["tid"]), []).append((start, start + round(event["dur"] * 1000)))
    for spans in by_thread.values():
        spans.sort()
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s2 >= e1 or e2 <= e1  # disjoint or nested


def test_write_chrome_trace_plain_and_gzip(tmp_path):
    log = ps_iteration_log()
    plain = write_chrome_trace(log, tmp_path / "trace.json")
    packed = write_chrome_trace(log, tmp_path / "trace.json.gz")
    assert json.loads(plain.read_text()) == json.loads(gzip.decompress(packed.read_bytes()))
    with pytest.raises(TraceError, match=r"missing column\(s\) \['op'\]"):
        write_chrome_trace(log.table.drop(["op"]), tmp_path / "bad.json")
    assert sorted(os.listdir(tmp_path)) == ["trace.json", "trace.json.gz"]


# --------------------------------------------------------------------------
# SketchDLC


def _records(table: pd.DataFrame) -> list[tuple]:
    return list(table[["operation", "op_id", "num_pp", "dep_type", "d_time", "id_dep"]].itertuples(index=False, name=None))


def test_sketchdlc_eight_operations_one_per_row():
    log = ps_iteration_log()
    tables = to_sketchdlc(log)
    records = sum(len(t) for t in tables.values())
    assert records == len(log.filter(np.isin(log.column("kind"), ["send", "recv"])))
    operations = {op for t in tables.values() for op in t["operation"]}
    assert operations == {f"{a}_{b}_{c}" for a in ("Push", "Pull") for b in ("Send", "Recv") for c in ("Worker", "Server")}


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
    assert (w1["op_id"].tolist()[-1], w1["dep_type"].tolist()[-1], w1["id_dep"].tolist()[-1]) == ("1-4-s0", 4, "0-3-s0")


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


def test_sketchdlc_numbers_workers_before_servers_whatever_the_ranks():
    remap = {0: 1, 1: 2, 2: 0}
    rows = ps_iteration_rows()
    for row in rows:
        row["rank"] = remap[row["rank"]]
        row["peer"] = remap.get(row.get("peer", -1), -1)
    tables = to_sketchdlc(event_log_from_rows(rows))
    assert list(tables) == ["w0", "w1", "s0"]
    assert tables["w0"][["src", "dst"]].values.tolist()[0] == [0, 2]
    assert _records(tables["s0"]) == _records(to_sketchdlc(ps_iteration_log())["s0"])


def test_sketchdlc_rejects_logs_without_ps_messages_and_wrong_roles():
    with pytest.raises(TraceError, match="no parameter-server send/recv rows"):
        to_sketchdlc(random_log(1))
    rows = ps_iteration_rows()
    rows[2]["op"] = rows[3]["op"] = "push_response"  # a worker's send
    with pytest.raises(TraceError, match="row id=2: the send of a push_response is on a server, but its rank 0 is a worker"):
        to_sketchdlc(event_log_from_rows(rows))


def _message_tuples(log: EventLog) -> list[tuple]:
    frame = log.to_pandas()
    frame = frame[frame["kind"].isin(["send", "recv"])]
    time = np.where(frame["kind"] == "send", frame["start_ns"], frame["end_ns"]) // US * US
    columns = ["iteration", "rank", "role", "kind", "op", "tensor", "peer", "bytes"]
    return sorted(zip(*(frame[c].tolist() for c in columns), time.tolist()))


def test_sketchdlc_files_round_trip_the_messages(tmp_path):
    log = ps_iteration_log()
    paths = write_sketchdlc(log, tmp_path / "sketch")
    assert [p.name for p in paths] == ["w0.txt", "w1.txt", "s0.txt"]
    lines = paths[0].read_text().splitlines()
    assert lines[0].startswith("# SketchDLC trace of node w0 (worker)")
    assert "2\t2\t0\t19\t1\tPush_Recv_Worker\t1-1-s0\t1\t110\t1516622729\t210\t1-0-s0" in lines

    back = read_sketchdlc(paths)
    assert _message_tuples(back) == _message_tuples(log)
    assert back.table.column("ready_ns").null_count == len(back)
    assert back.metadata["source"] == "sketchdlc"
    assert back.metadata["clocks"] == {"0": {"offset_ns": 0, "domain": "w0:w0.txt"},
                                       "1": {"offset_ns": 0, "domain": "w1:w1.txt"},
                                       "2": {"offset_ns": 0, "domain": "s2:s0.txt"}}
    frame = back.to_pandas()
    # every message: one send row and one recv row sharing a message id, same rpc for request and response
    assert (frame.groupby("message")["kind"].apply(sorted) == pd.Series([["recv", "send"]] * 18)).all()
    assert frame["rpc"].nunique() == 10

    def row(kind, op, rank, tensor, iteration=0):
        match = frame[(frame["kind"] == kind) & (frame["op"] == op) & (frame["rank"] == rank)
                      & (frame["tensor"] == tensor) & (frame["iteration"] == iteration)]
        assert len(match) == 1
        return match.iloc[0]

    # deps from id_dep: the pull request after the push ack arrived; the server's ack after the last gradient
    assert row("send", "pull_request", 0, 1)["deps"] == [row("recv", "push_response", 0, 1)["id"]]
    def only(**where):
        mask = np.ones(len(frame), dtype=bool)
        for key, value in where.items():
            mask &= (frame[key] == value).to_numpy()
        return frame[mask].iloc[0] if mask.sum() == 1 else pytest.fail(f"{where} matches {mask.sum()} rows")

    ack_to_w0 = only(kind="send", op="push_response", peer=0, tensor=1, iteration=0)
    last_gradient = only(kind="recv", op="push_request", peer=1, tensor=1, iteration=0)
    assert ack_to_w0["deps"] == [last_gradient["id"]]
    assert row("send", "push_request", 0, 1, iteration=1)["deps"] == [row("recv", "pull_response", 0, 0)["id"]]
    assert row("send", "push_request", 0, 1)["deps"] == []


def test_read_sketchdlc_accepts_a_directory_and_the_paper_layout(tmp_path):
    log = ps_iteration_log()
    write_sketchdlc(log, tmp_path)
    w0 = tmp_path / "w0.txt"
    lines = w0.read_text().splitlines()
    paper_style = [line for line in lines if not line.startswith("#")][1:]  # no header line
    paper_style = [line.replace("Push_", "OP:= Push_").replace("Pull_", "OP:= Pull_") for line in paper_style]
    paper_style.insert(0, "0\t0\t2\t25\t0\tOP:= SendCom_TO_Servers\t\t\t\t\t\t")
    w0.write_text("\n".join(paper_style) + "\n")
    assert _message_tuples(read_sketchdlc(tmp_path)) == _message_tuples(log)


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
    target = paths[0]
    line_number = _corrupt(target, 1 if column == "src" else 2, column, value)
    with pytest.raises(TraceError) as caught:
        read_sketchdlc(paths)
    assert str(caught.value).startswith(f"{target}:{line_number}: ")
    assert expected in str(caught.value)


def test_read_sketchdlc_needs_every_node_and_matching_records(tmp_path):
    w0, w1, s0 = write_sketchdlc(ps_iteration_log(), tmp_path)
    with pytest.raises(TraceError) as caught:
        read_sketchdlc([w0, w1])
    assert "has no matching Push_Recv_Server record because no file of node 2 (s0) was given" in str(caught.value)
    lines = s0.read_text().splitlines()
    s0.write_text("\n".join(line for line in lines if "\t1-0-w0\t" not in line) + "\n")
    with pytest.raises(TraceError) as caught:
        read_sketchdlc([w0, w1, s0])
    assert f"Push_Send_Worker 1-0-s0 has no matching Push_Recv_Server record in {s0}" in str(caught.value)


def test_read_sketchdlc_of_files_without_records_is_refused(tmp_path):
    path = tmp_path / "w0.txt"
    path.write_text("# nothing yet\n" + "\t".join(SKETCHDLC_COLUMNS) + "\n")
    with pytest.raises(TraceError, match=r"w0\.txt: no SketchDLC push/pull records"):
        read_sketchdlc([path])


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


def test_epoch_times_survive_exactly():
    log = ps_iteration_log()
    assert int(log.column("start_ns").min()) == BASE_US * US


def test_codes_minus_one_mean_empty_string():
    log = event_log_from_arrays({"id": [0, 1, 2], "rank": 0, "role": "worker", "kind": "compute", "op": "x",
                                 "start_ns": 0, "end_ns": 1, "stream": (np.array([-1, 0, 1]), ["compute", "comm"])})
    assert log.column("stream").tolist() == ["", "compute", "comm"]


def test_new_clocks_given_to_write_are_validated(tmp_path):
    rows = small_rows()
    rows[2]["host"] = 5  # the recv of message 7 on another host
    log = event_log_from_rows(rows)
    with pytest.raises(TraceError, match=r"row 2 \(id=2\): start_ns=3000 but it depends on id 1, which ends at 3000 \(before clock offsets\)"):
        write_event_log(log, tmp_path / "e.parquet", {"clocks": {"5": {"offset_ns": -2000, "domain": "b"}}})
    assert not (tmp_path / "e.parquet").exists()
    write_event_log(log, tmp_path / "e.parquet", {"clocks": {"5": {"offset_ns": 0, "domain": "b"}}})
    assert read_event_log(tmp_path / "e.parquet").metadata["clocks"] == {"5": {"offset_ns": 0, "domain": "b"}}


def test_v1_plain_parquet_without_version_key_is_recognised(tmp_path):
    write_v1(tmp_path / "v1.parquet", [
        dict(id=0, rank=0, role="worker", kind="transfer", op="send", peer=1, ready_ns=0, start_ns=0, end_ns=10)])
    table = pq.read_table(tmp_path / "v1.parquet").replace_schema_metadata(None)
    pq.write_table(table, tmp_path / "plain.parquet")
    log = read_event_log(tmp_path / "plain.parquet")
    assert log.column("kind").tolist() == ["send", "recv"] and log.column("id").tolist() == [0, 1]


def test_read_can_skip_causality(tmp_path):
    rows = _rows_with(start_ns=1400, ready_ns=1400)
    table = event_log_from_rows(rows, check_causality=False).table
    pq.write_table(table, tmp_path / "acausal.parquet")
    with pytest.raises(TraceError, match="acausal.parquet: column 'start_ns', row 1"):
        read_event_log(tmp_path / "acausal.parquet")
    assert len(read_event_log(tmp_path / "acausal.parquet", check_causality=False)) == 6


def test_to_pandas_of_some_columns():
    frame = ps_iteration_log().to_pandas(["id", "op", "ready_ns"])
    assert list(frame.columns) == ["id", "op", "ready_ns"] and frame["op"].dtype == "str"
    assert frame["ready_ns"].isna().sum() == 18  # the recv rows


def test_extension_text_column_with_gaps():
    rows = small_rows()
    rows[1]["x_kernel"] = "nccl:send"
    log = event_log_from_rows(rows)
    assert log.column("x_kernel").tolist() == [None, "nccl:send", None, None, None, None]
    assert log.to_pandas()["x_kernel"].tolist()[1] == "nccl:send"
    assert to_chrome_trace(log)  # gaps are left out of args


def test_failed_write_of_a_side_table_changes_nothing(tmp_path, monkeypatch):
    flows = {"flow": [0], "src": [0], "dst": [1], "start_ns": [0], "end_ns": [5]}
    path = write_event_log(event_log_from_rows(small_rows(), flows=flows), tmp_path / "events.parquet")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_write = pq.write_table

    def fail_on_events(table, where, **kwargs):
        if "flow" not in table.column_names:
            raise OSError(5, "Input/output error")
        real_write(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", fail_on_events)
    changed = event_log_from_rows(small_rows(), flows={**flows, "bytes": [99]})
    with pytest.raises(TraceError, match="Input/output error"):
        write_event_log(changed, path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
