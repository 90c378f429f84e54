"""Per-rank capture files -> event log, without torch: complete and partial
ranks, a torn last line, damaged files named by file and line."""

from __future__ import annotations

import json

import forked_cli
import pytest

from ddlsim.capture import RankRecorder, merge_capture, now_ns
from ddlsim.errors import TraceError


def two_ranks(tmp_path, close_server=True):
    worker, server = RankRecorder(tmp_path, 0, "worker"), RankRecorder(tmp_path, 1, "server")
    t = now_ns()
    m = worker.new_message()
    send = worker.row("send", "push_request", t, t + 10, deps=[], peer=1, message=m, bytes=64, rpc=7, iteration=0, tensor=3)
    recv = server.row("recv", "push_request", t + 5, t + 20, deps=[], peer=0, message=m, bytes=64, rpc=7, iteration=0, tensor=3)
    server.row("compute", "update", t + 20, t + 30, deps=[recv], rpc=7, iteration=0, tensor=3)
    worker.close()
    if close_server:
        server.close()
    else:
        server.flush()
    return send, recv


def test_a_complete_capture_merges_into_a_valid_log_with_global_ids(tmp_path):
    send, recv = two_ranks(tmp_path)
    log = merge_capture(tmp_path)
    df = log.to_pandas()
    assert log.metadata["source"] == "capture" and not log.metadata["partial"] and log.metadata["partial_ranks"] == []
    assert sorted(df.id) == sorted([send, recv, recv + 1]) and (send >> 32, recv >> 32) == (0, 1)
    assert df.set_index("id").loc[recv, "message"] == df.set_index("id").loc[send, "message"]
    assert set(df.role) == {"worker", "server"} and (df.host == 0).all()


def test_a_rank_without_its_end_mark_is_flagged_partial_and_a_torn_last_line_is_dropped(tmp_path):
    two_ranks(tmp_path, close_server=False)
    with open(tmp_path / "1.rank.jsonl", "a", encoding="utf-8") as f:
        f.write('{"id": 99, "kind": "compute", "op": "upd')  # killed while writing
    log = merge_capture(tmp_path)
    assert log.metadata["partial"] and log.metadata["partial_ranks"] == [1] and log.table.num_rows == 3


def test_a_recv_whose_send_was_lost_is_dropped_and_counted(tmp_path):
    w = RankRecorder(tmp_path, 0, "worker")
    s = RankRecorder(tmp_path, 1, "server")
    t = now_ns()
    s.row("recv", "push_request", t, t + 1, deps=[], peer=0, message=12345, bytes=8)
    s.close()
    w.flush()  # the worker died before writing its send
    log = merge_capture(tmp_path)
    assert log.table.num_rows == 0 and log.metadata["dropped"]["recv_without_send"] == 1


def test_damaged_files_name_the_file_and_line(tmp_path):
    two_ranks(tmp_path)
    lines = (tmp_path / "0.rank.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(1, "not json at all")
    (tmp_path / "0.rank.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"0\.rank\.jsonl:2: not a JSON object"):
        merge_capture(tmp_path)
    (tmp_path / "0.rank.jsonl").write_text(json.dumps({"id": 1, "kind": "compute"}) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match="a row before the header line"):
        merge_capture(tmp_path)


def test_merge_cli_errors_name_the_directory(tmp_path):
    missing = tmp_path / "nothing"
    run = forked_cli.run(["capture", "merge", str(missing)])
    assert run.returncode != 0 and "no such capture directory" in run.stderr and "Traceback" not in run.stderr
    run = forked_cli.run(["capture", "merge", str(tmp_path)])
    assert run.returncode != 0 and "no per-rank capture files" in run.stderr


def test_the_merge_cli_writes_the_log(tmp_path):
    two_ranks(tmp_path)
    run = forked_cli.run(["capture", "merge", str(tmp_path)])
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "events.parquet").exists() and "3 rows from 2 ranks" in run.stdout


def test_the_clock_offset_comes_from_the_shortest_round_trip():
    from ddlsim.capture.dist_clock import best_offset

    # this rank's clock runs 100 ns behind rank 0's; the first probe was delayed 100 ns on its way there
    assert best_offset([(0, 200, 210, 130), (0, 110, 111, 21)]) == (100, 20)
    assert best_offset([(0, 200, 210, 130)]) == (140, 120)  # one slow probe: its asymmetry shows up in the offset
