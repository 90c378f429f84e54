"""What the per-rank export formats write reads back (found by tools/fuzz_readers.py's ``convert`` target).

SketchDLC export of PS logs whose messages do not pair (found by tools/fuzz_readers.py's ``convert`` target,
which converts a log to every format and reads back what it wrote): before, a log with switch aggregation (two
pushes as one message), a recv moved to another rank, or a send never received was written, and the SketchDLC
reader refused the files ("Push_Send_Worker ... has no matching Push_Recv_Server record"). Now the writer refuses
such a log in one line naming the rows; every log it writes reads back."""

import random

import pytest

import ddlsim
from ddlsim.errors import TraceError
from ddlsim.trace.formats import read_trace, write_trace
from ddlsim.trace.schema import EventLog


def ps_log(**strategy):
    return ddlsim.simulate(model="lenet5", workers=3, iterations=2, strategy={"kind": "ps", "servers": 1, **strategy}).events


def with_column(log: EventLog, name: str, change) -> EventLog:
    import pyarrow as pa

    table = log.table
    values = table.column(name).to_pylist()
    change(values, table)
    index = table.schema.get_field_index(name)
    return EventLog(table.set_column(index, table.schema.field(index), pa.array(values, table.schema.field(index).type)),
                    metadata=log.metadata, groups=log.groups)


@pytest.mark.parametrize("in_network", ["aggregation", "multiagg"])
def test_a_run_with_switch_aggregation_is_refused_naming_the_two_sends(tmp_path, in_network):
    with pytest.raises(TraceError, match=r"message \d+ has two send rows \(the other is id=\d+\) \(switch aggregation: "
                                         r"several workers' pushes arrive as one\); SketchDLC pairs one send"):
        write_trace(ps_log(in_network=in_network), tmp_path / "dlc", "sketchdlc")
    assert not (tmp_path / "dlc").exists() or not any((tmp_path / "dlc").iterdir())  # nothing written


def test_a_recv_on_another_rank_than_its_sends_peer_is_refused(tmp_path):
    log = ps_log()
    kind, op = log.table.column("kind").to_pylist(), log.table.column("op").to_pylist()
    row = next(i for i, (k, o) in enumerate(zip(kind, op)) if k == "recv" and o == "pull_response")

    def move(values, table):  # the recv on the other worker (ranks 0-2 are workers, 3 the server)
        values[row] = (values[row] + 1) % 3

    moved = with_column(log, "rank", move)
    with pytest.raises(TraceError, match=r"the recv of message \d+ \(rank \d, from 3, pull_response, .* does not match "
                                         r"its send id=\d+ \(to \d, from 3, pull_response"):
        write_trace(moved, tmp_path / "dlc", "sketchdlc")


def test_a_message_never_received_is_refused(tmp_path):
    log = ps_log()
    keep = [not (k == "recv" and o == "push_request" and m == 0) for k, o, m in
            zip(log.table.column("kind").to_pylist(), log.table.column("op").to_pylist(),
                log.table.column("message").to_pylist())]
    import pyarrow as pa

    gone = {i for i, k in zip(log.table.column("id").to_pylist(), keep) if not k}
    table = log.table.filter(pa.array(keep))
    index = table.schema.get_field_index("deps")
    deps = [[d for d in row if d not in gone] for row in table.column("deps").to_pylist()]  # and what waited on it
    table = table.set_column(index, table.schema.field(index), pa.array(deps, table.schema.field(index).type))
    lost = EventLog(table, metadata=log.metadata, groups=log.groups)
    with pytest.raises(TraceError, match=r"the push_request message 0 was never received \(no recv row\)"):
        write_trace(lost, tmp_path / "dlc", "sketchdlc")


def test_every_ps_log_written_reads_back_with_its_records(tmp_path):
    rng = random.Random(20261128)
    for case in range(8):
        workers, servers = rng.randint(1, 4), rng.randint(1, 3)
        strategy = {"kind": "ps", "servers": servers, "in_network": rng.choice(["none", "multicast"]) if servers == 1
                    else "none"}
        log = ddlsim.simulate(model="lenet5", workers=workers, iterations=rng.randint(1, 3), seed=case,
                              strategy=strategy).events
        out = tmp_path / f"dlc{case}"
        write_trace(log, out, "sketchdlc")
        back = read_trace(out, "sketchdlc")
        sent = sum(1 for k, o in zip(log.table.column("kind").to_pylist(), log.table.column("op").to_pylist())
                   if k == "send" and o in ("push_request", "push_response", "pull_request", "pull_response"))
        assert sum(1 for k in back.table.column("kind").to_pylist() if k == "send") == sent, case


# ---------------------------------------------------------------- the other per-rank writers (the same target)


def test_an_empty_log_is_refused_by_the_per_rank_formats_not_written_as_no_file(tmp_path):
    """A log of no rows wrote no Chakra or Kineto file and returned [], which the reader then refused ("no Chakra
    files found"): now one line saying so."""
    log = ps_log()
    empty = EventLog(log.table.slice(0, 0), metadata=log.metadata, groups=log.groups)
    for fmt in ("chakra", "kineto"):
        with pytest.raises(TraceError, match=f"the log has no rows: a {fmt.capitalize()} trace is one file per rank"):
            write_trace(empty, tmp_path / fmt / "t", fmt)


@pytest.mark.parametrize("start", [-(2**62), 2**62 - 10**6])
def test_times_beyond_what_kineto_holds_are_refused_where_it_wrote_what_its_reader_refused(tmp_path, start):
    """A row at -2^62 ns was written as ts -4611686018427388.0 us, which the Kineto reader refuses (beyond its
    +-4.6e15 us: ts + dur in ns must fit an int64)."""
    log = ps_log()
    shift = start - min(log.table.column("start_ns").to_pylist())
    for column in ("start_ns", "end_ns", "ready_ns"):
        log = with_column(log, column, lambda values, table: values.__setitem__(
            slice(None), [None if v is None else v + shift for v in values]))
    with pytest.raises(TraceError, match=r"is beyond the \+-4\.6e\+15 us a Kineto trace holds"):
        write_trace(log, tmp_path / "k", "kineto")


def test_a_capture_s_message_ids_export_to_chakra_and_read_back(tmp_path):
    """A capture numbers its messages rank << 32 | n, beyond Chakra's int32 comm_tag: before, every real PS capture
    was refused. The log read back has the ids, and the sends and receives pair as before."""
    log = ps_log()
    ids = log.table.column("message").to_pylist()
    big = with_column(log, "message", lambda values, table: values.__setitem__(
        slice(None), [m if m < 0 else (3 << 32) + m for m in values]))
    (tmp_path / "c").mkdir()
    write_trace(big, tmp_path / "c" / "t", "chakra")
    back = read_trace(tmp_path / "c" / "t", "chakra")
    got = dict(zip(back.table.column("id").to_pylist(), back.table.column("message").to_pylist()))
    assert all(got[i] == ((3 << 32) + m if m >= 0 else m) for i, m in zip(log.table.column("id").to_pylist(), ids)
               if i in got)
