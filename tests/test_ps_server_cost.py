"""The parameter server's per-request cost a + b C: the fit from the
connection-scaling microbenchmark, the scenario field, and replay's use of a
capture's fit (the engine's closed forms are in crates/ddlsim-core/tests/server_cost.rs)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import forked_cli
import pytest

import ddlsim
from ddlsim.capture.connections import fit_line, server_cost_metadata, service_times
from ddlsim.errors import DdlsimError
from ddlsim.simulation.replay import captured_server_cost
from ddlsim.trace import read_event_log, write_event_log
from test_replay_overheads import synthetic_capture


def test_the_least_squares_fit_recovers_a_and_b_exactly():
    # points on the line: exact
    c = np.array([1, 2, 3, 5, 8])
    fit = fit_line(c, 37.5 + 12.25 * c)
    assert fit["a"] == pytest.approx(37.5, abs=1e-9) and fit["b"] == pytest.approx(12.25, abs=1e-9)
    assert fit["r2"] == pytest.approx(1.0) and fit["points"] == 5
    # residuals orthogonal to (1, C) leave the least-squares line where it is (a two-point or endpoint fit
    # would not): e = d (1, -2, 1) sums to 0 and to 0 against C = (1, 2, 3)
    c, d = np.array([1, 2, 3]), 7.0
    y = 100.0 + 30.0 * c + d * np.array([1, -2, 1])
    fit = fit_line(c, y)
    assert fit["a"] == pytest.approx(100.0, abs=1e-9) and fit["b"] == pytest.approx(30.0, abs=1e-9)
    spread = ((y - y.mean()) ** 2).sum()
    assert fit["r2"] == pytest.approx(1 - 6 * d * d / spread)
    with pytest.raises(DdlsimError, match="two different connection counts"):
        fit_line([2, 2], [1.0, 2.0])


def test_service_times_leave_out_the_wait_behind_earlier_requests():
    # by hand: r0 finds the server idle (from its arrival), r1 and r2 wait for the one before, r3 finds it idle
    arrival, start, done = [0, 10, 12, 100], [5, 30, 55, 101], [30, 50, 80, 130]
    assert service_times(arrival, start, done).tolist() == [30, 20, 30, 30]
    # a FIFO server simulated with known service times: the decomposition gives them back, in any row order
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        arrival = np.sort(rng.integers(0, 5_000, n))
        service = rng.integers(1, 400, n)
        start, done, free = np.zeros(n, np.int64), np.zeros(n, np.int64), 0
        for i in range(n):
            start[i] = max(arrival[i], free) + int(rng.integers(0, 3))  # the thread's pick-up, part of the service
            done[i] = start[i] + service[i]
            free = done[i]
        begin = np.maximum(arrival, np.concatenate([[0], done[:-1]]))
        expected = done - begin
        order = rng.permutation(n)
        assert service_times(arrival[order], start[order], done[order]).tolist() == expected[order].tolist()


def test_the_capture_metadata_is_the_service_fit_in_ns():
    fit = {"a": 1.5, "b": 0.25, "r2": 0.9, "requests": 200, "request_bytes": 4096,
           "service": {"a": 120.0, "b": 30.5, "r2": 0.8, "points": 2}}
    meta = server_cost_metadata(fit, [1, 2])
    assert (meta["a_ns"], meta["b_ns"], meta["r2"], meta["connections"]) == (120_000.0, 30_500.0, 0.8, [1, 2])


@pytest.mark.parametrize("a, b, workers, expected", [
    (100_000.4, 20_000.0, 2, (100_000, 20_000)),
    (536_503.6, -185_436.5, 2, (165_631, 0)),  # a cost that falls with C: the cost at C = 2 is kept
    (-10_000.0, 30_000.0, 2, (0, 25_000)),  # a negative intercept: the cost at C = 2 is kept
    (-10_000.0, -1.0, 3, (0, 0)),
])
def test_replay_takes_the_fit_without_negative_terms_keeping_the_cost_at_the_capture_s_c(a, b, workers, expected):
    meta = {"source": "capture", "job": "ps", "workers": workers, "server_cost": {"a_ns": a, "b_ns": b}}
    assert captured_server_cost(meta) == expected
    assert captured_server_cost({"source": "capture", "job": "ps", "workers": 2}) is None
    assert captured_server_cost({"workers": 2, "server_cost": {"a_ns": float("nan"), "b_ns": 1.0}}) is None


def _ps_capture(tmp_path, cost):
    events, *_ = synthetic_capture(tmp_path / "events.parquet", workers=2)
    log = read_event_log(events)
    log.metadata.update(job="ps", servers=1, workers=2, ranks={"0": {"rpc_round_trip_ns": 800_000.0},
                                                               "1": {"rpc_round_trip_ns": 800_000.0}})
    if cost is not None:
        log.metadata["server_cost"] = {"a_ns": cost[0], "b_ns": cost[1], "r2": 1.0, "connections": [1, 2]}
    write_event_log(log, tmp_path / "ps.parquet")
    return tmp_path / "ps.parquet"


def test_a_ps_capture_s_fit_is_replayed_and_no_overheads_leaves_it_out(tmp_path):
    path = _ps_capture(tmp_path, (20_000.0, 5_000.0))
    r = ddlsim.replay(path)
    assert (r.scenario.strategy.server_cost.a_ns, r.scenario.strategy.server_cost.b_ns) == (20_000, 5_000)
    assert any(n.startswith("replay: per-request server cost a + b C = 20000ns + 5000ns x C") for n in r.notes), r.notes
    plain = ddlsim.replay(path, server_cost={"a": "0s", "b": "0s"})
    assert r.iteration_time_s > plain.iteration_time_s
    off = ddlsim.replay(path, overheads=False)
    assert off.scenario.strategy.server_cost.a_ns == 0 and off.scenario.strategy.server_cost.b_ns == 0
    assert not any("server cost" in n for n in off.notes)
    given = ddlsim.replay(path, server_cost={"a": "1us", "b": "0s"})
    assert given.scenario.strategy.server_cost.a_ns == 1_000
    # a capture without the fit replays as before
    (tmp_path / "none").mkdir()
    bare = ddlsim.replay(_ps_capture(tmp_path / "none", None))
    assert (bare.scenario.strategy.server_cost.a_ns, bare.scenario.strategy.server_cost.b_ns) == (0, 0)
    assert bare.iteration_time_s == plain.iteration_time_s


def test_a_zero_server_cost_changes_no_byte_of_the_output(tmp_path):
    """The default (and an explicit zero) sends the engine the very document it got before the field existed (no
    server_cost key: crates/ddlsim-core/tests/server_cost.rs shows that graph and log are the ones built without
    it), and the event log's rows are identical."""
    base = dict(model="lenet5", workers=3, strategy="ps", servers=2, iterations=2, seed=3)
    plain = ddlsim.simulate(**base)
    zero = ddlsim.simulate(**base, server_cost={"a": "0s", "b": "0us"})
    assert "server_cost" not in plain.engine_document["training"]
    assert plain.engine_document == zero.engine_document
    plain.save(tmp_path / "plain")
    zero.save(tmp_path / "zero")
    a, b = (pq.read_table(tmp_path / d / "events.parquet") for d in ("plain", "zero"))
    assert a.equals(b)
    costly = ddlsim.simulate(**base, server_cost={"a": "20us", "b": "5us"})
    assert costly.engine_document["training"]["server_cost"] == {"a_ns": 20_000, "b_ns": 5_000}
    assert costly.iteration_time_s > plain.iteration_time_s


