"""A PS capture's messages replayed with their own measured transport times, message for message, the capture's
iteration k for replayed iteration k (in turn after the last) (``--message-times measured``, the default; docs/validation.md, "PS: messages
that are not alike"), the table the capture's rows give (:func:`ddlsim.simulation.overheads.message_latency_table`),
the scenario field ``strategy.message_latency`` and its budget. The engine's closed forms are in
crates/ddlsim-core/tests/message_latency.rs."""

from __future__ import annotations

import numpy as np
import pytest

import ddlsim
from ddlsim.errors import DdlsimError
from ddlsim.simulation import budget
from ddlsim.simulation.overheads import message_latency_table, training_message_latency
from ddlsim.trace import event_log_from_rows, read_event_log

from test_cli import ddlsim as cli
from test_ps_message_latency import SIZES, US, metadata, ps_capture, ps_rows

K = 1  # ns per byte: 8 Gbit/s, above the link model's 10 Gbit/s assumption's share


def varied_rows(iterations=4, issue=1_000 * US):
    """One worker's PS capture whose every message took its own time: 2 ms, plus 1 ns per byte, plus
    :func:`extra_of` (300 us per tensor index, and in iteration 2 the pull requests, in iteration 3 the push
    responses, later still); the server records on a skewed clock.
    Built by rewriting the rows ps_rows makes for a constant latency: each message's arrival moves by its extra,
    and every later row of the iteration with it."""
    rows = ps_rows(workers=1, iterations=iterations, per_byte=K, issue=issue)
    shift = {}
    out = []
    for row in rows:
        it = row["iteration"]
        moved = shift.get(it, 0)
        row = dict(row)
        if row["kind"] == "recv" and row.get("op", "").endswith(("_request", "_response")) and it > 0:
            extra = extra_of(it, row["op"], row["tensor"])
            moved += extra
            shift[it] = moved
        row["start_ns"] += moved
        row["end_ns"] += moved
        out.append(row)
    # iterations start where the previous ended: later iterations move by every earlier shift
    total, base = 0, {}
    for it in range(iterations):
        base[it] = total
        total += shift.get(it, 0)
    for row in out:
        row["start_ns"] += base[row["iteration"]]
        row["end_ns"] += base[row["iteration"]]
    return out


def extra_of(it, op, tensor):
    """What a message of iteration `it` took beyond 2 ms and its bytes (1 ns each)."""
    return (300 * US * tensor + (1_700 * US if it == 2 and op == "pull_request" else 0)
            + (900 * US if it == 3 and op == "push_response" else 0))


def test_the_table_holds_each_counted_message_s_time_beyond_its_bytes_and_the_smallest():
    """Oracle: the construction's own times, 2 ms + 1 ns per byte + the extra above, less the bytes at the replayed
    link's per-byte time (here 2 ns per byte, as if the link were 4 Gbit/s), less the smallest of them."""
    found = training_message_latency(event_log_from_rows(varied_rows(), metadata=metadata(workers=1)))
    assert found["iterations"] == [1, 2, 3]
    base, table = message_latency_table(found, 2.0)
    ops = ("pull_request", "pull_response", "push_request", "push_response")
    expected_keys = sorted((rank, op, t) for t in SIZES for op in ops for rank in ((0,) if op.endswith("request") else (1,)))
    assert [tuple(k) for k in table["keys"]] == expected_keys
    bytes_of = {"push_request": SIZES, "pull_response": SIZES}
    took = {(it, op, t): 2_000 * US + (K - 2.0) * bytes_of.get(op, {}).get(t, 0) + extra_of(it, op, t)
            for it in (1, 2, 3) for _, op, t in expected_keys}
    assert base == min(max(0, round(v)) for v in took.values())
    assert len(table["iterations"]) == 3 and table["first"] == 1
    for it, row in zip((1, 2, 3), table["iterations"]):
        assert row == [f"{max(0, round(took[(it, op, t)])) - base}ns" for _, op, t in expected_keys], it


