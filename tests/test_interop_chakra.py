"""Chakra ET export / import: round trips, the wire format read by hand, foreign files, malformed input."""

import struct

import forked_cli
import pytest

import ddlsim
from ddlsim.errors import TraceError
from ddlsim.trace import read_chakra, write_chakra
from trace_logs import small_log

pytest.importorskip("google.protobuf", reason="protobuf is not installed (pip install -e '.[interop]'); Chakra ET needs it")

COMPARED = ["id", "iteration", "rank", "role", "host", "device", "stream", "kind", "op", "name", "layer", "tensor", "group",
            "slice", "peer", "message", "bytes", "priority", "tenant", "collective", "coll_type", "algorithm", "step", "rpc",
            "ready_ns", "start_ns", "end_ns", "deps"]


# ---- an independent protobuf wire reader (only what the tests need) ----

def varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(message):
    """[(field number, wire type, value)]; length-delimited values as bytes."""
    out, pos = [], 0
    while pos < len(message):
        key, pos = varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(message, pos)
        elif wire == 2:
            length, pos = varint(message, pos)
            value, pos = message[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = struct.unpack("<q", message[pos:pos + 8])[0], pos + 8
        elif wire == 5:
            value, pos = struct.unpack("<i", message[pos:pos + 4])[0], pos + 4
        else:
            raise AssertionError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def records(data):
    out, pos = [], 0
    while pos < len(data):
        length, pos = varint(data, pos)
        out.append(data[pos:pos + length])
        pos += length
    return out


def node_summary(payload):
    """id, type, duration_micros, data_deps and {attr name: raw value} of a Node message."""
    summary = {"id": 0, "type": 0, "duration_micros": 0, "deps": [], "attrs": {}}  # proto3 leaves zeros out
    for number, wire, value in fields(payload):
        if number == 1:
            summary["id"] = value
        elif number == 3:
            summary["type"] = value
        elif number == 7:
            summary["duration_micros"] = value
        elif number == 5:  # packed repeated uint64
            pos = 0
            while pos < len(value):
                dep, pos = varint(value, pos)
                summary["deps"].append(dep)
        elif number == 10:
            attr = dict((n, v) for n, _, v in fields(value))
            summary["attrs"][attr[1].decode()] = next((v for n, _, v in fields(value) if n != 1), None)
    return summary


# ---- a hand encoder for foreign files (Chakra's own writers' layout) ----

def enc_varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def enc_field(number, wire, payload):
    key = enc_varint(number << 3 | wire)
    return key + (enc_varint(payload) if wire == 0 else enc_varint(len(payload)) + payload)


def enc_attr(name, number, value):
    return enc_field(10, 2, enc_field(1, 2, name.encode()) + enc_field(number, 0, value))


def enc_node(node_id, name, node_type, start_us, dur_us, deps=(), attrs=()):
    body = enc_field(1, 0, node_id) + enc_field(2, 2, name.encode()) + enc_field(3, 0, node_type)
    if deps:
        body += enc_field(5, 2, b"".join(enc_varint(d) for d in deps))
    body += enc_field(6, 0, start_us) + enc_field(7, 0, dur_us) + b"".join(attrs)
    return body


def delimited(*messages):
    return b"".join(enc_varint(len(m)) + m for m in messages)


METADATA = enc_field(1, 2, b"0.0.4")


# ---- tests ----

def frame(log):
    return log.to_pandas(COMPARED).sort_values("id").reset_index(drop=True)


def test_ps_log_round_trips_row_for_row(tmp_path):
    log = ddlsim.simulate(model="resnet50", workers=2, strategy="ps", servers=1, iterations=2).events
    paths = write_chakra(log, tmp_path / "ps")
    assert [p.name for p in paths] == ["ps.0.et", "ps.1.et", "ps.2.et"]
    back = read_chakra(tmp_path / "ps")
    assert frame(back).equals(frame(log))
    assert back.metadata["source"] == log.metadata["source"]


def test_ring_log_keeps_collectives_and_routes_deps_around_the_steps(tmp_path):
    log = ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=2).events
    write_chakra(log, tmp_path / "ring")
    back = read_chakra(tmp_path / "ring")
    original = frame(log)
    steps = original["kind"].isin(["send", "recv"]) & (original["collective"] >= 0)
    kept = original[~steps].reset_index(drop=True)
    got = frame(back)
    assert got.drop(columns=["deps"]).equals(kept.drop(columns=["deps"]))
    step_ids = set(original.loc[steps, "id"])
    end_of = dict(zip(got["id"], got["end_ns"]))
    for (_, new), (_, old) in zip(got.iterrows(), kept.iterrows()):
        assert not step_ids & set(new["deps"])
        assert {d for d in old["deps"] if d not in step_ids} <= set(new["deps"])
        assert all(end_of[d] <= new["start_ns"] for d in new["deps"])


