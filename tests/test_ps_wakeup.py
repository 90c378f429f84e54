"""The PS workers' wake-up: a response that reaches an idle worker loop waits
before the loop takes it. Measured from a capture's rows
(``ddlsim.capture.ps_client_cost.wakeup_fit``, ``client_cost.wakeup_ns``),
replayed as ``strategy.client_cost.wakeup`` (the engine's closed forms are in
crates/ddlsim-core/tests/client_cost.rs)."""

from __future__ import annotations

import numpy as np
import pytest

import ddlsim
from ddlsim.capture.ps_client_cost import client_cost_metadata, response_waits, wakeup_fit
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log

US = 1_000
LENET = ["conv1", "conv2", "fc1", "fc2", "fc3"]
SIZES = [600, 24, 192_000, 40_320]
ISSUE, HANDLE, WAKE, BUSY_WAIT = 150 * US, 20 * US, 70 * US, 400 * US


def rows(iterations=3, wake=WAKE):
    """One worker, one server: LeNet-5's layers (1 ms each way), then the 4 pushes issued back to back (ISSUE
    each). Each ack arrives 100 us after its push was issued, while the loop is busy (issuing the next push, or,
    for the last one, handling ack 1 and issuing pull 1): the loop takes it when its running row ends. Per ack, in
    order, the loop handles it (HANDLE), issues its pull (ISSUE) and waits for the response, which arrives 300 us
    later at an idle loop and is taken `wake` after it arrived. Iteration 0 (the warm-up) wakes 20 times slower."""
    out, t, rpc = [], 0, 0

    def row(**kw):
        out.append(dict(kw, id=len(out)))

    for it in range(iterations):
        w = wake * (20 if it == 0 else 1)
        for op, order in (("forward", LENET), ("backward", LENET[::-1])):
            for layer in order:
                row(iteration=it, rank=0, role="worker", kind="compute", op=op, name=layer, start_ns=t, end_ns=t + 1_000 * US)
                t += 1_000 * US
        arrivals = []
        for k, size in enumerate(SIZES):
            rpc += 1
            row(iteration=it, rank=0, role="worker", kind="send", op="push_request", peer=1, rpc=rpc, message=rpc,
                bytes=size, tensor=k, start_ns=t, end_ns=t + ISSUE)
            row(iteration=it, rank=1, role="server", kind="recv", op="push_request", peer=0, rpc=rpc, message=rpc,
                bytes=size, tensor=k, start_ns=t + ISSUE + 30 * US, end_ns=t + ISSUE + 30 * US)
            row(iteration=it, rank=1, role="server", kind="send", op="push_response", peer=0, rpc=rpc,
                message=10_000 + rpc, start_ns=t + ISSUE + 60 * US, end_ns=t + ISSUE + 70 * US)
            arrivals.append((rpc, k, t + ISSUE + 100 * US))
            t += ISSUE
        # the loop takes the acks in arrival order: a busy loop's at once when free, an idle one's after its wake-up
        for rpc_k, k, t1 in arrivals:
            row(iteration=it, rank=0, role="worker", kind="recv", op="push_response", peer=1, rpc=rpc_k,
                message=10_000 + rpc_k, start_ns=t1, end_ns=t1)
            t = max(t, t1 + w) if t1 >= t else t
            row(iteration=it, rank=0, role="worker", kind="compute", op="ack", rpc=rpc_k, tensor=k, start_ns=t, end_ns=t + HANDLE)
            t += HANDLE
            rpc += 1
            row(iteration=it, rank=0, role="worker", kind="send", op="pull_request", peer=1, rpc=rpc, message=rpc,
                tensor=k, start_ns=t, end_ns=t + ISSUE)
            t += ISSUE
            t1 = t + 300 * US
            row(iteration=it, rank=1, role="server", kind="recv", op="pull_request", peer=0, rpc=rpc, message=rpc,
                tensor=k, start_ns=t + 100 * US, end_ns=t + 100 * US)
            row(iteration=it, rank=1, role="server", kind="send", op="pull_response", peer=0, rpc=rpc,
                message=10_000 + rpc, bytes=SIZES[k], tensor=k, start_ns=t + 200 * US, end_ns=t + 250 * US)
            row(iteration=it, rank=0, role="worker", kind="recv", op="pull_response", peer=1, rpc=rpc,
                message=10_000 + rpc, bytes=SIZES[k], tensor=k, start_ns=t1, end_ns=t1)
            t = t1 + w
            row(iteration=it, rank=0, role="worker", kind="compute", op="apply", rpc=rpc, tensor=k, start_ns=t, end_ns=t + HANDLE)
            t += HANDLE
    return out


META = {"source": "capture", "job": "ps", "model": "lenet5", "workers": 1, "servers": 1, "sync": True,
        "ranks": {"0": {"rpc_round_trip_ns": 800_000.0}}}


def test_the_waits_split_into_a_busy_loop_s_and_an_idle_loop_s():
    log = event_log_from_rows(rows(), metadata=META)
    waits = [w for w in response_waits(log) if w["iteration"] == 1]
    acks = [w for w in waits if w["kind"] == "push_response"]
    # ack 1 arrives 100 us into push 2's issue and waits for pushes 2-4 (4 ISSUE - ISSUE - 100 us)
    assert [w["idle"] for w in acks] == [False] * 4
    assert acks[0]["wait_ns"] == 3 * ISSUE - 100 * US
    pulls = [w for w in waits if w["kind"] == "pull_response"]
    assert all(w["idle"] and w["wait_ns"] == WAKE for w in pulls)