def _transit_by_iteration(events, kind):
    """Per iteration: {(op, tensor): transport time} of every RPC message, ns (a capture's request from the end of
    its send row, anything else from the start)."""
    c = {k: np.asarray(events.column(k)) for k in ("iteration", "rank", "kind", "op", "message", "tensor", "peer")}
    if "clocks" in (events.metadata or {}):
        from ddlsim.trace.columns import aligned_times

        start, end = aligned_times(events)
    else:
        start, end = np.asarray(events.column("start_ns")), np.asarray(events.column("end_ns"))
    recv = {(int(m), int(r)): int(e) for m, r, e, k in zip(c["message"], c["rank"], end, c["kind"]) if k == "recv"}
    out: dict[int, dict] = {}
    for i in np.flatnonzero(c["kind"] == "send"):
        op = str(c["op"][i])
        if not op.endswith(("_request", "_response")):
            continue
        leaves = end[i] if kind == "capture" and op.endswith("_request") else start[i]
        out.setdefault(int(c["iteration"][i]), {})[(op, int(c["tensor"][i]))] = \
            recv[(int(c["message"][i]), int(c["peer"][i]))] - int(leaves)
    return out


def test_replayed_iteration_k_takes_the_capture_s_iteration_k_s_times_message_for_message(tmp_path):
    """Oracle: the capture's own rows. One worker whose requests leave 1 ms apart, so no message queues behind
    another and each replayed message takes exactly what the same message (kind and tensor) took in the capture's
    iteration of the same number (within 1 ns: the link rounds each transmission up to a whole ns, the table to the
    nearest), the counted iterations 1-3 in turn after the last (replayed iteration 4 takes 1, 0 and 6 take 3). The
    extras grow with the tensor, so the fit's per-byte slope falls below 0 and is dropped: the link is the unshaped
    10 Gbit/s, whose per-byte time the table leaves out. ``--message-times mean`` gives every message the fitted
    latency instead."""
    path = ps_capture(tmp_path / "ps.parquet", rows=varied_rows(), workers=1)
    r = ddlsim.replay(path, network="analytic", iterations=7)
    assert any("each replayed iteration takes the times of one of the capture's 3 counted iterations" in n
               for n in r.notes), r.notes
    measured = _transit_by_iteration(read_event_log(path), "capture")
    replayed = _transit_by_iteration(r.events, "replay")
    assert sorted(replayed) == list(range(7))
    for it, messages in replayed.items():
        own = measured[(it - 1) % 3 + 1]
        assert messages.keys() == own.keys(), it
        assert all(abs(messages[k] - own[k]) <= 1 for k in messages), (it, messages, own)
    again = ddlsim.replay(path, network="analytic", iterations=7, seed=12345)
    assert again.events.table.equals(r.events.table)  # no draw: the seed changes nothing
    mean = ddlsim.replay(path, network="analytic", iterations=7, message_times="mean")
    fitted = training_message_latency(read_event_log(path))["latency_ns"]
    assert mean.scenario.network.latency_ns == round(fitted) and mean.scenario.strategy.message_latency.is_empty()
    assert not any("each replayed iteration takes the times" in n for n in mean.notes)


def test_messages_that_all_took_the_same_time_replay_as_before(tmp_path):
    """A capture whose messages are alike gives a table of zeros: no table is taken, the log is the mean's."""
    path = ps_capture(tmp_path / "ps.parquet", rows=ps_rows(workers=1, per_byte=K, issue=1_000 * US), workers=1)
    a = ddlsim.replay(path, network="analytic")
    b = ddlsim.replay(path, network="analytic", message_times="mean")
    assert a.scenario.strategy.message_latency.is_empty()
    assert a.events.table.equals(b.events.table)


def test_a_bad_message_times_value_is_one_line(tmp_path):
    path = ps_capture(tmp_path / "ps.parquet", rows=varied_rows(), workers=1)
    with pytest.raises(DdlsimError, match="message times 'median': give measured or mean"):
        ddlsim.replay(path, message_times="median")
    done = cli("replay", str(path), "--message-times", "median")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "give measured or mean (--message-times)" in done.stderr
    ring = ddlsim.simulate(model="lenet5", workers=2, iterations=1, network="analytic").save(tmp_path / "ring")
    with pytest.raises(DdlsimError, match="this log is not a PS capture; leave it out"):
        ddlsim.replay(tmp_path / "ring" / "events.parquet", message_times="mean")


TABLE = {"keys": [[0, "push_request", 0], [1, "push_response", 0]], "iterations": [["1ms", "0us"], ["3ms", None]]}


@pytest.mark.parametrize("bad, says", [
    ({"keys": [[0, "push_request", 0]], "iterations": [["1ms", "2ms"]]}, "has 2 times for 1 keys"),
    ({"iterations": [[None, None]]}, "holds no time"),
    ({"keys": [[0, "push_request", 0]]}, "has keys but no iterations"),
    ({"iterations": [["-1ms"]]}, "message_latency"),
    ({"keys": [[0, "gossip", 0]], "iterations": [["1ms"]]}, "message_latency"),
])
def test_the_scenario_names_a_bad_message_latency(bad, says):
    with pytest.raises(DdlsimError, match=says):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", message_latency=bad)