def test_the_bytes_are_chakras_wire_format(tmp_path):
    write_chakra(small_log(), tmp_path / "t")
    rank0 = records((tmp_path / "t.0.et").read_bytes())
    assert dict((n, v) for n, _, v in fields(rank0[0]))[1] == b"0.0.4"  # GlobalMetadata.version
    nodes = [node_summary(r) for r in rank0[1:]]
    by_id = {n["id"]: n for n in nodes}
    assert [n["id"] for n in nodes] == [0, 1, 3]  # rank 0's rows: compute, send, collective (the barrier is left out)
    compute, send, coll = by_id[0], by_id[1], by_id[3]
    assert (compute["type"], compute["duration_micros"]) == (4, 2)  # COMP_NODE, 0..1500 ns -> 0..2 us (half up)
    assert (send["type"], send["deps"]) == (5, [0])  # COMM_SEND_NODE after the compute node
    assert {k: send["attrs"][k] for k in ("comm_src", "comm_dst", "comm_size", "comm_tag")} == \
        {"comm_src": 0, "comm_dst": 1, "comm_size": 4096, "comm_tag": 7}
    assert (coll["type"], coll["attrs"]["comm_size"], coll["duration_micros"]) == (7, 4096, 2)
    assert "comm_type" not in coll["attrs"] or coll["attrs"]["comm_type"] == 0  # ALL_REDUCE is 0 (proto3 default)
    recv = node_summary(records((tmp_path / "t.1.et").read_bytes())[1])
    assert recv["type"] == 6 and (recv["attrs"]["comm_src"], recv["attrs"]["comm_dst"]) == (0, 1)
    assert recv["deps"] == []  # its dependency (the send) is on rank 0: the send/recv pair says it


def test_a_foreign_file_is_read_from_chakras_fields(tmp_path):
    rank0 = delimited(METADATA,
                      enc_node(10, "fwd", 4, 100, 50),
                      enc_node(11, "send grad", 5, 150, 20, deps=[10],
                               attrs=[enc_attr("comm_src", 7, 0), enc_attr("comm_dst", 7, 1), enc_attr("comm_size", 9, 1 << 20),
                                      enc_attr("comm_tag", 7, 3)]),
                      enc_node(12, "allreduce", 7, 200, 30, deps=[11], attrs=[enc_attr("comm_type", 9, 0), enc_attr("comm_size", 9, 64)]))
    rank1 = delimited(METADATA,
                      enc_node(10, "recv grad", 6, 160, 15,
                               attrs=[enc_attr("comm_src", 7, 0), enc_attr("comm_dst", 7, 1), enc_attr("comm_size", 9, 1 << 20),
                                      enc_attr("comm_tag", 7, 3)]),
                      enc_node(11, "allreduce", 7, 200, 30, deps=[10], attrs=[enc_attr("comm_type", 9, 2)]))
    (tmp_path / "job.0.et").write_bytes(rank0)
    (tmp_path / "job.1.et").write_bytes(rank1)
    got = read_chakra(tmp_path).to_pandas()
    rows = [tuple(r) for r in got[["id", "rank", "kind", "op", "peer", "bytes", "start_ns", "end_ns", "coll_type"]].itertuples(index=False)]
    assert rows == [
        (0, 0, "compute", "fwd", -1, 0, 100_000, 150_000, ""),
        (1, 0, "send", "send grad", 1, 1 << 20, 150_000, 170_000, ""),
        (2, 0, "collective", "allreduce", -1, 64, 200_000, 230_000, "allreduce"),
        (3, 1, "recv", "recv grad", 0, 1 << 20, 160_000, 175_000, ""),
        (4, 1, "collective", "allreduce", -1, 0, 200_000, 230_000, "all_gather"),
    ]
    assert got["deps"].tolist() == [[], [0], [1], [], [3]]
    assert got.loc[1, "message"] == got.loc[3, "message"] >= 0
    assert set(got["role"]) == {"worker"} and got["ready_ns"].isna().all()


