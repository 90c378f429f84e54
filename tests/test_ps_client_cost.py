"""The parameter-server workers' own per-request cost: the fit a PS capture
stores (``client_cost``), the scenario field, and replay's use of it (the
engine's closed forms are in crates/ddlsim-core/tests/client_cost.rs)."""

from __future__ import annotations


import numpy as np
import pyarrow.parquet as pq
import forked_cli
import pytest

import ddlsim
from ddlsim.capture.ps_client_cost import _fit, client_cost_metadata
from ddlsim.errors import DdlsimError
from ddlsim.simulation.replay import captured_client_cost
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log

LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
US = 1_000


def test_the_fit_recovers_a_line_and_keeps_the_measured_total():
    x = np.array([0, 24, 1_000, 4_000, 192_000], dtype=float)
    assert _fit(x, 150_000 + 2.5 * x) == pytest.approx((150_000, 2.5))
    assert _fit(np.zeros(4), np.full(4, 7.0)) == (7.0, 0.0)  # one size: the mean, no slope
    assert _fit(np.array([]), np.array([])) == (0.0, 0.0)
    # a cost falling with size: no negative slope, the mean instead
    assert _fit(np.array([0.0, 10.0]), np.array([30.0, 10.0])) == (20.0, 0.0)
    # a negative intercept: through the origin at the mean size (mean 20 ns at 10 bytes: 2 ns/byte)
    assert _fit(np.array([5.0, 15.0]), np.array([0.0, 40.0])) == (0.0, 2.0)
    # property: whatever the rows, the fitted cost summed over them is their measured sum, and neither term < 0
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        x = rng.choice([0.0, 24.0, 600.0, 40_320.0, 192_000.0], n)
        y = rng.gamma(1.5, 200_000.0, n)
        a, b = _fit(x, y)
        assert a >= 0 and b >= 0
        assert a * n + b * x.sum() == pytest.approx(y.sum(), rel=1e-9)


SIZES = [600, 24, 192_000, 40_320]  # bytes of the keys each worker pushes and pulls
A, BETA, R0, RHO = 150_000, 2, 5_000, 0.5


def ps_rows(workers=2, iterations=3, lag_ns=0):
    """A PS capture's rows with known worker costs: per iteration and worker, LeNet-5's layers (1 ms each way),
    then per key a push issued in A + BETA x bytes ns, its ack handled in R0, a pull issued in A, its response
    handled in R0 + RHO x bytes, the next request right after (the server answers each in 300 us). Iteration 0 (the warm-up) costs 10 times more."""
    rows, t, rpc = [], 0, 0
    for it in range(iterations):
        slow = 10 if it == 0 else 1
        end = t
        for w in range(workers):
            now = t + w * lag_ns  # worker w starts w x lag later
            for op, order in (("forward", LENET), ("backward", LENET[::-1])):
                for layer in order:
                    rows.append(dict(iteration=it, rank=w, role="worker", kind="compute", op=op, name=layer,
                                     start_ns=now, end_ns=now + 1_000 * US))
                    now += 1_000 * US
            for size in SIZES:
                for request, response, handler, issue, handle, req_bytes in (
                        ("push_request", "push_response", "ack", A + BETA * size, R0, size),
                        ("pull_request", "pull_response", "apply", A, R0 + RHO * size, 0)):
                    rpc += 1
                    resp_bytes = size - req_bytes
                    rows.append(dict(iteration=it, rank=w, role="worker", kind="send", op=request, peer=workers,
                                     rpc=rpc, message=rpc, bytes=req_bytes, start_ns=now, end_ns=now + int(issue * slow)))
                    now += int(issue * slow)
                    server = dict(iteration=it, rank=workers, role="server", peer=w, rpc=rpc)
                    rows.append(dict(server, kind="recv", op=request, message=rpc, bytes=req_bytes, start_ns=now + 100 * US,
                                     end_ns=now + 100 * US))
                    rows.append(dict(server, kind="send", op=response, message=10_000 + rpc, bytes=resp_bytes,
                                     start_ns=now + 200 * US, end_ns=now + 250 * US))
                    now += 300 * US
                    rows.append(dict(iteration=it, rank=w, role="worker", kind="recv", op=response, peer=workers,
                                     rpc=rpc, message=10_000 + rpc, bytes=resp_bytes, start_ns=now, end_ns=now))
                    now += 50 * US  # the response waits in the worker's queue
                    rows.append(dict(iteration=it, rank=w, role="worker", kind="compute", op=handler, rpc=rpc,
                                     start_ns=now, end_ns=now + int(handle * slow)))
                    now += int(handle * slow)
            end = max(end, now)
        t = end
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


