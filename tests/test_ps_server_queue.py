"""Where a PS capture's pushes wait at the server (the barrier for the other workers' pushes, then the one server
thread), the server's update cost measured from its rows, and replay's serial update: the update runs on the
server's one thread with its requests (docs/validation.md; the engine's closed form is in
crates/ddlsim-core/tests/serial_update.rs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import ddlsim
from ddlsim.capture.ps_server_queue import push_queue, push_queue_summary, server_update_fit
from ddlsim.errors import DdlsimError
from ddlsim.trace import event_log_from_rows, write_event_log
from ddlsim.trace.coerce import as_columns

LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
# LeNet-5's keys (tensor id: payload bytes), pushed in backward order
KEYS = {9: 40, 8: 3_360, 7: 336, 6: 40_320, 5: 480, 4: 192_000, 3: 64, 2: 9_600, 1: 24, 0: 600}
US, MS = 1_000, 1_000_000
U0, BETA = 120 * US, 2.0  # the server's update: U0 + BETA x bytes


def _numbered(rows):
    """Ids, and each server recv of a push with its worker's send (the same message, sent 100 us before)."""
    out = []
    for row in rows:
        if row["kind"] == "recv":
            row["message"] = len(out)
            out.append(dict(iteration=row["iteration"], rank=row["peer"], role="worker", kind="send", op=row["op"],
                            peer=row["rank"], tensor=row["tensor"], bytes=row["bytes"], message=len(out),
                            start_ns=row["end_ns"] - 100 * US, end_ns=row["end_ns"] - 100 * US))
        elif row["kind"] == "send":
            row["message"] = 1_000_000 + len(out)  # the acks: their worker recv rows are not needed here
        out.append(row)
    for i, row in enumerate(out):
        row["id"] = i
    return out


def test_push_queue_splits_each_push_s_wait_into_the_barrier_and_the_server_thread():
    """Two keys, two workers, iteration 1 counted (0 is the warm-up). Oracle on paper (us): key 4 arrives from
    worker 0 at 1000 and worker 1 at 4000, its update starts at 4500: queue 3500 / 500, barrier 3000 / 0, serial
    500 / 500. Key 5: 1200 and 4200, update at 5000: queue 3800 / 800, barrier 3000 / 0, serial 800 / 800."""
    rows = []
    for it in (0, 1):
        base = it * 100 * MS
        for key, arrivals, start in ((4, (1000, 4000), 4500), (5, (1200, 4200), 5000)):
            for w, a in enumerate(arrivals):
                rows.append(dict(iteration=it, rank=2, role="server", kind="recv", op="push_request", peer=w, tensor=key,
                                 bytes=KEYS[key], start_ns=base + a * US, end_ns=base + a * US))
            rows.append(dict(iteration=it, rank=2, role="server", kind="compute", op="update", tensor=key,
                             start_ns=base + start * US, end_ns=base + start * US + 300 * US))
        rows.append(dict(iteration=it, rank=0, role="worker", kind="compute", op="forward", name="conv1",
                         start_ns=base, end_ns=base + US))
    log = event_log_from_rows(_numbered(rows), metadata={"source": "capture", "job": "ps"})
    table = pd.DataFrame(push_queue(log))
    assert table.iteration.tolist() == [1] * 4
    assert (table.queue_ns / US).tolist() == [3500, 500, 3800, 800]
    assert (table.barrier_ns / US).tolist() == [3000, 0, 3000, 0]
    assert (table.serial_ns / US).tolist() == [500, 500, 800, 800]
    summary = push_queue_summary(log)
    assert summary["queue_ns"] == 2150 * US and summary["barrier_ns"] == 1500 * US and summary["serial_ns"] == 650 * US
    assert summary["barrier_share"] == pytest.approx(1500 / 2150)
    assert summary["update_busy_ns"] == 600 * US and summary["pushes"] == 4 and summary["iterations"] == [1]