@pytest.mark.parametrize("data, expected", [
    (b"", "empty; a Chakra file starts with a GlobalMetadata record"),
    (delimited(METADATA) + b"\x05\x08", "record 1 at byte 8: says 5 bytes but only 1 remain"),
    (delimited(METADATA) + b"\xff\xff", "record 1 at byte 8: the length prefix is cut off"),
    (delimited(METADATA, b"\x0a\x05ab"), "record 1 at byte 8: not a Chakra Node"),
    (delimited(METADATA, enc_node(1, "x", 4, 0, 1, deps=[9])), "record 1 (node 1): depends on node 9, which is not in"),
    (delimited(METADATA, enc_node(1, "x", 42, 0, 1)), "record 1 (node 1): node type 42 is not one ddlsim reads"),
    (delimited(METADATA, enc_node(1, "s", 5, 0, 1)), "record 1 (node 1): a COMM_SEND_NODE needs integer attributes"),
    (delimited(METADATA, enc_node(1, "r", 6, 0, 1, attrs=[enc_attr("comm_src", 7, 1), enc_attr("comm_dst", 7, 0)])),
     "record 1 (node 1): COMM_RECV_NODE from 1 (tag 0) has no matching COMM_SEND_NODE"),
    (delimited(METADATA, enc_node(1, "x", 4, 0, 1), enc_node(1, "y", 4, 0, 1)), "record 2 (node 1): node id 1 appears twice"),
])
def test_malformed_files_name_the_file_and_record(tmp_path, data, expected):
    path = tmp_path / "bad.0.et"
    path.write_bytes(data)
    with pytest.raises(TraceError) as caught:
        read_chakra(path)
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value), str(caught.value)


def test_file_names_must_carry_the_rank(tmp_path):
    (tmp_path / "trace.et").write_bytes(delimited(METADATA))
    with pytest.raises(TraceError, match=r"trace.et: a Chakra file is named <prefix>.<rank>.et"):
        read_chakra([tmp_path / "trace.et"])
    with pytest.raises(TraceError, match="no Chakra files"):
        read_chakra(tmp_path / "nothing")


def test_message_ids_beyond_int32_are_numbered_and_read_back(tmp_path):
    """A capture's message ids (rank << 32 | n) do not fit Chakra's int32 comm_tag: before 2026-11-28 every real PS
    capture was refused ("does not fit Chakra's int32 comm_tag", found converting a capture to every format). The
    tags are then the messages' numbers, the same on a send and its receive; ddlsim_message keeps the id. Oracle:
    the log read back, and the tags pairing what the ids paired."""
    from trace_logs import small_rows
    from ddlsim.trace import event_log_from_rows

    rows = small_rows()
    rows[1]["message"] = rows[2]["message"] = 2**32 + 1  # a send and its recv
    log = event_log_from_rows(rows)
    write_chakra(log, tmp_path / "t")
    back = read_chakra(tmp_path / "t")
    assert frame(back)[["id", "message"]].equals(frame(log)[["id", "message"]])
    tags = {}
    for rank in (0, 1):
        for r in records((tmp_path / f"t.{rank}.et").read_bytes())[1:]:
            n = node_summary(r)
            if n["type"] in (5, 6):  # COMM_SEND_NODE, COMM_RECV_NODE
                tags[n["id"]] = n["attrs"]["comm_tag"]
    assert tags == {rows[1]["id"]: 0, rows[2]["id"]: 0}



