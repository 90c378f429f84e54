"""Analysis from raw rows, checked against independent oracles: a
per-nanosecond timeline for the interval unions, and hand-derived RPC
breakdowns from the raw timestamps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from trace_logs import US, ps_iteration_log, random_log

from ddlsim.analyze import covered, iteration_table, rank_iteration_table, rpc_table, union_length
from ddlsim.trace import event_log_from_rows

# --------------------------------------------------------------------------
# interval unions


def timeline(starts, ends, lo, hi) -> np.ndarray:
    """Per-nanosecond occupancy on [lo, hi): the brute-force oracle."""
    busy = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts, ends):
        busy[max(s, lo) - lo: max(min(e, hi), lo) - lo] = True
    return busy


@pytest.mark.parametrize("seed", range(20))
def test_union_and_window_coverage_match_a_per_nanosecond_timeline(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    starts = rng.integers(0, 500, n)
    ends = starts + rng.integers(-20, 80, n)  # some empty / backwards intervals count for nothing
    busy = timeline(starts, ends, 0, 700)
    assert union_length(starts, ends) == busy.sum()
    a = rng.integers(0, 600, 8)
    b = a + rng.integers(0, 200, 8)
    expected = [busy[x:y].sum() for x, y in zip(a, b)]
    assert covered(starts, ends, a, b).tolist() == expected


def oracle_rank_table(log) -> pd.DataFrame:
    """Per (iteration, rank) breakdown from a per-nanosecond timeline, written
    independently of ddlsim.analyze."""
    frame = log.to_pandas()
    clocks = log.metadata.get("clocks", {})
    offset = frame["host"].map(lambda h: clocks.get(str(h), {}).get("offset_ns", 0)).to_numpy()
    frame["s"] = frame["start_ns"].to_numpy() + offset
    frame["e"] = frame["end_ns"].to_numpy() + offset
    lo, hi = int(frame["s"].min()), int(frame["e"].max())
    ends = {}
    for iteration in sorted(frame.loc[frame["iteration"] >= 0, "iteration"].unique()):
        ends[iteration] = max(int(frame.loc[frame["iteration"] == iteration, "e"].max()), max(ends.values(), default=lo))
    windows, previous = [], lo
    for iteration, end in ends.items():
        windows.append((iteration, previous, end))
        previous = end
    out = []
    for rank in sorted(frame["rank"].unique()):
        mine = frame[frame["rank"] == rank]
        compute = mine[mine["kind"] == "compute"]
        comm = mine[mine["kind"].isin(["send", "recv", "collective"])]
        c = timeline(compute["s"], compute["e"], lo, hi)
        m = timeline(comm["s"], comm["e"], lo, hi)
        for iteration, a, b in windows:
            cw, mw = c[a - lo: b - lo], m[a - lo: b - lo]
            out.append(dict(iteration=iteration, rank=rank, role=mine["role"].iloc[0], start_ns=a, end_ns=b,
                            compute_ns=cw.sum(), communication_ns=mw.sum(), overlap_ns=(cw & mw).sum(),
                            exposed_communication_ns=(mw & ~cw).sum(), idle_ns=(~cw & ~mw).sum()))
    return pd.DataFrame(out).sort_values(["iteration", "rank"]).reset_index(drop=True)


@pytest.mark.parametrize("seed", range(8))
def test_rank_iteration_table_matches_the_timeline_oracle(seed):
    offsets = {0: 700, 1: -250} if seed % 2 else None
    log = random_log(seed, rows=120, ranks=4, iterations=1 + seed % 4, offsets=offsets)
    got = rank_iteration_table(log)
    expected = oracle_rank_table(log)
    assert len(got) == len(expected) > 0
    for column in expected.columns:
        assert got[column].tolist() == expected[column].tolist(), column


def test_iteration_table_is_the_mean_over_workers_of_the_oracle():
    log = random_log(11, rows=160, ranks=5, iterations=3)
    oracle = oracle_rank_table(log)
    workers = oracle[oracle["role"] == "worker"]
    table = iteration_table(log)
    assert table["iteration"].tolist() == [0, 1, 2]
    for part in ("compute", "communication", "overlap", "exposed_communication", "idle"):
        expected = workers.groupby("iteration")[f"{part}_ns"].mean().to_numpy() / 1e9
        assert np.allclose(table[f"{part}_s"].to_numpy(), expected, rtol=0, atol=1e-15), part
    window = oracle.drop_duplicates("iteration")
    assert np.allclose(table["time_s"], (window["end_ns"] - window["start_ns"]).to_numpy() / 1e9)
    assert np.allclose(table["overlap_ratio"], table["overlap_s"] / table["time_s"])


def test_iteration_table_of_a_hand_made_log():
    # worker 0: compute [0, 100); sends [60, 90) and recv [150, 200); collective [180, 260)
    # server 1: recv [90, 150)
    rows = [
        dict(id=0, iteration=0, rank=0, role="worker", kind="compute", op="backward", start_ns=0, end_ns=100),
        dict(id=1, iteration=0, rank=0, role="worker", kind="send", op="push_request", peer=1, message=1,
             start_ns=60, end_ns=90),
        dict(id=2, iteration=0, rank=1, role="server", kind="recv", op="push_request", peer=0, message=1,
             start_ns=90, end_ns=150),
        dict(id=3, iteration=0, rank=1, role="server", kind="send", op="push_response", peer=0, message=2,
             start_ns=150, end_ns=150),
        dict(id=4, iteration=0, rank=0, role="worker", kind="recv", op="push_response", peer=1, message=2,
             start_ns=150, end_ns=200),
        dict(id=5, iteration=0, rank=0, role="worker", kind="collective", op="allreduce", coll_type="allreduce",
             start_ns=180, end_ns=260),
        dict(id=6, iteration=0, rank=0, role="worker", kind="barrier", op="barrier", start_ns=260, end_ns=300),
    ]
    table = iteration_table(event_log_from_rows(rows)).iloc[0]
    assert table["time_s"] * 1e9 == pytest.approx(300)
    assert table["compute_s"] * 1e9 == pytest.approx(100)
    assert table["communication_s"] * 1e9 == pytest.approx(30 + 110)  # [60, 90) + [150, 260)
    assert table["overlap_s"] * 1e9 == pytest.approx(30)
    assert table["exposed_communication_s"] * 1e9 == pytest.approx(110)
    assert table["idle_s"] * 1e9 == pytest.approx(300 - 100 - 110)  # the barrier wait is idle
    server = rank_iteration_table(event_log_from_rows(rows)).iloc[1]
    assert (server["rank"], server["communication_ns"], server["compute_ns"]) == (1, 60, 0)


def test_tables_of_logs_without_iterations_are_empty():
    log = event_log_from_rows([dict(id=0, rank=0, role="worker", kind="compute", op="x", start_ns=0, end_ns=5)])
    assert iteration_table(log).empty and rank_iteration_table(log).empty


# --------------------------------------------------------------------------
# RPC breakdown, expectations derived by hand from the raw timestamps


def push_pull_rows(worker_shift: int = 0) -> list[dict]:
    """Worker 0 / server 1: a push (server update in between, worker
    processing the response) and a pull. ``worker_shift`` moves every time
    recorded on the worker's host (host 0) by that much."""
    w = worker_shift

    def row(**r):
        if r["rank"] == 0:
            for key in ("start_ns", "end_ns", "ready_ns"):
                if r.get(key) is not None:
                    r[key] += w
        return r

    return [
        # push: request sent 100..130, in the server's queue from 160
        row(id=0, iteration=0, rank=0, role="worker", kind="send", op="push_request", peer=1, message=0, rpc=10,
            tensor=2, bytes=4000, start_ns=100, end_ns=130, deps=[]),
        row(id=1, iteration=0, rank=1, role="server", kind="recv", op="push_request", peer=0, message=0, rpc=10,
            tensor=2, bytes=4000, start_ns=130, end_ns=160, deps=None),
        row(id=2, iteration=0, rank=1, role="server", kind="compute", op="update", tensor=2, start_ns=175, end_ns=215,
            deps=[1]),
        row(id=3, iteration=0, rank=1, role="server", kind="send", op="push_response", peer=0, message=1, rpc=10,
            tensor=2, bytes=16, start_ns=220, end_ns=225, deps=[2]),
        row(id=4, iteration=0, rank=0, role="worker", kind="recv", op="push_response", peer=1, message=1, rpc=10,
            tensor=2, bytes=16, start_ns=225, end_ns=250, deps=None),
        row(id=5, iteration=0, rank=0, role="worker", kind="compute", op="handle_response", rpc=10, start_ns=258,
            end_ns=261, deps=[4]),
        # pull: request 300..310, arrives 330; response sent at 345 (no processing row); arrives 400
        row(id=6, iteration=0, rank=0, role="worker", kind="send", op="pull_request", peer=1, message=2, rpc=11,
            tensor=2, bytes=24, start_ns=300, end_ns=310, deps=[]),
        row(id=7, iteration=0, rank=1, role="server", kind="recv", op="pull_request", peer=0, message=2, rpc=11,
            tensor=2, bytes=24, start_ns=310, end_ns=330, deps=None),
        row(id=8, iteration=0, rank=1, role="server", kind="send", op="pull_response", peer=0, message=3, rpc=11,
            tensor=2, bytes=4000, start_ns=345, end_ns=380, deps=[7]),
        row(id=9, iteration=0, rank=0, role="worker", kind="recv", op="pull_response", peer=1, message=3, rpc=11,
            tensor=2, bytes=4000, start_ns=380, end_ns=400, deps=None),
        # a push whose response was never logged
        row(id=10, iteration=1, rank=0, role="worker", kind="send", op="push_request", peer=1, message=4, rpc=12,
            tensor=0, bytes=8, start_ns=500, end_ns=510, deps=[]),
    ]