def test_message_latency_with_in_network_multicast_is_refused_and_the_cli_says_so_in_one_line(tmp_path):
    with pytest.raises(DdlsimError, match="message_latency"):
        ddlsim.simulate(model="lenet5", workers=2, strategy="ps", in_network="multicast", message_latency=TABLE)
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nname = "lenet5"\n[strategy]\nkind = "ps"\n'
                        'message_latency = {keys = [[0, "push_request", 0]], iterations = [["1ms", "2ms"]]}\n')
    done = cli("simulate", str(scenario))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "invalid scenario" in done.stderr and "2 times for 1 keys" in done.stderr


def test_a_scenario_s_table_delays_exactly_its_keyed_message():
    """One worker, LeNet-5, analytic; a table keying every message, all 0 but worker 0's push of tensor 0
    (conv1.weight, the last pushed), 1 ms in the first measured iteration, 3 ms in the second, taken in turn by
    iterations 0, 1, 2, ... Once that push's exchange ends the iteration (1 ms is more than the 0.15 ms by which
    another exchange ended it), nothing else moves: odd iterations are exactly 2 ms longer than even ones."""
    base = dict(model="lenet5", workers=1, strategy="ps", iterations=8, network="analytic")
    plain = ddlsim.simulate(**base)
    keys = [[rank, op, t] for t in range(10) for op, rank in (("push_request", 0), ("push_response", 1),
                                                              ("pull_request", 0), ("pull_response", 1))]
    rows = [["1ms" if k == [0, "push_request", 0] else "0us" for k in keys],
            ["3ms" if k == [0, "push_request", 0] else "0us" for k in keys]]
    r = ddlsim.simulate(**base, message_latency={"keys": keys, "iterations": rows})
    extra = np.round((r.iterations["time_s"].to_numpy() - plain.iterations["time_s"].to_numpy()) * 1e9).astype(int)
    low = extra[0]
    assert 0 < low <= 1_000_000 and list(extra) == [low, low + 2_000_000] * 4, extra


@pytest.mark.parametrize("workers,servers", [(3, 1), (4, 2)])
def test_the_estimated_events_bound_the_engine_s_events_with_message_times(workers, servers):
    """Each message with its own time arrives on an event of its own: the estimate counted none of them and fell
    short by the transfers (LeNet-5, 3 workers, 1 server, 2 iterations: 120 of them)."""
    for table, tight in (({"iterations": [["1us", "5us"], ["2us"]]}, True),
                         ({"iterations": [["1us", "5us", "0us"], ["0us"]]}, False)):  # a time of 0: no event
        seen = []
        with budget.run_control(force=True, on_start=lambda sc, est: seen.append(est)):
            r = ddlsim.simulate({"model": {"name": "lenet5"}, "workers": workers, "iterations": 2,
                                 "network": {"fidelity": "analytic"},
                                 "strategy": {"kind": "ps", "servers": servers, "message_latency": table}})
        (est,) = seen
        assert r.stats["events"] <= est.events, (est.events, r.stats["events"])
        if tight:
            assert est.events <= r.stats["events"] * 1.02 + 8, (est.events, r.stats["events"])


def test_in_a_log_of_two_jobs_the_times_stay_with_their_job():
    """Two PS jobs on one analytic star, hosts apart; the second has a table (its ops come after the first's in the
    merged graph, so its delays must move with them). The first job runs as it does without the table anywhere, and
    the second exactly as it does alone with its table."""
    table = {"iterations": [["1ms", "0us"], ["3ms"]]}
    def run(second_table):
        second = {"name": "b", "strategy": {"kind": "ps", "servers": 1, **({"message_latency": table} if second_table else {})}}
        return ddlsim.simulate_jobs({"iterations": 4, "workers": 2, "model": {"name": "lenet5"},
                                     "network": {"fidelity": "analytic"},
                                     "job": [{"name": "a", "strategy": {"kind": "ps", "servers": 1}}, second]})
    with_table, without = run(True), run(False)
    a1, b1 = with_table.jobs()
    a0, b0 = without.jobs()
    assert a1["iteration_times_s"] == a0["iteration_times_s"]
    assert b1["iteration_times_s"] != b0["iteration_times_s"]
    alone = ddlsim.simulate(model="lenet5", workers=2, iterations=4, network="analytic", strategy="ps",
                            message_latency=table)
    assert b1["iteration_times_s"] == pytest.approx(list(alone.iterations["time_s"]), abs=1e-12)