def test_compute_durations_add_up_per_rank_without_drift(tmp_path):
    """Back-to-back compute rows with sub-microsecond boundaries: each node's duration is its rounded end
    minus its rounded start, so a rank's durations sum to round(last end) - round(first start) exactly
    (flooring each duration loses up to 1 us per node)."""
    import random
    from decimal import ROUND_HALF_UP, Decimal
    from ddlsim.trace import event_log_from_rows

    def micros(ns):
        return int((Decimal(ns) / 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))

    rng = random.Random(20)
    rows, bounds = [], {}
    for rank in range(3):
        t = rng.randrange(0, 10_000)
        first = t
        for _ in range(40):
            end = t + rng.randrange(1, 5_000)
            rows.append(dict(id=len(rows), iteration=0, rank=rank, role="worker", kind="compute", op="forward",
                             name=f"l{len(rows)}", start_ns=t, end_ns=end, deps=[len(rows) - 1] if t != first else []))
            t = end
        bounds[rank] = (first, t)
    write_chakra(event_log_from_rows(rows), tmp_path / "c")
    for rank, (first, last) in bounds.items():
        nodes = [node_summary(r) for r in records((tmp_path / f"c.{rank}.et").read_bytes())[1:]]
        assert len(nodes) == 40
        assert sum(n["duration_micros"] for n in nodes) == micros(last) - micros(first)


def test_empty_messages_are_written_with_one_byte_and_read_back_exactly(tmp_path):
    """PS push responses / pull requests carry 0 bytes; ASTRA-sim aborts on a chunk size of 0, so comm_size is
    at least 1 while the ddlsim_bytes attribute keeps the true size, which read_chakra restores."""
    log = ddlsim.simulate(model="resnet50", workers=2, strategy="ps", servers=1, iterations=1).events
    frame_in = log.to_pandas(["id", "kind", "bytes"])
    true_bytes = dict(zip(frame_in["id"], frame_in["bytes"]))
    write_chakra(log, tmp_path / "ps")
    empty = 0
    for rank in range(3):
        for payload in records((tmp_path / f"ps.{rank}.et").read_bytes())[1:]:
            node = node_summary(payload)
            if node["type"] in (5, 6):  # COMM_SEND_NODE, COMM_RECV_NODE
                true = true_bytes[node["attrs"]["ddlsim_id"]]
                assert node["attrs"]["ddlsim_bytes"] == true
                assert node["attrs"]["comm_size"] == max(true, 1)
                empty += true == 0
    assert empty > 0  # the log does have empty messages
    back = read_chakra(tmp_path / "ps").to_pandas(["id", "bytes"])
    assert dict(zip(back["id"], back["bytes"])) == true_bytes


def generated_files(tmp_path, explicit_ends=False):
    """Files the way trace generators write them, built with the protobuf machinery ddlsim's writer uses:
    dependencies but no start times, a send without comm_src and a receive without comm_dst (unless
    explicit_ends)."""
    from ddlsim.trace.chakra import _delimited, _message_classes

    classes = _message_classes()
    Node, Attr = classes["Node"], classes["AttributeProto"]
    meta = _delimited(classes["GlobalMetadata"](version="0.0.4"))

    def node(node_id, name, node_type, dur_us, deps=(), **attrs):
        return _delimited(Node(id=node_id, name=name, type=node_type, data_deps=list(deps), duration_micros=dur_us,
                               attr=[Attr(name=k, int32_val=v) if k != "comm_size" else Attr(name=k, int64_val=v)
                                     for k, v in attrs.items()]))

    # rank 0, in file order: a collective waiting for the send and a long compute, listed before them
    own = (lambda **end: end) if explicit_ends else (lambda **end: {})
    rank0 = [node(0, "fwd", 4, 10), node(4, "allreduce", 7, 7, deps=[2, 3], comm_type=0, comm_size=64),
             node(1, "bwd", 4, 5, deps=[0]), node(3, "opt", 4, 20, deps=[0]),
             node(2, "send grad", 5, 3, deps=[1], **own(comm_src=0), comm_dst=1, comm_size=100, comm_tag=9)]
    rank1 = [node(0, "recv grad", 6, 4, comm_src=0, **own(comm_dst=1), comm_size=100, comm_tag=9), node(1, "apply", 4, 2, deps=[0])]
    (tmp_path / "gen.0.et").write_bytes(meta + b"".join(rank0))
    (tmp_path / "gen.1.et").write_bytes(meta + b"".join(rank1))
    return tmp_path / "gen"


