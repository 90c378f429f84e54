"""`analyze --compare` pairs gradient traffic by identity (the tensors its group carries), not by position, and counts
time that several rows of one item cover once (interval union). Oracle: hand-built logs whose pairs and times are
written out below."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ddlsim.analyze import Analysis
from ddlsim.trace import event_log_from_rows

MS = 1_000_000
PARAMS = [{"name": f"p{i}", "bytes": 4} for i in range(6)]


def log(buckets, extra=()):
    """One worker, one iteration: a forward (2 ms), then per bucket (tensors, start ms, end ms) one all-reduce row
    named bucket<i> (as a capture names them: by position) in group i; `extra`: (group, start, end) step rows."""
    rows = [dict(id=0, iteration=0, rank=0, role="worker", kind="compute", op="forward", name="fc", start_ns=0, end_ns=2 * MS)]
    for i, (_, a, b) in enumerate(buckets):
        rows.append(dict(id=len(rows), iteration=0, rank=0, role="worker", kind="collective", op="allreduce",
                         name=f"bucket{i}", group=i, collective=i, coll_type="allreduce", bytes=8,
                         start_ns=a * MS, end_ns=b * MS))
    for group, a, b in extra:
        rows.append(dict(id=len(rows), iteration=0, rank=0, role="worker", kind="send", op="ring_step", name=f"bucket{group}",
                         group=group, collective=group, coll_type="allreduce", peer=1, message=len(rows), bytes=4,
                         start_ns=a * MS, end_ns=b * MS))
    table = {"group": [], "tensor": [], "kind": [], "offset": [], "bytes": []}
    for i, (tensors, _, _) in enumerate(buckets):
        for k, t in enumerate(tensors):
            table["group"].append(i), table["tensor"].append(t), table["kind"].append("bucket")
            table["offset"].append(4 * k), table["bytes"].append(4)
    groups = pa.table({"group": pa.array(table["group"], pa.int32()), "tensor": pa.array(table["tensor"], pa.int32()),
                       "kind": pa.array(table["kind"]).dictionary_encode(), "offset": pa.array(table["offset"], pa.int64()),
                       "bytes": pa.array(table["bytes"], pa.int64())})
    return event_log_from_rows(rows, metadata={"source": "capture", "parameters": PARAMS}, groups=groups)


def test_buckets_pair_by_their_tensors_and_overlapping_rows_count_once():
    # a: 2 buckets; b: 3 buckets, numbered differently: b's bucket1 holds a's bucket0's tensors (4, 5)
    a = log([((4, 5), 2, 5), ((0, 1, 2, 3), 5, 9)])
    b = log([((2, 3), 2, 6), ((4, 5), 6, 11), ((0, 1), 11, 12)],
            extra=[(0, 2, 4), (0, 3, 5)])  # bucket0's steps, overlapping each other and its all-reduce row
    c = Analysis(a, "a").compare(Analysis(b, "b"))
    comm = c[c.scope == "communication"].set_index("item")
    expected = {  # item: (a ms, b ms)
        "allreduce 2 tensors p4..p5": (3, 5),
        "allreduce 4 tensors p0..p3": (4, None),
        "allreduce 2 tensors p2..p3": (None, 4),  # the row [2, 6) and its steps [2, 4), [3, 5): 4 ms, not 8
        "allreduce 2 tensors p0..p1": (None, 1),
    }
    assert set(comm.index) == set(expected)
    for item, (av, bv) in expected.items():
        got_a, got_b = comm.loc[item, "a_s"], comm.loc[item, "b_s"]
        assert (got_a == pytest.approx(av * 1e-3)) if av is not None else got_a != got_a, item
        assert (got_b == pytest.approx(bv * 1e-3)) if bv is not None else got_b != got_b, item
    assert c.attrs["largest"][0]["item"] == "allreduce 4 tensors p0..p3"  # 4 ms in a, gone in b
    assert comm.loc["allreduce 2 tensors p4..p5", "diff_s"] == pytest.approx(2e-3)


def test_overlapping_rows_of_one_layer_count_once():
    """A layer whose rows overlap on one rank (two streams, chunks) took the time they cover together."""
    rows = [dict(id=i, iteration=0, rank=0, role="worker", kind="compute", op="backward", name="fc", start_ns=a, end_ns=b)
            for i, (a, b) in enumerate([(0, 4 * MS), (1 * MS, 3 * MS), (6 * MS, 7 * MS)])]
    one = [dict(id=0, iteration=0, rank=0, role="worker", kind="compute", op="backward", name="fc", start_ns=0, end_ns=7 * MS)]
    c = Analysis(event_log_from_rows(rows), "a").compare(Analysis(event_log_from_rows(one), "b"))
    layer = c[c.scope == "layer"].iloc[0]
    assert (layer["a_s"], layer["b_s"]) == pytest.approx((5e-3, 7e-3))  # union [0, 4) + [6, 7) = 5 ms, not 7 ms
