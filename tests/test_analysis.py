"""ddlsim.analyze.Analysis: every metric against values worked out by hand
from small logs written here (the expected numbers are in the comments and
literals, not recomputed with the implementation's formulas)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import ddlsim
from ddlsim.analyze import Analysis
from ddlsim.trace import event_log_from_rows, read_event_log, write_event_log

US = 1000  # ns per us


def hand_ps_rows(iterations: int = 2, period_us: int = 400) -> list[dict]:
    """2 workers (ranks 0, 1), 1 server (rank 2), keys 0 and 1; times in us.

    Per iteration (offset by `period_us`), worker w pushes key 1 then key 0;
    the server updates each key once both pushes are in, answers, the
    workers pull. A message is a send row [send start, send end] on the
    sender and a recv row [send end, delivery] on the receiver, so the
    Send record is at `s` and the Recv record at `r` below.
    """
    rows: list[dict] = []

    def row(kind, op, rank, start, end, deps=(), **extra):
        role = "server" if rank == 2 else "worker"
        rows.append(dict(id=len(rows), rank=rank, role=role, kind=kind, op=op, ready_ns=start * US,
                         start_ns=start * US, end_ns=end * US, deps=list(deps), **extra))
        return len(rows) - 1

    rpc = iter(range(1000))

    def msg(op, src, dst, key, it, s, mid, r, deps, rpc_id):
        size = {"push_request": 1000 + key, "push_response": 19, "pull_request": 28, "pull_response": 1003 + key}[op]
        common = dict(iteration=it, tensor=key, name=f"key{key}", bytes=size, rpc=rpc_id)
        send = row("send", op, src, s, mid, deps, peer=dst, message=len(rows), **common)
        return row("recv", op, dst, mid, r, [send], peer=src, message=send, **common)

    previous = {0: [], 1: []}
    for it in range(iterations):
        t = it * period_us
        ids = {}
        # worker 0: backward l1 [0,100], l0 [100,200]; worker 1: [0,120], [120,240]
        for w, (a, b) in ((0, (100, 200)), (1, (120, 240))):
            l1 = row("compute", "backward", w, t, t + a, previous[w], iteration=it, layer=1, name="l1")
            l0 = row("compute", "backward", w, t + a, t + b, [l1], iteration=it, layer=0, name="l0")
            ids[w] = (l1, l0)
        r = {}
        # push requests: Push_Send_Worker at s, Push_Recv_Server at r
        for (w, k, s, mid, arrive, dep) in ((0, 1, 100, 110, 130, ids[0][0]), (1, 1, 120, 130, 150, ids[1][0]), (0, 0, 200, 210, 230, ids[0][1]),
                                             (1, 0, 240, 250, 270, ids[1][1])):
            rid = next(rpc)
            r[w, k, "push"] = (rid, msg("push_request", w, 2, k, it, t + s, t + mid, t + arrive, [dep], rid))
        # updates: key 1 [150,160], key 0 [270,285]
        up1 = row("compute", "update", 2, t + 150, t + 160, [r[0, 1, "push"][1], r[1, 1, "push"][1]], iteration=it,
                  tensor=1, name="key1")
        up0 = row("compute", "update", 2, t + 270, t + 285, [r[0, 0, "push"][1], r[1, 0, "push"][1]], iteration=it,
                  tensor=0, name="key0")
        acks = {}
        for (w, k, s, mid, arrive, up) in ((0, 1, 160, 162, 170, up1), (1, 1, 162, 164, 175, up1),
                                            (0, 0, 285, 287, 290, up0), (1, 0, 287, 289, 295, up0)):
            acks[w, k] = msg("push_response", 2, w, k, it, t + s, t + mid, t + arrive, [up], r[w, k, "push"][0])
        pulls = {}
        for (w, k, s, mid, arrive) in ((0, 1, 170, 172, 180), (1, 1, 175, 177, 185), (0, 0, 290, 292, 300),
                                       (1, 0, 295, 297, 305)):
            rid = next(rpc)
            pulls[w, k] = (rid, msg("pull_request", w, 2, k, it, t + s, t + mid, t + arrive, [acks[w, k]], rid))
        last = {0: [], 1: []}
        for (w, k, s, mid, arrive) in ((0, 1, 190, 200, 210), (1, 1, 195, 205, 215), (0, 0, 310, 320, 330),
                                       (1, 0, 320, 330, 340)):
            rid, dep = pulls[w, k]
            last[w].append(msg("pull_response", 2, w, k, it, t + s, t + mid, t + arrive, [dep], rid))
        previous = last
    return rows


def hand_ps_log(**kwargs):
    return event_log_from_rows(hand_ps_rows(**kwargs), metadata={"source": "test"})


@pytest.fixture(scope="module")
def hand():
    return Analysis(hand_ps_log(), name="hand")


def overhead(analysis, name, **where):
    s = analysis.overhead_samples()
    s = s[s.overhead == name]
    for k, v in where.items():
        s = s[s[k] == v]
    return sorted(int(x) // US for x in s["value_ns"])


# ------------------------------------------------------------ SketchDLC

def test_computation_overhead_is_last_push_send_minus_previous_last_pull_recv(hand):
    # worker 0: last Push_Send_Worker of iteration 1 at 400+200, last Pull_Recv_Worker of iteration 0 at 330
    assert overhead(hand, "computation", rank=0) == [270]
    assert overhead(hand, "computation", rank=1) == [640 - 340]
    assert set(hand.overhead_samples().query("overhead == 'computation'")["iteration"]) == {1}


def test_search_overhead_is_pull_send_server_minus_pull_recv_server(hand):
    assert overhead(hand, "search", key=1) == [10, 10, 10, 10]      # 190-180, 195-185 per iteration
    assert overhead(hand, "search", key=0) == [10, 10, 15, 15]      # 310-300, 320-305


def test_synchronization_overhead_is_last_minus_first_push_recv_server(hand):
    assert overhead(hand, "synchronization", key=1) == [20, 20]     # 150-130
    assert overhead(hand, "synchronization", key=0) == [40, 40]     # 270-230


def test_update_overhead_is_first_push_send_server_minus_last_push_recv_server(hand):
    assert overhead(hand, "update", key=1) == [10, 10]              # 160-150
    assert overhead(hand, "update", key=0) == [15, 15]              # 285-270


def test_wait_overhead_is_last_minus_first_pull_recv_worker(hand):
    assert overhead(hand, "wait", rank=0) == [120, 120]             # 330-210
    assert overhead(hand, "wait", rank=1) == [125, 125]             # 340-215


def test_overheads_per_key_min_mean_max(hand):
    t = hand.sketchdlc_overheads().set_index(["overhead", "key"])
    assert t.loc[("search", 0), ["count", "min_us", "mean_us", "max_us"]].tolist() == [4, 10.0, 12.5, 15.0]
    assert t.loc[("computation", -1), ["count", "min_us", "mean_us", "max_us"]].tolist() == [2, 270.0, 285.0, 300.0]
    assert list(t.index.get_level_values(0).unique()) == ["computation", "search", "update", "synchronization", "wait"]
    g = hand.sketchdlc_global()
    assert g["search"] == pytest.approx((12.5 + 10.0) / 2)          # mean over keys of the key means
    assert g["update"] == pytest.approx(12.5)


def test_phases_and_overlap_ratio(hand):
    p = hand.phases().set_index(["rank", "iteration"])
    # worker 0, iteration 0: phase 1 from its first row (0) to the first push (100); phase 2 100..200; phase 3 100..330
    assert p.loc[(0, 0), ["phase1_s", "phase2_s", "phase3_s"]].tolist() == pytest.approx([100e-6, 100e-6, 230e-6])
    assert p.loc[(0, 0), "sketchdlc_overlap_ratio"] == pytest.approx(100 / 330)
    # iteration 1: phase 1 from the last pull of iteration 0 (330) to 500
    assert p.loc[(0, 1), ["phase1_s", "phase2_s", "phase3_s"]].tolist() == pytest.approx([170e-6, 100e-6, 230e-6])
    assert p.loc[(0, 1), "sketchdlc_overlap_ratio"] == pytest.approx(0.25)
    it = hand.iterations()
    mean = it[(it["rank"] == -1) & (it["iteration"] == 1)].iloc[0]
    # worker 1, iteration 1: phase 1 = 520 - 340 = 180
    assert mean["phase1_s"] == pytest.approx((170e-6 + 180e-6) / 2)


def test_message_sizes_tables_5_to_7(hand):
    t = hand.message_sizes("key").set_index("key")
    assert t.loc[0, ["Push_Send_bytes", "Push_Recv_bytes", "Pull_Send_bytes", "Pull_Recv_bytes"]].tolist() == [1000, 19, 28, 1003]
    assert t.loc[1, ["Push_Send_bytes", "Pull_Recv_bytes"]].tolist() == [1001, 1004]
    assert t.loc[1, "name"] == "key1"
    v = hand.message_sizes("iteration").set_index("iteration")
    assert v.loc[0, "Push_Send_MB"] == pytest.approx((1000 + 1001) / 1e6)
    assert v.loc[1, "Pull_Send_MB"] == pytest.approx(56 / 1e6)
    n = hand.message_sizes("node").set_index(["rank", "operation"])
    assert n.loc[(2, "Push_Recv_Server"), "messages_per_iteration"] == 4
    assert n.loc[(2, "Pull_Send_Server"), "bytes_per_iteration"] == 2 * 1003 + 2 * 1004


# ------------------------------------------------------------ RPC paper

def test_rpc_shares_from_hand_breakdown(hand):
    s = hand.rpc_shares().set_index("kind")
    # push RPCs per iteration: totals 70 + 55 + 90 + 55 = 270, PS_queue 20+0+40+0, PS_proc 10+10+15+15, N_tx 40+45+35+40
    assert s.loc["push", "rpcs"] == 8
    assert s.loc["push", "ps_queue_share"] == pytest.approx(60 / 270)
    assert s.loc["push", "ps_proc_share"] == pytest.approx(50 / 270)
    assert s.loc["push", "n_tx_share"] == pytest.approx(160 / 270)
    # pull RPCs: totals 40 + 40 + 40 + 45, PS_queue (the search) 10+10+10+15, N_tx 30 each
    assert s.loc["pull", "mean_total_us"] == pytest.approx(165 / 4)
    assert s.loc["pull", "ps_queue_share"] == pytest.approx(45 / 165)
    assert s.loc["all", "rpcs"] == 16
    assert s.loc["all", "n_tx_share"] == pytest.approx((2 * 160 + 2 * 120) / (2 * 270 + 2 * 165))
    c = hand.rpc_cdf("total_ns")
    pull = c[c.kind == "pull"]
    assert pull["total_ns"].tolist()[-2:] == [45 * US, 45 * US] and pull["fraction"].iloc[-1] == 1.0


def test_rpc_intervals_of_a_worker_ps_pair(hand):
    iv = hand.rpc_intervals()
    w0 = iv[(iv.worker == 0) & (iv.server == 2)]
    # worker 0's requests start at 100, 170, 200, 290, 500, 570, 600, 690
    assert (w0["interval_ns"] // US).tolist() == [70, 30, 90, 210, 70, 30, 90]


def test_concurrent_connections_per_window(hand):
    cc = hand.concurrent_connections(100 * US)
    # request arrivals: 130 150 180 185 | 230 270 | 300 305 | - | 530 550 580 585 | 630 670 | 700 705
    assert cc["window"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert cc["connections"].tolist() == [2, 2, 2, 0, 2, 2, 2]
    assert cc["requests"].tolist() == [4, 2, 2, 0, 4, 2, 2]
    fine = hand.concurrent_connections(25 * US)
    # 130 -> 5 (w0), 150 -> 6 (w1), 180, 185 -> 7 (both), 230 -> 9, 270 -> 10, 300, 305 -> 12
    assert fine["connections"].tolist()[:8] == [1, 1, 2, 0, 1, 1, 0, 2]
    assert hand.concurrent_connections()["connections"].max() == 2  # 1 ms default: everything in one window
    with pytest.raises(ValueError):
        hand.concurrent_connections(0)


def skewed_log():
    """Pushes only: key 0 (100 B) 6 times, key 1 (1000 B) 3 times, key 2 (10 B) once."""
    rows = []
    t = 0
    for key, size, count in ((0, 100, 6), (1, 1000, 3), (2, 10, 1)):
        for _ in range(count):
            send = dict(id=len(rows), iteration=0, rank=0, role="worker", kind="send", op="push_request", tensor=key,
                        name=f"k{key}", peer=1, message=len(rows), bytes=size, start_ns=t, end_ns=t + 5)
            rows.append(send)
            rows.append(dict(id=len(rows), iteration=0, rank=1, role="server", kind="recv", op="push_request", tensor=key,
                             name=f"k{key}", peer=0, message=send["id"], bytes=size, start_ns=t + 5, end_ns=t + 10))
            t += 10
    return event_log_from_rows(rows)


def test_hot_keys_and_top_k_share():
    a = Analysis(skewed_log())
    hot = a.hot_keys()
    assert hot["key"].tolist() == [0, 1, 2]
    assert hot["update_share"].tolist() == pytest.approx([0.6, 0.3, 0.1])
    assert hot["cumulative_share"].tolist() == pytest.approx([0.6, 0.9, 1.0])
    assert a.top_k_share(2) == pytest.approx(0.9)


def test_offload_estimate_takes_the_most_operations_per_byte_that_fit():
    a = Analysis(skewed_log())
    est = a.offload_estimate(150)
    # ops per byte: key 2: 1/10, key 0: 6/100, key 1: 3/1000; 150 B hold key 2 (10 B) and key 0 (100 B)
    assert est["key"].tolist() == [2, 0, 1]
    assert est["offloaded"].tolist() == [True, True, False]
    s = est.attrs["summary"]
    assert s["keys_offloaded"] == 2 and s["memory_used_bytes"] == 110
    assert s["operations_removed_share"] == pytest.approx(7 / 10)
    assert s["bytes_removed_share"] == pytest.approx((10 + 600) / (10 + 600 + 3000))
    assert a.offload_estimate(5).attrs["summary"]["keys_offloaded"] == 0


# ------------------------------------------------------------ collectives

def collective_log(ready=True):
    meta = {"scenario": {"network": {"bandwidth": "10Gbps"}}}
    rows = [
        dict(id=0, iteration=0, rank=0, role="worker", kind="collective", op="allreduce", collective=0, group=3,
             coll_type="allreduce", algorithm="ring", bytes=1_000_000, ready_ns=0 if ready else None, start_ns=0,
             end_ns=1000 * US),
        dict(id=1, iteration=0, rank=1, role="worker", kind="collective", op="allreduce", collective=0, group=3,
             coll_type="allreduce", algorithm="ring", bytes=1_000_000, ready_ns=0 if ready else None, start_ns=200 * US,
             end_ns=1000 * US),
    ]
    return event_log_from_rows(rows, metadata=meta)


def test_collective_time_bus_bandwidth_and_queueing():
    c = Analysis(collective_log()).collectives().iloc[0]
    # 1 MB in 1 ms: 8 Gbit/s algorithm bandwidth; bus = x 2(n-1)/n = x 1 for n = 2; link 10 Gbit/s
    assert c["time_ns"] == 1000 * US
    assert c["algbw_Gbps"] == pytest.approx(8.0)
    assert c["busbw_Gbps"] == pytest.approx(8.0)
    assert c["link_Gbps"] == 10.0 and c["busbw_over_link"] == pytest.approx(0.8)
    assert c["queue_mean_ns"] == 100 * US and c["queue_max_ns"] == 200 * US
    g = Analysis(collective_log()).collectives_by_group()
    assert g["group"].tolist() == [3] and g["instances"].tolist() == [1]


def test_collectives_without_ready_times_say_so():
    a = Analysis(collective_log(ready=False))
    c = a.collectives()
    assert c["queue_mean_ns"].isna().all()
    assert "ready_ns unknown" in c.attrs["note"]


# ------------------------------------------------------------ critical path

def path_rows(unknown_deps=False):
    """rank 0: A [0,10], B [10,30] after A; rank 1: C [0,5], message D/E to
    rank 0 (send [5,15], recv [15,40]); F on rank 0 [40,50] after B and E;
    G on rank 1 [0,45], unrelated. F ends last; it waited for E (40 > 30)."""
    def r(i, rank, kind, op, s, e, deps, **x):
        return dict(id=i, iteration=0, rank=rank, role="worker", kind=kind, op=op, name=op, start_ns=s, end_ns=e,
                    deps=deps, **x)
    return [
        r(0, 0, "compute", "A", 0, 10, []),
        r(1, 0, "compute", "B", 10, 30, [0]),
        r(2, 1, "compute", "C", 0, 5, None if unknown_deps else []),
        r(3, 1, "send", "D", 5, 15, [2], peer=0, message=3),
        r(4, 0, "recv", "E", 15, 40, [3], peer=1, message=3),
        r(5, 0, "compute", "F", 40, 50, [1, 4]),
        r(6, 1, "compute", "G", 0, 45, []),
    ]


def test_critical_path_follows_the_latest_dependency():
    path = Analysis(event_log_from_rows(path_rows())).critical_path()
    assert path["op"].tolist() == ["C", "D", "E", "F"]
    assert path["step"].tolist() == [0, 1, 2, 3]
    assert path["duration_ns"].tolist() == [5, 10, 25, 10]
    assert path["share"].tolist() == pytest.approx([0.1, 0.2, 0.5, 0.2])  # of the 50 ns iteration
    assert path.attrs["stops"] == ["row with no dependencies"]
    summary = Analysis(event_log_from_rows(path_rows())).critical_path_summary()
    assert summary.iloc[0][["op", "time_ns"]].tolist() == ["E", 25]


def test_critical_path_starts_from_the_last_operation_not_an_iteration_marker():
    # a capture's iteration marker spans the iteration (here [0, 60]) and waits for nothing: starting there, the
    # path was that one marker row (fixed: markers are passed over when the iteration has other rows)
    rows = path_rows() + [dict(id=7, iteration=0, rank=0, role="worker", kind="marker", op="iteration", name="iteration 0",
                               start_ns=0, end_ns=60, deps=[])]
    path = Analysis(event_log_from_rows(rows)).critical_path()
    assert path["op"].tolist() == ["C", "D", "E", "F"]


def test_critical_path_crosses_a_message_whose_recv_records_no_deps():
    # as a capture logs it: the recv E names no deps, only its message; the path must still reach D and C
    rows = path_rows()
    rows[4] = {**rows[4], "deps": []}
    path = Analysis(event_log_from_rows(rows)).critical_path()
    assert path["op"].tolist() == ["C", "D", "E", "F"]
    assert path["wait_ns"].tolist()[2] == 0  # E starts at 15, when its send D ended


def test_critical_path_with_unknown_deps_says_where_it_stops():
    a = Analysis(event_log_from_rows(path_rows(unknown_deps=True)))
    path = a.critical_path()
    assert path["op"].tolist() == ["C", "D", "E", "F"]
    assert "unknown" in path.attrs["note"] and path.attrs["note"] in a.notes


def test_critical_path_of_the_ps_log_ends_at_the_last_pull(hand):
    path = hand.critical_path()
    last = path[path.iteration == 0].iloc[-1]
    assert (last["kind"], last["op"], last["rank"], last["end_ns"]) == ("recv", "pull_response", 1, 340 * US)
    # it went back through the update of key 0 and worker 1's backward of layer 0
    assert {"update", "backward"} <= set(path[path.iteration == 0]["op"])


# ------------------------------------------------------------ compare

def test_compare_names_the_layer_that_changed():
    rows = path_rows()
    slower = [dict(r) for r in rows]
    slower[5]["end_ns"] = 90  # F takes 50 ns instead of 10
    a, b = Analysis(event_log_from_rows(rows), "a"), Analysis(event_log_from_rows(slower), "b")
    c = a.compare(b)
    it = c[c.scope == "iteration"].iloc[0]
    assert (it["a_s"], it["b_s"]) == pytest.approx((50e-9, 90e-9))
    assert c.attrs["largest"][0]["item"] == "F F"
    # F ran on one of the 2 workers in the one iteration: 40 ns / 2 per worker-iteration
    assert c.attrs["largest"][0]["diff_s"] == pytest.approx(20e-9)


# ------------------------------------------------------------ edge cases, files

def test_logs_without_ps_rows_give_notes_not_errors():
    a = Analysis(collective_log())
    for method in (a.overhead_samples, a.sketchdlc_overheads, a.rpc_latency, a.rpc_shares, a.rpc_intervals,
                   a.concurrent_connections, a.hot_keys, a.message_sizes, a.rpc_cdf):
        frame = method()
        assert frame.empty
    assert any("parameter-server" in n for n in a.notes)
    assert a.offload_estimate(1000).attrs["summary"] == {}
    assert a.headline()["notes"]


def test_one_iteration_is_noted():
    a = Analysis(hand_ps_log(iterations=1))
    it = a.iterations()
    assert "one iteration" in it.attrs["note"]
    samples = a.overhead_samples()
    assert "computation" not in set(samples["overhead"]) and "two consecutive iterations" in samples.attrs["note"]
    assert len(a.sketchdlc_overheads())  # the other overheads are there


def test_log_without_iterations():
    rows = [dict(id=0, rank=0, role="worker", kind="compute", op="x", start_ns=0, end_ns=5)]
    a = Analysis(event_log_from_rows(rows))
    assert a.iterations().empty and "iteration" in a.iterations().attrs["note"]
    assert a.critical_path().empty
    assert a.headline()["rows"] == 1


@pytest.fixture(scope="module")
def simulated_ps():
    return ddlsim.simulate(model="resnet50", workers=4, strategy="ps", servers=2, iterations=2, jitter=0.05, seed=3)


def all_tables(a: Analysis) -> dict[str, pd.DataFrame]:
    return {
        "iterations": a.iterations(), "critical_path": a.critical_path(), "overheads": a.sketchdlc_overheads(),
        "samples": a.overhead_samples(), "sizes": a.message_sizes("key"), "volume": a.message_sizes("node"),
        "rpc": a.rpc_latency(), "shares": a.rpc_shares(), "intervals": a.rpc_intervals(),
        "connections": a.concurrent_connections(), "hot": a.hot_keys(), "offload": a.offload_estimate(10**6),
        "collectives": a.collectives(),
    }


@pytest.mark.parametrize("strategy", ["ps", "ring"])
def test_same_results_after_a_parquet_round_trip(simulated_ps, strategy, tmp_path):
    run = simulated_ps if strategy == "ps" else ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=2,
                                                               jitter=0.05, seed=3, trace_detail="step")
    path = tmp_path / "events.parquet"
    write_event_log(run.events, path)
    before, after = all_tables(Analysis(run.events)), all_tables(Analysis(read_event_log(path)))
    for name in before:
        pd.testing.assert_frame_equal(before[name], after[name], obj=name)
    assert not before["iterations"].empty and not before["critical_path"].empty
    assert not before["collectives" if strategy == "ring" else "rpc"].empty
    a, b = Analysis(run.events), Analysis(path)
    pd.testing.assert_frame_equal(a.compare(a), b.compare(b))
    assert b.name == f"{tmp_path.name}/events.parquet"


def test_simulated_ps_log_is_consistent_with_its_own_rows(simulated_ps):
    a = Analysis(simulated_ps.events)
    assert len(a.rpc_latency()) == 4 * 161 * 2 * 2  # push + pull per worker, key and iteration
    hot = a.hot_keys()
    assert hot["updates"].eq(4 * 2).all() and hot["cumulative_share"].iloc[-1] == pytest.approx(1.0)
    h = a.headline(switch_memory_bytes=10**6)
    assert h["workers"] == 4 and h["servers"] == 2 and h["iterations"] == 2
    assert 0 < h["offload"]["operations_removed_share"] <= 1
    assert not math.isnan(h["iteration_time_s"])


def test_ring_collectives_against_the_link_rate():
    r = ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=1)
    c = Analysis(r.events).collectives()
    assert len(c) == 161 and (c["ranks"] == 4).all()
    assert (c["link_Gbps"] == 10.0).all()
    assert (c["busbw_over_link"] <= 1.0 + 1e-9).all() and c["busbw_over_link"].max() > 0.9  # big tensors near the link
    steps = ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=1, trace_detail="step")
    s = Analysis(steps.events).collectives()
    assert len(s) == len(c) and np.allclose(s["bytes"], c["bytes"], rtol=1e-3)


def test_sketchdlc_traces_give_the_same_overheads(simulated_ps, tmp_path):
    """A capture in SketchDLC's text format (microsecond records) is analysed
    like the simulated log it came from: every overhead within the 1 us
    resolution of the two records it subtracts."""
    from ddlsim.trace import write_sketchdlc

    write_sketchdlc(simulated_ps.events, tmp_path / "trace")
    captured = Analysis(tmp_path / "trace")
    assert captured.log.metadata["source"] == "sketchdlc"
    key = ["overhead", "rank", "key", "iteration"]
    a = Analysis(simulated_ps.events).overhead_samples().sort_values(key).reset_index(drop=True)
    b = captured.overhead_samples().sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[key], b[key])
    assert (a["value_ns"] - b["value_ns"]).abs().max() <= 1000
    assert len(captured.rpc_latency()) == len(Analysis(simulated_ps.events).rpc_latency())


def test_tables_are_copies_the_caller_may_change(hand):
    path = hand.critical_path()
    path["op"] = "changed"
    rpc = hand.rpc_latency()
    rpc.loc[:, "total_ns"] = 0
    assert "changed" not in set(hand.critical_path()["op"]) and hand.rpc_latency()["total_ns"].min() > 0
    assert hand.critical_path_summary()["op"].iloc[0] != "changed"


def test_an_empty_log_gives_empty_tables_and_notes(tmp_path):
    from ddlsim.cli.analyze_command import analyze_to_directory
    from ddlsim.trace import empty_event_log

    a = Analysis(empty_event_log())
    for table in all_tables(a).values():
        assert table.empty
    assert a.compare(Analysis(empty_event_log())).query("scope == 'layer'").empty
    assert a.headline()["rows"] == 0 and a.notes
    analyze_to_directory(a, tmp_path)
    assert "no row has an iteration number" in (tmp_path / "report.html").read_text()