@pytest.mark.parametrize("explicit_ends", [False, True])
def test_generated_files_are_scheduled_by_their_dependencies(tmp_path, explicit_ends):
    from ddlsim.trace import validate_event_log

    log = read_chakra(generated_files(tmp_path, explicit_ends))
    got = log.to_pandas(["rank", "op", "kind", "peer", "bytes", "start_ns", "end_ns"])
    us = 1000
    # by hand: fwd 0-10; bwd after fwd 10-15; opt after fwd 10-30; send after bwd 15-18;
    # allreduce after send and opt 30-37. Rank 1: recv from its send's start, 4 us: 15-19; apply 19-21.
    assert sorted(map(tuple, got.itertuples(index=False))) == sorted([
        (0, "fwd", "compute", -1, 0, 0, 10 * us), (0, "allreduce", "collective", -1, 64, 30 * us, 37 * us),
        (0, "bwd", "compute", -1, 0, 10 * us, 15 * us), (0, "opt", "compute", -1, 0, 10 * us, 30 * us),
        (0, "send grad", "send", 1, 100, 15 * us, 18 * us),
        (1, "recv grad", "recv", 0, 100, 15 * us, 19 * us), (1, "apply", "compute", -1, 0, 19 * us, 21 * us)])
    validate_event_log(log, check_causality=True)  # every row starts after its dependencies end
    frame_ = log.to_pandas(["kind", "message"])
    assert frame_.loc[frame_["kind"] == "send", "message"].tolist() == frame_.loc[frame_["kind"] == "recv", "message"].tolist()


def test_cli_converts_generated_files(tmp_path):

    prefix = generated_files(tmp_path)
    run = forked_cli.run(["convert", str(prefix), str(tmp_path / "gen.parquet")])
    assert run.returncode == 0, run.stderr
    from ddlsim.trace import read_trace

    assert len(read_trace(tmp_path / "gen.parquet").to_pandas(["id"])) == 7


def test_a_dependency_cycle_without_start_times_is_refused(tmp_path):
    path = tmp_path / "cyc.0.et"
    path.write_bytes(delimited(METADATA, enc_node(1, "x", 4, 0, 1, deps=[2]), enc_node(2, "y", 4, 0, 1, deps=[1])))
    with pytest.raises(TraceError, match=r"cyc.0.et: record \d \(node \d\): waits for node \d of rank 0, which waits for it \(a cycle\)"):
        read_chakra(path)


def test_the_barrier_is_left_out_and_each_rank_waits_for_its_own_rows(tmp_path):
    """ASTRA-sim runs no BARRIER collective (and a barrier on rank 0 that the other ranks reach only through
    ddlsim_remote_deps stalls them): the export has no barrier node and no metadata node; a next-iteration row
    depends on its own rank's rows among the barrier's dependencies. Reading the files back restores the barrier."""
    log = ddlsim.simulate(model="lenet5", workers=3, strategy="ring", iterations=2).events
    frame_in = log.to_pandas(["id", "rank", "kind", "deps"])
    barrier = frame_in[frame_in["kind"] == "barrier"]
    assert len(barrier) == 2
    barrier_deps = {int(r.id): set(r.deps) for r in barrier.itertuples()}
    rank_of = dict(zip(frame_in["id"], frame_in["rank"]))
    waiting = {int(r.id): (int(r.rank), next(d for d in r.deps if d in barrier_deps))
               for r in frame_in.itertuples() if r.deps is not None and any(d in barrier_deps for d in r.deps)}
    assert {rank for rank, _ in waiting.values()} == {0, 1, 2}
    write_chakra(log, tmp_path / "ring")
    seen = set()
    for rank in range(3):
        for payload in records((tmp_path / f"ring.{rank}.et").read_bytes())[1:]:
            node = node_summary(payload)
            assert node["type"] != 1, "no METADATA_NODE"
            assert not (node["type"] == 7 and node["attrs"].get("comm_type") == 9), "no BARRIER node"
            assert node["id"] not in barrier_deps
            if node["id"] in waiting:
                own_rank, b = waiting[node["id"]]
                assert own_rank == rank
                own = {d for d in barrier_deps[b] if rank_of[d] == rank}
                assert own and set(node["deps"]) == own
                seen.add(node["id"])
    assert seen == set(waiting)
    back = read_chakra(tmp_path / "ring").to_pandas(["id", "kind", "deps"])
    assert {int(r.id): set(r.deps) for r in back[back["kind"] == "barrier"].itertuples()} == barrier_deps
    restored = dict(zip(back["id"], back["deps"]))
    assert all(set(restored[i]) == set(frame_in.set_index("id").loc[i, "deps"]) for i in waiting)
