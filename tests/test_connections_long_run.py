"""Concurrent connections per PS (Fig. 7b) of a long run in short windows (found by tools/fuzz_readers.py's
``simulate`` target: a server cost of 4294967296 us per worker made a 2-hour run, whose 1 ms windows, 1.9e9 of
them, were built as rows of 0 until memory ran out). Beyond MAX_CONNECTION_WINDOWS the table lists only the windows
with requests and counts the others; the headline's mean and the figure count them as 0. Oracle: the windows
counted by brute force from the log's request rows."""

import numpy as np
import pytest

import ddlsim
import ddlsim.analyze.analysis as analysis_module
from ddlsim.analyze import Analysis


def brute_force(log, window_ns: int):
    """Per server: {window: set of workers} from the request recv rows on the server, and the windows between its
    first and last request; the mean over those windows of the workers seen in each."""
    df = log.to_pandas()
    origin = int(df.start_ns.min())
    req = df[(df.kind == "recv") & df.op.str.endswith("_request") & (df.role == "server")]
    seen, windows = 0, 0
    best = 0
    for _, part in req.groupby("rank"):
        per: dict[int, set] = {}
        for end, peer in zip(part.end_ns, part.peer):
            per.setdefault((int(end) - origin) // window_ns, set()).add(int(peer))
        windows += max(per) - min(per) + 1
        seen += sum(len(v) for v in per.values())
        best = max(best, max(len(v) for v in per.values()))
    return seen / windows, best, windows


@pytest.fixture(scope="module")
def long_run():
    return ddlsim.simulate(model="lenet5", workers=3, iterations=2, strategy={
        "kind": "ps", "servers": 2, "placement": "split", "server_cost": {"a": "20us", "b": "600s"}}).events


def test_a_long_run_in_short_windows_is_counted_without_a_row_per_empty_window(long_run):
    mean, best, windows = brute_force(long_run, 1_000_000)
    assert windows > analysis_module.MAX_CONNECTION_WINDOWS  # hours of 1 ms windows: the case that ran out of memory
    analysis = Analysis(long_run)
    cc = analysis.concurrent_connections(1_000_000)
    assert len(cc) + cc.attrs["empty_windows"] == windows and (cc.connections > 0).all()
    assert "count 0 connections" in cc.attrs["note"] and "--t-window" in cc.attrs["note"]
    headline = Analysis(long_run).headline()["concurrent_connections"]
    assert headline["mean"] == pytest.approx(mean, rel=1e-12) and headline["max"] == best


def test_below_the_bound_the_table_is_the_same_either_way(long_run, monkeypatch):
    """At a window long enough for the full table, its rows of 0 are what the short form leaves out."""
    window = 10_000_000_000  # 10 s
    full = Analysis(long_run).concurrent_connections(window)
    assert full.attrs["empty_windows"] == 0 and (full.connections == 0).any()
    monkeypatch.setattr(analysis_module, "MAX_CONNECTION_WINDOWS", 1)
    short = Analysis(long_run).concurrent_connections(window)
    kept = full[full.requests > 0].reset_index(drop=True)
    assert short.reset_index(drop=True).equals(kept) and short.attrs["empty_windows"] == (full.requests == 0).sum()
    mean, best, _ = brute_force(long_run, window)
    assert Analysis(long_run).headline(t_window_ns=window)["concurrent_connections"]["mean"] == pytest.approx(mean)
    assert np.isclose(full.connections.mean(), mean)


def test_the_figure_counts_the_windows_left_out_as_zero(long_run):
    from ddlsim.analyze.figures import connections_figure

    fig = connections_figure(Analysis(long_run), 1_000_000)
    bars = fig.axes[1].patches
    shares = [b.get_height() for b in bars]
    assert shares[0] > 0.99 and sum(shares) == pytest.approx(1.0)  # nearly every 1 ms window of hours is empty