def test_the_scenario_names_a_bad_server_cost():
    with pytest.raises(DdlsimError, match="server_cost"):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", server_cost={"a": "20", "b": "0s"})
    with pytest.raises(DdlsimError, match="server_cost"):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", in_network="multicast", server_cost={"a": "20us"})


def test_capture_ps_refuses_a_single_connection_count_in_one_line(tmp_path):

    done = forked_cli.run(["capture", "ps", "--model", "lenet5", "--connections", "2", "--out", str(tmp_path / "x")], timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("error: --connections '2': the fit of server time against connections needs at least "
                                   "two different counts, e.g. --connections 1,2,4,8 (or auto, or none)")
    assert not (tmp_path / "x").exists()


def test_a_ps_capture_stores_its_service_fit_and_replay_uses_it(tmp_path):
    """A real PS job and the microbenchmark after it: the metadata's server_cost is fit.json's service fit in ns, which
    is the least-squares line through scaling.csv's mean service times, and replay takes it (cost at C = 2 kept)."""
    pytest.importorskip("torch", reason="ddlsim capture ps runs torch.distributed.rpc (pip install ddlsim[capture])")
    import json

    import pandas as pd

    out = tmp_path / "cap"
    done = forked_cli.run(["capture", "ps", "--model", "lenet5", "--workers", "2", "--iterations", "2", "--connections", "1,2", "--connection-requests", "20", "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr
    meta = read_event_log(out / "events.parquet").metadata
    fit = json.loads((out / "fit.json").read_text())["service"]
    cost = meta["server_cost"]
    assert cost["a_ns"] == pytest.approx(fit["a"] * 1e3) and cost["b_ns"] == pytest.approx(fit["b"] * 1e3)
    assert cost["connections"] == [1, 2]
    table = pd.read_csv(out / "scaling.csv")
    assert list(table.connections) == [1, 2] and (table.requests == 20).all()
    # two points: the line passes through both means
    assert fit["a"] + fit["b"] * 2 == pytest.approx(float(table.service_us[1]))
    assert fit["a"] + fit["b"] == pytest.approx(float(table.service_us[0]))
    requests = pd.read_csv(out / "c2" / "requests.csv")
    assert (requests.service_ns > 0).all() and (requests.service_ns <= requests.server_ns + requests.latency_ns).all()
    r = ddlsim.replay(out / "events.parquet")
    at_two = round(max(0.0, cost["a_ns"] + 2 * cost["b_ns"]))
    got = r.scenario.strategy.server_cost
    assert abs(got.a_ns + 2 * got.b_ns - at_two) <= 1
    # the workers' own per-request cost (client_cost): over the counted iteration (1), the fitted issue cost summed
    # over the workers' request rows is their measured rpc_async time, the handling cost the ack / apply rows' time
    from ddlsim.trace.coerce import as_columns

    client = meta["client_cost"]
    assert client["iterations"] == [1]
    log = as_columns(read_event_log(out / "events.parquet"))
    t = pd.DataFrame({k: np.asarray(log.column(k)) for k in ("rank", "role", "iteration", "kind", "op", "rpc", "bytes",
                                                            "start_ns", "end_ns")})
    t = t[(t.role == "worker") & (t.iteration == 1)]
    sent = t[(t.kind == "send") & t.op.isin(["push_request", "pull_request"])]
    assert len(sent) == 2 * 2 * 10  # 2 workers x 10 LeNet-5 tensors x (push + pull)
    took = sent.end_ns - sent.start_ns
    assert client["issue_ns"] * len(sent) + client["issue_ns_per_byte"] * sent.bytes.sum() == pytest.approx(took.sum(), rel=1e-6)
    assert client["per_kind"]["pull_request"]["mean_ns"] == pytest.approx(took[sent.op == "pull_request"].mean())
    handled = t[(t.kind == "compute") & t.op.isin(["ack", "apply"])]
    recv = t[t.kind == "recv"].set_index(["rank", "rpc"])
    assert len(handled) == 40
    nbytes = recv.loc[list(zip(handled["rank"], handled.rpc)), "bytes"].to_numpy()
    # a response is handled once it arrived (the row starts when the loop takes it off its queue)
    assert (handled.start_ns.to_numpy() >= recv.loc[list(zip(handled["rank"], handled.rpc)), "end_ns"].to_numpy()).all()
    spent = (handled.end_ns - handled.start_ns).sum()
    assert client["receive_ns"] * 40 + client["receive_ns_per_byte"] * nbytes.sum() == pytest.approx(spent, rel=1e-6)
    replayed = r.scenario.strategy.client_cost
    assert replayed.issue == f"{round(client['issue_ns'])}ns" and replayed.receive == f"{round(client['receive_ns'])}ns"
