"""One iteration mean for every output: `capture`'s summary, `analyze` and `replay` average the same iterations
(:func:`ddlsim.analyze.breakdown.iteration_mean`) and say which."""

from __future__ import annotations

import pytest

from ddlsim.analyze import Analysis
from ddlsim.cli.analyze_command import print_headline
from ddlsim.cli.capture_ddp_command import _summary
from ddlsim.trace import event_log_from_rows

MS = 1_000_000
# iteration 0 is a slow warm-up; the steady iterations take 10, 12, 14 and 16 ms: their mean is 13 ms, all five 30.4 ms
DURATIONS_MS = [100, 10, 12, 14, 16]


def captured_log(source: str = "capture"):
    """Two worker ranks; each iteration a forward and a backward on each rank, then a marker row (as a capture writes
    them); iteration i's window ends with its last row."""
    rows, t = [], 0
    for iteration, ms in enumerate(DURATIONS_MS):
        end = t + ms * MS
        for rank in (0, 1):
            common = dict(iteration=iteration, rank=rank, role="worker")
            rows.append(dict(id=len(rows), kind="compute", op="forward", name="fc", start_ns=t, end_ns=t + ms * MS // 2, **common))
            rows.append(dict(id=len(rows), kind="compute", op="backward", name="fc", start_ns=t + ms * MS // 2, end_ns=end,
                             deps=[len(rows) - 1], **common))
            rows.append(dict(id=len(rows), kind="marker", op="iteration", name=f"iteration {iteration}", start_ns=t,
                             end_ns=end, **common))
        t = end
    meta = {"source": source, "ranks": {"0": {}, "1": {}}, "buckets": [{"bucket": 0, "group": 0, "tensors": [0], "bytes": 4096}]}
    return event_log_from_rows(rows, metadata=meta)


def test_analyze_leaves_out_a_measured_runs_warm_up_and_says_so():
    h = Analysis(captured_log()).headline()
    assert h["iteration_time_s"] == pytest.approx(0.013)  # (10 + 12 + 14 + 16) / 4 ms, not 30.4 ms
    assert h["iteration_mean"] == "mean of iterations 1-4, warm-up iteration 0 excluded"
    assert h["iterations_averaged"] == [1, 2, 3, 4]
    assert h["compute_s"] == pytest.approx(0.013)  # the breakdown averages the same iterations


def test_a_simulated_log_has_no_warm_up_to_leave_out():
    h = Analysis(captured_log(source="simulate")).headline()
    assert h["iteration_time_s"] == pytest.approx(0.0304)
    assert h["iteration_mean"] == "mean of iterations 0-4, no warm-up excluded"


def test_capture_and_analyze_print_the_same_mean_with_its_definition(capsys):
    log = captured_log()
    _summary(log, "run/events.parquet")
    captured = capsys.readouterr().out
    print_headline(Analysis(log).headline(), _console())
    analyzed = capsys.readouterr().out
    assert "iteration time: 13.0 ms (mean of iterations 1-4, warm-up iteration 0 excluded; warm-up iteration 0: 100.0 ms)" in captured
    assert "iteration 13.000 ms" in analyzed and "(mean of iterations 1-4, warm-up iteration 0 excluded)" in analyzed


def _console():
    from rich.console import Console

    return Console(width=400)


def test_compare_averages_the_iterations_the_headline_averages():
    from ddlsim.analyze.analysis import Analysis as A

    captured, simulated = A(captured_log(), "cap"), A(captured_log(source="simulate"), "sim")
    c = captured.compare(simulated)
    time = c[(c.scope == "breakdown") & (c.item == "time")].iloc[0]
    assert (time["a_s"], time["b_s"]) == pytest.approx((0.013, 0.0304))
    assert time["a_s"] == captured.headline()["iteration_time_s"] and time["b_s"] == simulated.headline()["iteration_time_s"]