def ps_capture(path, *, with_fit=True, **kw):
    meta = {"source": "capture", "job": "ps", "model": "lenet5", "workers": 2, "servers": 1, "sync": True,
            "ranks": {"0": {"rpc_round_trip_ns": 800_000.0}, "1": {"rpc_round_trip_ns": 800_000.0}}}
    log = event_log_from_rows(ps_rows(**kw), metadata=meta)
    if with_fit:
        log.metadata["client_cost"] = client_cost_metadata(log)
    write_event_log(log, path)
    return path


def test_a_capture_s_rows_give_the_known_costs_without_the_warm_up():
    log = event_log_from_rows(ps_rows(), metadata={"source": "capture", "job": "ps"})
    fit = client_cost_metadata(log)
    assert fit["iterations"] == [1, 2]
    assert fit["issue_ns"] == pytest.approx(A) and fit["issue_ns_per_byte"] == pytest.approx(BETA)
    assert fit["receive_ns"] == pytest.approx(R0) and fit["receive_ns_per_byte"] == pytest.approx(RHO)
    kinds = fit["per_kind"]
    assert kinds["push_request"] == {"rows": 16, "mean_ns": pytest.approx(A + BETA * np.mean(SIZES)),
                                     "mean_bytes": pytest.approx(np.mean(SIZES))}
    assert kinds["pull_request"]["mean_ns"] == pytest.approx(A) and kinds["pull_request"]["mean_bytes"] == 0
    assert kinds["push_response"]["mean_ns"] == pytest.approx(R0)
    assert kinds["pull_response"]["mean_ns"] == pytest.approx(R0 + RHO * np.mean(SIZES))
    # a log without worker requests has no fit
    assert client_cost_metadata(event_log_from_rows([r for r in ps_rows() if r["kind"] == "compute"],
                                                    metadata={"source": "capture"})) is None


def test_replay_takes_the_capture_s_fit_and_no_overheads_leaves_it_out(tmp_path):
    path = ps_capture(tmp_path / "ps.parquet")
    r = ddlsim.replay(path)
    cost = r.scenario.strategy.client_cost
    assert (cost.issue, cost.issue_ns_per_byte, cost.receive, cost.receive_ns_per_byte) == \
        ("150000ns", pytest.approx(BETA), "5000ns", pytest.approx(RHO))
    assert r.engine_document["training"]["client_cost"]["issue_ns"] == 150_000
    assert any(n.startswith("replay: the workers' own per-request cost, measured by the capture") for n in r.notes), r.notes
    off = ddlsim.replay(path, overheads=False)
    assert off.scenario.strategy.client_cost.is_zero() and "client_cost" not in off.engine_document["training"]
    assert not any("per-request cost" in n for n in off.notes)
    plain = ddlsim.replay(path, client_cost={})
    assert plain.scenario.strategy.client_cost.is_zero()
    # the first layer's gradients are ready last; the next iteration waits for their push to be issued (>= A), its
    # ack handled (R0), its pull issued (A) and its response handled (>= R0), one after another
    assert r.iteration_time_s - plain.iteration_time_s >= (2 * A + 2 * R0) / 1e9
    given = ddlsim.replay(path, client_cost={"issue": "1us"})
    assert given.scenario.strategy.client_cost.engine() == {"issue_ns": 1_000, "issue_ns_per_byte": 0.0,
                                                            "receive_ns": 0, "receive_ns_per_byte": 0.0}


def test_a_capture_made_before_the_metadata_is_fitted_from_its_rows(tmp_path):
    with_fit = ddlsim.replay(ps_capture(tmp_path / "a.parquet"))
    without = ddlsim.replay(ps_capture(tmp_path / "b.parquet", with_fit=False))
    assert "client_cost" not in read_event_log(tmp_path / "b.parquet").metadata
    assert without.scenario.strategy.client_cost == with_fit.scenario.strategy.client_cost
    assert any("measured from the capture's rows" in n for n in without.notes), without.notes
    assert without.iteration_time_s == with_fit.iteration_time_s