def test_the_fit_is_the_idle_loop_s_mean_wait_without_the_warm_up():
    log = event_log_from_rows(rows(), metadata=META)
    fit = wakeup_fit(log)
    assert fit == {"wakeup_ns": WAKE, "wakeup_median_ns": WAKE, "idle_responses": 2 * 4, "busy_responses": 2 * 4}
    meta = client_cost_metadata(log)
    assert meta["wakeup_ns"] == WAKE and meta["idle_responses"] == 8
    # the mean, not the median: one slow wake-up in the counted iterations counts in full
    slow = rows()
    late = max(i for i, r in enumerate(slow) if r["op"] == "apply" and r["iteration"] == 2)
    slow[late] = dict(slow[late], start_ns=slow[late]["start_ns"] + 900 * US, end_ns=slow[late]["end_ns"] + 900 * US)
    fit = wakeup_fit(event_log_from_rows(slow, metadata=META))
    assert fit["wakeup_ns"] == pytest.approx(WAKE + 900 * US / 8) and fit["wakeup_median_ns"] == WAKE
    # a loop that is never idle (only the acks, which all arrive at a busy loop) has a wake-up of 0
    busy = [r for r in rows() if not (r["kind"] == "recv" and r["op"] == "pull_response")]
    assert wakeup_fit(event_log_from_rows(busy, metadata=META)) == {"wakeup_ns": 0.0, "wakeup_median_ns": 0.0,
                                                                   "idle_responses": 0, "busy_responses": 8}
    # and a log without handled responses has none to fit
    assert wakeup_fit(event_log_from_rows([r for r in rows() if r["op"] not in ("ack", "apply")], metadata=META)) is None


def _capture(path, metadata=True):
    log = event_log_from_rows(rows(), metadata=dict(META))
    if metadata:
        log.metadata["client_cost"] = client_cost_metadata(log)
    write_event_log(log, path)
    return path


def test_replay_takes_the_wake_up_and_no_overheads_leaves_it_out(tmp_path):
    path = _capture(tmp_path / "ps.parquet")
    r = ddlsim.replay(path)
    assert r.scenario.strategy.client_cost.wakeup == f"{WAKE}ns"
    assert r.engine_document["training"]["client_cost"]["wakeup_ns"] == WAKE
    assert any(n.startswith("replay: the workers' wake-up, measured by the capture") for n in r.notes), r.notes
    off = ddlsim.replay(path, overheads=False)
    assert "client_cost" not in off.engine_document["training"] and not any("wake-up" in n for n in off.notes)
    # the replayed log: every response that reached its idle worker waits the wake-up in its queue, none less
    woken = response_waits(r.events)
    assert any(w["idle"] for w in woken)
    assert all(w["wait_ns"] == WAKE for w in woken if w["idle"])
    # without it (the same cost, wake-up 0) the replay is shorter: the next forward waits for the last pull
    # response, which reaches an idle worker (at least one wake-up per iteration, at most one per response: 8)
    cost = r.scenario.strategy.client_cost
    plain = ddlsim.replay(path, client_cost={"issue": cost.issue, "issue_ns_per_byte": cost.issue_ns_per_byte,
                                             "receive": cost.receive, "receive_ns_per_byte": cost.receive_ns_per_byte})
    assert "wakeup_ns" not in plain.engine_document["training"]["client_cost"]
    assert WAKE / 1e9 - 1e-12 <= r.iteration_time_s - plain.iteration_time_s <= 8 * WAKE / 1e9 + 1e-12


def test_a_capture_made_before_the_wake_up_was_recorded_is_fitted_from_its_rows(tmp_path):
    with_it = ddlsim.replay(_capture(tmp_path / "a.parquet"))
    old = event_log_from_rows(rows(), metadata=dict(META))
    fit = client_cost_metadata(old)
    old.metadata["client_cost"] = {k: v for k, v in fit.items() if k not in ("wakeup_ns", "wakeup_median_ns",
                                                                            "idle_responses", "busy_responses")}
    write_event_log(old, tmp_path / "b.parquet")
    before = ddlsim.replay(tmp_path / "b.parquet")
    assert "wakeup_ns" not in read_event_log(tmp_path / "b.parquet").metadata["client_cost"]
    assert before.scenario.strategy.client_cost == with_it.scenario.strategy.client_cost
    assert any(n.startswith("replay: the workers' wake-up, measured from the capture's rows") for n in before.notes)
    assert before.iteration_time_s == with_it.iteration_time_s


def test_a_zero_wake_up_changes_no_byte_of_the_output():
    base = dict(model="lenet5", workers=2, strategy="ps", servers=1, iterations=2, seed=3)
    plain = ddlsim.simulate(**base, client_cost={"issue": "30us", "receive": "20us"})
    zero = ddlsim.simulate(**base, client_cost={"issue": "30us", "receive": "20us", "wakeup": "0s"})
    assert plain.engine_document == zero.engine_document
    assert plain.events.table.equals(zero.events.table)
    woken = ddlsim.simulate(**base, client_cost={"issue": "30us", "receive": "20us", "wakeup": "500us"})
    assert woken.engine_document["training"]["client_cost"]["wakeup_ns"] == 500_000
    assert woken.iteration_time_s > plain.iteration_time_s
    # the wake-up alone is a cost: the engine gets a client cost
    assert ddlsim.simulate(**base, client_cost={"wakeup": "1ms"}).iteration_time_s > ddlsim.simulate(**base).iteration_time_s