def ps_capture_rows(iterations=3, lag_ns=2 * MS):
    """A PS LeNet-5 capture's rows: per iteration each worker's layers (1 ms each way, worker 1 `lag_ns` later),
    its pushes arriving at the server 1 ms apart after its backward, and the server's one thread running each
    key's update once both pushes are in, U0 + BETA x bytes long (10 times that in the warm-up, iteration 0),
    each followed by its two acks (50 us each)."""
    rows, t = [], 0
    for it in range(iterations):
        slow = 10 if it == 0 else 1
        arrivals = {}
        for w in range(2):
            now = t + w * lag_ns
            for op, order in (("forward", LENET), ("backward", LENET[::-1])):
                for layer in order:
                    rows.append(dict(iteration=it, rank=w, role="worker", kind="compute", op=op, name=layer,
                                     start_ns=now, end_ns=now + MS))
                    now += MS
            for key, size in KEYS.items():
                now += MS
                rows.append(dict(iteration=it, rank=2, role="server", kind="recv", op="push_request", peer=w, tensor=key,
                                 bytes=size, start_ns=now, end_ns=now))
                arrivals[key] = max(arrivals.get(key, 0), now)
        free = 0
        for key, size in KEYS.items():
            start = max(arrivals[key], free)
            end = start + int((U0 + BETA * size) * slow)
            rows.append(dict(iteration=it, rank=2, role="server", kind="compute", op="update", tensor=key,
                             start_ns=start, end_ns=end))
            for w in range(2):
                rows.append(dict(iteration=it, rank=2, role="server", kind="send", op="push_response", peer=w,
                                 tensor=key, start_ns=end + w * 50 * US, end_ns=end + (w + 1) * 50 * US))
            free = end + 100 * US
        t = free + MS
    return _numbered(rows)


def ps_capture(path, **kw):
    meta = {"source": "capture", "job": "ps", "model": "lenet5", "workers": 2, "servers": 1, "sync": True,
            "ranks": {"0": {"rpc_round_trip_ns": 800_000.0}, "1": {"rpc_round_trip_ns": 800_000.0}}}
    write_event_log(event_log_from_rows(ps_capture_rows(**kw), metadata=meta), path)
    return path


def test_the_update_rows_give_the_known_update_cost_without_the_warm_up():
    log = event_log_from_rows(ps_capture_rows(), metadata={"source": "capture", "job": "ps"})
    fit = server_update_fit(log)
    assert fit["iterations"] == [1, 2] and fit["rows"] == 20
    assert fit["update_ns"] == pytest.approx(U0) and fit["update_ns_per_byte"] == pytest.approx(BETA)
    assert fit["mean_ns"] == pytest.approx(U0 + BETA * np.mean(list(KEYS.values())))
    # the barrier: worker 1 is 2 ms behind, so worker 0's pushes wait 2 ms for it, worker 1's none
    summary = push_queue_summary(log)
    assert summary["barrier_ns"] == pytest.approx(1 * MS)
    # a log without update rows (not a PS capture, or a server that recorded none) has no fit
    assert server_update_fit(event_log_from_rows([r for r in ps_capture_rows() if r["op"] != "update"],
                                                 metadata={"source": "capture"})) is None


def _frame(result):
    log = as_columns(result.events)
    names = ("id", "rank", "role", "kind", "op", "iteration", "tensor", "bytes", "stream", "start_ns", "end_ns")
    return pd.DataFrame({k: np.asarray(log.column(k)) for k in names})


def test_a_replay_runs_the_capture_s_updates_on_the_server_thread_with_their_measured_cost(tmp_path):
    path = ps_capture(tmp_path / "ps.parquet")
    r = ddlsim.replay(path)
    cost = r.scenario.strategy.server_cost
    assert (cost.update, cost.update_ns_per_byte) == (f"{U0}ns", pytest.approx(BETA))
    assert r.engine_document["training"]["server_cost"]["update_ns"] == U0
    assert any(n.startswith("replay: the server's update, measured from the capture's update rows") for n in r.notes), r.notes
    t = _frame(r)
    server = t[t.role == "server"]
    updates = server[(server.kind == "compute") & (server.op == "update")]
    pushes = server[(server.kind == "recv") & (server.op == "push_request")].groupby(["iteration", "tensor"])
    # each replayed update takes the measured cost of its key's payload (the replay's push bytes less its header)
    header = r.scenario.strategy.header_bytes
    payload = (pushes.bytes.max() - header).rename("payload")
    u = updates.join(payload, on=["iteration", "tensor"])
    assert len(u) == 3 * 10 and ((u.end_ns - u.start_ns) == np.round(U0 + BETA * u.payload)).all()
    # ... on the server's one thread, with the requests (serve rows), one op at a time, first come first served:
    # an update starts when its key's last push arrived or when the op before it on the thread ended
    thread = server[(server.kind == "compute")].sort_values(["start_ns", "id"])
    assert thread.stream.nunique() == 1 and set(thread.op) == {"serve", "update"}
    assert (thread.start_ns.values[1:] >= thread.end_ns.values[:-1]).all()
    # the queue the replay's pushes show is what a FIFO thread gives (an oracle of its own: the waits recomputed
    # from the replay's arrivals and the measured costs alone), and it is not empty
    queue = pd.DataFrame(push_queue(r.events))
    last = queue.groupby(["iteration", "tensor"]).last_arrival_ns.first()
    free, expected = 0, {}
    for (it, key), arrival in last.sort_values().items():
        served = arrival  # the serve rows of a capture without a connection-scaling fit take 0 ns
        start = max(served, free)
        expected[(it, key)] = start - arrival
        free = start + round(U0 + BETA * KEYS[key])
    got = queue.groupby(["iteration", "tensor"]).serial_ns.first()
    assert {k: int(v) for k, v in got.items()} == expected
    assert max(expected.values()) > 0
    # --no-overheads, or a server cost given, leaves it out
    off = ddlsim.replay(path, overheads=False)
    assert off.scenario.strategy.server_cost.is_zero() and "server_cost" not in off.engine_document["training"]
    given = ddlsim.replay(path, server_cost={"a": "1us"})
    assert given.engine_document["training"]["server_cost"] == {"a_ns": 1_000, "b_ns": 0}
    assert r.iteration_time_s > off.iteration_time_s