EXPECTED_RPCS = [
    # push: t0 = 100, arrival 160, update 175..215, t1 = 250, worker handling 258..261
    #   PS_queue = 175 - 160 = 15, PS_proc = 215 - 175 = 40,
    #   N_tx = (250 - 100) - 15 - 40 = 95  (= 160 - 100 + 250 - 215),
    #   W_queue = 258 - 250 = 8, W_proc = 261 - 258 = 3, total = 150 + 8 + 3 = 161
    dict(rpc=10, kind="push", worker=0, server=1, iteration=0, tensor=2, request_bytes=4000, response_bytes=16,
         t0_ns=100, t1_ns=250, total_ns=161, w_proc_ns=3, w_queue_ns=8, ps_proc_ns=40, ps_queue_ns=15, n_tx_ns=95),
    # pull: t0 = 300, arrival 330, response leaves at 345, t1 = 400
    #   PS_queue = 345 - 330 = 15, PS_proc = 0, N_tx = 100 - 15 = 85, no worker handling
    dict(rpc=11, kind="pull", worker=0, server=1, iteration=0, tensor=2, request_bytes=24, response_bytes=4000,
         t0_ns=300, t1_ns=400, total_ns=100, w_proc_ns=0, w_queue_ns=0, ps_proc_ns=0, ps_queue_ns=15, n_tx_ns=85),
    # no response: only t0 is known
    dict(rpc=12, kind="push", worker=0, server=1, iteration=1, tensor=0, request_bytes=8, response_bytes=None,
         t0_ns=500, t1_ns=None, total_ns=None, w_proc_ns=None, w_queue_ns=None, ps_proc_ns=None, ps_queue_ns=None,
         n_tx_ns=None),
]


