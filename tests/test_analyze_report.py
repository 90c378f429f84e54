"""`ddlsim analyze` (CLI), the HTML report (escaping, self-contained,
rendered in headless Chromium) and the demo's report."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ddlsim
from ddlsim.analyze import Analysis
from ddlsim.cli.analyze_command import analyze_to_directory
from ddlsim.cli.app import app
from ddlsim.trace import event_log_from_rows, write_event_log

from test_analysis import hand_ps_rows

HOSTILE_NAME = '<script>alert("name")</script>'
HOSTILE_OP = "<img src=x onerror='alert(1)'>\"quoted\""
runner = CliRunner()


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    ps = ddlsim.simulate(model="resnet50", workers=4, strategy="ps", servers=2, iterations=2)
    ring = ddlsim.simulate(model="resnet50", workers=4, strategy="ring", iterations=2)
    (d / "ps").mkdir()
    (d / "ring").mkdir()
    write_event_log(ps.events, d / "ps" / "events.parquet")
    write_event_log(ring.events, d / "ring" / "events.parquet")
    rows = hand_ps_rows()
    for r in rows:
        if r["kind"] in ("send", "recv") and r["tensor"] == 0:
            r["name"] = HOSTILE_NAME
    last = max(r["end_ns"] for r in rows)
    rows.append(dict(id=len(rows), iteration=1, rank=0, role="worker", kind="compute", op=HOSTILE_OP, name=HOSTILE_NAME,
                     start_ns=last, end_ns=last + 50_000, deps=[len(rows) - 1]))
    write_event_log(event_log_from_rows(rows, metadata={"source": "test"}), d / "hostile.parquet")
    return d


def test_analyze_writes_tables_figures_and_report(logs, tmp_path):
    out = tmp_path / "analysis"
    result = runner.invoke(app, ["analyze", str(logs / "ps" / "events.parquet"), "--compare",
                                 str(logs / "ring" / "events.parquet"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"iterations.csv", "critical_path.csv", "sketchdlc_overheads.csv", "rpc_latency.csv", "hot_keys.csv",
            "offload_estimate.csv", "concurrent_connections.csv", "compare.csv", "report.html", "headline.json",
            "rpc_latency.png", "iterations.png", "compare.png"} <= names
    assert not [n for n in names if n.startswith(".ddlsim-staging")]
    assert "RPCs" in result.output and "vs ring/events.parquet" in result.output
    page = (out / "report.html").read_text()
    for section in ("Iterations and critical path", "SketchDLC overheads", "RPC latency dissection", "Collectives",
                    "Comparison"):
        assert section in page


def test_analyze_json_prints_headline_numbers(logs):
    result = runner.invoke(app, ["analyze", str(logs / "ring" / "events.parquet"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    h = data["headline"]
    assert h["workers"] == 4 and h["iterations"] == 2 and h["collectives"]["instances"] == 2 * 161
    assert any("parameter-server" in n for n in h["notes"])


def test_analyze_report_only_and_options(logs, tmp_path):
    report = tmp_path / "sub" / "r.html"
    result = runner.invoke(app, ["analyze", str(logs / "ps" / "events.parquet"), "--report", str(report), "--t-window",
                                 "100us", "--switch-memory", "1MB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["report"] == str(report) and report.exists()
    assert data["headline"]["concurrent_connections"]["t_window_ns"] == 100_000
    assert data["headline"]["offload"]["switch_memory_bytes"] == 1_000_000
    assert [p.name for p in report.parent.iterdir()] == ["r.html"]


def test_analyze_errors_are_messages(tmp_path):
    result = runner.invoke(app, ["analyze", str(tmp_path / "missing.parquet")])
    assert result.exit_code != 0
    result = runner.invoke(app, ["analyze", str(tmp_path / "x.parquet"), "--t-window", "5"])
    assert result.exit_code != 0


def test_hostile_names_are_escaped_in_the_report(logs, tmp_path):
    a = Analysis(logs / "hostile.parquet")
    analyze_to_directory(a, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<script" not in page.lower()
    assert "onerror='alert" not in page and "<img src=x" not in page
    assert html.escape(HOSTILE_NAME) in page  # shown, escaped
    assert html.escape(HOSTILE_OP) in page
    # the CSV keeps the names as they are
    import pandas as pd

    assert HOSTILE_NAME in set(pd.read_csv(tmp_path / "message_sizes_per_key.csv")["name"])


def test_report_is_self_contained(logs, tmp_path):
    analyze_to_directory(Analysis(logs / "ps" / "events.parquet"), tmp_path, write_tables=False)
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4
    assert not re.search(r"(src|href)=['\"](https?:|//)", page)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _render(browser: str, page: Path, shot: Path, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", "--window-size=1280,4000",
         "--virtual-time-budget=3000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
            or "Refused to" in line or "Failed to load resource" in line]


def test_report_renders_in_headless_chromium(logs, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium found (Debian: apt-get install chromium); the report is not checked in a browser")
    a = Analysis(logs / "ps" / "events.parquet")
    analyze_to_directory(a, tmp_path, compare=Analysis(logs / "ring" / "events.parquet"), write_tables=False)
    # the console check itself works: a page with an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('boom'); undefinedCall();</script></body></html>")
    caught = _render(browser, bad, tmp_path / "bad.png", tmp_path / "profile")
    assert _console_errors(caught.stderr), caught.stderr[-2000:]
    shot = Path(os.environ.get("DDLSIM_SCREENSHOT_DIR", tmp_path)) / "report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    done = _render(browser, tmp_path / "report.html", shot, tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _console_errors(done.stderr), _console_errors(done.stderr)
    assert shot.exists() and shot.stat().st_size > 10_000


def test_demo_ends_with_the_analysis_report(ddlsim_once):
    # the README's demo command, run once per session (test_readme runs the same one)
    run, cwd = ddlsim_once("demo", "--out", "ddlsim-out")
    assert run.returncode == 0, run.stderr[-2000:]
    page = (cwd / "ddlsim-out" / "report.html").read_text()
    assert "RPC latency dissection" in page and "Comparison" in page and "data:image/png;base64," in page
    assert (cwd / "ddlsim-out" / "ring.report.html").exists()
    assert "ddlsim-out/report.html" in run.stdout


def test_analyze_prints_hostile_names_verbatim(logs):
    result = runner.invoke(app, ["analyze", str(logs / "hostile.parquet")])
    assert result.exit_code == 0, result.output
    assert "SketchDLC overheads" in result.output
    assert HOSTILE_OP in result.output  # the critical path's last row, shown as it is (a terminal runs no HTML)


def test_analyze_out_and_report_elsewhere(logs, tmp_path):
    report = tmp_path / "elsewhere" / "run.html"
    result = runner.invoke(app, ["analyze", str(logs / "ring" / "events.parquet"), "--out", str(tmp_path / "out"),
                                 "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert report.read_text() == (tmp_path / "out" / "report.html").read_text()
    assert [p.name for p in report.parent.iterdir()] == ["run.html"]