@pytest.mark.parametrize("fit", [None, {}, {"issue_ns": 1.0}, {"issue_ns": -1.0, "issue_ns_per_byte": 0, "receive_ns": 0,
                                                               "receive_ns_per_byte": 0},
                                 {"issue_ns": float("nan"), "issue_ns_per_byte": 0, "receive_ns": 0, "receive_ns_per_byte": 0},
                                 {"issue_ns": True, "issue_ns_per_byte": 0, "receive_ns": 0, "receive_ns_per_byte": 0}])
def test_an_unusable_fit_is_not_replayed(fit):
    assert captured_client_cost(fit) is None


def test_a_zero_client_cost_changes_no_byte_of_the_output(tmp_path):
    base = dict(model="lenet5", workers=3, strategy="ps", servers=2, iterations=2, seed=3)
    plain = ddlsim.simulate(**base)
    zero = ddlsim.simulate(**base, client_cost={"issue": "0s", "receive": "0us", "issue_ns_per_byte": 0.0})
    assert "client_cost" not in plain.engine_document["training"]
    assert plain.engine_document == zero.engine_document
    plain.save(tmp_path / "plain")
    zero.save(tmp_path / "zero")
    a, b = (pq.read_table(tmp_path / d / "events.parquet") for d in ("plain", "zero"))
    assert a.equals(b)
    costly = ddlsim.simulate(**base, client_cost={"issue": "200us", "receive_ns_per_byte": 0.1})
    assert costly.engine_document["training"]["client_cost"] == {"issue_ns": 200_000, "issue_ns_per_byte": 0.0,
                                                                 "receive_ns": 0, "receive_ns_per_byte": 0.1}
    assert costly.iteration_time_s > plain.iteration_time_s


def test_one_worker_s_requests_leave_c_apart():
    """Closed form through the Python API: one worker, one server, LeNet-5's 10 tensors, each push issued c ns:
    the k-th push of an iteration leaves k c after the previous one's issue began, one issuer per worker."""
    c = 300_000
    r = ddlsim.simulate(model="lenet5", workers=1, strategy="ps", servers=1, iterations=1, client_cost={"issue": f"{c}ns"})
    import pandas as pd

    from ddlsim.trace.coerce import as_columns

    log = as_columns(r.events)
    t = pd.DataFrame({k: np.asarray(log.column(k)) for k in ("id", "op", "kind", "rpc", "start_ns", "end_ns")})
    t["deps"] = list(log.column("deps"))
    issues = t[(t.op == "issue")].sort_values("start_ns")
    assert len(issues) == 20 and ((issues.end_ns - issues.start_ns) == c).all() and (issues.rpc == -1).all()
    assert (issues.start_ns.values[1:] >= issues.end_ns.values[:-1]).all()  # serial on the worker
    pushes = t[(t.op == "push_request") & (t.kind == "send")].sort_values("start_ns")
    issued = issues.set_index("id").end_ns
    for start, deps in zip(pushes.start_ns, pushes.deps):  # each push leaves once its issue row ends
        assert [start] == [issued[d] for d in deps if d in issued.index]
    # the 10 pushes are ready within the backward, so they leave back to back: c apart once the issuer is busy
    gaps = np.diff(pushes.start_ns.values)
    assert (gaps >= c).all()


@pytest.mark.parametrize("bad, field", [({"issue": "-5us"}, "client_cost"), ({"receive_ns_per_byte": -1}, "client_cost"),
                                        ({"issue_ns_per_byte": float("nan")}, "client_cost"), ({"send": "1us"}, "client_cost")])
def test_the_scenario_names_a_bad_client_cost(bad, field):
    with pytest.raises(DdlsimError, match=field):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", client_cost=bad)


def test_a_client_cost_with_in_network_aggregation_is_refused():
    with pytest.raises(DdlsimError, match="client_cost"):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", in_network="multicast", client_cost={"issue": "20us"})


