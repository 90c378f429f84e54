"""ddlsim validate: replay against capture over a grid (ddlsim.validation)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import forked_cli
import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.analyze.breakdown import iteration_arrays, iteration_mean
from ddlsim.cli.app import app
from ddlsim.trace import read_event_log

from test_replay_overheads import synthetic_capture


def cli(*args):
    """`python -m ddlsim ARGS` in a child process (the real exit status and stderr)."""
    python = str(Path(ddlsim.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([python, os.environ.get("PYTHONPATH", "")])}
    return forked_cli.run(list(args), env=env)


def rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def quick(snippet_once, tmp_path_factory):
    """docs/validation.md's `ddlsim.validate("quick-py", quick=True)` (two real captures), run once per session and
    shared with test_doc_snippets; its directory, and what `ddlsim validate --captures` prints for its captures (the
    command's tables, without capturing again)."""
    pytest.importorskip("torch", reason="ddlsim validate --quick captures real jobs (pip install ddlsim[capture])")
    from script_helpers import ROOT, python_blocks

    run, cwd = snippet_once(python_blocks(ROOT / "docs" / "validation.md")[0])
    assert run.returncode == 0, run.stderr[-3000:]
    result = CliRunner().invoke(app, ["validate", "--captures", str(cwd / "quick-py" / "captures"), "--out",
                                      str(tmp_path_factory.mktemp("validate") / "again")])
    assert result.exit_code == 0, result.output
    return cwd / "quick-py", result.output


def test_quick_writes_the_report_and_its_numbers_are_replay_and_iteration_mean(quick):
    out, text = quick
    assert sorted(p.name for p in out.iterdir()) == ["captures", "cases.csv", "errors.png", "index.html", "iterations.csv",
                                                     "operations.csv", "runs.csv", "validation.png"]
    operations = {(o["job"], o["operation"]) for o in rows(out / "operations.csv")}
    assert {("ddp", "worker compute/forward"), ("ddp", "worker collective/allreduce"), ("ps", "worker send/push_request"),
            ("ps", "server compute/update")} <= operations
    assert "per operation (self-prediction)" in text
    cases = rows(out / "cases.csv")
    assert [(c["job"], c["model"], c["kind"], c["captured_link"]) for c in cases] == [
        ("ddp", "lenet5", "self", "unshaped"), ("ps", "lenet5", "self", "unshaped")]
    assert "measured ms" in text and "replayed ms" in text
    for run in rows(out / "runs.csv"):
        events = str(out.parent / run["capture"])  # as named where it ran
        log = read_event_log(events)
        measured = iteration_mean(iteration_arrays(log), log.metadata)["mean_s"] * 1e3
        assert float(run["measured_ms"]) == pytest.approx(measured, rel=1e-5)
        replayed = CliRunner().invoke(app, ["replay", events, "--json"])
        assert replayed.exit_code == 0, replayed.output
        assert float(run["predicted_ms"]) == pytest.approx(json.loads(replayed.output)["iteration_time_s"] * 1e3, rel=1e-5)
    html = (out / "index.html").read_text()
    assert "validation.png" in html and "<table>" in html
    assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"
    iterations = rows(out / "iterations.csv")
    assert {r["counted"] for r in iterations} == {"True", "False"}  # the warm-up iteration is listed, not counted


def test_quick_records_each_captures_processes_and_cores_and_flags_shared_cores(quick):
    """Each real capture records how many processes it ran and how many cores they could use (this process's
    affinity, which they inherit); a case whose processes outnumber the cores (PS: 2 workers and a server, 3 on a
    2-core machine) is flagged in the report and in its replay's notes, one that fits is not."""
    out, text = quick
    cores = len(os.sched_getaffinity(0))
    cases = rows(out / "cases.csv")
    assert {(c["job"], c["processes"], c["host_cores"]) for c in cases} == {("ddp", "2", str(cores)),
                                                                           ("ps", "3", str(cores))}
    flagged = [line.split(" ran ")[0] for line in text.splitlines() if line.startswith("shared cores:")]
    assert flagged == [f"shared cores: {job} lenet5" for job, n in (("ddp", 2), ("ps", 3)) if n > cores]
    for run in rows(out / "runs.csv"):
        notes = ddlsim.replay(out.parent / run["capture"]).notes
        processes = 2 if run["job"] == "ddp" else 3
        assert any("processes on" in n and "took turns" in n for n in notes) == (processes > cores)


def test_existing_captures_give_byte_identical_reports(quick, tmp_path):
    out, _ = quick
    for name in ("a", "b"):
        result = CliRunner().invoke(app, ["validate", "--captures", str(out / "captures"), "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    for name in ("cases.csv", "runs.csv", "iterations.csv", "operations.csv", "index.html"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert not (tmp_path / "a" / "captures").exists()  # it took the captures, it made none


def validated_grid(tmp_path, links):
    """Hand-built DDP captures (2 repeats per link, "unshaped" or a rate) under tmp_path/captures, validated into
    tmp_path/out: ({(link, repeat): path}, {(kind, captured link, predicted link): cases.csv row})."""
    captures = tmp_path / "captures"
    paths = {}
    for link in links:
        for repeat in range(2):
            (captures / f"{link}-{repeat}").mkdir(parents=True)
            paths[(link, repeat)], *_ = synthetic_capture(captures / f"{link}-{repeat}" / "events.parquet", workers=2,
                                                          bandwidth=None if link == "unshaped" else link,
                                                          rng_seed=repeat)
    result = CliRunner().invoke(app, ["validate", "--captures", str(captures), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return paths, {(c["kind"], c["captured_link"], c["predicted_link"]): c for c in rows(tmp_path / "out" / "cases.csv")}


def test_cross_prediction_is_the_replay_at_the_other_links_rate(tmp_path):
    """Hand-built shaped captures at 1 Gbit/s and 100 Mbit/s (2 repeats each): the cross row 1000Mbps -> 100Mbps
    predicts with `ddlsim replay CAPTURE --bandwidth 100Mbps` and compares with the 100 Mbit/s captures' measured mean."""
    paths, cases = validated_grid(tmp_path, ("1000Mbps", "100Mbps"))
    assert sorted(cases) == [("cross", "1000Mbps", "100Mbps"), ("cross", "100Mbps", "1000Mbps"),
                             ("self", "1000Mbps", "1000Mbps"), ("self", "100Mbps", "100Mbps")]
    cross = cases[("cross", "1000Mbps", "100Mbps")]
    predicted = [ddlsim.replay(paths[("1000Mbps", r)], bandwidth="100Mbps").iteration_time_s * 1e3 for r in range(2)]
    measured = []
    for r in range(2):
        log = read_event_log(paths[("100Mbps", r)])
        measured.append(iteration_mean(iteration_arrays(log), log.metadata)["mean_s"] * 1e3)
    assert float(cross["predicted_ms"]) == pytest.approx(sum(predicted) / 2, rel=1e-5)
    assert float(cross["measured_ms"]) == pytest.approx(sum(measured) / 2, rel=1e-5)
    error = (sum(predicted) - sum(measured)) / sum(measured) * 100
    assert float(cross["error_pct"]) == pytest.approx(error, rel=1e-4, abs=1e-6)
    spread = abs(measured[0] - measured[1]) / (sum(measured) / 2) * 100
    assert float(cross["measured_spread_pct"]) == pytest.approx(spread, rel=1e-4, abs=1e-6)
    assert cross["within_goal"] == str(abs(error) <= 10.0)
    assert math.isclose(float(cases[("self", "100Mbps", "100Mbps")]["predicted_ms"]),
                        sum(ddlsim.replay(paths[("100Mbps", r)]).iteration_time_s for r in range(2)) / 2 * 1e3, rel_tol=1e-5)


def test_an_unshaped_capture_is_cross_predicted_on_the_shaped_links_framing(tmp_path):
    """The cross row unshaped -> 100Mbps compares with captures made on a tbf-shaped veth, so the unshaped captures
    are replayed on that link (`--bandwidth 100Mbps --wire tbf`: its headers and token bucket), as a shaped capture
    is by default; before, they were replayed on a bare 100 Mbit/s link (no headers), which over-predicted."""
    paths, cases = validated_grid(tmp_path, ("unshaped", "100Mbps"))
    cross = cases[("cross", "unshaped", "100Mbps")]
    on_tbf = [ddlsim.replay(paths[("unshaped", r)], bandwidth="100Mbps", wire="tbf").iteration_time_s * 1e3
              for r in range(2)]
    bare = [ddlsim.replay(paths[("unshaped", r)], bandwidth="100Mbps").iteration_time_s * 1e3 for r in range(2)]
    assert float(cross["predicted_ms"]) == pytest.approx(sum(on_tbf) / 2, rel=1e-5)
    assert sum(on_tbf) != pytest.approx(sum(bare), rel=1e-3)  # the framing moves the prediction
    # a shaped capture's cross-prediction is the same with the framing named or left to its default
    shaped = ddlsim.replay(paths[("100Mbps", 0)], bandwidth="1Gbps")
    assert ddlsim.replay(paths[("100Mbps", 0)], bandwidth="1Gbps", wire="tbf").iteration_time_s == shaped.iteration_time_s


@pytest.mark.parametrize("args, message", [
    (["--captures", "{tmp}/nowhere"], "--captures {tmp}/nowhere: not a directory"),
    (["--captures", "{tmp}/empty"], "--captures {tmp}/empty: no DDP or PS captures found"),
    (["--captures", "{tmp}/empty", "--jobs", "allreduce"], "--jobs: unknown job 'allreduce'; give ddp and/or ps"),
    (["--models", "vgg", "--links", "unshaped"], "--models: unknown model 'vgg'; give any of lenet5, resnet18"),
    (["--captures", "{tmp}/empty", "--links", "fast"], "link 'fast':"),
    (["--captures", "{tmp}/empty", "--repeats", "0"], "repeats (--repeats) must be a whole number from 1 to 10,000, got 0"),
    (["--quick", "--workers", "0"], "workers (--workers) must be a whole number from 1 to 4,096, got 0"),  # not taken
    # for "none given" (--quick's 2)
    (["--quick", "--iterations", "1"], "iterations (--iterations; the first is a warm-up) must be a whole number from 2"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = cli("validate", "--out", str(tmp_path / "out"), *args)
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert message.replace("{tmp}", str(tmp_path)) in text, text
    assert "Traceback" not in result.stderr and text.startswith("error:")
    assert not (tmp_path / "out").exists()


def test_a_non_empty_out_is_refused_and_left_alone(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    result = cli("validate", "--quick", "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "exists and is not empty" in " ".join(result.stderr.split())
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]
    (tmp_path / "file").write_text("x")
    result = cli("validate", "--quick", "--out", str(tmp_path / "file"))
    assert result.returncode == 2 and "is not a directory" in " ".join(result.stderr.split())
    assert (tmp_path / "file").read_text() == "x"


def test_ctrl_c_stops_validate_and_leaves_no_report(tmp_path):
    """SIGINT while the first capture runs: exit 130, no report file and no staging directory; the capture being
    made removes itself (ddlsim capture's own rule), so nothing half-made is left under --out."""
    import signal
    import time

    pytest.importorskip("torch", reason="ddlsim validate --quick captures real jobs (pip install ddlsim[capture])")
    python = str(Path(ddlsim.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([python, os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "ddlsim", "validate", "--quick", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        end = time.monotonic() + 120
        while not list((out / "captures").glob("*/*")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole foreground group
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left in ([], ["captures"]), left
    assert not [p for p in out.rglob("events.parquet")] if out.exists() else True


def test_operation_means_are_per_rank_and_iteration(tmp_path):
    """Oracle: the hand-built capture's forward rows sum to the seeded forward times in each iteration and rank; the
    mean over the counted iterations (1-3) of one worker is that sum."""
    from ddlsim.validation import operation_means

    events, *_ = synthetic_capture(tmp_path / "events.parquet", workers=2)
    log = read_event_log(events)
    df = log.to_pandas()
    forward = df[(df.op == "forward") & (df.iteration == 1) & (df["rank"] == 0)]
    means = operation_means(log, [1, 2, 3])
    assert means["worker compute/forward"] == pytest.approx((forward.end_ns - forward.start_ns).sum() / 1e9)
    assert "worker marker/iteration" not in means


def test_only_measure_idle_curve_has_the_ddp_captures_measure_their_curve(tmp_path, monkeypatch):
    """`validate --measure-idle-curve` passes `--idle-curve` to the DDP captures only (PS captures have no such
    option); without it no capture measures a curve (off by default: it is noisier than its effect under load)."""
    import ddlsim.validation as v

    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(v.subprocess, "run", fake_run)
    grid = dict(jobs=["ddp", "ps"], models=["lenet5"], links=["unshaped"], repeats=1, iterations=3, workers=2,
                timeout_s=60.0, progress=lambda text: None)
    v.capture_grid(tmp_path / "a", **grid)
    v.capture_grid(tmp_path / "b", measure_idle_curve=True, **grid)
    flags = [(cmd[cmd.index("capture") + 1], "--idle-curve" in cmd) for cmd in seen]
    assert flags == [("ddp", False), ("ps", False), ("ddp", True), ("ps", False)]


def test_four_workers_only_where_each_process_has_a_core_and_one_is_spare():
    """The issue's grid: 2 workers, 4 where the machine has a core per rank and one to spare. A PS capture of 4
    workers runs 5 processes (its server too), so 4 workers need 6 cores; 5 leave no core to spare."""
    from ddlsim.validation import default_workers

    assert [default_workers(cores) for cores in (1, 2, 4, 5, 6, 16)] == [2, 2, 2, 2, 4, 4]


def test_the_report_counts_the_cases_within_their_goal_per_job_and_kind(quick):
    """Oracle: cases.csv's own within_goal and goal_above_spread columns, counted here. The printed table and the
    HTML page end with the same line; hand-made cases give the counts worked out by hand."""
    from ddlsim.validation import goal_summary

    out, text = quick
    cases = rows(out / "cases.csv")
    expected = "within goal: " + ", ".join(
        f"{job} self {sum(c['within_goal'] == 'True' for c in cases if c['job'] == job)} of 1 (goal above the spread in "
        f"{sum(c['goal_above_spread'] == 'True' for c in cases if c['job'] == job)})" for job in ("ddp", "ps"))
    assert expected in text.splitlines()
    assert f"<p>{expected}</p>" in (out / "index.html").read_text()

    def case(job, kind, within, above):
        return {"job": job, "kind": kind, "within_goal": within, "goal_above_spread": above}

    made = [case("ps", "cross", False, True), case("ps", "self", True, True), case("ps", "cross", True, False),
            case("ddp", "self", True, False), case("ps", "cross", True, True)]
    assert goal_summary(made) == ("within goal: ps cross 2 of 3 (goal above the spread in 2), ps self 1 of 1 (goal "
                                  "above the spread in 1), ddp self 1 of 1 (goal above the spread in 0)")
    assert goal_summary([]) == ""


def _anova_f(groups):
    """One-way ANOVA's F, from the textbook sums of squares: (SSB / (k - 1)) / (SSW / (N - k))."""
    k, n_total = len(groups), sum(len(g) for g in groups)
    grand = sum(sum(g) for g in groups) / n_total
    means = [sum(g) / len(g) for g in groups]
    ssb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means))
    ssw = sum((x - m) ** 2 for g, m in zip(groups, means) for x in g)
    return (ssb / (k - 1)) / (ssw / (n_total - k))


def test_capture_noise_is_the_square_root_of_one_way_anovas_f_for_captures_of_equal_length():
    """Seeded captures of equal length, some with a state of their own (an offset per capture): ratio² equals the
    textbook F, and sem is one capture's standard error, the root of the mean within-capture variance over n."""
    import numpy as np

    from ddlsim.validation import capture_noise

    rng = np.random.default_rng(20)
    for trial in range(200):
        k, n = int(rng.integers(2, 6)), int(rng.integers(2, 30))
        offsets = rng.normal(0, rng.choice([0.0, 0.5, 5.0]), k)
        groups = [list(rng.normal(10 + o, rng.uniform(0.1, 3), n)) for o in offsets]
        got = capture_noise(groups)
        assert got["ratio"] ** 2 == pytest.approx(_anova_f(groups), rel=1e-9)
        pooled = sum(sum((x - sum(g) / n) ** 2 for x in g) / (n - 1) for g in groups) / k
        assert got["sem"] == pytest.approx(math.sqrt(pooled / n), rel=1e-9)


def test_captures_alike_but_for_their_iterations_noise_are_rarely_called_apart():
    """The threshold's claim: captures drawn alike (no state of their own) reach BETWEEN_CAPTURES_RATIO about as
    rarely as one-way ANOVA's 5 % point (3 captures: 5.7 % with 4 iterations each, 2.3 % with 20); captures whose
    means are moved 4 standard errors apart reach it almost always."""
    import numpy as np

    from ddlsim.validation import BETWEEN_CAPTURES_RATIO, capture_noise

    rng = np.random.default_rng(21)
    for n, low, high in ((4, 0.03, 0.09), (20, 0.01, 0.04)):
        alike = [capture_noise([list(rng.normal(5, 1, n)) for _ in range(3)])["ratio"] for _ in range(4000)]
        share = sum(r >= BETWEEN_CAPTURES_RATIO for r in alike) / len(alike)
        assert low <= share <= high, (n, share)
        apart = [capture_noise([list(rng.normal(5 + 4 * j / math.sqrt(n), 1, n)) for j in range(3)])["ratio"]
                 for _ in range(1000)]
        assert sum(r >= BETWEEN_CAPTURES_RATIO for r in apart) / len(apart) > 0.9


def test_capture_noise_cannot_tell_from_one_capture_or_one_iteration():
    from ddlsim.validation import capture_noise

    assert all(math.isnan(v) for v in capture_noise([[1.0, 2.0, 3.0]]).values())
    assert all(math.isnan(v) for v in capture_noise([[1.0, 2.0], [3.0]]).values())
    assert capture_noise([[2.0, 2.0], [3.0, 3.0]]) == {"sem": 0.0, "ratio": math.inf}
    assert math.isnan(capture_noise([[2.0, 2.0], [2.0, 2.0]])["ratio"])


def test_a_spread_above_the_goal_is_told_within_or_between_the_captures(tmp_path):
    """Three hand-built captures of one link, alike but for one slow step in iteration 2 of 0, 3 and 6 ms: cases.csv
    carries each capture's mean and the F of their counted iterations (worked out here from the captures' own
    iteration times), and the printed report a line for the set, its spread above the 5 % goal."""
    captures = tmp_path / "captures"
    paths = []
    for repeat, slow in enumerate((0, 3_000_000, 6_000_000)):
        (captures / f"unshaped-{repeat}").mkdir(parents=True)
        path, *_ = synthetic_capture(captures / f"unshaped-{repeat}" / "events.parquet", workers=2, slow_ns=slow)
        paths.append(path)
    result = CliRunner().invoke(app, ["validate", "--captures", str(captures), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    (case,) = rows(tmp_path / "out" / "cases.csv")
    groups = []
    for path in paths:
        log = read_event_log(path)
        arrays = iteration_arrays(log)
        mean = iteration_mean(arrays, log.metadata)
        groups.append([t * 1e3 for t, counted in zip(arrays["time_s"], mean["mask"]) if counted])
    assert [len(g) for g in groups] == [3, 3, 3]
    assert float(case["between_capture_ratio"]) ** 2 == pytest.approx(_anova_f(groups), rel=1e-6)
    assert case["capture_means_ms"] == " ".join(f"{sum(g) / 3:.2f}" for g in groups)
    assert case["goal_above_spread"] == "False"
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("spread above a goal: "))
    assert lines[head + 1].split() == ["ddp", "lenet5", "unshaped", "spread", f"{float(case['measured_spread_pct']):.1f}",
                                       "%:", "captures", "of", *case["capture_means_ms"].split(), "ms,", "each",
                                       f"±{float(case['capture_sem_ms']):.2f}", "ms,",
                                       f"{float(case['between_capture_ratio']):.1f}", "apart"]
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8").replace("&#x27;", "'")
    assert f"<p>{lines[head]}</p>" in page and f"<p>{lines[head + 1]}</p>" in page


def test_no_spread_line_where_every_goal_is_above_its_spread_or_a_case_has_one_capture(quick):
    out, text = quick
    assert not any(line.startswith("spread above a goal") for line in text.splitlines())
    for case in rows(out / "cases.csv"):  # one capture per case: nothing to tell
        assert math.isnan(float(case["between_capture_ratio"])) and math.isnan(float(case["capture_sem_ms"]))


def test_each_case_carries_its_captures_and_replays_lowest_and_highest(tmp_path):
    """Oracle: runs.csv, one row per capture and prediction. A case's measured_min/max_ms are the lowest and highest
    of its measured captures' means (the self rows of the link it is measured at), predicted_min/max_ms of its own
    predictions; the plots draw these bars."""
    _, cases = validated_grid(tmp_path, ("1000Mbps", "100Mbps"))
    runs = rows(tmp_path / "out" / "runs.csv")
    for (kind, captured, predicted), case in cases.items():
        measured = [float(r["measured_ms"]) for r in runs if r["kind"] == "self" and r["captured_link"] == predicted]
        replays = [float(r["predicted_ms"]) for r in runs
                   if r["kind"] == kind and r["captured_link"] == captured and r["predicted_link"] == predicted]
        assert len(measured) == len(replays) == 2
        assert float(case["measured_min_ms"]) == pytest.approx(min(measured), rel=1e-9)
        assert float(case["measured_max_ms"]) == pytest.approx(max(measured), rel=1e-9)
        assert float(case["predicted_min_ms"]) == pytest.approx(min(replays), rel=1e-9)
        assert float(case["predicted_max_ms"]) == pytest.approx(max(replays), rel=1e-9)
        assert float(case["measured_min_ms"]) <= float(case["measured_ms"]) <= float(case["measured_max_ms"])


@pytest.mark.parametrize("kwargs, message", [
    ({"repeats": "3"}, "repeats (--repeats) must be a whole number from 1 to 10,000, got '3'"),
    ({"iterations": 2.5}, "iterations (--iterations; the first is a warm-up) must be a whole number from 2 to 1,000,000, got 2.5"),
    ({"workers": True}, "workers (--workers) must be a whole number from 1 to 4,096, got True"),
    ({"timeout_s": -1}, "timeout_s must be a finite number in (0, 1e+09], got -1"),
    ({"timeout_s": float("nan")}, "timeout_s must be a finite number in (0, 1e+09], got nan"),
    ({"jobs": "ddp,allreduce", "links": "unshaped"}, "--jobs: unknown job 'allreduce'; give ddp and/or ps"),
    ({"models": "vgg", "links": "unshaped"}, "--models: unknown model 'vgg'"),
])
def test_the_python_api_refuses_bad_values_before_anything_runs(tmp_path, kwargs, message):
    """Before: repeats="3" was a TypeError from a comparison, iterations=2.5 went to every capture's command line,
    jobs="ddp" was read as the jobs 'd', 'd', 'p', and timeout_s=-1 started the first capture and failed there,
    leaving the output directory behind."""
    with pytest.raises(ddlsim.DdlsimError) as info:
        ddlsim.validate(tmp_path / "out", **kwargs)
    assert message in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_python_api_takes_a_comma_separated_string_as_the_flags_do(quick, tmp_path):
    out, _ = quick
    tables = ddlsim.validate(tmp_path / "again", captures=out / "captures", jobs="ps", models="lenet5", links="unshaped")
    assert {c["job"] for c in tables["cases"]} == {"ps"}
