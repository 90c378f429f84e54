"""The SketchDLC paper's Fig. 8 (worker 0's trace of LeNet-5, 2 workers, 1 server), read as it stands.

tests/data/sketchdlc_fig8_worker0.txt is the figure's text: the header block
(split into its five "==" lines), the column line and records 0..67 exactly
as printed, the duplicated ids 16 and 24 and the out-of-time-order records
included. The expectations below come from the paper's prose (section 5.2),
not from the file.
"""

from pathlib import Path

import pytest

from ddlsim.errors import TraceError
from ddlsim.trace import read_sketchdlc, read_sketchdlc_records

FIG8 = Path(__file__).parent / "data" / "sketchdlc_fig8_worker0.txt"
EPOCH_S = 1516622729


@pytest.fixture(scope="module")
def records():
    return read_sketchdlc_records(FIG8)


def by_id(records, record_id):
    rows = records[records["id"] == record_id]
    assert len(rows) == 1, record_id
    return rows.iloc[0]


def test_fig8_has_32_initialization_and_32_training_records(records):
    # 68 printed records minus the 4 SendCom_To_Servers connection-setup records (ids 0, 1, 34, 35)
    assert len(records) == 64
    assert set(range(68)) - set(records["id"]) == {0, 1, 34, 35, 17, 25}  # 16 and 24 are printed twice
    training = records[records["id"] >= 36]
    assert len(training) == 32  # "every iteration contain 32 communication records"
    assert (training.groupby("key").size() == 4).all() and sorted(training["key"].unique()) == list(range(8))
    assert (records[records["id"] < 36]["num_pp"].isin([-15]) == records[records["id"] < 36]["operation"].str.startswith("Push")).all()


def test_fig8_training_pushes_in_dispatch_order(records):
    pushes = records[(records["id"] >= 36) & (records["operation"] == "Push_Send_Worker")]
    assert pushes["num_pp"].tolist() == [21, 23, 19, 15, 13, 17, 9, 11]
    assert (pushes["dep_type"] == 4).all() and (pushes["id_dep"] == "(3-s0.)").all()
    assert (pushes["dep_line"] == -1).all()  # one-to-many: on all Pull_Recv_Worker of the last iteration


def test_fig8_key_6_chain(records):
    chain = [by_id(records, i) for i in (36, 42, 43, 54)]
    assert [r["op_id"] for r in chain] == ["6-4-s0", "6-5-s0", "6-6-s0", "6-7-s0"]
    assert [r["operation"] for r in chain] == ["Push_Send_Worker", "Push_Recv_Worker", "Pull_Send_Worker", "Pull_Recv_Worker"]
    assert [r["num_pp"] for r in chain] == [21, 21, 22, 22]
    assert [r["dep_line"] for r in chain[1:]] == [r["line"] for r in chain[:-1]]
    assert [r["length"] for r in chain] == [20033, 19, 28, 20036]


def test_fig8_every_one_to_one_dependency(records):
    """Each record waits for the previous operation of its key (operation_num - 1) in this file,
    with the dep_type of section 3.2.3 and d_time the difference of the two times in microseconds."""
    dep_type = {"Push_Recv_Worker": 1, "Pull_Send_Worker": 2, "Pull_Recv_Worker": 3}
    one_to_one = records[records["dep_line"] >= 0]
    assert len(one_to_one) == 48  # 3 of the 4 records of each key in each of the 2 phases
    for _, record in one_to_one.iterrows():
        dep = records[records["line"] == record["dep_line"]].iloc[0]
        assert (dep["key"], dep["operation_num"]) == (record["key"], record["operation_num"] - 1)
        assert record["dep_type"] == dep_type[record["operation"]]
        assert record["d_time"] * 1000 == record["time_ns"] - dep["time_ns"], record["id"]
    assert (records[records["operation"] == "Push_Send_Worker"]["dep_line"] == -1).all()
    assert (records[(records["id"] < 36) & (records["operation"] == "Push_Send_Worker")]["dep_type"] == 0).all()