def test_the_cli_names_a_bad_client_cost_without_a_traceback(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nname = "lenet5"\n[strategy]\nkind = "ps"\nclient_cost = {issue = "20us", '
                        'receive_ns_per_byte = -0.5}\n')
    done = forked_cli.run(["simulate", str(scenario)], timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "invalid scenario" in done.stderr and "field 'strategy.client_cost.receive_ns_per_byte'" in done.stderr


def test_the_rpc_breakdown_of_a_simulated_log_puts_the_handling_in_w_proc():
    """The handle rows carry the response's rpc id and the issue rows none, so ddlsim.analyze.rpc_table gives every
    RPC a W_proc of exactly the receive cost (0 bytes per ack, the tensor's bytes per pull) and a W_queue >= 0 (the
    wait for the worker's issuer)."""
    from ddlsim.analyze.rpc import rpc_table

    r = ddlsim.simulate(model="lenet5", workers=2, strategy="ps", servers=1, iterations=1,
                        client_cost={"issue": "30us", "receive": "40us", "receive_ns_per_byte": 0.5})
    table = rpc_table(r.events)
    assert len(table) == 2 * 10 * 2
    pushes, pulls = table[table.kind == "push"], table[table.kind == "pull"]
    assert (pushes.w_proc_ns == 40_000).all()
    assert (pulls.w_proc_ns.astype("int64") == 40_000 + (pulls.response_bytes.astype("int64") * 0.5).round()).all()
    assert (table.w_queue_ns >= 0).all()


@pytest.mark.parametrize("sync", [True, False])
def test_a_synchronous_push_waits_for_the_later_worker_as_a_ddp_bucket_does(sync):
    """Worker 1 runs `lag` behind worker 0 in every iteration, so each of its pushes starts `lag` later: the latest
    push less the mean over the 2 workers is lag / 2 for every push, all after conv1's backward (the last one). A
    synchronous update waits for it, so the replay charges lag / 2 to conv1's backward; an asynchronous PS does
    not wait."""
    from ddlsim.simulation.overheads import framework_overheads

    lag = 3_000 * US
    meta = {"source": "capture", "job": "ps", "sync": sync}
    found = framework_overheads(event_log_from_rows(ps_rows(lag_ns=lag), metadata=meta))
    same = framework_overheads(event_log_from_rows(ps_rows(), metadata=meta))
    if not sync:
        assert found["buckets"] == [] and found["skew_s"] == 0
        return
    assert [b["layer"] for b in found["buckets"]] == ["conv1"] * len(SIZES)
    assert all(b["skew_s"] == pytest.approx(lag / 2 / 1e9) for b in found["buckets"])
    assert found["layers"]["conv1"][1] - same["layers"]["conv1"][1] == pytest.approx(lag / 2 / 1e9)


def test_capture_merge_of_a_ps_job_adds_client_cost(tmp_path):
    """The torchrun path (`ddlsim capture merge DIR --config job.json`) fits the same metadata: one worker pushes one
    key per iteration (its rpc_async takes 100 us + iteration 0's warm-up) and handles each ack in 5 us."""
    import json

    from ddlsim.capture import RankRecorder

    worker, server = RankRecorder(tmp_path, 0, "worker"), RankRecorder(tmp_path, 1, "server")
    t = 1_000_000
    for it in range(3):
        slow = 10 if it == 0 else 1
        m, r = worker.new_message(), worker.new_id()
        worker.row("send", "push_request", t, t + 100_000 * slow, deps=[], peer=1, message=m, bytes=64, rpc=r,
                   iteration=it, tensor=0)
        server.row("recv", "push_request", t + 200_000 * slow, t + 200_000 * slow, deps=[], peer=0, message=m, bytes=64,
                   rpc=r, iteration=it, tensor=0)
        a = server.new_message()
        server.row("send", "push_response", t + 300_000 * slow, t + 300_000 * slow, deps=[], peer=0, message=a, bytes=0,
                   rpc=r, iteration=it, tensor=0)
        recv = worker.row("recv", "push_response", t + 400_000 * slow, t + 400_000 * slow, deps=[], peer=1, message=a,
                          bytes=0, rpc=r, iteration=it, tensor=0)
        worker.row("compute", "ack", t + 450_000 * slow, t + 455_000 * slow, deps=[recv], rpc=r, iteration=it, tensor=0)
        t += 10_000_000
    worker.close()
    server.close()
    (tmp_path / "job.json").write_text(json.dumps({"job": "ps", "model": "lenet5", "workers": 1, "servers": 1,
                                                   "iterations": 3}), encoding="utf-8")
    done = forked_cli.run(["capture", "merge", str(tmp_path)], timeout=120)
    assert done.returncode == 0, done.stderr
    fit = read_event_log(tmp_path / "events.parquet").metadata["client_cost"]
    assert fit["iterations"] == [1, 2]
    assert (fit["issue_ns"], fit["issue_ns_per_byte"], fit["receive_ns"], fit["receive_ns_per_byte"]) == \
        (pytest.approx(100_000), 0.0, pytest.approx(5_000), 0.0)