def test_updates_that_queue_on_one_thread_end_their_cost_apart():
    """Closed form through the Python API: one worker and one server, LeNet-5 (its compute takes microseconds),
    each update holding the server's thread 5 ms + 10 ns/byte: the updates queue, so each starts when the one
    before it ends, and each lasts 5 ms + 10 ns x its payload."""
    u0, per_byte = 5 * MS, 10.0
    r = ddlsim.simulate(model="lenet5", workers=1, strategy="ps", servers=1, iterations=1,
                        server_cost={"update": "5ms", "update_ns_per_byte": per_byte})
    t = _frame(r)
    updates = t[(t.op == "update") & (t.kind == "compute")].sort_values("start_ns")
    pushes = t[(t.op == "push_request") & (t.kind == "recv")].set_index("tensor").bytes
    assert len(updates) == 10
    assert ((updates.end_ns - updates.start_ns).values == np.round(u0 + per_byte * pushes[updates.tensor].values)).all()
    assert (updates.start_ns.values[1:] == updates.end_ns.values[:-1]).all()


def test_no_update_cost_changes_no_byte_of_the_output(tmp_path):
    base = dict(model="lenet5", workers=3, strategy="ps", servers=2, iterations=2, seed=3)
    plain = ddlsim.simulate(**base, server_cost={"a": "20us", "b": "5us"})
    zero = ddlsim.simulate(**base, server_cost={"a": "20us", "b": "5us", "update": "0s", "update_ns_per_byte": 0.0})
    assert plain.engine_document["training"]["server_cost"] == {"a_ns": 20_000, "b_ns": 5_000}
    assert plain.engine_document == zero.engine_document
    plain.save(tmp_path / "plain")
    zero.save(tmp_path / "zero")
    a, b = (pq.read_table(tmp_path / d / "events.parquet") for d in ("plain", "zero"))
    assert a.equals(b)
    # a PS capture without update rows replays as before: no serial update, no note
    rows = [r for r in ps_capture_rows() if r["op"] != "update"]
    meta = {"source": "capture", "job": "ps", "model": "lenet5", "workers": 2, "servers": 1, "sync": True}
    write_event_log(event_log_from_rows(_numbered(rows), metadata=meta), tmp_path / "none.parquet")
    none = ddlsim.replay(tmp_path / "none.parquet")
    assert "server_cost" not in none.engine_document["training"]
    assert not any("server's update" in n for n in none.notes)


@pytest.mark.parametrize("bad", [{"update": "-5us"}, {"update_ns_per_byte": -1}, {"update_ns_per_byte": float("nan")}])
def test_the_scenario_names_a_bad_update_cost(bad):
    with pytest.raises(DdlsimError, match="server_cost"):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", server_cost=bad)


@pytest.mark.parametrize("cost", [{"update": "5us"}, {"update_ns_per_byte": 0.1}])
def test_an_in_network_ps_names_the_update_cost_it_refuses(cost):
    """In-network modes refuse a server cost; with only an update cost set, the message showed
    server_cost = {'a': '0s', 'b': '0s'} (nothing the user gave) instead of the update cost that clashes."""
    with pytest.raises(DdlsimError, match="in_network") as err:
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", in_network="aggregation", server_cost=cost)
    assert str(next(iter(cost))) in str(err.value) and "'a': '0s'" not in str(err.value), str(err.value)