def records(table: pd.DataFrame) -> list[dict]:
    return [{k: (None if pd.isna(v) else v) for k, v in row.items()} for row in table.to_dict("records")]


def test_rpc_breakdown_from_raw_timestamps():
    table = rpc_table(event_log_from_rows(push_pull_rows()))
    assert records(table) == EXPECTED_RPCS
    assert str(table["n_tx_ns"].dtype) == "Int64"


def test_rpc_breakdown_is_independent_of_the_hosts_clocks():
    # the worker's host runs 1 s ahead; its offset brings it back to the reference clock
    shift = 1_000_000_000
    log = event_log_from_rows(push_pull_rows(worker_shift=shift),
                              metadata={"clocks": {"0": {"offset_ns": -shift, "domain": "worker"}}})
    assert records(rpc_table(log)) == EXPECTED_RPCS


def test_rpc_breakdown_prefers_server_rows_tagged_with_the_rpc():
    rows = push_pull_rows()
    rows.append(dict(id=11, iteration=0, rank=1, role="server", kind="compute", op="lookup", rpc=11,
                     start_ns=333, end_ns=340))  # the pull's processing
    pull = records(rpc_table(event_log_from_rows(rows)))[1]
    # PS_queue = 333 - 330 = 3, PS_proc = 340 - 333 = 7, N_tx = 100 - 10 = 90
    assert (pull["ps_queue_ns"], pull["ps_proc_ns"], pull["n_tx_ns"], pull["total_ns"]) == (3, 7, 90, 100)


def test_rpc_breakdown_of_the_ps_iteration():
    table = rpc_table(ps_iteration_log()).set_index("rpc")
    assert len(table) == 10
    push = table.loc[0]  # worker 0, tensor 1: sent at 100 us, arrives 150, update 170..180, ack arrives 210
    assert (push["kind"], push["worker"], push["server"], push["tensor"]) == ("push", 0, 2, 1)
    assert push["ps_queue_ns"] == 20 * US and push["ps_proc_ns"] == 10 * US
    assert push["n_tx_ns"] == (210 - 100 - 30) * US and push["total_ns"] == 110 * US
    pull = table.loc[4]  # sent 210, arrives 230, response leaves 232, arrives 270
    assert (pull["ps_queue_ns"], pull["ps_proc_ns"], pull["n_tx_ns"]) == (2 * US, 0, 58 * US)
    assert pd.isna(table.loc[8]["total_ns"])  # iteration 1's push has no ack in the log
    # the identity of the paper holds for every complete RPC
    done = table.dropna()
    assert (done["total_ns"] == done["n_tx_ns"] + done["ps_queue_ns"] + done["ps_proc_ns"]
            + done["w_queue_ns"] + done["w_proc_ns"]).all()


def test_rpc_table_of_a_log_without_rpcs_is_empty():
    table = rpc_table(random_log(2))
    assert table.empty and "n_tx_ns" in table.columns


def test_analysis_takes_a_table_or_dataframe_too():
    log = event_log_from_rows(push_pull_rows())
    assert records(rpc_table(log.to_pandas())) == EXPECTED_RPCS
    assert iteration_table(log.table).equals(iteration_table(log))