def test_fig8_wait_overhead_example(records):
    # "the Pull operations for keys 6, 7, 3 and 5 have finished (id_54..57) before the start of Pull
    # operations for 4, 0 and 1 (id_59, id_61 and id_63)"
    finished = [by_id(records, i) for i in (54, 55, 56, 57)]
    started = [by_id(records, i) for i in (59, 61, 63)]
    assert {r["key"] for r in finished} == {6, 7, 3, 5} and [r["key"] for r in started] == [4, 0, 1]
    assert max(r["time_ns"] for r in finished) < min(r["time_ns"] for r in started)


def test_fig8_one_to_many_d_time_counts_from_the_keys_previous_pull_request(records):
    """Not in the prose: the d_time of a training push is the time since the same key's Pull_Send_Worker
    of the initialization phase for keys 0, 1, 3, 5, 7; for keys 2, 4, 6 it is the time since the record
    printed right after that Pull_Send_Worker (161-254 us later)."""
    pushes = records[(records["id"] >= 36) & (records["operation"] == "Push_Send_Worker")]
    matches = {}
    for _, push in pushes.iterrows():
        origin = push["time_ns"] - push["d_time"] * 1000
        pull = records[(records["key"] == push["key"]) & (records["operation_num"] == 2)].iloc[0]
        following = records[records["line"] == pull["line"] + 1].iloc[0]
        matches[push["key"]] = "pull" if origin == pull["time_ns"] else "next" if origin == following["time_ns"] else None
    assert matches == {0: "pull", 1: "pull", 3: "pull", 5: "pull", 7: "pull", 2: "next", 4: "next", 6: "next"}


def test_fig8_alone_converts_with_the_servers_sends_inferred():
    """One node's file (the paper prints worker 0's only): each record is a row on worker 0; each receive from
    the server gets the server's send inferred at the receive's time; the pushes and pull requests have no receive."""
    log = read_sketchdlc([FIG8])
    df = log.to_pandas(["id", "iteration", "rank", "role", "kind", "op", "tensor", "peer", "message", "bytes", "start_ns", "end_ns"])
    records = read_sketchdlc_records(FIG8)
    worker = df[df["rank"] == 0]
    assert len(worker) == 64 == len(records)
    assert sorted(worker["bytes"]) == sorted(records["length"])
    assert sorted(worker["start_ns"]) == sorted(records["time_ns"])
    server = df[df["rank"] == 2]
    assert (server["kind"] == "send").all() and set(server["role"]) == {"server"}
    recvs = worker[worker["kind"] == "recv"].set_index("message")
    assert len(server) == len(recvs) == 32  # Push_Recv_Worker and Pull_Recv_Worker: 8 keys x 2 x 2 iterations
    for s in server.itertuples():
        assert (s.start_ns, s.end_ns, s.bytes, s.tensor) == (recvs.loc[s.message, "start_ns"], recvs.loc[s.message, "start_ns"],
                                                            recvs.loc[s.message, "bytes"], recvs.loc[s.message, "tensor"])
    assert sorted(set(df["iteration"])) == [0, 1]
    assert "single_node" in log.metadata


def test_fig8_alone_converts_and_analyses_on_the_cli(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    import ddlsim

    (tmp_path / "fig8").mkdir()
    shutil.copy(FIG8, tmp_path / "fig8" / "w0.txt")
    env = {**os.environ, "PYTHONPATH": str(Path(ddlsim.__file__).resolve().parents[1])}

    def cli(*args):
        return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "ddlsim", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True)

    convert = cli("convert", "fig8", "fig8.parquet")
    assert convert.returncode == 0, convert.stderr
    analyze = cli("analyze", "fig8.parquet", "--json")
    assert analyze.returncode == 0, analyze.stderr
    import json

    headline = json.loads(analyze.stdout)["headline"]
    assert (headline["workers"], headline["servers"], headline["iterations"]) == (1, 1, 2)
    assert 0 < headline["sketchdlc_overlap_ratio"] < 1  # SketchDLC's own phase analysis of the sample



def test_fig8_times_are_the_printed_seconds_and_microseconds(records):
    first = by_id(records, 2)
    assert first["time_ns"] == (EPOCH_S * 1_000_000 + 481409) * 1000
